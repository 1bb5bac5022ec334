"""Chapter 2 snippets: each prints what its page shows."""

from book import snippets


def test_simulate_workers():
    stored, fresh = snippets.check("snippets/ch02/simulate_workers.py")
    assert fresh == stored
    assert "every element written: True" in fresh and "equals x + y: True" in fresh


def test_run_vector_add():
    stored, fresh = snippets.check("snippets/ch02/run_vector_add.py")
    assert fresh == stored
    assert "max |add(x, y) - (x + y)| = 0.0" in fresh
