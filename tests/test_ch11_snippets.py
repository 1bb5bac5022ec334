"""Chapter 11 snippets: each prints what its page shows."""

from book import snippets


def test_first_example():
    stored, fresh = snippets.check("snippets/ch11/first_example.py")
    assert fresh == stored
    assert "sums to one: True" in fresh
