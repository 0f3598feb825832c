// View 6, BERT: the sentence's pieces as chips, a click masks one (fill-mask's top tokens for each [MASK]); a
// sentence pair with its segment ids and P(B follows A) from the NSP head.
// Knows nothing about the other views or how answers travel; the NSP form starts at the server's default pair.

import { $, el, fill, onSubmit, setValue } from "explore/dom.js";
import { pct } from "explore/format.js";
import { api } from "explore/api.js";
import { state, subscribe } from "explore/store.js";
import { bars } from "explore/draw/table.js";

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
  if (state.info.untrained?.mlm_head) { // a random head's guesses are not shown as the model's
    fill(out, el("p", { class: "muted", "data-testid": "fill-untrained" }, state.info.untrained.mlm_head));
    return;
  }
  if (!state.masked.size && !state.text.includes("[MASK]")) {
    fill(out, el("p", { class: "muted" }, "no [MASK] yet: click a token above"));
    return;
  }
  const text = state.masked.size ? maskedText() : state.text;
  const answer = await api("fill_mask", { text, top_k: state.info.defaults?.fill_mask?.top_k ?? 5 });
  fill(out, el("p", { class: "meta" }, "input: ", el("code", { "data-testid": "fill-text" }, text)),
    el("div", { class: "row" }, answer.masks.map((m) => el("div", { class: "panel" },
      el("h3", {}, `[MASK] at position ${m.position}: `, el("b", { "data-testid": "fill-top" }, m.candidates[0][0])),
      bars(m.candidates.map(([t, p]) => [t, p]), { chosen: m.candidates[0][0] })))));
}

/** Sentence A and B with their segment ids, and P(B follows A) from the NSP head. */
async function runNsp() {
  if (state.info.untrained?.nsp_head) {
    fill($("#nsp-out"), el("p", { class: "muted", "data-testid": "nsp-untrained" }, state.info.untrained.nsp_head));
    return;
  }
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

onSubmit("#nsp-form", runNsp);

subscribe((changed) => {
  if ("info" in changed) { // the pair starts at the request an export holds
    setValue("#nsp-a", state.info.defaults?.nsp?.text);
    setValue("#nsp-b", state.info.defaults?.nsp?.text_b);
  }
  if ("trace" in changed) {
    state.masked.clear();
    fill($("#fill-out"));
    fill($("#nsp-out"));
  }
});

export const view = {
  name: "bert",
  /** After each trace of a BERT: its pieces as chips, fill-mask of the text as it is, and NSP of the pair. */
  async start() {
    if (state.info.family !== "bert") return;
    renderBertTokens();
    await runFillMask();
    await runNsp();
  },
};
