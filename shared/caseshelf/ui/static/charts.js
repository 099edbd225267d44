// Pictures of a version as inline SVG, built with DOM calls: horizontal bars (cases per tag)
// and histograms (input lengths, file sizes). Every picture has a title and a description for
// screen readers, and its numbers are also in a table under it.

import { fmtInt, h, svg } from "./dom.js";

const W = 520;

function frame(title, desc, height, body) {
  const titleId = `t-${Math.random().toString(36).slice(2)}`;
  const descId = `${titleId}-d`;
  return svg(
    "svg",
    { viewBox: `0 0 ${W} ${height}`, width: "100%", role: "img", "aria-labelledby": `${titleId} ${descId}`, class: "chart" },
    svg("title", { id: titleId }, title),
    svg("desc", { id: descId }, desc),
    body,
  );
}

// [{label, value}] as horizontal bars, largest first.
export function barChart(title, rows, { unit = "cases" } = {}) {
  const shown = rows.slice(0, 20);
  const max = Math.max(1, ...shown.map((r) => r.value));
  const rowH = 26;
  const labelW = 190;
  const height = Math.max(rowH, shown.length * rowH) + 8;
  const bars = shown.map((r, i) => {
    const y = i * rowH + 4;
    const w = Math.max(1, ((W - labelW - 80) * r.value) / max);
    return svg(
      "g",
      null,
      svg("text", { x: labelW - 6, y: y + 18, "text-anchor": "end", class: "chart-label" }, r.label.length > 20 ? `${r.label.slice(0, 19)}…` : r.label),
      svg("rect", { x: labelW, y: y + 2, width: w, height: rowH - 6, class: "chart-bar" }, svg("title", null, `${r.label}: ${fmtInt(r.value)} ${unit}`)),
      svg("text", { x: labelW + w + 6, y: y + 18, class: "chart-value" }, fmtInt(r.value)),
    );
  });
  const desc = shown.map((r) => `${r.label} ${r.value}`).join(", ");
  return frame(title, desc || "no data", height, bars);
}

// Buckets [{label, value}] as vertical bars (a histogram).
export function histogram(title, buckets, { unit = "cases" } = {}) {
  const height = 210;
  const plotH = 140;
  const max = Math.max(1, ...buckets.map((b) => b.value));
  const bw = (W - 40) / Math.max(1, buckets.length);
  const bars = buckets.map((b, i) => {
    const bh = (plotH * b.value) / max;
    const x = 30 + i * bw;
    return svg(
      "g",
      null,
      svg("rect", { x: x + 1, y: 20 + plotH - bh, width: Math.max(1, bw - 2), height: Math.max(0, bh), class: "chart-bar" }, svg("title", null, `${b.label}: ${fmtInt(b.value)} ${unit}`)),
      svg("text", { x: x + bw / 2, y: 20 + plotH + 18, "text-anchor": "middle", class: "chart-tick" }, b.label),
      b.value ? svg("text", { x: x + bw / 2, y: 16 + plotH - bh, "text-anchor": "middle", class: "chart-value" }, fmtInt(b.value)) : null,
    );
  });
  const axis = svg("line", { x1: 30, y1: 20 + plotH, x2: W - 10, y2: 20 + plotH, class: "chart-axis" });
  const desc = buckets.map((b) => `${b.label}: ${b.value}`).join(", ");
  return frame(title, desc, height, [axis, ...bars]);
}

export function dataTable(caption, headers, rows) {
  return h(
    "details",
    { class: "chart-data" },
    h("summary", null, `${caption}: the numbers`),
    h(
      "table",
      null,
      h("thead", null, h("tr", null, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", null, rows.map((r) => h("tr", null, r.map((c) => h("td", null, c))))),
    ),
  );
}
