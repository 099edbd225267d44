// Exports of a version, handed to the user: the version page's "Export" menu downloads the
// dataset document (the download route) or an export in any format (a `.tar.gz` bundle of a
// directory format, the one file of a jsonl or parquet export), and the export panel writes an
// export with a subset, shows its download, its prefix and, for EvalHub, its `test_data_ref`.
// The formats (and any further field of the export request, such as EvalHub's secret
// reference) are read from the API's own OpenAPI document, so both offer what the export route
// takes.

import { followJob, get, getConfig, paths, post, request } from "../api.js";
import { copyButton, field, fmtBytes, fmtInt, h, replace } from "../dom.js";
import { codeBlock } from "../highlight.js";
import { errorBox } from "../app.js";
import { selectionForm } from "./selection.js";

const KNOWN = new Set(["subset", "shared_files", "format"]);

// The export's answer: at once (200, complete already), or, for a new export (202, a job of
// parts), its job followed with GET /jobs/{id} until it ends, its progress shown meanwhile.
async function exported(answer, status) {
  if (answer.status !== 202) return answer.data;
  const job = await followJob(answer.data, (j) => {
    const p = j.progress;
    const doing = j.kind === "download" ? "Rendering the document" : "Exporting";
    if (status) replace(status, h("p", { class: "muted", role: "status" }, p ? `${doing}… ${fmtInt(p.cases_written)} of ${fmtInt(p.cases_total)} cases (${fmtInt(p.parts_done)} of ${fmtInt(p.parts_total)} parts)` : `${doing}…`));
  });
  if (job.state === "failed") {
    throw new Error((job.error && job.error.detail) || `the ${job.kind || "export"} failed`);
  }
  return job.result;
}

// Formats whose export of cases without files is one file, handed over as it is.
const SINGLE_FILE = new Set(["jsonl", "parquet"]);
const EVALHUB = "EvalHub reads an export from the registry's bucket by its test_data_ref, with the bucket's credentials from the Kubernetes Secret named here (default: the deployment's).";

// Start a browser download of `url` (the API's presigned or local /_downloads/ URL).
export function startDownload(url, filename) {
  const a = h("a", { href: url, download: filename || "", rel: "noopener noreferrer", hidden: true });
  document.body.appendChild(a);
  a.click();
  a.remove();
}

// An export whose result can be downloaded: a single-file format as its file, any other (or a
// jsonl/parquet export with files) as its bundle. Returns the export's answer.
export async function exportForDownload(id, ref, body, status) {
  const url = `${paths.version(id, ref)}/exports`;
  let res = await exported(await post(url, { ...body, bundle: !SINGLE_FILE.has(body.format) || undefined }), status);
  if (!res.file_url && !res.bundle_url) res = await exported(await post(url, { ...body, bundle: true }), status);
  return res;
}

export function downloadLink(res) {
  const url = res.file_url || res.bundle_url;
  if (!url) return h("p", { class: "muted" }, "This store gives no download link; the prefix is where the files are.");
  const what = res.file_url ? `the ${res.format} file` : `every file as .tar.gz`;
  return h("p", null, h("a", { class: "button", href: url, download: "", rel: "noopener noreferrer", "data-download": res.file_url ? "file" : "bundle" }, `Download ${what}`), " ", h("span", { class: "muted" }, `${fmtInt(res.case_count)} cases, ${fmtBytes(res.bytes)}`));
}

