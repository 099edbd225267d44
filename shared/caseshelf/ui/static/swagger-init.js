// Swagger UI over the merged OpenAPI document of every function (no inline script: the page's
// Content-Security-Policy allows scripts from this origin only).
"use strict";
// The local server's token (see auth.js): taken from `?token=` or from this tab's sessionStorage,
// where the UI's own pages keep it; sent on every call the page tries out, unless the
// "Authorize" dialog gave another.
const SERVER_TOKEN = "caseshelf.serverToken";
(function takeServerToken() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  if (token) sessionStorage.setItem(SERVER_TOKEN, token);
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
})();

function withServerToken(req) {
  const token = sessionStorage.getItem(SERVER_TOKEN);
  if (token && !req.headers.Authorization) req.headers.Authorization = `Bearer ${token}`;
  return req;
}

window.ui = SwaggerUIBundle({
  requestInterceptor: withServerToken,
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis],
  validatorUrl: null,
});
