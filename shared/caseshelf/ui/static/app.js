// The caseshelf web UI: one page that draws what its path names, from the HTTP API.
//
// Paths are the same as the things they show (/datasets/gsm8k/versions/1.0.0, a diff at
// /datasets/gsm8k/diff?base=1.1.0&candidate=1.2.0), so every page can be linked to. Each page
// marks itself ready (performance mark "caseshelf:ready", body[data-ready]) once its first
// content is drawn and can be used; the benchmark measures that.

import { ApiError, getConfig, setConfig } from "./api.js";
import { authEnabled, currentToken, initAuth, signIn, signOut, takeServerToken, whoAmI } from "./auth.js";
import { h, replace } from "./dom.js";
import { caseRoute } from "./pages/case.js";
import { datasetRoute } from "./pages/dataset.js";
import { datasetsRoute } from "./pages/datasets.js";
import { diffRoute } from "./pages/diff.js";
import { exportRoute } from "./pages/export.js";
import { importRoute } from "./pages/importer.js";
import { subsetRoute } from "./pages/subset.js";
import { versionRoute } from "./pages/version.js";

const SEG = "([^/]+)";
const ROUTES = [
  [/^\/$/, datasetsRoute],
  [/^\/datasets\/?$/, datasetsRoute],
  [/^\/import\/?$/, importRoute],
  [new RegExp(`^/datasets/${SEG}/?$`), datasetRoute],
  [new RegExp(`^/datasets/${SEG}/diff/?$`), diffRoute],
  [new RegExp(`^/datasets/${SEG}/versions/${SEG}/?$`), versionRoute],
  [new RegExp(`^/datasets/${SEG}/versions/${SEG}/subset/?$`), subsetRoute],
  [new RegExp(`^/datasets/${SEG}/versions/${SEG}/export/?$`), exportRoute],
  [new RegExp(`^/datasets/${SEG}/versions/${SEG}/cases/(.+?)/?$`), caseRoute],
];

let generation = 0;
let navigated = false; // the first page keeps the browser's focus; later ones move it to h1
const main = () => document.getElementById("main");

export function errorBox(err) {
  const problem = err instanceof ApiError ? err.problem : {};
  const status = err instanceof ApiError ? err.status : null;
  return h(
    "div",
    { class: "error", role: "alert" },
    h("strong", null, status ? `${status} ${problem.title || "Error"}` : "Error"),
    h("p", null, (err && err.message) || String(err)),
    problem.field ? h("p", { class: "muted" }, `field: ${problem.field}`) : null,
  );
}

// Something the address names that does not exist (a dataset, a version, a case): its own
// page saying what is missing, with the path above it and a link back.
export class NotFoundPage extends Error {
  constructor(message, back) {
    super(message);
    this.back = back || null;
  }
}

// Where a page's address is, as links to each level above it: [{href, label}].
function levels(params, path) {
  const [id, ref, caseId] = params;
  const out = [{ href: "/datasets", label: "Datasets" }];
  if (!path.startsWith("/datasets/") || !id) return out;
  out.push({ href: `/datasets/${encodeURIComponent(id)}`, label: id });
  if (ref && path.includes("/versions/")) out.push({ href: `/datasets/${encodeURIComponent(id)}/versions/${encodeURIComponent(ref)}`, label: ref });
  if (caseId) out.push({ href: null, label: caseId });
  return out;
}

function notFoundPage(ctx, err, path) {
  const problem = err instanceof ApiError ? err.problem : {};
  const message = err instanceof NotFoundPage ? err.message : problem.detail || err.message;
  const trail = levels(ctx.params, path);
  // Back to the nearest level above that exists: the page's own guess, else one level up.
  const up = trail.length > 1 ? trail[trail.length - 2] : trail[0];
  const back = (err instanceof NotFoundPage && err.back) || { href: up.href || "/datasets", label: `Back to ${up.label}` };
  ctx.title("Not found");
  replace(
    ctx.main,
    h("div", { class: "crumbs" }, trail.map((t, i) => [i ? " / " : null, t.href ? h("a", { href: t.href }, t.label) : h("span", { class: "id" }, t.label)])),
    h("h1", { tabindex: "-1" }, "Not found"),
    h("div", { class: "error", role: "alert", "data-not-found": "" }, h("p", null, message)),
    problem.hint ? h("p", null, problem.hint) : null,
    h("p", null, h("a", { href: back.href, class: "button" }, back.label)),
  );
  ctx.ready();
}

