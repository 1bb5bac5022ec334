# Chapter 3: how many buffers of shared memory the compiled matmul keeps for num_stages = s. No GPU needed:
# Triton compiles the kernel for a Hopper GPU (compute capability 9.0) on any machine, and the compiled kernel
# says how much shared memory it asks for and which tensor-core instruction its tl.dot became.
# Run: python snippets/ch03/stage_buffers.py
import os

os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU, even on a machine without one
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels.matmul import matmul_kernel  # noqa: E402

ARGS = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
        "stride_cn", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "INTERPRETER"]
POINTERS = {"a_ptr", "b_ptr", "c_ptr"}
ONES = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # row-major fp16 matrices, as in the benchmark
# A launch on contiguous matrices whose sizes are multiples of 16 tells Triton so; the compile below says it too.
MULTIPLES_OF_16 = {"a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"}


def compile_for_hopper(block_m, block_n, block_k, stages, warps):
    constants = {**ONES, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8,
                 "INTERPRETER": False}
    signature = {a: "constexpr" if a in constants else "*fp16" if a in POINTERS else "i32" for a in ARGS}
    attrs = {(ARGS.index(a),): [["tt.divisibility", 16]] for a in MULTIPLES_OF_16}
    source = ASTSource(fn=matmul_kernel.fn, signature=signature, constexprs=constants, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": stages})


print("tile (M x N x K), stages: shared memory = buffers x one stage's A and B tiles; tensor-core instruction")
for block_m, block_n, block_k, stages, warps in [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (64, 64, 64, 4, 4),
                                                  (16, 64, 64, 3, 4), (16, 64, 64, 4, 4)]:
    kernel = compile_for_hopper(block_m, block_n, block_k, stages, warps)
    stage = (block_m * block_k + block_k * block_n) * 2  # fp16: one A tile and one B tile
    ptx = kernel.asm["ptx"]
    instruction = "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else "none"
    print(f"  {block_m:>3} x {block_n} x {block_k}, {stages} stages: {kernel.metadata.shared // 1024:>3} KiB = "
          f"{kernel.metadata.shared / stage:g} x {stage // 1024} KiB; {instruction}")
