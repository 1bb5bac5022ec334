# In which order do programs pick their C tiles? Row by row, or in groups of GROUP_M tile-rows?
# The programs that run at the same time share the A and B panels they read, through the L2 cache.
# Fewer distinct panels in flight means a smaller working set, so more of the loads hit in L2.
import numpy as np


def row_major(pid: int, tiles_m: int, tiles_n: int) -> tuple[int, int]:
    return pid // tiles_n, pid % tiles_n


def grouped(pid: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    # The same arithmetic as grouped_tile in kernels/matmul.py.
    tiles_per_group = group_m * tiles_n
    first_m = (pid // tiles_per_group) * group_m
    rows_in_group = min(tiles_m - first_m, group_m)
    pid_in_group = pid % tiles_per_group
    return first_m + pid_in_group % rows_in_group, pid_in_group // rows_in_group


def order_grid(tile_of, tiles_m: int, tiles_n: int) -> np.ndarray:
    grid = np.full((tiles_m, tiles_n), -1)
    for pid in range(tiles_m * tiles_n):
        grid[tile_of(pid)] = pid
    return grid


def panels(tile_of, in_flight: int) -> tuple[int, int]:
    """Distinct A panels (tile-rows) and B panels (tile-columns) read by programs 0 .. in_flight-1."""
    tiles = [tile_of(pid) for pid in range(in_flight)]
    return len({m for m, _ in tiles}), len({n for _, n in tiles})


def main() -> None:
    tiles_m, tiles_n, group_m = 6, 6, 3
    print(f"Program id of each C tile, a {tiles_m} x {tiles_n} grid of tiles")
    print("row-major:")
    print(order_grid(lambda p: row_major(p, tiles_m, tiles_n), tiles_m, tiles_n))
    g = order_grid(lambda p: grouped(p, tiles_m, tiles_n, group_m), tiles_m, tiles_n)
    print(f"grouped, GROUP_M = {group_m}:")
    print(g)
    print("every tile exactly once:", sorted(g.ravel().tolist()) == list(range(tiles_m * tiles_n)))
    a, b = panels(lambda p: row_major(p, tiles_m, tiles_n), 9)
    print(f"programs 0-8, row-major: {a} A panels + {b} B panels = {a + b}")
    a, b = panels(lambda p: grouped(p, tiles_m, tiles_n, group_m), 9)
    print(f"programs 0-8, grouped:   {a} A panels + {b} B panels = {a + b}")

    # A real size: 8192 x 8192 x 8192 in fp16 with 128 x 128 tiles, and 132 programs in flight (one per SM
    # of an H100). A panel is 128 x 8192 fp16 values, 2.1 MB.
    size, tile, in_flight = 8192, 128, 132
    panel_mb = tile * size * 2 / 1e6
    tiles = size // tile
    print(f"\n{size}^3 fp16, {tile} x {tile} tiles ({tiles} x {tiles} of them), {in_flight} programs in flight:")
    for name, tile_of in [("row-major", lambda p: row_major(p, tiles, tiles)),
                          ("grouped, GROUP_M = 8", lambda p: grouped(p, tiles, tiles, 8))]:
        a, b = panels(tile_of, in_flight)
        print(f"  {name:<21} {a:>2} A panels + {b:>2} B panels = {a + b:>2} panels, {(a + b) * panel_mb:>5.1f} MB")
    print("  L2 cache of an H100 (datasheet): 50 MB")


if __name__ == "__main__":
    main()
