"""Results of several GPUs live side by side (results/<gpu-slug>/) and the page shows one tab per GPU, the
reference GPU's first; a stale view warns, or, on an archived GPU, shows a plain notice."""

import json
import re

import pytest

from book import RESULTS_DIR, gpus, render
from tests.site import build, copy_book

MEASURED = sorted(RESULTS_DIR.glob("*/vector_add.json"))


def _add_stale_gpu(book, result: dict, name: str, slug: str) -> None:
    """A made-up GPU in a copy of the book: another GPU's numbers under this name, measured on an older kernel."""
    result = json.loads(json.dumps(result))
    result["provenance"].update(gpu=name, gpu_slug=slug)
    result["provenance"]["sources"]["kernels/vector_add.py"] = "sha256:" + "0" * 64
    folder = book / "results" / slug
    folder.mkdir()
    (folder / "vector_add.json").write_text(json.dumps(result))


def _notice_title(path) -> str | None:
    """The title of what a committed results file's tab shows above its view: a warning, a notice, or nothing."""
    provenance = json.loads(path.read_text())["provenance"]
    if not render.stale_sources(provenance):
        return None
    return render.ARCHIVED_TITLE if gpus.is_archived(path.parent.name) else render.STALE_TITLE


@pytest.mark.skipif(not MEASURED, reason="no vector_add results committed")
def test_a_second_gpu_gets_its_own_tab_in_every_view(tmp_path):
    book = copy_book(tmp_path / "book")
    result = json.loads(MEASURED[0].read_text())
    first_gpu = result["provenance"]["gpu"]
    # Two made-up GPUs, both measured on an older version of the kernel: their tabs say so, the archived one with
    # a notice instead of the warning.
    _add_stale_gpu(book, result, "Test GPU Two", "test-gpu-two")
    _add_stale_gpu(book, result, "Test GPU Three", "test-gpu-three")
    (book / "results/test-gpu-three" / gpus.ARCHIVE_MARKER).write_text(
        "since: 2026-11-28\nwhy: no such GPU any more\nnames: GPU Three\n")

    done = build(book, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "site/chapters/02-vector-add/index.html").read_text()
    page = (book / "docs/chapters/02-vector-add.md").read_text()
    views = re.findall(r"^ *<!-- results: vector_add ([\w-]+) -->$", page, re.MULTILINE)  # indented in a note too

    # One tab set per view, each with one tab per GPU (two views in a row must not merge into one set), the
    # reference GPU's first, then the others by folder name.
    tab_sets = re.findall(r'class="tabbed-set tabbed-alternate" data-tabs="\d+:(\d+)"', html)
    assert tab_sets == [str(len(MEASURED) + 2)] * len(views), tab_sets
    slugs = sorted([path.parent.name for path in MEASURED] + ["test-gpu-two", "test-gpu-three"], key=gpus.order_key)
    names = {"test-gpu-two": "Test GPU Two", "test-gpu-three": "Test GPU Three"}
    names.update({path.parent.name: json.loads(path.read_text())["provenance"]["gpu"] for path in MEASURED})
    labels = re.findall(r'<label for="__tabbed_\d+_\d+">([^<]+)</label>', html)
    assert labels == [names[slug] for slug in slugs] * len(views)
    if (RESULTS_DIR / gpus.REFERENCE_GPU / "vector_add.json").is_file():
        assert labels[0] == names[gpus.REFERENCE_GPU]
    # Each run's provenance once in full on the page, then as a pointer to it
    for gpu in (first_gpu, "Test GPU Two"):
        assert html.count(f'class="provenance">Measured on {gpu}') == 1
        assert html.count(f'class="provenance">The same run of <code>vector_add</code> as above ({gpu}).') == len(
            views) - 1
    # Each tab warns, or shows the archived notice, as its own results file says.
    notices = {"Test GPU Two": render.STALE_TITLE, "Test GPU Three": render.ARCHIVED_TITLE}
    notices.update({names[path.parent.name]: _notice_title(path) for path in MEASURED})
    tabs = html.split('<div class="tabbed-block">')[1:]
    assert len(tabs) == len(views) * len(slugs)
    for tab in tabs:
        gpu = re.search(r'class="provenance">(?:Measured on (.+?) \(driver'
                        r'|The same run of <code>\w+</code> as above \((.+?)\)\.)', tab)
        gpu = gpu[1] or gpu[2]
        assert (render.STALE_TITLE in tab) == (notices[gpu] == render.STALE_TITLE), gpu
        assert (f'<p class="admonition-title">{render.ARCHIVED_TITLE}</p>' in tab) == (
            notices[gpu] == render.ARCHIVED_TITLE), gpu
    assert html.count("This GPU is archived since 2026-11-28 (no such GPU any more).") == len(views)
    for slug in (result["provenance"]["gpu_slug"], "test-gpu-two", "test-gpu-three"):
        figures = re.findall(rf'src="(\.\./\.\./figures/vector_add-[\w-]+-{slug}\.svg)"', html)
        assert figures, f"no figure for {slug}"
        for figure in figures:
            assert (tmp_path / "site/chapters/02-vector-add" / figure).resolve().is_file()
