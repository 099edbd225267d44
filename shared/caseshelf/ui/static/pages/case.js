// One case: inputs, expectations, graders, environment and files, each shown as text (code
// highlighted, Markdown rendered into DOM nodes, binary files as size + digest + download).
//
// The case comes from the subset route (`ids: [id]`, `cases=true`), which reads that one case.
// A registered case names its companion files by digest and size; a file's body is read on
// demand from the version's file route (`GET …/files/{digest}`).

import { get, getBytes, paths, post } from "../api.js";
import { codeBlock, jsonBlock, languageOf } from "../highlight.js";
import { renderMarkdown } from "../markdown.js";
import { fmtBytes, fmtInt, h, replace } from "../dom.js";
import { errorBox } from "../app.js";

function section(title, ...body) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("section", { "aria-labelledby": id, class: "case-section" }, h("h2", { id }, title), body);
}

function textBlock(text) {
  return h("pre", { class: "code text", tabindex: "0" }, text);
}

function valueBlock(value) {
  return typeof value === "string" ? textBlock(value) : jsonBlock(value);
}

function isMarkdown(path) {
  return /\.(md|markdown|mdown)$/i.test(path);
}

// A file body: Markdown rendered, code highlighted, anything else as plain text.
export function fileBody(path, text) {
  if (isMarkdown(path)) {
    const raw = codeBlock(text, "");
    const rendered = renderMarkdown(text);
    const toggle = h("button", { type: "button", class: "secondary", "aria-pressed": "false" }, "Show source");
    raw.hidden = true;
    toggle.addEventListener("click", () => {
      raw.hidden = !raw.hidden;
      rendered.hidden = !raw.hidden;
      toggle.setAttribute("aria-pressed", String(!raw.hidden));
      toggle.textContent = raw.hidden ? "Show source" : "Show rendered";
    });
    return h("div", null, toggle, rendered, raw);
  }
  return codeBlock(text, languageOf(path));
}

function utf8OrNull(bytes) {
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return /[\u0000-\u0008\u000e-\u001f]/.test(text.slice(0, 8192)) ? null : text;
  } catch {
    return null;
  }
}

function downloadButton(path, bytes) {
  return h("button", { type: "button", class: "secondary", onclick: () => {
    const url = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
    const a = h("a", { href: url, download: path.split("/").pop() });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  } }, `Download ${path.split("/").pop()}`);
}

// One file of a version (a case's companion file or a shared file): its size and digest, and
// on demand its body from `GET …/files/{digest}`: text highlighted or rendered, anything else
// as its size and a download. Over the one-file limit the API answers 413, shown as it is.
export function fileViewer(id, v, path, f, includeDeleted) {
  const body = h("div", { class: "file-body" });
  const show = h("button", { type: "button", class: "secondary" }, `Show ${path}`);
  show.addEventListener("click", async () => {
    show.disabled = true;
    replace(body, h("p", { class: "muted", role: "status" }, "Reading…"));
    try {
      const got = await getBytes(paths.file(id, v.version, f.digest), { include_deleted: includeDeleted || undefined });
      show.hidden = true;
      const text = got.contentType.startsWith("text/") ? utf8OrNull(got.bytes) : null;
      replace(body, text !== null ? fileBody(path, text) : h("p", null, `Binary file, ${fmtBytes(got.bytes.length)}. `, downloadButton(path, got.bytes)));
    } catch (err) {
      replace(body, errorBox(err));
      show.disabled = false;
    }
  });
  return h("div", { class: "panel", "data-file": path },
    h("h3", null, h("code", null, path)),
    h("p", { class: "muted" }, `${fmtBytes(f.size)} · `, h("span", { class: "mono" }, f.digest || ""), " "),
    show,
    body);
}

function filesSection(id, v, c, includeDeleted) {
  const entries = Object.entries(c.files || {});
  if (!entries.length) return null;
  return section(`Files (${fmtInt(entries.length)})`, entries.map(([path, f]) => fileViewer(id, v, path, f, includeDeleted)));
}

