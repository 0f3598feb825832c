// tformer explore — the page's start: the model line, the input form, the tabs and the arrow keys; it traces the
// text and hands the trace to the views through the store. Plain JavaScript modules: no build step, nothing from
// the network but the page's own server (and, in an exported file, not even that).
//
// Every number comes from api() (api.js): the server's answers, or the ones an exported file embeds. The page never
// computes a model number itself; it only draws them (heatmaps, tables, bars, a beam tree).
//
// Views (views/*.js, one module each): 1 forward path · 2 masks · 3 attention grid · 4 decoding (greedy, beam,
// teacher forcing) · 5 GPT sampling · 6 BERT fill-mask and NSP · 8 compare; PNG and JSON downloads in each.
// A view exports {name, start?, shown?, key?}: start after each trace, shown when its tab is opened (or is open
// when the page traces), key for ← →. It resets itself when the store's trace changes.
// Knows nothing about what a view draws.

import { $, $$, clearError, guard, onSubmit } from "explore/dom.js";
import { EMBEDDED, api, canonical, forgetTensors } from "explore/api.js";
import { set, state } from "explore/store.js";
import { view as forward } from "explore/views/forward.js";
import { view as masks } from "explore/views/masks.js";
import { view as attention } from "explore/views/attention.js";
import { view as decode } from "explore/views/decode.js";
import { view as sample } from "explore/views/sample.js";
import { view as bert } from "explore/views/bert.js";
import { view as compare } from "explore/views/compare.js";

const VIEWS = [forward, masks, attention, decode, sample, bert, compare];
const byName = Object.fromEntries(VIEWS.map((v) => [v.name, v]));

async function showView(name) {
  $$("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === name));
  $$(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${name}`));
  await byName[name].shown?.();
}

const activeView = () => $("#tabs button.active").dataset.view;

function describeModel(info) {
  const layers = Object.entries(info.layers ?? {}).filter(([, n]) => n).map(([b, n]) => `${n} ${b}`).join(" + ");
  return `${info.family} · ${info.name} · ${layers} layers · ${info.heads} heads · d_model ${info.d_model} · ` +
    `vocabulary ${info.vocab_size} · ${info.precision || "fp32"} weights · from ${info.source}`;
}

/** Show only the tabs and inputs of this model's family (each view sets up its own form from the store's info). */
function setupFamily(info) {
  $("#model-info").textContent = describeModel(info);
  for (const button of $$("#tabs button[data-families]")) {
    button.hidden = !button.dataset.families.split(" ").includes(info.family);
  }
  $("#target-label").hidden = info.family !== "seq2seq";
  $("#text").value = info.default_text ?? "";
  $("#target").value = "";
  $("#text-b-label").hidden = info.family !== "bert";
  if (EMBEDDED) {
    $("#export-note").hidden = false;
    if (info.export?.note) $("#export-note").textContent += `. ${info.export.note}`;
    $$("#input-form input, #input-form button").forEach((n) => { n.disabled = true; });
  }
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
  forgetTensors();
  set({ trace, text: params.text, traceParams: params, stepId: null, attn: null, drawn: new Set() });
  for (const view of VIEWS) await view.start?.();
  await showView(activeView());
  document.body.dataset.ready = "1"; // tests wait for this
}

async function start() {
  onSubmit("#input-form", async () => {
    delete document.body.dataset.ready;
    await runTrace();
  });
  for (const button of $$("#tabs button")) {
    button.addEventListener("click", guard(() => showView(button.dataset.view)));
  }
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input")) return;
    const delta = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (delta) byName[activeView()].key?.(delta);
  });
  const info = await api("info");
  setupFamily(info);
  set({ info });
  await runTrace();
}

// Exposed for tests and for the curious (open the console: explore.api("info"), explore.state).
window.explore = { api, canonical, state };

guard(start)();
