// The page's one state store: a single object, changed through set(), watched through subscribe().
//
// What the page is showing lives here and nowhere else: the model (info), the traced input, and what each view
// has chosen or fetched (the forward step, the attention cell, the masked BERT pieces, the decoding, sampling and
// compare answers). Tensor answers are not state: the API client caches them (api.js).
// Knows nothing about the DOM, the server or any view.

export const state = {
  info: null, // the info answer: the model, its family, the default requests
  trace: null, // the trace answer (steps without values): every view starts from it
  text: "", // the traced text
  traceParams: null, // the trace request, which compare takes as its first input
  drawn: new Set(), // views drawn for this trace (masks, attention: once each, when first shown)
  stepId: null, // forward: the step shown (or "top_k")
  heads: new Map(), // forward: step id → the head shown
  attn: null, // attention: {block, kind, layer, head} shown in full
  masked: new Set(), // BERT: positions masked by a click
  decode: { answer: null, at: 0 }, // decoding: the answer and the greedy step shown
  sample: { answer: null, at: 1 }, // sampling: the answer and the step shown
  compare: { answer: null, params: null, stepId: null, head: 0 }, // compare: the answer, its request, step, head
};

// Slices are merged by set() (so that a reference to state.compare stays the one object); other keys are replaced.
// The collections (drawn, heads, masked) are changed in place by their one owner.
const SLICES = new Set(["decode", "sample", "compare"]);

const listeners = new Set();

/** set({key: value, ...}): change the state, then tell every subscriber what changed (the patch itself). */
export function set(patch) {
  for (const [key, value] of Object.entries(patch)) {
    if (!(key in state)) throw new Error(`the page's state has no ${key}`);
    if (SLICES.has(key)) Object.assign(state[key], value);
    else state[key] = value;
  }
  for (const listener of listeners) listener(patch);
}

/** subscribe((patch) => …) is called after every set(), synchronously; returns a function that unsubscribes. */
export function subscribe(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
