"""Chapter 10 snippets: each prints what its page shows, and what it prints is true."""

from book import snippets


def test_gradients_by_hand_match_autograd():
    stored, fresh = snippets.check("snippets/ch10/gradients_by_hand.py")
    assert fresh == stored
    assert fresh.count("matches autograd: True") == 3
    lines = fresh.splitlines()
    from_o = next(line for line in lines if line.startswith("D from dO and O:")).split(":")[1]
    from_p = next(line for line in lines if line.startswith("D from P and dP:")).split(":")[1]
    assert from_o.split() == from_p.split()  # D needs no P


def test_recompute_cost_counts_products_and_bytes():
    stored, fresh = snippets.check("snippets/ch10/recompute_cost.py")
    assert fresh == stored
    assert "5 products per tile (2.5 x the forward)" in fresh
    assert "7 products per tile (3.5 x the forward)" in fresh
    assert "storing P: 16.0 GiB; storing O and L: 66.0 MiB" in fresh  # 32 * 16384^2 * 2 B; 32 * 16384 * 132 B


def test_run_backward_matches_float64():
    stored, fresh = snippets.check("snippets/ch10/run_backward.py")
    assert fresh == stored
    assert fresh.count("matches float64 autograd") == 3 and "DIFFERS" not in fresh


def test_exercise_delta_precision_shows_the_fp16_loss():
    stored, fresh = snippets.check("snippets/ch10/exercise_delta_precision.py")
    assert fresh == stored
    errors = [float(line.split("error ")[1].rstrip(")")) for line in fresh.splitlines() if "error" in line]
    assert errors[1] > 100 * errors[0]  # the fp16 accumulator is far worse than the fp32 one


def test_train_tiny_gives_the_same_losses_with_both_attentions():
    # The program imports snippets/ch10/tiny_gpt.py, the model and training loop the page shows.
    stored, fresh = snippets.check("snippets/ch10/train_tiny.py")
    assert fresh == stored
    assert "steps with each attention: 4 4" in fresh
    assert "same losses to 1e-4: True" in fresh and "the loss went down: True" in fresh


def test_simulator_backward_counts_bytes_and_products():
    stored, fresh = snippets.check("snippets/ch10/simulator_backward.py")
    assert fresh == stored
    assert fresh.count("matches float64: True") == 4
    moved = [int(line.split("HBM")[1].split("B moved")[0].replace(",", "")) for line in fresh.splitlines()
             if "B moved" in line]
    plain, second_pass, atomic, causal = moved
    assert second_pass < plain / 2 and causal < second_pass  # no N x N matrix in HBM; causal skips tiles
    assert "448 tile products" in fresh and "320 tile products" in fresh  # 64 tiles x (4 + 3), 64 tiles x 5
    assert atomic < second_pass  # fewer bytes than the whole second pass (its K, V re-reads alone match the adds)
