// The diff of two refs: the summary first (`summary=true&fields=true`: the counts and which
// field paths changed in how many cases, over the whole diff), as bars that filter the diff by
// a field path (`&path=`, in the page's address); then the changed, added and removed cases, a
// page of the API's answer at a time ("Show more", under the list it fills). Each changed case
// names the fields it changed; opened ("Expand all" opens every one shown), its changes side by
// side with the changed words marked (long strings as a line diff, words marked in the changed
// lines), and links to both sides of the case.

import { get, paths } from "../api.js";
import { field, fmtInt, h, replace, svg, uid } from "../dom.js";
import { lineDiff, sideBySide } from "../linediff.js";
import { markedSides, wordDiff } from "../worddiff.js";
import { errorBox, navigate } from "../app.js";

const PAGE = 100; // entries a page asks for, across the three lists

function isLong(value) {
  return typeof value === "string" && (value.includes("\n") || value.length > 100);
}

function sideValue(change, side) {
  if (!(side in change)) return h("pre", { class: `${side} absent` }, "(absent)");
  const value = change[side];
  return h("pre", { class: side }, typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

// A changed line beside the line it replaced: each with its changed words marked.
function markedLine(before, after, side) {
  const keep = side === "left" ? "-" : "+";
  const tag = side === "left" ? "del" : "ins";
  return wordDiff(before, after).filter((o) => o.op === " " || o.op === keep).map((o) => (o.op === keep ? h(tag, null, o.text) : o.text));
}

function lineDiffTable(before, after) {
  const rows = sideBySide(lineDiff(before, after));
  const cell = (c, kind, other, side) => {
    if (c === null) return [h("td", { class: "ln empty" }), h("td", { class: "empty" })];
    const text = c.op !== " " && other ? markedLine(side === "left" ? c.text : other.text, side === "left" ? other.text : c.text, side) : c.text;
    return [h("td", { class: "ln" }, String(c.n)), h("td", { class: c.op === " " ? null : kind }, text)];
  };
  return h("table", { class: "linediff", "aria-label": "line diff, base on the left, candidate on the right" },
    h("colgroup", null, h("col", { class: "ln" }), h("col"), h("col", { class: "ln" }), h("col")),
    h("thead", { class: "visually-hidden" }, h("tr", null, h("th", { scope: "col" }, "base line"), h("th", { scope: "col" }, "base"), h("th", { scope: "col" }, "candidate line"), h("th", { scope: "col" }, "candidate"))),
    h("tbody", null, rows.map((r) => h("tr", null, cell(r.left, "del", r.right, "left"), cell(r.right, "add", r.left, "right")))));
}

export function changeView(change) {
  const both = "before" in change && "after" in change;
  const kind = !("before" in change) ? "added" : !("after" in change) ? "removed" : "changed";
  const strings = both && typeof change.before === "string" && typeof change.after === "string";
  const [left, right] = strings && !isLong(change.before) && !isLong(change.after)
    ? markedSides(change.before, change.after)
    : [sideValue(change, "before"), sideValue(change, "after")];
  const body = strings && (isLong(change.before) || isLong(change.after))
    ? lineDiffTable(change.before, change.after)
    : h("div", { class: "sbs" },
        h("div", null, h("div", { class: "side-label" }, "base"), left),
        h("div", null, h("div", { class: "side-label" }, "candidate"), right));
  return h("div", { class: "change", "data-path": change.path }, h("div", null, h("span", { class: "path" }, change.path || "/"), " ", h("span", { class: "badge" }, kind)), body);
}

function briefItem(b, id, ref) {
  return h("li", { "data-case": b.id }, h("a", { href: paths.kase(id, ref, b.id) }, b.id), b.user ? h("span", { class: "muted" }, ` — ${b.user}`) : null);
}

// A field path of a change (its pointer with list positions as `*`), as the API counts them.
function fieldPathOf(pointer) {
  return (pointer || "/").split("/").map((t) => (/^\d+$/.test(t) ? "*" : t)).join("/") || "/";
}

function changedItem(c, d, open) {
  const fields = [...new Set(c.changes.map((ch) => fieldPathOf(ch.path)))];
  const what = c.oversized ? "too large to show here" : fields.length <= 3 ? fields.join(", ") : `${fields.slice(0, 3).join(", ")} and ${fields.length - 3} more`;
  return h("details", { class: "panel", open, "data-case": c.id },
    h("summary", null, h("strong", { class: "id" }, c.id), " ", h("span", { class: "mono muted" }, what), " ",
      h("a", { href: paths.kase(d.base.id, d.base.version, c.id) }, `base`), " · ",
      h("a", { href: paths.kase(d.candidate.id, d.candidate.version, c.id) }, `candidate`)),
    c.changes.map(changeView));
}

// One list of the diff (changed, added or removed), filled a page of the API's answer at a
// time: its count is the summary's, and "shown" says how much of it the pages read so far hold.
// `tools` go above the list; `slot` under it is where "Show more" sits while this list fills.
function section(kind, label, total, tools) {
  const list = kind === "changed" ? h("div") : h("ul");
  const shown = h("p", { class: "muted", "data-shown": kind });
  const slot = h("div", { class: "pager" });
  const empty = h("p", { class: "muted" }, `No ${label.toLowerCase()} cases.`);
  let n = 0;
  const el = h("section", { "aria-labelledby": `${kind}-h` }, h("h2", { id: `${kind}-h` }, `${label} (${fmtInt(total)})`), total ? [tools, list, shown, slot] : empty);
  const add = (items) => {
    for (const item of items) list.append(item);
    n += items.length;
    shown.textContent = n < total ? `${fmtInt(n)} of ${fmtInt(total)} shown` : "";
    shown.hidden = n >= total;
  };
  add([]);
  return { el, add, slot, list, full: () => n >= total };
}

function card(kind, n) {
  return h("div", { class: `card ${kind}`, "data-count": kind }, h("div", { class: "n" }, fmtInt(n)), h("div", null, kind));
}

// The field paths changed, one bar each (cases that changed there), each a link filtering the
// diff by that path; the current filter marked. Counts not yet complete (a large diff on AWS
// is counted 50,000 changed cases a request) are shown as "at least" (≥).
function fieldBars(fields, changed, hrefOf, current) {
  if (!fields) return null;
  const partial = !fields.complete;
  if (!fields.paths.length && !partial) return h("p", { class: "muted" }, "No field of a case changed.");
  const max = Math.max(1, ...fields.paths.map((f) => f.cases));
  const rows = fields.paths.map((f) =>
    h("tr", { "data-field-path": f.path, class: f.path === current ? "current" : null },
      h("th", { scope: "row" }, h("a", { href: hrefOf(f.path), class: "mono", "aria-current": f.path === current ? "true" : null }, f.path)),
      h("td", { class: "num", title: partial ? `at least ${fmtInt(f.cases)}` : null }, partial ? `≥ ${fmtInt(f.cases)}` : fmtInt(f.cases)),
      h("td", { class: "bar-cell", "aria-hidden": "true" },
        svg("svg", { viewBox: "0 0 100 10", preserveAspectRatio: "none", class: "bar" }, svg("rect", { x: 0, y: 0, height: 10, width: Math.max(0.5, (100 * f.cases) / max), class: "chart-bar" })))));
  const note = [];
  if (partial) note.push(`Counted so far over the first ${fmtInt(fields.counted)} of ${fmtInt(changed)} changed cases: each count is at least the number shown. Counting the rest…`);
  if (fields.other_paths) note.push(`${fmtInt(fields.other_paths)} more field paths, each changed in fewer cases, are not shown.`);
  return [
    h("div", { class: "scroll-x" }, h("table", { class: "fields", "aria-label": "Fields changed" },
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "field path"), h("th", { scope: "col" }, "cases"), h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "share")))),
      h("tbody", null, rows))),
    note.length ? h("p", { class: "muted", role: "status", "data-fields-note": "" }, note.join(" ")) : null,
  ];
}

