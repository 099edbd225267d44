// A dataset: its versions (live and tombstoned) with tag, delete and revive, a diff picker, and
// where its tags point with every move that put them there (a tag names at most one version).

import { caller, del, get, paths, post, put } from "../api.js";
import { field, fmtInt, fmtTime, h, replace, shortDigest } from "../dom.js";
import { errorBox, navigate } from "../app.js";

export function provenance(p) {
  if (!p) return "—";
  const parts = [];
  if (p.via) parts.push(h("span", { class: "badge" }, p.via));
  if (p.recipe && p.recipe.id) parts.push(`recipe ${p.recipe.id}@${p.recipe.version || "?"}`);
  if (p.source) {
    const s = p.source;
    const where = s.dataset ? `${s.dataset}${s.config ? `/${s.config}` : ""}${s.split ? `:${s.split}` : ""}${s.revision ? `@${String(s.revision).slice(0, 10)}` : ""}` : s.url || s.filename || s.kind || "";
    if (where) parts.push(` from ${where}`);
  }
  if (p.parent && p.parent.id) {
    parts.push(" of ", h("a", { href: paths.version(p.parent.id, p.parent.version) }, `${p.parent.id}@${p.parent.version}`));
  }
  if (p.format) parts.push(` (${p.format})`);
  if (p.limit) parts.push(` limit ${p.limit}`);
  if (!parts.length) parts.push(h("code", null, JSON.stringify(p).slice(0, 120)));
  return h("span", { title: JSON.stringify(p, null, 1) }, parts);
}

// May this caller delete or revive the version? Its creator or an admin, in the caller's own
// tenant, as the API decides (GET /me says who the API takes the caller for, locally and
// deployed). Without an answer from /me nothing is hidden: the API still refuses with a 403.
function mayChange(me, v) {
  if (!me) return true;
  return v.owner === me.tenant && (me.admin || v.created_by === me.principal);
}

function writesTo(me, v) {
  if (!me) return v.owner !== "_shared";
  return v.owner === me.tenant;
}

