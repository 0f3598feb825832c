// View 5, GPT sampling step by step: the next-token distribution before and after temperature → top-k → top-p
// (renormalised), and the token drawn with the seed, ◀ ▶ and the arrow keys.
// Knows nothing about the other views or how answers travel; its form starts at the server's default request.

import { $, el, fill, floatValue, intValue, onSubmit, setValue } from "explore/dom.js";
import { shown } from "explore/format.js";
import { api } from "explore/api.js";
import { set, state, subscribe } from "explore/store.js";
import { bars } from "explore/draw/table.js";

function sampleParams() {
  const params = { text: state.text, temperature: floatValue("#temperature"), seed: intValue("#seed"), steps: intValue("#sample-steps") };
  if (intValue("#top-k") > 0) params.top_k = intValue("#top-k");
  if (floatValue("#top-p") < 1) params.top_p = floatValue("#top-p");
  return params;
}

async function runSample() {
  fill($("#sample-out"), el("p", { class: "muted" }, "sampling…"));
  set({ sample: { answer: await api("sample", sampleParams()), at: 1 } });
  renderSample();
}

/** One sampling step: the raw distribution, the one left after the filters, the token drawn. */
function renderSample() {
  const { answer, at } = state.sample;
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
  set({ sample: { at: Math.max(1, Math.min(state.sample.answer.steps.length, state.sample.at + delta)) } });
  renderSample();
}

onSubmit("#sample-form", runSample);

subscribe((changed) => {
  if ("info" in changed) { // the form starts at the request an export holds
    const sample = state.info.defaults?.sample ?? {};
    setValue("#temperature", sample.temperature);
    setValue("#top-k", sample.top_k ?? 0);
    setValue("#top-p", sample.top_p ?? 1);
    setValue("#seed", sample.seed);
    setValue("#sample-steps", sample.steps);
  }
  if ("trace" in changed) {
    set({ sample: { answer: null } }); // of the previous text: asked again when shown
    fill($("#sample-out"));
  }
});

export const view = {
  name: "sample",
  /** Its tab was opened: the default sampling of the traced text, unless one is shown. */
  async shown() {
    if (!state.sample.answer) await runSample();
  },
  /** ← →: a sampling step back or on. */
  key(delta) {
    if (state.sample.answer) stepSample(delta);
  },
};
