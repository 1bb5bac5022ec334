"""The reference GPU and archived GPUs (book/gpus.py): the archive marker, the order of the tabs, and the notice
a stale view of an archived GPU shows instead of the stale warning."""

import pytest

pytest.importorskip("yaml", reason="needs the documentation tools (`make setup`)")

from book import RESULTS_DIR, bake, gpus, render, results  # noqa: E402 - after the skip: bake needs yaml
from book.provenance import source_hash  # noqa: E402

ARCHIVED_MD = """\
since: 2026-11-28
why: the maintainers can no longer measure on it: the other GPU is the reference GPU now
names: GPU B, B1
"""


def _provenance(slug: str, stale: bool = True) -> dict:
    digest = "sha256:" + "0" * 64 if stale else source_hash("kernels/vector_add.py")
    return {"gpu": f"Vendor {slug}", "gpu_slug": slug, "driver": "1", "cuda": "13.0", "torch": "2.11", "triton": "3.6",
            "date": "2026-11-24T21:18:20Z", "commit": "a90b11923a5511fa03a9ac84400215838366f13b",
            "sources": {"kernels/vector_add.py": digest}}


def test_the_archive_marker_is_parsed_by_hand():
    archive = gpus.parse_archive(ARCHIVED_MD)
    assert archive == gpus.Archive(since="2026-11-28", names=("GPU B", "B1"),
                                   why="the maintainers can no longer measure on it: the other GPU is the reference "
                                       "GPU now")


@pytest.mark.parametrize("line", ["since", "why", "names"])
def test_an_archive_marker_without_a_line_names_it(line):
    text = "\n".join(row for row in ARCHIVED_MD.splitlines() if not row.startswith(line))
    with pytest.raises(ValueError, match=rf"results/b/ARCHIVED.md: no {line} line"):
        gpus.parse_archive(text, where="results/b/ARCHIVED.md")
    with pytest.raises(ValueError, match="no names line"):
        gpus.parse_archive(ARCHIVED_MD.replace("GPU B, B1", " , "))


def test_a_folder_with_the_marker_is_archived_but_never_the_reference_gpu(tmp_path):
    for slug in ("gpu-b", gpus.REFERENCE_GPU):
        (tmp_path / slug).mkdir()
        (tmp_path / slug / gpus.ARCHIVE_MARKER).write_text(ARCHIVED_MD)
    (tmp_path / "gpu-c").mkdir()
    assert gpus.archive("gpu-b", tmp_path) == gpus.parse_archive(ARCHIVED_MD)
    assert gpus.is_archived("gpu-b", tmp_path)
    assert not gpus.is_archived("gpu-c", tmp_path) and not gpus.is_archived("gpu-d", tmp_path)
    assert not gpus.is_archived(gpus.REFERENCE_GPU, tmp_path)


def test_the_committed_h100_folder_is_archived():
    archive = gpus.archive("nvidia-h100-80gb-hbm3")
    assert archive is not None and archive.since == "2026-11-28" and archive.names == ("H100",)
    assert gpus.REFERENCE_GPU == "nvidia-h200" and (RESULTS_DIR / gpus.REFERENCE_GPU).is_dir()


def test_the_reference_gpu_comes_first_then_the_others_by_folder_name():
    found = [{"provenance": {"gpu_slug": slug}} for slug in ("a-gpu", gpus.REFERENCE_GPU, "zz-gpu", "b-gpu")]
    assert [r["provenance"]["gpu_slug"] for r in bake.in_tab_order(found)] == [gpus.REFERENCE_GPU, "a-gpu", "b-gpu",
                                                                                "zz-gpu"]


def test_a_stale_archived_view_shows_a_notice_instead_of_the_warning(monkeypatch):
    archive = gpus.parse_archive(ARCHIVED_MD)
    assert render.archived_notice(_provenance("gpu-b"), archive) == (
        '!!! note "Archived measurement"\n\n'
        "    Measured on Vendor gpu-b on 2026-11-24 at commit `a90b11923a55`, with an earlier version of "
        "`kernels/vector_add.py`; not measured again since. This GPU is archived since 2026-11-28 (the maintainers "
        "can no longer measure on it: the other GPU is the reference GPU now).\n")
    monkeypatch.setattr(gpus, "archive", lambda slug: archive if slug == "gpu-b" else None)
    notice = bake._stale_notice(_provenance("gpu-b"))
    assert notice.startswith('!!! note "Archived measurement"') and render.STALE_TITLE not in notice
    assert render.STALE_TITLE in bake._stale_notice(_provenance("gpu-c"))


def test_a_fresh_archived_view_shows_no_notice(monkeypatch):
    archive = gpus.parse_archive(ARCHIVED_MD)
    assert render.archived_notice(_provenance("gpu-b", stale=False), archive) is None
    monkeypatch.setattr(gpus, "archive", lambda slug: archive)
    assert bake._stale_notice(_provenance("gpu-b", stale=False)) is None


def test_a_run_on_an_archived_gpu_writes_its_results_and_keeps_the_marker(tmp_path):
    """`make refresh` on an archived GPU: the fresh file lands beside ARCHIVED.md, which is no results file."""
    folder = tmp_path / "gpu-b"
    folder.mkdir()
    (folder / gpus.ARCHIVE_MARKER).write_text(ARCHIVED_MD)
    result = {"schema": 1, "benchmark": "vector_add", "provenance": {**_provenance("gpu-b"), "sm_count": 132},
              "rows": [{"n": 1000, "triton_ms": 0.01}]}
    assert results.write(result, results_dir=tmp_path) == folder / "vector_add.json"
    assert (folder / gpus.ARCHIVE_MARKER).read_text() == ARCHIVED_MD
    assert results.load_all("vector_add", results_dir=tmp_path) == [result]
    assert sorted(path.name for path in tmp_path.glob("*/*.json")) == ["vector_add.json"]


def test_a_view_with_the_same_text_for_every_gpu_is_shown_once(monkeypatch):
    """A view that does not depend on the measurement (a list of predictions, say) gets no tabs; one that does keeps
    a tab per GPU."""
    fresh = [{"provenance": _provenance(slug, stale=False), "rows": []} for slug in (gpus.REFERENCE_GPU, "gpu-z")]
    monkeypatch.setattr(results, "load_all", lambda name: fresh)
    benchmark = bake.by_name("vector_add")
    monkeypatch.setitem(benchmark.views, "same", lambda result: "the same words")
    monkeypatch.setitem(benchmark.views, "per-gpu", lambda result: result["provenance"]["gpu_slug"])
    (only,) = bake._render_view("vector_add", "same", {})
    assert only[0] == f"Vendor {gpus.REFERENCE_GPU}" and only[1].startswith("the same words")
    assert [gpu for gpu, _ in bake._render_view("vector_add", "per-gpu", {})] == [
        f"Vendor {gpus.REFERENCE_GPU}", "Vendor gpu-z"]
