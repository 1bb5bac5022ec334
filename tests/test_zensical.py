"""The same pages from MkDocs and from Zensical: the book's build step (book/bake.py) is the same code for both.

Zensical runs no MkDocs hook and no plugin, so `python -m book.bake` writes the site source with every results
view, figure, stepper and notebook page already in it; this test builds that with Zensical, builds the book with
MkDocs, and compares the two page by page.
"""

import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("zensical", reason="Zensical is installed by `make setup` (requirements/docs.txt)")
pytest.importorskip("mkdocs", reason="MkDocs is installed by `make setup` (requirements/docs.txt)")

from book import ROOT, bake, site_check  # noqa: E402 - after the skips: bake needs the documentation tools
from tests.site import build  # noqa: E402


def features(html: str) -> dict:
    """What the book's build step puts on a page, counted."""
    return {
        "results views (provenance lines)": html.count('class="provenance"'),
        "tab sets": len(re.findall(r'class="tabbed-set', html)),
        "figures": sorted(set(re.findall(r"figures/([\w.-]+\.svg)", html))),
        "steppers": html.count('class="fa-stepper"'),
        "tables": html.count("<table"),
        "code blocks": html.count("<pre"),
        "notebook link": "Companion notebook" in html,
    }


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("generators")
    done = build(ROOT, root / "mkdocs")
    assert done.returncode == 0, done.stderr[-3000:]
    config = bake.bake(out=root / "baked")
    done = subprocess.run([sys.executable, "-m", "zensical", "build", "-f", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "mkdocs", root / "site-baked"


def test_both_sites_pass_the_site_check(sites):
    for site in sites:
        assert site_check.problems(site) == [], site


def test_every_chapter_page_holds_the_same_views_figures_steppers_and_links(sites):
    mkdocs_site, zensical_site = sites
    pages = sorted(mkdocs_site.glob("chapters/*/index.html"))
    assert len(pages) >= 12
    for page in pages:
        twin = zensical_site / page.relative_to(mkdocs_site)
        assert twin.is_file(), f"Zensical has no {twin.relative_to(zensical_site)}"
        ours, theirs = features(page.read_text()), features(twin.read_text())
        assert ours == theirs, f"{page.parent.name}: {ours} != {theirs}"
        for figure in theirs["figures"]:
            assert (zensical_site / "figures" / figure).is_file(), f"{page.parent.name}: {figure} missing"


def test_notebook_pages_hold_every_cell_and_output(sites):
    _, zensical_site = sites
    notebooks = sorted((ROOT / "docs/notebooks").glob("ch*_*.ipynb"))
    assert notebooks
    for path in notebooks:
        html = (zensical_site / "notebooks" / path.stem / "index.html").read_text()
        text = re.sub(r"<[^>]+>", "", html).replace("&quot;", '"').replace("&#39;", "'").replace("&gt;", ">") \
            .replace("&lt;", "<").replace("&amp;", "&")
        for cell in json.loads(path.read_text())["cells"]:
            for output in cell.get("outputs", []):
                for line in "".join(output.get("text", "")).splitlines():
                    assert line.strip() in text, f"{path.name}: output line {line!r} missing"
