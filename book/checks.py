"""The book's own checks: what a contributor must still do before a chapter is complete.

Each check takes the root of a copy of the repository and returns a list of problems. A problem is one
line that starts with the file it is about and ends with the fix, for example:

    snippets/ch08/first_example.py: no test runs it. Fix: add a test to tests/test_ch08_snippets.py ...

The test suite runs every check (tests/test_checks.py), and so does `make check` (python -m book.checks),
which prints every problem at once. The checks:

- chapters: every page in docs/chapters/ has the standard sections, in order, and is in the nav.
- includes: every `--8<--` include in docs/ names a file that exists, and a section that the file marks.
- snippets: every snippet program is shown by a page (with its stored output) and run by a test.
- results: every benchmark has a fresh results file on the reference GPU (book/gpus.py), and none was measured
  on older sources, but on an archived GPU: its stale files are accepted, shown with a notice, and listed by
  `make check`.
- unfinished: no chapter still holds the template's text, example snippet or test; a chapter's benchmark shows
  its views on the page; a kernel that a page shows has a benchmark and a GPU test. A page marked draft (an
  admonition titled "Draft" that says what is missing) is accepted, shown to readers, and listed by `make check`.
- figures: no page types a measured figure into its prose (TFLOP/s, GB/s, µs, ms...; a ratio or share such as
  1.07× or 65% in a sentence that names a kernel, a peer or a measured run). Measured figures reach pages through
  results views; a datasheet or published figure, a target or a made-up figure passes when its sentence says so.
- comparisons: the prose reads the reference GPU. A sentence may compare with an archived GPU only where that
  GPU's view on the page is fresh.
- lint: `ruff check` finds nothing.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

# The headings every chapter has, in this order (other sections go between them).
STANDARD_SECTIONS = [
    "What you will learn",
    "Pitfalls and misconceptions",
    "Say it out loud",
    "Exercises",
    "Recap",
]
TEMPLATE = "templates/chapter.md"

# `--8<-- "path"` or `--8<-- 'path'`, possibly escaped with a leading `;` (then it is not an include).
_INCLUDE_LINE = re.compile(r"""^\s*(?P<escape>;*)--8<--\s+(?P<quote>["'])(?P<target>[^"']+)(?P=quote)\s*$""")
_BLOCK_FENCE = re.compile(r"^\s*--8<--\s*$")
_SECTION_MARK = re.compile(r"--8<--\s+\[(?P<kind>start|end):(?P<name>[^\]]+)\]")
_HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.+?)\s*(\{[^}]*\})?\s*$")
_LINKED_PAGE = re.compile(r"\]\(\.\./([\w-]+\.md)[)#]")  # a chapter's link to a top-level page of docs/
_RESULTS_MARKER = re.compile(r"<!-- results: (?P<benchmark>\w+) (?P<view>[\w-]+) -->")


# ---------------------------------------------------------------------------------------------------
# Reading the repository


@dataclass(frozen=True)
class Include:
    page: str  # the page, relative to the root
    line: int  # 1-based line number in the page
    target: str  # what follows --8<--, e.g. "kernels/x.py:kernel"

    @property
    def path(self) -> str:
        return _split_target(self.target)[0]

    @property
    def section(self) -> str | None:
        return _split_target(self.target)[1]


def _split_target(target: str) -> tuple[str, str | None]:
    """'kernels/x.py:kernel' -> ('kernels/x.py', 'kernel'); 'a.py:3:9' -> ('a.py', '3:9'); 'a.py' -> ('a.py', None)."""
    path, sep, rest = target.partition(":")
    return (path, rest) if sep else (path, None)


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _pages(root: Path) -> list[Path]:
    return sorted((root / "docs").glob("**/*.md"))


def chapter_pages(root: Path) -> list[Path]:
    return sorted((root / "docs" / "chapters").glob("*.md"))


def snippet_files(root: Path) -> list[Path]:
    return sorted((root / "snippets").glob("**/*.py"))


def includes(root: Path) -> list[Include]:
    """Every include in the pages, single-line (`--8<-- "file"`) and block form (lines between two `--8<--`)."""
    found = []
    for page in _pages(root):
        in_block = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if _BLOCK_FENCE.match(line):
                in_block = not in_block
                continue
            if in_block:
                target = line.strip()
                if target and not target.startswith(";"):
                    found.append(Include(_rel(root, page), number, target))
                continue
            match = _INCLUDE_LINE.match(line)
            if match and not match["escape"]:
                found.append(Include(_rel(root, page), number, match["target"]))
    return found


def sections_in(path: Path) -> dict[str, tuple[int, int]]:
    """{name: (line of its start mark, line of its end mark)} of the `--8<-- [start:NAME]` marks in a file."""
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _SECTION_MARK.search(line)
        if match:
            (starts if match["kind"] == "start" else ends).setdefault(match["name"], number)
    return {name: (starts.get(name, 0), ends.get(name, 0)) for name in starts.keys() | ends.keys()}


def _tests_text(root: Path) -> dict[str, str]:
    return {_rel(root, path): path.read_text() for path in sorted((root / "tests").glob("**/*.py"))}


