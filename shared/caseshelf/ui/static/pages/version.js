// A version: its metadata, its downloads and exports, pictures of it (cases per tag, input
// lengths, file sizes) and its cases a page at a time (searchable by id, tag and text).
//
// The page asks for the version and one page of cases first and is usable then; the pictures
// come after, from the version's numbers over every case (`GET …/stats`). A search is the
// cases route's `q`: the API searches the whole rest of the version from its cursor (from the
// version's search index) and answers a page of matches; where it stops short (a version too
// large for an index: a bounded scan), the page asks again until it has a page of matches or
// has searched every case, saying how far it got.

import { get, paths } from "../api.js";
import { barChart, dataTable, histogram } from "../charts.js";
import { field, fmtBytes, fmtInt, fmtTime, h, replace, shortDigest, uid } from "../dom.js";
import { errorBox } from "../app.js";
import { provenance } from "./dataset.js";
import { fileViewer } from "./case.js";
import { downloadMenu } from "./export.js";

const PAGE = 50;
const SCANS_PER_CLICK = 40; // answers asked for per "Search" or "Search further" at most

export function userText(inputs) {
  const u = inputs && inputs.user;
  if (typeof u === "string") return u;
  if (Array.isArray(u)) return u.map((x) => (typeof x === "string" ? x : JSON.stringify(x))).join(" | ");
  if (u && typeof u === "object" && u.ref) return `(file ${u.ref})`;
  return "";
}

