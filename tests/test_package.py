"""The repository's own `kernels/` is the package `import kernels` gets (PyPI has another of that name)."""

from pathlib import Path

import kernels
from book import ROOT


def test_kernels_is_this_repository():
    assert Path(kernels.__file__).resolve().parent == ROOT / "kernels"


def test_no_dependency_on_the_pypi_kernels_package():
    for requirements in (ROOT / "requirements").glob("*.txt"):
        names = [line.split("=")[0].strip().lower() for line in requirements.read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
        assert "kernels" not in names, f"{requirements.name} depends on PyPI's kernels package"
