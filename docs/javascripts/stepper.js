// Interactive steppers for online softmax (chapter 4), FlashAttention (chapter 5), its backward loop order
// (chapter 10) and split-KV decoding (chapter 12).
//
// Plain JavaScript, no libraries, no network. The page holds an empty container that the book's MkDocs
// hook writes for a line `<!-- stepper: NAME -->`:
//
//     <div class="fa-stepper" data-stepper="flash-attention">...</div>
//
// The arithmetic lives in pure functions, exposed as window.faStepper, so that the tests can run them in
// a browser and compare every number with the book's numpy simulator (snippets/ch05/simulator.py):
//
//     faStepper.inputs({seed, n, d})                       -> {Q, K, V}, values rounded to one decimal
//     faStepper.flashAttention({Q, K, V, blockM, blockN, causal})
//         -> {trace: [{q_block, k_block, kind, m, l, acc}], skipped: [[i, j]], O, S, scale}
//     faStepper.exactAttention({Q, K, V, causal})          -> O computed directly
//     faStepper.onlineSoftmax({x, V, block})               -> {trace: [{block, start, stop, m, l, acc}], p, out}
//     faStepper.backwardOrder({n, blockM, blockN, causal, dq}) -> {steps: [{kernel, program, q_block, k_block, kind,
//         products}], skipped, products, qBlocks, kBlocks}
//     faStepper.splitKV({x, V, splits})                    -> {parts: [{split, start, stop, m, l, lse, o}], weights,
//         out, lse}
(function () {
  "use strict";

  // ---------------------------------------------------------------- arithmetic (pure functions)

  // A small seeded generator (mulberry32): the same seed gives the same numbers in every browser.
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // Uniform in [-2, 2), rounded to one decimal, so that the page can show every input exactly.
  function matrix(rand, rows, cols) {
    const out = [];
    for (let r = 0; r < rows; r++) {
      const row = [];
      for (let c = 0; c < cols; c++) row.push(Math.round((rand() * 4 - 2) * 10) / 10 + 0);
      out.push(row);
    }
    return out;
  }

  function inputs({ seed, n, d }) {
    const rand = mulberry32(seed);
    const Q = matrix(rand, n, d);
    const K = matrix(rand, n, d);
    const V = matrix(rand, n, d);
    return { Q, K, V };
  }

  function dot(a, b) {
    let s = 0;
    for (let i = 0; i < a.length; i++) s += a[i] * b[i];
    return s;
  }

  function scores(Q, K) {
    const scale = 1 / Math.sqrt(Q[0].length);
    return { scale, S: Q.map((q) => K.map((k) => dot(q, k) * scale)) };
  }

  // Which tiles a causal mask lets through (top-left alignment: query i sees keys j <= i).
  function tileKind(i, j, blockM, blockN, nQ, nK, causal) {
    if (!causal) return "full";
    const firstRow = i * blockM;
    const lastRow = Math.min(firstRow + blockM, nQ) - 1;
    const firstKey = j * blockN;
    const lastKey = Math.min(firstKey + blockN, nK) - 1;
    if (firstKey > lastRow) return "skipped";
    if (lastKey <= firstRow) return "full";
    return "diagonal";
  }

  // FlashAttention-2's loop order, one query block at a time, as in the chapter's numpy simulator.
  function flashAttention({ Q, K, V, blockM, blockN, causal }) {
    const n = Q.length;
    const nK = K.length;
    const d = V[0].length;
    const { scale, S } = scores(Q, K);
    const trace = [];
    const skipped = [];
    const O = [];
    for (let i = 0; i * blockM < n; i++) {
      const rowStart = i * blockM;
      const rowStop = Math.min(rowStart + blockM, n);
      const rows = rowStop - rowStart;
      let m = new Array(rows).fill(-Infinity);
      let l = new Array(rows).fill(0);
      let acc = Array.from({ length: rows }, () => new Array(d).fill(0));
      for (let j = 0; j * blockN < nK; j++) {
        const kind = tileKind(i, j, blockM, blockN, n, nK, causal);
        if (kind === "skipped") {
          skipped.push([i, j]);
          continue;
        }
        const colStart = j * blockN;
        const colStop = Math.min(colStart + blockN, nK);
        const mNew = [];
        const lNew = [];
        const accNew = [];
        for (let r = 0; r < rows; r++) {
          const row = rowStart + r;
          const s = [];
          for (let c = colStart; c < colStop; c++) {
            s.push(kind === "diagonal" && c > row ? -Infinity : S[row][c]);
          }
          const mr = Math.max(m[r], ...s);
          const safe = mr === -Infinity ? 0 : mr; // a row that sees no key yet
          const alpha = Math.exp(m[r] - safe); // rescales what was summed under the old max
          const p = s.map((x) => Math.exp(x - safe));
          let sum = 0;
          for (const x of p) sum += x;
          const a = acc[r].map((x) => alpha * x);
          for (let k = 0; k < p.length; k++) {
            for (let c = 0; c < d; c++) a[c] += p[k] * V[colStart + k][c];
          }
          mNew.push(mr);
          lNew.push(alpha * l[r] + sum);
          accNew.push(a);
        }
        m = mNew;
        l = lNew;
        acc = accNew;
        trace.push({ q_block: i, k_block: j, kind, m: m.slice(), l: l.slice(), acc: acc.map((a) => a.slice()) });
      }
      for (let r = 0; r < rows; r++) O.push(acc[r].map((x) => x / (l[r] === 0 ? 1 : l[r])));
    }
    return { trace, skipped, O, S, scale };
  }

  // softmax(Q Kᵀ / sqrt(d)) V, directly, row by row: the answer the stepper must reach.
  function exactAttention({ Q, K, V, causal }) {
    const { S } = scores(Q, K);
    return S.map((row, i) => {
      const s = row.map((x, j) => (causal && j > i ? -Infinity : x));
      const mx = Math.max(...s);
      const p = s.map((x) => Math.exp(x - mx));
      const total = p.reduce((a, b) => a + b, 0);
      return V[0].map((_, c) => p.reduce((acc, w, j) => acc + w * V[j][c], 0) / total);
    });
  }

  // Online softmax over one row of logits x, a block of `block` entries at a time, with one row of V per
  // entry so that the running acc = Σ exp(x - m) V is one attention output row in miniature.
  function onlineSoftmax({ x, V, block }) {
    const trace = [];
    const d = V[0].length;
    let m = -Infinity;
    let l = 0;
    let acc = new Array(d).fill(0);
    for (let b = 0; b * block < x.length; b++) {
      const start = b * block;
      const stop = Math.min(start + block, x.length);
      const blockMax = Math.max(...x.slice(start, stop));
      const mNew = Math.max(m, blockMax);
      const alpha = Math.exp(m - mNew); // exp(m_old - m_new): 0 on the first block, where m_old = -inf
      let sum = 0;
      const next = acc.map((a) => alpha * a);
      for (let k = start; k < stop; k++) {
        const p = Math.exp(x[k] - mNew);
        sum += p;
        for (let c = 0; c < d; c++) next[c] += p * V[k][c];
      }
      l = alpha * l + sum;
      acc = next;
      m = mNew;
      trace.push({ block: b, start, stop, block_max: blockMax, alpha, m, l, acc: acc.slice() });
    }
    return { trace, p: x.map((xi) => Math.exp(xi - m) / l), out: acc.map((a) => a / l) };
  }

  function exactSoftmax(x) {
    const mx = Math.max(...x);
    const e = x.map((xi) => Math.exp(xi - mx));
    const total = e.reduce((a, b) => a + b, 0);
    return e.map((ei) => ei / total);
  }

  // Chapter 12's split-KV: the entries of one row of scores x (with a row of V each) cut into `splits` ranges of
  // equal length; each range's softmax state (m, l, its own normalized output o and its logsumexp lse), then the
  // exact merge with weights exp(lse - max lse). A range past the end is empty: lse = -inf, o = 0, weight 0.
  function splitKV({ x, V, splits }) {
    const d = V[0].length;
    const size = Math.ceil(x.length / splits);
    const parts = [];
    for (let s = 0; s < splits; s++) {
      const start = Math.min(s * size, x.length);
      const stop = Math.min(start + size, x.length);
      if (start === stop) {
        parts.push({ split: s, start, stop, m: -Infinity, l: 0, lse: -Infinity, o: new Array(d).fill(0) });
        continue;
      }
      const m = Math.max(...x.slice(start, stop));
      let l = 0;
      const acc = new Array(d).fill(0);
      for (let k = start; k < stop; k++) {
        const p = Math.exp(x[k] - m);
        l += p;
        for (let c = 0; c < d; c++) acc[c] += p * V[k][c];
      }
      parts.push({ split: s, start, stop, m, l, lse: m + Math.log(l), o: acc.map((a) => a / l) });
    }
    const top = Math.max(...parts.map((p) => p.lse));
    const weights = parts.map((p) => Math.exp(p.lse - top));
    const total = weights.reduce((a, b) => a + b, 0);
    const out = Array.from({ length: d }, (_, c) => parts.reduce((a, p, s) => a + weights[s] * p.o[c], 0) / total);
    return { parts, weights: weights.map((w) => w / total), out, lse: top + Math.log(total) };
  }

  // ---------------------------------------------------------------- page helpers

  const MINUS = "\u2212";

  // Chapter 10's backward loop order, tile by tile, as in snippets/ch10/simulator_backward.py: first one
  // program per key block (dK, dV; with dq = "atomic" it also adds each tile's share of dQ), then, for
  // dq = "second_pass", one program per query block (dQ). Counts the matrix products of every visit.
  function backwardOrder({ n, blockM, blockN, causal, dq }) {
    const qBlocks = Math.ceil(n / blockM);
    const kBlocks = Math.ceil(n / blockN);
    const steps = [];
    const skipped = [];
    let products = 0;
    // One tile of a kernel's program: skipped by the causal mask, or visited at `cost` matrix products.
    function visit(kernel, program, i, j, cost) {
      const kind = tileKind(i, j, blockM, blockN, n, n, causal);
      if (kind === "skipped") {
        skipped.push([kernel, i, j]);
        return;
      }
      products += cost;
      steps.push({ kernel, program, q_block: i, k_block: j, kind, products });
    }
    for (let j = 0; j < kBlocks; j++) {
      for (let i = 0; i < qBlocks; i++) visit("dkdv", j, i, j, dq === "atomic" ? 5 : 4);
    }
    if (dq === "second_pass") {
      for (let i = 0; i < qBlocks; i++) {
        for (let j = 0; j < kBlocks; j++) visit("dq", i, i, j, 3);
      }
    }
    return { steps, skipped, products, qBlocks, kBlocks };
  }

  function fmt(x, digits) {
    if (x === -Infinity) return MINUS + "\u221e";
    if (x === Infinity) return "\u221e";
    const s = x.toFixed(digits);
    return Number(s) === 0 ? s.replace("-", "") : s.replace("-", MINUS);
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of [].concat(children || [])) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function select(label, name, options, value, onchange) {
    const id = `fa-${name}-${Math.random().toString(36).slice(2, 8)}`;
    const box = el("select", { id, name, "data-control": name, onchange });
    for (const option of options) {
      const [optionValue, optionLabel] = Array.isArray(option) ? option : [option, String(option)];
      box.append(el("option", { value: optionValue, text: optionLabel, selected: optionValue === value }));
    }
    return el("span", { class: "fa-stepper__field" }, [el("label", { for: id, text: label }), box]);
  }

  function numberInput(label, name, value, min, max, onchange) {
    const id = `fa-${name}-${Math.random().toString(36).slice(2, 8)}`;
    const input = el("input", { id, name, type: "number", min, max, step: 1, value, "data-control": name, onchange });
    return el("span", { class: "fa-stepper__field" }, [el("label", { for: id, text: label }), input]);
  }

  function checkbox(label, name, checked, onchange) {
    const id = `fa-${name}-${Math.random().toString(36).slice(2, 8)}`;
    const input = el("input", { id, name, type: "checkbox", checked, "data-control": name, onchange });
    return el("span", { class: "fa-stepper__field fa-stepper__field--check" }, [input, el("label", { for: id, text: label })]);
  }

  function table(caption, header, rows, options) {
    const opts = options || {};
    const body = rows.map((cells, r) =>
      el("tr", { class: opts.rowClass ? opts.rowClass(r) : null }, cells.map((cell, c) => el(c === 0 ? "th" : "td", { scope: c === 0 ? "row" : null, text: cell }))),
    );
    return el("table", { class: "fa-stepper__table" }, [
      caption ? el("caption", { text: caption }) : null,
      el("thead", {}, el("tr", {}, header.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, body),
    ]);
  }

  function matrixTable(name, M) {
    const header = [name].concat(M[0].map((_, c) => `${c}`));
    return table(null, header, M.map((row, r) => [String(r)].concat(row.map((x) => fmt(x, 1)))));
  }

  // Step, back, play, reset and end buttons, plus the arrow keys on the widget.
  function transport(root, state, render) {
    let timer = null;
    const play = el("button", { type: "button", class: "md-button", "data-action": "play", "aria-pressed": "false", text: "Play" });
    function stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      play.textContent = "Play";
      play.setAttribute("aria-pressed", "false");
    }
    function go(step) {
      state.step = Math.max(0, Math.min(state.total(), step));
      render();
    }
    play.addEventListener("click", () => {
      if (timer !== null) return stop();
      if (state.step >= state.total()) go(0);
      timer = setInterval(() => {
        go(state.step + 1);
        if (state.step >= state.total()) stop();
      }, 900);
      play.textContent = "Pause";
      play.setAttribute("aria-pressed", "true");
    });
    const button = (action, text, label, onclick) =>
      el("button", { type: "button", class: "md-button", "data-action": action, "aria-label": label, text, onclick });
    const bar = el("div", { class: "fa-stepper__transport", role: "group", "aria-label": "Steps" }, [
      button("reset", "Reset", "Reset to the start", () => { stop(); go(0); }),
      button("back", "Back", "One step back", () => { stop(); go(state.step - 1); }),
      button("step", "Step", "One step forward", () => { stop(); go(state.step + 1); }),
      play,
      button("end", "End", "Jump to the last step", () => { stop(); go(state.total()); }),
    ]);
    root.addEventListener("keydown", (event) => {
      const tag = event.target.tagName;
      if (tag === "INPUT" || tag === "SELECT" || event.altKey || event.ctrlKey || event.metaKey) return;
      const keys = { ArrowRight: 1, ArrowLeft: -1 };
      if (event.key in keys) go(state.step + keys[event.key]);
      else if (event.key === "Home") go(0);
      else if (event.key === "End") go(state.total());
      else return;
      stop();
      event.preventDefault();
    });
    return { bar, stop };
  }

  function intData(root, name, fallback) {
    const value = parseInt(root.dataset[name], 10);
    return Number.isFinite(value) ? value : fallback;
  }

  // ---------------------------------------------------------------- the FlashAttention stepper

  function mountFlashAttention(root) {
    const params = {
      seed: intData(root, "seed", 1),
      n: intData(root, "n", 8),
      d: intData(root, "d", 2),
      blockM: intData(root, "blockM", 4),
      blockN: intData(root, "blockN", 2),
      causal: root.dataset.causal === "true",
      row: intData(root, "row", 5),
    };
    const state = { step: 0, total: () => (state.result ? state.result.trace.length : 0) };

    function recompute() {
      params.row = Math.min(params.row, params.n - 1);
      params.blockM = Math.min(params.blockM, params.n);
      params.blockN = Math.min(params.blockN, params.n);
      state.data = inputs(params);
      state.result = flashAttention({ ...state.data, ...params });
      state.exact = exactAttention({ ...state.data, causal: params.causal });
      state.step = Math.min(state.step, state.total());
    }

    function changed(name, parse) {
      return (event) => {
        const value = parse(event.target);
        if (value === null) return;
        params[name] = value;
        controls.stop();
        if (name !== "row") state.step = 0;
        build();
      };
    }
    const asInt = (lo, hi) => (target) => {
      const value = parseInt(target.value, 10);
      if (!Number.isFinite(value)) return null;
      return Math.max(lo, Math.min(hi, value));
    };

    const status = el("p", { class: "fa-stepper__status", role: "status", "aria-live": "polite" });
    const controls = transport(root, state, render);
    const form = el("div", { class: "fa-stepper__controls" });
    const inputsBox = el("div", { class: "fa-stepper__inputs" });
    const grid = el("div", { class: "fa-stepper__grid", role: "grid", "aria-readonly": "true" });
    const gridWrap = el("div", { class: "fa-stepper__scroll", tabindex: "0", "aria-label": "Score grid, scrolls sideways" }, grid);
    const statePanel = el("div", { class: "fa-stepper__state" });
    const history = el("div", { class: "fa-stepper__history" });
    const final = el("div", { class: "fa-stepper__final" });

    function build() {
      recompute();
      const { n } = params;
      const blocks = [2, 3, 4, 8, 16].filter((b) => b <= n);
      form.replaceChildren(
        numberInput("Seed", "seed", params.seed, 0, 99999, changed("seed", asInt(0, 99999))),
        select("N", "n", [8, 12, 16], n, changed("n", asInt(8, 16))),
        select("Head dim d", "d", [2, 3, 4], params.d, changed("d", asInt(2, 4))),
        select("Query block", "blockM", blocks, params.blockM, changed("blockM", asInt(1, 16))),
        select("Key block", "blockN", blocks, params.blockN, changed("blockN", asInt(1, 16))),
        checkbox("Causal", "causal", params.causal, changed("causal", (t) => t.checked)),
        select("Query row", "row", Array.from({ length: n }, (_, i) => i), params.row, changed("row", asInt(0, 15))),
      );
      const { Q, K, V } = state.data;
      inputsBox.replaceChildren(
        el("details", { open: true }, [
          el("summary", { text: `Inputs Q, K, V (seed ${params.seed}, N = ${n}, d = ${params.d})` }),
          el("div", { class: "fa-stepper__matrices" }, [matrixTable("Q", Q), matrixTable("K", K), matrixTable("V", V)]),
        ]),
      );
      render();
    }

    // The tile and block that step `step` has just finished (step 0: nothing yet).
    function current() {
      const trace = state.result.trace;
      return state.step > 0 ? trace[state.step - 1] : null;
    }

    function renderGrid() {
      const { n, blockM, blockN, row } = params;
      const { S, trace, skipped } = state.result;
      const done = new Set(trace.slice(0, state.step).map((t) => `${t.q_block},${t.k_block}`));
      const skip = new Set(skipped.map(([i, j]) => `${i},${j}`));
      const now = current();
      grid.style.setProperty("--fa-columns", n + 1);
      const cells = [el("div", { class: "fa-cell fa-cell--corner", role: "columnheader", text: "S" })];
      for (let c = 0; c < n; c++) cells.push(el("div", { class: "fa-cell fa-cell--head", role: "columnheader", text: `k${c}` }));
      const rows = [el("div", { class: "fa-row", role: "row" }, cells)];
      for (let r = 0; r < n; r++) {
        const rowCells = [el("div", { class: "fa-cell fa-cell--head" + (r === row ? " is-row" : ""), role: "rowheader", text: `q${r}` })];
        for (let c = 0; c < n; c++) {
          const key = `${Math.floor(r / blockM)},${Math.floor(c / blockN)}`;
          const classes = ["fa-cell"];
          let label = "";
          if (c % blockN === 0) classes.push("is-tile-left");
          if (r % blockM === 0) classes.push("is-tile-top");
          if (skip.has(key)) { classes.push("is-skipped"); label = "skipped"; }
          else if (params.causal && c > r) { classes.push("is-masked"); label = "masked"; }
          if (now && key === `${now.q_block},${now.k_block}`) { classes.push("is-current"); label += " current"; }
          else if (done.has(key)) { classes.push("is-done"); label += " done"; }
          if (r === row) classes.push("is-row");
          const masked = skip.has(key) || (params.causal && c > r);
          rowCells.push(el("div", { class: classes.join(" "), role: "gridcell", title: label.trim() || null, text: masked ? "\u00b7" : fmt(S[r][c], 1) }));
        }
        rows.push(el("div", { class: "fa-row", role: "row" }, rowCells));
      }
      grid.replaceChildren(...rows);
      grid.setAttribute("aria-label", `Scores S = Q K\u1d40 / \u221a${params.d}, ${n} by ${n}, in tiles of ${blockM} by ${blockN}`);
    }

    // m, l and acc of every row of the current query block after the current step.
    function renderState() {
      const { blockM, row, d } = params;
      const { trace } = state.result;
      const now = current();
      const qBlock = now ? now.q_block : 0;
      const start = qBlock * blockM;
      const rows = Math.min(blockM, params.n - start);
      const before = now ? null : { m: new Array(rows).fill(-Infinity), l: new Array(rows).fill(0), acc: Array.from({ length: rows }, () => new Array(d).fill(0)) };
      const values = now || before;
      const title = now
        ? `Query block ${qBlock} (rows ${start}\u2013${start + rows - 1}) after key block ${now.k_block}`
        : `Query block 0 (rows 0\u2013${rows - 1}) before the first tile`;
      const header = ["row", "m", "l"].concat(Array.from({ length: d }, (_, c) => `acc[${c}]`));
      const body = values.m.map((m, r) => [`q${start + r}`, fmt(m, 4), fmt(values.l[r], 4)].concat(values.acc[r].map((x) => fmt(x, 4))));
      statePanel.replaceChildren(
        table(title, header, body, { rowClass: (r) => (start + r === row ? "is-row" : null) }),
        el("p", { class: "fa-stepper__note", text: "m: running row max of the scores; l: running sum of exp(score \u2212 m); acc: running sum of exp(score \u2212 m) \u00b7 v, not yet divided by l." }),
      );
      // The chosen row's history: its values after each tile its query block has visited so far.
      const rowBlock = Math.floor(row / blockM);
      const local = row - rowBlock * blockM;
      const seen = trace.slice(0, state.step).filter((t) => t.q_block === rowBlock);
      const lines = seen.map((t) => [`key block ${t.k_block}${t.kind === "diagonal" ? " (masked)" : ""}`, fmt(t.m[local], 4), fmt(t.l[local], 4)].concat(t.acc[local].map((x) => fmt(x, 4))));
      history.replaceChildren(
        lines.length
          ? table(`Row q${row}, after each tile of its query block`, ["after"].concat(header.slice(1)), lines)
          : el("p", { class: "fa-stepper__note", text: `Row q${row} belongs to query block ${rowBlock}; no tile of that block has been visited yet.` }),
      );
    }

    function renderFinal() {
      const total = state.total();
      if (state.step < total) {
        final.replaceChildren(el("p", { class: "fa-stepper__note", text: "After the last tile: the output acc / l beside the exact attention output." }));
        return;
      }
      const { O } = state.result;
      const header = ["row"].concat(O[0].map((_, c) => `O[${c}]`), O[0].map((_, c) => `exact[${c}]`), ["equal"]);
      const body = O.map((o, r) => {
        const ours = o.map((x) => fmt(x, 4));
        const exact = state.exact[r].map((x) => fmt(x, 4));
        return [`q${r}`].concat(ours, exact, [ours.join() === exact.join() ? "yes" : "no"]);
      });
      const allEqual = body.every((cells) => cells[cells.length - 1] === "yes");
      final.replaceChildren(
        table("Normalized output acc / l beside softmax(Q K\u1d40 / \u221ad) V computed directly", header, body, { rowClass: (r) => (r === params.row ? "is-row" : null) }),
        el("p", { class: "fa-stepper__verdict", "data-equal": String(allEqual), text: allEqual ? "Every row equals the exact output to 4 decimals." : "Some rows differ from the exact output at 4 decimals." }),
      );
    }

    function render() {
      const total = state.total();
      const now = current();
      const skipped = state.result.skipped.length;
      status.textContent = now
        ? `Step ${state.step} of ${total}: tile (query block ${now.q_block}, key block ${now.k_block}), ${now.kind === "diagonal" ? "on the diagonal, masked element by element" : "full"}.`
        : `Step 0 of ${total}: ${total} tiles to visit${skipped ? `, ${skipped} skipped by the causal mask` : ""}. Press Step or the right arrow key.`;
      root.dataset.step = String(state.step);
      root.dataset.total = String(total);
      renderGrid();
      renderState();
      renderFinal();
    }

    root.replaceChildren(
      form,
      controls.bar,
      status,
      inputsBox,
      el("div", { class: "fa-stepper__panels" }, [gridWrap, el("div", {}, [statePanel, history])]),
      el("div", { class: "fa-stepper__legend", "aria-hidden": "true" }, [
        el("span", { class: "fa-key is-current", text: "current tile" }),
        el("span", { class: "fa-key is-done", text: "finished" }),
        el("span", { class: "fa-key is-skipped", text: "skipped (causal)" }),
        el("span", { class: "fa-key is-masked", text: "masked element" }),
        el("span", { class: "fa-key is-row", text: "chosen query row" }),
      ]),
      final,
    );
    build();
  }

  // ---------------------------------------------------------------- the online softmax stepper

  // Chapter 4's worked example: one query's scores against 6 keys, and the 6 x 2 values.
  const CHAPTER4 = {
    x: [2, 4, 3, 7, 5, 1],
    V: [[1, 0], [0, 1], [1, 1], [2, 1], [1, 2], [0, 3]],
  };

  function mountOnlineSoftmax(root) {
    const params = { source: root.dataset.source || "chapter", seed: intData(root, "seed", 3), n: intData(root, "n", 8), block: intData(root, "block", 3) };
    const state = { step: 0, total: () => state.result.trace.length };

    function recompute() {
      if (params.source === "chapter") {
        state.x = CHAPTER4.x;
        state.V = CHAPTER4.V;
      } else {
        const rand = mulberry32(params.seed);
        state.x = Array.from({ length: params.n }, () => Math.round((rand() * 8 - 4) * 10) / 10 + 0);
        state.V = matrix(rand, params.n, 2);
      }
      params.block = Math.min(params.block, state.x.length);
      state.result = onlineSoftmax({ x: state.x, V: state.V, block: params.block });
      state.step = Math.min(state.step, state.total());
    }

    const status = el("p", { class: "fa-stepper__status", role: "status", "aria-live": "polite" });
    const controls = transport(root, state, render);
    const form = el("div", { class: "fa-stepper__controls" });
    const strip = el("div", { class: "fa-stepper__scroll", tabindex: "0", "aria-label": "Logits and values, scrolls sideways" });
    const steps = el("div", { class: "fa-stepper__state" });
    const final = el("div", { class: "fa-stepper__final" });

    function changed(name, parse) {
      return (event) => {
        const value = parse(event.target.value);
        if (value === null || (typeof value === "number" && !Number.isFinite(value))) return;
        params[name] = value;
        controls.stop();
        state.step = 0;
        build();
      };
    }
    const asInt = (value) => parseInt(value, 10);

    function build() {
      recompute();
      const n = state.x.length;
      const fields = [select("Inputs", "source", [["chapter", "chapter 4 example"], ["random", "random (seeded)"]], params.source, changed("source", String))];
      if (params.source !== "chapter") {
        fields.push(numberInput("Seed", "seed", params.seed, 0, 99999, changed("seed", asInt)));
        fields.push(select("Length", "n", [6, 8, 12], params.n, changed("n", asInt)));
      }
      fields.push(select("Tile size", "block", [1, 2, 3, 4, 6].filter((b) => b <= n), params.block, changed("block", asInt)));
      form.replaceChildren(...fields);
      render();
    }

    function render() {
      const { trace } = state.result;
      const total = state.total();
      const d = state.V[0].length;
      const now = state.step > 0 ? trace[state.step - 1] : null;
      status.textContent = now
        ? `Step ${state.step} of ${total}: tile ${now.block + 1} (entries ${now.start}\u2013${now.stop - 1}).`
        : `Step 0 of ${total}: m = \u2212\u221e, l = 0, acc = 0. Press Step or the right arrow key.`;
      root.dataset.step = String(state.step);
      root.dataset.total = String(total);
      const cellClass = (k) => {
        const b = Math.floor(k / params.block);
        const classes = ["fa-cell"];
        if (k % params.block === 0) classes.push("is-tile-left");
        if (now && b === now.block) classes.push("is-current");
        else if (b < state.step) classes.push("is-done");
        return classes.join(" ");
      };
      const line = (name, values) =>
        el("div", { class: "fa-row", role: "row" }, [el("div", { class: "fa-cell fa-cell--head", role: "rowheader", text: name })].concat(values.map((x, k) => el("div", { class: cellClass(k), role: "gridcell", text: fmt(x, 1) }))));
      const rows = [el("div", { class: "fa-row", role: "row" }, [el("div", { class: "fa-cell fa-cell--corner", role: "columnheader", text: "" })].concat(state.x.map((_, k) => el("div", { class: "fa-cell fa-cell--head", role: "columnheader", text: String(k) }))))];
      rows.push(line("x", state.x));
      for (let c = 0; c < d; c++) rows.push(line(`V[:, ${c}]`, state.V.map((v) => v[c])));
      const grid = el("div", { class: "fa-stepper__grid", role: "grid", "aria-readonly": "true", "aria-label": `Logits x and values V, in tiles of ${params.block}` }, rows);
      grid.style.setProperty("--fa-columns", state.x.length + 1);
      strip.replaceChildren(grid);
      const accHeader = Array.from({ length: d }, (_, c) => `acc[${c}]`);
      const body = trace.slice(0, state.step).map((t) => [`${t.block + 1} (${t.start}\u2013${t.stop - 1})`, fmt(t.block_max, 4), fmt(t.alpha, 4), fmt(t.m, 4), fmt(t.l, 4)].concat(t.acc.map((a) => fmt(a, 4))));
      steps.replaceChildren(
        body.length
          ? table("After each tile (numbered from 1, as in chapter 4)", ["tile", "tile max", "e^(m_old \u2212 m)", "m", "l"].concat(accHeader), body)
          : el("p", { class: "fa-stepper__note", text: "m: running max; l: running sum of exp(x \u2212 m); acc: running sum of exp(x \u2212 m) \u00b7 V, not yet divided by l." }),
      );
      if (state.step < total) {
        final.replaceChildren(el("p", { class: "fa-stepper__note", text: "After the last tile: exp(x \u2212 m) / l and acc / l beside the softmax computed in one pass." }));
        return;
      }
      const exact = exactSoftmax(state.x);
      const exactOut = Array.from({ length: d }, (_, c) => exact.reduce((a, p, k) => a + p * state.V[k][c], 0));
      const ours = state.result.p.map((p) => fmt(p, 4)).concat(state.result.out.map((o) => fmt(o, 4)));
      const theirs = exact.map((p) => fmt(p, 4)).concat(exactOut.map((o) => fmt(o, 4)));
      const equal = ours.join() === theirs.join();
      const header = [""].concat(state.x.map((_, k) => `p${k}`), Array.from({ length: d }, (_, c) => `out[${c}]`));
      final.replaceChildren(
        table("Softmax p and output acc / l from the running values, beside one-pass softmax(x) and softmax(x) V", header, [["online"].concat(ours), ["exact"].concat(theirs)]),
        el("p", { class: "fa-stepper__verdict", "data-equal": String(equal), text: equal ? "Equal to 4 decimals." : "Different at 4 decimals." }),
      );
    }

    root.replaceChildren(form, controls.bar, status, strip, steps, final);
    build();
  }

  // ---------------------------------------------------------------- the backward loop-order stepper

  function mountBackward(root) {
    const params = {
      n: intData(root, "n", 16),
      blockM: intData(root, "blockM", 4),
      blockN: intData(root, "blockN", 4),
      causal: root.dataset.causal === "true",
      dq: root.dataset.dq === "atomic" ? "atomic" : "second_pass",
    };
    const state = { step: 0, total: () => state.result.steps.length };

    function changed(name, parse) {
      return (event) => {
        const value = parse(event.target);
        if (value === null) return;
        params[name] = value;
        controls.stop();
        state.step = 0;
        build();
      };
    }
    const asInt = (target) => {
      const value = parseInt(target.value, 10);
      return Number.isFinite(value) ? value : null;
    };

    const status = el("p", { class: "fa-stepper__status", role: "status", "aria-live": "polite" });
    const controls = transport(root, state, render);
    const form = el("div", { class: "fa-stepper__controls" });
    const grid = el("div", { class: "fa-stepper__grid", role: "grid", "aria-readonly": "true" });
    const counts = el("div", { class: "fa-stepper__state" });

    function build() {
      state.result = backwardOrder(params);
      state.step = Math.min(state.step, state.total());
      form.replaceChildren(
        select("N", "n", [8, 16, 32], params.n, changed("n", asInt)),
        select("Query block", "blockM", [2, 4, 8], params.blockM, changed("blockM", asInt)),
        select("Key block", "blockN", [2, 4, 8], params.blockN, changed("blockN", asInt)),
        checkbox("Causal", "causal", params.causal, changed("causal", (t) => t.checked)),
        select("dQ by", "dq", [["second_pass", "a second pass"], ["atomic", "atomic adds"]], params.dq,
          changed("dq", (t) => t.value)),
      );
      render();
    }

    function current() {
      return state.step > 0 ? state.result.steps[state.step - 1] : null;
    }

    // One cell per tile: rows are query blocks, columns key blocks.
    function renderGrid() {
      const { qBlocks, kBlocks, steps, skipped } = state.result;
      const now = current();
      const phase = now ? now.kernel : "dkdv";
      const done = new Set(steps.slice(0, state.step).filter((t) => t.kernel === phase).map((t) => `${t.q_block},${t.k_block}`));
      const skip = new Set(skipped.filter(([kernel]) => kernel === phase).map(([, i, j]) => `${i},${j}`));
      grid.style.setProperty("--fa-columns", kBlocks + 1);
      const head = [el("div", { class: "fa-cell fa-cell--corner", role: "columnheader", text: phase === "dkdv" ? "dK, dV" : "dQ" })];
      for (let j = 0; j < kBlocks; j++) head.push(el("div", { class: "fa-cell fa-cell--head", role: "columnheader", text: `K${j}` }));
      const rows = [el("div", { class: "fa-row", role: "row" }, head)];
      for (let i = 0; i < qBlocks; i++) {
        const cells = [el("div", { class: "fa-cell fa-cell--head", role: "rowheader", text: `Q${i}` })];
        for (let j = 0; j < kBlocks; j++) {
          const key = `${i},${j}`;
          const classes = ["fa-cell", "is-tile-left", "is-tile-top"];
          let text = "";
          if (skip.has(key)) { classes.push("is-skipped"); text = "\u00b7"; }
          else if (now && key === `${now.q_block},${now.k_block}`) classes.push("is-current");
          else if (done.has(key)) classes.push("is-done");
          if (!skip.has(key) && tileKind(i, j, params.blockM, params.blockN, params.n, params.n, params.causal) === "diagonal") text = "mask";
          const program = phase === "dkdv" ? j : i;
          cells.push(el("div", { class: classes.join(" "), role: "gridcell", title: `program ${program}`, text }));
        }
        rows.push(el("div", { class: "fa-row", role: "row" }, cells));
      }
      grid.replaceChildren(...rows);
      grid.setAttribute("aria-label", `Tiles of (query block, key block), ${qBlocks} by ${kBlocks}`);
    }

    function renderCounts() {
      const seen = state.result.steps.slice(0, state.step);
      const perKernel = (kernel) => seen.filter((t) => t.kernel === kernel).length;
      const adds = params.dq === "atomic" ? perKernel("dkdv") : 0;
      const products = seen.length ? seen[seen.length - 1].products : 0;
      const body = [
        ["tiles visited by the dK, dV kernel", String(perKernel("dkdv"))],
        ["tiles visited by the dQ kernel", String(perKernel("dq"))],
        ["atomic adds of a dQ block", String(adds)],
        ["matrix products so far", String(products)],
        ["matrix products in all", String(state.result.products)],
      ];
      counts.replaceChildren(table("So far", ["", "count"], body));
    }

    function render() {
      const total = state.total();
      const now = current();
      if (now) {
        const who = now.kernel === "dkdv" ? `dK, dV program ${now.program} (keys of block K${now.k_block})`
          : `dQ program ${now.program} (queries of block Q${now.q_block})`;
        const extra = now.kernel === "dkdv" && params.dq === "atomic" ? `; adds its share of dQ into rows of Q${now.q_block}` : "";
        status.textContent = `Step ${state.step} of ${total}: ${who} visits tile (Q${now.q_block}, K${now.k_block})` +
          `${now.kind === "diagonal" ? ", masked element by element" : ""}${extra}.`;
      } else {
        status.textContent = `Step 0 of ${total}: ${total} tile visits, ${state.result.skipped.length} skipped by the causal mask. Press Step or the right arrow key.`;
      }
      root.dataset.step = String(state.step);
      root.dataset.total = String(total);
      renderGrid();
      renderCounts();
    }

    root.replaceChildren(
      form,
      controls.bar,
      status,
      el("div", { class: "fa-stepper__panels" }, [el("div", { class: "fa-stepper__scroll", tabindex: "0", "aria-label": "Tile grid" }, grid), counts]),
      el("div", { class: "fa-stepper__legend", "aria-hidden": "true" }, [
        el("span", { class: "fa-key is-current", text: "current tile" }),
        el("span", { class: "fa-key is-done", text: "visited in this kernel" }),
        el("span", { class: "fa-key is-skipped", text: "skipped (causal)" }),
      ]),
    );
    build();
  }

  // ---------------------------------------------------------------- the split-KV stepper (chapter 12)

  function mountSplitKV(root) {
    const params = { seed: intData(root, "seed", 5), n: intData(root, "n", 8), splits: intData(root, "splits", 3) };
    const state = { step: 0, total: () => params.splits + 1 }; // one step per split, then the merge

    const status = el("p", { class: "fa-stepper__status", role: "status", "aria-live": "polite" });
    const controls = transport(root, state, render);
    const form = el("div", { class: "fa-stepper__controls" });
    const strip = el("div", { class: "fa-stepper__scroll", tabindex: "0", "aria-label": "Scores and values, scrolls sideways" });
    const parts = el("div", { class: "fa-stepper__state" });
    const final = el("div", { class: "fa-stepper__final" });

    function build() {
      const rand = mulberry32(params.seed);
      state.x = Array.from({ length: params.n }, () => Math.round((rand() * 8 - 4) * 10) / 10 + 0);
      state.V = matrix(rand, params.n, 2);
      state.result = splitKV({ x: state.x, V: state.V, splits: params.splits });
      state.step = Math.min(state.step, state.total());
      const changed = (name) => (event) => {
        const value = parseInt(event.target.value, 10);
        if (!Number.isFinite(value)) return;
        params[name] = value;
        controls.stop();
        state.step = 0;
        build();
      };
      form.replaceChildren(
        numberInput("Seed", "seed", params.seed, 0, 99999, changed("seed")),
        select("Keys", "n", [6, 8, 12], params.n, changed("n")),
        select("Splits", "splits", [1, 2, 3, 4, 6], params.splits, changed("splits")),
      );
      render();
    }

    function render() {
      const total = state.total();
      const { parts: states } = state.result;
      const merging = state.step === total;
      const now = state.step > 0 && !merging ? states[state.step - 1] : null;
      status.textContent = merging
        ? `Step ${state.step} of ${total}: the merge, with weights exp(lse \u2212 max lse).`
        : now
          ? `Step ${state.step} of ${total}: split ${now.split}${now.start === now.stop ? ", empty (past the last key)" : ` (keys ${now.start}\u2013${now.stop - 1})`}.`
          : `Step 0 of ${total}: ${params.splits} programs, one per split, then one merge. Press Step or the right arrow key.`;
      root.dataset.step = String(state.step);
      root.dataset.total = String(total);
      const size = Math.ceil(params.n / params.splits);
      const cellClass = (k) => {
        const s = Math.floor(k / size);
        const classes = ["fa-cell"];
        if (k % size === 0) classes.push("is-tile-left");
        if (now && s === now.split) classes.push("is-current");
        else if (s < state.step) classes.push("is-done");
        return classes.join(" ");
      };
      const line = (name, values) => el("div", { class: "fa-row", role: "row" }, [el("div", { class: "fa-cell fa-cell--head", role: "rowheader", text: name })].concat(values.map((v, k) => el("div", { class: cellClass(k), role: "gridcell", text: fmt(v, 1) }))));
      const grid = el("div", { class: "fa-stepper__grid", role: "grid", "aria-readonly": "true", "aria-label": `Scores x and values V, in splits of ${size}` },
        [line("x", state.x), line("V[:, 0]", state.V.map((v) => v[0])), line("V[:, 1]", state.V.map((v) => v[1]))]);
      grid.style.setProperty("--fa-columns", params.n + 1);
      strip.replaceChildren(grid);
      const done = states.slice(0, Math.min(state.step, params.splits));
      const body = done.map((p, s) => [String(p.split), p.start === p.stop ? "none" : `${p.start}\u2013${p.stop - 1}`, fmt(p.m, 4), fmt(p.l, 4), fmt(p.lse, 4), fmt(p.o[0], 4), fmt(p.o[1], 4), merging ? fmt(state.result.weights[s], 4) : ""]);
      parts.replaceChildren(body.length
        ? table("Each split's state: its own softmax, normalized by its own sum", ["split", "keys", "m", "l", "lse", "o[0]", "o[1]", "merge weight"], body)
        : el("p", { class: "fa-stepper__note", text: "Each program sees only its split of the keys: it knows neither the global max nor the global sum." }));
      if (!merging) {
        final.replaceChildren(el("p", { class: "fa-stepper__note", text: "After the merge: the weighted sum of the splits' outputs beside the softmax over all keys." }));
        return;
      }
      const exact = exactSoftmax(state.x);
      const exactOut = [0, 1].map((c) => exact.reduce((a, p, k) => a + p * state.V[k][c], 0));
      const ours = state.result.out.map((o) => fmt(o, 4));
      const theirs = exactOut.map((o) => fmt(o, 4));
      const equal = ours.join() === theirs.join();
      final.replaceChildren(
        table("The merged output beside softmax(x) V over all keys", ["", "out[0]", "out[1]"], [["merged"].concat(ours), ["exact"].concat(theirs)]),
        el("p", { class: "fa-stepper__verdict", "data-equal": String(equal), text: equal ? "Equal to 4 decimals." : "Different at 4 decimals." }),
      );
    }

    root.replaceChildren(form, controls.bar, status, strip, parts, final);
    build();
  }

  // ---------------------------------------------------------------- mounting

  const widgets = { "flash-attention": mountFlashAttention, "online-softmax": mountOnlineSoftmax, backward: mountBackward, "split-kv": mountSplitKV };

  function mountAll() {
    for (const root of document.querySelectorAll(".fa-stepper[data-stepper]:not([data-mounted])")) {
      const mount = widgets[root.dataset.stepper];
      if (!mount) continue;
      root.dataset.mounted = "true";
      mount(root);
    }
  }

  window.faStepper = { mulberry32, inputs, flashAttention, exactAttention, onlineSoftmax, exactSoftmax, tileKind, backwardOrder, splitKV, mountAll };

  if (typeof document$ !== "undefined") {
    document$.subscribe(mountAll); // Material's page-load stream (instant navigation too)
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mountAll);
  } else {
    mountAll();
  }
})();
