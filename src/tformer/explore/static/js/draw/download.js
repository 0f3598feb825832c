// Downloads: a PNG of a canvas (or of an SVG drawn onto one) and the JSON of the numbers shown, as two buttons.
// Knows nothing about the server, the page's state or its views.

import { el } from "explore/dom.js";

function download(blob, filename) {
  const a = el("a", { href: URL.createObjectURL(blob), download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

/** PNG of a canvas, or of an SVG drawn onto a canvas first. */
async function savePng(node, filename) {
  if (node instanceof HTMLCanvasElement) {
    node.toBlob((blob) => download(blob, filename), "image/png");
    return;
  }
  const xml = new XMLSerializer().serializeToString(node);
  const image = new Image();
  image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(xml)}`;
  await image.decode();
  const canvas = el("canvas", { width: node.clientWidth || image.width, height: node.clientHeight || image.height });
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(image, 0, 0);
  canvas.toBlob((blob) => download(blob, filename), "image/png");
}

export const pngButton = (getNode, filename) =>
  el("button", { type: "button", class: "small", title: "download this panel as PNG", on: { click: () => savePng(getNode(), filename) } }, "PNG");

export const jsonButton = (getData, filename) =>
  el("button", { type: "button", class: "small", title: "download these numbers as JSON", on: {
    click: () => download(new Blob([JSON.stringify(getData(), null, 1)], { type: "application/json" }), filename),
  } }, "JSON");
