// View 8, compare: two inputs on one model, or one input on two checkpoints (`tformer explore --compare DIR2`);
// every step of both forward passes with its max |b − a|, and one step opened as a, b and b − a (heatmaps on a
// shared scale, the numbers of b − a).
// Knows nothing about the other views or how answers travel; its first input is the page's traced one.

import { $, $$, el, fill, guard, onSubmit } from "explore/dom.js";
import { fmt, shown } from "explore/format.js";
import { api, stepTensor } from "explore/api.js";
import { set, state, subscribe } from "explore/store.js";
import { STAGE_NAMES, groupOf, headPicker, maskFor, traceTensor } from "explore/steps.js";
import { drawHeatmap, hatchMasked, hoverValues, isBlocked, legend } from "explore/draw/heatmap.js";
import { matrixOf, tensorTable } from "explore/draw/table.js";
import { jsonButton, pngButton } from "explore/draw/download.js";

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
  if (!state.compare.answer) {
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
  set({ compare: { answer, params, head: 0 } });
  renderCompareHead();
  renderCompareSteps();
  const first = answer.diff.find((d) => d.max_abs_diff !== 0 && d.max_abs_diff !== null && d.stage !== "tokens");
  await showCompareStep((first ?? answer.diff[0]).id);
}

/** What a and b are (two inputs or two checkpoints) and their tokens, the differing ones marked. */
function renderCompareHead() {
  const { answer } = state.compare;
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
  for (const d of state.compare.answer.diff) {
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

/** One step of both passes side by side: a, b and b − a (heatmaps on the diverging scale), and the numbers of b − a. */
async function showCompareStep(id) {
  const { answer } = state.compare;
  set({ compare: { stepId: id } });
  $$("#compare-steps .step").forEach((b) => b.classList.toggle("active", Number(b.dataset.stepId) === id));
  const d = answer.diff.find((x) => x.id === id);
  const stepA = answer.a.steps.find((s) => s.id === id);
  const stepB = answer.b.steps.find((s) => s.id === id);
  const panel = $("#compare-detail");
  fill(panel, el("p", { class: "muted" }, "loading…"));
  const same = d.max_abs_diff !== null;
  const [ta, tb, diff] = await Promise.all([
    traceTensor(answer.a, stepA),
    traceTensor(answer.b, stepB),
    same ? stepTensor("tensor_diff", { trace_a: answer.a.trace_id, trace_b: answer.b.trace_id }, stepA) : null,
  ]);
  if (state.compare.stepId !== id) return; // another step was clicked meanwhile
  const head = stepA.dims.includes("H") ? state.compare.head : 0;
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
    const [maskA, maskB] = await Promise.all([maskFor(answer.a, stepA), maskFor(answer.b, stepB)]);
    if (state.compare.stepId !== id) return;
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
    headPicker(stepA, head, (h) => { set({ compare: { head: h } }); showCompareStep(id); }),
    el("div", { class: "row" }, figures),
    delta ? el("div", {}, el("h3", {}, "b − a"), tensorTable(delta.matrix, delta.rows, delta.cols, { cellAttrs: attrs }))
      : el("div", {}, el("h3", {}, "a"), tensorTable(a.matrix, a.rows, a.cols), el("h3", {}, "b"), tensorTable(b.matrix, b.rows, b.cols)),
    el("div", { class: "buttons" },
      delta && !isTokens ? pngButton(() => $("#compare-detail canvas[data-testid=compare-diff]"), `diff-${d.stage}-${id}.png`) : null,
      jsonButton(() => ({ step: d, a: ta, b: tb, diff }), `compare-${d.stage}-${id}.json`)),
  );
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

onSubmit("#compare-form", runCompare);
$$("#compare-form input[name=other]").forEach((r) => r.addEventListener("change", guard(showCompareFields)));

subscribe((changed) => {
  if ("trace" in changed) {
    set({ compare: { answer: null } }); // of the previous text: asked again when shown
    ["#compare-steps", "#compare-detail", "#compare-head"].forEach((id) => fill($(id)));
    setupCompare();
  }
});

export const view = {
  name: "compare",
  /** Its tab was opened: with --compare, the traced input through both checkpoints, unless one is shown. */
  async shown() {
    if (!state.compare.answer && state.info.compare) await runCompare();
  },
};