function short(text, n = 140) {
  const t = String(text).replace(/\s+/g, " ").trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function answerText(expectations) {
  const gt = expectations && expectations.ground_truth;
  if (gt === undefined || gt === null) return "";
  return typeof gt === "string" ? gt : JSON.stringify(gt);
}

export function versionMeta(v) {
  return h(
    "dl",
    { class: "meta" },
    h("dt", null, "content digest"), h("dd", { class: "mono" }, v.content_digest),
    h("dt", null, "cases"), h("dd", { "data-field": "case_count" }, fmtInt(v.case_count)),
    h("dt", null, "size"), h("dd", null, fmtBytes(v.bytes)),
    h("dt", null, "tags"), h("dd", null, v.tags.length ? v.tags.map((t) => h("span", { class: "badge" }, t)) : "—"),
    h("dt", null, "version tags"), h("dd", null, v.version_tags.length ? v.version_tags.map((t) => h("span", { class: "badge" }, t)) : "—"),
    h("dt", null, "state"), h("dd", null, v.deleted_at ? h("span", { class: "badge deleted" }, `deleted ${fmtTime(v.deleted_at)} by ${v.deleted_by}`) : h("span", { class: "badge live" }, "live")),
    h("dt", null, "created"), h("dd", null, `${fmtTime(v.created_at)} by ${v.created_by}`),
    h("dt", null, "owner"), h("dd", null, v.owner),
    h("dt", null, "produced by"), h("dd", null, provenance(v.produced_by)),
  );
}

export async function versionRoute(ctx) {
  const [id, ref] = ctx.params;
  const includeDeleted = ctx.query.get("include_deleted") === "true";
  const q = { include_deleted: includeDeleted || undefined };
  ctx.title(`${id}@${ref}`);
  const [v, first] = await Promise.all([
    get(paths.version(id, ref), q),
    get(`${paths.version(id, ref)}/cases`, { ...q, limit: PAGE }),
  ]);
  if (!ctx.alive()) return;
  const base = paths.version(id, v.version);

  const tbody = h("tbody");
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
  const pager = h("div", { class: "pager" });
  const errors = h("div");

  function caseRows(cases) {
    replace(
      tbody,
      cases.map((c) =>
        h("tr", { "data-case": c.id },
          h("td", { class: "id" }, h("a", { href: paths.kase(id, v.version, c.id) + (includeDeleted ? "?include_deleted=true" : "") }, c.id)),
          h("td", null, short(userText(c.inputs))),
          h("td", null, short(answerText(c.expectations), 60)),
          h("td", null, (c.tags || []).map((t) => h("span", { class: "badge" }, t)))),
      ),
    );
    if (!cases.length) replace(tbody, h("tr", null, h("td", { colspan: "4", class: "muted" }, "No cases.")));
  }

  function button(label, onclick, disabled) {
    return h("button", { type: "button", class: "secondary", onclick, disabled }, label);
  }

  // Browsing: the API's cursors, a stack of them for "previous".
  const stack = [null];
  async function browse(cursor, index) {
    const page = cursor === null && index === 0 ? first : await get(`${base}/cases`, { ...q, limit: PAGE, cursor });
    caseRows(page.items);
    stack[index + 1] = page.next_cursor;
    const from = index * PAGE + 1;
    status.textContent = page.items.length
      ? `Cases ${fmtInt(from)}–${fmtInt(from + page.items.length - 1)} of ${fmtInt(v.case_count)}`
      : `0 of ${fmtInt(v.case_count)} cases`;
    replace(pager,
      button("Previous page", () => run(() => browse(stack[index - 1], index - 1)), index === 0),
      button("Next page", () => run(() => browse(page.next_cursor, index + 1)), !page.next_cursor));
  }

  // Searching: the API scans from a cursor within a budget and says where it stopped; pages of
  // matches are kept by the cursor they started from, for "Previous page".
  const starts = [];
  async function search(text, kind, cursor, index) {
    const found = [];
    let next = cursor;
    let scannedTo = 0;
    let asked = 0;
    do {
      const page = await get(`${base}/cases`, { ...q, q: text, by: kind, limit: PAGE - found.length, cursor: next });
      if (!ctx.alive()) return;
      found.push(...page.items);
      next = page.next_cursor;
      scannedTo = page.scanned_to;
      asked += 1;
      status.textContent = `Searching… ${fmtInt(scannedTo)} of ${fmtInt(v.case_count)} cases searched, ${fmtInt(found.length)} found`;
    } while (next && found.length < PAGE && asked < SCANS_PER_CLICK);
    starts[index] = cursor;
    caseRows(found);
    const where = kind === "any" ? "" : kind === "tag" ? " (tag)" : kind === "id" ? " (id)" : " (text)";
    const from = index * PAGE + 1;
    status.textContent = next && found.length >= PAGE
      ? `Cases ${fmtInt(from)}–${fmtInt(from + found.length - 1)} matching “${text}”${where}; more on the next page`
      : next
      ? `${fmtInt(found.length)} cases matching “${text}”${where} in the first ${fmtInt(scannedTo)} of ${fmtInt(v.case_count)} cases`
      : `${fmtInt(found.length)} cases matching “${text}”${where}${index || cursor ? " on this page" : ""}; every case searched`;
    replace(pager,
      button("Previous page", () => run(() => search(text, kind, starts[index - 1], index - 1)), index === 0),
      next ? button(found.length < PAGE ? "Search further" : "Next page", () => run(() => search(text, kind, next, index + 1))) : h("span", { class: "muted" }, "searched every case"));
  }

  async function run(fn) {
    replace(errors);
    try {
      await fn();
    } catch (err) {
      replace(errors, errorBox(err));
    }
  }

  const byId = uid("by");
  const by = h("select", { id: byId }, h("option", { value: "any" }, "id, tag or text"), h("option", { value: "id" }, "id"), h("option", { value: "tag" }, "tag"), h("option", { value: "text" }, "text"));
  const input = h("input", { type: "search", placeholder: "search cases", autocomplete: "off" });
  const searchForm = h(
    "form",
    { class: "toolbar", role: "search", "aria-label": "Search cases", onsubmit: (e) => {
      e.preventDefault();
      const text = input.value.trim();
      const url = new URL(location.href);
      if (text) {
        url.searchParams.set("q", text);
        url.searchParams.set("by", by.value);
      } else {
        url.searchParams.delete("q");
        url.searchParams.delete("by");
      }
      history.replaceState(null, "", url.pathname + url.search);
      if (!text) run(() => browse(null, 0));
      else run(() => search(text, by.value, null, 0));
    } },
    field("Search by", by),
    field("Search cases", input),
    h("button", { type: "submit" }, "Search"),
    h("button", { type: "button", class: "secondary", onclick: () => { input.value = ""; searchForm.requestSubmit(); } }, "Clear"),
  );

  const charts = h("div", { class: "charts" }, h("p", { class: "muted" }, "Drawing…"));
  const shared = h("section", { "aria-labelledby": "shared-h", hidden: true });
  const previous = h("span");
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", v.version),
    h("h1", { tabindex: "-1" }, `${id}@${v.version}`),
    v.description ? h("p", null, v.description) : null,
    h("div", { class: "toolbar" },
      h("a", { class: "button secondary", href: paths.dataset(id) }, "All versions"),
      previous,
      h("a", { class: "button secondary", href: paths.subset(id, v.version) }, "Build a subset…"),
      downloadMenu(id, v, includeDeleted),
      h("span", { class: "muted mono", title: v.content_digest }, shortDigest(v.content_digest))),
    versionMeta(v),
    h("section", { "aria-labelledby": "pictures-h" }, h("h2", { id: "pictures-h" }, "Pictures"), charts),
    h("section", { "aria-labelledby": "cases-h" },
      h("h2", { id: "cases-h" }, "Cases"),
      searchForm,
      status,
      errors,
      h("div", { class: "scroll-x" }, h("table", { "aria-label": "Cases" },
        h("thead", null, h("tr", null, h("th", { scope: "col" }, "id"), h("th", { scope: "col" }, "user"), h("th", { scope: "col" }, "ground truth"), h("th", { scope: "col" }, "tags"))),
        tbody)),
      pager),
    shared,
  );
  await browse(null, 0);
  ctx.ready();

  const initial = ctx.query.get("q");
  if (initial) {
    input.value = initial;
    by.value = ["any", "id", "tag", "text"].includes(ctx.query.get("by")) ? ctx.query.get("by") : "any";
    searchForm.requestSubmit();
  }
  drawPictures(ctx, id, v, includeDeleted, charts, shared);
  linkPrevious(ctx, id, v, previous);
}

