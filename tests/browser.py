"""Headless Chromium for the tests, through Playwright, with the system's Chromium (never a downloaded one).

Locally the browser tests skip when no Chromium is installed; in CI (CI set) they fail instead.
Screenshots go to $BOOK_ARTIFACTS, or test-artifacts/ (git-ignored) at the repository root.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

from book import ROOT

# Without the background-networking flags Chromium tries to reach Google's hosts at every start.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--disable-features=Translate,OptimizationHints,MediaRouter"]


def chromium_path() -> str | None:
    # Debian's chromium here and in .ci/run; Google Chrome comes preinstalled on GitHub's Ubuntu runners.
    names = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
    candidates = [os.environ.get("BOOK_CHROMIUM"), *map(shutil.which, names), "/usr/bin/chromium"]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def need_chromium() -> str:
    """The Chromium to drive, or a skip (a failure in CI) that says how to install one."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("the playwright package is not installed (run `make setup`)")
    path = chromium_path()
    if path is None:
        _missing("Chromium is not installed (Debian: `apt-get install chromium`; or set BOOK_CHROMIUM)")
    return path


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"browser tests must run in CI: {reason}")
    pytest.skip(reason)


def launch(playwright):
    return playwright.chromium.launch(executable_path=need_chromium(), headless=True, args=CHROMIUM_ARGS)


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("BOOK_ARTIFACTS") or ROOT / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Server:
    """A folder served on a free port of 127.0.0.1, in a thread, for the length of a `with` block."""

    def __init__(self, folder: Path):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
