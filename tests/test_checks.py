"""The book's checks (book/checks.py), run on this repository, and shown to catch what they should.

The first tests run each check on the repository, one test per chapter, page, snippet or benchmark, so a
failure names what is incomplete and says how to fix it. `make check` prints the same problems at once.
The tests after them build small repositories in temporary folders and prove that each check finds what
it should, with a message that names the file and the fix.
"""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from book import ROOT, checks, gpus
from book.bench import ALL
from tests.site import copy_book

CHAPTERS = checks.chapter_pages(ROOT)
PAGES = sorted((ROOT / "docs").glob("**/*.md"))
SNIPPETS = checks.snippet_files(ROOT)


def _ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


def _report(problems: list[str]) -> str:
    return "\n".join(["", *problems, "(`make check` lists every problem of the book.)"])


# ---------------------------------------------------------------------------------------------------
# This repository


@pytest.mark.parametrize("page", CHAPTERS, ids=_ids(CHAPTERS))
def test_chapter_has_the_standard_sections(page):
    problems = checks.check_chapter(ROOT, page)
    assert not problems, _report(problems)


@pytest.mark.parametrize("page", CHAPTERS, ids=_ids(CHAPTERS))
def test_chapter_is_finished_or_marked_draft(page):
    rel = page.relative_to(ROOT).as_posix()
    problems = [p for p in checks.unfinished_problems(ROOT) if p.startswith(rel)]
    assert not problems, _report(problems)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_include_resolves(page):
    rel = page.relative_to(ROOT).as_posix()
    problems = [p for i in checks.includes(ROOT) if i.page == rel for p in checks.check_include(ROOT, i)]
    assert not problems, _report(problems)


@pytest.fixture(scope="module")
def snippet_index():
    return checks.SnippetIndex.read(ROOT)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_ids(SNIPPETS))
def test_snippet_is_shown_and_tested(snippet, snippet_index):
    problems = checks.check_snippet(snippet_index, snippet)
    assert not problems, _report(problems)


def test_every_stored_output_has_its_snippet():
    problems = [p for p in checks.snippet_problems(ROOT) if p.split(":")[0].endswith(".out")]
    assert not problems, _report(problems)


@pytest.fixture(scope="module")
def bench_report():
    return checks.benchmarks_report(ROOT)


@pytest.mark.parametrize("name", [b.name for b in ALL])
def test_benchmark_has_fresh_results(name, bench_report):
    benchmark = next(b for b in bench_report["benchmarks"] if b["name"] == name)
    problems = checks.check_benchmark(benchmark, bench_report["reference_gpu"])
    assert not problems, _report(problems)


def test_every_results_file_has_a_benchmark(bench_report):
    assert not bench_report["orphans"], _report(checks.results_problems(ROOT))


def test_ruff_finds_nothing():
    problems = checks.lint_problems(ROOT)
    assert not problems, _report(problems)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_page_types_no_measured_figure(page):
    problems = checks.check_figures(ROOT, page)
    assert not problems, _report(problems)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_page_compares_with_an_archived_gpu_only_where_it_is_fresh(page, bench_report):
    problems = checks.check_comparisons(ROOT, page, checks.archived_gpus(bench_report))
    assert not problems, _report(problems)


def test_the_chapter_template_types_no_measured_figure():
    problems = checks.check_figures(ROOT, ROOT / checks.TEMPLATE)
    assert not problems, _report(problems)


