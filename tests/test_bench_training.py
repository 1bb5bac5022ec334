"""The training benchmark's views, on made-up rows (the GPU run writes the real ones)."""

from book.bench import training


def _result() -> dict:
    rows = []
    for name, shift in (("book", 0.0), ("sdpa", 0.01), ("sdpa_again", 0.005)):
        rows += [{"kind": "loss", "run": name, "step": step, "loss": 5.5 - step / 100 + shift} for step in range(100)]
        rows.append({"kind": "summary", "run": name, "tokens_per_s": 100000.0 if name == "book" else 80000.0,
                     "peak_bytes": 2**31})
    return {"rows": rows}


def test_summary_reads_both_runs():
    text = training.summary(_result())
    assert "differ by at most 0.010" in text and "differs from itself by at most 0.005" in text
    assert "from 5.50 to 4.51 with the book's attention" in text
    assert "1.25 times as many tokens per second" in text
    assert text.count("| 2 |") == 2  # peak memory in GiB, one row per run


def test_loss_plot_draws_both_runs():
    figure = training.loss_plot(_result())
    assert len(figure.axes[0].lines) == 2 and len(figure.axes[1].lines) == 3  # two differences and the zero line


def test_the_model_loads_from_its_snippet():
    tiny_gpt = training._tiny_gpt()
    assert tiny_gpt.Config().width == 512 and tiny_gpt.Config().head_dim == 64
