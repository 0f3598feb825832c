// View 3, attention: a layer × head grid of small heatmaps per attention kind (block · self/cross); one cell
// opened in full with its token strips (hover a query: its keys light up) and its exact weights.
// Knows nothing about the other views, the input form or how answers travel.

import { $, $$, el, fill } from "explore/dom.js";
import { shown } from "explore/format.js";
import { set, state } from "explore/store.js";
import { maskFor, traceTensor } from "explore/steps.js";
import { drawHeatmap, hatchMasked, hoverValues, legend } from "explore/draw/heatmap.js";
import { matrixOf, tensorTable } from "explore/draw/table.js";
import { jsonButton, pngButton } from "explore/draw/download.js";

const weightSteps = () => state.trace.steps.filter((s) => s.stage === "weights");

/** One grid per (block, kind): rows = layers, columns = heads, each cell a small heatmap of the weights. */
async function renderAttention() {
  const grids = $("#attn-grids");
  fill(grids, el("p", { class: "muted" }, "loading…"));
  const groups = new Map();
  for (const s of weightSteps()) {
    const key = `${s.block}/${s.kind}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  const sections = [];
  for (const steps of groups.values()) sections.push(await attentionGrid(steps));
  fill(grids, ...sections);
  if (!state.attn && weightSteps().length) {
    const s = weightSteps()[0];
    set({ attn: { block: s.block, kind: s.kind, layer: s.layer, head: 0 } });
  }
  if (state.attn) await showAttention(state.attn);
}

async function attentionGrid(steps) {
  const { block, kind } = steps[0];
  const table = el("table", { class: "attn-grid" });
  const nHeads = steps[0].shape[steps[0].dims.indexOf("H")];
  table.append(el("tr", {}, el("th", {}), Array.from({ length: nHeads }, (_, h) => el("th", {}, `head ${h}`))));
  for (const step of steps) {
    const answer = await traceTensor(state.trace, step);
    const mask = await maskFor(state.trace, step);
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
  set({ attn: where });
  $$("[data-testid=attn-thumb]").forEach((b) => b.classList.toggle("active", b.dataset.block === where.block &&
    b.dataset.kind === where.kind && Number(b.dataset.layer) === where.layer && Number(b.dataset.head) === where.head));
  const step = weightSteps().find((s) => s.block === where.block && s.kind === where.kind && s.layer === where.layer);
  const { matrix, rows, cols } = matrixOf(await traceTensor(state.trace, step), where.head);
  const mask = await maskFor(state.trace, step);
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

export const view = {
  name: "attention",
  /** Its tab was opened: drawn the first time for this trace. */
  async shown() {
    if (state.drawn.has("attention")) return;
    state.drawn.add("attention");
    await renderAttention();
  },
};
