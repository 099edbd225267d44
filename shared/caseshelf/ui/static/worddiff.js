// A word diff of two strings for the diff page: the strings cut into words, spaces and
// punctuation, the longest common subsequence of those tokens (after trimming the common head
// and tail, what most edits leave untouched), with a bound on the work so a rewrite of a long
// text degrades to "all removed, all added" instead of hanging. Then shown as the base text
// with its removed words marked and the candidate text with its added words marked.

import { h } from "./dom.js";

const MAX_CELLS = 2_000_000;

export function tokens(text) {
  return String(text).match(/\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) || [];
}

// [{op: " " | "-" | "+", text}], adjacent tokens of one op joined.
export function wordDiff(before, after) {
  const a = tokens(before);
  const b = tokens(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const ops = a.slice(0, head).map((text) => ({ op: " ", text }));
  ops.push(...middle(a.slice(head, a.length - tail), b.slice(head, b.length - tail)));
  ops.push(...a.slice(a.length - tail).map((text) => ({ op: " ", text })));
  return joined(ops);
}

function middle(a, b) {
  const n = a.length;
  const m = b.length;
  if (n * m > MAX_CELLS || n === 0 || m === 0) {
    return [...a.map((text) => ({ op: "-", text })), ...b.map((text) => ({ op: "+", text }))];
  }
  const lcs = new Array(n + 1);
  for (let i = 0; i <= n; i += 1) lcs[i] = new Uint32Array(m + 1);
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ op: " ", text: a[i] });
      i += 1;
      j += 1;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push({ op: "-", text: a[i++] });
    } else {
      out.push({ op: "+", text: b[j++] });
    }
  }
  while (i < n) out.push({ op: "-", text: a[i++] });
  while (j < m) out.push({ op: "+", text: b[j++] });
  return out;
}

function joined(ops) {
  const out = [];
  for (const o of ops) {
    const last = out[out.length - 1];
    if (last && last.op === o.op) last.text += o.text;
    else out.push({ ...o });
  }
  return out;
}

// The two sides of a word diff as text with <del>/<ins> marks: [base element, candidate element].
export function markedSides(before, after) {
  const ops = wordDiff(before, after);
  const side = (keep, mark, tag) =>
    h("pre", { class: `words ${tag === "del" ? "before" : "after"}` },
      ops.filter((o) => o.op === " " || o.op === keep).map((o) => (o.op === mark ? h(tag, null, o.text) : o.text)));
  return [side("-", "-", "del"), side("+", "+", "ins")];
}
