# Exercise: how does GROUP_M change the panels that 132 programs in flight read?
# 8192^3 fp16 with 128 x 128 tiles; a panel (128 x 8192 fp16 values) is 2.1 MB.
from grouped_order import grouped, panels  # the sibling snippet's functions

tiles, panel_mb = 8192 // 128, 128 * 8192 * 2 / 1e6
for group_m in [1, 2, 4, 8, 16, 32, 64]:
    a, b = panels(lambda p, g=group_m: grouped(p, tiles, tiles, g), 132)
    total = a + b
    print(f"GROUP_M = {group_m:>2}: {a:>2} A panels + {b:>2} B panels = {total:>2} panels, {total * panel_mb:>5.1f} MB")
