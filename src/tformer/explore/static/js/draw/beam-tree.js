// The beam search tree as SVG: one column per step; alive, pruned and finished hypotheses with their scores,
// the best hypothesis drawn in orange back to the root. Draws a decode answer's nodes; knows nothing about the
// server, the page's state or its views.

import { svgEl } from "explore/dom.js";
import { fmt } from "explore/format.js";

const BEAM_COL = 130;
const BEAM_ROW = 34;

// Styles are attributes (not CSS classes) so that the PNG export, which draws the SVG alone, keeps them.
const BEAM_STYLE = {
  alive: { fill: "#e3edf7", stroke: "#2166ac", dash: "" },
  pruned: { fill: "#f2f2f2", stroke: "#b0b0b0", dash: "3 2" },
  finished: { fill: "#fdeee3", stroke: "#e66101", dash: "" },
};

export function beamSvg(answer) {
  const byStep = new Map();
  for (const node of answer.nodes) {
    if (!byStep.has(node.step)) byStep.set(node.step, []);
    byStep.get(node.step).push(node);
  }
  const place = new Map();
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  for (const s of steps) {
    const nodes = byStep.get(s).sort((a, b) => (place.get(a.parent)?.y ?? 0) - (place.get(b.parent)?.y ?? 0) || b.score - a.score);
    nodes.forEach((n, i) => place.set(n.id, { x: 20 + (s - steps[0]) * BEAM_COL, y: 36 + i * BEAM_ROW }));
  }
  const best = bestPath(answer);
  const height = 52 + Math.max(...steps.map((s) => byStep.get(s).length)) * BEAM_ROW;
  const svg = svgEl("svg", { class: "beam-tree", width: 40 + steps.length * BEAM_COL, height,
    xmlns: "http://www.w3.org/2000/svg", "font-family": "monospace", "font-size": 11 });
  svg.append(svgEl("rect", { width: "100%", height: "100%", fill: "#fff" }));
  steps.forEach((s, i) => svg.append(svgEl("text", { x: 20 + i * BEAM_COL + 50, y: 12, "text-anchor": "middle",
    fill: "#6b6b70", text: s === 0 ? "start" : `step ${s}` })));
  for (const node of answer.nodes) {
    const from = place.get(node.parent);
    const to = place.get(node.id);
    if (!from) continue;
    const onBest = best.has(node.id);
    svg.append(svgEl("path", {
      d: `M${from.x + 100},${from.y} C${to.x - 15},${from.y} ${from.x + 115},${to.y} ${to.x},${to.y}`,
      fill: "none", stroke: onBest ? "#e66101" : node.status === "pruned" ? "#c8c8c8" : "#8a8a8a",
      "stroke-width": onBest ? 2.5 : 1.2, "stroke-dasharray": node.status === "pruned" ? "3 3" : "",
    }));
  }
  for (const node of answer.nodes) svg.append(beamNode(node, place.get(node.id), best.has(node.id)));
  return svg;
}

function beamNode(node, { x, y }, isBest) {
  const style = BEAM_STYLE[node.status] ?? BEAM_STYLE.alive;
  const g = svgEl("g", { transform: `translate(${x},${y})`, "data-testid": "beam-node", "data-step": node.step,
    "data-status": node.status, "data-id": node.id, "data-token": node.token });
  g.append(svgEl("title", { text: `${node.token} (id ${node.token_id}): log p ${node.logp}, score ${node.score}, ${node.status}` }),
    svgEl("rect", { x: 0, y: -13, width: 100, height: 26, rx: 5, fill: style.fill, stroke: style.stroke,
      "stroke-width": isBest || node.status === "finished" ? 2.5 : 1, "stroke-dasharray": style.dash }),
    svgEl("text", { x: 6, y: -1, fill: node.status === "pruned" ? "#909090" : "#1d1d1f", text: node.token }),
    svgEl("text", { x: 6, y: 10, fill: "#6b6b70", "font-size": 10, text: `${node.status === "finished" ? "✓ " : ""}${fmt(node.score)}` }));
  return g;
}

/** The nodes on the best hypothesis (the search's own pick, else the best-scored finished one), back to the root. */
function bestPath(answer) {
  const byId = new Map(answer.nodes.map((n) => [n.id, n]));
  const ends = answer.nodes.filter((n) => n.status === "finished");
  const pool = ends.length ? ends : answer.nodes.filter((n) => n.status === "alive");
  let node = byId.get(answer.best_node) ?? pool.reduce((a, b) => (b.score > a.score ? b : a), pool[0]);
  const path = new Set();
  while (node) {
    path.add(node.id);
    node = byId.get(node.parent);
  }
  return path;
}
