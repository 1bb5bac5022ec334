"""Chapter {{NUMBER}} snippets: each prints what its page shows."""

from book import snippets


def test_first_example():
    stored, fresh = snippets.check("{{SNIPPET}}")
    assert fresh == stored
    assert "sums to one: True" in fresh
