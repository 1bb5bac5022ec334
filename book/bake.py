"""The book's own build step, the same for every site generator: it turns the book's markers into Markdown.

A page asks for a view of a benchmark with a line of its own:

    <!-- results: vector_add gbps-plot -->

Figures become SVG files of the site (under figures/); tables and sentences become Markdown. Under each
view goes the provenance line of the run, and above it a warning when the measured kernel changed since (a
plain notice instead on an archived GPU, book/gpus.py). With results from several GPUs, the view shows one tab
per GPU, the reference GPU's first.

A page can also draw a figure from code at build time (no GPU involved), for example from a numpy
simulator; the function takes no arguments and returns a matplotlib figure:

    <!-- figure: book.figures.ch05:hbm_bytes -->

A page can hold an interactive stepper (docs/javascripts/stepper.js), with optional data attributes:

    <!-- stepper: flash-attention -->
    <!-- stepper: online-softmax block=2 -->

A chapter page with a companion notebook (docs/notebooks/chNN_*.ipynb, made from notebooks/chNN_*.py)
gets a link to it, and to the same notebook on Colab, at its end.

MkDocs runs this step from a thin hook (book/mkdocs_hooks.py). For any other generator,
`python -m book.bake` writes the whole site source, already baked, to build/baked/ (the pages with their markers
replaced, the figures, the notebooks rendered to Markdown pages with their outputs) and a configuration
without hooks or plugins beside it, build/baked.yml:

    python -m book.bake && zensical build -f build/baked.yml     # the site in build/site-baked/
"""

from __future__ import annotations

import importlib
import logging
import posixpath
import re
import shutil
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from book import ROOT, gpus, render, results
from book.bench import by_name

log = logging.getLogger("mkdocs.plugins.book")

# A marker may be indented (inside an admonition or a collapsed block); its view is indented alike.
MARKER = re.compile(r"^(?P<indent>[ ]*)<!-- results: (?P<benchmark>\w+) (?P<view>[\w-]+) -->$", re.MULTILINE)
PROVENANCE = re.compile(r'<p class="provenance">Measured on (?P<gpu>[^(<]+?) \(driver .*?</p>\Z', re.S)
FIGURE = re.compile(r"^<!-- figure: (?P<module>[\w.]+):(?P<function>\w+) -->$", re.MULTILINE)
STEPPER = re.compile(r"^<!-- stepper: (?P<name>[\w-]+)(?P<options>(?: [\w-]+=[\w.,-]+)*) -->$", re.MULTILINE)
CHAPTER = re.compile(r"^chapters/(?P<number>\d\d)-[\w-]+\.md$")
BAKED = ROOT / "build" / "baked"


@dataclass
class Rendered:
    """Every view and figure the pages ask for, rendered once."""

    # (benchmark, view) -> list of (gpu name, markdown body with a {figures} placeholder for the page's path)
    views: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)  # site path (figures/x.svg) -> SVG


def render_all(pages: Iterable[str]) -> Rendered:
    """Render every results view and code figure that the given page sources ask for."""
    rendered = Rendered()
    for markdown in pages:
        for match in MARKER.finditer(markdown):
            key = (match["benchmark"], match["view"])
            if key not in rendered.views:
                rendered.views[key] = _render_view(*key, rendered.figures)
        for match in FIGURE.finditer(markdown):
            uri = _figure_uri(match)
            if uri not in rendered.figures:
                figure = getattr(importlib.import_module(match["module"]), match["function"])()
                rendered.figures[uri] = render.svg_bytes(figure)
    return rendered


def _figure_uri(match: re.Match) -> str:
    return f"figures/{match['module'].replace('.', '-')}-{match['function']}.svg"


