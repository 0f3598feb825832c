// tformer explore — the page. One plain JavaScript module: no build step, nothing from the network but
// the page's own server (and, in an exported file, not even that).
//
// Data: every number comes from api(name, params): POST /api/<name> to `tformer explore`, or, in a file
// written by `tformer explore --export`, the answers embedded in <script id="tformer-data">. The page never
// computes a model number itself; it only draws them (heatmaps, tables, bars, a beam tree).
//
// Views: 1 forward path · 2 masks · 3 attention grid · 4 decoding (greedy, beam, teacher forcing)
//        5 GPT sampling · 6 BERT fill-mask and NSP · 7 export (PNG of a panel, JSON of a tensor).

// ───────────────────────────── small DOM helpers ─────────────────────────────

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/** el("td", {class: "x", dataset: {q: 1}}, "text", child) → an element. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, guard(fn));
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

/** Replaces the children of `node` (null and false children are skipped, as in el). */
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

/** Numbers as a learner reads them: 4 significant digits in the cell, the full value in its title. */
function fmt(value) {
  if (typeof value === "string") return { "-inf": "−∞", inf: "∞" }[value] ?? value;
  if (typeof value !== "number") return String(value);
  if (value === 0) return "0";
  const abs = Math.abs(value);
  if (abs >= 1e4 || abs < 1e-3) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
}

/** A token as a chip shows it: spaces and line breaks made visible. */
const shown = (token) => String(token).replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥") || "∅";

const pct = (p) => `${(100 * p).toFixed(p >= 0.1 ? 1 : 2)}%`;

// ───────────────────────────── errors ─────────────────────────────

/** Shows one line in [data-testid=error]; the page never lets an error escape uncaught. */
function showError(error) {
  const box = $("#error");
  box.textContent = error instanceof Error ? error.message : String(error);
  box.hidden = false;
}

function clearError() {
  $("#error").hidden = true;
}

/** Wraps an event handler (sync or async) so that any failure is shown, not thrown. */
function guard(fn) {
  return (...args) => {
    try {
      const result = fn(...args);
      if (result && typeof result.catch === "function") result.catch(showError);
      return result;
    } catch (error) {
      showError(error);
      return undefined;
    }
  };
}

// ───────────────────────────── the data layer: one function, two transports ─────────────────────────────

/** JSON with sorted keys and no spaces: the key under which an exported file stores an answer. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The answers embedded by `tformer explore --export`, keyed again by this page's canonical JSON so that
 * number spelling (1.0 in Python, 1 here) cannot make an answer look missing. Null with a server. */
const EMBEDDED = readEmbedded();