def test_issue_forms_follow_the_github_schema():
    forms = sorted(p for p in (ROOT / ".github/ISSUE_TEMPLATE").glob("*.yml") if p.name != "config.yml")
    assert {p.name for p in forms} >= {"error-in-the-book.yml", "chapter-proposal.yml"}
    tool = str(Path(sys.executable).parent / "check-jsonschema")
    for schema, files in [("vendor.github-issue-forms", forms),
                          ("vendor.github-issue-config", [ROOT / ".github/ISSUE_TEMPLATE/config.yml"])]:
        done = subprocess.run([tool, "--builtin-schema", schema, *map(str, files)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------------------------------------------
# The checks find what they should, in small repositories made for the purpose

GOOD_CHAPTER = """\
    # 98. A chapter

    ## What you will learn

    - Something.

    ## Pitfalls and misconceptions

    - A mistake.

    ## Say it out loud

    > The whole chapter in a few sentences.

    ## Exercises

    1. A question.

    ??? success "Solutions"
        1. An answer.

    ## Recap

    - Something.
    """


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _repo(tmp_path: Path, files: dict[str, str], nav: list[str] = ("chapters/98-a.md",)) -> Path:
    mkdocs = "site_name: t\nnav:\n  - Home: index.md\n  - Part:\n" + "".join(f"      - {p}\n" for p in nav)
    return _write(tmp_path, {"mkdocs.yml": mkdocs, "docs/index.md": "# Home\n", **files})


def test_a_complete_chapter_passes(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": GOOD_CHAPTER})
    assert checks.chapter_problems(root) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace("## Recap", "## Summary"), ['missing the standard section "## Recap"', "Fix: add it"]),
        (lambda t: t.replace("## What you will learn", "## Goals").replace("## Recap", "## End"),
         ['"## What you will learn", "## Recap"', "Fix: add them"]),
        (lambda t: t.replace("## What you will learn", "## X").replace("## Pitfalls and misconceptions",
                                                                      "## What you will learn")
         .replace("## X", "## Pitfalls and misconceptions"), ["out of order", "Fix: put them in the order"]),
        (lambda t: t.replace("> The whole", "The whole"), ["has no blockquote", '"> "']),
        (lambda t: t.replace('??? success "Solutions"', "Solutions:"), ["has no solutions", "??? success"]),
        (lambda t: t.replace("# 98. A chapter", "Intro text."), ["does not start with a title"]),
    ],
    ids=["missing-one", "missing-two", "out-of-order", "no-blockquote", "no-solutions", "no-title"],
)
def test_chapter_check_names_the_page_and_the_fix(tmp_path, edit, expected):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": edit(textwrap.dedent(GOOD_CHAPTER))})
    problems = checks.chapter_problems(root)
    assert len(problems) == 1, problems
    assert problems[0].startswith("docs/chapters/98-a.md: ")
    for text in expected:
        assert text in problems[0]


def test_a_heading_inside_a_code_block_does_not_count(tmp_path):
    page = textwrap.dedent(GOOD_CHAPTER).replace("## Recap", "```text\n## Recap\n```")
    root = _repo(tmp_path, {"docs/chapters/98-a.md": page})
    assert any('"## Recap"' in p for p in checks.chapter_problems(root))


