# Exercise: which of the kernel's GPU configurations fit in shared memory?
# Each pipeline stage holds one A tile (BLOCK_M x BLOCK_K) and one B tile (BLOCK_K x BLOCK_N) in fp16 or
# bf16 (2 bytes), and num_stages stages are in flight at once.
import kernels  # noqa: F401
from kernels.matmul import GPU_CONFIGS, _config, describe

LIMIT = 227 * 1024  # H100 shared memory per block (datasheet: 227 KB)


def shared_bytes(config) -> int:
    kw = config.kwargs
    per_stage = (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * 2
    return per_stage * config.num_stages


print(f"limit: {LIMIT // 1024} KiB per block")
for config in GPU_CONFIGS + [_config(256, 256, 64, stages=4, warps=8)]:
    used = shared_bytes(config)
    print(f"{describe(config):<34} {used // 1024:>4} KiB  fits: {used <= LIMIT}")
