"""Chapter 13 snippets: each prints what its page shows, and what it prints is true."""

from book import snippets


def test_fixed_cost_model_gives_the_share_and_the_bytes_sixty_percent_needs():
    stored, fresh = snippets.check("snippets/ch13/fixed_cost.py")
    assert fresh == stored
    # 32 MiB at 4.8 TB/s take 6.99 us: 6.99 / (8 + 6.99) = 47%, 6.99 / (4 + 6.99) = 64%
    assert "      8 us |  32 MiB |   7.0 us |  47%" in fresh
    assert "      4 us |  32 MiB |   7.0 us |  64%" in fresh
    assert "      8 us | 256 MiB |  55.9 us |  87%" in fresh  # four times the bytes: the share moves toward 1
    # 1.5 x 8 us x 4.8 TB/s = 57.6 MB = 54.9 MiB
    assert "fixed cost of 8 us needs a reading of at least 12 us: 55 MiB or more" in fresh
