"""The site builds with --strict, renders math offline, and shows measured numbers with provenance."""

import re

import pytest

from book import RESULTS_DIR, render, site_check
from tests.site import build, copy_book


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    done = build(__import__("book").ROOT, site_dir)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    return site_dir


def _pages(site):
    return sorted(site.glob("**/index.html")) + sorted(site.glob("*.html"))


def test_no_request_leaves_the_site(site):
    """No CDN: every script, stylesheet, font and image is served by the site itself."""
    external = re.compile(r'<(?:script|link|img)[^>]+(?:src|href)="(https?:)?//', re.IGNORECASE)
    for page in _pages(site):
        html = page.read_text()
        assert not external.search(html), f"{page.relative_to(site)} loads something from another host"
    for css in site.glob("**/*.css"):
        assert "fonts.googleapis" not in css.read_text(), f"{css.name} loads Google Fonts"


def test_math_library_is_served_locally(site):
    assert (site / "assets/katex/katex.min.js").is_file()
    assert any((site / "assets/katex/fonts").glob("KaTeX_Main-Regular.woff2"))
    chapter = (site / "chapters/01-gpu-basics/index.html").read_text()
    assert 'class="arithmatex"' in chapter and "katex-init.js" in chapter


def test_snippets_and_their_output_are_on_the_page(site):
    html = (site / "chapters/02-vector-add/index.html").read_text()
    assert "add_kernel" in html and "BLOCK_SIZE" in html
    assert "--8&lt;--" not in html  # every include was resolved
    assert "every element written: True" in html  # stored output of simulate_workers.py


def test_abbreviations_have_tooltips_on_every_page(site):
    """book/abbreviations.md is appended to every page: its terms get a tooltip, but not inside code or math."""
    for chapter in ("01-gpu-basics", "08-hopper-primer"):
        html = (site / f"chapters/{chapter}/index.html").read_text()
        assert '<abbr title="Streaming Multiprocessor: ' in html
        assert not re.search(r"<code[^>]*>[^<]*<abbr", html)
        assert not re.search(r'class="arithmatex">[^<]*<abbr', html)
        assert "*[SM]:" not in html  # the definitions themselves are not shown
    glossary = (site / "glossary/index.html").read_text()
    assert 'id="tma"' in glossary and 'href="../chapters/08-hopper-primer/#tma"' in glossary


@pytest.mark.skipif(not list(RESULTS_DIR.glob("*/vector_add.json")), reason="no vector_add results committed")
def test_measured_views_have_figures_and_provenance(site):
    html = (site / "chapters/02-vector-add/index.html").read_text()
    assert 'class="provenance">Measured on NVIDIA' in html
    figures = re.findall(r'src="(\.\./\.\./figures/[^"]+\.svg)"', html)
    assert figures, "no figure on the vector add page"
    for figure in figures:
        svg = (site / "chapters/02-vector-add" / figure).resolve()
        assert svg.is_file() and "Elements per vector" in svg.read_text()
    assert "Target met" in html or "Target not met" in html


@pytest.mark.skipif(not list(RESULTS_DIR.glob("*/vector_add.json")), reason="no vector_add results committed")
def test_changed_kernel_shows_stale_warning(tmp_path):
    book = copy_book(tmp_path / "book")
    kernel = book / "kernels" / "vector_add.py"
    kernel.write_text(kernel.read_text() + "\n# an edit after the numbers were measured\n")
    done = build(book, tmp_path / "site", strict=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Stale results" in done.stderr and "kernels/vector_add.py" in done.stderr
    html = (tmp_path / "site/chapters/02-vector-add/index.html").read_text()
    assert render.STALE_TITLE in html


def test_fresh_results_show_no_stale_warning(site):
    html = (site / "chapters/02-vector-add/index.html").read_text()
    assert render.STALE_TITLE not in html


def test_the_built_site_passes_the_site_check(site):
    assert site_check.problems(site) == []


def test_a_build_without_the_books_steps_fails_the_site_check(tmp_path):
    """A generator that runs no MkDocs hook and no mkdocs-jupyter (Zensical, today) builds without an error and
    drops every results view, stepper and notebook page; the site check names each loss."""
    book = copy_book(tmp_path / "book")
    config = (book / "mkdocs.yml").read_text()
    config = config.replace("hooks:\n  - book/mkdocs_hooks.py\n", "")
    config = re.sub(r"  - mkdocs-jupyter:\n(      .*\n)+", "", config)
    assert "mkdocs_hooks" not in config and "mkdocs-jupyter" not in config
    (book / "mkdocs.yml").write_text(config)
    done = build(book, tmp_path / "site", strict=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = site_check.problems(tmp_path / "site", docs=book / "docs")
    assert any("the results marker 'vector_add table' was not rendered" in line for line in found)
    assert any("the stepper marker" in line for line in found)
    assert any("the figure marker" in line for line in found)
    assert any("ch12_decoding.ipynb: not rendered to a page" in line for line in found)
    assert any(line.startswith("chapters/12-decoding/index.html: no link to its companion notebook") for line in found)