// The version page's "Export" menu: downloads, and the way to the export panel (EvalHub).
export function downloadMenu(id, v, includeDeleted) {
  const status = h("p", { role: "status", "aria-live": "polite", class: "muted" });
  const formats = h("div", { class: "toolbar" }, h("span", { class: "muted" }, "Reading the formats…"));
  const run = async (label, fn) => {
    status.textContent = `Preparing ${label}…`;
    try {
      await fn();
      status.textContent = `Downloading ${label}.`;
    } catch (err) {
      replace(status, errorBox(err));
    }
  };
  const documentButton = h("button", { type: "button", class: "secondary", "data-download-format": "document", onclick: () => run("the dataset document", async () => {
    const path = `${paths.version(id, v.version)}/download`;
    const query = { include_deleted: includeDeleted || undefined };
    // The first download renders the document as a job (202): followed, then asked again.
    const first = await request("GET", path, { query });
    if (first.status === 202) await exported(first, status);
    const got = first.status === 202 ? await get(path, query) : first.data;
    if (got && got.url) startDownload(got.url, got.filename);
    else {
      const url = URL.createObjectURL(new Blob([JSON.stringify(got)], { type: "application/json" }));
      startDownload(url, `${id}-${v.version}.json`);
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    }
  }) }, "Dataset document (.json)");
  const menu = h("details", { class: "menu", ontoggle: async () => {
    if (!menu.open || formats.dataset.filled) return;
    formats.dataset.filled = "1";
    const schema = await exportSchema();
    replace(formats, schema.formats.map((f) => h("button", { type: "button", class: "secondary", "data-download-format": f, onclick: () => run(f, async () => {
      const res = await exportForDownload(id, v.version, { format: f });
      const url = res.file_url || res.bundle_url;
      if (!url) throw new Error("this store gives no download link: export from the export panel and read its prefix");
      startDownload(url);
    }) }, SINGLE_FILE.has(f) ? `${f} (one file)` : `${f} (.tar.gz)`)));
  } },
    h("summary", { class: "button secondary" }, "Export…"),
    h("div", { class: "menu-body panel" },
      h("h3", null, "Download"),
      h("div", { class: "toolbar" }, documentButton),
      h("p", { class: "muted" }, "The dataset document registers anywhere as it is, with the same content digest. Or an export in a format:"),
      formats,
      status,
      h("h3", null, "Export with a subset, or for EvalHub"),
      h("p", { class: "muted" }, EVALHUB),
      h("a", { class: "button secondary", href: paths.exportPanel(id, v.version) }, "Export panel…")));
  return menu;
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
      const res = await exportForDownload(id, ref, body, result);
      const prefixEl = h("code", { "data-field": "prefix" }, res.prefix);
      const out = [
        h("div", { class: "ok", role: "status" }, `${res.reused ? "The same export existed already" : "Exported"}: ${fmtInt(res.case_count)} cases, ${fmtInt(res.file_count)} files.`),
        downloadLink(res),
        h("h2", null, "Prefix"),
        h("p", null, prefixEl, " ", copyButton("Copy prefix", () => res.prefix, prefixEl)),
      ];
      if (res.test_data_ref) {
        const text = JSON.stringify({ test_data_ref: res.test_data_ref }, null, 2);
        const block = codeBlock(text, "json");
        block.dataset.field = "test_data_ref";
        out.push(h("h2", null, "test_data_ref"), h("p", { class: "muted" }, "Paste into the EvalHub benchmark's configuration."), block, copyButton("Copy test_data_ref", () => text, block));
      } else {
        out.push(h("p", { class: "muted" }, res.test_data_ref_problem || "There is no test_data_ref for this export."));
      }
      if (res.warning_count) out.push(h("h2", null, `Left out (${fmtInt(res.warning_count)})`), h("ul", null, res.warnings.map((w) => h("li", null, w))));
      out.push(h("details", null, h("summary", null, "The answer as the API gives it"), codeBlock(JSON.stringify(res, null, 2), "json")));
      replace(result, out);
    } catch (err) {
      replace(result, errorBox(err));
    }
  } },
    field("Format", format),
    sel.el,
    extras.length ? h("fieldset", null, h("legend", null, "EvalHub"), h("p", { class: "muted" }, EVALHUB), extras.map((x) => field(x.name, x.input, x.description))) : null,
    h("button", { type: "submit" }, "Export"));
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", h("a", { href: paths.version(id, ref) }, ref), " / export"),
    h("h1", { tabindex: "-1" }, `Export ${id}@${ref}`),
    h("p", { class: "muted" }, "Writes the version (or the selection) in a format and hands it to you as a download; asking again for the same export returns it without writing."),
    form,
    result,
  );
  ctx.ready();
}
