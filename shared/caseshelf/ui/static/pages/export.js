// The export panel: a format and a subset in, the export's prefix and `test_data_ref` out, ready
// to copy into an EvalHub benchmark. The formats (and any further field of the export request,
// such as a secret reference) are read from the API's own OpenAPI document, so the panel offers
// what the export route takes.

import { get, getConfig, paths, post } from "../api.js";
import { copyButton, field, fmtInt, h, replace } from "../dom.js";
import { codeBlock } from "../highlight.js";
import { errorBox } from "../app.js";
import { selectionForm } from "./selection.js";

const KNOWN = new Set(["subset", "shared_files", "format"]);
const POLL_MS = 500;

// The export's answer: at once (200, complete already), or, for a new export (202, a job of
// parts), its job followed with GET /jobs/{id} until it ends, its progress shown meanwhile.
async function exported(answer, status) {
  if (answer.status !== 202) return answer.data;
  let job = answer.data;
  while (job.state !== "succeeded" && job.state !== "failed") {
    const p = job.progress;
    replace(status, h("p", { class: "muted", role: "status" }, p ? `Exporting… ${fmtInt(p.cases_written)} of ${fmtInt(p.cases_total)} cases (${fmtInt(p.parts_done)} of ${fmtInt(p.parts_total)} parts)` : "Exporting…"));
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    job = await get(job.url);
  }
  if (job.state === "failed") {
    throw new Error((job.error && job.error.detail) || "the export failed");
  }
  return job.result;
}

function resolve(doc, schema) {
  let s = schema || {};
  for (let i = 0; i < 8 && s.$ref; i += 1) s = doc.components.schemas[s.$ref.split("/").pop()] || {};
  return s;
}

// The export request's schema: {formats, defaultFormat, extra: [{name, description}]}.
export async function exportSchema() {
  const fallback = { formats: ["case-dirs"], defaultFormat: "case-dirs", extra: [] };
  try {
    const resp = await fetch(getConfig().openapi || "/openapi.json", { headers: { Accept: "application/json" } });
    if (!resp.ok) return fallback;
    const doc = await resp.json();
    const op = Object.entries(doc.paths || {}).find(([p]) => p.endsWith("/exports"));
    const body = op && op[1].post && op[1].post.requestBody;
    const schema = resolve(doc, body && body.content && body.content["application/json"].schema);
    const props = schema.properties || {};
    const fmt = resolve(doc, props.format);
    const formats = fmt.enum || (fmt.const ? [fmt.const] : null) || (fmt.anyOf || []).flatMap((x) => resolve(doc, x).enum || (x.const ? [x.const] : []));
    const extra = Object.entries(props)
      .filter(([name, p]) => !KNOWN.has(name) && ["string", undefined].includes(resolve(doc, p).type || (p.anyOf || []).map((x) => x.type).find((t) => t && t !== "null")))
      .map(([name, p]) => ({ name, description: resolve(doc, p).description || p.description || "" }));
    return { formats: formats && formats.length ? formats : fallback.formats, defaultFormat: fmt.default || (formats && formats[0]) || "case-dirs", extra };
  } catch {
    return fallback;
  }
}

export async function exportRoute(ctx) {
  const [id, ref] = ctx.params;
  ctx.title(`export ${id}@${ref}`);
  const schema = await exportSchema();
  if (!ctx.alive()) return;
  const format = h("select", null, schema.formats.map((f) => h("option", { value: f, selected: f === schema.defaultFormat }, f)));
  const extras = schema.extra.map((x) => ({ name: x.name, input: h("input", { type: "text", autocomplete: "off" }), description: x.description }));
  const sel = selectionForm();
  const result = h("div", { "aria-live": "polite" });
  const form = h("form", { "aria-label": "Export", onsubmit: async (e) => {
    e.preventDefault();
    const body = { format: format.value };
    const subset = sel.value();
    if (Object.keys(subset).length) body.subset = subset;
    for (const x of extras) if (x.input.value.trim()) body[x.name] = x.input.value.trim();
    replace(result, h("p", { class: "muted", role: "status" }, "Exporting…"));
    try {
      const res = await exported(await post(`${paths.version(id, ref)}/exports`, body), result);
      const prefixEl = h("code", { "data-field": "prefix" }, res.prefix);
      const out = [
        h("div", { class: "ok", role: "status" }, `${res.reused ? "The same export existed already" : "Exported"}: ${fmtInt(res.case_count)} cases, ${fmtInt(res.file_count)} files.`),
        h("h2", null, "Prefix"),
        h("p", null, prefixEl, " ", copyButton("Copy prefix", () => res.prefix, prefixEl)),
      ];
      if (res.test_data_ref) {
        const text = JSON.stringify({ test_data_ref: res.test_data_ref }, null, 2);
        const block = codeBlock(text, "json");
        block.dataset.field = "test_data_ref";
        out.push(h("h2", null, "test_data_ref"), h("p", { class: "muted" }, "Paste into the EvalHub benchmark's configuration."), block, copyButton("Copy test_data_ref", () => text, block));
      } else {
        out.push(h("p", { class: "muted" }, "This store has no bucket (the embedded store): there is no test_data_ref; the prefix is where the files are."));
      }
      if (res.bundle_url) out.push(h("p", null, h("a", { href: res.bundle_url, rel: "noopener noreferrer" }, "Download bundle.tar.gz")));
      if (res.warning_count) out.push(h("h2", null, `Left out (${fmtInt(res.warning_count)})`), h("ul", null, res.warnings.map((w) => h("li", null, w))));
      out.push(h("details", null, h("summary", null, "The answer as the API gives it"), codeBlock(JSON.stringify(res, null, 2), "json")));
      replace(result, out);
    } catch (err) {
      replace(result, errorBox(err));
    }
  } },
    field("Format", format),
    extras.map((x) => field(x.name, x.input, x.description)),
    sel.el,
    h("button", { type: "submit" }, "Export"));
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", h("a", { href: paths.version(id, ref) }, ref), " / export"),
    h("h1", { tabindex: "-1" }, `Export ${id}@${ref}`),
    h("p", { class: "muted" }, "Writes the version (or the selection) as per-case directories; asking again for the same export returns it without writing."),
    form,
    result,
  );
  ctx.ready();
}
