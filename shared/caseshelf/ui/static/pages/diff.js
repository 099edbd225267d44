// The diff of two refs: the summary counts first (`summary=true`, no case read), then the
// changed, added and removed cases, a page of the API's answer at a time ("Show more"); each
// changed case's field changes side by side, long strings as a line diff, and links to both
// sides of the case.

import { get, paths } from "../api.js";
import { field, fmtInt, h, replace, uid } from "../dom.js";
import { jsonBlock } from "../highlight.js";
import { lineDiff, sideBySide } from "../linediff.js";
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

function lineDiffTable(before, after) {
  const rows = sideBySide(lineDiff(before, after));
  const cell = (c, kind) =>
    c === null
      ? [h("td", { class: "ln empty" }), h("td", { class: "empty" })]
      : [h("td", { class: "ln" }, String(c.n)), h("td", { class: c.op === " " ? null : kind }, c.text)];
  return h("table", { class: "linediff", "aria-label": "line diff, base on the left, candidate on the right" },
    h("colgroup", null, h("col", { class: "ln" }), h("col"), h("col", { class: "ln" }), h("col")),
    h("thead", { class: "visually-hidden" }, h("tr", null, h("th", { scope: "col" }, "base line"), h("th", { scope: "col" }, "base"), h("th", { scope: "col" }, "candidate line"), h("th", { scope: "col" }, "candidate"))),
    h("tbody", null, rows.map((r) => h("tr", null, cell(r.left, "del"), cell(r.right, "add")))));
}

export function changeView(change) {
  const both = "before" in change && "after" in change;
  const kind = !("before" in change) ? "added" : !("after" in change) ? "removed" : "changed";
  const body = both && (isLong(change.before) || isLong(change.after)) && typeof change.before === "string" && typeof change.after === "string"
    ? lineDiffTable(change.before, change.after)
    : h("div", { class: "sbs" },
        h("div", null, h("div", { class: "side-label" }, "base"), sideValue(change, "before")),
        h("div", null, h("div", { class: "side-label" }, "candidate"), sideValue(change, "after")));
  return h("div", { class: "change", "data-path": change.path }, h("div", null, h("span", { class: "path" }, change.path || "/"), " ", h("span", { class: "badge" }, kind)), body);
}

function briefItem(b, id, ref) {
  return h("li", { "data-case": b.id }, h("a", { href: paths.kase(id, ref, b.id) }, b.id), b.user ? h("span", { class: "muted" }, ` — ${b.user}`) : null);
}

function changedItem(c, d, open) {
  return h("details", { class: "panel", open, "data-case": c.id },
    h("summary", null, h("strong", null, c.id), ` — ${c.changes.length} field change${c.changes.length === 1 ? "" : "s"} `,
      h("a", { href: paths.kase(d.base.id, d.base.version, c.id) }, `base`), " · ",
      h("a", { href: paths.kase(d.candidate.id, d.candidate.version, c.id) }, `candidate`)),
    c.changes.map(changeView));
}

// One list of the diff (changed, added or removed), filled a page of the API's answer at a
// time: its count is the summary's, and "shown" says how much of it the pages read so far hold.
function section(kind, label, total) {
  const list = kind === "changed" ? h("div") : h("ul");
  const shown = h("p", { class: "muted", "data-shown": kind });
  const empty = h("p", { class: "muted" }, `No ${label.toLowerCase()} cases.`);
  let n = 0;
  const el = h("section", { "aria-labelledby": `${kind}-h` }, h("h2", { id: `${kind}-h` }, `${label} (${fmtInt(total)})`), total ? [list, shown] : empty);
  const add = (items) => {
    for (const item of items) list.append(item);
    n += items.length;
    shown.textContent = n < total ? `${fmtInt(n)} of ${fmtInt(total)} shown` : "";
    shown.hidden = n >= total;
  };
  add([]);
  return { el, add };
}

function card(kind, n) {
  return h("div", { class: `card ${kind}`, "data-count": kind }, h("div", { class: "n" }, fmtInt(n)), h("div", null, kind));
}

export async function diffRoute(ctx) {
  const [id] = ctx.params;
  const base = ctx.query.get("base");
  const candidate = ctx.query.get("candidate");
  const candidateId = ctx.query.get("candidate_id") || undefined;
  ctx.title(`diff ${id} ${base || ""}…${candidate || ""}`);
  const versions = await get(`${paths.dataset(id)}/versions`, { limit: 200 }).catch(() => ({ items: [] }));
  if (!ctx.alive()) return;
  const labels = versions.items.map((v) => v.version);
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

  const head = [
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / diff"),
    h("h1", { tabindex: "-1" }, base && candidate ? `${id}: ${base} → ${candidateId ? `${candidateId}@` : ""}${candidate}` : `${id}: compare versions`),
    form,
  ];
  if (!base || !candidate) {
    replace(ctx.main, head, h("p", null, "Pick a base and a candidate."));
    ctx.ready();
    return;
  }
  const q = { base, candidate, candidate_id: candidateId };
  let summary;
  try {
    summary = await get(`${paths.dataset(id)}/diff`, { ...q, summary: true });
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
    h("section", { "aria-labelledby": "meta-h" }, h("h2", { id: "meta-h" }, "Version metadata"),
      meta.changes.length ? meta.changes.map(changeView) : h("p", { class: "muted" }, "Description, tags and shared files are the same.")),
    detail,
  );
  ctx.ready();

  // The entries come a page at a time (changed, then added, then removed), the next page when
  // asked for: the cursor pins both versions, so the pages are of one diff.
  const lists = {
    changed: section("changed", "Changed", s.changed),
    added: section("added", "Added", s.added),
    removed: section("removed", "Removed", s.removed),
  };
  const more = h("button", { type: "button", class: "secondary", "data-more": "" });
  const raw = h("details", null, h("summary", null, "The diff as the API answers it (first page)"), h("p", { class: "muted" }, `GET /datasets/${id}/diff?base=${base}&candidate=${candidate}`));
  let loaded = 0;
  const total = s.changed + s.added + s.removed;
  const load = async (cursor) => {
    more.disabled = true;
    const page = await get(`${paths.dataset(id)}/diff`, { ...q, limit: PAGE, cursor });
    if (!ctx.alive()) return;
    if (!cursor) raw.append(page.changed.length <= 200 ? jsonBlock(page) : h("p", { class: "muted" }, "(too long to show here)"));
    const open = s.changed <= 10;
    lists.changed.add(page.changed.map((c) => changedItem(c, page, open)));
    lists.added.add(page.added.map((b) => briefItem(b, page.candidate.id, page.candidate.version)));
    lists.removed.add(page.removed.map((b) => briefItem(b, page.base.id, page.base.version)));
    loaded += page.changed.length + page.added.length + page.removed.length;
    more.hidden = !page.next_cursor;
    more.disabled = false;
    more.textContent = `Show ${fmtInt(Math.min(PAGE, total - loaded))} more of ${fmtInt(total - loaded)}`;
    more.onclick = () => load(page.next_cursor).catch((err) => { if (ctx.alive()) replace(detail, errorBox(err)); });
  };
  try {
    await load(undefined);
    if (!ctx.alive()) return;
    replace(detail, lists.changed.el, lists.added.el, lists.removed.el, more, raw);
  } catch (err) {
    if (ctx.alive()) replace(detail, errorBox(err));
  }
}
