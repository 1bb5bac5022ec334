# Programs on the 132 SMs of an H100 SXM5 (datasheet). How many fit on one SM at once is set by the scarcest
# resource (per SM, compute capability 9.0, CUDA C++ Programming Guide). Equal programs then run in waves.
import math

SMS = 132
REGISTERS, SHARED_KIB, THREADS, PROGRAMS = 65536, 228, 2048, 32  # per SM


def programs_per_sm(warps, registers_per_thread, shared_kib):
    threads = warps * 32
    return min(REGISTERS // (threads * registers_per_thread), SHARED_KIB // shared_kib, THREADS // threads, PROGRAMS)


for warps, registers, shared in ((4, 128, 64), (4, 255, 64), (8, 128, 32), (12, 168, 192)):
    fit = programs_per_sm(warps, registers, shared)
    print(f"{warps:2d} warps x {registers} registers, {shared:3d} KiB shared: {fit} per SM, "
          f"{fit * SMS} programs per wave")

print("\nprograms  waves  programs in the last wave  SMs idle in the last wave  busy share")
for programs in (132, 133, 264, 300, 2048, 4096):  # one program per SM at a time
    waves = math.ceil(programs / SMS)
    last = programs - (waves - 1) * SMS
    print(f"{programs:8d}  {waves:5d}  {last:25d}  {SMS - last:25d}  {programs / (waves * SMS):10.1%}")

# A persistent grid: one program per SM, each with a list of items.
items = 4096
per_program = [len(range(p, items, SMS)) for p in range(SMS)]
print(f"\npersistent grid: {SMS} programs, {items} items: {min(per_program)} to {max(per_program)} items each")
