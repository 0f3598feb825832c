// The data layer: one function, two transports, and the one cache of tensor answers.
//
// api(name, params) is POST /api/<name> to `tformer explore`, or, in a file written by `tformer explore --export`,
// the answer embedded in <script id="tformer-data">. stepTensor() fetches one traced step's numbers (whole, or
// its first rows and last row when too big for one answer) once, whatever view asks for them.
// Knows nothing about the DOM, the page's state or its views; the page never computes a model number itself.

/** JSON with sorted keys and no spaces: the key under which an exported file stores an answer. */
export function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The answers embedded by `tformer explore --export`, keyed again by this page's canonical JSON so that
 * number spelling (1.0 in Python, 1 here) cannot make an answer look missing. Null with a server. */
export const EMBEDDED = readEmbedded();

function readEmbedded() {
  const node = document.getElementById("tformer-data");
  if (!node) return null;
  const data = JSON.parse(node.textContent);
  const answers = new Map();
  for (const [key, answer] of Object.entries(data.answers ?? data)) {
    const cut = key.search(/[\s{]/);
    const name = cut < 0 ? key : key.slice(0, cut);
    const params = cut < 0 ? {} : JSON.parse(key.slice(cut).trim() || "{}");
    answers.set(name + canonical(params), answer);
  }
  return answers;
}

class ApiError extends Error {}

/** The most values one tensor answer holds: the info answer says (the documented default is 2^21). */
let maxValues = 2 ** 21;

/** api("trace", {text}) → the answer. With a server: POST /api/<name>; in an exported file: the embedded answer. */
export async function api(name, params = {}) {
  const answer = await ask(name, params);
  if (name === "info") maxValues = answer.max_tensor_values ?? 2 ** 21;
  return answer;
}

async function ask(name, params) {
  if (EMBEDDED) {
    const answer = EMBEDDED.get(name + canonical(params));
    if (answer === undefined) throw new ApiError(`not in this export: ${name} ${canonical(params)}`);
    return answer;
  }
  const response = await fetch(`/api/${name}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(params),
  });
  const body = await response.json().catch(() => ({ error: `${name}: HTTP ${response.status}, not JSON` }));
  if (!response.ok || body.error) throw new ApiError(body.error ?? `${name}: HTTP ${response.status}`);
  return body;
}

// ───────────────────────────── the one cache: a step's numbers, fetched once ─────────────────────────────

const tensors = new Map(); // name + canonical({...base, id}) → the promise of the answer

/**
 * One step's numbers: `tensor` {trace_id} of one trace, or `tensor_diff` {trace_a, trace_b} of two (`base`), for
 * `step` (its id, shape and dims). Whole when it fits one answer, else its first rows and last row. Asked once:
 * a trace id names its inputs and model, so an answer stays true until forgetTensors() (a new trace).
 */
export function stepTensor(name, base, step) {
  const key = name + canonical({ ...base, id: step.id });
  if (!tensors.has(key)) {
    tensors.set(key, fetchStep(name, base, step).catch((error) => {
      tensors.delete(key);
      throw error;
    }));
  }
  return tensors.get(key);
}

/** Drops every cached tensor (the page traced another input: the old answers are not shown again). */
export const forgetTensors = () => tensors.clear();

async function fetchStep(name, base, step) {
  const values = step.shape.reduce((a, b) => a * b, 1) / (step.dims[0] === "B" ? step.shape[0] : 1);
  if (values > maxValues && step.shape.length >= 2) return someRows(name, base, step);
  try {
    return await api(name, { ...base, id: step.id });
  } catch (error) {
    if (!/one row at a time/.test(error.message)) throw error;
    return someRows(name, base, step); // too big for one answer (e.g. T × V logits of a big vocabulary)
  }
}

const SOME_ROWS = 8;

/** The first rows and the last row of a tensor too big to send whole, one request per row. */
async function someRows(name, base, step) {
  const n = step.shape[step.shape.length - 2];
  const picks = [...new Set([...Array(Math.min(n, SOME_ROWS)).keys(), n - 1])];
  const parts = await Promise.all(picks.map((row) => api(name, { ...base, id: step.id, row })));
  return {
    ...parts[0],
    dims: [step.dims[step.dims.length - 2], ...parts[0].dims],
    rows: parts.map((p, i) => p.rows?.[0] ?? `row ${picks[i]}`),
    values: parts.map((p) => p.values),
    partial: EMBEDDED
      ? `rows ${picks.join(", ")} of ${n}: the other rows are not in this export (tformer explore --model DIR shows them)`
      : `rows ${picks.join(", ")} of ${n}: the whole tensor is too big for one answer`,
  };
}