def _imported_names(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def snippet_modules(root: Path) -> set[str]:
    """Snippets that a sibling snippet imports (helpers rather than programs), relative to the root."""
    modules = set()
    for folder in sorted({path.parent for path in snippet_files(root)}):
        siblings = {path.stem: path for path in folder.glob("*.py")}
        for path in siblings.values():
            for name in _imported_names(path) & siblings.keys():
                if siblings[name] != path:
                    modules.add(_rel(root, siblings[name]))
    return modules


def nav_pages(root: Path) -> list[str]:
    """Every page named in mkdocs.yml's nav (paths relative to docs/)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may carry tags such as !!python/name:...; the nav never needs them.
    _Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((root / "mkdocs.yml").read_text(), Loader=_Loader) or {}

    found: list[str] = []

    def walk(item: object) -> None:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            for value in item:
                walk(value)
        elif isinstance(item, dict):
            for value in item.values():
                walk(value)

    walk(config.get("nav", []))
    return found


# ---------------------------------------------------------------------------------------------------
# Chapters


def check_chapter(root: Path, page: Path, nav: list[str] | None = None) -> list[str]:
    """The standard sections of one chapter page, in order, and its place in the nav."""
    rel = _rel(root, page)
    lines = page.read_text().splitlines()
    headings = []  # (level, text, line index)
    fenced = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            headings.append((len(match["level"]), match["text"].strip(), index))

    problems = []
    if not headings or headings[0][0] != 1:
        problems.append(f'{rel}: the page does not start with a title. Fix: make its first line "# N. Title" '
                        f"(see {TEMPLATE}).")
    level2 = [(text, index) for level, text, index in headings if level == 2]
    titles = [text for text, _ in level2]
    missing = [name for name in STANDARD_SECTIONS if name not in titles]
    if missing:
        names = ", ".join(f'"## {name}"' for name in missing)
        problems.append(f"{rel}: missing the standard section{'s' if len(missing) > 1 else ''} {names}. Fix: add "
                        f"{'them' if len(missing) > 1 else 'it'}; every chapter has "
                        f"{', '.join(STANDARD_SECTIONS)}, in that order (see {TEMPLATE}).")
    present = [name for name in titles if name in STANDARD_SECTIONS]
    if not missing and present != STANDARD_SECTIONS:
        problems.append(f"{rel}: the standard sections are out of order ({', '.join(present)}). Fix: put them in "
                        f"the order {', '.join(STANDARD_SECTIONS)}.")

    def body(name: str) -> list[str]:
        for i, (text, index) in enumerate(level2):
            if text == name:
                end = level2[i + 1][1] if i + 1 < len(level2) else len(lines)
                return lines[index + 1:end]
        return []

    if "Say it out loud" in titles and not any(line.startswith(">") for line in body("Say it out loud")):
        problems.append(f'{rel}: "## Say it out loud" has no blockquote. Fix: write the short explanation as '
                        f'lines starting with "> ".')
    if "Exercises" in titles and not any(line.startswith("??? success") for line in body("Exercises")):
        problems.append(f'{rel}: "## Exercises" has no solutions. Fix: add them in a collapsible block '
                        f'"??? success \\"Solutions\\"" under the exercises.')
    nav = nav_pages(root) if nav is None else nav
    in_docs = _rel(root / "docs", page)
    if in_docs not in nav:
        problems.append(f"{rel}: not in the nav of mkdocs.yml, so readers cannot reach it. Fix: create chapters "
                        f'with `make chapter NAME=... TITLE="..."`, which adds the nav entry.')
    return problems


def chapter_problems(root: Path) -> list[str]:
    nav = nav_pages(root)
    return [problem for page in chapter_pages(root) for problem in check_chapter(root, page, nav)]


# ---------------------------------------------------------------------------------------------------
# Includes


def check_include(root: Path, include: Include) -> list[str]:
    where = f"{include.page}:{include.line}"
    path, section = include.path, include.section
    target = root / path
    if not target.is_file():
        return [f'{where}: includes "{include.target}", but {path} does not exist. Fix: correct the path '
                f"(relative to the repository root) or add the file."]
    if section is None:
        return []
    if re.fullmatch(r"-?\d*(:-?\d*)?(,.*)?", section):
        return [f'{where}: includes "{include.target}" by line numbers, which break when the file changes. '
                f"Fix: mark the lines with `# --8<-- [start:NAME]` and `# --8<-- [end:NAME]` in {path} and "
                f'include "{path}:NAME".']
    marks = sections_in(target)
    if section not in marks:
        known = ", ".join(sorted(marks)) or "none"
        return [f'{where}: includes section "{section}" of {path}, which has no such section (sections: {known}). '
                f"Fix: add `# --8<-- [start:{section}]` and `# --8<-- [end:{section}]` around the lines in {path}, "
                f"or use one of its sections."]
    start, end = marks[section]
    if not start or not end or end < start:
        return [f'{where}: section "{section}" of {path} is not closed: it needs a start mark before an end mark. '
                f"Fix: mark it with `# --8<-- [start:{section}]` ... `# --8<-- [end:{section}]`."]
    return []


def include_problems(root: Path) -> list[str]:
    return [problem for include in includes(root) for problem in check_include(root, include)]


# ---------------------------------------------------------------------------------------------------
# Snippets


@dataclass
class SnippetIndex:
    """What the snippet checks look at, read once: the pages' includes, the tests' text, the helper modules."""

    root: Path
    included: set[str] = field(default_factory=set)
    tests: dict[str, str] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, root: Path) -> SnippetIndex:
        return cls(root, {include.path for include in includes(root)}, _tests_text(root), snippet_modules(root))


def check_snippet(index: SnippetIndex, snippet: Path) -> list[str]:
    """A snippet program is shown by a page with its stored output, and run by a test.

    A helper module that sibling snippets import needs neither, unless a page shows it: then a test must
    reference it too (the tests of the programs that import it count when they name it).
    """
    root = index.root
    rel = _rel(root, snippet)
    chapter = snippet.parent.name
    out = snippet.with_suffix(".out")
    out_rel = _rel(root, out)
    test_file = f"tests/test_{chapter}_snippets.py"
    is_module = rel in index.modules
    shown = rel in index.included
    problems = []
    if not is_module and not shown:
        problems.append(f"{rel}: no page includes it. Fix: show it in its chapter with "
                        f'`--8<-- "{rel}"` in a ```python title="{rel}"``` block, its output `--8<-- "{out_rel}"` '
                        f"below; or delete it if no page needs it.")
    tested = any(_references(text, rel) for text in index.tests.values())
    if not tested and (shown or not is_module):
        problems.append(f"{rel}: no test runs it. Fix: add a test to {test_file} that calls "
                        f'`book.snippets.check("{rel}")`, asserts the fresh output equals the stored one, '
                        f"and asserts something real about it (see tests/test_ch02_snippets.py).")
    if not is_module:
        if not out.is_file():
            problems.append(f"{rel}: its stored output {out_rel} is missing. Fix: run "
                            f"`.venv/bin/python -m book.snippets --write {rel}`.")
        elif shown and out_rel not in index.included:
            problems.append(f"{rel}: the page shows the code but not its output. Fix: add "
                            f'```text title="Output"``` with `--8<-- "{out_rel}"` under the code.')
    return problems


def _references(test_text: str, snippet: str) -> bool:
    """Whether a test file names a snippet: its whole path, or its folder and its name in quotes (for tests that
    build the path, like `check(f"snippets/ch03/{name}.py")` with `name = "count_loads"`)."""
    if snippet in test_text:
        return True
    folder, _, filename = snippet.rpartition("/")
    stem = filename.removesuffix(".py")
    return folder + "/" in test_text and (f'"{stem}"' in test_text or f"'{stem}'" in test_text)


def snippet_problems(root: Path) -> list[str]:
    index = SnippetIndex.read(root)
    problems = [problem for snippet in snippet_files(root) for problem in check_snippet(index, snippet)]
    for out in sorted((root / "snippets").glob("**/*.out")):
        if not out.with_suffix(".py").is_file():
            problems.append(f"{_rel(root, out)}: stored output of a snippet that does not exist. Fix: delete it, "
                            f"or restore {_rel(root, out.with_suffix('.py'))}.")
    return problems


# ---------------------------------------------------------------------------------------------------
# Results

# Runs inside the copy of the repository being checked, so that its own book.bench, book.gpus (its reference GPU,
# its archived GPUs) and book.provenance (which hashes files relative to that copy) answer.
_RESULTS_PROBE = r"""
import dataclasses, json, sys
from book import ROOT, gpus
from book.bench import ALL
from book.provenance import stale_sources

names = {b.name for b in ALL}
defined_in = {module.BENCHMARK.name: module.__file__ for name, module in list(sys.modules.items())
              if name.startswith("book.bench.") and hasattr(module, "BENCHMARK")}
report = {"reference_gpu": gpus.REFERENCE_GPU, "benchmarks": [], "orphans": []}
for b in ALL:
    module = defined_in.get(b.name) or sys.modules[b.run.__module__].__file__
    files = []
    for path in sorted((ROOT / "results").glob(f"*/{b.name}.json")):
        provenance = json.loads(path.read_text())["provenance"]
        archive = gpus.archive(path.parent.name)
        files.append({"path": path.relative_to(ROOT).as_posix(), "gpu": path.parent.name, "gpu_name": provenance["gpu"],
                      "archived": dataclasses.asdict(archive) if archive else None,
                      "date": provenance["date"][:10], "commit": provenance["commit"],
                      "stale": stale_sources(provenance), "measured": sorted(provenance["sources"])})
    report["benchmarks"].append({"name": b.name, "chapter": b.chapter, "sources": list(b.sources),
                                 "awaiting_gpu": getattr(b, "awaiting_gpu", ""),
                                 "module": __import__("pathlib").Path(module).resolve().relative_to(ROOT).as_posix(),
                                 "results": files})
for path in sorted((ROOT / "results").glob("*/*.json")):
    if path.stem not in names:
        report["orphans"].append(path.relative_to(ROOT).as_posix())
print("\n" + json.dumps(report))
"""


def benchmarks_report(root: Path) -> dict:
    """The benchmarks of a copy of the repository, its reference GPU, and each benchmark's results files: on which
    GPU, whether that GPU is archived, when and at which commit they were measured, and which sources changed since.

    Raises RuntimeError naming the failure if the copy's book.bench cannot be imported (or an ARCHIVED.md read).
    """
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", _RESULTS_PROBE], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _refresh(chapter: str, machine: str = "a GPU machine") -> str:
    return (f'a maintainer runs `make refresh ONLY="{chapter}"` on {machine} (or the GPU workflow, after merge) and '
            f"commits the results file")


def _changed_since(benchmark: dict, result: dict) -> list[str]:
    """The sources of a benchmark that changed, or joined it, since one of its results files was measured."""
    return list(result["stale"]) + [source for source in benchmark["sources"] if source not in result["measured"]]


def check_benchmark(benchmark: dict, reference_gpu: str) -> list[str]:
    """One benchmark (an entry of benchmarks_report) has a results file on the reference GPU, and none is stale but
    on an archived GPU."""
    name, chapter, module = benchmark["name"], benchmark["chapter"], benchmark["module"]
    if not benchmark["results"] and benchmark.get("awaiting_gpu"):
        return []  # declared in the registry, with the reason, and shown as "No measurements yet"
    if not benchmark["results"]:
        return [f"{module}: benchmark {name} ({chapter}) has no results file (results/<gpu>/{name}.json), so its "
                f'views show "No measurements yet" on the pages. Fix: {_refresh(chapter)}.']
    problems = []
    if not any(result["gpu"] == reference_gpu for result in benchmark["results"]):
        machine = f"the reference GPU ({reference_gpu}, named in book/gpus.py)"
        problems.append(f"{module}: benchmark {name} ({chapter}) has no results file on the reference GPU "
                        f"(results/{reference_gpu}/{name}.json), whose numbers the prose reads. "
                        f"Fix: {_refresh(chapter, machine)}.")
    for result in benchmark["results"]:
        changed = _changed_since(benchmark, result)
        if changed and not result["archived"]:
            problems.append(f"{result['path']}: stale results of {name} ({chapter}), measured before "
                            f"{', '.join(changed)} changed or joined the benchmark's sources. "
                            f"Fix: {_refresh(chapter)}.")
    return problems


def archived_results(report: dict) -> list[str]:
    """The stale results files of archived GPUs (which the results check accepts), each with what changed since."""
    found = []
    for benchmark in report["benchmarks"]:
        for result in benchmark["results"]:
            changed = _changed_since(benchmark, result)
            if result["archived"] and changed:
                found.append(f"{result['path']}: measured {result['date']} at {result['commit'][:12]}; "
                             f"changed since: {', '.join(changed)}")
    return found


def archived(root: Path) -> list[str]:
    """The stale results files of archived GPUs, each with when it was measured and what changed since."""
    try:
        return archived_results(benchmarks_report(root))
    except RuntimeError:
        return []  # the results check names the failure


def results_problems(root: Path) -> list[str]:
    try:
        report = benchmarks_report(root)
    except RuntimeError as error:
        return [f"book/bench: the benchmarks cannot be imported (or a results/<gpu>/ARCHIVED.md cannot be read), so "
                f"their results cannot be checked. Fix: make `python -m book.bench --list` work. The error:\n{error}"]
    problems = [problem for benchmark in report["benchmarks"]
                for problem in check_benchmark(benchmark, report["reference_gpu"])]
    for orphan in report["orphans"]:
        problems.append(f"{orphan}: no benchmark of that name is registered in book/bench. Fix: delete the file, "
                        f"or restore the benchmark module that defines it.")
    return problems


# ---------------------------------------------------------------------------------------------------
# Figures

# A number as pages write it (3.35, 1,935, 1 935 with a no-break or thin space), or a range (1.2-1.5, 1.2–1.5),
# not part of a word or of another number (H100, v2.11).
_NUMBER = r"\d+(?:[,\u00a0\u202f\u2009]\d{3})*(?:\.\d+)?"
_FIGURE = rf"(?<![\w.,])[+\-−±]?{_NUMBER}(?:\s?[-–]\s?{_NUMBER})?"
_GAP = r"[ \u00a0\u202f\u2009]?"
_MATH_LEFT = "…"  # what is left of math that is not a plain figure, so that 1.5 × \(10^3\) stays a product
# 1. A number with a throughput or time unit: measured, whatever the sentence says (unless labelled).
_UNIT = r"(?:(?i:[TG]FLOP/?s)|[TGMK]i?B/s|[µμu]s|ms|ns|(?:milli|micro|nano)seconds?)(?![\w/])"
_MEASURED_UNIT = re.compile(rf"{_FIGURE}{_GAP}{_UNIT}")
# ... but not a unit's definition: "1 TB/s is 10¹² bytes per second", "1 µs = 1,000 ns".
_UNIT_DEFINITION = re.compile(rf"(?<![\w.,])1{_GAP}{_UNIT}\s*(?:is|=|equals|means)\s*(?:{_FIGURE}{_GAP}{_UNIT})?")
# 2. A ratio or a share: 1.07×, 1.07x, 1.5 times, 1.2-1.5×, 65%, +5%, 65 percent. Not a whole factor, which reads
# as arithmetic (2× the memory, "twice"), nor a product of sizes (128 × 64, 1.5 × 10³), nor a hex number (0x1F).
_FACTOR = rf"(?<![\w.,])[+\-−±]?(?:{_NUMBER}\s?[-–]\s?{_NUMBER}|\d+\.\d+)"
_RATIO = re.compile(rf"{_FACTOR}(?:{_GAP}×(?!\s*[\d(\\{_MATH_LEFT}])|x(?![\w(])|{_GAP}times\b)"
                    rf"|{_FIGURE}(?:{_GAP}%|{_GAP}percent\b)")
# ... unless it counts work rather than time: 1.5 times the copy's bytes, 51.6% of the tiles, 2.5× the FLOPs.
_OF_A_COUNT = re.compile(r"\s*(?:of\s+|fewer\s+|more\s+|less\s+)?(?:the\s+)?(?:[\w-]+(?:'s|’s)?\s+)?"
                         r"(?:bytes|memory|traffic|FLOPs?|work|loads|stores|reads|writes|tiles|blocks|elements|values|"
                         r"registers)\b", re.IGNORECASE)
# ... which counts as measured in a sentence that names a kernel, a peer or a measured run.
_NAMES_A_MEASUREMENT = re.compile(
    r"\b(?:cuBLAS|cuDNN|SDPA|scaled_dot_product_attention|FlashAttention(?:-\d)?|FA[1234]|(?:flash|efficient|math) "
    r"backend|copy|torch\.matmul|PyTorch|(?:our|the|Triton|Gluon) kernels?|(?:our|the|this|that|a|one|each|every) "
    r"runs?|measured|timed|gained|faster|slower|speed-?ups?)"
    r"(?![\w-])", re.IGNORECASE)
# What a reader must see in the same sentence (or a table's header or caption) for a typed figure to pass: that it
# is a datasheet or published figure, a target set before measuring, or a made-up one (an exercise's round rate).
# Nothing hidden from the reader, such as a comment, counts.
_LABEL = re.compile(r"\b(?:datasheet|data sheet|published|target|goal|made-up|hypothetical|not a measurement)\b",
                    re.IGNORECASE)
_FIGURE_FIX = ("Fix: render it from a results view (a line `<!-- results: BENCHMARK VIEW -->`, adding a view to "
               "book/bench/<name>.py if none says it), or say it without the figure; if it is a datasheet or "
               'published figure, say so and name its source in the same sentence ("the H100 SXM5 datasheet gives '
               '3.35 TB/s"); call a target a target, and a made-up rate made-up.')

# Parts of a page that are not prose, blanked before reading it (their newlines stay, so line numbers hold).
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)  # within a paragraph
_MATH = re.compile(r"\$\$.*?\$\$|\\\[.*?\\\]|\\\((?P<inline>.*?)\\\)", re.DOTALL)
# Inline math that is only a figure, such as \(\approx 0.24\) before "ms" or \(1.9\times\): kept as the figure.
_MATH_FIGURE = re.compile(rf"\s*(?:\\approx|\\sim|[<>=~≈]|\\[lg]eq?)?\s*(?P<figure>{_NUMBER})\s*"
                          r"(?P<unit>\\times|×|\\%|\\,\\%)?\s*")
_LINK_TARGET = re.compile(r"(?<=\])\([^)\s]*(?:\s+\"[^\"]*\")?\)|<https?://[^>]*>|https?://\S+|</?[A-Za-z][^>]*>"
                          r"|^\s*\[(?!\^)[^\]]+\]:\s*\S+.*$", re.MULTILINE)  # not a footnote, which is prose
_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})")
_TABLE_ROW = re.compile(r"^\s*\|")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_BLOCK_START = re.compile(r"^\s*(#{1,6}\s|[-*+]\s|\d+[.)]\s|\?\?\?|!!!)")
_ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "etc.", "al.", "Fig.", "Eq.", "approx.", "No.")


def _keep_lines(text: str, replacement: str = "") -> str:
    return replacement + "\n" * text.count("\n")


def prose(text: str) -> str:
    """A page with everything that is not prose blanked: code blocks and includes, comments (results and figure
    markers among them), math, link targets, URLs and HTML tags. Inline code keeps its words but loses its
    digits, so that `torch.matmul` still names a peer and `BLOCK_N = 64` is no figure. The lines stay in place."""
    lines = []
    fence = ""
    include_block = False
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence:
            if opening and opening["fence"][0] == fence[0] and len(opening["fence"]) >= len(fence) \
                    and not line.strip()[len(opening["fence"]):].strip():
                fence = ""
            line = ""
        elif opening:
            fence, line = opening["fence"], ""
        elif _BLOCK_FENCE.match(line):
            include_block, line = not include_block, ""
        elif include_block or _INCLUDE_LINE.match(line):
            line = ""
        lines.append(line)
    text = "\n".join(lines)
    text = _COMMENT.sub(lambda m: _keep_lines(m[0]), text)
    text = _CODE_SPAN.sub(lambda m: _keep_lines(m[0], re.sub(r"\d", "#", m[2].replace("\n", " "))), text)

    def math(match: re.Match) -> str:
        figure = _MATH_FIGURE.fullmatch(match["inline"] or "-")
        if not figure:
            return _keep_lines(match[0], f" {_MATH_LEFT} ")
        unit = {"": "", "\\times": "×", "×": "×"}.get(figure["unit"] or "", "%")
        return _keep_lines(match[0], f" {figure['figure']}{unit}")

    text = _MATH.sub(math, text)
    return _LINK_TARGET.sub(lambda m: _keep_lines(m[0], " "), text)


@dataclass(frozen=True)
class Sentence:
    line: int  # the line of the page it starts on
    text: str
    breaks: tuple[int, ...] = ()  # where in text the page's next lines start
    labels: str = ""  # for a table row: its table's header row and caption, which speak for every row

    def line_of(self, offset: int) -> int:
        return self.line + sum(1 for start in self.breaks if start <= offset)


def sentences(text: str) -> list[Sentence]:
    """The sentences of a page's prose. A sentence ends at ".", "!" or "?" before a word that does not start in
    lower case (and after no abbreviation such as "e.g."), and at the end of a paragraph, list item, heading or
    admonition title. A table row is a sentence of its own, read with its table's header row and its caption (a
    paragraph in italics right above or below the table)."""
    lines = [line.strip().lstrip(">").strip() for line in prose(text).splitlines()]
    found: list[Sentence] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if block:
            found.extend(_split(block))
            block.clear()

    index = 0
    while index < len(lines):
        line, number = lines[index], index + 1
        if _TABLE_ROW.match(line):
            flush()
            end = index
            while end < len(lines) and _TABLE_ROW.match(lines[end]):
                end += 1
            captions = " ".join([_caption(lines, index, -1), _caption(lines, end - 1, 1)])
            found.append(Sentence(number, line, labels=captions))
            labels = f"{line} {captions}"
            found.extend(Sentence(row + 1, lines[row], labels=labels) for row in range(index + 1, end)
                         if not _TABLE_RULE.match(lines[row]))
            index = end
            continue
        if not line:
            flush()
        elif _BLOCK_START.match(line):
            flush()
            block.append((number, line))
            if line.startswith(("#", "???", "!!!")):
                flush()
        else:
            block.append((number, line))
        index += 1
    flush()
    return found


def _caption(lines: list[str], edge: int, step: int) -> str:
    """The paragraph in italics next to a table (lines[edge] is its first or last row; step says which way)."""
    index = edge + step
    while 0 <= index < len(lines) and not lines[index]:
        index += step
    paragraph = []
    while 0 <= index < len(lines) and lines[index] and not _TABLE_ROW.match(lines[index]):
        paragraph.append(lines[index])
        index += step
    text = " ".join(paragraph[::step])
    return text if re.match(r"\*(?![*\s])|_(?![_\s])", text) else ""


def _split(block: list[tuple[int, str]]) -> list[Sentence]:
    """The sentences of a paragraph, given as (line number, text) pairs."""
    text = " ".join(line for _, line in block)
    line_starts = [0]
    for _, line in block[:-1]:
        line_starts.append(line_starts[-1] + len(line) + 1)
    ends = [end.end() for end in re.finditer(r"[.!?][\"'”’)\]*_]*\s+(?![a-z])", text)
            if not text[:end.start() + 1].endswith(_ABBREVIATIONS)]
    found = []
    for start, stop in zip([0, *ends], [*ends, len(text)], strict=True):
        if text[start:stop].strip():
            line = block[0][0] + sum(1 for s in line_starts if 0 < s <= start)
            breaks = tuple(s - start for s in line_starts if start < s < stop)
            found.append(Sentence(line, text[start:stop], breaks))
    return found


def check_figures(root: Path, page: Path) -> list[str]:
    """Measured figures typed into one page: a number with a throughput or time unit anywhere in its prose, and a
    ratio or share in a sentence that names a kernel, a peer or a measured run. A sentence that labels its figures
    (datasheet, published, target, made-up) passes, and so does a figure that a snippet output on the page prints
    (arithmetic done on a CPU, such as a share of tiles: 51.6% passes where the output prints 0.516)."""
    rel = _rel(root, page)
    printed = _printed_numbers(root, rel)
    problems = []
    for sentence in sentences(page.read_text()):
        context = f"{sentence.labels} {sentence.text}"
        if _LABEL.search(context):
            continue
        definitions = [match.span() for match in _UNIT_DEFINITION.finditer(sentence.text)]
        found = [(match, "") for match in _MEASURED_UNIT.finditer(sentence.text)
                 if not any(start <= match.start() < end for start, end in definitions)]
        names = _NAMES_A_MEASUREMENT.search(context)
        if names:
            found += [(match, f' in a sentence that names "{names[0]}"') for match in _RATIO.finditer(sentence.text)
                      if not _OF_A_COUNT.match(sentence.text, match.end())]
        for match, why in sorted(found, key=lambda item: item[0].start()):
            if not _is_printed(match[0], printed):
                problems.append(f'{rel}:{sentence.line_of(match.start())}: "{match[0].strip()}"{why} reads as a '
                                f"measured figure typed into the page. {_FIGURE_FIX}")
    return problems


def _printed_numbers(root: Path, page: str) -> set[Decimal]:
    """The numbers that the snippet outputs (`.out` files) a page includes print."""
    numbers = set()
    for include in includes(root):
        output = root / include.path
        if include.page == page and output.suffix == ".out" and output.is_file():
            numbers.update(Decimal(number) for number in re.findall(r"\d+(?:\.\d+)?", output.read_text()))
    return numbers


def _is_printed(figure: str, printed: set[Decimal]) -> bool:
    """Whether each number of a figure is printed as it stands (1.94 for 1.94×) or, for a share, as a fraction
    (0.516 for 51.6%, 0.03 for 3%). A whole number as it stands (3 for 3 ms) is in too many outputs to count."""
    share = figure.rstrip().endswith(("%", "percent"))
    for number in re.findall(_NUMBER, figure):
        value = Decimal(re.sub(r"[^\d.]", "", number))
        fraction = value / 100
        if not ((value in printed and value != value.to_integral_value())
                or (share and fraction in printed and fraction != fraction.to_integral_value())):
            return False
    return True


def figure_problems(root: Path) -> list[str]:
    return [problem for page in _pages(root) for problem in check_figures(root, page)]


# ---------------------------------------------------------------------------------------------------
# Comparisons with an archived GPU

# The prose reads the reference GPU. A sentence may compare with an archived GPU only where that GPU's view is fresh:
# once its results are stale, the tab no longer shows what the sentence says of it. A sentence reads a measurement
# when it names a kernel, a peer or a measured run (as for the figures), or a place or a standing in the results.
_READS_A_RESULT = re.compile(r"\b(?:probes?|tabs?|tables?|rows?|results|reach(?:es|ed)|sits|leads?|ahead|behind|"
                             r"level\s+with|beats?)(?![\w-])", re.IGNORECASE)
_COMPARISON_FIX = ("Fix: say it of the reference GPU's numbers, or drop the comparison; an archived GPU's tab may be "
                   "compared with only while its results are fresh.")


@dataclass
class ArchivedGpu:
    name: str  # as its results files say, e.g. "NVIDIA H100 80GB HBM3"
    names: tuple[str, ...]  # how the prose names it, e.g. ("H100",)
    stale: set[str] = field(default_factory=set)  # the benchmarks whose results on it are stale


def archived_gpus(report: dict) -> list[ArchivedGpu]:
    """The archived GPUs of a benchmarks_report, each with the benchmarks whose results on it are stale."""
    found: dict[str, ArchivedGpu] = {}
    for benchmark in report["benchmarks"]:
        for result in benchmark["results"]:
            if result["archived"]:
                names = tuple(result["archived"]["names"])
                gpu = found.setdefault(result["gpu"], ArchivedGpu(result["gpu_name"], names))
                if _changed_since(benchmark, result):
                    gpu.stale.add(benchmark["name"])
    return list(found.values())


def check_comparisons(root: Path, page: Path, archived: list[ArchivedGpu]) -> list[str]:
    """Sentences of one page that read a measurement of an archived GPU whose view on the page is stale. A sentence
    that labels what it says (datasheet, published, ...) passes."""
    rel = _rel(root, page)
    text = page.read_text()
    problems = []
    for gpu in archived:
        stale = _stale_views(text, gpu)
        if stale:
            problems += _comparisons_with(rel, sentences(text), gpu, stale)
    return problems


def _stale_views(text: str, gpu: ArchivedGpu) -> str:
    """The views a page shows of the benchmarks whose results on an archived GPU are stale, as
    "causal: table, plot; worklog: table", or "" if there are none."""
    stale: dict[str, list[str]] = {}
    for match in _RESULTS_MARKER.finditer(text):
        if match["benchmark"] in gpu.stale and match["view"] not in stale.setdefault(match["benchmark"], []):
            stale[match["benchmark"]].append(match["view"])
    return "; ".join(f"{benchmark}: {', '.join(views)}" for benchmark, views in stale.items())


def _comparisons_with(rel: str, found: list[Sentence], gpu: ArchivedGpu, stale_views: str) -> list[str]:
    named = re.compile(r"\b(?:" + "|".join(re.escape(name) for name in gpu.names) + r")\b")
    problems = []
    for sentence in found:
        name = named.search(sentence.text)
        reads = _NAMES_A_MEASUREMENT.search(sentence.text) or _READS_A_RESULT.search(sentence.text)
        if name and reads and not _LABEL.search(f"{sentence.labels} {sentence.text}"):
            problems.append(f'{rel}:{sentence.line_of(name.start())}: "{name[0]}" in a sentence that reads a '
                            f'measurement ("{reads[0]}"), but the page shows the archived {gpu.name}\'s stale results '
                            f"({stale_views}), and the prose reads the reference GPU. {_COMPARISON_FIX}")
    return problems


def comparison_problems(root: Path) -> list[str]:
    try:
        report = benchmarks_report(root)
    except RuntimeError:
        return []  # the results check names the failure
    archived = archived_gpus(report)
    return [problem for page in _pages(root) for problem in check_comparisons(root, page, archived)]


# ---------------------------------------------------------------------------------------------------
# Lint


def lint_problems(root: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-cache", "."],
                          cwd=root, capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return []
    findings = [line for line in done.stdout.splitlines() if re.match(r"^[^\s:]+:\d+:\d+: ", line)]
    if not findings:
        return [f"ruff failed: {(done.stdout + done.stderr).strip()[-2000:]}. Fix: run `.venv/bin/ruff check .`."]
    return [f"{line}. Fix: correct it (`.venv/bin/ruff check --fix .` fixes some by itself)." for line in findings]


# ---------------------------------------------------------------------------------------------------
# Unfinished chapters: what is still the template's

# A draft is a chapter merged on purpose before it is complete. It says so to readers with an admonition whose
# title starts with "Draft" and whose body says what is missing; its template text is then not a problem.
_DRAFT = re.compile(r"""^!!!\s+\w+\s+"Draft\b[^"]*"\s*$""")
# What to write instead of each section of templates/chapter.md.
_SECTION_FIX = {
    "What you will learn": "list what the reader takes away, one line per idea, three to five lines",
    "The idea, on a small example": "start from a small case with real numbers printed by a snippet, then give "
                                    "the general rule",
    "The code": "show the kernel one named section at a time and say why each part is there",
    "Measure it": "say what the benchmark measures and against which peers, and show its views with "
                  "`<!-- results: BENCHMARK VIEW -->` lines",
    "Pitfalls and misconceptions": "write the chapter's own pitfalls: the mistake in bold, why it is wrong, "
                                   "what to do instead",
    "Say it out loud": "write three to five sentences of your own in the blockquote",
    "Exercises": "write the chapter's exercises and their worked solutions",
    "Recap": "state each line of \"What you will learn\" as a fact, and list the sources",
}


