// The one way the UI talks to the registry: the HTTP API, JSON in and out, with the signed-in
// user's token where the deployment needs one. Errors are the API's problem+json, kept whole.

import { authorization } from "./auth.js";

let config = { api: "", auth: null, openapi: "/openapi.json" };

export function setConfig(c) {
  config = { ...config, ...c };
}

export function getConfig() {
  return config;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

function withQuery(path, query) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v === undefined || v === null || v === "") continue;
    params.set(k, typeof v === "boolean" ? (v ? "true" : "false") : String(v));
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

export function enc(segment) {
  return encodeURIComponent(segment);
}

export async function request(method, path, { query, body, signal } = {}) {
  const headers = { Accept: "application/json" };
  const token = authorization();
  if (token) headers.Authorization = token;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const resp = await fetch(config.api + withQuery(path, query), {
    method,
    headers,
    body: payload,
    signal,
    credentials: "omit",
    // The page and the API answer at the same paths (a dataset page is /datasets/x, and so is
    // the dataset): an API answer kept in the HTTP cache could be shown for the page on "back".
    cache: "no-store",
  });
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text.slice(0, 500) };
    }
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return { status: resp.status, data };
}

// A body that is not JSON (a file of a case): its bytes and content type. `Accept` names
// octet-stream so that API Gateway sends a binary body as bytes, not base64.
export async function getBytes(path, query) {
  const headers = { Accept: "application/octet-stream, text/plain;q=0.9, */*;q=0.1" };
  const token = authorization();
  if (token) headers.Authorization = token;
  const resp = await fetch(config.api + withQuery(path, query), { headers, credentials: "omit", cache: "no-store" });
  if (!resp.ok) {
    let problem = null;
    try {
      problem = await resp.json();
    } catch {
      problem = null;
    }
    throw new ApiError(resp.status, problem);
  }
  return { contentType: resp.headers.get("Content-Type") || "", bytes: new Uint8Array(await resp.arrayBuffer()) };
}

// Who the API takes the caller for (GET /me: tenant, principal, roles), asked once per load.
let me = null;
export function caller() {
  if (!me) {
    me = get("/me").catch((err) => {
      me = null;
      throw err;
    });
  }
  return me;
}

export const get = (path, query, opts) => request("GET", path, { ...opts, query }).then((r) => r.data);
export const post = (path, body, query) => request("POST", path, { body, query });
export const put = (path, body) => request("PUT", path, { body });
export const del = (path) => request("DELETE", path);

// A job (a 202's answer) followed with GET /jobs/{id} until it ends, `show(job)` called on each
// look meanwhile. The first look is 100 ms after the start and each next one twice as far, up
// to a second apart: a small job is seen done at once, a long one is asked about once a second.
// The ended job; null when `alive()` says the page was left.
export async function followJob(job, show, alive = () => true) {
  let wait = 100;
  while (job.state !== "succeeded" && job.state !== "failed") {
    if (show) show(job);
    await new Promise((resolve) => setTimeout(resolve, wait));
    if (!alive()) return null;
    wait = Math.min(2 * wait, 1000);
    job = await get(job.url || `/jobs/${enc(job.id)}`);
  }
  return job;
}

// A file to a presigned PUT URL (S3, or the local server's /_uploads/<token>).
export async function upload(url, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable && onProgress) onProgress(e.loaded, e.total);
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve();
      else {
        let problem = null;
        try {
          problem = JSON.parse(xhr.responseText);
        } catch {
          problem = { detail: xhr.responseText.slice(0, 300) };
        }
        reject(new ApiError(xhr.status, problem));
      }
    };
    xhr.onerror = () => reject(new ApiError(0, { detail: "the upload failed (network)" }));
    xhr.send(file);
  });
}

// Refs and ids in the UI's own paths.
export const paths = {
  dataset: (id) => `/datasets/${enc(id)}`,
  version: (id, ref) => `/datasets/${enc(id)}/versions/${enc(ref)}`,
  file: (id, ref, digest) => `/datasets/${enc(id)}/versions/${enc(ref)}/files/${enc(digest)}`,
  stats: (id, ref) => `/datasets/${enc(id)}/versions/${enc(ref)}/stats`,
  kase: (id, ref, caseId) => `/datasets/${enc(id)}/versions/${enc(ref)}/cases/${enc(caseId)}`,
  diff: (id, base, candidate) =>
    `/datasets/${enc(id)}/diff?base=${enc(base)}&candidate=${enc(candidate)}`,
  subset: (id, ref) => `/datasets/${enc(id)}/versions/${enc(ref)}/subset`,
  exportPanel: (id, ref) => `/datasets/${enc(id)}/versions/${enc(ref)}/export`,
};
