"""The backward benchmark's views read the rows right (on made-up rows; the GPU run writes the real ones)."""

from book.bench import backward


def _result(ours_over_flash: float) -> dict:
    rows = []
    for dtype in backward.DTYPES:
        for d in (64, 128):
            for causal in (False, True):
                for n in backward.SIZES:
                    row = {"kind": "speed", "dtype": dtype, "head_dim": d, "causal": causal, "N": n}
                    for name in backward.NAMES:
                        tflops = 200.0 * (ours_over_flash if name == "ours" else 1.0)
                        plain_runs = name != "plain" or n <= 4096
                        row[f"{name}_backward"] = tflops if plain_runs else None
                        row[f"{name}_step"] = tflops if plain_runs else None
                        row[f"{name}_grad_err"] = 1e-3 if plain_runs else None
                    rows.append(row)
    for n in backward.MEMORY_SIZES:
        row = {"kind": "memory", "N": n, "score_matrix_bytes": 8 * n * n * 2}
        for name in backward.NAMES:
            row[f"{name}_peak_bytes"] = None if name == "plain" and n > 16384 else n * 1000
        rows.append(row)
    return {"rows": rows}


def test_targets_count_rows_from_2k_and_name_the_lowest():
    met = backward.targets(_result(1.1))
    assert "in 32 of 32 rows (ratios 1.10 to 1.10)" in met and "Nowhere below 0.9×." in met
    missed = backward.targets(_result(0.8))
    assert "in 0 of 32 rows" in missed and "Below 0.9× in some rows." in missed


def test_tables_show_every_row_and_refusals_as_dashes():
    table = backward.table(_result(1.0))
    assert len(table.split("\n\n")[0].splitlines()) == 2 + 40
    assert "—" in table  # plain PyTorch is not timed above N = 4,096
    assert "1.00×" in table
    assert len(backward.step_table(_result(1.0)).split("\n\n")[0].splitlines()) == 2 + 40


def test_memory_table_says_out_of_memory_and_checks_list_every_implementation():
    memory = backward.memory_table(_result(1.0))
    assert memory.count("out of memory") == 2  # plain at N = 32K and 64K
    checks = backward.checks(_result(1.0))
    assert checks.splitlines()[0].count("|") == len(backward.NAMES) + 3
    assert "1.0e-03" in checks


def test_plot_has_one_panel_per_head_dim_and_mask():
    assert len(backward.plot(_result(1.0)).axes) == 4
