// One case: inputs, expectations, graders, environment and files, each shown as text (strings
// with their line breaks, objects as named fields, code highlighted, Markdown rendered into DOM
// nodes, binary files as size + digest + download). More than a few files are a tree, one file
// open at a time.
//
// The case is found by the cases route's search by id (`?q=<id>&by=id`, the exact id among
// the matches, paging on while there are more); an id the version does not hold is a page of
// its own saying so. A registered case names its companion files by digest and size; a file's
// body is read on demand from the version's file route (`GET …/files/{digest}`).

import { get, getBytes, paths } from "../api.js";
import { codeBlock, jsonBlock, languageOf } from "../highlight.js";
import { renderMarkdown } from "../markdown.js";
import { fmtBytes, fmtInt, h, replace } from "../dom.js";
import { NotFoundPage, errorBox } from "../app.js";

// A case's files are a tree (one open at a time) above this many.
const TREE_ABOVE = 3;

function section(title, ...body) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("section", { "aria-labelledby": id, class: "case-section" }, h("h2", { id }, title), body);
}

function textBlock(text) {
  return h("pre", { class: "code text", tabindex: "0" }, text);
}

// A value as people read it: a string as its text (line breaks kept), a number, true, false or
// null as written, a short list of plain values on one line, anything else as named fields.
export function valueView(value, depth = 0) {
  if (typeof value === "string") return depth && value.length <= 80 && !value.includes("\n") ? h("span", { class: "mono" }, value) : textBlock(value);
  if (value === null || typeof value !== "object") return h("code", null, JSON.stringify(value));
  if (depth > 6) return jsonBlock(value);
  if (Array.isArray(value)) {
    const plain = value.every((v) => v === null || typeof v !== "object") && !value.some((v) => typeof v === "string" && v.includes("\n"));
    if (!value.length || (plain && JSON.stringify(value).length <= 120)) return h("code", null, JSON.stringify(value));
    return h("ol", { class: "value", start: "0" }, value.map((v) => h("li", null, valueView(v, depth + 1))));
  }
  const keys = Object.keys(value);
  if (!keys.length) return h("code", null, "{}");
  return h("dl", { class: "value" }, keys.map((k) => [h("dt", null, k), h("dd", null, valueView(value[k], depth + 1))]));
}

function valueBlock(value) {
  return valueView(value);
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
export function fileViewer(id, v, path, f, includeDeleted, { autoload = false } = {}) {
  const body = h("div", { class: "file-body" });
  const show = h("button", { type: "button", class: "secondary" }, `Show ${path}`);
  if (autoload) queueMicrotask(() => show.click());
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

// Files as a tree of their directories beside the one file open: [{path, open: () => el}].
export function fileTree(label, files) {
  const pane = h("div", { class: "open-file", "aria-live": "polite" });
  const buttons = new Map();
  const select = (path) => {
    for (const [p, b] of buttons) b.setAttribute("aria-current", String(p === path));
    replace(pane, files.find((f) => f.path === path).open());
  };
  const root = { dirs: new Map(), files: [] };
  for (const f of files) {
    const parts = f.path.split("/");
    let node = root;
    for (const dir of parts.slice(0, -1)) {
      if (!node.dirs.has(dir)) node.dirs.set(dir, { dirs: new Map(), files: [] });
      node = node.dirs.get(dir);
    }
    node.files.push({ name: parts[parts.length - 1], path: f.path });
  }
  const list = (node) => h("ul", null,
    [...node.dirs.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, child]) => h("li", null, h("span", { class: "dir" }, `${name}/`), list(child))),
    node.files.sort((a, b) => a.name.localeCompare(b.name)).map((f) => {
      const b = h("button", { type: "button", "data-tree-file": f.path, title: f.path, onclick: () => select(f.path) }, f.name);
      buttons.set(f.path, b);
      return h("li", null, b);
    }));
  const el = h("div", { class: "filetree" }, h("nav", { "aria-label": label }, list(root)), pane);
  if (files.length) select(files.map((f) => f.path).sort()[0]);
  return el;
}