// Asks for the summary again while its field counts are not complete (each answer counts on
// from where the one before stopped), redrawing the bars after each answer.
async function countOn(ctx, { id, q, path, summary, box, hrefOf }) {
  let fields = summary.fields;
  while (fields && !fields.complete) {
    const next = await get(`${paths.dataset(id)}/diff`, { ...q, summary: true, fields: true, path });
    if (!ctx.alive()) return;
    if (next.fields.counted <= fields.counted) return; // no progress: leave the note as it is
    fields = next.fields;
    replace(box, fieldBars(fields, summary.summary.changed, hrefOf, path));
  }
}

function compareForm(id, labels, base, candidate, candidateId) {
  // Any ref: a label (suggested), `latest`, a version tag or a content digest.
  const refs = h("datalist", { id: uid("refs") }, labels.map((v) => h("option", { value: v })));
  const ref = (name, value) => h("input", { name, value: value || "", list: refs.id, required: true, autocomplete: "off", spellcheck: "false" });
  const form = h("form", { class: "toolbar", "aria-label": "Versions to compare", onsubmit: (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const other = String(f.get("candidate_id") || "").trim();
    navigate(paths.diff(id, String(f.get("base")).trim(), String(f.get("candidate")).trim()) + (other && other !== id ? `&candidate_id=${encodeURIComponent(other)}` : ""));
  } },
    refs,
    field("Base", ref("base", base || labels[1] || labels[0]), "a label, tag or digest"),
    field("Candidate", ref("candidate", candidate || labels[0])),
    field("Candidate dataset", h("input", { name: "candidate_id", value: candidateId || "", placeholder: id, autocomplete: "off" }), "another dataset of yours (optional)"),
    h("button", { type: "submit" }, "Compare"));
  return form;
}