export function navigate(url, { replace: replaceState = false } = {}) {
  navigated = true;
  if (replaceState) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  render();
}

function notFound(ctx) {
  ctx.title("Not found");
  replace(ctx.main, h("h1", { tabindex: "-1" }, "No such page"), h("p", null, h("a", { href: "/" }, "Back to the datasets")));
  ctx.ready();
}

function decode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

export async function render() {
  generation += 1;
  const mine = generation;
  const path = location.pathname;
  let route = notFound;
  let params = [];
  for (const [re, fn] of ROUTES) {
    const m = re.exec(path);
    if (m) {
      route = fn;
      params = m.slice(1).map(decode);
      break;
    }
  }
  const el = main();
  replace(el, h("p", { class: "muted", role: "status" }, "Loading…"));
  delete document.body.dataset.ready;
  const ctx = {
    main: el,
    params,
    query: new URLSearchParams(location.search),
    alive: () => mine === generation,
    title: (t) => {
      document.title = `${t} · caseshelf`;
    },
    ready: () => {
      if (mine !== generation) return;
      const heading = el.querySelector("h1");
      if (heading && navigated) heading.focus({ preventScroll: true });
      document.body.dataset.ready = route.name || "page";
      performance.mark("caseshelf:ready");
    },
  };
  try {
    await route(ctx);
  } catch (err) {
    if (mine !== generation) return;
    if (err instanceof NotFoundPage || (err instanceof ApiError && err.status === 404)) {
      notFoundPage(ctx, err, path);
      return;
    }
    replace(el, h("h1", { tabindex: "-1" }, "Something went wrong"), errorBox(err));
    ctx.ready();
  }
}

function onClick(event) {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const a = event.target.closest("a");
  if (!a || a.target || a.hasAttribute("download")) return;
  const href = a.getAttribute("href");
  if (href === "#main") {
    // The skip link: move focus to the page itself, without a hash change that re-renders it.
    event.preventDefault();
    document.getElementById("main").focus();
    return;
  }
  if (!href || !href.startsWith("/") || href.startsWith("//") || href.startsWith("/static/") || href === "/swagger") return;
  event.preventDefault();
  navigate(href);
  window.scrollTo(0, 0);
}

function header() {
  const who = whoAmI();
  const account = authEnabled()
    ? currentToken()
      ? h("span", { class: "account" }, h("span", null, `${who.email || who.principal} · ${who.tenant}`), " ", h("button", { type: "button", class: "secondary", onclick: signOut }, "Sign out"))
      : h("button", { type: "button", onclick: signIn }, "Sign in")
    : h("span", { class: "muted account" }, "local server");
  return h(
    "nav",
    { "aria-label": "Main" },
    h("a", { href: "/", class: "brand" }, "caseshelf"),
    h("a", { href: "/datasets" }, "Datasets"),
    h("a", { href: "/import" }, "Import"),
    authEnabled() ? null : h("a", { href: "/swagger" }, "API (Swagger)"),
    account,
  );
}

async function start() {
  takeServerToken();
  try {
    const resp = await fetch("/config.json", { headers: { Accept: "application/json" } });
    if (resp.ok) setConfig(await resp.json());
  } catch {
    /* the defaults: the API on this origin, no sign-in */
  }
  try {
    await initAuth(getConfig().auth);
  } catch (err) {
    replace(main(), errorBox(err));
  }
  replace(document.getElementById("top"), header());
  document.addEventListener("click", onClick);
  window.addEventListener("popstate", () => {
    navigated = true;
    render();
  });
  if (authEnabled() && !currentToken()) {
    replace(main(), h("h1", { tabindex: "-1" }, "Sign in"), h("p", null, "The registry needs you to sign in first."), h("button", { type: "button", onclick: signIn }, "Sign in"));
    return;
  }
  render();
}

start();
