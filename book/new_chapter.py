"""python -m book.new_chapter NAME TITLE: start a chapter from the templates in templates/.

    python -m book.new_chapter 10-backward "The backward pass"        (or: make chapter NAME=... TITLE=...)

creates
    docs/chapters/10-backward.md        the page, with the standard sections (templates/chapter.md)
    snippets/ch10/first_example.py      a first snippet the page shows (templates/first_example.py)
    snippets/ch10/first_example.out     its stored output
    tests/test_ch10_snippets.py         the test that runs it (templates/chapter_tests.py)
and adds the page to the nav of mkdocs.yml, after the chapter before it (or in --section, made if new).
It never overwrites a file.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

NAME = re.compile(r"^(?P<number>\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*$")
_NAV_CHAPTER = re.compile(r"^(?P<indent>\s*)- (?:[^:\n]+:\s*)?['\"]?chapters/(?P<number>\d+)-[\w.-]+\.md['\"]?\s*$")
_NAV_ITEM = re.compile(r"^(?P<indent>\s*)- ")


@dataclass(frozen=True)
class Chapter:
    name: str  # 10-backward
    title: str  # The backward pass

    @property
    def number(self) -> int:
        return int(self.name[:2])

    @property
    def code(self) -> str:  # ch10
        return f"ch{self.name[:2]}"

    @property
    def page(self) -> str:
        return f"docs/chapters/{self.name}.md"

    @property
    def snippet(self) -> str:
        return f"snippets/{self.code}/first_example.py"

    @property
    def test(self) -> str:
        return f"tests/test_{self.code}_snippets.py"

    def fill(self, template: str) -> str:
        values = {
            "NUMBER": str(self.number),
            "TITLE": self.title,
            "CHAPTER": self.code,
            "NAME": self.name,
            "SNIPPET": self.snippet,
            "SNIPPET_OUT": self.snippet.removesuffix(".py") + ".out",
        }
        return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m[1]], template)


class ChapterError(ValueError):
    """The chapter cannot be made as asked; the message says why and what to do."""


def add_to_nav(mkdocs_yml: str, chapter: Chapter, section: str | None = None) -> str:
    """mkdocs.yml's text with the chapter's page added to the nav, keeping every other line as it was.

    Without a section the page goes right after the nav's chapter with the highest number below its own (or
    before the first chapter). With a section, it goes into that section in number order; a section that
    does not exist is added at the end of the nav.
    """
    lines = mkdocs_yml.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == "nav:")
    except StopIteration:
        raise ChapterError("mkdocs.yml has no `nav:` section; add one listing the pages") from None
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and not lines[i][0].isspace() and not lines[i].startswith(("-", "#"))),
               len(lines))
    entry = f"chapters/{chapter.name}.md"
    nav = range(start + 1, end)
    items = [i for i in nav if _NAV_ITEM.match(lines[i])]
    top = _NAV_ITEM.match(lines[items[0]])["indent"] if items else "  "
    chapters = [(i, int(m["number"]), m["indent"]) for i in nav if (m := _NAV_CHAPTER.match(lines[i]))]

    def insert(at: int, indent: str) -> str:
        return "".join(lines[:at] + [f"{indent}- {entry}\n"] + lines[at:])

    def last_line_of(region: range) -> int:
        return max((i for i in region if lines[i].strip()), default=region.start - 1) + 1

    if section is None:
        before = [c for c in chapters if c[1] < chapter.number]
        if before:
            i, _, indent = max(before, key=lambda c: (c[1], c[0]))
            return insert(i + 1, indent)
        if chapters:
            i, _, indent = chapters[0]
            return insert(i, indent)
        return insert(last_line_of(nav), top)

    heading = re.compile(rf"^(?P<indent>\s*)- ['\"]?{re.escape(section)}['\"]?:\s*$")
    found = next(((i, m["indent"]) for i in nav if (m := heading.match(lines[i]))), None)
    if found is None:
        at = last_line_of(nav)
        new = [f"{top}- {section}:\n", f"{top}    - {entry}\n"]
        return "".join(lines[:at] + new + lines[at:])
    i, indent = found
    children_end = next((j for j in range(i + 1, end)
                         if lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) <= len(indent)), end)
    children = range(i + 1, children_end)
    child_items = [j for j in children if _NAV_ITEM.match(lines[j])]
    child_indent = _NAV_ITEM.match(lines[child_items[0]])["indent"] if child_items else indent + "    "
    before = [c for c in chapters if c[0] in children and c[1] < chapter.number and c[2] == child_indent]
    if before:
        return insert(max(before, key=lambda c: (c[1], c[0]))[0] + 1, child_indent)
    return insert(i + 1, child_indent)


def create(root: Path, name: str, title: str, section: str | None = None) -> list[Path]:
    """Make the chapter's files in the repository at root and add it to the nav; return what was written."""
    if not NAME.match(name):
        raise ChapterError(f'NAME must be two digits, a dash and lowercase words joined by dashes, like '
                           f'"10-backward"; got {name!r}')
    if not title.strip():
        raise ChapterError('TITLE is empty; give the chapter\'s title, like TITLE="The backward pass"')
    chapter = Chapter(name, title.strip())
    same_number = sorted(p.name for p in (root / "docs/chapters").glob(f"{name[:2]}-*.md"))
    if same_number:
        raise ChapterError(f"chapter {name[:2]} already exists: docs/chapters/{same_number[0]}; pick another number "
                           f"or edit that page")
    outputs = {chapter.page: "chapter.md", chapter.snippet: "first_example.py", chapter.test: "chapter_tests.py"}
    taken = [path for path in [*outputs, chapter.snippet.removesuffix(".py") + ".out"] if (root / path).exists()]
    if taken:
        raise ChapterError(f"{', '.join(taken)} already exist(s); this command never overwrites a file")

    mkdocs_yml = root / "mkdocs.yml"
    text = mkdocs_yml.read_text()
    in_nav = re.search(rf"chapters/{re.escape(name)}\.md\b", text.split("\nnav:", 1)[-1]) is not None
    new_text = text if in_nav else add_to_nav(text, chapter, section)

    written = []
    for path, template in outputs.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(chapter.fill((root / "templates" / template).read_text()))
        written.append(target)
    # The stored output, written by the book's own snippet runner as for every other snippet.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "book.snippets", "--write", str(root / chapter.snippet)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ChapterError(f"running {chapter.snippet} failed:\n{done.stderr[-3000:]}")
    written.append(root / (chapter.snippet.removesuffix(".py") + ".out"))
    if new_text != text:
        mkdocs_yml.write_text(new_text)
        written.append(mkdocs_yml)
    return written