def draft_note(text: str) -> str | None:
    """The body of a page's draft admonition ("" if it has none), or None if the page is not marked draft."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if _DRAFT.match(line):
            body = []
            for follow in lines[index + 1:]:
                if follow.strip() and not follow.startswith((" ", "\t")):
                    break
                body.append(follow.strip())
            return " ".join(part for part in body if part)
    return None


def _prose_by_section(text: str) -> dict[str, list[str]]:
    """{level-2 heading: the prose lines under it}, leaving out code blocks, includes and HTML comments."""
    found: dict[str, list[str]] = {}
    current, fenced, comment = None, False, False
    for line in text.splitlines():
        stripped = line.strip()
        if comment:
            comment = "-->" not in stripped
            continue
        if stripped.startswith("<!--"):
            comment = "-->" not in stripped
            continue
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or "--8<--" in stripped or not stripped:
            continue
        heading = _HEADING.match(line)
        if heading and len(heading["level"]) == 2:
            current = heading["text"].strip()
            found.setdefault(current, [])
        elif current is not None and not heading and not stripped.startswith(("???", "!!!")):
            found[current].append(stripped)
    return found


def _filled(root: Path, page: Path, name: str) -> str | None:
    """templates/NAME as `make chapter` filled it in for this page's number and title (None if not a chapter)."""
    from book.new_chapter import NAME, Chapter

    template = root / "templates" / name
    if not template.is_file() or not NAME.match(page.stem):
        return None
    title = page.read_text().partition("\n")[0].lstrip("# ").partition(". ")[2]
    return Chapter(page.stem, title).fill(template.read_text())


