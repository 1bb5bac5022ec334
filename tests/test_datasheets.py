"""The datasheet table: each GPU name torch reports maps to its own card, never to a faster one."""

import pytest

from book.datasheets import A100_40GB, A100_PCIE_80GB, A100_SXM_80GB, H100_PCIE, H100_SXM, H200_SXM, for_gpu


@pytest.mark.parametrize(("name", "sheet"), [
    ("NVIDIA H100 80GB HBM3", H100_SXM),
    ("NVIDIA H100 SXM5 80GB", H100_SXM),
    ("NVIDIA H100 PCIe", H100_PCIE),
    ("NVIDIA H200", H200_SXM),
    ("NVIDIA A100-SXM4-80GB", A100_SXM_80GB),
    ("NVIDIA A100 80GB PCIe", A100_PCIE_80GB),
    ("NVIDIA A100-SXM4-40GB", A100_40GB),
    ("NVIDIA A100-PCIE-40GB", A100_40GB),
])
def test_known_names_map_to_their_own_card(name, sheet):
    assert for_gpu(name) is sheet


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA A100 80GB", "NVIDIA L4",
                                  "Tesla V100-SXM2-16GB"])
def test_cards_it_cannot_place_get_no_datasheet(name):
    assert for_gpu(name) is None


def test_the_datasheet_figures():
    # FACTS: H100 SXM5 3.35 TB/s and 132 SMs; H100 PCIe 2.0 TB/s and 114 SMs; A100 80GB 2,039 GB/s (SXM) and
    # 1,935 GB/s (PCIe); A100 40GB 1,555 GB/s.
    assert (H100_SXM.hbm_tbps, H100_SXM.sms) == (3.35, 132)
    assert (H100_PCIE.hbm_tbps, H100_PCIE.sms) == (2.0, 114)
    assert (A100_SXM_80GB.hbm_tbps, A100_PCIE_80GB.hbm_tbps, A100_40GB.hbm_tbps) == (2.039, 1.935, 1.555)
    assert H100_PCIE.dense_fp16_tflops < H100_SXM.dense_fp16_tflops