def test_chapter_missing_from_the_nav(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": GOOD_CHAPTER}, nav=[])
    [problem] = checks.chapter_problems(root)
    assert problem.startswith("docs/chapters/98-a.md: not in the nav of mkdocs.yml") and "make chapter" in problem


def test_include_check(tmp_path):
    page = """\
        ```python
        --8<-- "kernels/k.py:kernel"
        ```
        --8<-- "kernels/k.py"
        --8<-- 'kernels/gone.py'
        --8<-- "kernels/k.py:wrapper"
        --8<-- "kernels/k.py:half"
        --8<-- "kernels/k.py:3:5"
        ;--8<-- "kernels/escaped.py"
        --8<--
        kernels/k.py
        kernels/also_gone.py
        --8<--
        """
    kernel = """\
        # --8<-- [start:kernel]
        def kernel(): ...
        # --8<-- [end:kernel]
        # --8<-- [start:half]
        """
    root = _repo(tmp_path, {"docs/chapters/p.md": page, "kernels/k.py": kernel})
    problems = checks.include_problems(root)
    assert len(problems) == 5, "\n".join(problems)
    gone, wrapper, half, lines, block = problems
    assert gone.startswith("docs/chapters/p.md:5: ") and "kernels/gone.py does not exist" in gone
    assert wrapper.startswith("docs/chapters/p.md:6: ") and 'no such section (sections: half, kernel)' in wrapper
    assert "# --8<-- [start:wrapper]" in wrapper and "Fix:" in wrapper
    assert half.startswith("docs/chapters/p.md:7: ") and "not closed" in half
    assert lines.startswith("docs/chapters/p.md:8: ") and "by line numbers" in lines and '"kernels/k.py:NAME"' in lines
    assert block.startswith("docs/chapters/p.md:12: ") and "kernels/also_gone.py does not exist" in block


SHOWN = """\
    ```python title="snippets/ch98/{name}.py"
    --8<-- "snippets/ch98/{name}.py"
    ```
    ```text title="Output"
    --8<-- "snippets/ch98/{name}.out"
    ```
    """


def test_snippet_check(tmp_path):
    root = _repo(tmp_path, {
        "docs/chapters/98-a.md": SHOWN.format(name="good") + SHOWN.format(name="untested")
        + '--8<-- "snippets/ch98/no_output_shown.py"\n' + '--8<-- "snippets/ch98/shown_helper.py"\n',
        "snippets/ch98/good.py": "import helper\nimport shown_helper\nprint(helper.X)\n",
        "snippets/ch98/good.out": "1\n",
        "snippets/ch98/helper.py": "X = 1\n",  # imported by a sibling, not shown: needs nothing
        "snippets/ch98/shown_helper.py": "Y = 2\n",  # imported and shown: needs a test
        "snippets/ch98/untested.py": "print(2)\n",
        "snippets/ch98/untested.out": "2\n",
        "snippets/ch98/hidden.py": "print(3)\n",
        "snippets/ch98/no_output_shown.py": "print(4)\n",
        "snippets/ch98/no_output_shown.out": "4\n",
        "snippets/ch98/orphan.out": "5\n",
        "tests/test_ch98_snippets.py": 'CHECKED = ["snippets/ch98/good.py", "snippets/ch98/no_output_shown.py"]\n'
                                       'check(f"snippets/ch98/{name}.py") for name in ["other_name"]\n',
    })
    problems = checks.snippet_problems(root)
    by_file = {}
    for problem in problems:
        by_file.setdefault(problem.split(":")[0], []).append(problem)
    assert set(by_file) == {"snippets/ch98/untested.py", "snippets/ch98/hidden.py", "snippets/ch98/shown_helper.py",
                            "snippets/ch98/no_output_shown.py", "snippets/ch98/orphan.out"}, "\n".join(problems)
    [untested] = by_file["snippets/ch98/untested.py"]
    assert "no test runs it" in untested and "tests/test_ch98_snippets.py" in untested
    assert 'book.snippets.check("snippets/ch98/untested.py")' in untested
    hidden = " ".join(by_file["snippets/ch98/hidden.py"])
    assert "no page includes it" in hidden and "no test runs it" in hidden
    assert "python -m book.snippets --write snippets/ch98/hidden.py" in hidden
    assert "no test runs it" in by_file["snippets/ch98/shown_helper.py"][0]
    assert "not its output" in by_file["snippets/ch98/no_output_shown.py"][0]
    assert "does not exist" in by_file["snippets/ch98/orphan.out"][0]


def test_a_test_may_build_the_snippet_path_from_its_name(tmp_path):
    root = _repo(tmp_path, {
        "docs/chapters/98-a.md": SHOWN.format(name="count"),
        "snippets/ch98/count.py": "print(1)\n",
        "snippets/ch98/count.out": "1\n",
        "tests/test_ch98_snippets.py": 'def _check(name):\n    return check(f"snippets/ch98/{name}.py")\n\n'
                                       'def test_count():\n    _check("count")\n',
    })
    assert checks.snippet_problems(root) == []


REFERENCE = "gpu-a"
ARCHIVE = {"since": "2026-11-28", "why": "no such GPU any more", "names": ["GPU B", "B1"]}


def _result(gpu: str = REFERENCE, stale: tuple[str, ...] = (), archived: dict | None = None) -> dict:
    return {"path": f"results/{gpu}/toy.json", "gpu": gpu, "gpu_name": f"Vendor {gpu.upper()}", "archived": archived,
            "date": "2026-11-24", "commit": "a90b11923a5511fa03a9ac84400215838366f13b", "stale": list(stale),
            "measured": ["book/bench/toy.py", "kernels/toy.py"]}


def _benchmark(**changes) -> dict:
    benchmark = {"name": "toy", "chapter": "ch98", "module": "book/bench/toy.py",
                 "sources": ["kernels/toy.py", "book/bench/toy.py"], "results": [_result()]}
    benchmark.update(changes)
    return benchmark


def test_benchmark_check_without_results():
    [problem] = checks.check_benchmark(_benchmark(results=[]), REFERENCE)
    assert problem.startswith("book/bench/toy.py: benchmark toy (ch98) has no results file")
    assert 'make refresh ONLY="ch98"' in problem


def test_benchmark_check_with_stale_and_fresh_results():
    assert checks.check_benchmark(_benchmark(), REFERENCE) == []
    [problem] = checks.check_benchmark(_benchmark(results=[_result(stale=["kernels/toy.py"])]), REFERENCE)
    assert problem.startswith("results/gpu-a/toy.json: stale results of toy (ch98)") and "kernels/toy.py" in problem
    assert checks.mentions(problem, "ch98") and not checks.mentions(problem, "refresh")
    grown = _benchmark(sources=["kernels/toy.py", "kernels/new.py", "book/bench/toy.py"])
    [problem] = checks.check_benchmark(grown, REFERENCE)
    assert "kernels/new.py" in problem and "make refresh" in problem


def test_a_stale_file_is_accepted_on_an_archived_gpu_only():
    archived = _result("gpu-b", stale=["kernels/toy.py"], archived=ARCHIVE)
    assert checks.check_benchmark(_benchmark(results=[_result(), archived]), REFERENCE) == []
    other = _result("gpu-c", stale=["kernels/toy.py"])
    [problem] = checks.check_benchmark(_benchmark(results=[_result(), archived, other]), REFERENCE)
    assert problem.startswith("results/gpu-c/toy.json: stale results of toy (ch98)")
    reference = _result(stale=["kernels/toy.py"])
    [problem] = checks.check_benchmark(_benchmark(results=[reference, archived]), REFERENCE)
    assert problem.startswith("results/gpu-a/toy.json: stale results of toy (ch98)")


def test_a_benchmark_needs_a_results_file_on_the_reference_gpu():
    elsewhere = _benchmark(results=[_result("gpu-b", archived=ARCHIVE)])
    [problem] = checks.check_benchmark(elsewhere, REFERENCE)
    assert problem.startswith("book/bench/toy.py: benchmark toy (ch98) has no results file on the reference GPU "
                              "(results/gpu-a/toy.json)")
    assert 'make refresh ONLY="ch98"` on the reference GPU (gpu-a, named in book/gpus.py)' in problem
    assert checks.check_benchmark({**elsewhere, "awaiting_gpu": "issue 99"}, REFERENCE) == [problem]


def test_archived_results_lists_the_stale_files_of_archived_gpus():
    stale = _result("gpu-b", stale=["kernels/toy.py"], archived=ARCHIVE)
    grown = _benchmark(sources=["kernels/toy.py", "kernels/new.py", "book/bench/toy.py"],
                       results=[_result(), stale, _result("gpu-c", stale=["kernels/toy.py"])])
    fresh = _benchmark(name="other", results=[_result("gpu-b", archived=ARCHIVE)])
    assert checks.archived_results({"reference_gpu": REFERENCE, "benchmarks": [grown, fresh]}) == [
        "results/gpu-b/toy.json: measured 2026-11-24 at a90b11923a55; changed since: kernels/toy.py, kernels/new.py"]


def test_make_check_prints_each_accepted_archived_file(tmp_path, monkeypatch, capsys):
    archived = _result("gpu-b", stale=["kernels/toy.py"], archived=ARCHIVE)
    report = {"reference_gpu": REFERENCE, "benchmarks": [_benchmark(results=[_result(), archived])], "orphans": []}
    monkeypatch.setattr(checks, "benchmarks_report", lambda root: report)
    assert checks.main(["--root", str(tmp_path), "--only", "results"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "results: ok",
        "archived (accepted, shown with a notice): results/gpu-b/toy.json: measured 2026-11-24 at a90b11923a55; "
        "changed since: kernels/toy.py"]
    assert checks.main(["--root", str(tmp_path), "--only", "results", "--grep", "gpu-c"]) == 0
    assert capsys.readouterr().out.splitlines() == ["results: ok"]


def test_results_check_in_a_copy_of_the_book(tmp_path):
    """A changed kernel makes its results stale (accepted, and listed, on an archived GPU); a missing or unknown
    results file is reported, and so is a benchmark with no file on the reference GPU."""
    book = copy_book(tmp_path / "book")
    reference = book / "results" / gpus.REFERENCE_GPU / "vector_add.json"
    if not reference.is_file():
        pytest.skip("no vector_add results committed on the reference GPU")
    kernel = book / "kernels/vector_add.py"
    kernel.write_text(kernel.read_text() + "\n# changed after the numbers were measured\n")
    for path in (book / "results").glob("*/gpu_basics.json"):
        path.unlink()
    (book / "results" / gpus.REFERENCE_GPU / "matmul.json").unlink(missing_ok=True)
    orphan = reference.with_name("retired_benchmark.json")
    shutil.copy(reference, orphan)
    problems = checks.results_problems(book)
    stale = [p for p in problems if p.startswith(reference.relative_to(book).as_posix())]
    assert stale and "kernels/vector_add.py" in stale[0] and 'make refresh ONLY="ch02"' in stale[0]
    assert any(p.startswith("book/bench/gpu_basics.py: benchmark gpu_basics (ch01) has no results") for p in problems)
    assert any(p.startswith(orphan.relative_to(book).as_posix() + ": no benchmark") for p in problems)
    if list((book / "results").glob("*/matmul.json")):
        assert any(p.startswith("book/bench/matmul.py: benchmark matmul (ch03) has no results file on the reference")
                   for p in problems)
    archived = [path for path in (book / "results").glob("*/vector_add.json") if gpus.is_archived(path.parent.name,
                                                                                                  book / "results")]
    for path in archived:
        rel = path.relative_to(book).as_posix()
        assert not any(p.startswith(rel) for p in problems)
        assert any(line.startswith(f"{rel}: measured ") and "kernels/vector_add.py" in line.split("changed since: ")[1]
                   for line in checks.archived(book))


def test_lint_check_names_file_line_and_rule(tmp_path):
    root = _write(tmp_path, {"pyproject.toml": (ROOT / "pyproject.toml").read_text(),
                             "book/bad.py": "import os\n"})
    [problem] = checks.lint_problems(root)
    assert problem.startswith("book/bad.py:1:") and "F401" in problem and "ruff check --fix" in problem


def test_problems_about_a_chapter():
    page = 'docs/chapters/08-x.md: missing the standard section "## Recap". Fix: see tests/test_ch02_snippets.py.'
    assert checks.mentions(page, "ch08") and checks.mentions(page, "08-x")
    assert not checks.mentions(page, "ch02")  # named only in the fix


def test_command_prints_every_problem_and_fails(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": "# 98. A chapter\n"})
    done = subprocess.run([sys.executable, "-m", "book.checks", "--root", str(root), "--only", "chapters",
                           "includes"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert "chapters: 1 problem(s)" in done.stdout and "includes: ok" in done.stdout
    assert "docs/chapters/98-a.md: missing the standard sections" in done.stdout
    clean = _repo(tmp_path / "clean", {"docs/chapters/98-a.md": GOOD_CHAPTER})
    done = subprocess.run([sys.executable, "-m", "book.checks", "--root", str(clean), "--only", "chapters"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    json.dumps(done.stdout)  # plain text, no exception


def test_a_benchmark_awaiting_its_first_gpu_run_is_accepted_only_without_stale_files():
    entry = {"name": "x", "chapter": "ch99", "module": "book/bench/x.py", "sources": ["kernels/x.py"], "results": []}
    assert "has no results file" in checks.check_benchmark(entry, "g")[0]
    assert checks.check_benchmark({**entry, "awaiting_gpu": "issue 99"}, "g") == []
    stale = {"path": "results/g/x.json", "gpu": "g", "archived": None, "stale": ["kernels/x.py"],
             "measured": ["kernels/x.py"]}
    assert "stale results" in checks.check_benchmark({**entry, "awaiting_gpu": "issue 99", "results": [stale]}, "g")[0]


KERNEL = "import triton\n\n\n@triton.jit\ndef k():\n    pass\n"
SHOWS_KERNEL = GOOD_CHAPTER.replace("## Pitfalls", '```python\n    --8<-- "kernels/k.py"\n    ```\n\n    ## Pitfalls')


def test_a_chapter_kernel_needs_a_benchmark_and_a_gpu_test(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": SHOWS_KERNEL, "kernels/k.py": KERNEL})
    assert checks.unfinished_problems(root) == [
        'docs/chapters/98-a.md: shows kernels/k.py, which no benchmark measures. Fix: add book/bench/NAME.py with '
        'chapter="ch98" and "kernels/k.py" in its sources (CONTRIBUTING.md, "Snippets, kernels, tests and '
        'benchmarks").',
        "docs/chapters/98-a.md: shows kernels/k.py, which no GPU test runs. Fix: add tests marked "
        "`@pytest.mark.gpu` to tests/test_k.py that compare it with a float64 reference on the GPU.",
    ]


def test_a_chapter_benchmark_needs_a_results_view_on_the_page(tmp_path):
    bench = 'BENCHMARK = Benchmark(name="kbench", chapter="ch98", sources=["kernels/k.py"])\n'
    gpu_test = "import pytest\n\nfrom kernels import k\n\n\n@pytest.mark.gpu\ndef test_k():\n    k\n"
    root = _repo(tmp_path, {"docs/chapters/98-a.md": SHOWS_KERNEL, "kernels/k.py": KERNEL,
                            "book/bench/kbench.py": bench, "tests/test_k.py": gpu_test})
    assert checks.unfinished_problems(root) == [
        "docs/chapters/98-a.md: the chapter's benchmark kbench has no results view on the page. Fix: show its "
        'views with `<!-- results: kbench VIEW -->` lines under "## Measure it" (the views are listed in '
        "book/bench/kbench.py)."]
    page = root / "docs/chapters/98-a.md"
    (root / "docs/more.md").write_text("# More\n\n<!-- results: kbench table -->\n")
    page.write_text(page.read_text() + "\nSee [its own page](../more.md).\n")
    assert checks.unfinished_problems(root) == []  # shown on a top-level page the chapter links to
    page.write_text(page.read_text().replace("See [its own page](../more.md).", "<!-- results: kbench table -->"))
    assert checks.unfinished_problems(root) == []


def test_host_side_python_in_kernels_needs_no_gpu_test(tmp_path):
    page = SHOWS_KERNEL.replace("kernels/k.py", "kernels/plan.py")
    root = _repo(tmp_path, {"docs/chapters/98-a.md": page, "kernels/plan.py": "def plan():\n    return 1\n"})
    assert checks.unfinished_problems(root) == []


# The figures check: measured figures typed into prose are flagged, labelled and non-prose ones are not


def _figures(tmp_path: Path, page: str, files: dict[str, str] | None = None) -> list[str]:
    root = _repo(tmp_path, {"docs/chapters/98-a.md": page, **(files or {})})
    return checks.figure_problems(root)


def _flagged(problems: list[str]) -> list[str]:
    """The quoted figure of each problem."""
    return [problem.split('"')[1] for problem in problems]


@pytest.mark.parametrize(
    ("page", "figure"),
    [
        ("Our kernel runs at 612 TFLOP/s at N = 4096.", "612 TFLOP/s"),
        ("It ran at 480 TFLOPS.", "480 TFLOPS"),
        ("The naive version managed 9.5 GFLOP/s.", "9.5 GFLOP/s"),
        ("A copy moves 3,030 GB/s.", "3,030 GB/s"),
        ("It reads at 2.9\u00a0TB/s in our run.", "2.9\u00a0TB/s"),
        ("Each call takes 1.2–1.5 ms.", "1.2–1.5 ms"),
        ("Each call takes 1.2-1.5 ms.", "1.2-1.5 ms"),
        ("A launch costs about 5 µs.", "5 µs"),
        ("A launch costs about 5 us.", "5 us"),
        ("The loop body takes 40 ns.", "40 ns"),
        ("The whole run took 3 milliseconds.", "3 milliseconds"),
        ("The kernel takes 1 ms, which is fast.", "1 ms"),
        ("The naive version managed 9.5 Tflop/s.", "9.5 Tflop/s"),
        ("That is \\(\\approx 0.24\\) ms per call.", "0.24 ms"),
        ("The kernel is 1.07× cuBLAS at 4096.", "1.07×"),
        ("The flash backend is at 0.97x of ours.", "0.97x"),
        ("With 64 keys it was 12-16% slower.", "12-16%"),
        ("Against cuDNN the step gains +5%.", "+5%"),
        ("Our kernel reaches 65 % of torch.matmul.", "65 %"),
        ("It reaches 65% of `torch.matmul`.", "65%"),
        ("The speed-up is 1.8×.", "1.8×"),
        ("Our kernel is 1.5 times as fast as PyTorch.", "1.5 times"),
        ("Our kernel reaches 1.5× the speed of the copy.", "1.5×"),
        ("Our kernel moves its bytes at 80% of the copy's speed.", "80%"),
        ("In our runs timed in turns, head dim 64 was just under 1.0×.", "1.0×"),
        ("At head dim 128 it gained the predicted 5-10%.", "5-10%"),
        ("It reaches 65 percent of cuBLAS.", "65 percent"),
        ("We measured 1.2-1.5× over the readable kernel.", "1.2-1.5×"),
        ("## Our kernel at 700 TFLOP/s", "700 TFLOP/s"),
        ("[^1]: Our kernel took 4 ms.", "4 ms"),
    ],
)
def test_a_typed_measured_figure_is_flagged(tmp_path, page, figure):
    problems = _figures(tmp_path, page)
    assert _flagged(problems) == [figure], problems


PASSING_FIGURES = {  # labelled, arithmetic, or not prose
    "datasheet": "The H100 SXM5 datasheet gives 3.35 TB/s.",
    "published": "The FlashAttention-3 paper's published H100 figure is 740 TFLOP/s (arXiv 2407.08608).",
    "data-sheet": "The A100 Data Sheet lists 2,039 GB/s for the SXM card.",
    "target": "The target is at least 0.9× cuBLAS; the goal is 1.0×.",
    "made-up": "At a made-up 500 TFLOP/s that takes 2.2 ms.",
    "whole-factor": "Two passes of the kernel need 2× the memory, so it is twice as slow.",
    "bytes": "Reading twice, the kernel moves 1.5 times the copy's bytes, and 1.5× the traffic of the copy.",
    "tiles": "A causal kernel computes 51.6% of the tiles and 0.5× the FLOPs, so it can be faster.",
    "fewer": "FlashAttention moves 3.4 times fewer bytes.",
    "sizes": "A 128 × 64 tile of the kernel holds 8192 scores, and 0x1F is 31 in the kernel's code.",
    "probability": "With probability 50% a coin lands heads.",
    "gib": "1 GiB is about 7% more than 1 GB.",
    "definition": "Bandwidths are decimal: 1 TB/s is 10¹² bytes per second, and 1 µs = 1,000 ns.",
    "arithmetic": "Causal attention does half the work of the kernel: 4·N²·d FLOPs become 2·N²·d.",
    "product": "The kernel does 2.2 × \\(10^{12}\\) FLOPs, 1.1 × 10 of them causal.",
    "versions": "The kernel keeps H100 and v2.11 apart, and 3.14 is not a ratio.",
    "abbreviations": "e.g. the datasheet gives 3.35 TB/s, i.e. the peak.",
    "fence": "```text\nour kernel: 612 TFLOP/s, 1.07× cuBLAS\n```",
    "indented-fence": "    ```python\n    # the kernel took 3 ms\n    ```",
    "nested-fence": "````markdown\n```text\n```\nthe kernel: 5 ms\n````",
    "code-span": 'Timed with `gpu_ms(fn)`, printed as `0.5 ms`: see the output.\n--8<-- "snippets/ch98/x.out"',
    "include-block": "--8<--\nsnippets/ch98/run 5 ms.out\n--8<--",
    "comments": "<!-- results: toy table -->\n<!-- the kernel was 1.07× cuBLAS and 3 ms -->",
    "multi-line-comment": "<!-- a comment over\ntwo lines: 3 ms -->",
    "inline-math": "The cost of the kernel is \\(4 N^2 d\\) at \\(1.5\\,\\text{ms}\\) or \\[ 2\\text{ ms} \\].",
    "display-math": "$$\nt = 2.2\\,\\text{ms} \\text{ for the kernel, } 1.07\\times\n$$",
    "links": "See [the run](https://example.com/run-5ms/1.07x-cuBLAS) and <https://example.com/3ms>.",
    "bare-url": "The kernel's page: https://example.com/65%/5ms",
    "reference-link": '[run]: https://example.com/5ms "The kernel at 5 ms"',
}


@pytest.mark.parametrize("page", PASSING_FIGURES.values(), ids=PASSING_FIGURES.keys())
def test_labelled_or_non_prose_figures_pass(tmp_path, page):
    assert _figures(tmp_path, page) == []


def test_figures_problem_names_the_page_the_line_and_the_fix(tmp_path):
    page = "# 98. A chapter\n\nThe kernel is fast.\nIt runs at\n612 TFLOP/s, 1.07× cuBLAS.\n"
    [unit, ratio] = _figures(tmp_path, page)
    assert unit.startswith('docs/chapters/98-a.md:5: "612 TFLOP/s" reads as a measured figure typed into the page.')
    assert ratio.startswith('docs/chapters/98-a.md:5: "1.07×" in a sentence that names "cuBLAS" reads as a measured')
    assert "Fix: render it from a results view (a line `<!-- results: BENCHMARK VIEW -->`" in unit
    assert "book/bench/<name>.py" in unit and "say it without the figure" in unit
    assert "datasheet or published figure, say so and name its source in the same sentence" in unit


def test_a_label_speaks_for_its_own_sentence_only(tmp_path):
    page = "The datasheet gives 3.35 TB/s. Our copy\nreached 3.0 TB/s. The target is 0.9× cuBLAS.\n"
    [problem] = _figures(tmp_path, page)
    assert problem.startswith('docs/chapters/98-a.md:2: "3.0 TB/s"')


def test_list_items_and_admonitions_are_sentences_of_their_own(tmp_path):
    page = ("- The datasheet gives 3.35 TB/s\n- our copy reached 3.0 TB/s\n\n??? note \"Datasheet\"\n"
            "    the kernel took 2 ms\n")
    assert _flagged(_figures(tmp_path, page)) == ["3.0 TB/s", "2 ms"]


def test_a_table_row_is_a_sentence_read_with_its_header_and_caption(tmp_path):
    table = "| N | ours / cuBLAS | time |\n|---|---:|---|\n| 4096 | 1.07× | 2 ms |\n| 8192 | 0.98× | 9 ms |\n"
    problems = _figures(tmp_path, "Measured on our H100.\n\n" + table)
    assert [p.split(": ")[0] for p in problems] == ["docs/chapters/98-a.md:5"] * 2 + ["docs/chapters/98-a.md:6"] * 2
    assert _flagged(problems) == ["1.07×", "2 ms", "0.98×", "9 ms"]
    assert _figures(tmp_path / "caption", table + "\n*Published by the vendor (arXiv 2407.08608).*\n") == []
    assert _figures(tmp_path / "above", "*Datasheet values.*\n\n" + table) == []
    assert _figures(tmp_path / "prose", table + "\nA paragraph that says datasheet.\n") != []
    assert _figures(tmp_path / "header", table.replace("| time |", "| datasheet time |")) == []
    assert _flagged(_figures(tmp_path / "in-header", "| 3.35 TB/s |\n|---|\n")) == ["3.35 TB/s"]
    assert _figures(tmp_path / "in-header-caption", "| 3.35 TB/s |\n|---|\n\n*From the datasheet.*\n") == []
    assert _flagged(_figures(tmp_path / "bold", table + "\n**Datasheet** values follow.\n")) != []


def test_a_figure_that_a_snippet_on_the_page_prints_passes(tmp_path):
    files = {"snippets/ch98/share.py": "", "snippets/ch98/share.out": "share 0.516, speed-up 1.94x, 3 tiles\n"}
    shown = '```text title="Output"\n--8<-- "snippets/ch98/share.out"\n```\n\n'
    page = shown + "The kernel can be at most 1.94× faster: it computes 51.6% of the tiles.\n"
    assert _figures(tmp_path, page, files) == []
    page = shown + "The kernel was 1.95× faster, 61.6% of the time, and 3% slower once.\n"
    assert _flagged(_figures(tmp_path / "other", page, files)) == ["1.95×", "61.6%", "3%"]
    unshown = "The kernel can be at most 1.94× faster.\n"
    assert _flagged(_figures(tmp_path / "unshown", unshown, files)) == ["1.94×"]


def test_figures_check_runs_on_every_page(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": GOOD_CHAPTER, "docs/glossary.md": "# Glossary\n\nSDPA: 5 ms.\n"})
    [problem] = checks.figure_problems(root)
    assert problem.startswith('docs/glossary.md:3: "5 ms"')
    assert "figures" in checks.CHECKS


# The comparisons check: the prose may compare with an archived GPU only where that GPU's view is fresh

COMPARES = "# 98. A chapter\n\n<!-- results: toy table -->\n\nOn the B1 our kernel\nsits behind cuDNN at every N.\n"


def _comparisons(tmp_path: Path, page: str, stale: tuple[str, ...] = ("toy",)) -> list[str]:
    root = _repo(tmp_path, {"docs/chapters/98-a.md": page})
    gpu = checks.ArchivedGpu("Vendor GPU B", ("GPU B", "B1"), set(stale))
    return checks.check_comparisons(root, root / "docs/chapters/98-a.md", [gpu])


def test_a_sentence_that_reads_a_stale_archived_view_is_flagged(tmp_path):
    [problem] = _comparisons(tmp_path, COMPARES)
    assert problem.startswith('docs/chapters/98-a.md:5: "B1" in a sentence that reads a measurement ("our kernel")')
    assert "the page shows the archived Vendor GPU B's stale results (toy: table)" in problem
    assert problem.endswith("Fix: say it of the reference GPU's numbers, or drop the comparison; an archived GPU's "
                            "tab may be compared with only while its results are fresh.")


def test_the_same_sentence_passes_where_the_archived_view_is_fresh(tmp_path):
    assert _comparisons(tmp_path, COMPARES, stale=()) == []
    assert _comparisons(tmp_path / "other", COMPARES, stale=("other_benchmark",)) == []


@pytest.mark.parametrize(
    "sentence",
    ["The B1 leads at head dim 64.", "On GPU B the table has one row above the bound.",
     "Our probes on the B1 are not in the results files.", "The flash backend beats ours on the B1.",
     "The B1 reached the bound, level with the copy."],
)
def test_a_standing_in_the_results_reads_a_measurement(tmp_path, sentence):
    assert len(_comparisons(tmp_path, f"<!-- results: toy table -->\n\n{sentence}\n")) == 1


@pytest.mark.parametrize(
    "sentence",
    ["The B1 datasheet gives 3.35 TB/s, ahead of the A1.", "The B1 has 132 SMs and 50 MB of L2.",
     "The B10 sits behind the copy.", "Its published figure for the B1 is ahead of ours."],
    ids=["datasheet", "no-measurement", "another-name", "published"],
)
def test_a_labelled_or_unrelated_sentence_about_an_archived_gpu_passes(tmp_path, sentence):
    assert _comparisons(tmp_path, f"<!-- results: toy table -->\n\n{sentence}\n") == []


def test_a_datasheet_value_of_the_h100_passes(tmp_path):
    root = _repo(tmp_path, {"docs/chapters/98-a.md": "<!-- results: toy table -->\n\n"
                                                     "The H100 SXM5 datasheet gives 3.35 TB/s.\n"})
    h100 = checks.ArchivedGpu("NVIDIA H100 80GB HBM3", ("H100",), {"toy"})
    assert checks.check_comparisons(root, root / "docs/chapters/98-a.md", [h100]) == []


def test_archived_gpus_of_a_report():
    stale = _result("gpu-b", stale=["kernels/toy.py"], archived=ARCHIVE)
    report = {"reference_gpu": REFERENCE, "benchmarks": [
        _benchmark(results=[_result(stale=["kernels/toy.py"]), stale]),
        _benchmark(name="fresh", results=[_result(), _result("gpu-b", archived=ARCHIVE)])]}
    assert checks.archived_gpus(report) == [checks.ArchivedGpu("Vendor GPU-B", ("GPU B", "B1"), {"toy"})]
    assert "comparisons" in checks.CHECKS
