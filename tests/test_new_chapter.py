"""`make chapter` (python -m book.new_chapter) makes a chapter that builds, passes the checks, and is caught
by them when a piece is missing. All of it in a throw-away copy of the book."""

import os
import shutil
import subprocess
import sys

import pytest

from book import ROOT, checks
from book.new_chapter import Chapter, add_to_nav
from tests.site import build, copy_book

NAME, TITLE = "99-throwaway-chapter", "A throw-away chapter"
PAGE = "docs/chapters/99-throwaway-chapter.md"
SNIPPET, TEST = "snippets/ch99/first_example.py", "tests/test_ch99_snippets.py"


def _new_chapter(root, *args):
    return subprocess.run([sys.executable, "-m", "book.new_chapter", *args, "--root", str(root)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _about_the_new_chapter(problems):
    return [p for p in problems if "ch99" in p or NAME in p]


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """A copy of the book (what the site, the checks and the tests need) with a new chapter made in it."""
    root = copy_book(tmp_path_factory.mktemp("book") / "book")
    # This file names the new chapter's paths itself, so it stays out of the copy's tests.
    for part in ["templates", "tests"]:
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "test_new_chapter.py"))
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    done = _new_chapter(root, NAME, TITLE)
    assert done.returncode == 0, done.stderr
    return root, done.stdout


def test_command_makes_page_snippet_output_test_and_nav_entry(book):
    root, stdout = book
    for path in [PAGE, SNIPPET, "snippets/ch99/first_example.out", TEST]:
        assert (root / path).is_file(), f"{path} was not created"
        assert f"created {path}" in stdout
    assert "updated mkdocs.yml" in stdout and "make check" in stdout
    assert (root / PAGE).read_text().startswith(f"# 99. {TITLE}\n")
    assert "sums to one: True" in (root / "snippets/ch99/first_example.out").read_text()
    assert f"chapters/{NAME}.md" in checks.nav_pages(root)
    # Everything else in mkdocs.yml is as it was.
    before, after = (ROOT / "mkdocs.yml").read_text().splitlines(), (root / "mkdocs.yml").read_text().splitlines()
    assert [line for line in after if NAME not in line] == before


def test_new_chapter_builds_strict_and_shows_its_snippet_and_draft_marker(book, tmp_path):
    root, _ = book
    page = root / PAGE
    text = page.read_text()
    try:
        page.write_text(_marked_draft(text))
        done = build(root, tmp_path / "site")
    finally:
        page.write_text(text)
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / f"site/chapters/{NAME}/index.html").read_text()
    assert TITLE in html and "sums to one: True" in html and "--8&lt;--" not in html
    for section in checks.STANDARD_SECTIONS:
        assert section in html
    # Readers see the draft marker, with what it says is missing.
    assert 'class="admonition warning"' in html and "Draft" in html and DRAFT_NOTE in html


def test_new_chapter_passes_every_structural_check(book):
    root, _ = book
    for name in ["chapters", "includes", "snippets", "lint"]:
        problems = _about_the_new_chapter(checks.CHECKS[name](root))
        assert not problems, f"{name}: {problems}"