function filesSection(id, v, c, includeDeleted) {
  const entries = Object.entries(c.files || {});
  if (!entries.length) return null;
  const title = `Files (${fmtInt(entries.length)})`;
  if (entries.length <= TREE_ABOVE) return section(title, entries.map(([path, f]) => fileViewer(id, v, path, f, includeDeleted)));
  return section(title, fileTree("Files", entries.map(([path, f]) => ({ path, open: () => fileViewer(id, v, path, f, includeDeleted, { autoload: true }) }))));
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
  for (const key of Object.keys(e)) if (key !== "ground_truth") parts.push(h("h3", null, key), valueView(e[key]));
  return section("Expectations", parts.length ? parts : h("p", { class: "muted" }, "No expectations."));
}

function gradersSection(c) {
  const graders = c.graders || [];
  return section("Graders", graders.length
    ? h("ul", null, graders.map((g) => h("li", null, h("strong", null, g.id), g.config && Object.keys(g.config).length ? valueView(g.config) : null)))
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
      const card = (path, text) => h("div", { class: "panel", "data-env-file": path }, h("h3", null, h("code", null, path)), fileBody(path, text));
      if (files.length <= TREE_ABOVE) for (const [path, text] of files) parts.push(card(path, text));
      else parts.push(fileTree("Repository files", files.map(([path, text]) => ({ path, open: () => card(path, text) }))));
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

// The case with this exact id: the id search's matches, page after page, until it is found.
async function findCase(id, ref, caseId, includeDeleted) {
  let cursor;
  do {
    const page = await get(`${paths.version(id, ref)}/cases`, { q: caseId, by: "id", limit: 100, cursor, include_deleted: includeDeleted || undefined });
    const hit = page.items.find((c) => c.id === caseId);
    if (hit) return hit.oversized ? get(hit.oversized.href, { include_deleted: includeDeleted || undefined }) : hit;
    cursor = page.next_cursor;
  } while (cursor);
  return null;
}

export async function caseRoute(ctx) {
  const [id, ref, caseId] = ctx.params;
  const includeDeleted = ctx.query.get("include_deleted") === "true";
  ctx.title(`${caseId} · ${id}@${ref}`);
  const v = await get(paths.version(id, ref), { include_deleted: includeDeleted || undefined });
  const c = caseId.trim() ? await findCase(id, v.version, caseId, includeDeleted) : null;
  if (!ctx.alive()) return;
  if (!c) throw new NotFoundPage(`no case '${caseId}' in ${id}@${v.version}`, { href: paths.version(id, v.version), label: `Back to ${id}@${v.version}` });
  if (c.url && !c.inputs) {
    // A case too large for an answer: the API links it alone.
    replace(ctx.main, h("h1", { tabindex: "-1", class: "id" }, caseId), h("p", null, `This case is ${fmtBytes(c.bytes)}, too large to show here: `, h("a", { href: c.url, download: `${caseId}.json` }, "download it")));
    ctx.ready();
    return;
  }
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, h("a", { href: "/datasets" }, "Datasets"), " / ", h("a", { href: paths.dataset(id) }, id), " / ", h("a", { href: paths.version(id, v.version) }, v.version), " / ", h("span", { class: "id" }, caseId)),
    h("h1", { tabindex: "-1", class: "id" }, caseId),
    h("p", null, (c.tags || []).map((t) => h("span", { class: "badge" }, t))),
    inputsSection(c),
    expectationsSection(c),
    gradersSection(c),
    environmentSection(c),
    filesSection(id, v, c, includeDeleted),
    c.metadata && Object.keys(c.metadata).length ? section("Metadata", valueView(c.metadata)) : null,
    h("details", null, h("summary", null, "The case as stored (canonical JSON)"), jsonBlock(c)),
  );
  ctx.ready();
}