export async function datasetRoute(ctx) {
  const [id] = ctx.params;
  ctx.title(id);
  const [summary, versions, me] = await Promise.all([
    get(paths.dataset(id)),
    get(`${paths.dataset(id)}/versions`, { include_deleted: true, limit: 1000 }),
    caller().catch(() => null),
  ]);
  if (!ctx.alive()) return;
  const items = versions.items;
  const status = h("div", { role: "status", "aria-live": "polite" });
  const tbody = h("tbody");
  const tagBody = h("tbody");
  const tagNote = h("p", { class: "muted" });

  // Saving one version's tags may move a tag away from another version: every row and the
  // history are read again after it.
  async function reloadTags() {
    const [again, board] = await Promise.all([
      get(`${paths.dataset(id)}/versions`, { include_deleted: true, limit: 1000 }),
      get(`${paths.dataset(id)}/tags`),
    ]);
    items.splice(0, items.length, ...again.items);
    drawHistory(board);
  }

  function drawHistory(board) {
    const rows = board.history.map((m) => h("tr", { "data-seq": String(m.seq) },
      h("td", null, h("span", { class: "badge" }, m.tag)),
      h("td", null, m.from_version || "—"),
      h("td", null, m.to_version || "(removed)"),
      h("td", null, m.by),
      h("td", null, fmtTime(m.at))));
    replace(tagBody, rows.length ? rows : h("tr", null, h("td", { colspan: "5", class: "muted" }, "No tag has moved yet.")));
    replace(tagNote, board.dropped ? `${fmtInt(board.dropped)} older moves are no longer kept.` : "");
  }

  async function act(label, fn) {
    replace(status);
    try {
      const v = await fn();
      const i = items.findIndex((x) => x.version === v.version);
      if (i >= 0) items[i] = v;
      replace(status, h("p", { class: "ok" }, `${label}: ${v.id}@${v.version}`));
      draw();
    } catch (err) {
      replace(status, errorBox(err));
    }
  }

  function row(v) {
    const deleted = Boolean(v.deleted_at);
    const own = writesTo(me, v);
    const tagInput = h("input", { type: "text", value: v.version_tags.join(", "), "aria-label": `Tags of ${v.version}`, placeholder: "stable, prod" });
    const actions = [];
    if (!deleted && own) {
      actions.push(
        h("form", { class: "inline-form", onsubmit: (e) => {
          e.preventDefault();
          const tags = tagInput.value.split(",").map((t) => t.trim()).filter(Boolean);
          act("tags saved", async () => {
            const saved = (await put(`${paths.version(id, v.version)}/tags`, { tags })).data;
            await reloadTags();
            return saved;
          });
        } }, tagInput, h("button", { type: "submit", class: "secondary" }, "Save tags")),
      );
    }
    if (own && mayChange(me, v)) {
      if (deleted) {
        actions.push(h("button", { type: "button", class: "secondary", onclick: () => act("revived", async () => (await post(`${paths.version(id, v.version)}/revive`)).data) }, `Revive ${v.version}`));
      } else {
        actions.push(h("button", { type: "button", class: "danger", onclick: () => {
          if (!window.confirm(`Delete ${id}@${v.version}? It leaves listings and latest; revive brings it back.`)) return;
          act("deleted", async () => (await del(paths.version(id, v.version))).data);
        } }, `Delete ${v.version}`));
      }
    }
    return h(
      "tr",
      { class: deleted ? "deleted" : null, "data-version": v.version },
      h("td", null, h("a", { href: deleted ? `${paths.version(id, v.version)}?include_deleted=true` : paths.version(id, v.version) }, v.version)),
      h("td", { class: "mono", title: v.content_digest }, shortDigest(v.content_digest)),
      h("td", { class: "num", "data-col": "cases" }, fmtInt(v.case_count)),
      h("td", { "data-col": "version-tags" }, v.version_tags.map((t) => h("span", { class: "badge" }, t))),
      h("td", { class: "state" }, h("span", { class: `badge ${deleted ? "deleted" : "live"}` }, deleted ? "deleted" : "live")),
      h("td", null, fmtTime(v.created_at), h("div", { class: "muted" }, `by ${v.created_by}`)),
      h("td", null, provenance(v.produced_by)),
      h("td", { class: "actions" }, actions),
    );
  }

  function draw() {
    replace(tbody, items.map(row));
    drawCompare();
  }

  // The versions to compare are the live ones: drawn again after a delete or a revive.
  const baseSel = h("select");
  const candSel = h("select");
  const compare = h("section", { "aria-labelledby": "diff-h" }, h("h2", { id: "diff-h" }, "Compare versions"),
    h("form", { class: "toolbar", "aria-label": "Compare two versions", onsubmit: (e) => {
      e.preventDefault();
      navigate(paths.diff(id, baseSel.value, candSel.value));
    } },
    field("Base", baseSel),
    field("Candidate", candSel),
    h("button", { type: "submit" }, "Compare")));
  function drawCompare() {
    const live = items.filter((v) => !v.deleted_at).map((v) => v.version);
    const keep = (sel, fallback) => (live.includes(sel.value) ? sel.value : fallback);
    const base = keep(baseSel, live[1] || live[0]);
    const cand = keep(candSel, live[0]);
    replace(baseSel, live.map((v) => h("option", { value: v, selected: v === base }, v)));
    replace(candSel, live.map((v) => h("option", { value: v, selected: v === cand }, v)));
    compare.hidden = live.length === 0;
  }

  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", id),
    h("h1", { tabindex: "-1" }, id, summary.owner === "_shared" ? h("span", { class: "badge shared" }, "_shared") : null),
    summary.description ? h("p", null, summary.description) : null,
    h("dl", { class: "meta" },
      h("dt", null, "latest"), h("dd", null, summary.latest ? h("a", { href: paths.version(id, summary.latest) }, summary.latest) : "—"),
      h("dt", null, "cases (latest)"), h("dd", { "data-field": "case_count" }, fmtInt(summary.case_count)),
      h("dt", null, "versions"), h("dd", { "data-field": "version_count" }, fmtInt(summary.version_count)),
      h("dt", null, "owner"), h("dd", null, summary.owner),
      h("dt", null, "updated"), h("dd", null, fmtTime(summary.updated_at))),
    compare,
    h("section", { "aria-labelledby": "versions-h" },
      h("h2", { id: "versions-h" }, "Versions"),
      status,
      h("div", { class: "scroll-x" }, h("table", { "aria-label": "Versions" },
        h("thead", null, h("tr", null, ["version", "digest", "cases", "version tags", "state", "created", "produced by", "actions"].map((c) => h("th", { scope: "col", class: c === "cases" ? "num" : null }, c)))),
        tbody)),
      versions.next_cursor ? h("p", { class: "muted" }, "Showing the newest 1,000 versions.") : null),
    h("section", { "aria-labelledby": "tags-h" },
      h("h2", { id: "tags-h" }, "Tag moves"),
      h("p", { class: "muted" }, "A tag names one version; putting it on another moves it."),
      h("div", { class: "scroll-x" }, h("table", { "aria-label": "Tag moves" },
        h("thead", null, h("tr", null, ["tag", "from", "to", "by", "when"].map((c) => h("th", { scope: "col" }, c)))),
        tagBody)),
      tagNote),
  );
  drawHistory(await get(`${paths.dataset(id)}/tags`));
  if (!ctx.alive()) return;
  draw();
  ctx.ready();
}
