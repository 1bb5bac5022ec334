# How the block shape sets FlashAttention's HBM traffic: square blocks against the paper's blocking.
import numpy as np
from simulator import block_for_sram, flash_attention, paper_blocks_for_sram, standard_attention

d = 64
rng = np.random.default_rng(0)


def inputs(n):
    return (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))


n = 4096
Q, K, V = inputs(n)
print(f"N = {n}, d = {d}, fp32: FlashAttention's HBM bytes as the SRAM doubles")
print("SRAM KiB   square B         bytes   x previous   paper B_r x B_c         bytes   x previous")
previous = None
for sram_kib in [64, 128, 256, 512]:
    sram = sram_kib * 1024
    b = block_for_sram(sram, d)
    block_m, block_n = paper_blocks_for_sram(sram, d)
    square = flash_attention(Q, K, V, b, b, sram_bytes=sram)[1]["hbm_bytes"]
    paper = flash_attention(Q, K, V, block_m, block_n, sram_bytes=sram)[1]["hbm_bytes"]
    ratios = ("", "") if previous is None else (f"{square / previous[0]:.2f}", f"{paper / previous[1]:.2f}")
    print(f"{sram_kib:>8}   {b:>8}   {square:>11,}   {ratios[0]:>10}   {block_m:>7} x {block_n:<7}"
          f"{paper:>11,}   {ratios[1]:>10}".rstrip())
    previous = (square, paper)

sram = 192 * 1024
b = block_for_sram(sram, d)
print(f"\nSRAM 192 KiB, square blocks of {b}: standard / flash as N grows (limit 2 B_r / d = {2 * b / d:.2f})")
print("     N   standard bytes   flash bytes   standard / flash")
for n in [256, 512, 1024, 2048, 4096]:
    Q, K, V = inputs(n)
    standard = standard_attention(Q, K, V)[1]["hbm_bytes"]
    flash = flash_attention(Q, K, V, b, b, sram_bytes=sram)[1]["hbm_bytes"]
    print(f"{n:>6}   {standard:>14,}   {flash:>11,}   {standard / flash:>16.2f}")