// "Diff against <the version before this one>", once the page is usable.
async function linkPrevious(ctx, id, v, el) {
  try {
    const versions = await get(`${paths.dataset(id)}/versions`, { limit: 1000 });
    const i = versions.items.findIndex((x) => x.version === v.version);
    const before = i >= 0 ? versions.items[i + 1] : null;
    if (before && ctx.alive()) replace(el, h("a", { class: "button secondary", href: paths.diff(id, before.version, v.version) }, `Diff against ${before.version}`));
  } catch {
    /* no link: the versions could not be listed */
  }
}

function bucketRows(d, fmt = fmtInt) {
  return d.buckets.map((b) => ({ label: b.low === 0 && b.high === 1 ? "0" : b.high - b.low === 1 ? fmt(b.low) : `${fmt(b.low)}+`, value: b.count }));
}

function summaryLine(d, fmt = fmtInt) {
  return `median ${fmt(d.p50)}, 90th percentile ${fmt(d.p90)}, largest ${fmt(d.max)}`;
}

// The pictures, from the version's numbers over every case; then its shared files, if any.
async function drawPictures(ctx, id, v, includeDeleted, el, sharedEl) {
  let stats;
  try {
    stats = await get(paths.stats(id, v.version), { include_deleted: includeDeleted || undefined });
  } catch (err) {
    if (ctx.alive()) replace(el, errorBox(err));
    return;
  }
  if (!ctx.alive()) return;
  const note = `over all ${fmtInt(stats.case_count)} cases`;
  const tagRows = stats.tags.map((t) => ({ label: t.tag, value: t.cases }));
  if (stats.untagged) tagRows.push({ label: "(no tag)", value: stats.untagged });
  const lengths = stats.input_length;
  const sizes = stats.file_sizes;
  const lenRows = bucketRows(lengths);
  const sizeRows = bucketRows(sizes, fmtBytes);
  const figure = (name, title, detail, picture, table) => h("figure", { class: "panel", "data-picture": name }, h("figcaption", null, h("strong", null, title), h("div", { class: "muted" }, detail)), picture, table);
  replace(
    el,
    figure("tags", "Cases per tag", note, barChart("Cases per tag", tagRows), dataTable("Cases per tag", ["tag", "cases"], tagRows.map((r) => [r.label, fmtInt(r.value)]))),
    lengths.count
      ? figure("input-length", "Input length (characters of inputs.user)", `${note}: ${summaryLine(lengths)}`, histogram("Input length distribution", lenRows), dataTable("Input lengths", ["characters from", "cases"], lenRows.map((b) => [b.label, fmtInt(b.value)])))
      : figure("input-length", "Input length", note, h("p", { class: "muted" }, "No case has a text inputs.user."), null),
    sizes.count
      ? figure("file-sizes", `File sizes (${fmtInt(sizes.count)} ${sizes.count === 1 ? "file" : "files"}, ${fmtBytes(sizes.total)})`, `${note}: ${summaryLine(sizes, fmtBytes)}`, histogram("File size distribution", sizeRows, { unit: "files" }), dataTable("File sizes", ["bytes from", "files"], sizeRows.map((b) => [b.label, fmtInt(b.value)])))
      : figure("file-sizes", "File sizes", note, h("p", { class: "muted" }, "No companion files."), null),
  );
  if (stats.shared_files.length) {
    replace(sharedEl,
      h("h2", { id: "shared-h" }, `Shared files (${fmtInt(stats.shared_files.length)})`),
      h("p", { class: "muted" }, "Put into every case at export."),
      stats.shared_files.map((f) => fileViewer(id, v, f.dest, f, includeDeleted)));
    sharedEl.hidden = false;
  }
}