def main(argv: list[str] | None = None) -> int:
    from book import ROOT

    parser = argparse.ArgumentParser(prog="python -m book.new_chapter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", metavar="NAME", help='file name of the page without .md, like "10-backward"')
    parser.add_argument("title", metavar="TITLE", help='the chapter\'s title, like "The backward pass"')
    parser.add_argument("--section", help="the nav section to put it in (default: after the chapter before it)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        written = create(root, args.name, args.title, args.section)
    except ChapterError as error:
        print(f"new_chapter: {error}", file=sys.stderr)
        return 2
    chapter = Chapter(args.name, args.title)
    for path in written:
        print(f"{'updated' if path.name == 'mkdocs.yml' else 'created'} {path.relative_to(root)}")
    print(f"""
Next:
  1. Write the page {chapter.page}: replace the skeleton's text, keep its standard sections.
  2. Replace {chapter.snippet} with your first example; store its output with
     .venv/bin/python -m book.snippets --write {chapter.snippet}
     and make {chapter.test} assert something real about it. One test per snippet.
  3. Kernels go in kernels/, their tests in tests/test_<kernel>.py, the benchmark in book/bench/<name>.py
     with chapter="{chapter.code}".
  4. `make serve` to read it, `make check` to see what is still missing, `make test` before you push.""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
