// Numbers as text: a tensor answer as a 2-D matrix (one head, batch 0), a scrolling table, probability bars.
// Knows nothing about the server, the page's state or its views.

import { el } from "explore/dom.js";
import { fmt, pct, shown } from "explore/format.js";
import { isBlocked } from "explore/draw/heatmap.js";

const depth = (v) => (Array.isArray(v) ? 1 + depth(v[0]) : 0);

/** The 2-D slice shown for a tensor answer: head `head` when a dim is H, index 0 of other leading dims. */
export function matrixOf(answer, head = 0) {
  let values = answer.values;
  let dims = answer.dims.slice(answer.dims.length - depth(values));
  while (depth(values) > 2) {
    values = values[dims[0] === "H" ? head : 0];
    dims = dims.slice(1);
  }
  if (depth(values) === 1) return { matrix: [values], dims: ["", dims[0]], rows: null, cols: answer.cols };
  if (depth(values) === 0) return { matrix: [[values]], dims: ["", ""], rows: null, cols: null };
  return { matrix: values, dims, rows: answer.rows, cols: answer.cols };
}

const MAX_TABLE_ROWS = 256;
const MAX_TABLE_COLS = 64;

/** The numbers as a scrolling table; big tensors show their first rows/columns (the JSON has them all). */
export function tensorTable(matrix, rows, cols, { cellAttrs = null, mask = null } = {}) {
  const nr = Math.min(matrix.length, MAX_TABLE_ROWS);
  const nc = Math.min(matrix[0]?.length ?? 0, MAX_TABLE_COLS);
  const head = el("tr", {}, el("th", { class: "corner" }),
    Array.from({ length: nc }, (_, j) => el("th", { scope: "col" }, shown(cols?.[j] ?? j))));
  const body = Array.from({ length: nr }, (_, i) => el("tr", {},
    el("th", { scope: "row" }, shown(rows?.[i] ?? i)),
    Array.from({ length: nc }, (_, j) => {
      const v = matrix[i][j];
      const blocked = isBlocked(v) || mask?.[i]?.[j] === 0;
      return el("td", { title: String(v), class: blocked ? "blocked" : null, ...(cellAttrs?.(i, j, v) ?? {}) }, fmt(v));
    })));
  const clipped = matrix.length > nr || (matrix[0]?.length ?? 0) > nc;
  return el("div", { class: "table-wrap" },
    el("table", { class: "tensor", "data-testid": "tensor-table" }, el("thead", {}, head), el("tbody", {}, body)),
    clipped ? el("p", { class: "muted" }, `showing ${nr} of ${matrix.length} rows, ${nc} of ${matrix[0].length} columns; ` +
      "“JSON” downloads every number fetched") : null);
}

/** Horizontal probability bars: [[label, p], …]; `chosen` is highlighted; labels are tokens unless `raw`. */
export function bars(items, { chosen = null, testid = null, raw = false } = {}) {
  const max = Math.max(...items.map(([, p]) => p), 1e-9);
  return el("div", { class: "bars" }, items.map(([label, p]) => el("div", {
    class: label === chosen ? "bar chosen" : "bar", title: String(p), "data-testid": testid,
  }, el("span", { class: "bar-label" }, raw ? label : shown(label)), el("span", { class: "bar-track" },
    el("span", { class: "bar-fill", style: `width:${(100 * p) / max}%` })), el("span", { class: "bar-value" }, pct(p)))));
}