def _chapter_of(page: Path) -> str:
    return f"ch{page.stem[:2]}"


def _benchmarks_by_chapter(root: Path) -> dict[str, list[str]]:
    """{"ch05": ["flash_attention", ...]} from the benchmark modules' text (no import: a copy may not import)."""
    found: dict[str, list[str]] = {}
    for module in sorted((root / "book" / "bench").glob("*.py")):
        text = module.read_text()
        name = re.search(r"""\bname\s*=\s*["'](\w+)["']""", text)
        chapter = re.search(r"""\bchapter\s*=\s*["'](ch\d\d)["']""", text)
        if name and chapter:
            found.setdefault(chapter[1], []).append(name[1])
    return found


def check_unfinished(root: Path, page: Path, benchmarks: dict[str, list[str]], tests: dict[str, str]) -> list[str]:
    """What of one chapter is still the template's, or missing around its kernels and benchmark."""
    rel = _rel(root, page)
    text = page.read_text()
    if draft_note(text) is not None:
        if not draft_note(text):
            return [f'{rel}: the draft marker says nothing. Fix: say under `!!! warning "Draft"` what the chapter '
                    f"still misses, for readers and reviewers."]
        return []
    problems = []
    template = _filled(root, page, "chapter.md")
    chapter = _chapter_of(page)
    if template is not None:
        skeleton = _prose_by_section(template)
        written = _prose_by_section(text)
        for heading, lines in skeleton.items():
            left = [line for line in lines if line in written.get(heading, [])]
            if left:
                fix = _SECTION_FIX.get(heading, "replace it with the chapter's own text")
                problems.append(f'{rel}: "## {heading}" still has the template\'s text ("{left[0]}"). Fix: {fix}; '
                                f'or mark the chapter as a draft with `!!! warning "Draft"` saying what is missing.')
        example = root / "snippets" / chapter / "first_example.py"
        filled = _filled(root, page, "first_example.py")
        if example.is_file() and filled is not None and example.read_text() == filled:
            problems.append(f"{_rel(root, example)}: still the template's example (a softmax of four numbers). Fix: "
                            f"replace it with the chapter's first small example and store its output with "
                            f"`.venv/bin/python -m book.snippets --write {_rel(root, example)}`, or delete it, its "
                            f".out and its test.")
        test_rel = f"tests/test_{chapter}_snippets.py"
        filled_test = _filled(root, page, "chapter_tests.py")
        test_body = filled_test.partition("def test_first_example")[2] if filled_test else ""
        if test_body and test_body.strip() in tests.get(test_rel, ""):
            problems.append(f"{test_rel}: test_first_example is still the template's test. Fix: make each test "
                            f"assert something real about its snippet's output, not the template's "
                            f'"sums to one: True".')
    # a chapter may show some of its runs on a page of their own outside docs/chapters/ that it links to
    linked = [root / "docs" / target for target in _LINKED_PAGE.findall(text) if (root / "docs" / target).is_file()]
    shown = {match["benchmark"] for page_text in [text] + [p.read_text() for p in linked]
             for match in _RESULTS_MARKER.finditer(page_text)}
    for name in benchmarks.get(chapter, []):
        if name not in shown:
            problems.append(f"{rel}: the chapter's benchmark {name} has no results view on the page. Fix: show its "
                            f"views with `<!-- results: {name} VIEW -->` lines under \"## Measure it\" "
                            f"(the views are listed in book/bench/{name}.py).")
    for kernel in sorted({include.path for include in includes(root) if include.page == rel}):
        if not kernel.startswith("kernels/") or not (root / kernel).is_file():
            continue
        if not re.search(r"@(triton|gluon)\.jit", (root / kernel).read_text()):
            continue  # host-side Python beside a kernel, tested on the CPU
        module = Path(kernel).stem
        if not any(kernel in (root / "book" / "bench" / f"{b}.py").read_text()
                   for names in benchmarks.values() for b in names if (root / "book" / "bench" / f"{b}.py").is_file()):
            problems.append(f"{rel}: shows {kernel}, which no benchmark measures. Fix: add book/bench/NAME.py with "
                            f'chapter="{chapter}" and "{kernel}" in its sources (CONTRIBUTING.md, "Snippets, kernels, '
                            f'tests and benchmarks").')
        uses = re.compile(rf"kernels(\.{module}\b| import [\w, ]*\b{module}\b)|{re.escape(kernel)}")
        if not any("mark.gpu" in body and uses.search(body) for body in tests.values()):
            problems.append(f"{rel}: shows {kernel}, which no GPU test runs. Fix: add tests marked "
                            f"`@pytest.mark.gpu` to tests/test_{module}.py that compare it with a float64 "
                            f"reference on the GPU.")
    return problems


