"""Every chapter's companion notebook runs top to bottom on a CPU, and the site shows what it printed.

Sources are jupytext percent scripts in notebooks/; docs/notebooks/ holds the executed copies that the
site renders. A fresh run must match the stored copy (sources and text outputs), with no error or
stderr anywhere: after editing a notebook, run `python -m book.notebooks --write notebooks/<name>.py`.
"""

import re

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the documentation tools (`make setup`)")
yaml = pytest.importorskip("yaml", reason="needs the documentation tools (`make setup`)")
import torch  # noqa: E402

from book import ROOT, notebooks  # noqa: E402

SOURCES = notebooks.sources()
COLAB = "https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/"


def test_every_chapter_has_a_notebook():
    chapters = {p.name[:2] for p in (ROOT / "docs/chapters").glob("[0-9][0-9]-*.md")}
    have = {p.name[2:4] for p in SOURCES}
    assert {f"{n:02d}" for n in range(1, 8)} <= have <= chapters


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_notebook_runs_and_matches_its_stored_copy(source):
    stored_path = notebooks.stored_path(source)
    assert stored_path.is_file(), f"run `python -m book.notebooks --write {source.relative_to(ROOT)}`"
    stored = nbformat.read(stored_path, as_version=4)
    assert not notebooks.errors(stored)
    fresh = notebooks.execute(source)  # raises CellExecutionError on a failing cell
    assert not notebooks.errors(fresh), notebooks.errors(fresh)
    if torch.cuda.is_available():
        return  # the stored outputs come from a CPU run; on a GPU it is enough that every cell runs
    assert notebooks.comparable(fresh) == notebooks.comparable(stored), (
        f"{stored_path.relative_to(ROOT)} is stale: run `python -m book.notebooks --write {source.relative_to(ROOT)}`")


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_notebook_has_colab_link_setup_and_nav_entry(source):
    text = source.read_text()
    assert text.startswith("# %% [markdown]\n# # Chapter ")
    assert f"({COLAB}{source.stem}.ipynb)" in text
    assert "import kernels" in text  # before triton, so that a CPU picks the interpreter
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = str(config["nav"])
    assert f"notebooks/{source.stem}.ipynb" in nav


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_notebook_text_has_no_tex(source):
    """The site renders a notebook's markdown without the chapters' math extension, so TeX would show as source
    (a reader saw "(t \\bmod S)"): write formulas in code spans instead."""
    markdown = [line for line in source.read_text().splitlines() if line.startswith("# ")]
    tex = [line for line in markdown if re.search(r"\\[()\[\]]|\$[^$]+\$", line)]
    assert not tex, f"{source.name}: TeX in markdown: {tex}"


def test_no_stray_rendered_notebooks():
    stems = {s.stem for s in SOURCES}
    for rendered in (ROOT / "docs/notebooks").glob("*.ipynb"):
        assert rendered.stem in stems, f"{rendered.name} has no source in notebooks/"
        assert re.fullmatch(r"ch\d\d_\w+", rendered.stem)
