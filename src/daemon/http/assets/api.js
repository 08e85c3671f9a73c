/* The HTTP API under /api/v1: one fetch per call, the CSRF token on writes, failures as
 * ApiError; a 401 sends the page to the login. */

export class ApiError extends Error {
  constructor(status, code, message, data) {
    super(message);
    this.status = status;
    this.code = code;
    this.data = data;
  }
}
let csrfToken = null;
function csrf() {
  if (csrfToken === null) {
    const meta = document.querySelector('meta[name="csrf-token"]');
    csrfToken = meta ? meta.getAttribute('content') || '' : '';
  }
  return csrfToken;
}
let leaving = false;
function toLogin() {
  if (leaving) return;
  leaving = true;
  location.assign('/login');
}
export const enc = encodeURIComponent;
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '' || v === false) continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}
/** One API call. The body of a success is the method's result, as on the socket. */
export async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET' && method !== 'HEAD') init.headers['X-CSRF-Token'] = csrf();
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, null, `the daemon did not answer (${error.message})`);
  }
  if (response.status === 401) {
    toLogin();
    throw new ApiError(401, null, 'signed out');
  }
  const text = await response.text();
  let json = null;
  if (text) {
    try { json = JSON.parse(text); } catch (_) { json = null; }
  }
  if (!response.ok) {
    const e = json && json.error;
    throw new ApiError(response.status, e ? e.code : null, (e && e.message) || `HTTP ${response.status}${text && !json ? `: ${text.slice(0, 200)}` : ''}`, e ? e.data : null);
  }
  return json;
}
export const GET = (path) => api('GET', path);
