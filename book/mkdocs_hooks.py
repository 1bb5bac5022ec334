"""MkDocs hooks: the book's build step (book/bake.py) run inside MkDocs, so that `mkdocs build` and
`mkdocs serve` show results views, figures, steppers and notebook links. Other generators run the same step
first, with `python -m book.bake`."""

from __future__ import annotations

from mkdocs.structure.files import File, Files

from book import bake

_rendered = bake.Rendered()


def on_files(files: Files, config) -> Files:
    """Render every view and figure that some page asks for, once, and add the figures to the site."""
    global _rendered
    _rendered = bake.render_all(page.content_string for page in files.documentation_pages()
                                if page.src_uri.endswith(".md"))
    for uri, svg in _rendered.figures.items():
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, content=svg))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    notebook = bake.companion_notebook(page.file.src_uri, (f.src_uri for f in files))
    return bake.transform(markdown, page.file.src_uri, _rendered, notebook, config.get("repo_url") or "")
