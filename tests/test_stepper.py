"""The interactive steppers compute what the chapters' numpy code computes, and show it.

The arithmetic of docs/javascripts/stepper.js runs in headless Chromium (no Node needed) and is compared
with the chapter 5 simulator (snippets/ch05/simulator.py) and with chapter 4's worked example. The widgets
run in a bare page here; tests/test_browser.py drives them in the built site.
"""

# ruff: noqa: E741  (l and O are the names the chapters use)
from __future__ import annotations

import importlib.util
import itertools
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("mkdocs", reason="needs the documentation tools (`make setup`)")

from book import ROOT, mkdocs_hooks  # noqa: E402
from tests.browser import launch

STEPPER_JS = ROOT / "docs/javascripts/stepper.js"
SIMULATOR = ROOT / "snippets/ch05/simulator.py"
WORKED_EXAMPLE = ROOT / "snippets/ch04/worked_example.out"
MINUS = "\u2212"


def simulator():
    if not SIMULATOR.is_file():
        pytest.skip("snippets/ch05/simulator.py is not there yet")
    spec = importlib.util.spec_from_file_location("ch05_simulator", SIMULATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shown(x: float, digits: int = 4) -> str:
    """A number as the widget shows it (toFixed, a real minus sign, no negative zero)."""
    if x == -math.inf:
        return MINUS + "\u221e"
    text = f"{x:.{digits}f}"
    return text.replace("-", "") if float(text) == 0 else text.replace("-", MINUS)


def parse(text: str) -> float:
    text = text.strip().replace(MINUS, "-")
    return -math.inf if text == "-\u221e" else float(text)


def close_to_shown(values, texts, digits=4) -> bool:
    """Each shown number is the value rounded to `digits` decimals (with room for the last ulp)."""
    return len(values) == len(texts) and all(
        (v == parse(t)) if math.isinf(v) else abs(v - parse(t)) <= 0.5 * 10**-digits + 1e-9
        for v, t in zip(values, texts, strict=True))


# ---------------------------------------------------------------- the MkDocs hook


def test_hook_turns_a_marker_into_a_container():
    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/05-flash-attention.md"))
    config = {"repo_url": "https://github.com/flash-attention-book/flash-attention-book"}
    markdown = "Text.\n\n<!-- stepper: flash-attention -->\n\n<!-- stepper: online-softmax block=2 seed=7 -->\n"
    html = mkdocs_hooks.on_page_markdown(markdown, page, config, files=[])
    assert '<div class="fa-stepper" data-stepper="flash-attention">' in html
    assert '<div class="fa-stepper" data-stepper="online-softmax" data-block="2" data-seed="7">' in html
    assert "needs JavaScript" in html and "<!-- stepper" not in html
    # Only a line of its own is a marker.
    assert "<!-- stepper" in mkdocs_hooks.on_page_markdown("see `<!-- stepper: x -->`\n", page, config, [])


def test_hook_links_a_chapter_to_its_notebook():
    config = {"repo_url": "https://github.com/flash-attention-book/flash-attention-book"}
    files = [SimpleNamespace(src_uri="notebooks/ch02_vector_add.ipynb")]
    chapter = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/02-vector-add.md"))
    html = mkdocs_hooks.on_page_markdown("# 2. Vector add\n", chapter, config, files)
    assert "Companion notebook" in html and "(../notebooks/ch02_vector_add.ipynb)" in html
    assert ("https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/"
            "docs/notebooks/ch02_vector_add.ipynb") in html
    other = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/03-tiled-matmul.md"))
    assert "Companion notebook" not in mkdocs_hooks.on_page_markdown("# 3\n", other, config, files)


# ---------------------------------------------------------------- the arithmetic, in a browser


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_content("<!doctype html><html><body><main id='box'></main></body></html>")
        page.add_script_tag(content=STEPPER_JS.read_text())
        page.errors = errors
        yield page
        browser.close()


CASES = [
    dict(seed=seed, n=n, d=d, blockM=bm, blockN=bn, causal=causal)
    for seed, n, d, bm, bn, causal in itertools.product(
        [1, 42], [8, 12, 16], [2, 3, 4], [2, 3, 4, 8], [2, 3, 4, 8], [False, True])
]


def test_flash_attention_trace_matches_the_simulator(page):
    sim = simulator()
    results = page.evaluate(
        """cases => cases.map(c => {
             const data = faStepper.inputs(c);
             const run = faStepper.flashAttention({...data, ...c});
             return {data, trace: run.trace, skipped: run.skipped, O: run.O,
                     exact: faStepper.exactAttention({...data, causal: c.causal})};
           })""", CASES)
    assert not page.errors
    for case, got in zip(CASES, results, strict=True):
        Q, K, V = (np.array(got["data"][name], dtype=np.float64) for name in "QKV")
        assert Q.shape == (case["n"], case["d"])
        assert np.array_equal(Q, np.round(Q, 1)) and np.abs(Q).max() <= 2  # one decimal, shown exactly
        O, stats = sim.flash_attention(Q, K, V, case["blockM"], case["blockN"], causal=case["causal"], trace=True)
        label = json.dumps(case)
        assert [tuple(s) for s in got["skipped"]] == [tuple(s) for s in stats["skipped"]], label
        assert len(got["trace"]) == len(stats["trace"]), label
        for js, py in zip(got["trace"], stats["trace"], strict=True):
            assert (js["q_block"], js["k_block"], js["kind"]) == (py["q_block"], py["k_block"], py["kind"]), label
            for key in ("m", "l", "acc"):
                assert np.allclose(js[key], py[key], rtol=1e-12, atol=1e-12), f"{label} {key}"
        assert np.allclose(got["O"], O, rtol=1e-12, atol=1e-12), label
        assert np.allclose(got["exact"], sim.reference(Q, K, V, causal=case["causal"]), rtol=1e-12, atol=1e-12)


def test_same_seed_same_inputs(page):
    first, second, other = page.evaluate(
        "() => [faStepper.inputs({seed: 3, n: 8, d: 2}), faStepper.inputs({seed: 3, n: 8, d: 2}),"
        " faStepper.inputs({seed: 4, n: 8, d: 2})]")
    assert first == second and first != other


def _worked_example_numbers():
    """m, l and acc after each tile, and the final output, from chapter 4's stored snippet output."""
    text = WORKED_EXAMPLE.read_text()
    stats = re.findall(r"^\s+\d\s+\[[^\]]*\]\s+(\S+)\s+\S+\s+\[[^\]]*\]\s+(\S+)$", text, re.MULTILINE)
    accs = re.findall(r"^\s+\d\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[", text, re.MULTILINE)
    final = re.search(r"acc / l = \[([^\]]*)\]", text)[1]
    softmax = re.search(r"^softmax\(x\)\s+= \[([^\]]*)\]", text, re.MULTILINE)[1]
    floats = lambda s: [float(v) for v in s.split(",")]
    return ([float(m) for m, _ in stats], [float(l) for _, l in stats], [floats(a) for a in accs],
            floats(final), floats(softmax))


def test_online_softmax_matches_chapter_4(page):
    if not WORKED_EXAMPLE.is_file():
        pytest.skip("snippets/ch04/worked_example.out is not there yet")
    m, l, acc, final, softmax = _worked_example_numbers()
    got = page.evaluate("() => faStepper.onlineSoftmax({x: [2, 4, 3, 7, 5, 1],"
                        " V: [[1, 0], [0, 1], [1, 1], [2, 1], [1, 2], [0, 3]], block: 3})")
    assert len(got["trace"]) == len(m) == 2
    assert close_to_shown([t["m"] for t in got["trace"]], [f"{v}" for v in m], digits=1)
    assert close_to_shown([t["l"] for t in got["trace"]], [f"{v:.4f}" for v in l])
    for step, expected in zip(got["trace"], acc, strict=True):
        assert close_to_shown(step["acc"], [f"{v:.4f}" for v in expected])
    assert close_to_shown(got["out"], [f"{v:.4f}" for v in final])
    assert close_to_shown(got["p"], [f"{v:.4f}" for v in softmax])


@pytest.mark.parametrize("block", [1, 2, 4, 5])
def test_online_softmax_matches_numpy(page, block):
    rng = np.random.default_rng(block)
    x = np.round(rng.uniform(-4, 4, 11), 1)
    V = np.round(rng.uniform(-2, 2, (11, 2)), 1)
    got = page.evaluate("args => faStepper.onlineSoftmax(args)", {"x": x.tolist(), "V": V.tolist(), "block": block})
    m, l, acc = -np.inf, 0.0, np.zeros(2)
    for step, start in zip(got["trace"], range(0, len(x), block), strict=True):
        tile = slice(start, start + block)
        m_new = max(m, x[tile].max())
        p = np.exp(x[tile] - m_new)
        l, acc, m = np.exp(m - m_new) * l + p.sum(), np.exp(m - m_new) * acc + p @ V[tile], m_new
        assert np.allclose([step["m"], step["l"], *step["acc"]], [m, l, *acc], rtol=1e-13, atol=0)
    softmax = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    assert np.allclose(got["p"], softmax, rtol=1e-12) and np.allclose(got["out"], softmax @ V, rtol=1e-12)


# ---------------------------------------------------------------- the widgets, in a bare page


def _mount(page, html: str):
    page.evaluate("html => { const box = document.getElementById('box'); box.innerHTML = html;"
                  " faStepper.mountAll(); }", html)


def read_table(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector(
        selector, "t => [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent))")


def read_inputs(page, root: str) -> dict[str, np.ndarray]:
    tables = page.eval_on_selector_all(
        f"{root} .fa-stepper__matrices table",
        "ts => ts.map(t => [t.tHead.rows[0].cells[0].textContent,"
        " [...t.tBodies[0].rows].map(r => [...r.cells].slice(1).map(c => c.textContent))])")
    return {name: np.array([[parse(v) for v in row] for row in rows]) for name, rows in tables}


def check_flash_widget(page, root: str, sim, causal: bool, block_m: int, block_n: int) -> None:
    """Step through the widget with the keyboard and compare every shown number with the simulator."""
    inputs = read_inputs(page, root)
    _, stats = sim.flash_attention(inputs["Q"], inputs["K"], inputs["V"], block_m, block_n, causal=causal,
                                   trace=True)
    page.click(f"{root} [data-action=reset]")
    page.focus(f"{root} .fa-stepper__scroll")
    total = int(page.get_attribute(root, "data-total"))
    assert total == len(stats["trace"])
    for step, expected in enumerate(stats["trace"], start=1):
        page.keyboard.press("ArrowRight")
        assert page.get_attribute(root, "data-step") == str(step)
        rows = read_table(page, f"{root} .fa-stepper__state table")
        assert len(rows) == len(expected["m"])
        for r, cells in enumerate(rows):
            values = [expected["m"][r], expected["l"][r], *expected["acc"][r]]
            assert close_to_shown(values, cells[1:]), f"step {step}, row {r}: {cells} vs {values}"
        current = page.eval_on_selector_all(f"{root} .fa-cell.is-current", "cs => cs.length")
        last_row = min((expected["q_block"] + 1) * block_m, len(inputs["Q"]))
        last_col = min((expected["k_block"] + 1) * block_n, len(inputs["K"]))
        assert current == (last_row - expected["q_block"] * block_m) * (last_col - expected["k_block"] * block_n)
    skipped_cells = page.eval_on_selector_all(f"{root} .fa-cell.is-skipped", "cs => cs.length")
    assert (skipped_cells > 0) == bool(stats["skipped"])
    final = read_table(page, f"{root} .fa-stepper__final table")
    exact = sim.reference(inputs["Q"], inputs["K"], inputs["V"], causal=causal)
    d = exact.shape[1]
    for r, cells in enumerate(final):
        assert close_to_shown(exact[r], cells[1 + d:1 + 2 * d]) and cells[1:1 + d] == cells[1 + d:1 + 2 * d]
        assert cells[-1] == "yes"
    assert page.get_attribute(f"{root} .fa-stepper__verdict", "data-equal") == "true"


def test_flash_widget_shows_the_simulator_numbers(page):
    sim = simulator()
    _mount(page, '<div class="fa-stepper" data-stepper="flash-attention" id="fa"></div>')
    assert page.is_visible("#fa [data-action=step]")
    check_flash_widget(page, "#fa", sim, causal=False, block_m=4, block_n=2)
    # Change the controls: causal, other blocks, another seed, a bigger problem.
    page.fill("#fa [data-control=seed]", "7")
    page.dispatch_event("#fa [data-control=seed]", "change")
    page.select_option("#fa [data-control=n]", "12")
    page.select_option("#fa [data-control=d]", "3")
    page.select_option("#fa [data-control=blockM]", "3")
    page.select_option("#fa [data-control=blockN]", "4")
    page.check("#fa [data-control=causal]")
    assert page.get_attribute("#fa", "data-step") == "0"
    check_flash_widget(page, "#fa", sim, causal=True, block_m=3, block_n=4)
    assert not page.errors


def test_flash_widget_buttons_and_query_row(page):
    _mount(page, '<div class="fa-stepper" data-stepper="flash-attention" id="fb" data-causal="true"></div>')
    total = int(page.get_attribute("#fb", "data-total"))
    page.click("#fb [data-action=step]")
    page.click("#fb [data-action=step]")
    page.click("#fb [data-action=back]")
    assert page.get_attribute("#fb", "data-step") == "1"
    page.click("#fb [data-action=end]")
    assert page.get_attribute("#fb", "data-step") == str(total)
    page.select_option("#fb [data-control=row]", "6")
    assert page.get_attribute("#fb", "data-step") == str(total)  # choosing a row keeps the position
    history = read_table(page, "#fb .fa-stepper__history table")
    assert history and all(cells[0].startswith("key block") for cells in history)
    assert page.inner_text("#fb .fa-stepper__history caption").startswith("Row q6")
    page.click("#fb [data-action=reset]")
    page.click("#fb [data-action=play]")
    assert page.get_attribute("#fb [data-action=play]", "aria-pressed") == "true"
    page.wait_for_function("() => document.getElementById('fb').dataset.step === '2'", timeout=5000)
    page.click("#fb [data-action=play]")
    assert page.inner_text("#fb [data-action=play]") == "Play"
    # Keyboard only: Tab reaches the buttons, Enter presses them, End jumps to the last step.
    page.focus("#fb [data-action=reset]")
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the Step button
    assert page.get_attribute("#fb", "data-step") == "1"
    page.keyboard.press("End")
    assert page.get_attribute("#fb", "data-step") == str(total)
    assert "Step" in page.inner_text("#fb .fa-stepper__status")
    assert not page.errors


def test_online_softmax_widget(page):
    _mount(page, '<div class="fa-stepper" data-stepper="online-softmax" id="os"></div>')
    assert page.get_attribute("#os", "data-total") == "2"  # 6 logits in blocks of 3, as in chapter 4
    page.click("#os [data-action=end]")
    rows = read_table(page, "#os .fa-stepper__state table")
    assert [cells[3] for cells in rows] == ["4.0000", "7.0000"]  # the running max m
    final = read_table(page, "#os .fa-stepper__final table")
    assert final[0][1:] == final[1][1:] and final[0][-2:] == ["1.7815", "1.1101"]
    page.select_option("#os [data-control=source]", "random")
    page.select_option("#os [data-control=block]", "4")
    assert page.get_attribute("#os", "data-total") == "2"  # 8 logits in blocks of 4
    page.click("#os [data-action=end]")
    assert page.get_attribute("#os .fa-stepper__verdict", "data-equal") == "true"
    assert not page.errors


# ---------------------------------------------------------------- chapter 10's backward loop order


def backward_simulator():
    path = ROOT / "snippets/ch10/simulator_backward.py"
    spec = importlib.util.spec_from_file_location("ch10_simulator_backward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dq", ["second_pass", "atomic"])
def test_backward_order_counts_what_the_simulator_counts(page, dq):
    sim, forward = backward_simulator(), simulator()
    rng = np.random.default_rng(0)
    for n, block_m, block_n, causal in itertools.product([8, 16, 32], [2, 4, 8], [2, 4, 8], [False, True]):
        Q, K, V, dO = (rng.standard_normal((n, 2)).astype(np.float32) for _ in range(4))
        O, stats = forward.flash_attention(Q, K, V, block_m, block_n, causal=causal)
        _, counted = sim.flash_backward(Q, K, V, O, stats["lse"], dO, block_m, block_n, causal=causal, dq=dq)
        got = page.evaluate("args => faStepper.backwardOrder(args)",
                            {"n": n, "blockM": block_m, "blockN": block_n, "causal": causal, "dq": dq})
        assert got["products"] == counted["matrix_products"], (n, block_m, block_n, causal)
        kinds = {(t["q_block"], t["k_block"]): t["kind"] for t in got["steps"]}
        for (i, j), kind in kinds.items():
            assert kind == forward.tile_kind(i, j, block_m, block_n, n, n, causal)
        kernels = [t["kernel"] for t in got["steps"]]
        assert kernels == sorted(kernels, key=["dkdv", "dq"].index)  # every dK/dV visit before any dQ visit
        assert ("dq" in kernels) == (dq == "second_pass")


def test_backward_widget_steps_through_both_kernels(page):
    _mount(page, '<div class="fa-stepper" data-stepper="backward" id="bw" data-n="8" data-block-m="4"'
                 ' data-block-n="4" data-causal="true"></div>')
    # 2 x 2 tiles, one above the diagonal: 3 visits by the dK/dV kernel, 3 by the dQ kernel.
    assert page.get_attribute("#bw", "data-total") == "6"
    assert "2 skipped by the causal mask" in page.inner_text("#bw .fa-stepper__status")
    page.click("#bw [data-action=step]")
    assert "dK, dV program 0 (keys of block K0) visits tile (Q0, K0), masked" in page.inner_text(
        "#bw .fa-stepper__status")
    page.click("#bw [data-action=end]")
    assert "dQ program 1" in page.inner_text("#bw .fa-stepper__status")
    counts = dict((cells[0], cells[1]) for cells in read_table(page, "#bw .fa-stepper__state table"))
    assert counts["matrix products so far"] == counts["matrix products in all"] == str(3 * 4 + 3 * 3)
    page.select_option("#bw [data-control=dq]", "atomic")
    assert page.get_attribute("#bw", "data-step") == "0" and page.get_attribute("#bw", "data-total") == "3"
    page.click("#bw [data-action=end]")
    counts = dict((cells[0], cells[1]) for cells in read_table(page, "#bw .fa-stepper__state table"))
    assert counts["atomic adds of a dQ block"] == "3" and counts["matrix products in all"] == "15"
    assert not page.errors


# ---------------------------------------------------------------- chapter 12's split-KV


@pytest.mark.parametrize(("n", "splits"), [(8, 1), (8, 3), (8, 6), (12, 4), (6, 4)])
def test_split_kv_states_and_merge_match_numpy(page, n, splits):
    rng = np.random.default_rng(n * 10 + splits)
    x, V = rng.standard_normal(n) * 3, rng.standard_normal((n, 2))
    got = page.evaluate("args => faStepper.splitKV(args)", {"x": x.tolist(), "V": V.tolist(), "splits": splits})
    size = math.ceil(n / splits)
    for s, part in enumerate(got["parts"]):
        keys = slice(min(s * size, n), min(s * size + size, n))
        if keys.start == keys.stop:  # an empty split: no key, no weight
            assert part["lse"] is None or part["lse"] == -math.inf or part["l"] == 0
            assert got["weights"][s] == 0 and part["o"] == [0, 0]
            continue
        e = np.exp(x[keys] - x[keys].max())
        assert math.isclose(part["lse"], x[keys].max() + math.log(e.sum()), rel_tol=1e-12)
        assert np.allclose(part["o"], e @ V[keys] / e.sum(), rtol=1e-12)
    softmax = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    assert np.allclose(got["out"], softmax @ V, rtol=1e-12)
    assert math.isclose(got["lse"], x.max() + math.log(np.exp(x - x.max()).sum()), rel_tol=1e-12)


def test_split_kv_widget_steps_through_splits_then_merges(page):
    _mount(page, '<div class="fa-stepper" data-stepper="split-kv" id="sk" data-n="8" data-splits="6"></div>')
    assert page.get_attribute("#sk", "data-total") == "7"  # six splits, then the merge
    for _ in range(5):
        page.click("#sk [data-action=step]")
    assert "split 4, empty (past the last key)" in page.inner_text("#sk .fa-stepper__status")
    page.click("#sk [data-action=end]")
    rows = read_table(page, "#sk .fa-stepper__state table")
    assert [r[1] for r in rows] == ["0\u20131", "2\u20133", "4\u20135", "6\u20137", "none", "none"]
    assert [r[-1] for r in rows][-2:] == ["0.0000", "0.0000"]  # empty splits get no weight
    assert page.get_attribute("#sk .fa-stepper__verdict", "data-equal") == "true"
    assert not page.errors