def _render_view(benchmark_name: str, view_name: str, figures: dict[str, bytes]) -> list[tuple[str, str]]:
    benchmark = by_name(benchmark_name)
    if view_name not in benchmark.views:
        raise KeyError(f"benchmark {benchmark_name!r} has no view {view_name!r}; views: {list(benchmark.views)}")
    found = in_tab_order(results.load_all(benchmark_name))
    outputs = [benchmark.views[view_name](result) for result in found]
    if len(found) > 1 and all(isinstance(o, str) and o == outputs[0] for o in outputs):
        found, outputs = found[:1], outputs[:1]  # the same text for every GPU (a list of predictions): shown once
    bodies = []
    for result, output in zip(found, outputs, strict=True):
        provenance = result["provenance"]
        if isinstance(output, str):
            body = output
        else:
            uri = f"figures/{benchmark_name}-{view_name}-{provenance['gpu_slug']}.svg"
            figures[uri] = render.svg_bytes(output)
            titles = [ax.get_title() for ax in output.axes if ax.get_title()]  # the figure's own title, if it has one
            alt = titles[0] if titles else f"{benchmark.title}: {view_name}"
            body = f"![{alt}]({{figures}}/{uri.split('/', 1)[1]})"
        notice = _stale_notice(provenance)
        if notice:
            log.info("Stale results: %s/%s was measured on older sources (%s)", provenance["gpu_slug"],
                     benchmark_name, ", ".join(render.stale_sources(provenance)))
            body = notice + "\n" + body
        bodies.append((provenance["gpu"], body + "\n\n" + render.provenance_line(provenance)))
    return bodies


def in_tab_order(found: list[dict]) -> list[dict]:
    """Results of one benchmark in the order of their tabs: the reference GPU's first, then by folder name."""
    return sorted(found, key=lambda result: gpus.order_key(result["provenance"]["gpu_slug"]))


def _stale_notice(provenance: dict) -> str | None:
    """What goes above a view measured on older sources: a plain notice on an archived GPU, a warning on any
    other (None above a fresh view)."""
    archive = gpus.archive(provenance["gpu_slug"])
    return render.archived_notice(provenance, archive) if archive else render.stale_warning(provenance)


def transform(markdown: str, src_uri: str, rendered: Rendered, notebook: str | None, repo_url: str) -> str:
    """One page's Markdown with every marker replaced, and its companion notebook linked at the end.

    notebook is the site path of the chapter's notebook page source (notebooks/chNN_x.ipynb, or .md once
    baked for a generator without a notebook plugin), or None."""
    figures_dir = posixpath.relpath("figures", posixpath.dirname(src_uri) or ".")
    said: set[str] = set()  # the provenance lines already on this page
    nearest = [None]  # the run whose provenance (line or pointer) is the nearest above

    def replace(match: re.Match) -> str:
        return textwrap.indent(view(match), match["indent"])

    def once(body: str, benchmark: str, tabbed: bool) -> str:
        """The body with its provenance line, or a short pointer to it where the page has already shown it (naming
        the benchmark: a page can show several runs, and the nearest line above may be another's), or neither
        where the nearest line or pointer above is this run's already (outside tabs, which each name their run)."""
        found = PROVENANCE.search(body)
        if found is None:
            return body
        if found[0] not in said:
            said.add(found[0])
            nearest[0] = found[0]
            return body
        if nearest[0] == found[0] and not tabbed:
            return body[:found.start()].rstrip() + "\n"
        nearest[0] = found[0]
        return body[:found.start()] + (f'<p class="provenance">The same run of <code>{benchmark}</code> as above '
                                       f'({found["gpu"]}).</p>')

    def view(match: re.Match) -> str:
        bodies = rendered.views.get((match["benchmark"], match["view"]), [])
        if not bodies:
            log.info("No results yet for %s (page %s)", match["benchmark"], src_uri)
            return (
                '!!! note "No measurements yet"\n\n'
                f"    `{match['benchmark']}` has no results file. Run `make bench` on a GPU machine.\n"
            )
        filled = [(gpu, once(body.replace("{figures}", figures_dir), match["benchmark"], len(bodies) > 1))
                  for gpu, body in bodies]
        if len(filled) == 1:
            return filled[0][1]
        # `===!` starts a new tab set, so two views in a row do not merge into one set of tabs.
        return "\n\n".join(f'==={"!" if i == 0 else ""} "{gpu}"\n\n' + textwrap.indent(body, "    ")
                           for i, (gpu, body) in enumerate(filled))

    def figure(match: re.Match) -> str:
        name = match["function"].replace("_", " ")
        return f"![{name}]({figures_dir}/{_figure_uri(match).split('/', 1)[1]})"

    markdown = STEPPER.sub(_stepper, FIGURE.sub(figure, MARKER.sub(replace, markdown)))
    return markdown if notebook is None else _link_notebook(markdown, notebook, repo_url)


def _stepper(match: re.Match) -> str:
    """The container that docs/javascripts/stepper.js fills in; options become data attributes."""
    options = "".join(f' data-{key}="{value}"' for key, value in
                      (option.split("=", 1) for option in match["options"].split()))
    return (f'<div class="fa-stepper" data-stepper="{match["name"]}"{options}>\n'
            '<p class="fa-stepper__fallback"><em>This interactive stepper needs JavaScript.</em></p>\n</div>')


