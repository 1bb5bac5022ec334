"""Results of several GPUs live side by side (results/<gpu-slug>/) and the page shows one tab per GPU."""

import json
import re

import pytest

from book import RESULTS_DIR, render
from tests.site import build, copy_book

MEASURED = sorted(RESULTS_DIR.glob("*/vector_add.json"))


@pytest.mark.skipif(not MEASURED, reason="no vector_add results committed")
def test_a_second_gpu_gets_its_own_tab_in_every_view(tmp_path):
    book = copy_book(tmp_path / "book")
    # A made-up second GPU: the first GPU's numbers under another name, in a copy only.
    result = json.loads(MEASURED[0].read_text())
    first_gpu = result["provenance"]["gpu"]
    measured_gpus = [json.loads(path.read_text())["provenance"]["gpu"] for path in MEASURED]
    result["provenance"].update(gpu="Test GPU Two", gpu_slug="test-gpu-two")
    # ... measured on an older version of the kernel, so only its tabs warn.
    result["provenance"]["sources"]["kernels/vector_add.py"] = "sha256:" + "0" * 64
    second = book / "results/test-gpu-two/vector_add.json"
    second.parent.mkdir()
    second.write_text(json.dumps(result))

    done = build(book, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "site/chapters/02-vector-add/index.html").read_text()
    page = (book / "docs/chapters/02-vector-add.md").read_text()
    views = re.findall(r"^<!-- results: vector_add ([\w-]+) -->$", page, re.MULTILINE)

    # One tab set per view, each with one tab per GPU (two views in a row must not merge into one set).
    tab_sets = re.findall(r'class="tabbed-set tabbed-alternate" data-tabs="\d+:(\d+)"', html)
    assert tab_sets == [str(len(MEASURED) + 1)] * len(views), tab_sets
    labels = re.findall(r'<label for="__tabbed_\d+_\d+">([^<]+)</label>', html)
    assert labels == [*measured_gpus, "Test GPU Two"] * len(views)
    assert html.count(f'class="provenance">Measured on {first_gpu}') == len(views)
    assert html.count('class="provenance">Measured on Test GPU Two') == len(views)
    tabs = html.split('<div class="tabbed-block">')
    assert html.count(render.STALE_TITLE) == len(views)
    assert all(render.STALE_TITLE not in tab or "Test GPU Two" in tab for tab in tabs[1:])
    for slug in (result["provenance"]["gpu_slug"], json.loads(MEASURED[0].read_text())["provenance"]["gpu_slug"]):
        figures = re.findall(rf'src="(\.\./\.\./figures/vector_add-[\w-]+-{slug}\.svg)"', html)
        assert figures, f"no figure for {slug}"
        for figure in figures:
            assert (tmp_path / "site/chapters/02-vector-add" / figure).resolve().is_file()