def unfinished_problems(root: Path) -> list[str]:
    benchmarks, tests = _benchmarks_by_chapter(root), _tests_text(root)
    return [problem for page in chapter_pages(root) for problem in check_unfinished(root, page, benchmarks, tests)]


def drafts(root: Path) -> list[str]:
    """The chapter pages marked draft, each with what its marker says is missing."""
    return [f"{_rel(root, page)}: {draft_note(page.read_text())}" for page in chapter_pages(root)
            if draft_note(page.read_text()) is not None]


# ---------------------------------------------------------------------------------------------------

CHECKS: dict[str, Callable[[Path], list[str]]] = {
    "chapters": chapter_problems,
    "includes": include_problems,
    "snippets": snippet_problems,
    "results": results_problems,
    "unfinished": unfinished_problems,
    "figures": figure_problems,
    "comparisons": comparison_problems,
    "lint": lint_problems,
}


def mentions(problem: str, text: str) -> bool:
    """Whether a problem is about `text`, judged by what it says is wrong (not by its fix). A chapter code such
    as ch08 also matches the chapter's page, docs/chapters/08-*.md."""
    statement = problem.split(" Fix: ")[0]
    aliases = [text]
    if re.fullmatch(r"ch\d\d", text):
        aliases.append(f"chapters/{text[2:]}-")
    return any(alias in statement for alias in aliases)


