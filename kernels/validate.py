"""Input checks shared by the kernel wrappers. Each raises an error that names the argument and the problem."""

from __future__ import annotations

import math

import torch

from kernels import interpreting


def check_device(name: str, tensor: torch.Tensor) -> None:
    if tensor.is_cuda:
        return
    if tensor.device.type == "cpu" and interpreting():
        return
    if tensor.device.type == "cpu":
        raise ValueError(
            f"{name} is on the CPU; Triton kernels need a CUDA tensor. "
            "Without a GPU, set TRITON_INTERPRET=1 before importing triton to run on the CPU."
        )
    raise ValueError(f"{name} is on {tensor.device}; Triton kernels need a CUDA tensor")


def check_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"inputs must be on one device, got {listed}")


def check_dtype(name: str, tensor: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if tensor.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"{name} has dtype {str(tensor.dtype).removeprefix('torch.')}; supported: {names}")


def check_same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name} is {str(d).removeprefix('torch.')}" for name, d in dtypes.items())
        raise TypeError(f"inputs must have one dtype, got {listed}")


def check_contiguous(name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_contiguous():
        raise ValueError(f"{name} is not contiguous (strides {tuple(tensor.stride())}); pass {name}.contiguous()")


def check_ndim(name: str, tensor: torch.Tensor, ndim: int) -> None:
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {tensor.ndim}-D with shape {tuple(tensor.shape)}")


def softmax_scale(sm_scale: float | None, head_dim: int) -> float:
    """The attention softmax scale: 1/sqrt(head_dim) by default, else sm_scale if it is positive and finite."""
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"sm_scale must be a positive finite number, got {sm_scale}")
    return scale


def refuse_second_derivative(name: str) -> None:
    """Call first in an autograd Function's backward. With create_graph=True (a gradient penalty, a Hessian-vector
    product) autograd runs the backward with grad mode on, to differentiate it again; the book's backward kernels
    record no graph, so their gradients would silently count as constants. Say so instead."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{name} has no second derivative: its backward kernels record no graph, so a loss built "
                           "on its gradients (torch.autograd.grad(..., create_graph=True)) would silently lose "
                           "that term. Take first derivatives only, or use torch's scaled_dot_product_attention "
                           "where you need a gradient of a gradient")


INT32_LIMIT = 2**31  # the first element offset a kernel with 32-bit offsets cannot reach


def largest_offset(tensor: torch.Tensor) -> int:
    """The largest element offset a kernel computes into tensor: sum over dims of (size - 1) * stride."""
    if tensor.numel() == 0:
        return 0
    return sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))


def check_int32_offsets(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor with an element at offset 2**31 or beyond: a kernel with 32-bit offsets cannot reach it."""
    offset = largest_offset(tensor)
    if offset >= INT32_LIMIT:
        raise ValueError(f"{name} reaches element offset {offset:,} (shape {tuple(tensor.shape)}, strides "
                         f"{tuple(tensor.stride())}); this kernel computes 32-bit offsets and reaches offsets below "
                         f"2**31 = {INT32_LIMIT:,} only: split the batch or the heads into several calls")


def query_heads_per_kv_head(q_heads: int, kv_heads: int) -> int:
    """The group size of grouped-query attention: how many query heads share one K/V head (1: multi-head, q_heads:
    multi-query). Query head h reads K/V head h // group."""
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"the query heads ({q_heads}) must be a multiple of the K/V heads ({kv_heads}): each K/V head "
                         "serves a group of query heads (grouped-query attention)")
    return q_heads // kv_heads
