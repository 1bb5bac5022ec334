# Which inputs take chapter 9's fast path? The rules look only at dtype, shapes and layout, so this runs
# anywhere: "meta" tensors have a shape and a dtype but no data.
import torch

from kernels.flash_attention_fast import shape_reason


def qkv(n_q, n_k=None, d=64, dtype=torch.float16, kv_heads=8):
    n_k = n_q if n_k is None else n_k
    q = torch.empty(2, 8, n_q, d, dtype=dtype, device="meta")
    k = torch.empty(2, kv_heads, n_k, d, dtype=dtype, device="meta")
    return q, k, torch.empty_like(k)


cases = {
    "fp16, N=4096, D=64": qkv(4096),
    "bf16, N=2048, D=128": qkv(2048, d=128, dtype=torch.bfloat16),
    "fp32, N=4096, D=64": qkv(4096, dtype=torch.float32),
    "fp16, N=4096, D=96": qkv(4096, d=96),
    "fp16, N=1000, D=64": qkv(1000),
    "fp16, Nq=128, Nk=4096": qkv(128, 4096),
    "fp16, N=4096, 8 q / 2 kv heads": qkv(4096, kv_heads=2),
}
q, k, v = qkv(4096)
cases["fp16, N=4096, transposed q"] = (q.transpose(1, 2).contiguous().transpose(1, 2), k, v)

for label, (q, k, v) in cases.items():
    reason = shape_reason(q, k, v)
    print(f"{label:31s} -> {'fast path' if reason is None else 'chapter 5 kernel: ' + reason}")
