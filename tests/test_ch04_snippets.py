"""Chapter 4 snippets: each prints what its page shows, and what it prints is right."""

import math
import re

from book import snippets


def test_overflow():
    stored, fresh = snippets.check("snippets/ch04/overflow.py")
    assert fresh == stored
    assert "exp(1000) in float32 = inf" in fresh and "exp(1000) in float16 = inf" in fresh
    assert "naive softmax   = [nan nan nan]" in fresh
    assert "shifted softmax = [0.09   0.2447 0.6652]" in fresh


def test_safe_softmax():
    stored, fresh = snippets.check("snippets/ch04/safe_softmax.py")
    assert fresh == stored
    assert fresh.count("matches reference: True") == 3 and "False" not in fresh


def test_online_softmax():
    stored, fresh = snippets.check("snippets/ch04/online_softmax.py")
    assert fresh == stored
    assert fresh.count("matches reference: True") == 3 and "False" not in fresh
    # The trace's last l equals the directly computed denominator.
    direct = sum(math.exp(v - 7.0) for v in [2.0, 4.0, 3.0, 7.0, 5.0, 1.0])
    assert f"l = {direct:.6f}; direct sum of exp(x_j - max) = {direct:.6f}" in fresh


def test_worked_example():
    stored, fresh = snippets.check("snippets/ch04/worked_example.py")
    assert fresh == stored
    assert "acc / l matches direct: True" in fresh and "normalizing every tile gives the same: True" in fresh
    # The table's numbers are the ones a reader can check by hand.
    assert f"{math.exp(-3):14.4f}" in fresh  # the rescale exp(4 - 7) on tile 2
    l_final = sum(math.exp(v - 7.0) for v in [2.0, 4.0, 3.0, 7.0, 5.0, 1.0])
    assert f"{l_final:.4f}" in fresh


def test_blocked_softmax():
    stored, fresh = snippets.check("snippets/ch04/blocked_softmax.py")
    assert fresh == stored
    assert fresh.count("softmax matches: True, softmax @ v matches: True") == 4 and "False" not in fresh


def test_edge_cases():
    stored, fresh = snippets.check("snippets/ch04/edge_cases.py")
    assert fresh == stored
    assert fresh.count("ours matches torch (NaN where torch has NaN): True") == 4
    assert fresh.count("ours matches reference: True") == 3
    # Without the guard, the row whose first tile is all -inf comes out NaN.
    first = fresh.split("one element:")[0]
    assert "without the -inf guard: [nan nan nan nan nan nan]" in first


def test_run_softmax_kernel():
    stored, fresh = snippets.check("snippets/ch04/run_softmax_kernel.py")
    assert fresh == stored
    assert len(re.findall(r"relative error < [\d.e-]+: True", fresh)) == 6 and "False" not in fresh
    assert "path: single block" in fresh and "path: online" in fresh
    assert "with -inf entries: [[0.2689, 0.0, 0.7311], [nan, nan, nan]]" in fresh


def test_exercise_online_softmax():
    stored, fresh = snippets.check("snippets/ch04/exercise_online_softmax.py")
    assert fresh == stored
    assert fresh.count("matches reference for block sizes 1, 3, 8, 64: True") == 5
    assert "all -inf: [nan nan nan nan]" in fresh


def test_exercise_merge_states():
    stored, fresh = snippets.check("snippets/ch04/exercise_merge_states.py")
    assert fresh == stored
    assert "same state: True" in fresh and "merge order does not matter: True" in fresh
    assert "matches np.logaddexp.reduce: True" in fresh
