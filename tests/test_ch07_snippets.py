"""Chapter 7 snippets: each prints what its page shows."""

from book import snippets


def test_flop_count():
    stored, fresh = snippets.check("snippets/ch07/flop_count.py")
    assert fresh == stored
    assert "1 ms for 0.5 TFLOP is 500 TFLOP/s" in fresh and "2.199 TFLOP" in fresh


def test_exp2_fma():
    stored, fresh = snippets.check("snippets/ch07/exp2_fma.py")
    assert fresh == stored
    assert "same up to fp32 rounding (< 1e-5): True" in fresh and "row sums agree: True" in fresh


def test_exercise_lazy_rescale():
    stored, fresh = snippets.check("snippets/ch07/exercise_lazy_rescale.py")
    assert fresh == stored
    assert "equals exact softmax(s) @ V: True" in fresh and "stays below 2^8: True" in fresh


def test_exercise_waves():
    stored, fresh = snippets.check("snippets/ch07/exercise_waves.py")
    assert fresh == stored
    assert fresh.count("programs; finish at") == 3
