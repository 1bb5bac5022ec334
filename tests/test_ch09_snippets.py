"""Chapter 9 snippets: each prints what its page shows."""

from book import snippets


def test_fast_path_rules():
    stored, fresh = snippets.check("snippets/ch09/fast_path_rules.py")
    assert fresh == stored
    assert fresh.count("-> fast path") == 5
    assert fresh.count("chapter 5 kernel:") == 3


def test_tile_budget():
    stored, fresh = snippets.check("snippets/ch09/tile_budget.py")
    assert fresh == stored
    assert "(100% of the products)" in fresh and "(50% of the products)" in fresh
    assert "each computing thread 240" in fresh


def test_persistent_pairs():
    stored, fresh = snippets.check("snippets/ch09/persistent_pairs.py")
    assert fresh == stored
    assert "busiest program 72 tiles, idlest 63" in fresh  # pairs: balanced up to one pair of 9 tiles


def test_last_round():
    stored, fresh = snippets.check("snippets/ch09/last_round.py")
    assert fresh == stored
    assert "4096 items in 2048 pairs of equal work: 15.52 rounds of 132 programs" in fresh
    ratios = [float(line.rsplit(" ", 1)[1]) for line in fresh.splitlines() if "busiest / mean" in line]
    assert ratios[0] > 1.03 and ratios[1] < 1.01  # a 16th pair for some programs; then about even


def test_exercise_last_round():
    stored, fresh = snippets.check("snippets/ch09/exercise_last_round.py")
    assert fresh == stored
    assert fresh.count("1024 pairs,  7.76 rounds of work in 8 rounds of time, 3.0% idle") == 5
    assert "balanced at N = 2048: busiest program 0.4% above the mean" in fresh
