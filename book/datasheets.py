"""Datasheet peaks of the GPUs the book has numbers for. These are vendor figures, not measurements:
pages label them as such and print the source beside them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Datasheet:
    model: str
    hbm_tbps: float  # memory bandwidth, TB/s (10^12 bytes per second)
    dense_fp16_tflops: float  # tensor-core fp16/bf16, dense (no sparsity)
    source: str


H100_SXM = Datasheet("H100 SXM5 80GB", 3.35, 989.0, "NVIDIA H100 Tensor Core GPU datasheet")
H200_SXM = Datasheet("H200 SXM 141GB", 4.8, 989.0, "NVIDIA H200 Tensor Core GPU datasheet")
A100_SXM = Datasheet("A100 SXM 80GB", 2.0, 312.0, "NVIDIA A100 Tensor Core GPU datasheet")


def for_gpu(gpu_name: str) -> Datasheet | None:
    """The datasheet of a GPU as torch names it ('NVIDIA H100 80GB HBM3'), or None if unknown."""
    name = gpu_name.upper()
    if "H200" in name:
        return H200_SXM
    if "H100" in name and ("HBM3" in name or "SXM" in name):
        return H100_SXM
    if "A100" in name and "80GB" in name:
        return A100_SXM
    return None
