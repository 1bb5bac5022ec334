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


def test_a_provenance_line_the_page_has_shown_becomes_a_pointer_or_goes_where_it_is_the_nearest():
    line = ('<p class="provenance">Measured on NVIDIA H200 (driver 580, CUDA 13.0), torch 2.11, triton 3.6, '
            '2026-11-29, commit <code>93b1247</code>.</p>')
    rendered = bake.Rendered(views={("bench", "table"): [("NVIDIA H200", "| a |\n\n" + line)],
                                    ("bench", "plot"): [("NVIDIA H200", "![plot](x.svg)\n\n" + line)]})
    other_line = line.replace("H200", "H100")
    rendered.views[("other", "table")] = [("NVIDIA H100", "| b |\n\n" + other_line)]
    page = ("<!-- results: bench table -->\n\n<!-- results: bench plot -->\n\n<!-- results: other table -->\n\n"
            "<!-- results: bench table -->\n")
    out = bake.transform(page, "chapters/01-x.md", rendered, None, "https://github.com/o/r")
    assert out.count("Measured on NVIDIA H200") == 1
    # right under its own line the plot needs no pointer; after another run's line the table does
    assert out.count('<p class="provenance">The same run of <code>bench</code> as above (NVIDIA H200).</p>') == 1
    assert out.index("![plot]") < out.index("Measured on NVIDIA H100") < out.index("The same run of")
    other = bake.transform("<!-- results: bench plot -->\n", "chapters/02-y.md", rendered, None, "https://x")
    assert "Measured on NVIDIA H200" in other  # each page says it once
