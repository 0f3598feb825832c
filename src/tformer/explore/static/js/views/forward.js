// View 1, the forward path: every traced step in data-flow order, clickable; the chosen step's place, formula,
// shape, heatmap (blocked cells hatched) and table of numbers, with PNG and JSON downloads; the top-k predictions.
// Knows nothing about the other views, the input form or how answers travel (api.js does).

import { $, $$, el, fill } from "explore/dom.js";
import { fmt } from "explore/format.js";
import { set, state, subscribe } from "explore/store.js";
import { STAGE_NAMES, dimsText, groupOf, headPicker, maskFor, traceTensor } from "explore/steps.js";
import { drawHeatmap, hatchMasked, hoverValues, isBlocked, legend } from "explore/draw/heatmap.js";
import { bars, matrixOf, tensorTable } from "explore/draw/table.js";
import { jsonButton, pngButton } from "explore/draw/download.js";

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

/** One step in full: where it is, its formula, its shape, a heatmap and the table of its numbers. */
async function showStep(id) {
  const step = state.trace.steps.find((s) => s.id === id);
  set({ stepId: id });
  markStep(`[data-step-id="${id}"]`);
  const panel = $("#step-detail");
  fill(panel, el("p", { class: "muted" }, "loading…"));
  const answer = await traceTensor(state.trace, step);
  if (state.stepId !== id) return; // another step was clicked meanwhile
  const head = state.heads.get(id) ?? 0;
  const { matrix, rows, cols } = matrixOf(answer, head);
  const mask = await maskFor(state.trace, step);
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
  set({ stepId: "top_k" });
  markStep("[data-testid=step-topk]");
  fill($("#step-detail"),
    el("h2", {}, "top-k predictions"),
    el("p", { class: "formula" }, "the k most probable tokens of softmax(logits) at each position"),
    ...state.trace.top_k.map((t) => el("div", { class: "topk" },
      el("h3", {}, `position ${t.position} (“${t.token}”)`),
      bars(t.candidates.map(([token, , p]) => [token, p])))),
  );
}

subscribe((changed) => {
  if ("trace" in changed) renderSteps();
});

export const view = {
  name: "forward",
  /** After each trace: the first attention weights (else the first step) are shown. */
  async start() {
    const first = state.trace.steps.find((s) => s.stage === "weights") ?? state.trace.steps[0];
    await showStep(first.id);
  },
};