def all_problems(root: Path, only: list[str] | None = None) -> dict[str, list[str]]:
    return {name: check(root) for name, check in CHECKS.items() if not only or name in only}


def main(argv: list[str] | None = None) -> int:
    from book import ROOT

    parser = argparse.ArgumentParser(prog="python -m book.checks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check (default: this one)")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), help="run only these checks")
    parser.add_argument("--grep", metavar="TEXT",
                        help="show only problems about TEXT, e.g. a file, or a chapter such as ch08")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    total = 0
    for name, problems in all_problems(root, args.only).items():
        if args.grep:
            problems = [problem for problem in problems if mentions(problem, args.grep)]
        total += len(problems)
        print(f"{name}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print("  - " + problem.replace("\n", "\n    "))
    if not args.only or "unfinished" in args.only:
        _print_accepted("draft (accepted, shown to readers)", drafts(root), args.grep)
    if not args.only or "results" in args.only:
        _print_accepted("archived (accepted, shown with a notice)", archived(root), args.grep)
    return 1 if total else 0


def _print_accepted(kind: str, lines: list[str], grep: str | None) -> None:
    """What a check accepts on purpose, one line each, so that it is never a silent pass."""
    for line in lines:
        if not grep or mentions(line, grep):
            print(f"{kind}: {line}")


if __name__ == "__main__":
    sys.exit(main())
