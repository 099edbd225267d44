// The datasets list: the caller's datasets and the `_shared` ones, searchable.

import { get, paths } from "../api.js";
import { fmtInt, fmtTime, h, replace, uid } from "../dom.js";

const PAGE = 100;

export async function datasetsRoute(ctx) {
  ctx.title("Datasets");
  const query = ctx.query.get("q") || "";
  const [own, shared] = await Promise.all([
    get("/datasets", { limit: PAGE }),
    get("/datasets", { limit: PAGE, shared: true }).catch(() => ({ items: [], next_cursor: null })),
  ]);
  if (!ctx.alive()) return;
  const rows = [...own.items, ...shared.items.filter((d) => !own.items.some((o) => o.id === d.id && o.owner === d.owner))];
  const cursors = { own: own.next_cursor, shared: shared.next_cursor };
  const tbody = h("tbody");
  const countLine = h("p", { class: "muted", role: "status", "aria-live": "polite" });
  const searchId = uid("q");
  const search = h("input", { type: "search", id: searchId, value: query, placeholder: "id, description or tag", autocomplete: "off" });
  const more = h("button", { type: "button", class: "secondary" }, "Load more datasets");

  function matches(d) {
    const q = search.value.trim().toLowerCase();
    if (!q) return true;
    const t = d.tags || [];
    return d.id.toLowerCase().includes(q) || (d.description || "").toLowerCase().includes(q) || t.some((x) => x.toLowerCase().includes(q));
  }

  function draw() {
    const shown = rows.filter(matches);
    replace(
      tbody,
      shown.map((d) =>
        h(
          "tr",
          { "data-dataset": d.id },
          h("td", null, h("a", { href: paths.dataset(d.id) }, d.id), d.owner === "_shared" ? h("span", { class: "badge shared", title: "shared with every tenant" }, " _shared") : null,
            d.description ? h("div", { class: "muted truncate" }, d.description) : null),
          h("td", null, d.latest ? h("a", { href: paths.version(d.id, d.latest) }, d.latest) : "—"),
          h("td", { class: "num", "data-col": "cases" }, fmtInt(d.case_count)),
          h("td", { class: "num", "data-col": "versions" }, fmtInt(d.version_count)),
          h("td", { "data-col": "tags" }, (d.tags || []).map((t) => h("span", { class: "badge" }, t))),
          h("td", null, fmtTime(d.updated_at)),
        ),
      ),
    );
    const q = search.value.trim();
    countLine.textContent = q
      ? `${shown.length} of ${rows.length} datasets match “${q}”`
      : `${rows.length} datasets${cursors.own || cursors.shared ? " (more to load)" : ""}`;
    more.hidden = !(cursors.own || cursors.shared);
  }

  search.addEventListener("input", () => {
    const q = search.value.trim();
    history.replaceState(null, "", q ? `/datasets?q=${encodeURIComponent(q)}` : location.pathname);
    draw();
  });
  more.addEventListener("click", async () => {
    more.disabled = true;
    for (const [key, shared] of [["own", false], ["shared", true]]) {
      if (!cursors[key]) continue;
      const page = await get("/datasets", { limit: PAGE, cursor: cursors[key], shared });
      rows.push(...page.items);
      cursors[key] = page.next_cursor;
    }
    more.disabled = false;
    draw();
  });

  replace(
    ctx.main,
    h("h1", { tabindex: "-1" }, "Datasets"),
    h("div", { class: "toolbar" }, h("div", { class: "field" }, h("label", { for: searchId }, "Search datasets"), search), h("a", { class: "button secondary", href: "/import" }, "Import a benchmark…")),
    countLine,
    h("div", { class: "scroll-x" }, h("table", { "aria-label": "Datasets" },
      h("thead", null, h("tr", null,
        h("th", { scope: "col" }, "id"), h("th", { scope: "col" }, "latest"), h("th", { scope: "col", class: "num" }, "cases"),
        h("th", { scope: "col", class: "num" }, "versions"), h("th", { scope: "col" }, "tags"), h("th", { scope: "col" }, "updated"))),
      tbody)),
    more,
    rows.length ? null : h("p", null, "No datasets yet. ", h("a", { href: "/import" }, "Import one"), ", or register one with ", h("code", null, "caseshelf register FILE"), "."),
  );
  draw();
  ctx.ready();
}
