// DOM helpers and the error line: build elements, replace children, show a failure as one line.
// Knows nothing about the model, the server, the state or any view.

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/** el("td", {class: "x", dataset: {q: 1}}, "text", child) → an element. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, guard(fn));
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

/** Replaces the children of `node` (null and false children are skipped, as in el). */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

export function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag); // a namespace name, never fetched
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

// ───────────────────────────── errors ─────────────────────────────

/** Shows one line in [data-testid=error]; the page never lets an error escape uncaught. */
export function showError(error) {
  const box = $("#error");
  box.textContent = error instanceof Error ? error.message : String(error);
  box.hidden = false;
}

export function clearError() {
  $("#error").hidden = true;
}

/** Wraps an event handler (sync or async) so that any failure is shown, not thrown. */
export function guard(fn) {
  return (...args) => {
    try {
      const result = fn(...args);
      if (result && typeof result.catch === "function") result.catch(showError);
      return result;
    } catch (error) {
      showError(error);
      return undefined;
    }
  };
}

/** Runs `fn` when the form `selector` is submitted (the page stays where it is; a failure is shown). */
export function onSubmit(selector, fn) {
  $(selector).addEventListener("submit", guard(async (event) => {
    event.preventDefault();
    await fn();
  }));
}

// ───────────────────────────── form fields ─────────────────────────────

export const intValue = (id) => Number.parseInt($(id).value, 10);
export const floatValue = (id) => Number.parseFloat($(id).value);

/** Puts `value` in the field `id`, unless there is none (null or undefined: the field keeps its own). */
export function setValue(id, value) {
  if (value !== undefined && value !== null) $(id).value = String(value);
}
