"""A benchmark module's views section is left out of its source hash (book/provenance.py): a change there must not
be able to change a measurement. So nothing outside the section (the measuring code, and BENCHMARK but for its
views) may use a name the section defines."""

import ast

import pytest

from book import ROOT
from book.provenance import source_hash, views_section

BENCH = ROOT / "book" / "bench"
WITH_VIEWS = sorted(p.name for p in BENCH.glob("*.py") if views_section(p.read_text()))
# Names the measuring code uses from a views section, each only to format the progress lines a run prints
PRINTED_ONLY = {"decode_models.py": {"_fmt"}, "gpu_basics.py": {"_label"}, "hbm_traffic.py": {"_dram"}}


def _defined(nodes) -> set[str]:
    names = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _free_names(node) -> set[str]:
    """Names a top-level statement reads that it does not bind itself (its arguments and locals)."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in n.posonlyargs + n.args + n.kwonlyargs + [n.vararg, n.kwarg] if a is not None}
    return loads - bound


@pytest.mark.parametrize("name", WITH_VIEWS)
def test_the_measuring_code_uses_nothing_from_the_views_section(name):
    text = (BENCH / name).read_text()
    start, end = views_section(text)
    tree = ast.parse(text)
    inside = [n for n in tree.body if start < n.lineno <= end]
    outside = [n for n in tree.body if not start < n.lineno <= end]
    used = set()
    for node in outside:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):  # BENCHMARK: all but its views
            node = ast.Tuple([k.value for k in node.value.keywords if k.arg != "views"], ast.Load())
        used |= _free_names(node)
    assert not (_defined(inside) & used) - PRINTED_ONLY.get(name, set())


def test_the_views_section_is_left_out_of_the_hash(tmp_path, monkeypatch):
    module = ("import x\n\n\ndef run():\n    return 1\n\n\n# Views\n\n\ndef table(result):\n    return 'a'\n\n\n"
              "BENCHMARK = Benchmark(name='b', run=run, views={'table': table})\n")
    (tmp_path / "book" / "bench").mkdir(parents=True)
    path = tmp_path / "book" / "bench" / "b.py"
    monkeypatch.setattr("book.provenance.ROOT", tmp_path)
    path.write_text(module)
    first = source_hash("book/bench/b.py")
    path.write_text(module.replace("return 'a'", "return 'b'"))
    assert source_hash("book/bench/b.py") == first and first.startswith("sha256-measured:")
    path.write_text(module.replace("return 1", "return 2"))
    assert source_hash("book/bench/b.py") != first
    path.write_text(module.replace("views={'table': table}", "views={'t': table}"))
    assert source_hash("book/bench/b.py") != first  # a views= argument that shares its line is hashed with it
    own_line = module.replace("run=run, views={'table': table})", "run=run,\n    views={'table': table},\n)")
    path.write_text(own_line)
    on_its_own = source_hash("book/bench/b.py")
    path.write_text(own_line.replace("views={'table': table}", "views={'table': table, 't': table}"))
    assert source_hash("book/bench/b.py") == on_its_own  # on lines of its own it is left out, as the views are
    path.write_text(own_line.replace("run=run,", "run=lambda: 3,"))
    assert source_hash("book/bench/b.py") != on_its_own
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.py").write_text(module)  # only benchmark modules have a views section
    assert source_hash("kernels/k.py").startswith("sha256:")


def test_lines_that_only_mark_an_included_section_are_left_out_of_the_hash(tmp_path, monkeypatch):
    kernel = "def k(x):\n    y = x + 1\n    return y\n"
    (tmp_path / "kernels").mkdir()
    path = tmp_path / "kernels" / "k.py"
    monkeypatch.setattr("book.provenance.ROOT", tmp_path)
    path.write_text(kernel)
    plain = source_hash("kernels/k.py")
    assert plain.startswith("sha256:")
    path.write_text("# --8<-- [start:k]\ndef k(x):\n    # --8<-- [start:add]\n    y = x + 1\n    # --8<-- [end:add]\n"
                    "    return y\n# --8<-- [end:k]\n")
    marked = source_hash("kernels/k.py")
    assert marked == plain  # markers added: the same measured text
    path.write_text("# --8<-- [start:k]\ndef k(x):\n    y = x + 1\n    return y\n# --8<-- [end:k]\n")
    assert source_hash("kernels/k.py") == marked  # or moved
    path.write_text("# --8<-- [start:k]\ndef k(x):\n    y = x + 2\n    return y\n# --8<-- [end:k]\n")
    assert source_hash("kernels/k.py") != marked  # the code changed
    path.write_text("# --8<-- [start:k]\ndef k(x):\n    y = x + 1  # --8<-- [end:k]\n    return y\n")
    assert source_hash("kernels/k.py") != marked  # a marker that shares a line with code is hashed with it
