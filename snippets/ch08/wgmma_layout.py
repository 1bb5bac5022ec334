# Which of a warpgroup's 128 threads holds which element of a wgmma result, and in which of its registers. Gluon
# names this layout NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], ...): the 4 warps are stacked
# along the rows, 16 rows each, and inside a warp the pattern of an 8 x 8 block repeats.
# Run: python snippets/ch08/wgmma_layout.py
ROWS, COLS = 64, 16  # a 64-row result, as every wgmma gives; 16 columns keep the picture small


def owner(row, col):
    """(thread, register) holding element (row, col) of the accumulator."""
    warp, r = divmod(row, 16)  # warp w holds rows 16w ... 16w + 15
    lane = 4 * (r % 8) + (col % 8) // 2  # 4 threads share a row, 2 neighbouring columns each
    register = 4 * (col // 8) + 2 * (r // 8) + col % 2  # the next 8 columns, and row r + 8, in later registers
    return 32 * warp + lane, register


print("Thread of each element, rows 0-17 (warp 0 holds rows 0-15, warp 1 starts at row 16):")
print("       " + "".join(f"{c:>4}" for c in range(COLS)))
for row in range(18):
    print(f"row {row:>2} " + "".join(f"{owner(row, c)[0]:>4}" for c in range(COLS)))

mine = sorted((r, c) for r in range(ROWS) for c in range(COLS) if owner(r, c)[0] == 5)
print("thread 5 holds", ", ".join(f"({r},{c})" for r, c in mine), "in registers",
      [owner(r, c)[1] for r, c in mine])

# A row vector (the running max m_i or sum l_i of each query row) takes SliceLayout(1, parent): the layout of the
# parent with the column dimension removed. Each row's value sits in the 4 threads that hold that row's elements.
holders = sorted({owner(9, c)[0] for c in range(COLS)})
print(f"row 9's max is computed by threads {holders}: each reduces its own columns, then the 4 exchange")

# P, the softmax of S, feeds the next wgmma as its first operand from registers: DotOperandLayout(operand_index=0,
# parent=..., k_width=2). For 16-bit inputs a thread holds the same (row, column) pairs of P there as of S here,
# so turning S's fp32 accumulator into P's fp16 operand moves nothing between threads.
