"""Shared test setup. Importing `kernels` first picks Triton's interpreter when there is no GPU."""

import pytest
import torch

import kernels

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `make test-gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def free_gpu_memory():
    """Give the GPU memory a test cached back to the driver, so tests that run beside it (pytest -n) have it."""
    yield
    if HAS_CUDA:
        torch.cuda.empty_cache()


@pytest.fixture
def device() -> str:
    """Where kernels run in this session: the GPU if there is one, else the CPU under the interpreter."""
    assert HAS_CUDA or kernels.interpreting(), "no GPU and no interpreter: kernels cannot run"
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture
def rng() -> torch.Generator:
    """A fresh, unseeded generator: every run checks new random inputs."""
    generator = torch.Generator()
    generator.seed()
    return generator

