# What a program of chapter 9's kernel keeps in shared memory, in fp16 (2 bytes per element): one 64-row Q tile
# and one 64-row output tile per computing warpgroup, and a ring of slots that each hold a 128-key K tile and a
# 128-key V tile. A block may use up to 227 KiB (CUDA C++ Programming Guide, compute capability 9.0; NVIDIA
# writes "227 KB" and means 1024-byte KB).
LIMIT_KIB = 227
BYTES, ROWS, KEYS = 2, 64, 128


def kib(elements: int) -> float:
    return elements * BYTES / 1024


for head_dim, warpgroups in ((64, 2), (64, 3), (128, 2)):
    q_and_o = 2 * warpgroups * kib(ROWS * head_dim)
    for slots in (2, 3):
        ring = slots * 2 * kib(KEYS * head_dim)  # a K tile and a V tile per slot
        total = q_and_o + ring
        verdict = "fits" if total <= LIMIT_KIB else "too big"
        print(f"head dim {head_dim:3d}, {warpgroups} warpgroups, {slots} slots: Q+O {q_and_o:5.0f} KiB + ring "
              f"{ring:5.0f} KiB = {total:5.0f} KiB of {LIMIT_KIB}: {verdict}")
