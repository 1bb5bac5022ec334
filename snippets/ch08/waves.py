# How a grid of programs meets 132 SMs (H100 SXM5, datasheet). First: how many programs fit on one SM at once
# (the limits per SM of compute capability 9.0, from the CUDA C++ Programming Guide). Then the waves: if every
# program takes the same time, the kernel takes as long as its number of waves, and the last wave may leave
# SMs idle: the tail effect.
import math

SMS = 132
REGISTERS, SHARED_KIB, THREADS, BLOCKS = 65536, 228, 2048, 32  # per SM


def programs_per_sm(warps: int, registers_per_thread: int, shared_kib: int) -> int:
    threads = warps * 32
    return min(REGISTERS // (threads * registers_per_thread), SHARED_KIB // shared_kib, THREADS // threads, BLOCKS)


for warps, registers, shared in ((4, 128, 64), (4, 255, 64), (8, 128, 32), (12, 168, 192)):
    fit = programs_per_sm(warps, registers, shared)
    print(f"{warps:2d} warps x {registers} registers, {shared:3d} KiB shared: {fit} per SM, "
          f"{fit * SMS} programs per wave")
print()

print("programs  waves  programs in the last wave  SMs idle in the last wave  busy share")
for programs in (132, 133, 264, 300, 2048, 4096):
    waves = math.ceil(programs / SMS)
    last = programs - (waves - 1) * SMS
    busy = programs / (waves * SMS)  # work done / (time taken x SMs)
    print(f"{programs:8d}  {waves:5d}  {last:25d}  {SMS - last:25d}  {busy:10.1%}")

# A persistent grid launches exactly one program per SM and hands each program a list of items instead.
items = 4096
per_program = [len(range(p, items, SMS)) for p in range(SMS)]
print(f"\npersistent grid: {SMS} programs, {items} items: {min(per_program)} to {max(per_program)} items each")