// The filter by field path: a text box suggesting the paths the summary names.
function pathFilter(fields, current, hrefOf) {
  const list = h("datalist", { id: uid("fields") }, (fields ? fields.paths : []).map((f) => h("option", { value: f.path })));
  const input = h("input", { type: "text", value: current || "", list: list.id, placeholder: "/expectations/ground_truth", autocomplete: "off", spellcheck: "false", pattern: "/.*" });
  const form = h("form", { class: "toolbar", role: "search", "aria-label": "Filter by field path", onsubmit: (e) => {
    e.preventDefault();
    navigate(hrefOf(input.value.trim() || null));
  } },
    list,
    field("Field path", input, "a change at this path or under it; * is any list position"),
    h("button", { type: "submit" }, "Filter"),
    current ? h("a", { class: "button secondary", href: hrefOf(null) }, "Show every change") : null);
  return form;
}

export async function diffRoute(ctx) {
  const [id] = ctx.params;
  const base = ctx.query.get("base");
  const candidate = ctx.query.get("candidate");
  const candidateId = ctx.query.get("candidate_id") || undefined;
  const path = ctx.query.get("path") || undefined;
  ctx.title(`diff ${id} ${base || ""}…${candidate || ""}`);
  const versions = await get(`${paths.dataset(id)}/versions`, { limit: 200 }).catch(() => ({ items: [] }));
  if (!ctx.alive()) return;
  const labels = versions.items.map((v) => v.version);
  const head = [
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / diff"),
    h("h1", { tabindex: "-1" }, base && candidate ? `${id}: ${base} → ${candidateId ? `${candidateId}@` : ""}${candidate}` : `${id}: compare versions`),
    compareForm(id, labels, base, candidate, candidateId),
  ];
  if (!base || !candidate) {
    replace(ctx.main, head, h("p", null, "Pick a base and a candidate."));
    ctx.ready();
    return;
  }
  const q = { base, candidate, candidate_id: candidateId };
  const hrefOf = (p) => paths.diff(id, base, candidate) + (candidateId ? `&candidate_id=${encodeURIComponent(candidateId)}` : "") + (p ? `&path=${encodeURIComponent(p)}` : "");
  let summary;
  try {
    summary = await get(`${paths.dataset(id)}/diff`, { ...q, summary: true, fields: true, path });
  } catch (err) {
    if (!ctx.alive()) return;
    replace(ctx.main, head, errorBox(err)); // the form stays, to fix the refs
    ctx.ready();
    return;
  }
  if (!ctx.alive()) return;
  const s = summary.summary;
  const detail = h("div", null, h("p", { class: "muted", role: "status" }, "Reading the changed cases…"));
  const meta = summary.meta;
  const fieldsBox = h("div", { "data-fields": "" }, fieldBars(summary.fields, s.changed, hrefOf, path));
  replace(
    ctx.main,
    head,
    h("p", null,
      h("a", { href: paths.version(summary.base.id, summary.base.version) }, `${summary.base.id}@${summary.base.version}`), " ", h("span", { class: "mono muted" }, summary.base.content_digest.slice(0, 19)),
      " → ",
      h("a", { href: paths.version(summary.candidate.id, summary.candidate.version) }, `${summary.candidate.id}@${summary.candidate.version}`), " ", h("span", { class: "mono muted" }, summary.candidate.content_digest.slice(0, 19))),
    h("section", { "aria-labelledby": "summary-h" }, h("h2", { id: "summary-h" }, "Summary"),
      h("div", { class: "cards" }, card("added", s.added), card("removed", s.removed), card("changed", s.changed), card("unchanged", s.unchanged)),
      meta.case_order_changed ? h("p", null, "The cases both versions hold come in another order.") : null),
    s.changed ? h("section", { "aria-labelledby": "fields-h" }, h("h2", { id: "fields-h" }, "Fields changed"),
      h("p", { class: "muted" }, "How many changed cases changed each field; pick one to see only those changes."),
      fieldsBox,
      pathFilter(summary.fields, path, hrefOf)) : null,
    h("section", { "aria-labelledby": "meta-h" }, h("h2", { id: "meta-h" }, "Version metadata"),
      meta.changes.length ? meta.changes.map(changeView) : h("p", { class: "muted" }, "Description, tags and shared files are the same.")),
    detail,
  );
  ctx.ready();
  const counting = countOn(ctx, { id, q, path, summary, box: fieldsBox, hrefOf }).catch((err) => { if (ctx.alive()) replace(fieldsBox, errorBox(err)); });
  await drawEntries(ctx, { id, q, path, s, summary, detail });
  await counting;
}

