// The subset builder: choose a selection, see its stamp and the cases it selects, then
// register it as a derived version (`register_as`). Nothing is registered before that.
// Registering is a job (202): followed with GET /jobs/{id} until it ends, as exports are.

import { followJob, paths, post } from "../api.js";
import { field, fmtInt, h, replace } from "../dom.js";
import { jsonBlock } from "../highlight.js";
import { errorBox } from "../app.js";
import { selectionForm } from "./selection.js";
import { userText } from "./version.js";

const SHOWN = 50;

// The registration's job followed to its end: its result (`parent`, `stamp`, `registered`),
// its progress shown in `status` meanwhile; a failed job throws its error.
async function registeredBy(answer, status) {
  const job = await followJob(answer.data, (j) => {
    const p = j.progress;
    replace(status, h("p", { class: "muted", role: "status" }, p ? `Registering… ${fmtInt(p.cases_registered)} of ${fmtInt(p.cases_selected)} cases` : "Registering…"));
  });
  if (job.state === "failed") {
    throw new Error((job.error && job.error.detail) || "the registration failed");
  }
  return job.result;
}

export async function subsetRoute(ctx) {
  const [id, ref] = ctx.params;
  ctx.title(`subset of ${id}@${ref}`);
  const url = `${paths.version(id, ref)}/subset`;
  const sel = selectionForm();
  const preview = h("div", { "aria-live": "polite" });
  const registered = h("div", { "aria-live": "polite" });
  let last = null;

  const targetId = h("input", { type: "text", value: `${id}-subset`, required: true });
  const targetVersion = h("input", { type: "text", placeholder: "1.0.0" });
  const bump = h("select", null, h("option", { value: "" }, "(a version label)"), ["major", "minor", "patch"].map((b) => h("option", { value: b }, b)));
  const registerButton = h("button", { type: "submit", disabled: true }, "Register this subset");
  const registerForm = h("form", { "aria-label": "Register the subset", onsubmit: async (e) => {
    e.preventDefault();
    const target = { id: targetId.value.trim() };
    if (bump.value) target.bump = bump.value;
    else target.version = targetVersion.value.trim();
    replace(registered, h("p", { class: "muted", role: "status" }, "Registering…"));
    try {
      const r = (await registeredBy(await post(url, { ...last, register_as: target }), registered)).registered;
      replace(registered, h("div", { class: "ok", role: "status" },
        `${r.created ? "Registered" : "Already registered"} ${r.id}@${r.version} with ${fmtInt(r.case_count)} cases (${r.content_digest.slice(0, 19)}). `,
        h("a", { href: paths.version(r.id, r.version) }, `Open ${r.id}@${r.version}`)));
    } catch (err) {
      replace(registered, errorBox(err));
    }
  } },
    h("div", { class: "row" }, field("Dataset id", targetId), field("Version", targetVersion, "or choose a bump"), field("Bump", bump)),
    registerButton);

  async function doPreview() {
    const body = sel.value();
    replace(preview, h("p", { class: "muted", role: "status" }, "Selecting…"));
    registerButton.disabled = true;
    try {
      const res = (await post(url, body)).data;
      const firstIds = res.case_ids.slice(0, SHOWN);
      const shown = firstIds.length ? (await post(url, { ids: firstIds }, { cases: true })).data.cases || [] : [];
      last = body;
      registerButton.disabled = false;
      replace(preview,
        h("h2", null, "Stamp"),
        res.stamp
          ? h("div", null, h("p", { "data-field": "selected" }, `${fmtInt(res.stamp.selected)} of ${fmtInt(res.stamp.total)} cases selected from ${res.stamp.id}@${res.stamp.version}`), jsonBlock(res.stamp))
          : h("p", null, `Nothing narrows the version: all ${fmtInt(res.case_ids.length)} cases.`),
        h("h2", null, `Selected cases${res.case_ids.length > SHOWN ? ` (the first ${SHOWN} of ${fmtInt(res.case_ids.length)})` : ` (${fmtInt(res.case_ids.length)})`}`),
        h("table", { "aria-label": "Selected cases" },
          h("thead", null, h("tr", null, h("th", { scope: "col" }, "id"), h("th", { scope: "col" }, "user"), h("th", { scope: "col" }, "tags"))),
          h("tbody", null, shown.map((c) => h("tr", { "data-case": c.id },
            h("td", null, h("a", { href: paths.kase(id, ref, c.id) }, c.id)),
            h("td", { class: "truncate" }, userText(c.inputs)),
            h("td", null, (c.tags || []).map((t) => h("span", { class: "badge" }, t))))))));
    } catch (err) {
      replace(preview, errorBox(err));
    }
  }

  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", h("a", { href: paths.version(id, ref) }, ref), " / subset"),
    h("h1", { tabindex: "-1" }, `Subset of ${id}@${ref}`),
    h("p", { class: "muted" }, "A subset is stamped with the version, the counts and the selection, so a partial run never passes for the whole version."),
    h("form", { "aria-label": "Selection", onsubmit: (e) => { e.preventDefault(); doPreview(); } }, sel.el, h("button", { type: "submit" }, "Preview the selection")),
    preview,
    h("section", { "aria-labelledby": "reg-h" }, h("h2", { id: "reg-h" }, "Register as a derived version"), h("p", { class: "muted" }, "Registers exactly the previewed selection (same packs, no case bytes copied)."), registerForm, registered),
  );
  ctx.ready();
}
