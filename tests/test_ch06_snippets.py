"""Chapter 6 snippets: each prints what its page shows."""

from book import snippets


def test_causal_tiles():
    stored, fresh = snippets.check("snippets/ch06/causal_tiles.py")
    assert fresh == stored
    assert "Visible entries: 36 of 64" in fresh
    assert "full F: 6, diagonal D: 4, skipped .: 6 (computed 10 of 16)" in fresh
    assert "full F: 6, diagonal D: 5, skipped .: 4 (computed 11 of 15)" in fresh


def test_tile_count():
    stored, fresh = snippets.check("snippets/ch06/tile_count.py")
    assert fresh == stored
    table = [line.split() for line in fresh.splitlines()[1:9]]
    assert len(table) == 8
    for row in table:  # the formula, the mask and the chapter 5 simulator agree, and the output is right
        assert row[4] == row[5] == row[6] and row[-1] == "True", row
    assert "  4096           0.516                   1.94x" in fresh


def test_exercise_tile_count():
    stored, fresh = snippets.check("snippets/ch06/exercise_tile_count.py")
    assert fresh == stored
    assert "24 x 47 = 1128 tiles, computed 599" in fresh
    assert "47 x 24 = 1128 tiles, computed 576" in fresh
    # Both shapes spend the same tiles on rows 0 to 2943; the 23-tile difference is all in the last Q block.
    assert fresh.count("Q blocks before row 2944: 552 tiles") == 2
    assert "(56 real rows of 128): 47 tiles" in fresh and "(56 real rows of 64): 24 tiles" in fresh
    assert 599 - 576 == 47 - 24


def test_exercise_alignment():
    stored, fresh = snippets.check("snippets/ch06/exercise_alignment.py")
    assert fresh == stored
    assert fresh.count("top-left == bottom-right: True") == 3
    assert "top-left: sees keys [0]\n" in fresh
    assert "bottom-right: sees keys [0, 1, 2, 3, 4, 5, 6, 7]" in fresh


def test_exercise_empty_rows():
    stored, fresh = snippets.check("snippets/ch06/exercise_empty_rows.py")
    assert fresh == stored
    assert "order [1, 0], guard False: NaN rows [0, 1, 2, 3], matches reference: False" in fresh
    assert "order [1, 0], guard  True: NaN rows [], matches reference: True" in fresh


def test_run_causal():
    stored, fresh = snippets.check("snippets/ch06/run_causal.py")
    assert fresh == stored
    assert fresh.count("top-left matches SDPA is_causal=True: True") == 3
    assert fresh.count("bottom-right matches its float64 reference: True") == 3
    assert "rows 0..59 bitwise unchanged: True | rows 60..99 changed: True" in fresh
    assert "output all zero: True | lse -inf: True | any NaN: False" in fresh
