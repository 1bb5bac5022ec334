"""The built site in a real browser: headless Chromium (Playwright) against the site served on 127.0.0.1.

Every page loads with no console error and no request to another host, renders its math, gives its code
blocks copy buttons; search works; the steppers reach the simulator's numbers; a screenshot of each chapter
goes to $BOOK_ARTIFACTS (or test-artifacts/).
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

pytest.importorskip("mkdocs", reason="needs the documentation tools (`make setup`)")

from book import ROOT  # noqa: E402
from tests.browser import Server, artifacts_dir, launch
from tests.site import build, copy_book
from tests.test_stepper import check_flash_widget, read_table, simulator

STEPPER_PAGES = {"chapters/04-online-softmax.md": "online-softmax", "chapters/05-flash-attention.md": "flash-attention"}
STUB = "This chapter is being written."
COPY_BUTTON = ".md-clipboard, .md-code__button[data-md-type=copy]"  # Material before and after 9.7


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once into a temporary folder from a copy of the book, and served on localhost.

    While a chapter that holds a stepper is still a stub, the copy gets the stepper line, so that the
    widget is tested in the site anyway (test_stepper_chapters_have_their_stepper checks the real pages).
    """
    book = copy_book(tmp_path_factory.mktemp("book"))
    for page, name in STEPPER_PAGES.items():
        path = book / "docs" / page
        if f"<!-- stepper: {name} -->" not in path.read_text():
            path.write_text(path.read_text() + f"\n<!-- stepper: {name} -->\n")
    site_dir = tmp_path_factory.mktemp("site")
    done = build(book, site_dir)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    with Server(site_dir) as server:
        server.dir = site_dir
        yield server


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


class Visit:
    """A page opened in a fresh context that records console errors and every request off localhost."""

    def __init__(self, browser, site, path: str, **context):
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        host = urlparse(site.url).netloc

        def route(route):
            url = urlparse(route.request.url)
            if url.scheme in ("http", "https") and url.netloc != host:
                self.external.append(route.request.url)
                return route.abort()
            return route.continue_()

        self.page.route("**/*", route)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(site.url + path, wait_until="load")
        self.page.wait_for_load_state("networkidle")

    def close(self):
        self.context.close()


def _pages(site) -> list[str]:
    paths = sorted(p.relative_to(site.dir).parent.as_posix() for p in site.dir.glob("**/index.html"))
    return [("" if p == "." else p + "/") for p in paths if not p.startswith(("assets", "search"))]


# Visible text of the article, code left out: math must not show up as raw TeX there.
ARTICLE_TEXT = """() => {
  const article = document.querySelector("article").cloneNode(true);
  for (const el of article.querySelectorAll("pre, code, .katex, script, style")) el.remove();
  return article.innerText;
}"""


def test_every_page_loads_clean_renders_math_and_has_copy_buttons(browser, site):
    pages = _pages(site)
    assert "" in pages and "chapters/05-flash-attention/" in pages and "notebooks/ch01_gpu_basics/" in pages
    problems = []
    for path in pages:
        visit = Visit(browser, site, path)
        page = visit.page
        problems += [f"{path}: console error: {e}" for e in visit.errors]
        problems += [f"{path}: request off localhost: {u}" for u in visit.external]
        if page.locator(".arithmatex").count():
            page.wait_for_selector(".katex", state="attached", timeout=5000)
        text = page.evaluate(ARTICLE_TEXT)
        for raw in ("\\(", "\\)", "\\[", "$$"):
            if raw in text:
                problems.append(f"{path}: raw TeX {raw!r} visible")
        code_blocks = page.locator("article .highlight pre").count()
        copy_buttons = page.locator(f"article .highlight :is({COPY_BUTTON})").count()
        if code_blocks != copy_buttons:
            problems.append(f"{path}: {code_blocks} code blocks but {copy_buttons} copy buttons")
        if path.startswith("notebooks/"):
            cells = page.locator(".jp-InputArea-editor").count()
            if not cells or page.locator(".jp-InputArea-editor clipboard-copy").count() != cells:
                problems.append(f"{path}: notebook code cells without copy buttons")
            if page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count():
                problems.append(f"{path}: the notebook shows an error")
        visit.close()
    assert not problems, "\n".join(problems)


def test_math_pages_have_katex(browser, site):
    visit = Visit(browser, site, "chapters/01-gpu-basics/")
    assert visit.page.locator(".arithmatex .katex").count() > 0
    visit.close()


def test_search_finds_online_softmax(browser, site):
    visit = Visit(browser, site, "")
    page = visit.page
    page.click("input.md-search__input")
    page.keyboard.type("online softmax")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    results = page.inner_text(".md-search-result__list")
    assert "04-online-softmax" in page.inner_html(".md-search-result__list") or "online softmax" in results.lower()
    assert not visit.errors and not visit.external
    visit.close()


def test_flash_attention_stepper_in_the_chapter(browser, site):
    sim = simulator()
    visit = Visit(browser, site, "chapters/05-flash-attention/")
    page = visit.page
    root = ".fa-stepper[data-stepper=flash-attention]"
    page.wait_for_selector(f"{root}[data-mounted] [data-action=step]")
    check_flash_widget(page, root, sim, causal=False, block_m=4, block_n=2)
    page.check(f"{root} [data-control=causal]")
    check_flash_widget(page, root, sim, causal=True, block_m=4, block_n=2)
    assert page.locator(f"{root} .fa-cell.is-skipped").count() > 0
    assert not visit.errors and not visit.external
    visit.close()