const MARKDOWN_HINTS = /```|^#{1,6} |\*\*[^*]+\*\*|\]\([^)]+\)|^\s*[-*] /m;

// A text as it is, with a toggle to read it rendered when it looks like Markdown.
function textOrMarkdown(text) {
  const plain = textBlock(text);
  if (!MARKDOWN_HINTS.test(text)) return plain;
  let rendered = null;
  const toggle = h("button", { type: "button", class: "secondary", "aria-pressed": "false" }, "Show as Markdown");
  toggle.addEventListener("click", () => {
    rendered = rendered || renderMarkdown(text);
    if (!rendered.isConnected) plain.after(rendered);
    const showing = plain.hidden;
    plain.hidden = !showing;
    rendered.hidden = showing;
    toggle.setAttribute("aria-pressed", String(!showing));
    toggle.textContent = showing ? "Show as Markdown" : "Show as text";
  });
  return h("div", null, toggle, plain);
}

function inputsSection(c) {
  const inp = c.inputs || {};
  const parts = [];
  if (typeof inp.user === "string") parts.push(h("h3", null, "user"), textOrMarkdown(inp.user));
  else if (Array.isArray(inp.user)) parts.push(h("h3", null, `user (${inp.user.length} turns)`), h("ol", null, inp.user.map((t) => h("li", null, valueBlock(t)))));
  else if (inp.user && inp.user.ref) parts.push(h("h3", null, "user"), h("p", null, "From the file ", h("code", null, inp.user.ref), " (see Files)."));
  for (const key of Object.keys(inp)) {
    if (key === "user") continue;
    parts.push(h("h3", null, key), valueBlock(inp[key]));
  }
  return section("Inputs", parts.length ? parts : h("p", { class: "muted" }, "No inputs."));
}

function expectationsSection(c) {
  const e = c.expectations || {};
  const parts = [];
  if ("ground_truth" in e) parts.push(h("h3", null, "ground truth"), valueBlock(e.ground_truth));
  for (const key of Object.keys(e)) if (key !== "ground_truth") parts.push(h("h3", null, key), jsonBlock(e[key]));
  return section("Expectations", parts.length ? parts : h("p", { class: "muted" }, "No expectations."));
}

function gradersSection(c) {
  const graders = c.graders || [];
  return section("Graders", graders.length
    ? h("ul", null, graders.map((g) => h("li", null, h("strong", null, g.id), g.config && Object.keys(g.config).length ? jsonBlock(g.config) : null)))
    : h("p", { class: "muted" }, "No graders."));
}

function environmentSection(c) {
  const parts = [];
  const env = c.env;
  if (env) {
    parts.push(h("p", null, "kind: ", h("span", { class: "badge" }, env.kind)));
    if (env.system) parts.push(h("h3", null, "system prompt"), textBlock(env.system));
    if (env.start_url) parts.push(h("h3", null, "start URL"), h("p", null, h("code", null, env.start_url)));
    const src = env.source;
    if (src && src.git) parts.push(h("h3", null, "git"), h("p", null, h("code", null, src.git), ` at ${src.ref || "HEAD"}`));
    if (src && src.path) parts.push(h("h3", null, "path"), h("p", null, h("code", null, src.path)));
    if (src && src.files) {
      const files = Object.entries(src.files);
      parts.push(h("h3", null, `repository files (${files.length})`));
      for (const [path, text] of files) parts.push(h("div", { class: "panel", "data-env-file": path }, h("h3", null, h("code", null, path)), fileBody(path, text)));
    }
    if (env.setup && env.setup.length) parts.push(h("h3", null, "setup"), codeBlock(env.setup.join("\n"), "shell"));
    for (const key of ["placement", "display", "screenshot_path"]) if (env[key]) parts.push(h("p", null, `${key}: `, h("code", null, env[key])));
  }
  if (c.image) parts.push(h("h3", null, "image"), h("p", null, h("code", null, c.image)));
  if (c.resources) parts.push(h("h3", null, "resources"), jsonBlock(c.resources));
  if (c.network) parts.push(h("h3", null, "network"), jsonBlock(c.network));
  if (c.timeout_sec) parts.push(h("p", null, `timeout: ${fmtInt(c.timeout_sec)} s`));
  return section("Environment", parts.length ? parts : h("p", { class: "muted" }, "No environment: the default prompt case (timeout 1,800 s)."));
}

export async function caseRoute(ctx) {
  const [id, ref, caseId] = ctx.params;
  const includeDeleted = ctx.query.get("include_deleted") === "true";
  ctx.title(`${caseId} · ${id}@${ref}`);
  const [v, sel] = await Promise.all([
    get(paths.version(id, ref), { include_deleted: includeDeleted || undefined }),
    post(`${paths.version(id, ref)}/subset`, { ids: [caseId] }, { cases: true, include_deleted: includeDeleted || undefined }),
  ]);
  if (!ctx.alive()) return;
  const c = (sel.data.cases || [])[0];
  if (!c) throw new Error(`no case ${caseId} in ${id}@${ref}`);
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", h("a", { href: paths.version(id, v.version) }, v.version), " / ", caseId),
    h("h1", { tabindex: "-1" }, caseId),
    h("p", null, (c.tags || []).map((t) => h("span", { class: "badge" }, t))),
    inputsSection(c),
    expectationsSection(c),
    gradersSection(c),
    environmentSection(c),
    filesSection(id, v, c, includeDeleted),
    c.metadata && Object.keys(c.metadata).length ? section("Metadata", jsonBlock(c.metadata)) : null,
    h("details", null, h("summary", null, "The case as stored (canonical JSON)"), jsonBlock(c)),
  );
  ctx.ready();
}
