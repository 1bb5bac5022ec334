"""MkDocs hooks: replace results markers in pages with tables and figures drawn from results files.

A page asks for a view of a benchmark with a line of its own:

    <!-- results: vector_add gbps-plot -->

Figures become SVG files of the site (under figures/); tables and sentences become markdown. Under each
view goes the provenance line of the run, and above it a warning when the measured kernel changed since.
With results from several GPUs, the view shows one tab per GPU.

A page can also draw a figure from code at build time (no GPU involved), for example from a numpy
simulator; the function takes no arguments and returns a matplotlib figure:

    <!-- figure: book.figures.ch05:hbm_bytes -->

A page can hold an interactive stepper (docs/javascripts/stepper.js), with optional data attributes:

    <!-- stepper: flash-attention -->
    <!-- stepper: online-softmax block=2 -->

A chapter page with a companion notebook (docs/notebooks/chNN_*.ipynb, made from notebooks/chNN_*.py)
gets a link to it, and to the same notebook on Colab, at its end.
"""

from __future__ import annotations

import importlib
import logging
import posixpath
import re
import textwrap

from mkdocs.structure.files import File, Files

from book import render, results
from book.bench import by_name

log = logging.getLogger("mkdocs.plugins.book")

MARKER = re.compile(r"^<!-- results: (?P<benchmark>\w+) (?P<view>[\w-]+) -->$", re.MULTILINE)
FIGURE = re.compile(r"^<!-- figure: (?P<module>[\w.]+):(?P<function>\w+) -->$", re.MULTILINE)
STEPPER = re.compile(r"^<!-- stepper: (?P<name>[\w-]+)(?P<options>(?: [\w-]+=[\w.,-]+)*) -->$", re.MULTILINE)
CHAPTER = re.compile(r"^chapters/(?P<number>\d\d)-[\w-]+\.md$")

# (benchmark, view) -> list of (gpu name, markdown body with a {figures} placeholder for the page's path)
_rendered: dict[tuple[str, str], list[tuple[str, str]]] = {}


def on_files(files: Files, config) -> Files:
    """Render every view that some page asks for, once, and add its figures to the site."""
    _rendered.clear()
    for page in files.documentation_pages():
        if not page.src_uri.endswith(".md"):
            continue
        for match in MARKER.finditer(page.content_string):
            key = (match["benchmark"], match["view"])
            if key not in _rendered:
                _rendered[key] = _render_view(*key, files, config)
        for match in FIGURE.finditer(page.content_string):
            uri = _figure_uri(match)
            if files.get_file_from_path(uri) is None:
                figure = getattr(importlib.import_module(match["module"]), match["function"])()
                files.append(File.generated(config, uri, content=render.svg_bytes(figure)))
    return files


def _figure_uri(match: re.Match) -> str:
    return f"figures/{match['module'].replace('.', '-')}-{match['function']}.svg"


def _render_view(benchmark_name: str, view_name: str, files: Files, config) -> list[tuple[str, str]]:
    benchmark = by_name(benchmark_name)
    if view_name not in benchmark.views:
        raise KeyError(f"benchmark {benchmark_name!r} has no view {view_name!r}; views: {list(benchmark.views)}")
    bodies = []
    for result in results.load_all(benchmark_name):
        provenance = result["provenance"]
        output = benchmark.views[view_name](result)
        if isinstance(output, str):
            body = output
        else:
            uri = f"figures/{benchmark_name}-{view_name}-{provenance['gpu_slug']}.svg"
            files.append(File.generated(config, uri, content=render.svg_bytes(output)))
            body = f"![{benchmark.title}: {view_name}]({{figures}}/{uri.split('/', 1)[1]})"
        warning = render.stale_warning(provenance)
        if warning:
            log.info("Stale results: %s/%s was measured on older sources (%s)", provenance["gpu_slug"],
                     benchmark_name, ", ".join(render.stale_sources(provenance)))
            body = warning + "\n" + body
        bodies.append((provenance["gpu"], body + "\n\n" + render.provenance_line(provenance)))
    return bodies


def on_page_markdown(markdown: str, page, config, files) -> str:
    figures_dir = posixpath.relpath("figures", posixpath.dirname(page.file.src_uri) or ".")

    def replace(match: re.Match) -> str:
        bodies = _rendered.get((match["benchmark"], match["view"]), [])
        if not bodies:
            log.info("No results yet for %s (page %s)", match["benchmark"], page.file.src_uri)
            return (
                '!!! note "No measurements yet"\n\n'
                f"    `{match['benchmark']}` has no results file. Run `make bench` on a GPU machine.\n"
            )
        filled = [(gpu, body.replace("{figures}", figures_dir)) for gpu, body in bodies]
        if len(filled) == 1:
            return filled[0][1]
        # `===!` starts a new tab set, so two views in a row do not merge into one set of tabs.
        return "\n\n".join(f'==={"!" if i == 0 else ""} "{gpu}"\n\n' + textwrap.indent(body, "    ")
                           for i, (gpu, body) in enumerate(filled))

    def figure(match: re.Match) -> str:
        name = match["function"].replace("_", " ")
        return f"![{name}]({figures_dir}/{_figure_uri(match).split('/', 1)[1]})"

    markdown = FIGURE.sub(figure, MARKER.sub(replace, markdown))
    return _companion_notebook(STEPPER.sub(_stepper, markdown), page, config, files)


def _stepper(match: re.Match) -> str:
    """The container that docs/javascripts/stepper.js fills in; options become data attributes."""
    options = "".join(f' data-{key}="{value}"' for key, value in
                      (option.split("=", 1) for option in match["options"].split()))
    return (f'<div class="fa-stepper" data-stepper="{match["name"]}"{options}>\n'
            '<p class="fa-stepper__fallback"><em>This interactive stepper needs JavaScript.</em></p>\n</div>')


def _companion_notebook(markdown: str, page, config, files) -> str:
    """Append links to the chapter's notebook (rendered in the site, and on Colab) to a chapter page."""
    chapter = CHAPTER.match(page.file.src_uri)
    if not chapter:
        return markdown
    notebooks = sorted(f.src_uri for f in files if f.src_uri.startswith(f"notebooks/ch{chapter['number']}_")
                       and f.src_uri.endswith(".ipynb"))
    if not notebooks:
        return markdown
    uri = notebooks[0]
    repo = (config.get("repo_url") or "").rstrip("/").removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/docs/{uri}"
    return markdown.rstrip() + (
        '\n\n!!! example "Companion notebook"\n\n'
        f"    Run this chapter's code yourself, top to bottom: [read the notebook here](../{uri}) "
        f"(with its outputs and a download button), or [open it in Colab]({colab}).\n")
