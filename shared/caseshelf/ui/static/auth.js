// Sign-in for a deployed UI: Cognito's hosted sign-in page, the authorization-code flow with
// PKCE (a public client: there is no client secret anywhere in the page). The ID token is kept
// in this tab's sessionStorage and sent as `Authorization` to the API, whose Cognito authorizer
// checks it and takes the tenant from its `custom:tenant` claim.
//
// The local server has no sign-in (config.auth is null there). Bound to anything but loopback it
// asks for its own token instead: `caseshelf serve` prints a URL with `?token=…`; the page takes
// the token from there on its first load, keeps it in this tab's sessionStorage, removes it from
// the address bar (and so from the history), and sends it as `Authorization: Bearer …` on every
// API call. Never a cookie: a cookie would go with a form another page posts here.

const SERVER_TOKEN = "caseshelf.serverToken";

const KEY = "caseshelf.auth";
const PENDING = "caseshelf.auth.pending";
let auth = null;

function b64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString(n) {
  const bytes = new Uint8Array(n);
  crypto.getRandomValues(bytes);
  return b64url(bytes);
}

export function decodeClaims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = decodeURIComponent(
      Array.from(atob(part), (c) => `%${c.charCodeAt(0).toString(16).padStart(2, "0")}`).join(""),
    );
    return JSON.parse(json);
  } catch {
    return null;
  }
}

function stored() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY) || "null");
  } catch {
    return null;
  }
}

// Called first at start: a `?token=` in the address is the local server's token.
export function takeServerToken() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  if (token) sessionStorage.setItem(SERVER_TOKEN, token);
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}

export function serverToken() {
  return sessionStorage.getItem(SERVER_TOKEN);
}

// The `Authorization` header of an API call: the signed-in user's ID token on a deployment,
// the server's token on a local server that asks for one, else none.
export function authorization() {
  const token = currentToken();
  if (token) return token;
  const server = serverToken();
  return server ? `Bearer ${server}` : null;
}

export function currentToken() {
  if (!auth) return null;
  const s = stored();
  if (!s || !s.id_token) return null;
  const claims = decodeClaims(s.id_token);
  if (!claims || (claims.exp && claims.exp * 1000 < Date.now() + 30_000)) return null;
  return s.id_token;
}

// Who the page acts for: the token's claims when signed in; null on the local server.
export function whoAmI() {
  const token = currentToken();
  if (!token) return null;
  const c = decodeClaims(token) || {};
  const roles = String(c["custom:roles"] || "")
    .split(",")
    .map((r) => r.trim())
    .filter(Boolean);
  return { principal: c.sub || c["cognito:username"], tenant: c["custom:tenant"], roles, email: c.email };
}

export function authEnabled() {
  return Boolean(auth);
}

export async function signIn() {
  const verifier = randomString(48);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  const state = randomString(16);
  sessionStorage.setItem(
    PENDING,
    JSON.stringify({ verifier, state, back: location.pathname + location.search }),
  );
  const q = new URLSearchParams({
    response_type: "code",
    client_id: auth.client_id,
    redirect_uri: auth.redirect_uri,
    scope: "openid email profile",
    code_challenge_method: "S256",
    code_challenge: b64url(new Uint8Array(digest)),
    state,
  });
  location.assign(`${auth.domain}/oauth2/authorize?${q}`);
}

export function signOut() {
  sessionStorage.removeItem(KEY);
  const q = new URLSearchParams({ client_id: auth.client_id, logout_uri: auth.redirect_uri });
  location.assign(`${auth.domain}/logout?${q}`);
}

// Called once at start: sets the config and finishes a sign-in that came back with a code.
export async function initAuth(config) {
  auth = config && config.domain && config.client_id ? config : null;
  if (!auth) return;
  const params = new URLSearchParams(location.search);
  const code = params.get("code");
  const state = params.get("state");
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  if (!code || !pending) return;
  sessionStorage.removeItem(PENDING);
  if (state !== pending.state) throw new Error("sign-in answer does not match the request (state)");
  const resp = await fetch(`${auth.domain}/oauth2/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      client_id: auth.client_id,
      code,
      redirect_uri: auth.redirect_uri,
      code_verifier: pending.verifier,
    }),
  });
  if (!resp.ok) throw new Error(`sign-in failed: the token endpoint answered ${resp.status}`);
  const tokens = await resp.json();
  sessionStorage.setItem(KEY, JSON.stringify({ id_token: tokens.id_token }));
  history.replaceState(null, "", pending.back || "/");
}
