// View 4, decoding step by step: greedy (the tokens fed, the KV cache length, the top-k, the output so far, ◀ ▶
// and the arrow keys), teacher forcing against a reference, and beam search drawn as a tree (draw/beam-tree.js).
// Knows nothing about the other views or how answers travel; its form starts at the server's default requests.

import { $, $$, el, fill, floatValue, guard, intValue, onSubmit, setValue } from "explore/dom.js";
import { fmt, shown } from "explore/format.js";
import { set, state, subscribe } from "explore/store.js";
import { api } from "explore/api.js";
import { beamSvg } from "explore/draw/beam-tree.js";
import { bars } from "explore/draw/table.js";
import { jsonButton, pngButton } from "explore/draw/download.js";

const mode = () => $("#decode-form input[name=mode]:checked").value;

/** The request the decode form describes (only the fields the API takes for that mode; empty = its default). */
function decodeParams() {
  const params = { text: state.text, mode: mode() };
  if (params.mode === "beam") params.beam_size = intValue("#beam-size");
  if (params.mode === "beam" && $("#length-penalty").value !== "") params.length_penalty = floatValue("#length-penalty");
  if ($("#max-len").value !== "") params.max_len = intValue("#max-len");
  const reference = $("#reference").value.trim();
  if (params.mode === "greedy" && reference) params.reference = reference;
  return params;
}

/** Beam fields only for beam search, the reference only for greedy (it is compared with teacher forcing). */
function showModeFields() {
  const beam = mode() === "beam";
  $$(".beam-only").forEach((n) => { n.hidden = !beam; });
  $$(".greedy-only").forEach((n) => { n.hidden = beam || state.info?.family !== "seq2seq"; });
}

async function runDecode() {
  const params = decodeParams();
  const out = $("#decode-out");
  fill(out, el("p", { class: "muted" }, "decoding…"));
  const answer = await api("decode", params);
  set({ decode: { answer, at: 0 } });
  if (params.mode === "beam") renderBeam(answer, params);
  else renderGreedy();
}

/** Greedy: step `at` of N — the tokens fed so far, the KV cache length, the top-k, the output so far. */
function renderGreedy() {
  const { answer, at } = state.decode;
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
      state.info?.family === "seq2seq" ? "Press next: the decoder starts from <sos> and picks the most probable token at each step."
        : "Press next: the model reads the prompt and picks the most probable next token at each step."),
    answer.teacher_forced ? teacherForced(answer.teacher_forced) : null,
    el("p", { class: "meta" }, "greedy output: ", el("b", { "data-testid": "decode-output" }, at === steps.length ? answer.output : "…")),
  );
}

function stepDecode(delta) {
  const n = state.decode.answer.steps.length;
  set({ decode: { at: Math.max(0, Math.min(n, state.decode.at + delta)) } });
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

onSubmit("#decode-form", runDecode);
$$("#decode-form input[name=mode]").forEach((r) => r.addEventListener("change", guard(async () => {
  showModeFields();
  await runDecode();
})));

subscribe((changed) => {
  if ("info" in changed) {
    $("#beam-label").hidden = state.info.family !== "seq2seq";
    showModeFields();
    const beam = state.info.defaults?.beam; // the form starts at the request an export holds
    setValue("#beam-size", beam?.beam_size);
    setValue("#length-penalty", beam?.length_penalty);
  }
  if ("trace" in changed) {
    set({ decode: { answer: null } }); // of the previous text: asked again when shown
    fill($("#decode-out"));
  }
});

export const view = {
  name: "decode",
  /** Its tab was opened: the default decoding of the traced text, unless one is shown. */
  async shown() {
    if (!state.decode.answer) await runDecode();
  },
  /** ← →: a greedy step back or on. */
  key(delta) {
    if (state.decode.answer?.steps?.[0]?.fed) stepDecode(delta);
  },
};
