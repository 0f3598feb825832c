// What forward and compare share about a trace's steps: their names, their group (block · layer · attention
// kind), the head picker, and a step's numbers and mask through the API's one cache.
// Knows nothing about the page's state or which view asks.

import { el } from "explore/dom.js";
import { stepTensor } from "explore/api.js";
import { matrixOf } from "explore/draw/table.js";

export const STAGE_NAMES = {
  tokens: "pieces → ids", token_embedding: "token embedding", positional: "positional encoding",
  segment: "segment embedding", embedding: "embedding sum", q: "Q", k: "K", v: "V", qk: "Q·Kᵀ", scores: "scaled Q·Kᵀ",
  mask: "mask", masked_scores: "masked scores", weights: "softmax → weights", context: "weights · V",
  attn_output: "concat → W_O", add_norm: "add & norm", ffn_hidden: "FFN: x·W₁ + b₁", ffn_activation: "FFN: activation",
  ffn_gate: "FFN: gate x·W_gate", ffn_up: "FFN: up x·W_up", ffn_gated: "FFN: act(gate) ⊙ up",
  ffn: "feed-forward", final_norm: "final norm", logits: "logits", probs: "softmax → probabilities",
};

/** "encoder · layer 0 · self-attention" — the group a step belongs to in the column. */
export function groupOf(step) {
  const parts = [step.block || "input"];
  if (step.layer !== null && step.layer !== undefined) parts.push(`layer ${step.layer}`);
  if (step.kind) parts.push(`${step.kind}-attention`);
  return parts.join(" · ");
}

export const dimsText = (step) => step.dims.map((d, i) => `${d}=${step.shape[i]}`).join(" × ");

/** Buttons 0…H−1 when the tensor has a head dimension. */
export function headPicker(step, head, onPick) {
  const at = step.dims.indexOf("H");
  if (at < 0) return null;
  return el("div", { class: "heads" }, "head ",
    Array.from({ length: step.shape[at] }, (_, h) => el("button", {
      type: "button", class: h === head ? "small active" : "small", "data-head": h, on: { click: () => onPick(h) },
    }, String(h))));
}

/** The numbers of one step of a trace answer (fetched once: the API client caches them). */
export const traceTensor = (trace, step) => stepTensor("tensor", { trace_id: trace.trace_id }, step);

/** The mask matrix (1 may attend, 0 blocked) of an attention step's module, for the steps drawn over Tq × Tk. */
export async function maskFor(trace, step) {
  if (!["qk", "scores", "weights"].includes(step.stage)) return null;
  const maskStep = trace.steps.find((s) => s.stage === "mask" && s.block === step.block &&
    s.layer === step.layer && s.kind === step.kind);
  return maskStep ? matrixOf(await traceTensor(trace, maskStep)).matrix : null;
}
