// Heatmaps on <canvas>: colour scales (colour-blind safe), blocked cells hatched, a legend, a hover tooltip.
// Draws the numbers it is given; knows nothing about the server, the page's state or its views.

import { el } from "explore/dom.js";
import { fmt, shown } from "explore/format.js";

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

export const isBlocked = (v) => typeof v !== "number" || !Number.isFinite(v);

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
export function drawHeatmap(canvas, matrix, { rows = null, cols = null, maxWidth = 640, maxHeight = 420, maxCell = 36,
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
export function legend(scale, { blockedText = null } = {}) {
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
export function hoverValues(canvas, matrix, rows, cols) {
  canvas.addEventListener("mousemove", (event) => {
    const cell = Number(canvas.dataset.cell);
    const r = Math.floor((event.offsetY - Number(canvas.dataset.top)) / cell);
    const c = Math.floor((event.offsetX - Number(canvas.dataset.left)) / cell);
    const value = matrix[r]?.[c];
    canvas.title = value === undefined ? "" : `${rows?.[r] ?? r} → ${cols?.[c] ?? c}: ${value}`;
  });
}

/** `matrix` with the cells its mask blocks replaced by "-inf", so that they are drawn hatched. */
export const hatchMasked = (matrix, mask) =>
  (mask ? matrix.map((row, i) => row.map((v, j) => (mask[i]?.[j] === 0 ? "-inf" : v))) : matrix);