def test_online_softmax_stepper_in_the_chapter(browser, site):
    visit = Visit(browser, site, "chapters/04-online-softmax/")
    page = visit.page
    root = ".fa-stepper[data-stepper=online-softmax]"
    page.wait_for_selector(f"{root}[data-mounted] [data-action=step]")
    page.focus(f"{root} .fa-stepper__scroll")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute(root, "data-step") == page.get_attribute(root, "data-total") == "2"
    final = read_table(page, f"{root} .fa-stepper__final table")
    assert final[0][-2:] == final[1][-2:] == ["1.7815", "1.1101"]  # chapter 4's worked example
    assert not visit.errors
    visit.close()


def _contrast(rgb1: list[float], rgb2: list[float]) -> float:
    def luminance(rgb: list[float]) -> float:
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted([luminance(rgb1), luminance(rgb2)], reverse=True)
    return (high + 0.05) / (low + 0.05)


# The text colour and the background an element shows, as opaque RGB: every translucent layer from the
# element up to the page is blended, as the browser paints them (a canvas turns any CSS colour into RGBA).
SHOWN_COLOURS = """el => {
  const ctx = document.createElement("canvas").getContext("2d", {willReadFrequently: true});
  const rgba = (css) => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
                          const [r, g, b, a] = ctx.getImageData(0, 0, 1, 1).data; return [r, g, b, a / 255]; };
  const over = (top, bottom) => top.slice(0, 3).map((c, i) => c * top[3] + bottom[i] * (1 - top[3]));
  const layers = [];
  for (let node = el; node; node = node.parentElement) layers.push(rgba(getComputedStyle(node).backgroundColor));
  let bg = [255, 255, 255];
  for (const layer of layers.reverse()) bg = over(layer, bg);
  return [over(rgba(getComputedStyle(el).color), bg), bg];
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_stepper_is_readable_in_both_themes(browser, site, scheme):
    visit = Visit(browser, site, "chapters/05-flash-attention/", color_scheme=scheme)
    page = visit.page
    root = ".fa-stepper[data-stepper=flash-attention]"
    page.wait_for_selector(f"{root}[data-mounted]")
    page.click(f"{root} [data-action=step]")
    assert page.get_attribute("body", "data-md-color-scheme") == ("slate" if scheme == "dark" else "default")
    for selector in [f"{root} .fa-stepper__status", f"{root} .fa-cell.is-current", f"{root} .fa-stepper__table td",
                     f"{root} .fa-cell:not(.is-current):not(.fa-cell--head)"]:
        colour, background = page.eval_on_selector(selector, SHOWN_COLOURS)
        assert _contrast(colour, background) >= 4.5, f"{scheme}: {selector}: {colour} on {background}"
    visit.close()


def test_stepper_fits_a_phone_screen(browser, site):
    visit = Visit(browser, site, "chapters/05-flash-attention/", viewport={"width": 375, "height": 740},
                  is_mobile=True, has_touch=True)
    page = visit.page
    root = ".fa-stepper[data-stepper=flash-attention]"
    page.wait_for_selector(f"{root}[data-mounted]")
    page.select_option(f"{root} [data-control=n]", "16")
    page.tap(f"{root} [data-action=end]")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 375  # only the grid scrolls sideways
    box = page.locator(root).bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 375
    assert page.locator(f"{root} [data-action=step]").bounding_box()["width"] >= 40  # big enough to tap
    page.screenshot(path=str(artifacts_dir() / "stepper-phone.png"), full_page=False)
    visit.close()


def test_notebook_pages_offer_download_and_colab(browser, site):
    visit = Visit(browser, site, "notebooks/ch02_vector_add/")
    page = visit.page
    download = page.get_attribute("a:has-text('Download the notebook')", "href")
    assert download.endswith("ch02_vector_add.ipynb")
    response = page.request.get(site.url + "notebooks/ch02_vector_add/" + download)
    assert response.ok and '"cells"' in response.text()
    colab = page.get_attribute("a:has-text('Open in Colab')", "href")
    assert colab == ("https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/"
                     "docs/notebooks/ch02_vector_add.ipynb")
    assert "equals x + y: True" in page.inner_text("article")  # the stored outputs are shown
    visit.close()
    chapter = Visit(browser, site, "chapters/02-vector-add/")
    link = chapter.page.locator("a:has-text('read the notebook here')")
    assert link.get_attribute("href") == "../../notebooks/ch02_vector_add/"
    chapter.close()


def test_screenshot_of_every_chapter(browser, site):
    folder = artifacts_dir()
    chapters = [p for p in _pages(site) if p.startswith("chapters/")]
    assert len(chapters) >= 7
    for path in chapters:
        visit = Visit(browser, site, path, viewport={"width": 1280, "height": 900})
        target = folder / (path.strip("/").replace("/", "-") + ".jpg")
        visit.page.screenshot(path=str(target), full_page=True, type="jpeg", quality=70)
        assert target.stat().st_size > 10_000
        visit.close()


@pytest.mark.parametrize("page", sorted(STEPPER_PAGES))
def test_stepper_chapters_have_their_stepper(page):
    text = (ROOT / "docs" / page).read_text()
    if STUB in text:
        pytest.skip(f"{page} is still a stub")
    assert f"<!-- stepper: {STEPPER_PAGES[page]} -->" in text, f"{page} should hold its stepper line"
