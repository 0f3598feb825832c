// View 2, the masks: for each attention kind, the causal part, the padding part, the model's own combined mask,
// and the weights it produces (blocked keys get exactly 0). Drawn once per trace, when first shown.
// Knows nothing about the other views, the input form or how answers travel.

import { $, el, fill } from "explore/dom.js";
import { state } from "explore/store.js";
import { traceTensor } from "explore/steps.js";
import { drawHeatmap, hoverValues } from "explore/draw/heatmap.js";
import { matrixOf } from "explore/draw/table.js";

const PAD = new Set(["<pad>", "[PAD]"]);

/** For each attention kind: the causal part, the padding part, the model's combined mask, and the weights. */
async function renderMasks() {
  const view = $("#view-masks");
  fill(view, el("p", { class: "muted" }, "loading…"));
  const firstPerKind = new Map();
  for (const s of state.trace.steps.filter((x) => x.stage === "mask")) {
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
  const mask = matrixOf(await traceTensor(state.trace, maskStep));
  const weights = weightsStep ? matrixOf(await traceTensor(state.trace, weightsStep), 0) : null;
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

export const view = {
  name: "masks",
  /** Its tab was opened: drawn the first time for this trace. */
  async shown() {
    if (state.drawn.has("masks")) return;
    state.drawn.add("masks");
    await renderMasks();
  },
};