// The entries come a page at a time (changed, then added, then removed), the next page when
// asked for: the cursor pins both versions, so the pages are of one diff. With a path filter
// only the changed cases with a change there come, each with only those changes.
async function drawEntries(ctx, { id, q, path, s, summary, detail }) {
  const matching = path ? summary.path_matches : s.changed;
  const expand = h("button", { type: "button", class: "secondary", "data-expand": "" }, "Expand all");
  const collapse = h("button", { type: "button", class: "secondary", "data-collapse": "" }, "Collapse all");
  const tools = h("div", { class: "toolbar" }, expand, collapse);
  const lists = {
    changed: section("changed", path ? `Changed at ${path}` : "Changed", matching, tools),
    added: section("added", "Added", path ? 0 : s.added),
    removed: section("removed", "Removed", path ? 0 : s.removed),
  };
  const toggleAll = (open) => lists.changed.list.querySelectorAll("details[data-case]").forEach((d) => { d.open = open; });
  expand.addEventListener("click", () => toggleAll(true));
  collapse.addEventListener("click", () => toggleAll(false));
  const more = h("button", { type: "button", class: "secondary", "data-more": "" });
  let loaded = 0;
  const total = path ? matching : s.changed + s.added + s.removed;
  const load = async (cursor) => {
    more.disabled = true;
    const page = await get(`${paths.dataset(id)}/diff`, { ...q, path, limit: PAGE, cursor });
    if (!ctx.alive()) return;
    const open = matching <= 10;
    lists.changed.add(page.changed.map((c) => changedItem(c, page, open)));
    lists.added.add(page.added.map((b) => briefItem(b, page.candidate.id, page.candidate.version)));
    lists.removed.add(page.removed.map((b) => briefItem(b, page.base.id, page.base.version)));
    loaded += page.changed.length + page.added.length + page.removed.length;
    more.hidden = !page.next_cursor;
    more.disabled = false;
    more.textContent = `Show ${fmtInt(Math.min(PAGE, total - loaded))} more of ${fmtInt(total - loaded)}`;
    more.onclick = () => load(page.next_cursor).catch((err) => { if (ctx.alive()) replace(detail, errorBox(err)); });
    // "Show more" sits under the list the next page fills.
    const filling = ["changed", "added", "removed"].find((k) => !lists[k].full());
    if (filling) lists[filling].slot.append(more);
  };
  try {
    await load(undefined);
    if (!ctx.alive()) return;
    replace(detail, lists.changed.el, path ? null : [lists.added.el, lists.removed.el]);
  } catch (err) {
    if (ctx.alive()) replace(detail, errorBox(err));
  }
}
