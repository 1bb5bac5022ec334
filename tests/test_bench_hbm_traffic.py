"""The measured-HBM-traffic benchmark: its models agree with chapter 5's simulator, it reads ncu's CSV, its
views render, and without ncu it stops with one line and writes no results file."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from book import ROOT
from book.bench import hbm_traffic
from book.bench.registry import BenchmarkSkipped


def _simulator():
    spec = importlib.util.spec_from_file_location("simulator", ROOT / "snippets" / "ch05" / "simulator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n, d, block_m", [(64, 16, 16), (96, 8, 32), (128, 32, 64)])
def test_models_count_what_the_simulator_moves(n, d, block_m):
    simulator = _simulator()
    q, k, v = (np.random.default_rng(0).standard_normal((n, d)).astype(np.float32) for _ in range(3))
    _, standard = simulator.standard_attention(q, k, v)
    assert standard["hbm_bytes"] == 4 * hbm_traffic.standard_elements(n, d)
    _, flash = simulator.flash_attention(q, k, v, block_m=block_m, block_n=16)
    lse_bytes = 4 * n  # the simulator also writes the row logsumexp, which the count leaves out
    assert flash["hbm_bytes"] - lse_bytes == 4 * hbm_traffic.flash_elements(n, d, block_m)
    assert hbm_traffic.compulsory_elements(n, d) <= hbm_traffic.flash_elements(n, d, block_m)
    assert hbm_traffic.plain_elements(n, d) == hbm_traffic.standard_elements(n, d) + 2 * n * d


# ncu's --csv output (2025.3) for two NVTX ranges: one kernel in the first, two in the second.
NCU_CSV = ROOT / "tests" / "data" / "ncu_hbm_traffic.csv"


def test_reads_ncu_csv_per_nvtx_range():
    found = hbm_traffic.parse_ncu_csv(NCU_CSV.read_text())
    assert set(found) == {"flash:64:2048", "plain:64:2048"}
    assert found["flash:64:2048"]["dram__bytes_read.sum"] == 6_320_896
    assert found["flash:64:2048"]["lts__t_bytes.sum"] == 31_244_160
    assert found["flash:64:2048"]["kernels"] == ["_attn_fwd"]
    plain = found["plain:64:2048"]
    assert plain["dram__bytes_read.sum"] == 4_216_064 + 67_201_280  # summed over the range's kernels
    assert plain["dram__bytes_write.sum"] == 42_276_864
    assert plain["kernels"] == ["nvjet_sm90_hsh", "softmax_warp_forward"]


def _synthetic_result() -> dict:
    """Rows as run() writes them, with plain at its count and the kernels at the floor."""
    rows = []
    for d in (64, 128):
        for n in (1024, 2048, 4096):
            for name in ("plain", "flash", "fast"):
                model = (hbm_traffic.plain_elements(n, d) if name == "plain"
                         else hbm_traffic.flash_elements(n, d, 128))
                measured = model if name == "plain" else hbm_traffic.compulsory_elements(n, d)
                row = {"implementation": name, "D": d, "N": n, "B": 1, "H": 16, "tool": "test",
                       "dram_read_bytes": measured * 2, "dram_write_bytes": measured * 2 * 16 - measured * 2,
                       "l2_request_bytes": model * 2 * 16, "kernels": "k",
                       "standard_bytes": hbm_traffic.standard_elements(n, d) * 2 * 16, "model_bytes": model * 2 * 16,
                       "compulsory_bytes": hbm_traffic.compulsory_elements(n, d) * 2 * 16}
                if name != "plain":
                    row["block_m"] = 128
                rows.append(row)
    return {"provenance": {"gpu": "test"}, "rows": rows}


def test_views_render_and_read_the_rows():
    result = _synthetic_result()
    text = hbm_traffic.table(result)
    assert len(text.splitlines()) == 2 + 6  # header, rule, one line per (D, N)
    summary = hbm_traffic.summary(result)
    assert "1.00 to 1.00 times its count" in summary  # plain at its count, by construction
    assert "1.00 to 1.00 times the floor" in summary
    figure = hbm_traffic.bytes_plot(result)
    assert len(figure.axes) == 2


def test_without_ncu_the_run_is_skipped(monkeypatch):
    monkeypatch.setattr(hbm_traffic.shutil, "which", lambda name: None)
    monkeypatch.setattr(hbm_traffic.os.path, "isfile", lambda path: False)
    with pytest.raises(BenchmarkSkipped, match="ncu"):
        hbm_traffic.run(lambda message: None)


def test_the_committed_results_hold_every_shape():
    for path in sorted((ROOT / "results").glob("*/hbm_traffic.json")):
        rows = json.loads(path.read_text())["rows"]
        shapes = {(r["implementation"], r["D"], r["N"]) for r in rows}
        for d in hbm_traffic.HEAD_DIMS:
            for n in hbm_traffic.SIZES:
                assert ("plain", d, n) in shapes and ("flash", d, n) in shapes, (path, d, n)


def test_child_module_runs_as_a_program_only_with_child_flag():
    done = subprocess.run([sys.executable, "-m", "book.bench.hbm_traffic"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == ""
