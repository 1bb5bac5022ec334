"""Datasheet peaks of the GPUs the book has numbers for. These are vendor figures, not measurements:
pages label them as such and print the source beside them.

One product name can cover cards with different memory and SM counts (the H100 SXM5 and the H100 PCIe,
the A100 with 40 or 80 GB, SXM or PCIe), so `for_gpu` matches the form factor too, and gives None for a
card it cannot place rather than the figures of a faster one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Datasheet:
    model: str
    sms: int  # streaming multiprocessors
    hbm_tbps: float  # memory bandwidth, TB/s (10^12 bytes per second)
    dense_fp16_tflops: float  # tensor-core fp16/bf16, dense (no sparsity)
    source: str


H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet"
A100_SOURCE = "NVIDIA A100 Tensor Core GPU datasheet"
H100_SXM = Datasheet("H100 SXM5 80GB", 132, 3.35, 989.0, H100_SOURCE)
H100_PCIE = Datasheet("H100 PCIe 80GB", 114, 2.0, 756.0, H100_SOURCE)
# The H200 datasheet prints 1,979 TFLOP/s of fp16 with sparsity; dense is half, as on the H100 (the same chip).
H200_SXM = Datasheet("H200 SXM 141GB", 132, 4.8, 989.0,
                     "NVIDIA H200 Tensor Core GPU datasheet, fp16 halved from its 1,979 TFLOP/s with sparsity")
A100_SXM_80GB = Datasheet("A100 SXM 80GB", 108, 2.039, 312.0, A100_SOURCE)
A100_PCIE_80GB = Datasheet("A100 PCIe 80GB", 108, 1.935, 312.0, A100_SOURCE)
A100_40GB = Datasheet("A100 40GB (SXM or PCIe)", 108, 1.555, 312.0, A100_SOURCE)


def for_gpu(gpu_name: str) -> Datasheet | None:
    """The datasheet of a GPU as torch names it ('NVIDIA H100 80GB HBM3'), or None if unknown.

    torch's names: 'NVIDIA H100 80GB HBM3' (SXM5), 'NVIDIA H100 PCIe', 'NVIDIA A100-SXM4-80GB',
    'NVIDIA A100 80GB PCIe', 'NVIDIA A100-SXM4-40GB', 'NVIDIA A100-PCIE-40GB', 'NVIDIA H200'.
    """
    name = gpu_name.upper()
    words = name.replace("-", " ").split()
    pcie = "PCIE" in words
    if "H200" in words:
        return H200_SXM
    if "H100" in words:
        if pcie:
            return H100_PCIE
        if "HBM3" in words or any(word.startswith("SXM") for word in words):
            return H100_SXM
        return None  # H100 NVL and other forms have other figures
    if "A100" in words:
        if "40GB" in words:
            return A100_40GB
        if "80GB" in words:
            if pcie:
                return A100_PCIE_80GB
            if any(word.startswith("SXM") for word in words):
                return A100_SXM_80GB
    return None
