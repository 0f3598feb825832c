// Numbers and tokens as a learner reads them. Knows nothing about the DOM, the server or the state.

/** Numbers as a learner reads them: 4 significant digits in the cell, the full value in its title. */
export function fmt(value) {
  if (typeof value === "string") return { "-inf": "−∞", inf: "∞" }[value] ?? value;
  if (typeof value !== "number") return String(value);
  if (value === 0) return "0";
  const abs = Math.abs(value);
  if (abs >= 1e4 || abs < 1e-3) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
}

/** A token as a chip shows it: spaces and line breaks made visible. */
export const shown = (token) => String(token).replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥") || "∅";

export const pct = (p) => `${(100 * p).toFixed(p >= 0.1 ? 1 : 2)}%`;