def companion_notebook(src_uri: str, notebooks: Iterable[str]) -> str | None:
    """The site path of a chapter page's notebook (docs/notebooks/chNN_*.ipynb), if it has one."""
    chapter = CHAPTER.match(src_uri)
    if not chapter:
        return None
    mine = sorted(n for n in notebooks if n.startswith(f"notebooks/ch{chapter['number']}_") and n.endswith(".ipynb"))
    return mine[0] if mine else None


def _link_notebook(markdown: str, notebook: str, repo_url: str) -> str:
    """Append links to the chapter's notebook (rendered in the site, and on Colab) to a chapter page."""
    repo = repo_url.rstrip("/").removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/docs/{Path(notebook).with_suffix('.ipynb')}"
    return markdown.rstrip() + (
        '\n\n!!! example "Companion notebook"\n\n'
        f"    Run this chapter's code yourself, top to bottom: [read the notebook here](../{notebook}) "
        f"(with its outputs{' and a download button' if notebook.endswith('.ipynb') else ''}), "
        f"or [open it in Colab]({colab}).\n")


# ---------------------------------------------------------------------------------------------------
# The baked site source, for a generator without the book's hook and without mkdocs-jupyter


def notebook_markdown(path: Path) -> str:
    """An executed notebook as a Markdown page: its Markdown cells, its code, and the outputs stored with it."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    parts = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source)
        elif cell.cell_type == "code":
            parts.append(f"```python\n{cell.source}\n```")
            text = "".join(_output_text(output) for output in cell.get("outputs", []))
            if text:
                parts.append(f"```text\n{text.rstrip()}\n```")
    return "\n\n".join(parts) + "\n"


def _output_text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    if "text/plain" in data:
        return data["text/plain"] + "\n"
    raise ValueError(f"a notebook output the baked page cannot show: {sorted(data)}")


def bake(config_path: Path = ROOT / "mkdocs.yml", out: Path = BAKED) -> Path:
    """Write the site source with every book step done, and a configuration for it; return that file."""
    config = yaml.safe_load(config_path.read_text())
    docs = config_path.parent / config.get("docs_dir", "docs")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(docs, out, ignore=shutil.ignore_patterns("*.ipynb"))
    pages = {p.relative_to(docs).as_posix(): p.read_text(encoding="utf-8") for p in sorted(docs.rglob("*.md"))}
    rendered = render_all(pages.values())
    notebooks = []
    for path in sorted(docs.glob("notebooks/*.ipynb")):
        uri = path.relative_to(docs).with_suffix(".md").as_posix()
        (out / uri).write_text(notebook_markdown(path), encoding="utf-8")
        notebooks.append(path.relative_to(docs).as_posix())
    for uri, markdown in pages.items():
        notebook = companion_notebook(uri, notebooks)
        baked_notebook = None if notebook is None else str(Path(notebook).with_suffix(".md"))
        (out / uri).write_text(transform(markdown, uri, rendered, baked_notebook, config.get("repo_url", "")),
                               encoding="utf-8")
    for uri, svg in rendered.figures.items():
        (out / uri).parent.mkdir(parents=True, exist_ok=True)
        (out / uri).write_bytes(svg)
    return _write_config(config, config_path.parent, out)


def _write_config(config: dict, root: Path, out: Path) -> Path:
    """The same configuration, reading the baked pages, with no hooks and no plugins but search."""
    here = out.parent
    config = dict(config, docs_dir=posixpath.relpath(out, here), site_dir=posixpath.relpath(here / "site-baked", here))
    config.pop("hooks", None)
    config.pop("watch", None)
    config["plugins"] = ["search"]
    theme = dict(config["theme"])
    if "custom_dir" in theme:
        theme["custom_dir"] = posixpath.relpath(root / theme["custom_dir"], here)
    config["theme"] = theme
    config["nav"] = _baked_nav(config.get("nav", []))
    path = here / f"{out.name}.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _baked_nav(nav):
    if isinstance(nav, list):
        return [_baked_nav(item) for item in nav]
    if isinstance(nav, dict):
        return {key: _baked_nav(value) for key, value in nav.items()}
    return nav[: -len(".ipynb")] + ".md" if isinstance(nav, str) and nav.endswith(".ipynb") else nav


def main() -> int:
    path = bake()
    print(f"baked the site source into {BAKED.relative_to(ROOT)}; build it with, for example: "
          f"zensical build -f {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