function readEmbedded() {
  const node = document.getElementById("tformer-data");
  if (!node) return null;
  const data = JSON.parse(node.textContent);
  const answers = new Map();
  for (const [key, answer] of Object.entries(data.answers ?? data)) {
    const cut = key.search(/[\s{]/);
    const name = cut < 0 ? key : key.slice(0, cut);
    const params = cut < 0 ? {} : JSON.parse(key.slice(cut).trim() || "{}");
    answers.set(name + canonical(params), answer);
  }
  return answers;
}

class ApiError extends Error {}

/** api("trace", {text}) → the answer. With a server: POST /api/<name>; in an exported file: the embedded answer. */
async function api(name, params = {}) {
  if (EMBEDDED) {
    const answer = EMBEDDED.get(name + canonical(params));
    if (answer === undefined) throw new ApiError(`not in this export: ${name} ${canonical(params)}`);
    return answer;
  }
  const response = await fetch(`/api/${name}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(params),
  });
  const body = await response.json().catch(() => ({ error: `${name}: HTTP ${response.status}, not JSON` }));
  if (!response.ok || body.error) throw new ApiError(body.error ?? `${name}: HTTP ${response.status}`);
  return body;
}

// ───────────────────────────── state ─────────────────────────────

const state = {
  info: null, // the info answer
  trace: null, // the trace answer (steps without values)
  tensors: new Map(), // step id → tensor answer (each fetched once, when a view needs it)
  stepId: null, // the forward step shown
  heads: new Map(), // step id → head shown
  attn: null, // {block, kind, layer, head} shown in full in the attention view
  masked: new Set(), // BERT: positions masked by a click
};

/** The tensor of a trace step, fetched on first use (whole; heads are sliced here). */
async function tensor(id) {
  if (!state.tensors.has(id)) {
    const step = state.trace.steps.find((s) => s.id === id);
    state.tensors.set(id, stepTensor("tensor", { trace_id: state.trace.trace_id }, step));
  }
  try {
    return await state.tensors.get(id);
  } catch (error) {
    state.tensors.delete(id);
    throw error;
  }
}

/** The most values one tensor answer holds (the server says; else its documented default, 2^21). */
const maxValues = () => state.info.max_tensor_values ?? 2 ** 21;

/**
 * One step's numbers: `tensor` {trace_id} of one trace, or `tensor_diff` {trace_a, trace_b} of two (`base`), for
 * `step` (its id, shape and dims). Whole when it fits one answer, else its first rows and last row.
 */
async function stepTensor(name, base, step) {
  const values = step.shape.reduce((a, b) => a * b, 1) / (step.dims[0] === "B" ? step.shape[0] : 1);
  if (values > maxValues() && step.shape.length >= 2) return someRows(name, base, step);
  try {
    return await api(name, { ...base, id: step.id });
  } catch (error) {
    if (!/one row at a time/.test(error.message)) throw error;
    return someRows(name, base, step); // too big for one answer (e.g. T × V logits of a big vocabulary)
  }
}

const SOME_ROWS = 8;

/** The first rows and the last row of a tensor too big to send whole, one request per row. */
async function someRows(name, base, step) {
  const n = step.shape[step.shape.length - 2];
  const picks = [...new Set([...Array(Math.min(n, SOME_ROWS)).keys(), n - 1])];
  const parts = await Promise.all(picks.map((row) => api(name, { ...base, id: step.id, row })));
  return {
    ...parts[0],
    dims: [step.dims[step.dims.length - 2], ...parts[0].dims],
    rows: parts.map((p, i) => p.rows?.[0] ?? `row ${picks[i]}`),
    values: parts.map((p) => p.values),
    partial: EMBEDDED
      ? `rows ${picks.join(", ")} of ${n}: the other rows are not in this export (tformer explore --model DIR shows them)`
      : `rows ${picks.join(", ")} of ${n}: the whole tensor is too big for one answer`,
  };
}

const stepsOf = (stage) => state.trace.steps.filter((s) => s.stage === stage);

// ───────────────────────────── colour scales (colour-blind safe) ─────────────────────────────

// viridis, sampled at 11 points: dark purple → blue → green → yellow; readable in greyscale too.
const VIRIDIS = [
  [68, 1, 84], [72, 35, 116], [64, 67, 135], [52, 94, 141], [41, 120, 142], [32, 144, 140],
  [34, 167, 132], [68, 190, 112], [121, 209, 81], [189, 222, 38], [253, 231, 37],
];
// diverging around 0: blue (negative) → white (0) → orange (positive), the PuOr/BrBG family's safe pair.
const BLUE = [33, 102, 172];
const WHITE = [247, 247, 247];
const ORANGE = [230, 97, 1];

const mix = (a, b, t) => a.map((x, i) => Math.round(x + (b[i] - x) * t));

function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  return mix(VIRIDIS[i], VIRIDIS[i + 1], x - i);
}

function diverging(t) {
  const x = Math.min(1, Math.max(-1, t));
  return x < 0 ? mix(WHITE, BLUE, -x) : mix(WHITE, ORANGE, x);
}

const isBlocked = (v) => typeof v !== "number" || !Number.isFinite(v);

/** A colour function for the finite values of a matrix: diverging when signed, sequential otherwise. */
function scaleFor(matrix, { fixed = null } = {}) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of matrix) {
    for (const v of row) {
      if (!isBlocked(v)) [lo, hi] = [Math.min(lo, v), Math.max(hi, v)];
    }
  }
  if (fixed) [lo, hi] = fixed;
  if (lo === Infinity) [lo, hi] = [0, 1];
  if (lo < 0 && hi > 0) {
    const m = Math.max(-lo, hi);
    return { kind: "diverging", lo: -m, hi: m, rgb: (v) => diverging(v / m) };
  }
  const span = hi - lo || 1;
  return { kind: "sequential", lo, hi, rgb: (v) => viridis((v - lo) / span) };
}

// ───────────────────────────── heatmaps on <canvas> ─────────────────────────────

/** Grey with diagonal lines: a blocked (masked, −∞) cell. Never a colour of the scale. */
function hatch(ctx) {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 6;
  const t = tile.getContext("2d");
  t.fillStyle = "#d0d0d0";
  t.fillRect(0, 0, 6, 6);
  t.strokeStyle = "#707070";
  t.lineWidth = 1;
  t.beginPath();
  t.moveTo(0, 6);
  t.lineTo(6, 0);
  t.stroke();
  return ctx.createPattern(tile, "repeat");
}

/**
 * Draws `matrix` (rows × cols of numbers, "-inf" for blocked) on `canvas`: one square per value, token labels
 * on the left and top when the cells are big enough, blocked cells hatched. Big tensors are drawn pixel by
 * pixel and scaled down. Returns the scale used (for the legend).
 */
function drawHeatmap(canvas, matrix, { rows = null, cols = null, maxWidth = 640, maxHeight = 420, maxCell = 36,
  blocked = isBlocked, fixed = null } = {}) {
  const nr = matrix.length;
  const nc = nr ? matrix[0].length : 0;
  const scale = scaleFor(matrix, { fixed });
  const cell = Math.max(1, Math.min(maxCell, Math.floor(maxWidth / Math.max(nc, 1)), Math.floor(maxHeight / Math.max(nr, 1))));
  const labelled = cell >= 12 && (rows || cols);
  const ctx = canvas.getContext("2d");
  ctx.font = "11px system-ui, sans-serif";
  const left = labelled && rows ? 8 + Math.max(...rows.map((r) => ctx.measureText(shown(r)).width)) : 0;
  const top = labelled && cols ? 8 + Math.max(...cols.map((c) => ctx.measureText(shown(c)).width)) : 0;
  const width = Math.min(nc * cell, maxWidth);
  const height = Math.min(nr * cell, maxHeight);
  canvas.width = Math.ceil(left + width);
  canvas.height = Math.ceil(top + height);
  canvas.dataset.cell = String(cell);
  canvas.dataset.left = String(left);
  canvas.dataset.top = String(top);
  if (nr * nc > 60000 || nc * cell > maxWidth) {
    drawPixels(ctx, matrix, scale, blocked, left, top, width, height);
  } else {
    drawCells(ctx, matrix, scale, blocked, left, top, cell);
  }
  if (labelled) drawLabels(ctx, rows, cols, left, top, cell);
  return scale;
}

function drawCells(ctx, matrix, scale, blocked, left, top, cell) {
  const pattern = hatch(ctx);
  matrix.forEach((row, i) => row.forEach((v, j) => {
    ctx.fillStyle = blocked(v) ? pattern : `rgb(${scale.rgb(v).join(",")})`;
    ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
  }));
  if (cell >= 8) {
    ctx.strokeStyle = "rgba(255,255,255,0.6)";
    ctx.lineWidth = 0.5;
    for (let i = 0; i <= matrix.length; i++) line(ctx, left, top + i * cell, left + matrix[0].length * cell, top + i * cell);
    for (let j = 0; j <= matrix[0].length; j++) line(ctx, left + j * cell, top, left + j * cell, top + matrix.length * cell);
  }
}

function line(ctx, x0, y0, x1, y1) {
  ctx.beginPath();
  ctx.moveTo(x0, y0);
  ctx.lineTo(x1, y1);
  ctx.stroke();
}

/** One pixel per value on an off-screen canvas, then scaled to fit (for 256 × 256 or T × V tensors). */
function drawPixels(ctx, matrix, scale, blocked, left, top, width, height) {
  const nr = matrix.length;
  const nc = matrix[0].length;
  const image = new ImageData(nc, nr);
  matrix.forEach((row, i) => row.forEach((v, j) => {
    const rgb = blocked(v) ? ((i + j) % 2 ? [112, 112, 112] : [208, 208, 208]) : scale.rgb(v);
    image.data.set([...rgb, 255], 4 * (i * nc + j));
  }));
  const off = document.createElement("canvas");
  off.width = nc;
  off.height = nr;
  off.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = nc > width;
  ctx.drawImage(off, left, top, width, height);
}

function drawLabels(ctx, rows, cols, left, top, cell) {
  ctx.fillStyle = "#222";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  (rows ?? []).forEach((r, i) => ctx.fillText(shown(r), left - 4, top + (i + 0.5) * cell));
  ctx.save();
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "left";
  (cols ?? []).forEach((c, j) => ctx.fillText(shown(c), -top + 4, left + (j + 0.5) * cell));
  ctx.restore();
}

/** A gradient bar with the scale's ends, and the hatched swatch when something is blocked. */
function legend(scale, { blockedText = null } = {}) {
  const bar = el("canvas", { class: "legend-bar", width: 160, height: 10 });
  const ctx = bar.getContext("2d");
  for (let x = 0; x < 160; x++) {
    const v = scale.lo + ((scale.hi - scale.lo) * x) / 159;
    ctx.fillStyle = `rgb(${scale.rgb(v).join(",")})`;
    ctx.fillRect(x, 0, 1, 10);
  }
  const swatch = blockedText ? el("span", { class: "hatched swatch" }) : null;
  return el("div", { class: "legend" }, fmt(scale.lo), bar, fmt(scale.hi),
    scale.kind === "diverging" ? el("span", { class: "muted" }, " (blue < 0 < orange)") : null,
    swatch, blockedText ? el("span", {}, ` ${blockedText}`) : null);
}

/** Tooltip for a heatmap: which row and column the mouse is on, and the exact value there. */
function hoverValues(canvas, matrix, rows, cols) {
  canvas.addEventListener("mousemove", (event) => {
    const cell = Number(canvas.dataset.cell);
    const r = Math.floor((event.offsetY - Number(canvas.dataset.top)) / cell);
    const c = Math.floor((event.offsetX - Number(canvas.dataset.left)) / cell);
    const value = matrix[r]?.[c];
    canvas.title = value === undefined ? "" : `${rows?.[r] ?? r} → ${cols?.[c] ?? c}: ${value}`;
  });
}

// ───────────────────────────── tensors: values → 2-D matrices, tables ─────────────────────────────

const depth = (v) => (Array.isArray(v) ? 1 + depth(v[0]) : 0);

/** The 2-D slice shown for a tensor answer: head `head` when a dim is H, index 0 of other leading dims. */
function matrixOf(answer, head = 0) {
  let values = answer.values;
  let dims = answer.dims.slice(answer.dims.length - depth(values));
  while (depth(values) > 2) {
    values = values[dims[0] === "H" ? head : 0];
    dims = dims.slice(1);
  }
  if (depth(values) === 1) return { matrix: [values], dims: ["", dims[0]], rows: null, cols: answer.cols };
  if (depth(values) === 0) return { matrix: [[values]], dims: ["", ""], rows: null, cols: null };
  return { matrix: values, dims, rows: answer.rows, cols: answer.cols };
}

const MAX_TABLE_ROWS = 256;
const MAX_TABLE_COLS = 64;

/** The numbers as a scrolling table; big tensors show their first rows/columns (the JSON has them all). */
function tensorTable(matrix, rows, cols, { cellAttrs = null, mask = null } = {}) {
  const nr = Math.min(matrix.length, MAX_TABLE_ROWS);
  const nc = Math.min(matrix[0]?.length ?? 0, MAX_TABLE_COLS);
  const head = el("tr", {}, el("th", { class: "corner" }),
    Array.from({ length: nc }, (_, j) => el("th", { scope: "col" }, shown(cols?.[j] ?? j))));
  const body = Array.from({ length: nr }, (_, i) => el("tr", {},
    el("th", { scope: "row" }, shown(rows?.[i] ?? i)),
    Array.from({ length: nc }, (_, j) => {
      const v = matrix[i][j];
      const blocked = isBlocked(v) || mask?.[i]?.[j] === 0;
      return el("td", { title: String(v), class: blocked ? "blocked" : null, ...(cellAttrs?.(i, j, v) ?? {}) }, fmt(v));
    })));
  const clipped = matrix.length > nr || (matrix[0]?.length ?? 0) > nc;
  return el("div", { class: "table-wrap" },
    el("table", { class: "tensor", "data-testid": "tensor-table" }, el("thead", {}, head), el("tbody", {}, body)),
    clipped ? el("p", { class: "muted" }, `showing ${nr} of ${matrix.length} rows, ${nc} of ${matrix[0].length} columns; ` +
      "“JSON” downloads every number fetched") : null);
}

// ───────────────────────────── 7. export: PNG of a panel, JSON of a tensor ─────────────────────────────

function download(blob, filename) {
  const a = el("a", { href: URL.createObjectURL(blob), download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

/** PNG of a canvas, or of an SVG drawn onto a canvas first. */
async function savePng(node, filename) {
  if (node instanceof HTMLCanvasElement) {
    node.toBlob((blob) => download(blob, filename), "image/png");
    return;
  }
  const xml = new XMLSerializer().serializeToString(node);
  const image = new Image();
  image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(xml)}`;
  await image.decode();
  const canvas = el("canvas", { width: node.clientWidth || image.width, height: node.clientHeight || image.height });
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(image, 0, 0);
  canvas.toBlob((blob) => download(blob, filename), "image/png");
}

const pngButton = (getNode, filename) =>
  el("button", { type: "button", class: "small", title: "download this panel as PNG", on: { click: () => savePng(getNode(), filename) } }, "PNG");

const jsonButton = (getData, filename) =>
  el("button", { type: "button", class: "small", title: "download these numbers as JSON", on: {
    click: () => download(new Blob([JSON.stringify(getData(), null, 1)], { type: "application/json" }), filename),
  } }, "JSON");

// ───────────────────────────── 1. the forward path ─────────────────────────────

const STAGE_NAMES = {
  tokens: "pieces → ids", token_embedding: "token embedding", positional: "positional encoding",
  segment: "segment embedding", embedding: "embedding sum", q: "Q", k: "K", v: "V", qk: "Q·Kᵀ", scores: "scaled Q·Kᵀ/√d",
  mask: "mask", masked_scores: "masked scores", weights: "softmax → weights", context: "weights · V",
  attn_output: "concat → W_O", add_norm: "add & norm", ffn_hidden: "FFN: x·W₁ + b₁", ffn_activation: "FFN: activation",
  ffn_gate: "FFN: gate x·W_gate", ffn_up: "FFN: up x·W_up", ffn_gated: "FFN: act(gate) ⊙ up",
  ffn: "feed-forward", final_norm: "final norm", logits: "logits", probs: "softmax → probabilities",
};

/** "encoder · layer 0 · self-attention" — the group a step belongs to in the column. */
function groupOf(step) {
  const parts = [step.block || "input"];
  if (step.layer !== null && step.layer !== undefined) parts.push(`layer ${step.layer}`);
  if (step.kind) parts.push(`${step.kind}-attention`);
  return parts.join(" · ");
}

/** The clickable column of steps, in data-flow order, grouped by block / layer / attention kind. */
function renderSteps() {
  const list = $("#steps");
  fill(list);
  let group = null;
  for (const step of state.trace.steps) {
    if (groupOf(step) !== group) {
      group = groupOf(step);
      list.append(el("li", { class: "group" }, group));
    }
    list.append(el("li", {}, el("button", {
      type: "button", class: "step", "data-testid": "step", "data-step-id": step.id, "data-stage": step.stage,
      title: step.formula, on: { click: () => showStep(step.id) },
    }, STAGE_NAMES[step.stage] ?? step.stage, el("span", { class: "shape" }, ` ${step.shape.join("×")}`))));
  }
  if (state.trace.top_k?.length) {
    list.append(el("li", {}, el("button", { type: "button", class: "step", "data-testid": "step-topk",
      on: { click: showTopK } }, "top-k predictions")));
  }
}

function markStep(selector) {
  $$("#steps .step").forEach((b) => b.classList.toggle("active", b.matches(selector)));
}

const dimsText = (step) => step.dims.map((d, i) => `${d}=${step.shape[i]}`).join(" × ");

/** One step in full: where it is, its formula, its shape, a heatmap and the table of its numbers. */
async function showStep(id) {
  const step = state.trace.steps.find((s) => s.id === id);
  state.stepId = id;
  markStep(`[data-step-id="${id}"]`);
  const panel = $("#step-detail");
  fill(panel, el("p", { class: "muted" }, "loading…"));
  const answer = await tensor(id);
  if (state.stepId !== id) return; // another step was clicked meanwhile
  const head = state.heads.get(id) ?? 0;
  const { matrix, rows, cols } = matrixOf(answer, head);
  const mask = await maskOf(step);
  if (state.stepId !== id) return;
  fill(panel,
    el("h2", {}, `${groupOf(step)} · ${STAGE_NAMES[step.stage] ?? step.stage}`),
    el("p", { class: "formula" }, step.formula),
    el("p", { class: "meta" }, `shape ${dimsText(step)}`, el("span", { class: "muted" },
      `   min ${fmt(step.min)}   max ${fmt(step.max)}   ${step.where ?? ""}`)),
    answer.partial ? el("p", { class: "muted", "data-testid": "partial" }, answer.partial) : null,
    headPicker(step, head, (h) => { state.heads.set(id, h); showStep(id); }),
    step.stage === "tokens" ? null : heatmapFigure(matrix, rows, cols, step, mask),
    tensorTable(matrix, rows, cols, { mask: step.stage === "mask" ? matrix : mask }),
    el("div", { class: "buttons" },
      pngButton(() => $("#step-detail canvas.heatmap"), `${step.stage}-${id}.png`),
      jsonButton(() => ({ step, ...answer }), `${step.stage}-${id}.json`)),
  );
}

/** Buttons 0…H−1 when the tensor has a head dimension. */
function headPicker(step, head, onPick) {
  const at = step.dims.indexOf("H");
  if (at < 0) return null;
  return el("div", { class: "heads" }, "head ",
    Array.from({ length: step.shape[at] }, (_, h) => el("button", {
      type: "button", class: h === head ? "small active" : "small", "data-head": h, on: { click: () => onPick(h) },
    }, String(h))));
}

/** The mask matrix (1 may attend, 0 blocked) of an attention step's module, for the steps drawn over Tq × Tk. */
async function maskOf(step) {
  if (!["qk", "scores", "weights"].includes(step.stage)) return null;
  const maskStep = state.trace.steps.find((s) => s.stage === "mask" && s.block === step.block &&
    s.layer === step.layer && s.kind === step.kind);
  return maskStep ? matrixOf(await tensor(maskStep.id)).matrix : null;
}

/** `matrix` with the cells its mask blocks replaced by "-inf", so that they are drawn hatched. */
const hatchMasked = (matrix, mask) =>
  (mask ? matrix.map((row, i) => row.map((v, j) => (mask[i]?.[j] === 0 ? "-inf" : v))) : matrix);

/** The heatmap of one step with its legend; blocked cells (mask 0, −∞, or masked away) hatched. */
function heatmapFigure(matrix, rows, cols, step, mask = null) {
  const canvas = el("canvas", { class: "heatmap" });
  const isMask = step.stage === "mask";
  const blocked = isMask ? (v) => v === 0 : isBlocked;
  const probabilities = ["mask", "weights", "probs"].includes(step.stage);
  const drawn = hatchMasked(matrix, mask);
  const scale = drawHeatmap(canvas, drawn, { rows, cols, blocked, fixed: probabilities ? [0, 1] : null });
  hoverValues(canvas, matrix, rows, cols);
  const anyBlocked = drawn.some((r) => r.some(blocked));
  return el("figure", {}, canvas, legend(scale, { blockedText: anyBlocked ? "blocked (−∞ / mask 0)" : null }));
}

/** The model's top-k next tokens at each position (the trace's own list). */
function showTopK() {
  state.stepId = "top_k";
  markStep("[data-testid=step-topk]");
  fill($("#step-detail"),
    el("h2", {}, "top-k predictions"),
    el("p", { class: "formula" }, "the k most probable tokens of softmax(logits) at each position"),
    ...state.trace.top_k.map((t) => el("div", { class: "topk" },
      el("h3", {}, `position ${t.position} (“${t.token}”)`),
      bars(t.candidates.map(([token, , p]) => [token, p])))),
  );
}

/** Horizontal probability bars: [[label, p], …]; `chosen` is highlighted; labels are tokens unless `raw`. */
function bars(items, { chosen = null, testid = null, raw = false } = {}) {
  const max = Math.max(...items.map(([, p]) => p), 1e-9);
  return el("div", { class: "bars" }, items.map(([label, p]) => el("div", {
    class: label === chosen ? "bar chosen" : "bar", title: String(p), "data-testid": testid,
  }, el("span", { class: "bar-label" }, raw ? label : shown(label)), el("span", { class: "bar-track" },
    el("span", { class: "bar-fill", style: `width:${(100 * p) / max}%` })), el("span", { class: "bar-value" }, pct(p)))));
}

// ───────────────────────────── 2. masks ─────────────────────────────

const PAD = new Set(["<pad>", "[PAD]"]);

/** For each attention kind: the causal part, the padding part, the model's combined mask, and the weights. */
async function renderMasks() {
  const view = $("#view-masks");
  fill(view, el("p", { class: "muted" }, "loading…"));
  const firstPerKind = new Map();
  for (const s of stepsOf("mask")) {
    const key = `${s.block}/${s.kind}`;
    if (!firstPerKind.has(key)) firstPerKind.set(key, s);
  }
  const panels = [];
  for (const maskStep of firstPerKind.values()) panels.push(await maskPanel(maskStep));
  fill(view, el("p", { class: "formula" },
    "1 = may attend, 0 = blocked (hatched). The model's mask is the combination; softmax gives blocked keys " +
    "exactly 0 weight."), ...panels);
}

async function maskPanel(maskStep) {
  const weightsStep = state.trace.steps.find((s) => s.stage === "weights" && s.block === maskStep.block &&
    s.layer === maskStep.layer && s.kind === maskStep.kind);
  const mask = matrixOf(await tensor(maskStep.id));
  const weights = weightsStep ? matrixOf(await tensor(weightsStep.id), 0) : null;
  const n = mask.matrix.length;
  const m = mask.matrix[0].length;
  const causal = mask.matrix.map((_, i) => Array.from({ length: m }, (_, j) => (j <= i + m - n ? 1 : 0)));
  const padding = mask.matrix.map(() => Array.from({ length: m }, (_, j) => (PAD.has(mask.cols?.[j]) ? 0 : 1)));
  const parts = [];
  if (maskStep.kind === "self" && maskStep.block !== "encoder" && state.info.family !== "bert") {
    parts.push(["causal: key ≤ query", causal]);
  }
  parts.push(["padding: key is not <pad>", padding], ["combined (the model's mask)", mask.matrix]);
  const figures = parts.map(([title, matrix]) => smallMap(title, matrix, mask.rows, mask.cols, (v) => v === 0, [0, 1]));
  if (weights) {
    const zero = mask.matrix.flatMap((row, i) => row.map((v, j) => (v === 0 ? weights.matrix[i][j] : null)))
      .filter((w) => w !== null);
    const exact = zero.every((w) => w === 0);
    figures.push(smallMap(`weights, head 0 (${zero.length} blocked: ${exact ? "all exactly 0" : "NOT all 0"})`,
      weights.matrix, mask.rows, mask.cols, (v, i, j) => mask.matrix[i][j] === 0, [0, 1]));
  }
  return el("div", { class: "panel mask-panel", "data-block": maskStep.block, "data-kind": maskStep.kind },
    el("h2", {}, `${maskStep.block} ${maskStep.kind}-attention`), el("p", { class: "formula" }, maskStep.formula),
    el("div", { class: "row" }, figures));
}

/** A small labelled heatmap; `blocked(v, i, j)` cells hatched. */
function smallMap(title, matrix, rows, cols, blocked, fixed) {
  const canvas = el("canvas", { class: "heatmap" });
  const marked = matrix.map((row, i) => row.map((v, j) => (blocked(v, i, j) ? "-inf" : v)));
  drawHeatmap(canvas, marked, { rows, cols, maxWidth: 300, maxHeight: 300, maxCell: 30, fixed });
  hoverValues(canvas, matrix, rows, cols);
  return el("figure", {}, el("figcaption", {}, title), canvas);
}

// ───────────────────────────── 3. attention: layer × head grid ─────────────────────────────

/** One grid per (block, kind): rows = layers, columns = heads, each cell a small heatmap of the weights. */
async function renderAttention() {
  const grids = $("#attn-grids");
  fill(grids, el("p", { class: "muted" }, "loading…"));
  const groups = new Map();
  for (const s of stepsOf("weights")) {
    const key = `${s.block}/${s.kind}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  const sections = [];
  for (const steps of groups.values()) sections.push(await attentionGrid(steps));
  fill(grids, ...sections);
  if (!state.attn && stepsOf("weights").length) {
    const s = stepsOf("weights")[0];
    state.attn = { block: s.block, kind: s.kind, layer: s.layer, head: 0 };
  }
  if (state.attn) await showAttention(state.attn);
}

async function attentionGrid(steps) {
  const { block, kind } = steps[0];
  const table = el("table", { class: "attn-grid" });
  const nHeads = steps[0].shape[steps[0].dims.indexOf("H")];
  table.append(el("tr", {}, el("th", {}), Array.from({ length: nHeads }, (_, h) => el("th", {}, `head ${h}`))));
  for (const step of steps) {
    const answer = await tensor(step.id);
    const mask = await maskOf(step);
    const row = el("tr", {}, el("th", {}, `layer ${step.layer}`));
    for (let h = 0; h < nHeads; h++) {
      const canvas = el("canvas", { class: "thumb" });
      drawHeatmap(canvas, hatchMasked(matrixOf(answer, h).matrix, mask), { maxWidth: 96, maxHeight: 96, maxCell: 16, fixed: [0, 1] });
      const where = { block, kind, layer: step.layer, head: h };
      row.append(el("td", {}, el("button", {
        type: "button", class: "thumb-button", "data-testid": "attn-thumb", "data-block": block, "data-kind": kind,
        "data-layer": step.layer, "data-head": h, title: `${block} layer ${step.layer} head ${h}`,
        on: { click: () => showAttention(where) },
      }, canvas)));
    }
    table.append(row);
  }
  return el("div", { class: "panel" }, el("h2", {}, `${block} ${kind}-attention`), table);
}

/** One (block, kind, layer, head) in full: heatmap, the token strip (hover a query), the exact weights. */
async function showAttention(where) {
  state.attn = where;
  $$("[data-testid=attn-thumb]").forEach((b) => b.classList.toggle("active", b.dataset.block === where.block &&
    b.dataset.kind === where.kind && Number(b.dataset.layer) === where.layer && Number(b.dataset.head) === where.head));
  const step = stepsOf("weights").find((s) => s.block === where.block && s.kind === where.kind && s.layer === where.layer);
  const { matrix, rows, cols } = matrixOf(await tensor(step.id), where.head);
  const mask = await maskOf(step);
  const canvas = el("canvas", { class: "heatmap" });
  const scale = drawHeatmap(canvas, hatchMasked(matrix, mask), { rows, cols, fixed: [0, 1], maxWidth: 480, maxHeight: 480 });
  hoverValues(canvas, matrix, rows, cols);
  const keys = el("div", { class: "chips key-strip" }, (cols ?? []).map((c, j) => el("span", { class: "chip", "data-k": j }, shown(c))));
  const queries = el("div", { class: "chips" }, (rows ?? []).map((r, i) => el("span", {
    class: "chip query", "data-q": i, on: { mouseenter: () => highlightQuery(i, matrix), mouseleave: () => highlightQuery(null) },
  }, shown(r))));
  const attrs = (i, j, v) => ({ "data-testid": "attn-cell", "data-block": where.block, "data-kind": where.kind,
    "data-layer": where.layer, "data-head": where.head, "data-q": i, "data-k": j, "data-value": String(v) });
  fill($("#attn-detail"),
    el("h2", {}, `${where.block} layer ${where.layer} ${where.kind}-attention, head ${where.head}`),
    el("p", { class: "formula" }, step.formula),
    el("p", { class: "muted" }, "hover a query token: the keys it attends to light up with its weights"),
    el("div", { class: "strip" }, el("span", { class: "strip-label" }, "queries"), queries),
    el("div", { class: "strip" }, el("span", { class: "strip-label" }, "keys"), keys),
    el("figure", {}, canvas, legend(scale, { blockedText: mask?.some((r) => r.includes(0)) ? "blocked by the mask: weight exactly 0" : null })),
    tensorTable(matrix, rows, cols, { cellAttrs: attrs, mask }),
    el("div", { class: "buttons" }, pngButton(() => canvas, `attention-${where.block}-${where.kind}-l${where.layer}-h${where.head}.png`),
      jsonButton(() => ({ ...where, rows, cols, weights: matrix }), `attention-l${where.layer}-h${where.head}.json`)),
  );
}

/** Hovering query i: each key chip takes the colour of weight[i][k]; the table row is highlighted. */
function highlightQuery(i, matrix) {
  $$("#attn-detail .key-strip .chip").forEach((chip, k) => {
    const w = i === null ? null : matrix[i][k];
    chip.style.background = w === null ? "" : `rgba(230, 97, 1, ${Math.max(0.05, w)})`;
    chip.title = w === null ? "" : `weight ${w}`;
  });
  $$("#attn-detail table.tensor tbody tr").forEach((tr, r) => tr.classList.toggle("hover", r === i));
}

// ───────────────────────────── 4. decoding: greedy step by step, beam tree, teacher forcing ─────────────────────────────

const decodeState = { answer: null, at: 0 };

const intValue = (id) => Number.parseInt($(id).value, 10);
const floatValue = (id) => Number.parseFloat($(id).value);

/** The request the decode form describes (only the fields the API takes for that mode; empty = its default). */
function decodeParams() {
  const mode = $("#decode-form input[name=mode]:checked").value;
  const params = { text: state.text, mode };
  if (mode === "beam") params.beam_size = intValue("#beam-size");
  if (mode === "beam" && $("#length-penalty").value !== "") params.length_penalty = floatValue("#length-penalty");
  if ($("#max-len").value !== "") params.max_len = intValue("#max-len");
  const reference = $("#reference").value.trim();
  if (mode === "greedy" && reference) params.reference = reference;
  return params;
}

/** Beam fields only for beam search, the reference only for greedy (it is compared with teacher forcing). */
function showModeFields() {
  const beam = $("#decode-form input[name=mode]:checked").value === "beam";
  $$(".beam-only").forEach((n) => { n.hidden = !beam; });
  $$(".greedy-only").forEach((n) => { n.hidden = beam || state.info?.family !== "seq2seq"; });
}

async function runDecode() {
  const params = decodeParams();
  const out = $("#decode-out");
  fill(out, el("p", { class: "muted" }, "decoding…"));
  const answer = await api("decode", params);
  decodeState.answer = answer;
  decodeState.at = 0;
  if (params.mode === "beam") renderBeam(answer, params);
  else renderGreedy();
}

/** Greedy: step `at` of N — the tokens fed so far, the KV cache length, the top-k, the output so far. */
function renderGreedy() {
  const { answer, at } = decodeState;
  const steps = answer.steps;
  const step = steps[at - 1] ?? null;
  const fedSoFar = step ? (step.input ?? steps.slice(0, at).flatMap((s) => s.fed)) : [];
  const newFed = step ? step.fed.length : 0;
  fill($("#decode-out"),
    el("div", { class: "controls" },
      el("button", { type: "button", "data-testid": "decode-prev", disabled: at === 0, on: { click: () => stepDecode(-1) } }, "◀ back"),
      el("span", { class: "step-count", "data-testid": "decode-step" }, `step ${at} of ${steps.length}`),
      el("button", { type: "button", "data-testid": "decode-next", disabled: at === steps.length, on: { click: () => stepDecode(1) } }, "next ▶")),
    el("div", { class: "strip" }, el("span", { class: "strip-label" }, "output"),
      el("div", { class: "chips" }, steps.slice(0, at).map((s) => el("span", { class: "chip out", "data-testid": "decode-token",
        "data-id": s.id, title: `id ${s.id}, p = ${s.prob}` }, shown(s.token))))),
    step ? el("div", { class: "panel" },
      el("div", { class: "strip" }, el("span", { class: "strip-label" }, "decoder input"),
        el("div", { class: "chips" }, fedSoFar.map((t, i) => el("span", { class: i >= fedSoFar.length - newFed ? "chip fed" : "chip" }, shown(t))))),
      el("p", { class: "meta" }, `fed this step: ${step.fed.map(shown).join(" ")}   ·   KV cache: ${step.cache_len ?? "?"} positions   ·   pick: `,
        el("b", {}, shown(step.token)), ` (id ${step.id}, p = ${fmt(step.prob)})`),
      bars(step.candidates.map(([token, , p]) => [token, p]), { chosen: step.token })) : el("p", { class: "muted" },
      "Press next: the decoder starts from <sos> and picks the most probable token at each step."),
    answer.teacher_forced ? teacherForced(answer.teacher_forced) : null,
    el("p", { class: "meta" }, "greedy output: ", el("b", { "data-testid": "decode-output" }, at === steps.length ? answer.output : "…")),
  );
}

function stepDecode(delta) {
  const n = decodeState.answer.steps.length;
  decodeState.at = Math.max(0, Math.min(n, decodeState.at + delta));
  renderGreedy();
}

/** Teacher forcing (fed the reference) against free running (fed its own picks), step by step. */
function teacherForced(rows) {
  return el("div", { class: "panel" }, el("h3", {}, "teacher-forced: the reference fed in, what the model predicts at each step"),
    el("table", { class: "tensor", "data-testid": "teacher-forced" },
      el("tr", {}, el("th", {}, "step"), el("th", {}, "expected"), el("th", {}, "predicted"), el("th", {}, "p(expected)")),
      rows.map((r) => el("tr", { class: r.expected === r.predicted ? "" : "miss", "data-testid": "teacher-row" }, el("td", {}, String(r.step)),
        el("td", {}, r.expected), el("td", {}, r.predicted), el("td", { title: String(r.prob_expected) }, fmt(r.prob_expected))))));
}

/** Beam search as a tree: one column per step; alive, pruned and finished hypotheses with their scores. */
function renderBeam(answer, params) {
  const svg = beamSvg(answer);
  fill($("#decode-out"),
    el("p", { class: "meta" }, `beam size ${answer.beam_size ?? params.beam_size}, ` +
      `length penalty ${answer.length_penalty ?? params.length_penalty ?? "default"}: `,
      "best ", el("b", { "data-testid": "decode-output" }, answer.output)),
    el("p", { class: "legend" }, el("span", { class: "dot alive" }), " alive ", el("span", { class: "dot pruned" }), " pruned ",
      el("span", { class: "dot finished" }), " finished   (each box: the token and its score, log p / length^penalty; hover for log p)"),
    el("div", { class: "tree-wrap" }, svg),
    el("div", { class: "buttons" }, pngButton(() => svg, "beam-tree.png"), jsonButton(() => answer, "beam.json")),
  );
}

const BEAM_COL = 130;
const BEAM_ROW = 34;

// Styles are attributes (not CSS classes) so that the PNG export, which draws the SVG alone, keeps them.
const BEAM_STYLE = {
  alive: { fill: "#e3edf7", stroke: "#2166ac", dash: "" },
  pruned: { fill: "#f2f2f2", stroke: "#b0b0b0", dash: "3 2" },
  finished: { fill: "#fdeee3", stroke: "#e66101", dash: "" },
};

function beamSvg(answer) {
  const byStep = new Map();
  for (const node of answer.nodes) {
    if (!byStep.has(node.step)) byStep.set(node.step, []);
    byStep.get(node.step).push(node);
  }
  const place = new Map();
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  for (const s of steps) {
    const nodes = byStep.get(s).sort((a, b) => (place.get(a.parent)?.y ?? 0) - (place.get(b.parent)?.y ?? 0) || b.score - a.score);
    nodes.forEach((n, i) => place.set(n.id, { x: 20 + (s - steps[0]) * BEAM_COL, y: 36 + i * BEAM_ROW }));
  }
  const best = bestPath(answer);
  const height = 52 + Math.max(...steps.map((s) => byStep.get(s).length)) * BEAM_ROW;
  const svg = svgEl("svg", { class: "beam-tree", width: 40 + steps.length * BEAM_COL, height,
    xmlns: "http://www.w3.org/2000/svg", "font-family": "monospace", "font-size": 11 });
  svg.append(svgEl("rect", { width: "100%", height: "100%", fill: "#fff" }));
  steps.forEach((s, i) => svg.append(svgEl("text", { x: 20 + i * BEAM_COL + 50, y: 12, "text-anchor": "middle",
    fill: "#6b6b70", text: s === 0 ? "start" : `step ${s}` })));
  for (const node of answer.nodes) {
    const from = place.get(node.parent);
    const to = place.get(node.id);
    if (!from) continue;
    const onBest = best.has(node.id);
    svg.append(svgEl("path", {
      d: `M${from.x + 100},${from.y} C${to.x - 15},${from.y} ${from.x + 115},${to.y} ${to.x},${to.y}`,
      fill: "none", stroke: onBest ? "#e66101" : node.status === "pruned" ? "#c8c8c8" : "#8a8a8a",
      "stroke-width": onBest ? 2.5 : 1.2, "stroke-dasharray": node.status === "pruned" ? "3 3" : "",
    }));
  }
  for (const node of answer.nodes) svg.append(beamNode(node, place.get(node.id), best.has(node.id)));
  return svg;
}

function beamNode(node, { x, y }, isBest) {
  const style = BEAM_STYLE[node.status] ?? BEAM_STYLE.alive;
  const g = svgEl("g", { transform: `translate(${x},${y})`, "data-testid": "beam-node", "data-step": node.step,
    "data-status": node.status, "data-id": node.id, "data-token": node.token });
  g.append(svgEl("title", { text: `${node.token} (id ${node.token_id}): log p ${node.logp}, score ${node.score}, ${node.status}` }),
    svgEl("rect", { x: 0, y: -13, width: 100, height: 26, rx: 5, fill: style.fill, stroke: style.stroke,
      "stroke-width": isBest || node.status === "finished" ? 2.5 : 1, "stroke-dasharray": style.dash }),
    svgEl("text", { x: 6, y: -1, fill: node.status === "pruned" ? "#909090" : "#1d1d1f", text: node.token }),
    svgEl("text", { x: 6, y: 10, fill: "#6b6b70", "font-size": 10, text: `${node.status === "finished" ? "✓ " : ""}${fmt(node.score)}` }));
  return g;
}

/** The nodes on the best hypothesis (the search's own pick, else the best-scored finished one), back to the root. */
function bestPath(answer) {
  const byId = new Map(answer.nodes.map((n) => [n.id, n]));
  const ends = answer.nodes.filter((n) => n.status === "finished");
  const pool = ends.length ? ends : answer.nodes.filter((n) => n.status === "alive");
  let node = byId.get(answer.best_node) ?? pool.reduce((a, b) => (b.score > a.score ? b : a), pool[0]);
  const path = new Set();
  while (node) {
    path.add(node.id);
    node = byId.get(node.parent);
  }
  return path;
}

// ───────────────────────────── 5. GPT sampling ─────────────────────────────

const sampleState = { answer: null, at: 1 };

function sampleParams() {
  const params = { text: state.text, temperature: floatValue("#temperature"), seed: intValue("#seed"), steps: intValue("#sample-steps") };
  if (intValue("#top-k") > 0) params.top_k = intValue("#top-k");
  if (floatValue("#top-p") < 1) params.top_p = floatValue("#top-p");
  return params;
}

async function runSample() {
  fill($("#sample-out"), el("p", { class: "muted" }, "sampling…"));
  sampleState.answer = await api("sample", sampleParams());
  sampleState.at = 1;
  renderSample();
}

/** One sampling step: the raw distribution, the one left after the filters, the token drawn. */
function renderSample() {
  const { answer, at } = sampleState;
  const step = answer.steps[at - 1];
  fill($("#sample-out"),
    el("div", { class: "controls" },
      el("button", { type: "button", "data-testid": "sample-prev", disabled: at <= 1, on: { click: () => stepSample(-1) } }, "◀ back"),
      el("span", { class: "step-count" }, `step ${at} of ${answer.steps.length}`),
      el("button", { type: "button", "data-testid": "sample-next", disabled: at >= answer.steps.length, on: { click: () => stepSample(1) } }, "next ▶")),
    el("div", { class: "strip" }, el("span", { class: "strip-label" }, "prompt"), el("code", {}, state.text)),
    el("div", { class: "strip" }, el("span", { class: "strip-label" }, "drawn"), el("div", { class: "chips" },
      answer.steps.slice(0, at).map((s) => el("span", { class: "chip out", "data-testid": "sample-token", "data-id": s.id,
        title: `id ${s.id}` }, shown(s.token))))),
    el("p", { class: "meta" }, `drawn: `, el("b", {}, shown(step.token)), ` (id ${step.id}); ${step.kept} tokens left after the filters`),
    el("div", { class: "row" },
      el("div", { class: "panel" }, el("h3", {}, "before: softmax(logits)"), bars(step.before.map(([t, , p]) => [t, p]), { chosen: step.token })),
      el("div", { class: "panel" }, el("h3", {}, "after: temperature → top-k → top-p, renormalised"),
        bars(step.after.map(([t, , p]) => [t, p]), { chosen: step.token }))),
  );
}

function stepSample(delta) {
  sampleState.at = Math.max(1, Math.min(sampleState.answer.steps.length, sampleState.at + delta));
  renderSample();
}

// ───────────────────────────── 6. BERT: fill-mask by clicking, NSP ─────────────────────────────

const SPECIAL = new Set(["[CLS]", "[SEP]", "[PAD]"]);

/** The sentence's pieces as chips; clicking one masks (or unmasks) it. */
function renderBertTokens() {
  const tokens = state.trace.tokens.encoder;
  fill($("#bert-tokens"), ...tokens.map((t, i) => el("button", {
    type: "button", class: state.masked.has(i) ? "chip masked" : "chip", disabled: SPECIAL.has(t),
    "data-testid": "mask-token", "data-position": i, title: SPECIAL.has(t) ? "special token" : "click to mask",
    on: { click: () => toggleMask(i) },
  }, state.masked.has(i) ? "[MASK]" : t)));
}

/** The text with the clicked pieces replaced by [MASK] (pieces re-joined as the tokenizer split them). */
function maskedText() {
  const words = [];
  state.trace.tokens.encoder.forEach((t, i) => {
    if (SPECIAL.has(t) && !state.masked.has(i)) return;
    const piece = state.masked.has(i) ? "[MASK]" : t;
    if (piece.startsWith("##") && words.length) words[words.length - 1] += piece.slice(2);
    else words.push(piece);
  });
  return words.join(" ");
}

async function toggleMask(i) {
  if (state.masked.has(i)) state.masked.delete(i);
  else state.masked.add(i);
  renderBertTokens();
  await runFillMask();
}

async function runFillMask() {
  const out = $("#fill-out");
  if (!state.masked.size && !state.text.includes("[MASK]")) {
    fill(out, el("p", { class: "muted" }, "no [MASK] yet: click a token above"));
    return;
  }
  const text = state.masked.size ? maskedText() : state.text;
  const answer = await api("fill_mask", { text, top_k: state.fillTopK });
  fill(out, el("p", { class: "meta" }, "input: ", el("code", { "data-testid": "fill-text" }, text)),
    el("div", { class: "row" }, answer.masks.map((m) => el("div", { class: "panel" },
      el("h3", {}, `[MASK] at position ${m.position}: `, el("b", { "data-testid": "fill-top" }, m.candidates[0][0])),
      bars(m.candidates.map(([t, p]) => [t, p]), { chosen: m.candidates[0][0] })))));
}

/** Sentence A and B with their segment ids, and P(B follows A) from the NSP head. */
async function runNsp() {
  const params = { text: $("#nsp-a").value.trim(), text_b: $("#nsp-b").value.trim() };
  const answer = await api("nsp", params);
  fill($("#nsp-out"),
    el("div", { class: "chips", "data-testid": "nsp-out-tokens", "data-a": params.text, "data-b": params.text_b }, answer.tokens.map((t, i) => el("span", { class: `chip seg${answer.token_type_ids[i]}` },
      t, el("sub", {}, String(answer.token_type_ids[i]))))),
    el("p", { class: "meta" }, "P(B is the next sentence) = ", el("b", { "data-testid": "nsp-prob",
      "data-value": String(answer.is_next_prob), title: String(answer.is_next_prob) }, pct(answer.is_next_prob))),
    bars([["B follows A", answer.is_next_prob], ["B is random", 1 - answer.is_next_prob]], { raw: true }),
  );
}

// ───────────────────────────── 8. compare: two inputs or two checkpoints, and b − a ─────────────────────────────

const compareState = { answer: null, stepId: null, head: 0 };

const compareOther = () => $("#compare-form input[name=other]:checked").value;

/** "two checkpoints" only when the server was started with --compare DIR2; the second input starts as the first. */
function setupCompare() {
  const other = state.info.compare;
  $("#other-model").disabled = !other;
  $("#other-model-label").title = other ? `${other.name} (${other.source})` : "start tformer explore with --compare DIR2";
  if (other) $("#other-model").checked = true;
  $("#text2").value = state.text;
  $("#target2").value = "";
  $("#text-b2").value = $("#text-b").value;
  showCompareFields();
}

function showCompareFields() {
  const inputs = compareOther() === "input";
  $$("#compare-form .input-only").forEach((n) => { n.hidden = !inputs; });
  if (inputs) {
    $("#target2-label").hidden = state.info.family !== "seq2seq";
    $("#text-b2-label").hidden = state.info.family !== "bert";
  }
  if (!compareState.answer) {
    fill($("#compare-head"), el("p", { class: "hint" }, inputs
      ? "Change the second input (one word is enough) and press Compare: every step of both forward passes, and b − a."
      : "Press Compare: the same input through both checkpoints, and b − a at every step."));
  }
}

/** The request the compare form describes: the traced inputs as a, and the second input or checkpoint as b. */
function compareParams() {
  const params = { ...state.traceParams, other: compareOther() };
  if (params.other === "input") {
    params.text2 = $("#text2").value;
    const target2 = $("#target2").value.trim();
    if (state.info.family === "seq2seq" && target2) params.target2 = target2;
    const textB2 = $("#text-b2").value.trim();
    if (state.info.family === "bert" && textB2) params.text_b2 = textB2;
  }
  return params;
}

async function runCompare() {
  fill($("#compare-steps"));
  fill($("#compare-detail"), el("p", { class: "muted" }, "comparing…"));
  const params = compareParams();
  const answer = await api("compare", params);
  Object.assign(compareState, { answer, params, tensors: new Map(), head: 0 });
  renderCompareHead();
  renderCompareSteps();
  const first = answer.diff.find((d) => d.max_abs_diff !== 0 && d.max_abs_diff !== null && d.stage !== "tokens");
  await showCompareStep((first ?? answer.diff[0]).id);
}

/** What a and b are (two inputs or two checkpoints) and their tokens, the differing ones marked. */
function renderCompareHead() {
  const { answer } = compareState;
  const info = state.info;
  const what = answer.other === "model"
    ? [`${info.name} (${info.source})`, `${info.compare?.name} (${info.compare?.source})`]
    : ["the first input", "the second input"];
  const strip = (side, tokens, others) => el("div", { class: "chips" }, tokens.map((t, i) => el("span", {
    class: others[i] === t ? "chip" : "chip differs", "data-testid": `compare-token-${side}`, "data-position": i,
  }, shown(t))));
  const blocks = Object.keys(answer.a.tokens);
  fill($("#compare-head"),
    el("p", { class: "formula" }, `a = ${what[0]}, b = ${what[1]}; each step shows a, b and b − a ` +
      "(blue < 0 < orange); steps where b equals a exactly say so."),
    blocks.map((block) => el("div", {},
      el("div", { class: "strip" }, el("span", { class: "strip-label" }, `a · ${block}`),
        strip("a", answer.a.tokens[block], answer.b.tokens[block] ?? [])),
      el("div", { class: "strip" }, el("span", { class: "strip-label" }, `b · ${block}`),
        strip("b", answer.b.tokens[block] ?? [], answer.a.tokens[block])))));
}

/** A step's difference in a word: its max |b − a|, "= 0" when identical, or why there is none. */
function diffBadge(d) {
  if (d.max_abs_diff === null) return el("span", { class: "diff-badge none" }, " shapes differ");
  if (d.max_abs_diff === 0) return el("span", { class: "diff-badge zero" }, " = 0");
  return el("span", { class: "diff-badge" }, ` max |Δ| ${fmt(d.max_abs_diff)}`);
}

/** The steps of both passes, in data-flow order, each with its max |b − a| (the list that says where they part). */
function renderCompareSteps() {
  const list = $("#compare-steps");
  fill(list);
  let group = null;
  for (const d of compareState.answer.diff) {
    if (groupOf(d) !== group) {
      group = groupOf(d);
      list.append(el("li", { class: "group" }, group));
    }
    list.append(el("li", {}, el("button", {
      type: "button", class: d.max_abs_diff === 0 ? "step zero" : "step", "data-testid": "compare-step",
      "data-step-id": d.id, "data-stage": d.stage, "data-max-abs-diff": String(d.max_abs_diff),
      title: `max |b − a| = ${d.max_abs_diff}, mean |b − a| = ${d.mean_abs_diff}`, on: { click: () => showCompareStep(d.id) },
    }, STAGE_NAMES[d.stage] ?? d.stage, diffBadge(d))));
  }
}

/** A compare answer's tensor (a's, b's or the difference), fetched once per compare. */
function compareTensor(key, name, base, step) {
  const cache = compareState.tensors;
  const id = `${key}/${step.id}`;
  if (!cache.has(id)) cache.set(id, stepTensor(name, base, step).catch((error) => { cache.delete(id); throw error; }));
  return cache.get(id);
}

/** One step of both passes side by side: a, b and b − a (heatmaps on the diverging scale), and the numbers of b − a. */
async function showCompareStep(id) {
  const { answer } = compareState;
  compareState.stepId = id;
  $$("#compare-steps .step").forEach((b) => b.classList.toggle("active", Number(b.dataset.stepId) === id));
  const d = answer.diff.find((x) => x.id === id);
  const stepA = answer.a.steps.find((s) => s.id === id);
  const stepB = answer.b.steps.find((s) => s.id === id);
  const panel = $("#compare-detail");
  fill(panel, el("p", { class: "muted" }, "loading…"));
  const same = d.max_abs_diff !== null;
  const [ta, tb, diff] = await Promise.all([
    compareTensor("a", "tensor", { trace_id: answer.a.trace_id }, stepA),
    compareTensor("b", "tensor", { trace_id: answer.b.trace_id }, stepB),
    same ? compareTensor("diff", "tensor_diff", { trace_a: answer.a.trace_id, trace_b: answer.b.trace_id }, stepA) : null,
  ]);
  if (compareState.stepId !== id) return; // another step was clicked meanwhile
  const head = stepA.dims.includes("H") ? compareState.head : 0;
  const a = matrixOf(ta, head);
  const b = matrixOf(tb, head);
  const delta = diff ? matrixOf(diff, head) : null;
  const isTokens = d.stage === "tokens";
  const figures = [];
  if (!isTokens) {
    // a and b on one scale, so that equal colours are equal numbers
    const finite = [...a.matrix.flat(), ...b.matrix.flat()].filter((v) => !isBlocked(v));
    const shared = ["mask", "weights", "probs"].includes(d.stage) ? [0, 1]
      : [Math.min(...finite), Math.max(...finite)];
    const [maskA, maskB] = await Promise.all([compareMask("a", answer.a, stepA), compareMask("b", answer.b, stepB)]);
    if (compareState.stepId !== id) return;
    figures.push(compareMap("a", a, shared, null, maskA), compareMap("b", b, shared, null, maskB));
    if (delta) {
      const m = Math.max(...delta.matrix.flat().map((v) => (isBlocked(v) ? 0 : Math.abs(v)))) || 1;
      figures.push(compareMap("b − a", delta, [-m, m], "compare-diff"));
    }
  }
  const attrs = (i, j, v) => ({ "data-testid": "diff-cell", "data-row": i, "data-col": j, "data-head": head, "data-value": String(v) });
  fill(panel,
    el("h2", {}, `${groupOf(d)} · ${STAGE_NAMES[d.stage] ?? d.stage}`),
    el("p", { class: "formula" }, stepA.formula),
    el("p", { class: "meta" }, `shape a ${d.shape_a.join("×")}, b ${d.shape_b.join("×")}   `,
      diffSummary(d)),
    diff?.partial ? el("p", { class: "muted" }, diff.partial) : null,
    headPicker(stepA, head, (h) => { compareState.head = h; showCompareStep(id); }),
    el("div", { class: "row" }, figures),
    delta ? el("div", {}, el("h3", {}, "b − a"), tensorTable(delta.matrix, delta.rows, delta.cols, { cellAttrs: attrs }))
      : el("div", {}, el("h3", {}, "a"), tensorTable(a.matrix, a.rows, a.cols), el("h3", {}, "b"), tensorTable(b.matrix, b.rows, b.cols)),
    el("div", { class: "buttons" },
      delta && !isTokens ? pngButton(() => $("#compare-detail canvas[data-testid=compare-diff]"), `diff-${d.stage}-${id}.png`) : null,
      jsonButton(() => ({ step: d, a: ta, b: tb, diff }), `compare-${d.stage}-${id}.json`)),
  );
}

/** The mask (1 may attend, 0 blocked) of an attention step of one side's trace, to hatch what it blocks. */
async function compareMask(side, traceAnswer, step) {
  if (!["qk", "scores", "weights"].includes(step.stage)) return null;
  const maskStep = traceAnswer.steps.find((s) => s.stage === "mask" && s.block === step.block &&
    s.layer === step.layer && s.kind === step.kind);
  if (!maskStep) return null;
  return matrixOf(await compareTensor(side, "tensor", { trace_id: traceAnswer.trace_id }, maskStep)).matrix;
}

function diffSummary(d) {
  if (d.max_abs_diff === null) return el("b", { "data-testid": "diff-summary" }, "shapes differ: no difference to take");
  if (d.max_abs_diff === 0) return el("b", { "data-testid": "diff-summary", class: "zero" }, "b − a = 0 everywhere: identical");
  return el("span", { "data-testid": "diff-summary" }, `max |b − a| ${fmt(d.max_abs_diff)}, mean |b − a| ${fmt(d.mean_abs_diff)}`);
}

/** A small heatmap of one side (or of b − a, on a fixed symmetric diverging scale) with its legend. */
function compareMap(title, { matrix, rows, cols }, fixed, testid = null, mask = null) {
  const canvas = el("canvas", { class: "heatmap", "data-testid": testid });
  const scale = drawHeatmap(canvas, hatchMasked(matrix, mask), { rows, cols, fixed, maxWidth: 340, maxHeight: 340, maxCell: 30 });
  hoverValues(canvas, matrix, rows, cols);
  return el("figure", {}, el("figcaption", {}, title), canvas, legend(scale));
}

// ───────────────────────────── tabs, the input form, start-up ─────────────────────────────

const RENDERERS = { masks: renderMasks, attention: renderAttention };
const rendered = new Set();

async function showView(name) {
  $$("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === name));
  $$(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${name}`));
  if (RENDERERS[name] && !rendered.has(name)) {
    rendered.add(name);
    await RENDERERS[name]();
  }
}

function describeModel(info) {
  const layers = Object.entries(info.layers ?? {}).filter(([, n]) => n).map(([b, n]) => `${n} ${b}`).join(" + ");
  return `${info.family} · ${info.name} · ${layers} layers · ${info.heads} heads · d_model ${info.d_model} · ` +
    `vocabulary ${info.vocab_size} · from ${info.source}`;
}

/** Show only the tabs and inputs of this model's family. */
function setupFamily(info) {
  $("#model-info").textContent = describeModel(info);
  for (const button of $$("#tabs button[data-families]")) {
    button.hidden = !button.dataset.families.split(" ").includes(info.family);
  }
  $("#target-label").hidden = info.family !== "seq2seq";
  $("#beam-label").hidden = info.family !== "seq2seq";
  showModeFields();
  $("#text").value = info.default_text ?? "";
  $("#target").value = "";
  $("#text-b-label").hidden = info.family !== "bert";
  fillForms(info.defaults ?? {});
  if (EMBEDDED) {
    $("#export-note").hidden = false;
    if (info.export?.note) $("#export-note").textContent += `. ${info.export.note}`;
    $$("#input-form input, #input-form button").forEach((n) => { n.disabled = true; });
  }
}

/** The forms start at the server's default requests, so that the first answers are the ones an export holds. */
function fillForms(defaults) {
  const set = (id, value) => { if (value !== undefined && value !== null) $(id).value = String(value); };
  set("#beam-size", defaults.beam?.beam_size);
  set("#length-penalty", defaults.beam?.length_penalty);
  const sample = defaults.sample ?? {};
  set("#temperature", sample.temperature);
  set("#top-k", sample.top_k ?? 0);
  set("#top-p", sample.top_p ?? 1);
  set("#seed", sample.seed);
  set("#sample-steps", sample.steps);
  set("#nsp-a", defaults.nsp?.text);
  set("#nsp-b", defaults.nsp?.text_b);
  state.fillTopK = defaults.fill_mask?.top_k ?? 5;
}

/** Trace the text of the form: every view starts again from this trace. */
async function runTrace() {
  clearError();
  const params = { text: $("#text").value };
  const target = $("#target").value.trim();
  if (state.info.family === "seq2seq" && target) params.target = target;
  const textB = $("#text-b").value.trim();
  if (state.info.family === "bert" && textB) params.text_b = textB;
  const trace = await api("trace", params);
  Object.assign(state, { trace, text: params.text, traceParams: params, stepId: null, attn: null });
  state.tensors.clear();
  state.masked.clear();
  rendered.clear();
  decodeState.answer = sampleState.answer = compareState.answer = null; // of the previous text: asked again when shown
  ["#decode-out", "#sample-out", "#fill-out", "#nsp-out", "#compare-steps", "#compare-detail", "#compare-head"]
    .forEach((id) => fill($(id)));
  setupCompare();
  renderSteps();
  const first = trace.steps.find((s) => s.stage === "weights") ?? trace.steps[0];
  await showStep(first.id);
  if (state.info.family === "bert") {
    renderBertTokens();
    await runFillMask();
    await runNsp();
  }
  const active = $("#tabs button.active").dataset.view;
  await showView(active);
  if (["decode", "sample", "compare"].includes(active)) await runFamilyDefault(active);
  document.body.dataset.ready = "1"; // tests wait for this
}

async function runFamilyDefault(view) {
  if (view === "decode") await runDecode();
  if (view === "sample") await runSample();
  if (view === "compare" && state.info.compare) await runCompare(); // two checkpoints: the same input on both
}

async function start() {
  $("#input-form").addEventListener("submit", guard(async (event) => {
    event.preventDefault();
    delete document.body.dataset.ready;
    await runTrace();
  }));
  $("#decode-form").addEventListener("submit", guard(async (event) => { event.preventDefault(); await runDecode(); }));
  $$("#decode-form input[name=mode]").forEach((r) => r.addEventListener("change", guard(async () => {
    showModeFields();
    await runDecode();
  })));
  $("#sample-form").addEventListener("submit", guard(async (event) => { event.preventDefault(); await runSample(); }));
  $("#nsp-form").addEventListener("submit", guard(async (event) => { event.preventDefault(); await runNsp(); }));
  $("#compare-form").addEventListener("submit", guard(async (event) => { event.preventDefault(); await runCompare(); }));
  $$("#compare-form input[name=other]").forEach((r) => r.addEventListener("change", guard(showCompareFields)));
  for (const button of $$("#tabs button")) {
    button.addEventListener("click", guard(async () => {
      await showView(button.dataset.view);
      const out = { decode: decodeState, sample: sampleState, compare: compareState }[button.dataset.view];
      if (out && !out.answer) await runFamilyDefault(button.dataset.view);
    }));
  }
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input")) return;
    const delta = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!delta) return;
    if ($("#view-decode").classList.contains("active") && decodeState.answer?.steps?.[0]?.fed) stepDecode(delta);
    if ($("#view-sample").classList.contains("active") && sampleState.answer) stepSample(delta);
  });
  state.info = await api("info");
  setupFamily(state.info);
  await runTrace();
}

// Exposed for tests and for the curious (open the console: explore.api("info")).
window.explore = { api, canonical, state, compareState };

guard(start)();
