"""python -m book.site_check [SITE_DIR]: fail loudly when a built site lost what the book's own build steps add.

The book adds three things to its pages that no Markdown renderer knows about: results views (tables, sentences
and figures drawn from results files), interactive steppers, and links to the companion notebooks rendered as
pages. A site generator that skips the book's build steps (one without MkDocs hooks or the mkdocs-jupyter
plugin, for example) still builds without an error, and the pages silently lose all three. This check reads the
built HTML and names every page where that happened:

- a `<!-- results: ... -->`, `<!-- stepper: ... -->` or `<!-- figure: ... -->` marker left in the page,
  which means the step that replaces it never ran;
- a chapter with a companion notebook (docs/notebooks/chNN_*.ipynb) whose page has no link to it, or whose
  notebook was not rendered to a page (only the raw .ipynb was copied).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from book import ROOT

MARKER = re.compile(r"<!-- (results|stepper|figure):([^>]*)-->")
NOTEBOOK_LINK = "Companion notebook"


def _chapter_page(site: Path, number: str) -> Path | None:
    pages = sorted(site.glob(f"chapters/{number}-*/index.html"))
    return pages[0] if pages else None


def problems(site: Path, docs: Path = ROOT / "docs") -> list[str]:
    """Everything the book's build steps should have added to the built site and did not, one line each."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for kind, argument in MARKER.findall(page.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{page.relative_to(site)}: the {kind} marker '{argument.strip()}' was not rendered")
    for notebook in sorted(docs.glob("notebooks/ch*_*.ipynb")):
        number = notebook.stem[2:4]
        rendered = site / "notebooks" / notebook.stem / "index.html"
        if not rendered.is_file():
            found.append(f"notebooks/{notebook.name}: not rendered to a page (no {rendered.relative_to(site)})")
        page = _chapter_page(site, number)
        if page is None:
            found.append(f"notebooks/{notebook.name}: no chapter {number} page in the site to link it from")
        elif NOTEBOOK_LINK not in page.read_text(encoding="utf-8", errors="replace"):
            found.append(f"{page.relative_to(site)}: no link to its companion notebook {notebook.name}")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    site = Path(argv[0]) if argv else ROOT / "site"
    if not (site / "index.html").is_file():
        print(f"no built site in {site}: build it first (make build)", file=sys.stderr)
        return 2
    found = problems(site)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"site check: {len(found)} problem(s) in {site}: the book's build steps did not run "
              "(see book/site_check.py)", file=sys.stderr)
        return 1
    print(f"site check: ok ({site})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