def test_the_untouched_skeleton_is_unfinished(book):
    root, _ = book
    problems = _about_the_new_chapter(checks.unfinished_problems(root))
    sections = [p.split('"## ')[1].split('"')[0] for p in problems if p.startswith(f'{PAGE}: "## ')]
    assert sections == ["What you will learn", "The idea, on a small example", "The code", "Measure it",
                        "Pitfalls and misconceptions", "Say it out loud", "Exercises", "Recap"], problems
    assert problems[0] == (f'{PAGE}: "## What you will learn" still has the template\'s text ("- One line for each '
                           f'idea the reader takes away from this chapter."). Fix: list what the reader takes away, '
                           f'one line per idea, three to five lines; or mark the chapter as a draft with '
                           f'`!!! warning "Draft"` saying what is missing.')
    assert all("Fix: " in p and "mark the chapter as a draft" in p for p in problems[:8])
    assert problems[8].startswith(f"{SNIPPET}: still the template's example")
    assert problems[9].startswith(f"{TEST}: test_first_example is still the template's test. Fix: ")
    assert len(problems) == 10
    done = subprocess.run([sys.executable, "-m", "book.checks", "--root", str(root), "--only", "unfinished",
                           "--grep", "ch99"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "unfinished: 10 problem(s)" in done.stdout


DRAFT_NOTE = "Still missing: the exercises and the measurement."


def _marked_draft(text: str, note: str = DRAFT_NOTE) -> str:
    title, _, rest = text.partition("\n")
    body = f"    {note}\n" if note else ""
    return f'{title}\n\n!!! warning "Draft"\n\n{body}{rest}'


def test_a_draft_marker_is_accepted_and_listed(book):
    root, _ = book
    page = root / PAGE
    text = page.read_text()
    try:
        page.write_text(_marked_draft(text))
        problems = _about_the_new_chapter(checks.unfinished_problems(root))
        listed = [draft for draft in checks.drafts(root) if NAME in draft]
        done = subprocess.run([sys.executable, "-m", "book.checks", "--root", str(root), "--only", "unfinished",
                               "--grep", "ch99"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        page.write_text(_marked_draft(text, note=""))
        silent = _about_the_new_chapter(checks.unfinished_problems(root))
    finally:
        page.write_text(text)
    assert problems == []
    assert listed == [f"{PAGE}: {DRAFT_NOTE}"]
    assert done.returncode == 0 and f"draft (accepted, shown to readers): {PAGE}: {DRAFT_NOTE}" in done.stdout
    assert silent == [f'{PAGE}: the draft marker says nothing. Fix: say under `!!! warning "Draft"` what the chapter '
                      f"still misses, for readers and reviewers."]


FILLED_PAGE = """# 99. A throw-away chapter

## What you will learn

- Why subtracting the largest score keeps exp from overflowing.

## The idea, on a small example

Three scores, one of them large, and their softmax.

```python title="snippets/ch99/first_example.py"
--8<-- "snippets/ch99/first_example.py"
```

```text title="Output"
--8<-- "snippets/ch99/first_example.out"
```

Subtracting the maximum changes nothing but the range of the numbers.

## Pitfalls and misconceptions

- **Subtracting the mean.** It does not bound the largest exponent; subtract the maximum.

## Say it out loud

> Softmax does not change when every score moves by the same amount, so we move them all below zero.

## Exercises

1. What does softmax give for two equal scores?

??? success "Solutions"
    1. One half each: the two exponentials are equal.

## Recap

- Subtracting the row maximum keeps every exponent at or below zero.

*Sources: Milakov and Gimelshein, arXiv 1805.02867.*
"""

FILLED_SNIPPET = """# Chapter 99: the softmax of scores with a large one, stable since the maximum is subtracted first.
import numpy as np

scores = np.array([1.0, 2.0, 1000.0])
weights = np.exp(scores - scores.max())
print("largest exponent:", float((scores - scores.max()).max()))
print("softmax:", " ".join(f"{w:.4f}" for w in weights / weights.sum()))
"""

FILLED_TEST = '''"""Chapter 99 snippets: each prints what its page shows."""

from book import snippets


def test_first_example():
    stored, fresh = snippets.check("snippets/ch99/first_example.py")
    assert fresh == stored
    assert "largest exponent: 0.0" in fresh and "softmax: 0.0000 0.0000 1.0000" in fresh
'''


def test_a_filled_in_minimal_chapter_passes(book):
    root, _ = book
    files = {PAGE: FILLED_PAGE, SNIPPET: FILLED_SNIPPET, TEST: FILLED_TEST}
    saved = {path: (root / path).read_text() for path in [*files, "snippets/ch99/first_example.out"]}
    try:
        for path, text in files.items():
            (root / path).write_text(text)
        env = dict(os.environ, PYTHONPATH=str(root))
        written = subprocess.run([sys.executable, "-m", "book.snippets", "--write", SNIPPET], cwd=root, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert written.returncode == 0, written.stderr
        problems = {name: _about_the_new_chapter(checks.CHECKS[name](root))
                    for name in ["chapters", "includes", "snippets", "unfinished"]}
    finally:
        for path, text in saved.items():
            (root / path).write_text(text)
    assert problems == {"chapters": [], "includes": [], "snippets": [], "unfinished": []}


def test_the_generated_test_passes(book):
    root, _ = book
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout


def test_checks_say_what_is_missing_when_the_snippet_has_no_test(book, tmp_path):
    root, _ = book
    moved = tmp_path / "test_ch99_snippets.py"
    shutil.move(root / TEST, moved)
    try:
        problems = _about_the_new_chapter(checks.snippet_problems(root))
        done = subprocess.run([sys.executable, "-m", "book.checks", "--root", str(root), "--only", "snippets",
                               "--grep", "ch99"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        shutil.move(moved, root / TEST)
    assert problems == [f"{SNIPPET}: no test runs it. Fix: add a test to {TEST} that calls "
                        f'`book.snippets.check("{SNIPPET}")`, asserts the fresh output equals the stored one, and '
                        f"asserts something real about it (see tests/test_ch02_snippets.py)."]
    assert done.returncode == 1 and problems[0] in done.stdout


def test_checks_say_what_is_missing_when_a_section_or_the_output_goes(book):
    root, _ = book
    page = root / PAGE
    text = page.read_text()
    try:
        page.write_text(text.replace("## Recap", "## Summary").replace(
            '--8<-- "snippets/ch99/first_example.out"', "(output left out)"))
        chapter = _about_the_new_chapter(checks.chapter_problems(root))
        snippet = _about_the_new_chapter(checks.snippet_problems(root))
    finally:
        page.write_text(text)
    assert len(chapter) == 1 and chapter[0].startswith(f'{PAGE}: missing the standard section "## Recap"')
    assert snippet == [f'{SNIPPET}: the page shows the code but not its output. Fix: add ```text title="Output"``` '
                       f'with `--8<-- "snippets/ch99/first_example.out"` under the code.']


def test_command_refuses_to_overwrite_or_a_bad_name(book):
    root, _ = book
    again = _new_chapter(root, NAME, TITLE)
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = _new_chapter(root, "Backward Pass", TITLE)
    assert bad.returncode == 2 and 'like "10-backward"' in bad.stderr


def test_nav_entry_goes_into_a_named_section():
    text = "site_name: t\nnav:\n  - Home: index.md\n  - Part A:\n      - chapters/01-a.md\n      - chapters/03-c.md\n"
    added = add_to_nav(text, Chapter("02-b", "B"), "Part A")
    assert [line.strip() for line in added.splitlines()[4:7]] == [
        "- chapters/01-a.md", "- chapters/02-b.md", "- chapters/03-c.md"]
    new_section = add_to_nav(text, Chapter("09-z", "Z"), "Extras")
    assert new_section.endswith("  - Extras:\n      - chapters/09-z.md\n")
