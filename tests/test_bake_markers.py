"""The build step's results markers: at the start of a line, or indented inside a collapsed block, whose view is then
indented alike so that it stays inside the block."""

import pytest

pytest.importorskip("yaml", reason="needs the documentation tools (`make setup`)")
from book import bake  # noqa: E402


def _rendered(*gpus):
    body = "| a |\n|---|\n| 1 |\n\n*measured on a GPU*"
    return bake.Rendered(views={("bench", "table"): [(gpu, body) for gpu in gpus]})


def test_a_marker_at_the_start_of_a_line_becomes_its_view():
    page = "Text.\n\n<!-- results: bench table -->\n\nMore."
    out = bake.transform(page, "chapters/01-x.md", _rendered("H200"), None, "https://github.com/o/r")
    assert "\n| a |\n|---|\n| 1 |\n\n*measured on a GPU*\n" in out and "results:" not in out


def test_an_indented_marker_keeps_its_view_inside_the_block():
    page = '??? note "Details"\n\n    Text.\n\n    <!-- results: bench table -->\n\nAfter.'
    out = bake.transform(page, "chapters/01-x.md", _rendered("H200"), None, "https://github.com/o/r")
    assert "\n    | a |\n    |---|\n    | 1 |\n\n    *measured on a GPU*\n" in out
    two = bake.transform(page, "chapters/01-x.md", _rendered("H200", "H100"), None, "https://github.com/o/r")
    assert '\n    ===! "H200"\n\n        | a |' in two and '\n    === "H100"\n' in two
    empty = bake.transform(page, "chapters/01-x.md", bake.Rendered(), None, "https://github.com/o/r")
    assert '\n    !!! note "No measurements yet"\n\n        `bench` has no results file.' in empty
