/* corral dashboard: one plain script, no framework, no build step, nothing from another host.
 *
 * Map of this file:
 *   theme         applied before the first paint (the script is loaded in <head>, not deferred)
 *   dom           h() builds elements; every string from the daemon goes in as text, never HTML
 *   format        times, durations, argv, short ids, session states
 *   api           fetch of /api/v1 with the CSRF token on writes; errors as ApiError
 *   feeds         WebSockets on /api/v1/events that resume from the last seq seen; [data-testid=live]
 *   ui bits       dialogs (confirm), toasts, the one-second ticker
 *   pages         overview, session (transcript; a worktree session's panel: branch, diff
 *                 stat, merge, recreate, discard), projects, settings, history
 *   router        hash routes (#/, #/sessions/ID, #/projects, #/settings, #/history)
 *   boot
 *
 * The DOM contract is its data-testid names: the browser tests (tests/it/dashboard.rs) rely on
 * them.
 */
(() => {
  'use strict';

  // ---------------------------------------------------------------- theme
  const THEMES = ['system', 'light', 'dark'];
  const THEME_KEY = 'corral.theme';
  function applyTheme(theme) {
    const chosen = THEMES.includes(theme) ? theme : 'system';
    document.documentElement.setAttribute('data-theme', chosen);
    return chosen;
  }
  function rememberTheme(theme) {
    try { localStorage.setItem(THEME_KEY, theme); } catch (_) { /* private mode */ }
  }
  try { applyTheme(localStorage.getItem(THEME_KEY)); } catch (_) { applyTheme('system'); }

  // ---------------------------------------------------------------- dom
  /** An element: props set attributes/properties/listeners; children are nodes or text. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    let value;
    if (props) {
      for (const key of Object.keys(props)) {
        const v = props[key];
        if (v === undefined || v === null || v === false) continue;
        if (key === 'class') el.className = v;
        else if (key === 'testid') el.setAttribute('data-testid', v);
        else if (key === 'data') {
          for (const [dk, dv] of Object.entries(v)) if (dv !== undefined && dv !== null) el.dataset[dk] = String(dv);
        } else if (key === 'on') {
          for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
        } else if (key === 'text') el.textContent = String(v);
        else if (key === 'value') value = v;
        else if (key.startsWith('aria-') || key === 'role' || key === 'for' || key === 'list' || key === 'colspan' || key === 'form') {
          el.setAttribute(key, v === true ? 'true' : String(v));
        } else if (key in el && typeof el[key] !== 'function') el[key] = v;
        else el.setAttribute(key, v === true ? '' : String(v));
      }
    }
    append(el, children);
    if (value !== undefined) el.value = value; // after the options of a <select>
    return el;
  }
  function append(el, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false || child === true) continue;
      if (Array.isArray(child)) append(el, child);
      else if (child instanceof Node) el.appendChild(child);
      else el.appendChild(document.createTextNode(String(child)));
    }
  }
  /** Replaces an element's children (null and false are skipped, unlike replaceChildren). */
  function fill(el, ...children) {
    el.replaceChildren();
    append(el, children);
    return el;
  }
  /** Sets text only when it changed (no needless layout). */
  function setText(el, text) {
    const t = text === null || text === undefined ? '' : String(text);
    if (el.textContent !== t) el.textContent = t;
  }
  function setAttr(el, name, value) {
    const v = String(value);
    if (el.getAttribute(name) !== v) el.setAttribute(name, v);
  }
  const $ = (sel, root = document) => root.querySelector(sel);

  // ---------------------------------------------------------------- format
  const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const dayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  const pad2 = (n) => String(n).padStart(2, '0');

  function fmtTime(ms) {
    if (ms === null || ms === undefined) return '—';
    const d = new Date(ms);
    return d.toDateString() === new Date().toDateString() ? timeFmt.format(d) : dayFmt.format(d);
  }
  function fmtFull(ms) { return ms === null || ms === undefined ? '' : fullFmt.format(new Date(ms)); }
  function ago(ms, now = Date.now()) {
    if (ms === null || ms === undefined) return '—';
    const s = Math.max(0, Math.round((now - ms) / 1000));
    if (s < 5) return 'just now';
    if (s < 60) return `${s}s ago`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ago`;
    const hr = Math.floor(m / 60);
    if (hr < 24) return `${hr} h ago`;
    return `${Math.floor(hr / 24)} d ago`;
  }
  function dur(ms) {
    if (ms === null || ms === undefined || !isFinite(ms) || ms < 0) return '—';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${pad2(Math.floor(s % 60))}s`;
    return `${Math.floor(m / 60)}h ${pad2(m % 60)}m`;
  }
  /** A running clock: 0:07, 12:03, 1:02:03. */
  function clock(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
    return hh ? `${hh}:${pad2(mm)}:${pad2(ss)}` : `${mm}:${pad2(ss)}`;
  }
  /** What the CLI shows of an id: its first 18 characters (ShortIds' least). */
  const shortId = (id) => (id ? String(id).slice(0, 18) : '—');
  function firstLine(text) {
    if (text === null || text === undefined) return '';
    for (const line of String(text).split('\n')) {
      const t = line.trim();
      if (t && !t.startsWith('@fake ') && !t.includes('corral-title:')) return t;
    }
    return '';
  }
  function shellQuote(arg) {
    const s = typeof arg === 'string' ? arg : JSON.stringify(arg);
    return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
  }
  /** An argv (or a raw command text) as one shell-like line. */
  function argvLine(argv) {
    if (argv === null || argv === undefined) return '';
    if (Array.isArray(argv)) return argv.map(shellQuote).join(' ');
    return typeof argv === 'string' ? argv : JSON.stringify(argv);
  }
  const oneLine = (text) => String(text === null || text === undefined ? '' : text).replace(/\s*\n\s*/g, ' ⏎ ');
  const plural = (n, word, many) => `${n} ${n === 1 ? word : (many || word + 's')}`;

  // The daemon's words for a session (store/overview.rs computes them; this page never does).
  const STATES = ['needs-you', 'working', 'waiting-for-slot', 'backing-off', 'queued', 'idle', 'failed', 'archived'];
  const STATE_RANK = Object.fromEntries(STATES.map((s, i) => [s, i]));
  const STATE_HELP = {
    'needs-you': 'the agent asked you something and waits for your answer',
    working: 'an engine runs a prompt',
    'waiting-for-slot': 'a prompt waits for a slot (the reason says what holds it)',
    'backing-off': 'a failed run waits before its retry',
    queued: 'prompts wait their turn',
    idle: 'answered; waits for a prompt',
    failed: 'the last prompt failed',
    archived: 'archived',
  };
  /** A badge: colour from data-state, and the word itself. */
  function stateBadge(state, props = {}) {
    const word = state || 'unknown';
    return h('span', Object.assign({ class: 'state', data: { state: word }, title: STATE_HELP[word] || '' }, props), word);
  }
  function fullAccessBadge() {
    return h('span', { class: 'badge warn-full', testid: 'full-access-warning', title: 'Engines of this project run without sandbox or approvals' }, 'full access');
  }

  /** `reason`, with a countdown to `until` when there is one (backing off). */
  function reasonText(reason, until, now = Date.now()) {
    if (!until) return reason || '';
    const left = Math.max(0, until - now);
    return `${reason || ''} · ${left ? `next try in ${Math.ceil(left / 1000)} s` : 'trying again'}`;
  }

  /** What a slot waiter waits for (a `held_by` / `blocker`), in words. */
  function describeBlocker(b) {
    if (!b) return 'nothing any more (granted meanwhile)';
    const who = (holder) => (holder ? (holder.label || shortId(holder.session)) : 'another session');
    switch (b.reason) {
      case 'project_lock': return `the project lock on ${b.project}, held by ${who(b.holder)}`;
      case 'group_lock': return `the lock of group ${b.group}, held by ${who(b.holder)}`;
      case 'engine_limit': return `a ${b.engine} slot (${b.running}/${b.limit} running)`;
      case 'total_limit': return `a slot under the total limit (${b.running}/${b.limit} running)`;
      case 'queue': return `its turn, behind ${who(b.holder)}`;
      default: return JSON.stringify(b);
    }
  }

  // ---------------------------------------------------------------- api
  class ApiError extends Error {
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
  const enc = encodeURIComponent;
  function qs(params) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v === undefined || v === null || v === '' || v === false) continue;
      p.set(k, String(v));
    }
    const s = p.toString();
    return s ? `?${s}` : '';
  }
  /** One API call. The body of a success is the method's result, as on the socket. */
  async function api(method, path, body) {
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
  const GET = (path) => api('GET', path);

  // ---------------------------------------------------------------- feeds
  /** Every open feed; [data-testid=live] is true when all of them are connected. */
  const feeds = new Set();
  function updateLive() {
    const el = document.querySelector('[data-testid="live"]');
    if (!el) return;
    const all = [...feeds];
    const live = all.length > 0 && all.every((f) => f.state === 'open');
    const anyRetrying = all.some((f) => f.failures > 0);
    setAttr(el, 'data-live', live ? 'true' : 'false');
    setText(el.querySelector('.live-word'), live ? 'live' : anyRetrying ? 'reconnecting' : 'connecting');
    el.title = live ? 'Receiving events as they happen' : 'Not connected to the event stream; retrying';
  }
  let authCheck = null;
  function checkAuthSoon() {
    if (authCheck) return;
    authCheck = GET('/api/v1/status').catch(() => {}).finally(() => { authCheck = null; });
  }

  /**
   * A WebSocket on /api/v1/events: one session's events (`session`) or the daemon's whole
   * feed. It remembers the last sequence number seen and reconnects with `after` set to it,
   * so nothing is missed or repeated; `events.lagged` makes it resume from `resume_after`.
   */
  class Feed {
    constructor({ session = null, after = null, onEvent, onOpen }) {
      this.session = session;
      this.after = after;
      this.onEvent = onEvent;
      this.onOpen = onOpen || null;
      this.ws = null;
      this.state = 'connecting';
      this.failures = 0;
      this.opens = 0;
      this.closed = false;
      this.timer = null;
      this.resumeNow = false;
      feeds.add(this);
      this.connect();
      updateLive();
    }
    url() {
      const p = new URLSearchParams();
      if (this.session) p.set('session', this.session);
      if (this.after !== null && this.after !== undefined) p.set('after', String(this.after));
      return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/v1/events?${p}`;
    }
    setState(state) {
      this.state = state;
      updateLive();
    }
    connect() {
      if (this.closed) return;
      this.timer = null;
      let ws;
      try {
        ws = new WebSocket(this.url());
      } catch (_) {
        this.retryLater();
        return;
      }
      this.ws = ws;
      ws.onopen = () => {
        if (this.ws !== ws) return;
        this.failures = 0;
        this.opens += 1;
        this.setState('open');
        if (this.onOpen) this.onOpen(this.opens > 1);
      };
      ws.onmessage = (message) => { if (this.ws === ws) this.receive(message.data); };
      ws.onclose = () => {
        if (this.ws !== ws) return;
        this.ws = null;
        if (this.closed) return;
        this.setState('closed');
        this.retryLater();
      };
      ws.onerror = () => { /* a close follows */ };
    }
    receive(data) {
      let message;
      try { message = JSON.parse(data); } catch (_) { return; }
      const params = message.params || {};
      if (message.method === 'events.event') {
        const event = params.event || params;
        const seq = this.session ? event.seq : feedNumber(params, event);
        if (typeof seq === 'number') {
          if (this.after !== null && seq <= this.after) return; // seen before a reconnect
          this.after = seq;
        }
        this.onEvent(event, params);
      } else if (message.method === 'events.lagged') {
        // The server ends the stream after this notice; pick it up from the store at once.
        if (typeof params.resume_after === 'number') this.after = params.resume_after;
        this.resumeNow = true;
      }
    }
    retryLater() {
      if (this.closed || this.timer) return;
      let delay;
      if (this.resumeNow) {
        this.resumeNow = false;
        delay = 0;
      } else {
        this.failures += 1;
        delay = Math.min(10000, 400 * 2 ** Math.min(this.failures - 1, 5)) * (0.8 + Math.random() * 0.4);
        if (this.failures >= 2) checkAuthSoon(); // a 401 sends the page to the login
      }
      updateLive();
      this.timer = setTimeout(() => this.connect(), delay);
    }
    /** Reconnect now (the page came back, the network is back). */
    poke() {
      if (this.closed || this.state === 'open') return;
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
      if (!this.ws) this.connect();
    }
    stop() {
      this.closed = true;
      if (this.timer) clearTimeout(this.timer);
      if (this.ws) {
        const ws = this.ws;
        this.ws = null;
        try { ws.close(1000); } catch (_) { /* already closed */ }
      }
      feeds.delete(this);
      updateLive();
    }
  }
  /** The daemon-wide feed number of an event of the all-sessions stream. */
  function feedNumber(params, event) {
    for (const v of [params.feed_seq, event.feed_seq, params.seq_all, event.feed_id]) if (typeof v === 'number') return v;
    return null;
  }
  for (const name of ['online', 'focus']) window.addEventListener(name, () => feeds.forEach((f) => f.poke()));
  document.addEventListener('visibilitychange', () => { if (!document.hidden) feeds.forEach((f) => f.poke()); });

  /** The daemon-wide feed, open for the whole visit: the overview is updated from it. */
  const globalListeners = new Set();
  let globalFeed = null;
  let lastOverview = null;
  let overviewInFlight = null;
  function fetchOverview() {
    if (overviewInFlight) return overviewInFlight;
    overviewInFlight = GET('/api/v1/overview').then((ov) => {
      lastOverview = ov;
      return ov;
    }).finally(() => { overviewInFlight = null; });
    return overviewInFlight;
  }
  function startGlobalFeed() {
    if (globalFeed) return;
    const begin = (after) => {
      if (globalFeed) return;
      globalFeed = new Feed({
        after,
        onEvent: (event) => globalListeners.forEach((fn) => fn(event)),
        onOpen: (again) => { if (again) globalListeners.forEach((fn) => fn(null)); },
      });
    };
    (overviewInFlight || fetchOverview()).then(
      (ov) => begin(typeof ov.feed_seq === 'number' ? ov.feed_seq : null),
      () => setTimeout(() => { globalFeed = null; startGlobalFeed(); }, 3000),
    );
  }
  /** Listen to the daemon-wide feed; `fn(null)` means "reconnected: read everything again". */
  function onGlobal(fn) {
    globalListeners.add(fn);
    return () => globalListeners.delete(fn);
  }

  /** The header's *Needs you*: how many requests of agents wait for a person, kept by the
   * daemon-wide feed (read again on each approval event, and after a reconnect). */
  let needsYouRead = null;
  function refreshNeedsYou() {
    if (needsYouRead) return;
    needsYouRead = GET('/api/v1/approvals').then((pending) => {
      const link = $('[data-testid="needs-you"]');
      const n = Array.isArray(pending) ? pending.length : 0;
      setText($('[data-testid="needs-you-count"]'), String(n));
      link.hidden = n === 0;
      // The oldest request's session: where a click takes the person.
      if (n) link.setAttribute('href', `#/sessions/${enc(pending[0].session_id)}`);
    }, () => { /* an older daemon, or the page is leaving: the count stays */ }).finally(() => { needsYouRead = null; });
  }
  onGlobal((event) => {
    if (!event || /^approval\./.test(event.kind)) refreshNeedsYou();
  });

  // ---------------------------------------------------------------- ui bits
  /** Everything a page set up, undone when the page is left. */
  class Scope {
    constructor() { this.fns = []; this.alive = true; }
    add(fn) { this.fns.push(fn); return fn; }
    interval(fn, ms) { const t = setInterval(fn, ms); this.add(() => clearInterval(t)); }
    timeout(fn, ms) { const t = setTimeout(() => { if (this.alive) fn(); }, ms); this.add(() => clearTimeout(t)); return t; }
    feed(options) { const f = new Feed(options); this.add(() => f.stop()); return f; }
    on(target, name, fn, opts) { target.addEventListener(name, fn, opts); this.add(() => target.removeEventListener(name, fn, opts)); }
    dispose() {
      this.alive = false;
      for (const fn of this.fns.reverse()) { try { fn(); } catch (_) { /* keep going */ } }
      this.fns = [];
    }
  }

  function toast(message, kind = 'ok') {
    const box = $('#toasts');
    if (!box) return;
    const el = h('div', { class: `toast ${kind === 'error' ? 'error' : ''}`, role: kind === 'error' ? 'alert' : 'status' }, message);
    box.appendChild(el);
    setTimeout(() => el.remove(), kind === 'error' ? 8000 : 3500);
  }

  /** An explicit yes/no in a modal dialog (no window.confirm: it blocks, and tests drive it as DOM). */
  function confirmDialog({ title, body, ok = 'OK', danger = false }) {
    return new Promise((resolve) => {
      const okButton = h('button', { type: 'button', class: danger ? 'danger solid' : 'primary', testid: 'confirm-ok' }, ok);
      const cancel = h('button', { type: 'button', testid: 'confirm-cancel' }, 'Cancel');
      const dlg = h('dialog', { class: 'confirm', testid: 'confirm', 'aria-labelledby': 'confirm-title' },
        h('div', { class: 'dlg-head' }, h('h2', { id: 'confirm-title' }, title)),
        h('div', { class: 'dlg-body' }, body),
        h('div', { class: 'dlg-foot' }, cancel, okButton));
      let answered = false;
      const done = (yes) => {
        if (answered) return;
        answered = true;
        if (dlg.open) dlg.close();
        dlg.remove();
        resolve(yes);
      };
      okButton.addEventListener('click', () => done(true));
      cancel.addEventListener('click', () => done(false));
      dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
      dlg.addEventListener('close', () => done(false));
      document.body.appendChild(dlg);
      dlg.showModal();
      cancel.focus();
    });
  }

  /** The one clock: running elapsed times every second, "N min ago" every five. */
  let tick = 0;
  setInterval(() => {
    tick += 1;
    const now = Date.now();
    for (const el of document.querySelectorAll('[data-elapsed]')) setText(el, clock(now - Number(el.dataset.elapsed)));
    if (tick % 5 === 0) for (const el of document.querySelectorAll('[data-ago]')) setText(el, ago(Number(el.dataset.ago), now));
    // A session backing off counts down to its next try.
    for (const el of document.querySelectorAll('[data-until]')) setText(el, oneLine(reasonText(el.dataset.reason, Number(el.dataset.until), now)));
  }, 1000);
  const elapsedEl = (since, props = {}) => h('span', Object.assign({ class: 'elapsed', data: { elapsed: since }, title: `since ${fmtFull(since)}` }, props), clock(Date.now() - since));
  const agoEl = (ms) => (ms ? h('span', { data: { ago: ms }, title: fmtFull(ms) }, ago(ms)) : h('span', { class: 'faint' }, '—'));

  function pageHead(title, sub, ...right) {
    return h('div', { class: 'page-head' },
      h('div', null, h('h1', null, title), sub ? h('p', { class: 'sub' }, sub) : null),
      right.length ? h('div', { class: 'row' }, right) : null);
  }
  function panel(title, body, ...headRight) {
    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, typeof title === 'string' ? h('h2', null, title) : title, headRight.length ? h('div', { class: 'row' }, headRight) : null),
      body);
  }
  function errorBox(error) {
    return h('div', { class: 'panel' }, h('div', { class: 'panel-body' },
      h('p', { class: 'form-error', role: 'alert' }, error instanceof ApiError ? error.message : String(error))));
  }
  /** A table that scrolls sideways on narrow screens, or stacks into cards (`stack`). */
  function table({ cls = '', cols, head, stack = false, body }) {
    return h('div', { class: 'table-wrap' },
      h('table', { class: `${cls} ${stack ? 'stack' : ''}` },
        cols ? h('colgroup', null, cols.map((c) => h('col', { class: c }))) : null,
        h('thead', null, h('tr', null, head.map((t) => (typeof t === 'string' ? h('th', null, t) : t)))),
        body));
  }
  const td = (label, props, ...children) => h('td', Object.assign({ data: { label } }, props || {}), ...children);

  const ENGINES = ['codex', 'codex-app-server', 'claude', 'opencode', 'command', 'fake'];
  /** Engines that take steering and compaction (docs/protocol.md: session.steer, session.compact). */
  const STEERABLE = new Set(['codex-app-server']);

  // ---------------------------------------------------------------- overview
  /** Kinds after which the overview is read again (queued counts, slots, runs move). */
  const OVERVIEW_REFRESH_KINDS = /^(prompt\.|run\.|slot\.|app_server\.|approval\.|retry\.)/;
  /** The events after which a session's state may read differently. */
  const STATE_KINDS = OVERVIEW_REFRESH_KINDS;

  function pageOverview(main, scope, params) {
    document.title = 'Overview · corral';
    const rows = new Map(); // session id → { tr, cells, item, hay }
    let stateFilter = null;
    let query = '';
    const tbody = h('div', { role: 'rowgroup', class: 'srows' });
    const countEl = h('span', { class: 'count' });
    const chips = h('div', { class: 'summary', role: 'group', 'aria-label': 'Filter by state' });
    const chipEls = new Map();
    const filterInput = h('input', { type: 'search', placeholder: 'Filter sessions (press /)', title: 'Matches title, id, project, engine, state, reason', 'aria-label': 'Filter sessions', testid: 'session-filter' });
    if (params && params.get('q')) {
      filterInput.value = params.get('q');
      query = filterInput.value.trim().toLowerCase();
    }
    const emptyEl = h('p', { class: 'empty', hidden: true }, 'No session yet. Start one with the form below, or `corral session new`.');
    const noMatchEl = h('p', { class: 'empty', hidden: true }, 'No session matches the filter.');
    const slotsBody = h('div', { class: 'panel-body' }, h('p', { class: 'muted' }, 'Loading…'));
    const runsBody = h('div', { class: 'panel-body tight' });
    const gapsBody = h('div', { class: 'panel-body' });
    const recentBody = h('div', { class: 'panel-body tight' });
    const subEl = h('p', { class: 'sub' }, 'Loading…');

    for (const s of STATES) {
      const chip = h('button', { type: 'button', class: 'chip', 'aria-pressed': 'false', data: { state: s } }, stateBadge(s), h('span', { class: 'n' }, '0'));
      chip.addEventListener('click', () => {
        stateFilter = stateFilter === s ? null : s;
        for (const [name, el] of chipEls) setAttr(el, 'aria-pressed', name === stateFilter ? 'true' : 'false');
        applyFilter();
      });
      chipEls.set(s, chip);
      chips.appendChild(chip);
    }
    // "/" jumps to the filter, as in many lists.
    scope.on(document, 'keydown', (e) => {
      if (e.key !== '/' || e.ctrlKey || e.metaKey || e.altKey) return;
      const t = e.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
      e.preventDefault();
      filterInput.focus();
    });
    let filterTimer = null;
    filterInput.addEventListener('input', () => {
      clearTimeout(filterTimer);
      filterTimer = setTimeout(() => { query = filterInput.value.trim().toLowerCase(); applyFilter(); }, 80);
    });

    const newSession = newSessionForm(scope);
    const jump = h('button', { type: 'button', class: 'primary', testid: 'new-session-open' }, 'New session');
    jump.addEventListener('click', () => {
      newSession.scrollIntoView({ behavior: 'smooth', block: 'center' });
      const first = newSession.querySelector('select, input');
      if (first) first.focus({ preventScroll: true });
    });
    main.append(
      h('div', { class: 'page-head' }, h('div', null, h('h1', null, 'Overview'), subEl), jump),
      h('section', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', null, 'Sessions'), chips),
        h('div', { class: 'toolbar' }, filterInput, countEl),
        h('div', { class: 'sessions-scroll loading-rows' },
          // Rows are grid boxes, not <tr>: off-screen ones skip layout (content-visibility),
          // which a table cannot do; 1,000 rows lay out in a few ms instead of ~150.
          h('div', { class: 'sessions-list', role: 'table', 'aria-label': 'Sessions', testid: 'sessions' },
            h('div', { role: 'rowgroup', class: 'shead' },
              h('div', { role: 'row', class: 'srow' },
                ['Session', 'Project', 'Engine', 'State', 'Reason', 'Next action', 'Activity'].map((t) => h('div', { role: 'columnheader', class: 'scell' }, t)))),
            tbody),
          emptyEl, noMatchEl)),
      h('div', { class: 'grid cols-3', style: 'margin-top:18px' },
        panel('Slots', slotsBody),
        panel('Running now', runsBody),
        panel('New session', newSession)),
      h('div', { class: 'grid cols-2', style: 'margin-top:18px' },
        panel('Recent commands', recentBody, h('a', { href: '#/history' }, 'All history →')),
        panel('Gaps', gapsBody)),
    );
    // A click anywhere on a row opens its session (the title is the link for keyboards).
    tbody.addEventListener('click', (e) => {
      if (e.target.closest('a, button') || (window.getSelection && String(window.getSelection()))) return;
      const row = e.target.closest('[data-session-id]');
      if (row) location.hash = `#/sessions/${enc(row.dataset.sessionId)}`;
    });
    // Tooltips are made when pointed at: formatting 1,000 of them up front costs.
    tbody.addEventListener('mouseover', (e) => {
      if (!e.target.closest) return;
      const el = e.target.closest('[data-ago], .reason, .next, .state');
      if (!el || el.title) return;
      if (el.dataset.ago) el.title = fmtFull(Number(el.dataset.ago));
      else if (el.classList.contains('state')) el.title = STATE_HELP[el.dataset.state] || '';
      else el.title = el.classList.contains('reason') ? (rows.get(el.closest('[data-session-id]').dataset.sessionId) || { item: {} }).item.reason || '' : el.textContent;
    });

    function hayOf(item) {
      return [item.title, item.id, item.project, item.engine, item.state, item.reason, item.next_action, item.branch].join('\u0001').toLowerCase();
    }
    /** One row made once; every session's row is a clone of it (1,000 rows in a few ms). */
    let proto = null;
    function makeRow(item) {
      if (!proto) {
        const cell = (cls, props, ...children) => h('div', Object.assign({ role: 'cell', class: `scell ${cls}` }, props || {}), ...children);
        proto = h('div', { role: 'row', class: 'srow', testid: 'session-row' },
          // The sub line: the short id, then the branch of a worktree session.
          cell('c-title', null, h('a'), h('div', { class: 'sub mono' }, h('span'), h('span', { class: 'branch', testid: 'session-branch' }))),
          cell('c-project', null, h('span'), ' ', h('span')),
          cell('c-engine', null, h('span')),
          cell('c-state', { testid: 'session-state' }, h('span', { class: 'state' })),
          cell('c-reason', null, h('div', { class: 'reason' })),
          cell('c-next', null, h('div', { class: 'next clip' })),
          cell('c-last', null, h('span')));
      }
      const tr = proto.cloneNode(true);
      const [c0, c1, c2, c3, c4, c5, c6] = tr.children;
      const cells = {
        link: c0.firstChild, idSub: c0.lastChild.firstChild, branch: c0.lastChild.lastChild,
        project: c1.firstChild, badge: c1.lastChild,
        engine: c2.firstChild,
        state: c3.firstChild,
        reason: c4.firstChild,
        next: c5.firstChild,
        last: c6.firstChild,
      };
      tr.dataset.sessionId = item.id;
      cells.link.href = `#/sessions/${enc(item.id)}`;
      const row = { tr, cells, item: null, hay: '' };
      fillRow(row, item);
      return row;
    }
    /** A new row's cells: plain writes, no comparisons; tooltips are made on hover. */
    function firstFill(row, item) {
      const c = row.cells;
      c.link.textContent = item.title || '(untitled)';
      c.idSub.textContent = shortId(item.id);
      if (item.branch) c.branch.textContent = item.branch;
      c.project.textContent = item.project || '—';
      if (item.full_access) c.badge.appendChild(fullAccessBadge());
      c.engine.textContent = item.engine || '—';
      row.tr.dataset.state = item.state;
      c.state.dataset.state = item.state;
      c.state.textContent = item.state;
      c.reason.textContent = oneLine(reasonText(item.reason, item.until));
      if (item.until) { c.reason.dataset.until = String(item.until); c.reason.dataset.reason = item.reason; }
      c.next.textContent = item.next_action || '';
      if (item.last_activity_at) {
        c.last.dataset.ago = String(item.last_activity_at);
        c.last.textContent = ago(item.last_activity_at);
      } else c.last.textContent = '—';
      row.item = Object.assign({}, item);
      row.hay = hayOf(item);
    }
    function fillRow(row, item) {
      if (!row.item) { firstFill(row, item); return; }
      const old = row.item;
      const c = row.cells;
      if (old.title !== item.title) setText(c.link, item.title || '(untitled)');
      if (old.id !== item.id) { setText(c.idSub, shortId(item.id)); c.idSub.title = item.id; }
      if (old.branch !== item.branch) setText(c.branch, item.branch || '');
      if (old.project !== item.project) setText(c.project, item.project || '—');
      if (!!old.full_access !== !!item.full_access) fill(c.badge, item.full_access ? fullAccessBadge() : null);
      if (old.engine !== item.engine) setText(c.engine, item.engine || '—');
      if (old.state !== item.state) {
        setAttr(row.tr, 'data-state', item.state);
        setAttr(c.state, 'data-state', item.state);
        setText(c.state, item.state);
        c.state.removeAttribute('title');
      }
      if (old.reason !== item.reason || old.until !== item.until) {
        setText(c.reason, oneLine(reasonText(item.reason, item.until)));
        c.reason.removeAttribute('title');
        if (item.until) { c.reason.dataset.until = String(item.until); c.reason.dataset.reason = item.reason; } else delete c.reason.dataset.until;
      }
      if (old.next_action !== item.next_action) setText(c.next, item.next_action || '');
      if (old.last_activity_at !== item.last_activity_at) {
        if (item.last_activity_at) {
          c.last.dataset.ago = String(item.last_activity_at);
          c.last.removeAttribute('title'); // made on hover: Intl formatting 1,000 times costs
          setText(c.last, ago(item.last_activity_at));
        } else {
          delete c.last.dataset.ago;
          setText(c.last, '—');
        }
      }
      row.item = Object.assign({}, item);
      row.hay = hayOf(item);
    }
    function visible(row) {
      return (!stateFilter || row.item.state === stateFilter) && (!query || row.hay.includes(query));
    }
    function applyFilter() {
      if (pending && (stateFilter || query)) finishBuild();
      let shown = 0;
      for (const row of rows.values()) {
        const v = visible(row);
        if (row.tr.hidden === v) row.tr.hidden = !v;
        if (v) shown += 1;
      }
      const total = rows.size + (pending ? pending.length : 0);
      if (pending) shown += pending.length; // not built yet; counted once they are
      setText(countEl, total ? (shown === total ? plural(total, 'session') : `${shown} of ${total} sessions`) : '');
      emptyEl.hidden = total > 0;
      noMatchEl.hidden = total === 0 || shown > 0;
    }
    let countsQueued = false;
    function refreshCounts() {
      if (countsQueued) return;
      countsQueued = true;
      requestAnimationFrame(() => {
        countsQueued = false;
        const n = Object.fromEntries(STATES.map((s) => [s, 0]));
        for (const row of rows.values()) n[row.item.state] = (n[row.item.state] || 0) + 1;
        for (const item of pending || []) n[item.state] = (n[item.state] || 0) + 1;
        for (const [s, chip] of chipEls) setText(chip.querySelector('.n'), n[s]);
        applyFilter();
      });
    }
    const order = (a, b) => (STATE_RANK[a.state] ?? 9) - (STATE_RANK[b.state] ?? 9) || (b.last_activity_at || 0) - (a.last_activity_at || 0);

    /**
     * The first build: the rows a screen shows at once, then the rest in slices after the
     * first paint (1,000 rows are ~60 ms of script; the page is usable before they are in).
     */
    let pending = null;
    function appendRows(items) {
      const fragment = document.createDocumentFragment();
      for (const item of items) {
        const row = makeRow(item);
        rows.set(item.id, row);
        if (stateFilter || query) row.tr.hidden = !visible(row);
        fragment.appendChild(row.tr);
      }
      tbody.appendChild(fragment);
    }
    function build(sessions) {
      const sorted = [...sessions].sort(order);
      fill(tbody);
      appendRows(sorted.slice(0, 80));
      pending = sorted.length > 80 ? sorted.slice(80) : null;
      const slice = () => {
        if (!scope.alive || !pending) return;
        appendRows(pending.splice(0, 250));
        if (pending.length) setTimeout(slice, 0);
        else { pending = null; refreshCounts(); }
      };
      if (pending) setTimeout(slice, 0);
    }
    function finishBuild() {
      if (!pending) return;
      const rest = pending;
      pending = null;
      appendRows(rest);
    }
    /** A later read: rows updated in place by id; new ones on top; gone ones removed. */
    function merge(sessions) {
      finishBuild();
      const seen = new Set();
      const fresh = [];
      for (const item of sessions) {
        seen.add(item.id);
        const row = rows.get(item.id);
        if (row) fillRow(row, item);
        else fresh.push(item);
      }
      for (const [id, row] of rows) if (!seen.has(id)) { row.tr.remove(); rows.delete(id); }
      if (fresh.length) {
        const fragment = document.createDocumentFragment();
        for (const item of fresh.sort(order)) {
          const row = makeRow(item);
          rows.set(item.id, row);
          row.tr.hidden = !visible(row);
          fragment.appendChild(row.tr);
        }
        tbody.prepend(fragment);
      }
    }
    function render(ov) {
      const sessions = ov.sessions || [];
      const first = rows.size === 0;
      if (first && performance.mark) performance.mark('corral:overview-read');
      if (first) tbody.closest('.sessions-scroll').classList.remove('loading-rows');
      if (first) build(sessions); else merge(sessions);
      refreshCounts();
      renderSlots(ov.slots);
      renderRuns(ov.runs || []);
      renderGaps(ov.gaps || []);
      renderRecent(ov.recent || []);
      const working = sessions.filter((s) => s.state === 'working').length;
      const waiting = ov.slots && typeof ov.slots.waiting_count === 'number' ? ov.slots.waiting_count : (ov.slots && ov.slots.waiting ? ov.slots.waiting.length : 0);
      setText(subEl, `${plural(sessions.length, 'session')} · ${working} working · ${plural((ov.runs || []).length, 'run')} now · ${waiting} waiting for a slot`);
      // For benchmarks: when the first overview is in the page (performance.getEntriesByName).
      if (first && performance.mark) {
        performance.mark('corral:overview-rendered');
        // After the frame that shows it (laid out and painted).
        requestAnimationFrame(() => setTimeout(() => performance.mark('corral:overview-painted'), 0));
      }
    }
    const titleOf = (id) => { const r = rows.get(id); return r ? (r.item.title || shortId(id)) : shortId(id); };
    const sessionLink = (id, label) => (id ? h('a', { href: `#/sessions/${enc(id)}` }, label || titleOf(id)) : h('span', { class: 'faint' }, '—'));

    function renderSlots(slots) {
      if (!slots) { fill(slotsBody, h('p', { class: 'muted' }, 'No slot table (the daemon is not running).')); return; }
      const limits = slots.limits || {};
      const per = limits.per_engine || {};
      const running = slots.running_per_engine || {};
      const engines = [...new Set([...Object.keys(running), ...Object.keys(per)])].sort();
      const total = Object.values(running).reduce((a, b) => a + b, 0);
      const meter = (label, n, limit) => {
        const pct = limit ? Math.min(100, (n / limit) * 100) : 0;
        return h('div', { class: 'meter' },
          h('span', null, label),
          h('span', { class: 'bar', role: 'meter', 'aria-valuenow': n, 'aria-valuemin': 0, 'aria-valuemax': limit || n, 'aria-label': `${label} slots in use` },
            h('span', { class: limit && n >= limit ? 'full' : '', style: `width:${pct}%` })),
          h('span', { class: 'n' }, limit === null || limit === undefined ? `${n} · no limit` : `${n} / ${limit}`));
      };
      const parts = [meter('total', total, limits.total ?? null)];
      for (const e of engines) parts.push(meter(e, running[e] || 0, per[e] ?? limits.default_per_engine ?? null));
      if (!engines.length) parts.push(h('p', { class: 'small faint', style: 'margin-top:8px' }, `No engine runs now; ${limits.default_per_engine ?? '—'} per engine by default.`));
      const waiting = slots.waiting || [];
      const count = typeof slots.waiting_count === 'number' ? slots.waiting_count : waiting.length;
      if (count) {
        parts.push(h('h3', { style: 'margin:14px 0 4px' }, `Waiting (${count})`));
        parts.push(h('ul', { class: 'list' }, waiting.map((w) => h('li', null,
          sessionLink(w.owner && w.owner.session, w.owner && (w.owner.label || shortId(w.owner.session))),
          h('span', { class: 'what' }, ` (${(w.request && w.request.engine) || '?'}) waits for ${describeBlocker(w.blocker)}`)))));
        if (count > waiting.length) parts.push(h('p', { class: 'small muted' }, `and ${count - waiting.length} more`));
      } else {
        parts.push(h('p', { class: 'small faint', style: 'margin-top:10px' }, 'Nobody waits for a slot.'));
      }
      fill(slotsBody, ...parts);
    }
    function renderRuns(runs) {
      if (!runs.length) { fill(runsBody, h('p', { class: 'panel-body muted' }, 'No engine runs now.')); return; }
      fill(runsBody, table({
        head: ['Session', 'Engine', 'PID', h('th', { class: 'num' }, 'Elapsed')],
        body: h('tbody', null, runs.map((r) => h('tr', { testid: 'run-row', data: { runId: r.id } },
          td('Session', null, sessionLink(r.session_id)),
          td('Engine', null, r.engine || '—'),
          td('PID', { class: 'mono small nowrap' }, r.pid ?? '—'),
          td('Elapsed', { class: 'num' }, r.started_at ? elapsedEl(r.started_at) : '—')))),
      }));
    }
    function renderGaps(gaps) {
      if (!gaps.length) { fill(gapsBody, h('p', { class: 'muted small' }, 'None: every run marked running has its engine alive.')); return; }
      fill(gapsBody, 
        h('p', { class: 'small muted', style: 'margin-bottom:6px' }, 'Runs marked running whose engine is gone; the next daemon start closes them and requeues their prompts.'),
        h('ul', { class: 'list' }, gaps.map((g) => h('li', null,
          h('span', { class: 'mono' }, `run ${shortId(g.id)}`), ' of ', sessionLink(g.session_id),
          h('span', { class: 'what' }, ` · pid ${g.pid ?? '—'} · since ${fmtTime(g.started_at)}`)))));
    }
    function renderRecent(recent) {
      if (!recent.length) { fill(recentBody, h('p', { class: 'panel-body muted' }, 'No command recorded yet.')); return; }
      fill(recentBody, table({
        cls: 'fixed', stack: true,
        cols: ['c-when', 'c-cmd', 'c-outcome'],
        head: [h('th', { style: 'width:96px' }, 'When'), 'Command', h('th', { style: 'width:150px' }, 'Outcome')],
        body: h('tbody', null, recent.map((e) => h('tr', null,
          td('When', { class: 'nowrap small', title: fmtFull(e.started_at) }, fmtTime(e.started_at)),
          td('Command', { class: 'cmd clip', title: argvLine(e.command) }, oneLine(argvLine(e.command))),
          td('Outcome', { class: 'nowrap' }, stateBadge(e.outcome || (e.completed_at ? 'unknown' : 'running')), e.exit_code !== null && e.exit_code !== undefined ? h('span', { class: 'small muted' }, ` ${e.exit_code}`) : null)))),
      }));
    }

    /** An event of the daemon-wide feed: the row changes at once; a read follows when needed. */
    function onEvent(ev) {
      if (ev === null) { refreshSoon(0); return; }
      const row = rows.get(ev.session_id);
      if (!row) { refreshSoon(); return; }
      const item = Object.assign({}, row.item);
      const p = ev.payload || {};
      if (ev.at) item.last_activity_at = Math.max(item.last_activity_at || 0, ev.at);
      // Only what an event says outright; the state and its reason are the daemon's, read
      // again below (OVERVIEW_REFRESH_KINDS).
      switch (ev.kind) {
        case 'title.generated':
          if (p.title) item.title = p.title;
          break;
        default:
      }
      fillRow(row, item);
      if (ev.kind.startsWith('prompt.')) refreshCounts();
      if (OVERVIEW_REFRESH_KINDS.test(ev.kind)) refreshSoon();
    }
    let refreshTimer = null;
    let lastRead = 0;
    let readCost = 0; // how long the last read took: a busy daemon is asked less often
    function refreshSoon(delay) {
      if (refreshTimer) return;
      const spacing = Math.max(1500, readCost * 8);
      const wait = delay !== undefined ? delay : Math.max(300, spacing - (Date.now() - lastRead));
      refreshTimer = scope.timeout(() => { refreshTimer = null; load(); }, wait);
    }
    async function load() {
      lastRead = Date.now();
      try {
        const ov = await fetchOverview();
        readCost = Date.now() - lastRead;
        subEl.classList.remove('form-error');
        if (scope.alive) render(ov);
      } catch (error) {
        if (scope.alive && rows.size === 0) {
          fill(slotsBody, h('p', { class: 'form-error' }, error.message));
          setText(subEl, `The overview could not be read: ${error.message}`);
          subEl.classList.add('form-error');
        }
        if (scope.alive) toast(`Overview: ${error.message}`, 'error');
      }
    }
    // A fresh read each visit; what no event tells (new sessions, recent commands) every 15 s.
    load();
    scope.add(onGlobal(onEvent));
    scope.interval(() => { if (!document.hidden) refreshSoon(0); }, 15000);
    startGlobalFeed();
  }

  /** The overview's "new session" form: project, engine, title. */
  function newSessionForm(scope) {
    const project = h('select', { name: 'project', required: true, testid: 'new-session-project', 'aria-label': 'Project' }, h('option', { value: '' }, 'Loading projects…'));
    const engine = h('select', { name: 'engine', testid: 'new-session-engine', 'aria-label': 'Engine' },
      h('option', { value: '' }, 'default'), ENGINES.map((e) => h('option', { value: e }, e)));
    const title = h('input', { type: 'text', name: 'title', maxLength: 500, placeholder: 'Fix the login form', testid: 'new-session-title', 'aria-label': 'Title' });
    // A worktree project's session: its branch and base (both optional).
    const branch = h('input', { type: 'text', name: 'branch', placeholder: 'corral/<title>-<id>', testid: 'new-session-branch', 'aria-label': 'Branch', spellcheck: false });
    const base = h('input', { type: 'text', name: 'base', placeholder: "the project's HEAD", testid: 'new-session-base', 'aria-label': 'Base', spellcheck: false });
    const worktreeFields = h('div', { class: 'form-grid', hidden: true },
      h('div', { class: 'field' }, h('label', { for: 'ns-branch' }, 'Branch'), branch),
      h('div', { class: 'field' }, h('label', { for: 'ns-base' }, 'Base'), base));
    branch.id = 'ns-branch'; base.id = 'ns-base';
    const error = h('p', { class: 'form-error', role: 'alert' });
    const submit = h('button', { type: 'submit', class: 'primary', testid: 'new-session-submit' }, 'Create session');
    const projects = new Map();
    const form = h('form', { class: 'panel-body stack', testid: 'new-session', autocomplete: 'off' },
      h('div', { class: 'field' }, h('label', { for: 'ns-project' }, 'Project'), project),
      h('div', { class: 'form-grid' },
        h('div', { class: 'field' }, h('label', { for: 'ns-engine' }, 'Engine'), engine),
        h('div', { class: 'field' }, h('label', { for: 'ns-title' }, 'Title'), title)),
      worktreeFields,
      h('div', { class: 'form-actions' }, error, h('span', { class: 'spacer' }), submit));
    project.id = 'ns-project'; engine.id = 'ns-engine'; title.id = 'ns-title';
    project.addEventListener('change', () => {
      const p = projects.get(project.value);
      engine.options[0].textContent = p && p.engine ? `default (${p.engine})` : 'default';
      worktreeFields.hidden = !(p && p.isolation === 'worktree');
    });
    GET('/api/v1/projects').then((list) => {
      if (!scope.alive) return;
      fill(project);
      if (!list.length) {
        project.appendChild(h('option', { value: '' }, 'No project yet'));
        submit.disabled = true;
        fill(error, 'Add a project first: ', h('a', { href: '#/projects' }, 'Projects'));
        return;
      }
      for (const p of list) {
        projects.set(p.id, p);
        project.appendChild(h('option', { value: p.id }, p.full_access ? `${p.name} — ⚠ full access` : p.name));
      }
      project.dispatchEvent(new Event('change'));
    }, (e) => { if (scope.alive) setText(error, e.message); });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      setText(error, '');
      if (!project.value) { setText(error, 'Choose a project.'); return; }
      const body = { project: project.value };
      if (engine.value) body.engine = engine.value;
      if (title.value.trim()) body.title = title.value.trim();
      if (!worktreeFields.hidden) {
        if (branch.value.trim()) body.branch = branch.value.trim();
        if (base.value.trim()) body.base = base.value.trim();
      }
      submit.disabled = true;
      try {
        const session = await api('POST', '/api/v1/sessions', body);
        toast(`Session ${session.title || shortId(session.id)} created`);
        location.hash = `#/sessions/${enc(session.id)}`;
      } catch (err) {
        setText(error, err.message);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  // ---------------------------------------------------------------- session: transcript
  const META_KINDS = new Set(['thread.started', 'turn.started', 'turn.completed', 'usage', 'run.started', 'run.exited', 'slot.granted', 'prompt.done', 'title.generated',
    'worktree.created', 'worktree.removed', 'setup.started', 'setup.exited', 'session.merged']);
  const LOG_KINDS = new Set(['stderr', 'raw', 'setup.output']);
  const TITLE_LINE = /^\s*<!--\s*corral-title:.*?-->\s*\n?/;

  /** What a tool event's detail says in one line, per engine shape (codex items, claude blocks). */
  function toolSummary(name, d) {
    if (!d || typeof d !== 'object') return '';
    if (typeof d.command === 'string') return d.command;
    if (Array.isArray(d.command)) return argvLine(d.command);
    const input = d.input && typeof d.input === 'object' ? d.input : null;
    if (input) {
      for (const k of ['command', 'file_path', 'path', 'pattern', 'url', 'query', 'description', 'prompt']) if (typeof input[k] === 'string') return input[k];
      return JSON.stringify(input);
    }
    if (typeof d.text === 'string') return firstLine(d.text).replace(/\*\*/g, '');
    if (typeof d.query === 'string') return d.query;
    if (Array.isArray(d.changes)) return d.changes.map((c) => `${c.kind || ''} ${c.path || ''}`.trim()).join(', ');
    if (d.server || d.tool) return [d.server, d.tool].filter(Boolean).join(' · ');
    if (Array.isArray(d.items)) return `${d.items.length} items`;
    return '';
  }
  /** A tool_result's content: a string, or blocks of text. */
  function resultText(content) {
    if (typeof content === 'string') return content;
    if (Array.isArray(content)) return content.map((b) => (b && typeof b.text === 'string' ? b.text : JSON.stringify(b))).join('\n');
    return content === undefined ? '' : JSON.stringify(content, null, 2);
  }
  const pretty = (v) => { try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); } };

  /**
   * An agent's text with its code shown as code: ``` fences become <pre>, `spans` <code>.
   * Built from text nodes only, so whatever the agent wrote stays text.
   */
  function richText(el, text) {
    const src = String(text);
    const out = [];
    const fence = /```[^\n`]*\n([\s\S]*?)(?:\n?```[ \t]*(?:\n|$)|$)/g;
    let at = 0;
    let m;
    while ((m = fence.exec(src)) !== null) {
      if (m.index > at) out.push(inlineCode(src.slice(at, m.index)));
      out.push(h('pre', { class: 'code' }, m[1]));
      at = fence.lastIndex;
      if (m[0] === '') { fence.lastIndex += 1; }
    }
    if (at < src.length) out.push(inlineCode(src.slice(at)));
    fill(el, out);
  }
  function inlineCode(text) {
    const parts = text.split(/`([^`\n]+)`/);
    return parts.map((part, i) => (i % 2 ? h('code', null, part) : part));
  }

  /**
   * The transcript of one session, built from its events as they come: each event is an
   * element `[data-testid=event]` with `data-kind` and `data-seq`, grouped by prompt. Deltas
   * grow one agent message; a tool's later events (codex item.completed, claude tool_result)
   * fold into the first one's <details>. Events are added once per animation frame.
   */
  class Transcript {
    constructor(root, hooks) {
      this.root = root;
      this.hooks = hooks;
      this.turns = new Map();
      this.tools = new Map();
      this.streams = new Map();
      this.spoke = new Set(); // prompts whose agent text is shown
      this.queue = [];
      this.scheduled = false;
      this.dirty = new Set(); // streams whose text grew in this frame
      this.emptyEl = h('p', { class: 'empty' }, 'No event yet. Send a prompt below.');
      this.root.appendChild(this.emptyEl);
    }
    push(ev) {
      this.queue.push(ev);
      if (!this.scheduled) {
        this.scheduled = true;
        requestAnimationFrame(() => this.flush());
      }
    }
    flush() {
      this.scheduled = false;
      const stick = atBottom();
      // A long replay is built a slice per frame, so the page keeps answering meanwhile.
      const batch = this.queue.splice(0, 1500);
      if (this.queue.length) {
        this.scheduled = true;
        requestAnimationFrame(() => this.flush());
      }
      for (const ev of batch) {
        try { this.add(ev); } catch (error) { console.error('event', ev, error); }
      }
      for (const s of this.dirty) s.text.textContent = s.raw.replace(TITLE_LINE, '');
      this.dirty.clear();
      if (batch.length && this.emptyEl.parentNode) this.emptyEl.remove();
      if (stick && batch.length) window.scrollTo(0, document.documentElement.scrollHeight);
    }
    base(ev, cls, ...children) {
      return h('div', { class: `ev ${cls}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq, at: ev.at }, title: fmtFull(ev.at) }, ...children);
    }
    turn(promptId, text) {
      let t = this.turns.get(promptId);
      if (!t) {
        t = h('section', { class: 'turn', data: { promptId } });
        this.turns.set(promptId, t);
        this.root.appendChild(t);
      }
      return t;
    }
    container(ev) { return ev.prompt_id ? this.turn(ev.prompt_id) : this.root; }
    add(ev) {
      const kind = ev.kind;
      const p = ev.payload || {};
      const box = this.container(ev);
      if (kind === 'prompt.started') return this.user(box, ev, p);
      if (kind === 'message.delta') return this.delta(box, ev, p);
      if (kind === 'message') return this.message(box, ev, p);
      if (kind === 'tool') return this.tool(box, ev, p);
      if (kind === 'approval.requested') return this.approval(box, ev, p.approval || {});
      if (kind === 'approval.answered') return this.answered(box, ev, p.approval || {});
      if (LOG_KINDS.has(kind)) return this.log(box, ev, kind === 'raw' ? (p.line ?? pretty(p)) : p.line, kind === 'setup.output' ? 'setup output' : 'engine output');
      if (kind === 'prompt.done') {
        this.endStream(ev);
        if (!this.spoke.has(ev.prompt_id) && p.answer) {
          // No message told the answer (the command engine): show it, as part of this event.
          this.spoke.add(ev.prompt_id);
          const body = h('div', { class: 'agent-text', testid: 'agent-text' });
          richText(body, String(p.answer).replace(TITLE_LINE, ''));
          box.appendChild(h('div', { class: 'ev ev-agent' }, body));
        }
      }
      if (kind === 'title.generated' && p.title && this.hooks.onTitle) this.hooks.onTitle(p.title);
      if (META_KINDS.has(kind)) return this.meta(box, ev, p);
      const note = this.noteOf(kind, p);
      if (note) {
        if (kind === 'prompt.failed' || kind === 'prompt.cancelled') this.endStream(ev);
        return box.appendChild(this.base(ev, `ev-note ${note.cls}`, h('span', { class: 'label' }, note.label), h('span', { class: 'detail' }, note.detail || '')));
      }
      // A kind this page does not know: shown as it is.
      box.appendChild(this.base(ev, 'ev-generic', h('details', null, h('summary', null, h('span', { class: 'mono' }, kind)), h('div', { class: 'tbody' }, h('pre', null, pretty(p))))));
    }
    /** What the engine asks a person: the request, with Approve / Deny while it waits. */
    approval(box, ev, a) {
      const actions = h('div', { class: 'approval-actions' });
      const status = h('span', { class: 'approval-status', testid: 'approval-status' }, 'waits for you');
      const card = this.base(ev, 'ev-approval waiting',
        h('div', { class: 'approval-head' }, h('span', { class: 'label' }, 'Needs you'), h('span', { class: 'mono' }, `${a.tool || 'tool'}${a.target ? ` ${a.target}` : ''}`)),
        a.reason ? h('div', { class: 'approval-why' }, `why: ${a.reason}`) : null,
        h('div', { class: 'approval-foot' }, status, actions));
      card.dataset.approval = a.id || '';
      card.setAttribute('data-testid', 'approval');
      const answer = (decision) => async () => {
        for (const b of actions.querySelectorAll('button')) b.disabled = true;
        try {
          const done = await api('POST', `/api/v1/approvals/${enc(a.id)}/${decision}`, {});
          this.settle(card, done);
        } catch (error) {
          toast(error.message || String(error), 'error');
          for (const b of actions.querySelectorAll('button')) b.disabled = false;
        }
      };
      if (a.status === 'pending') {
        fill(actions,
          h('button', { class: 'primary', type: 'button', testid: 'approve', on: { click: answer('approve') } }, 'Approve'),
          h('button', { class: 'danger', type: 'button', testid: 'deny', on: { click: answer('deny') } }, 'Deny'));
      }
      this.approvals = this.approvals || new Map();
      this.approvals.set(a.id, card);
      box.appendChild(card);
    }
    /** An answer: the request's card says it; one answered without asking gets a note. */
    answered(box, ev, a) {
      const card = this.approvals && this.approvals.get(a.id);
      if (card) return this.settle(card, a);
      const by = a.answered_by === 'session-rule' ? 'kept for the session' : (a.answered_by || '');
      box.appendChild(this.base(ev, `ev-note ${a.status === 'approved' ? '' : 'warn'}`, h('span', { class: 'label' }, a.status === 'approved' ? 'Approved' : 'Denied'),
        h('span', { class: 'detail' }, [`${a.tool || 'tool'}${a.target ? ` ${a.target}` : ''}`, by, a.answer_reason].filter(Boolean).join(' — '))));
    }
    settle(card, a) {
      if (!a || a.status === 'pending') return;
      card.classList.remove('waiting');
      card.classList.add(a.status === 'approved' ? 'approved' : 'denied');
      const status = card.querySelector('[data-testid="approval-status"]');
      const by = { person: 'by a person', 'session-rule': 'by a decision kept for the session', timeout: 'nobody answered in time', 'run-ended': 'its run ended' }[a.answered_by] || '';
      setText(status, [a.status, by, a.answer_reason].filter(Boolean).join(' · '));
      fill(card.querySelector('.approval-actions'));
    }
    user(box, ev, p) {
      const images = Array.isArray(p.images) ? p.images : [];
      box.appendChild(this.base(ev, 'ev-user',
        h('div', { class: 'text' }, p.text || ''),
        images.length ? h('div', { class: 'images' }, images.map((img) => h('span', { class: 'badge' }, `image: ${typeof img === 'string' ? img.split('/').pop() : (img.name || 'image')}`))) : null));
    }
    agent(box, ev, text) {
      this.spoke.add(ev.prompt_id);
      const body = h('div', { class: 'agent-text', testid: 'agent-text' });
      richText(body, String(text).replace(TITLE_LINE, ''));
      const el = this.base(ev, 'ev-agent', body);
      box.appendChild(el);
      return el;
    }
    streamKey(ev) { return ev.run_id || ev.prompt_id || '-'; }
    delta(box, ev, p) {
      const key = this.streamKey(ev);
      let s = this.streams.get(key);
      if (!s) {
        const text = h('div', { class: 'agent-text', testid: 'agent-text' });
        const el = this.base(ev, 'ev-agent streaming', text);
        s = { el, text, raw: '' };
        this.streams.set(key, s);
        box.appendChild(el);
        this.spoke.add(ev.prompt_id);
      }
      s.raw += p.text || '';
      this.dirty.add(s);
      s.el.dataset.lastSeq = String(ev.seq);
    }
    message(box, ev, p) {
      const s = this.streams.get(this.streamKey(ev));
      if (s) {
        // The whole message after its deltas: the streamed element becomes it.
        this.streams.delete(this.streamKey(ev));
        s.el.classList.remove('streaming');
        // It takes the message's kind and number, unless later events follow it already
        // (then the numbers in the page would go back).
        if (s.el.parentNode && s.el.parentNode.lastElementChild === s.el) {
          s.el.dataset.kind = 'message';
          s.el.dataset.seq = String(ev.seq);
        }
        s.el.dataset.messageSeq = String(ev.seq);
        this.dirty.delete(s);
        richText(s.text, String(p.text || s.raw).replace(TITLE_LINE, ''));
        return;
      }
      this.agent(box, ev, p.text || '');
    }
    endStream(ev) {
      for (const [key, s] of this.streams) {
        if (s.el.closest('.turn') === this.turns.get(ev.prompt_id) || key === ev.run_id) {
          s.el.classList.remove('streaming');
          this.dirty.delete(s);
          richText(s.text, s.raw.replace(TITLE_LINE, ''));
          this.streams.delete(key);
        }
      }
    }
    tool(box, ev, p) {
      const d = p.detail && typeof p.detail === 'object' ? p.detail : {};
      const name = p.name || d.type || 'tool';
      const isResult = name === 'tool_result' || d.type === 'tool_result';
      const id = isResult ? d.tool_use_id : d.id;
      const key = id ? `${ev.run_id || ev.prompt_id}:${id}` : null;
      const known = key ? this.tools.get(key) : null;
      if (known && isResult) {
        // claude: the result folds into its tool_use.
        const out = h('div', { class: `out ${d.is_error ? 'is-error' : ''}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq } },
          h('div', { class: 'out-label' }, d.is_error ? 'error' : 'output'), h('pre', null, resultText(d.content) || '(no output)'));
        known.body.appendChild(out);
        this.status(known, d.is_error ? 'bad' : 'ok', d.is_error ? 'error' : 'done');
        return;
      }
      if (name === 'reasoning' && !known && typeof d.text === 'string' && !d.text.trim().includes('\n') && d.text.length <= 240) {
        // One-line thoughts need no fold each; a run of them shares one (the fake's, or
        // an engine thinking aloud step by step).
        return this.thought(box, ev, d.text);
      }
      if (known) {
        // codex: item.started, then item.completed of the same item.
        this.fillTool(known, name, d);
        known.el.dataset.lastSeq = String(ev.seq);
        return;
      }
      const summary = h('summary');
      const body = h('div', { class: 'tbody' });
      const details = h('details', null, summary, body);
      const el = this.base(ev, 'ev-tool', details);
      const t = { el, summary, body, details };
      this.fillTool(t, name, d, isResult);
      if (key) this.tools.set(key, t);
      box.appendChild(el);
    }
    fillTool(t, name, d, isResult = false) {
      const label = name === 'command_execution' ? '$' : name === 'reasoning' ? 'Reasoning' : name;
      const status = h('span', { class: 'tstatus' });
      fill(t.summary, h('span', { class: 'tname' }, label), h('span', { class: 'tdesc' }, oneLine(isResult ? resultText(d.content) : toolSummary(name, d))), status);
      t.statusEl = status;
      const parts = [];
      if (name === 'command_execution') {
        parts.push(h('pre', null, d.aggregated_output || (d.status === 'in_progress' ? '…' : '(no output)')));
        if (d.status === 'in_progress') this.status(t, 'run', 'running');
        else if (d.exit_code !== undefined && d.exit_code !== null) this.status(t, d.exit_code === 0 ? 'ok' : 'bad', `exit ${d.exit_code}`);
        else if (d.status) this.status(t, d.status === 'completed' ? 'ok' : 'bad', d.status);
      } else if (name === 'reasoning' && typeof d.text === 'string') {
        parts.push(h('pre', null, d.text));
      } else if (isResult) {
        parts.push(h('div', { class: `out ${d.is_error ? 'is-error' : ''}` }, h('pre', null, resultText(d.content) || '(no output)')));
        if (d.is_error) this.status(t, 'bad', 'error');
      } else {
        if (d.input !== undefined) parts.push(h('div', { class: 'out-label' }, 'input'), h('pre', null, pretty(d.input)));
        else parts.push(h('pre', null, pretty(d)));
        if (d.status) this.status(t, /fail|error|declin/.test(d.status) ? 'bad' : /progress/.test(d.status) ? 'run' : 'ok', d.status);
      }
      // Keep what folded in already (a claude result), replace the rest.
      const folded = [...t.body.querySelectorAll(':scope > [data-testid="event"]')];
      fill(t.body, ...parts, ...folded);
    }
    status(t, cls, text) {
      t.statusEl.className = `tstatus ${cls}`;
      t.statusEl.textContent = text;
    }
    thought(box, ev, text) {
      let group = box.lastElementChild;
      if (!group || !group.classList.contains('thought-group')) {
        const count = h('span', { class: 'small faint' });
        const preview = h('span', { class: 'preview' });
        const lines = h('div', { class: 'lines' });
        const summary = h('summary', null, h('span', { class: 'small' }, 'thinking'), count, preview);
        group = h('details', { class: 'log-group thought-group', open: true }, summary, lines);
        group._parts = { count, preview, lines, n: 0, touched: false };
        // A person's click (not the fold below) decides from then on.
        summary.addEventListener('click', () => { group._parts.touched = true; });
        box.appendChild(group);
      }
      const parts = group._parts;
      parts.n += 1;
      parts.lines.appendChild(this.base(ev, 'ev-thought', text));
      parts.count.textContent = parts.n > 1 ? `${parts.n} steps` : '';
      parts.preview.textContent = parts.n > 3 ? oneLine(text) : '';
      // Open while short; folded once it grows, unless the person opened or closed it.
      if (parts.n === 4 && !parts.touched) group.open = false;
    }
    log(box, ev, line, label = 'engine output') {
      let group = box.lastElementChild;
      if (!group || !group.classList.contains('log-group') || group.classList.contains('thought-group') || group.dataset.label !== label) {
        const preview = h('span', { class: 'preview' });
        const count = h('span', { class: 'small faint' });
        const lines = h('div', { class: 'lines' });
        group = h('details', { class: 'log-group', data: { label } }, h('summary', null, h('span', { class: 'small' }, label), count, preview), lines);
        group._parts = { preview, count, lines, n: 0 };
        box.appendChild(group);
      }
      const parts = group._parts;
      parts.n += 1;
      parts.lines.appendChild(this.base(ev, 'ev-log', line === undefined || line === null ? '' : String(line)));
      parts.count.textContent = plural(parts.n, 'line');
      parts.preview.textContent = oneLine(line);
    }
    meta(box, ev, p) {
      let row = box.lastElementChild;
      if (!row || !row.classList.contains('meta-row')) {
        row = h('div', { class: 'meta-row' });
        box.appendChild(row);
      }
      let text = ev.kind;
      let cls = '';
      let title = fmtFull(ev.at);
      switch (ev.kind) {
        case 'thread.started': text = `thread ${shortId(p.thread_id)}`; title = p.thread_id || ''; break;
        case 'turn.started': text = 'turn started'; break;
        case 'turn.completed': text = 'turn completed'; cls = 'ok'; break;
        case 'usage': {
          const u = p.usage || {};
          text = `tokens: ${u.input_tokens ?? '?'} in · ${u.output_tokens ?? '?'} out`;
          title = pretty(u);
          break;
        }
        case 'run.started': text = `run started · ${p.engine || ''}${p.pid ? ` · pid ${p.pid}` : ''}`; title = argvLine(p.argv); break;
        case 'run.exited': {
          const how = p.verdict || p.ended_by || (p.signal ? `signal ${p.signal}` : '');
          text = `run exited${p.exit_code !== null && p.exit_code !== undefined ? ` ${p.exit_code}` : ''}${how ? ` · ${how}` : ''}`;
          cls = p.verdict === 'succeeded' ? 'ok' : (p.verdict === 'failed' || p.error || p.ended_by) ? 'bad' : '';
          title = p.error || p.reason || title;
          break;
        }
        case 'slot.granted': text = `slot granted${p.waited_ms ? ` after ${dur(p.waited_ms)}` : ''}`; break;
        // Done, but with refusals: not the whole job, and said so.
        case 'prompt.done': text = p.denied ? `done · denied: ${p.denied}` : 'done'; cls = p.denied ? 'bad' : 'ok'; break;
        case 'title.generated': text = `titled “${p.title || ''}”`; break;
        case 'worktree.created': text = `worktree made · ${p.branch || ''} from ${shortSha(p.base_commit)}`; title = p.path || ''; break;
        case 'worktree.removed': text = `worktree removed${p.kept_branch ? ` · ${p.kept_branch} kept` : ''}`; title = p.path || ''; break;
        case 'setup.started': text = 'setup started'; title = p.command || ''; break;
        case 'setup.exited': {
          const ok = p.code === 0;
          text = `setup exited${p.code !== null && p.code !== undefined ? ` ${p.code}` : ''}${p.signal ? ` · ${p.signal}` : ''}`;
          cls = ok ? 'ok' : 'bad';
          break;
        }
        case 'session.merged': text = `merged into ${p.into || '?'} · ${shortSha(p.commit)}${p.squash ? ' (squashed)' : ''}`; cls = 'ok'; title = p.commit || ''; break;
        default:
      }
      row.appendChild(h('span', { class: `ev ev-meta ${cls}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq }, title }, text));
    }
    noteOf(kind, p) {
      switch (kind) {
        case 'prompt.failed': return { cls: 'error', label: 'Failed', detail: p.error || '' };
        case 'tool.denied': return { cls: 'warn', label: `Denied: ${p.tool || 'tool'}`, detail: [p.target, p.reason].filter(Boolean).join(' — ') };
        case 'turn.failed': return { cls: 'error', label: 'Turn failed', detail: p.message || '' };
        case 'prompt.cancelled': return { cls: 'cancel', label: 'Cancelled', detail: p.error || '' };
        case 'retry.scheduled': return {
          cls: 'warn', label: 'Retry scheduled',
          detail: [`${p.reason || 'failure'}`, p.retry ? `retry ${p.retry}${p.retries ? ` of ${p.retries}` : ''}` : '', p.delay_ms !== undefined ? `in ${dur(p.delay_ms)}` : '',
            p.new_thread ? 'on a new thread' : '', p.continue ? 'continuing the turn' : '', p.message ? `— ${p.message}` : ''].filter(Boolean).join(' · '),
        };
        case 'slot.waiting': return { cls: 'warn', label: 'Waiting for a slot', detail: `${p.engine ? `${p.engine}: ` : ''}waits for ${describeBlocker(p.held_by)}` };
        case 'app_server.unavailable': return { cls: 'warn', label: 'App server unavailable', detail: `${p.reason || ''}${p.retry_in_ms ? ` · retry in ${dur(p.retry_in_ms)}` : ''}` };
        case 'notice': return { cls: 'warn', label: 'Notice', detail: p.message || pretty(p) };
        case 'prompt.requeued': return { cls: 'warn', label: 'Requeued', detail: p.reason || '' };
        case 'prompt.unserved': return { cls: 'warn', label: 'Waiting for a daemon', detail: p.reason || '' };
        case 'request.refused': return { cls: 'error', label: 'Request refused', detail: [p.method, p.what, p.found_by ? `found by ${p.found_by}` : '', p.peer_pid ? `pid ${p.peer_pid}` : ''].filter(Boolean).join(' · ') };
        case 'transport.closed': return { cls: 'error', label: 'Transport closed', detail: p.message || p.reason || pretty(p) };
        case 'server.request': return { cls: '', label: 'Server request', detail: p.method || oneLine(pretty(p)).slice(0, 300) };
        default: return null;
      }
    }
  }
  function atBottom() {
    const doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - 120;
  }

  // ---------------------------------------------------------------- session: worktree
  /** A commit's short form, as git prints it. */
  const shortSha = (sha) => (sha ? String(sha).slice(0, 7) : '—');
  /** `git diff --stat`'s last line from the numbers: "1 file changed, 2 insertions(+)". */
  function diffSummary(d) {
    if (!d.files_changed) return 'No changes against the base';
    const parts = [`${plural(d.files_changed, 'file')} changed`];
    if (d.insertions) parts.push(`${plural(d.insertions, 'insertion')}(+)`);
    if (d.deletions) parts.push(`${plural(d.deletions, 'deletion')}(-)`);
    return parts.join(', ');
  }
  /** A base that names a branch (the merge's default target); HEAD and shas do not. */
  const branchLike = (base) => !!base && base !== 'HEAD' && !/^[0-9a-f]{7,40}$/i.test(base);
  const WORKTREE_HELP = {
    creating: 'being made',
    setup: 'made; the setup command runs before the next prompt',
    ready: 'made and set up',
    removed: 'removed at archive; the branch is kept',
    kept: 'kept at archive: corral could not prove it holds nothing the branch lacks',
    missing: 'its directory is gone (removed by hand?)',
  };
  /** Event kinds after which the session's changes are read again. */
  const DIFF_REFRESH_KINDS = new Set(['prompt.done', 'prompt.failed', 'prompt.cancelled', 'worktree.created', 'worktree.removed', 'setup.exited', 'session.merged']);

  /**
   * The session page's worktree panel (a worktree session only): where it is, its branch and
   * base, its state (`missing` as a warning, with Recreate), the diff stat against the base
   * (read again when a prompt ends, and by its button), Merge (squash and the target asked in
   * a dialog; the result or the error shown in place), and a kept worktree's discard.
   * `hooks.session()` is the session shown; `hooks.changed(session)` takes a new record.
   */
  function worktreePanel(scope, hooks) {
    const pathEl = h('span', { class: 'mono small', testid: 'worktree-path' });
    const branchEl = h('span', { class: 'mono small', testid: 'worktree-branch' });
    const baseEl = h('span', { class: 'mono small', testid: 'worktree-base' });
    const stateEl = h('span', { class: 'badge', testid: 'worktree-state' });
    const noticeEl = h('p', { class: 'wt-notice', testid: 'worktree-notice', hidden: true });
    const recreateBtn = h('button', { type: 'button', class: 'small primary', testid: 'worktree-recreate', hidden: true, title: 'Make the worktree again on its branch' }, 'Recreate worktree');
    const discardBtn = h('button', { type: 'button', class: 'small danger', testid: 'worktree-discard', hidden: true, title: "Remove the kept worktree with its uncommitted changes (the branch stays)" }, 'Discard changes');
    const actionError = h('p', { class: 'form-error wt-error', role: 'alert', testid: 'worktree-error' });
    const summaryEl = h('p', { class: 'diff-summary', testid: 'diff-summary' }, '…');
    const statEl = h('pre', { class: 'diff-stat', testid: 'diff-text', hidden: true });
    const refreshBtn = h('button', { type: 'button', class: 'small', testid: 'diff-refresh', title: 'Read the changes again' }, 'Refresh');
    const mergeBtn = h('button', { type: 'button', class: 'small primary', testid: 'session-merge', title: "Merge the branch, in corral's own worktree" }, 'Merge…');
    const mergeResult = h('p', { class: 'merge-result', role: 'status', testid: 'merge-result', hidden: true });
    const mergeError = h('p', { class: 'form-error wt-error', role: 'alert', testid: 'merge-error' });
    const diffBox = h('div', { class: 'wt-diff', testid: 'diff-stat' },
      h('div', { class: 'row' }, h('h3', null, 'Changes'), h('span', { class: 'spacer' }), refreshBtn),
      summaryEl, statEl);
    const body = h('div', { class: 'panel-body stack' },
      h('dl', { class: 'kv' },
        h('dt', null, 'path'), h('dd', null, pathEl),
        h('dt', null, 'branch'), h('dd', null, branchEl),
        h('dt', null, 'base'), h('dd', null, baseEl),
        h('dt', null, 'state'), h('dd', null, stateEl)),
      noticeEl,
      h('div', { class: 'row' }, recreateBtn, discardBtn),
      actionError,
      diffBox,
      h('div', { class: 'row' }, mergeBtn),
      mergeResult, mergeError);
    const el = panel('Worktree', body);
    el.setAttribute('data-testid', 'worktree');
    el.hidden = true;

    let shownId = null;
    let diffToken = 0;
    let diffTimer = null;
    let busy = false;
    /** Whether git can read the worktree's changes now. */
    const readable = (s) => !!s.worktree && !['removed', 'missing', 'creating'].includes(s.worktree_state);

    function render() {
      const s = hooks.session();
      if (!s || !s.worktree) { el.hidden = true; return; }
      el.hidden = false;
      const first = shownId !== s.id;
      shownId = s.id;
      setText(pathEl, s.worktree);
      pathEl.title = s.worktree;
      setText(branchEl, s.branch || '—');
      setText(baseEl, `${s.base || 'HEAD'} · ${shortSha(s.base_commit)}`);
      baseEl.title = s.base_commit || '';
      const state = s.worktree_state || 'creating';
      setText(stateEl, state === 'missing' ? '⚠ missing' : state);
      setAttr(stateEl, 'data-state', state);
      stateEl.className = `badge ${state === 'missing' ? 'amber' : state === 'kept' ? 'amber' : state === 'ready' ? 'info' : ''}`;
      stateEl.title = WORKTREE_HELP[state] || '';
      let notice = null;
      if (state === 'missing') notice = 'Its directory is gone (removed by hand?): recreate it on its branch. Its next prompt fails until then.';
      else if (state === 'kept') notice = 'Kept at archive: it has uncommitted changes, submodules, a HEAD off its branch or an operation in progress. Deal with them, or discard them (the branch and its commits stay).';
      else if (state === 'removed') notice = `The worktree was removed at archive; the branch ${s.branch} is kept.`;
      noticeEl.hidden = !notice;
      setText(noticeEl, notice || '');
      noticeEl.className = `wt-notice ${state === 'missing' || state === 'kept' ? 'warn' : ''}`;
      recreateBtn.hidden = state !== 'missing';
      discardBtn.hidden = state !== 'kept';
      recreateBtn.disabled = busy;
      discardBtn.disabled = busy;
      diffBox.hidden = !readable(s);
      mergeBtn.disabled = busy || state === 'creating' || !!hooks.running();
      mergeBtn.title = hooks.running() ? 'A prompt runs: merge once it ends' : "Merge the branch, in corral's own worktree";
      if (first && readable(s)) loadDiff();
    }

    async function loadDiff() {
      const s = hooks.session();
      if (!s || !readable(s)) return;
      const token = ++diffToken;
      refreshBtn.disabled = true;
      try {
        const d = await GET(`/api/v1/sessions/${enc(s.id)}/diff${qs({ stat: 'true' })}`);
        if (!scope.alive || token !== diffToken) return;
        setText(summaryEl, diffSummary(d));
        summaryEl.className = 'diff-summary';
        for (const key of ['files_changed', 'insertions', 'deletions']) setAttr(summaryEl, `data-${key.replace('_', '-')}`, d[key] || 0);
        // The stat's last line says what the summary above says already.
        const text = String(d.text || '').replace(/\s+$/, '').replace(/\n?[^\n]*\d+ files? changed[^\n]*$/, '');
        statEl.hidden = !text;
        setText(statEl, text);
      } catch (error) {
        if (!scope.alive || token !== diffToken) return;
        setText(summaryEl, error.message);
        summaryEl.className = 'diff-summary form-error';
        statEl.hidden = true;
      } finally {
        if (token === diffToken) refreshBtn.disabled = false;
      }
    }
    /** A read soon: the events of one change come together. */
    function refreshSoon() {
      if (diffTimer) return;
      diffTimer = scope.timeout(() => { diffTimer = null; loadDiff(); }, 300);
    }
    refreshBtn.addEventListener('click', () => loadDiff());

    /** Runs one action: buttons off meanwhile, the error line in place. */
    async function act(fn) {
      if (busy) return;
      busy = true;
      setText(actionError, '');
      render();
      try { await fn(); } catch (error) { setText(actionError, error.message); } finally { busy = false; render(); }
    }
    recreateBtn.addEventListener('click', () => act(async () => {
      const s = hooks.session();
      hooks.changed(await api('POST', `/api/v1/sessions/${enc(s.id)}/recreate`));
      toast('Worktree made again');
      loadDiff();
    }));
    discardBtn.addEventListener('click', async () => {
      const s = hooks.session();
      const yes = await confirmDialog({
        title: 'Discard the uncommitted changes?',
        body: [h('span', { class: 'mono' }, s.worktree), ' is removed with the changes not committed in it. The branch ', h('strong', { class: 'mono' }, s.branch), ' and its commits stay.'],
        ok: 'Discard changes', danger: true,
      });
      if (!yes) return;
      act(async () => {
        hooks.changed(await api('POST', `/api/v1/sessions/${enc(s.id)}/archive`, { discard_changes: true }));
        toast('Worktree removed');
      });
    });

    mergeBtn.addEventListener('click', async () => {
      const s = hooks.session();
      const into = h('input', { type: 'text', testid: 'merge-into', id: 'merge-into', value: branchLike(s.base) ? s.base : '', placeholder: "the session's base", 'aria-label': 'Target branch', spellcheck: false });
      const squash = h('input', { type: 'checkbox', testid: 'merge-squash' });
      const yes = await confirmDialog({
        title: 'Merge this session?',
        body: h('div', { class: 'stack' },
          h('p', null, 'The branch ', h('strong', { class: 'mono' }, s.branch), " is merged in corral's own worktree, never in your checkout; a checkout of the target is only fast-forwarded, and only when it is clean. A conflict changes nothing."),
          h('div', { class: 'field' }, h('label', { for: 'merge-into' }, 'Into branch'), into),
          h('label', { class: 'check' }, squash, h('span', null, 'Squash', h('span', { class: 'hint' }, 'one commit on the target instead of a merge commit')))),
        ok: 'Merge',
      });
      if (!yes) return;
      const body = {};
      if (into.value.trim()) body.into = into.value.trim();
      if (squash.checked) body.squash = true;
      setText(mergeError, '');
      mergeResult.hidden = true;
      busy = true;
      render();
      try {
        const m = await api('POST', `/api/v1/sessions/${enc(s.id)}/merge`, body);
        fill(mergeResult,
          `Merged ${m.branch} into ${m.into}${m.squash ? ' (squashed)' : ''}: `, h('span', { class: 'mono', title: m.commit }, shortSha(m.commit)),
          m.checkout_updated ? h('span', { class: 'small muted' }, ` · the checkout ${m.checkout_updated} was fast-forwarded`) : null);
        mergeResult.hidden = false;
        setAttr(mergeResult, 'data-commit', m.commit);
        toast(`Merged into ${m.into}`);
      } catch (error) {
        setText(mergeError, error.message);
      } finally {
        busy = false;
        render();
      }
      loadDiff();
    });

    return {
      el,
      render,
      /** A session event: the changes are read again after the kinds that move them. */
      event(ev) { if (DIFF_REFRESH_KINDS.has(ev.kind)) refreshSoon(); },
    };
  }

  // ---------------------------------------------------------------- session: page
  function pageSession(main, scope, selector) {
    const S = { id: null, session: null, prompts: [], runs: [], project: null, running: null, attachments: [] };
    const titleEl = h('h1', { testid: 'session-title' }, 'Loading…');
    const stateSlot = h('span');
    const metaEl = h('div', { class: 'meta' });
    const titleWrap = h('div', { class: 'title-wrap' }, titleEl, metaEl);
    const back = h('a', { href: '#/', class: 'back small' }, '← Overview');
    const renameBtn = h('button', { type: 'button', testid: 'session-rename', title: 'Rename this session' }, 'Rename');
    const compactBtn = h('button', { type: 'button', testid: 'session-compact', hidden: true, title: "Compact the thread's context" }, 'Compact');
    const archiveBtn = h('button', { type: 'button', class: 'danger', testid: 'session-archive' }, 'Archive');
    const transcriptEl = h('div', { class: 'transcript', testid: 'transcript', 'aria-live': 'off' });
    const queuedEl = h('div', { class: 'queued-list', hidden: true });
    const input = h('textarea', { testid: 'prompt-input', rows: 3, placeholder: 'Tell the agent what to do…', 'aria-label': 'Prompt' });
    const sendBtn = h('button', { type: 'submit', class: 'primary', testid: 'prompt-send' }, 'Send');
    const cancelBtn = h('button', { type: 'button', class: 'danger', testid: 'prompt-cancel', disabled: true, title: 'Cancel the running prompt' }, 'Cancel');
    const steerBtn = h('button', { type: 'button', testid: 'prompt-steer', hidden: true, title: 'Add this text to the turn that runs now' }, 'Steer');
    const fileInput = h('input', { type: 'file', accept: 'image/*', multiple: true, testid: 'prompt-images', 'aria-label': 'Attach images' });
    const attachBtn = h('label', { class: 'btn file-label', title: 'Attach images (or paste / drop them)' }, 'Attach image', fileInput);
    const attachmentsEl = h('div', { class: 'attachments' });
    const composerError = h('p', { class: 'error', role: 'alert', testid: 'prompt-error' });
    const readOnly = h('input', { type: 'checkbox', testid: 'prompt-read-only' });
    const composer = h('form', { class: 'composer', testid: 'composer' },
      attachmentsEl, input,
      h('div', { class: 'bar' }, attachBtn,
        h('label', { class: 'check', title: 'The engine may read but not change files' }, readOnly, 'read-only'),
        h('span', { class: 'hint' }, navigator.platform && /Mac/.test(navigator.platform) ? '⌘+Enter to send' : 'Ctrl+Enter to send'),
        h('span', { class: 'spacer' }), steerBtn, cancelBtn, sendBtn),
      composerError);
    const infoBody = h('div', { class: 'panel-body' });
    const runsBody = h('div', { class: 'panel-body tight' });
    const runsCount = h('span', { class: 'count' });
    const worktree = worktreePanel(scope, {
      session: () => S.session,
      running: () => S.running,
      changed: (session) => { S.session = session; renderHead(); },
    });

    main.append(
      back,
      h('div', { class: 'session-head' }, titleWrap, h('div', { class: 'actions' }, renameBtn, compactBtn, archiveBtn)),
      h('div', { class: 'session-layout' },
        h('section', { class: 'panel transcript-panel' }, transcriptEl, h('div', { class: 'panel-body', style: 'padding-top:0' }, queuedEl), composer),
        h('aside', { class: 'side' },
          worktree.el,
          panel('Session', infoBody),
          panel(h('h2', null, 'Runs', runsCount), runsBody))));

    const transcript = new Transcript(transcriptEl, { onTitle: (t) => { if (S.session) { S.session.title = t; renderHead(); } } });

    function renderHead() {
      const s = S.session;
      if (!s) return;
      if (!titleEl.isConnected && !$('.rename-form', titleWrap)) titleWrap.prepend(titleEl);
      setText(titleEl, s.title || '(untitled)');
      document.title = `${s.title || shortId(s.id)} · corral`;
      const st = S.state || { state: s.archived_at ? 'archived' : 'idle', reason: '' };
      fill(stateSlot, stateBadge(st.state, { testid: 'session-state' }));
      fill(metaEl, stateSlot,
        h('span', null, 'project ', S.project ? h('strong', null, S.project.name) : shortId(s.project_id)),
        S.project && S.project.full_access ? fullAccessBadge() : null,
        h('span', null, 'engine ', h('strong', null, s.engine)),
        s.model ? h('span', null, 'model ', h('strong', null, s.model)) : null,
        s.branch ? h('span', { testid: 'session-branch' }, 'branch ', h('strong', { class: 'mono' }, s.branch)) : null,
        s.worktree_state === 'missing' ? h('span', { class: 'badge amber', title: WORKTREE_HELP.missing }, '⚠ worktree missing') : null,
        h('span', { class: 'reason', title: st.reason, data: st.until ? { until: st.until, reason: st.reason } : {} }, oneLine(reasonText(st.reason, st.until)).slice(0, 160)));
      const steerable = STEERABLE.has(s.engine);
      steerBtn.hidden = !steerable;
      compactBtn.hidden = !steerable;
      compactBtn.disabled = !!(S.running || S.prompts.some((p) => p.status === 'queued')) || !!s.archived_at;
      cancelBtn.disabled = !S.running;
      steerBtn.disabled = !S.running;
      archiveBtn.disabled = !!s.archived_at;
      setText(archiveBtn, s.archived_at ? 'Archived' : 'Archive');
      sendBtn.disabled = !!s.archived_at;
      input.disabled = !!s.archived_at;
      if (s.archived_at) input.placeholder = 'This session is archived.';
      renderInfo();
      renderQueued();
      worktree.render();
    }
    function renderInfo() {
      const s = S.session;
      const row = (k, v) => [h('dt', null, k), h('dd', null, v)];
      const p = S.project;
      fill(infoBody, h('dl', { class: 'kv' },
        row('id', h('span', { class: 'mono small' }, s.id)),
        row('project', p ? [h('a', { href: '#/projects' }, p.name), h('div', { class: 'small faint mono' }, p.path)] : shortId(s.project_id)),
        row('engine', s.engine + (s.model ? ` · ${s.model}` : '') + (s.reasoning_effort ? ` · ${s.reasoning_effort}` : '')),
        row('thread', s.thread_id ? h('span', { class: 'mono small' }, s.thread_id) : '—'),
        row('created', fmtFull(s.created_at)),
        s.task ? row('task', s.task) : null,
        s.compacted_at ? row('compacted', `${fmtFull(s.compacted_at)} (${s.compacted_message_count ?? '?'} messages)`) : null,
        s.archived_at ? row('archived', fmtFull(s.archived_at)) : null,
        row('prompts', String(S.prompts.length)),
        row('commands', h('a', { href: `#/history?caller=${enc(s.id)}` }, "the agent's commands →"))));
    }
    function renderQueued() {
      const queued = S.prompts.filter((p) => p.status === 'queued');
      queuedEl.hidden = !queued.length;
      fill(queuedEl, ...queued.map((p) => h('div', { class: 'queued-item', testid: 'queued-prompt', data: { promptId: p.id } },
        stateBadge('queued'), h('span', { class: 'text', title: p.text }, oneLine(p.text)),
        h('button', { type: 'button', class: 'small', on: { click: () => cancelPrompt(p.id) } }, 'Remove'))));
    }
    function renderRuns() {
      setText(runsCount, S.runs.length ? ` ${S.runs.length}` : '');
      if (!S.runs.length) { fill(runsBody, h('p', { class: 'panel-body muted' }, 'No run yet.')); return; }
      const runs = [...S.runs].sort((a, b) => (b.started_at || 0) - (a.started_at || 0));
      fill(runsBody, ...runs.map((r) => {
        const running = r.status === 'running' || (!r.ended_at && !r.status);
        return h('div', { class: 'run-card', testid: 'run-row', data: { runId: r.id } },
          h('div', { class: 'top' }, stateBadge(r.status || 'unknown'),
            h('span', { class: 'small' }, `attempt ${r.attempt ?? '?'}`),
            h('span', { class: 'spacer' }),
            running && r.started_at ? elapsedEl(r.started_at) : h('span', { class: 'small muted' }, dur(r.ended_at && r.started_at ? r.ended_at - r.started_at : null))),
          h('div', { class: 'facts' },
            h('span', null, r.engine || ''),
            h('span', null, `exit ${r.exit_code ?? '—'}${r.signal ? ` · ${r.signal}` : ''}`),
            r.failure_class ? h('span', null, `class ${r.failure_class}`) : null,
            r.retry_decision ? h('span', null, `retry: ${typeof r.retry_decision === 'string' ? r.retry_decision : JSON.stringify(r.retry_decision)}`) : null,
            h('span', { title: fmtFull(r.started_at) }, fmtTime(r.started_at)),
            r.pid ? h('span', { class: 'mono' }, `pid ${r.pid}`) : null),
          r.error ? h('div', { class: 'err' }, r.error) : null,
          h('details', null, h('summary', null, 'argv'), h('pre', null, argvLine(r.argv))));
      }));
    }

    // ----- reading
    let loadTimer = null;
    let runsTimer = null;
    async function loadSession() {
      const shown = await GET(`/api/v1/sessions/${enc(S.id || selector)}`);
      if (!scope.alive) return;
      S.session = shown.session;
      S.state = shown.state || null;
      S.prompts = shown.prompts || [];
      const running = S.prompts.find((p) => p.status === 'running');
      S.running = running ? running.id : null;
      renderHead();
    }
    async function loadRuns() {
      const history = await GET(`/api/v1/history${qs({ session: S.id })}`);
      if (!scope.alive) return;
      S.runs = history.runs || [];
      if (history.prompts) S.prompts = history.prompts;
      renderRuns();
    }
    const soon = (which) => {
      if (which === 'runs') {
        if (!runsTimer) runsTimer = scope.timeout(() => { runsTimer = null; loadRuns().catch(() => {}); }, 400);
      } else if (!loadTimer) {
        loadTimer = scope.timeout(() => { loadTimer = null; loadSession().catch(() => {}); }, 250);
      }
    };
    function onEvent(ev) {
      if (ev.kind === 'prompt.started') S.running = ev.prompt_id;
      else if (['prompt.done', 'prompt.failed', 'prompt.cancelled', 'prompt.requeued'].includes(ev.kind) && S.running === ev.prompt_id) S.running = null;
      if (ev.kind === 'prompt.started' || ev.kind.startsWith('prompt.')) {
        const known = S.prompts.find((p) => p.id === ev.prompt_id);
        if (known) known.status = ev.kind === 'prompt.started' ? 'running' : ev.kind === 'prompt.done' ? 'done' : ev.kind === 'prompt.failed' ? 'failed' : ev.kind === 'prompt.cancelled' ? 'cancelled' : 'queued';
        renderHead();
      }
      // The state is the daemon's: read again when an event may have moved it.
      if (STATE_KINDS.test(ev.kind)) soon('session');
      if (ev.kind.startsWith('run.') || ev.kind === 'retry.scheduled') soon('runs');
      // A worktree's state moves with these (and `missing` is read, not sent): read it again.
      if (ev.kind.startsWith('worktree.') || ev.kind === 'setup.exited' || ev.kind === 'prompt.failed') soon('session');
      worktree.event(ev);
      transcript.push(ev);
    }

    // ----- actions
    async function cancelPrompt(id) {
      try {
        await api('POST', `/api/v1/prompts/${enc(id)}/cancel`);
        toast('Cancelling…');
        soon('session');
      } catch (error) {
        toast(error.message, 'error');
      }
    }
    cancelBtn.addEventListener('click', () => { if (S.running) cancelPrompt(S.running); });
    async function send() {
      const text = input.value;
      setText(composerError, '');
      if (!text.trim() && !S.attachments.length) { setText(composerError, 'Write a prompt first.'); input.focus(); return; }
      const body = { text };
      if (S.attachments.length) body.images = S.attachments.map(imageParam);
      if (readOnly.checked) body.read_only = true;
      sendBtn.disabled = true;
      try {
        const prompt = await api('POST', `/api/v1/sessions/${enc(S.id)}/prompts`, body);
        input.value = '';
        autoGrow();
        S.attachments = [];
        renderAttachments();
        if (prompt && prompt.id) {
          if (!S.prompts.some((p) => p.id === prompt.id)) S.prompts.push(prompt);
          if (prompt.status === 'running') S.running = prompt.id;
        }
        renderHead();
        if (prompt && prompt.status === 'queued') toast('Queued: it runs after the current prompt');
      } catch (error) {
        if (body.images && error.code === -32602 && /expected a string/.test(error.message)) {
          // A daemon whose prompt.send takes image paths only, not uploads.
          setText(composerError, `This daemon takes images as paths on its machine only, not uploaded from a browser; remove the images to send the text (${error.message}).`);
        } else setText(composerError, error.message);
      } finally {
        sendBtn.disabled = !!(S.session && S.session.archived_at);
      }
    }
    composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); }
    });
    function autoGrow() {
      input.style.height = 'auto';
      input.style.height = `${Math.min(input.scrollHeight + 2, window.innerHeight * 0.4)}px`;
    }
    input.addEventListener('input', autoGrow);
    steerBtn.addEventListener('click', async () => {
      const text = input.value.trim();
      if (!text) { setText(composerError, 'Write what to add to the running turn, then Steer.'); return; }
      steerBtn.disabled = true;
      try {
        await api('POST', `/api/v1/sessions/${enc(S.id)}/steer`, { text });
        input.value = '';
        toast('Steering sent to the running turn');
      } catch (error) {
        setText(composerError, error.message);
      } finally {
        steerBtn.disabled = !S.running;
      }
    });
    compactBtn.addEventListener('click', async () => {
      compactBtn.disabled = true;
      try {
        const r = await api('POST', `/api/v1/sessions/${enc(S.id)}/compact`);
        toast(`${r.note || 'Compacted'}${r.compacted ? ` (${r.compacted.messages} messages)` : ''}${r.thread_reset ? '; the next prompt starts a new thread' : ''}`);
        if (r.session) S.session = r.session;
        renderHead();
      } catch (error) {
        toast(error.message, 'error');
        renderHead();
      }
    });
    archiveBtn.addEventListener('click', async () => {
      const s = S.session;
      const yes = await confirmDialog({
        title: 'Archive this session?',
        body: [h('strong', null, s.title || shortId(S.id)), ' leaves the overview as finished. Its transcript and runs stay in the ledger.',
          s.worktree ? [' Its worktree is removed if it is clean (the branch ', h('strong', { class: 'mono' }, s.branch), ' stays); one with uncommitted changes (or submodules, or off its branch) is kept.'] : null],
        ok: 'Archive', danger: true,
      });
      if (!yes) return;
      try {
        S.session = await api('POST', `/api/v1/sessions/${enc(S.id)}/archive`);
        // As the CLI says it: a dirty worktree stays, and how to discard it.
        if (S.session.worktree_state === 'kept') toast(`Archived; its worktree is kept: ${S.session.worktree_kept_because || 'it has uncommitted changes'} (see the Worktree panel)`);
        else toast('Session archived');
        renderHead();
      } catch (error) {
        toast(error.message, 'error');
      }
    });
    renameBtn.addEventListener('click', () => {
      if (!S.session || $('.rename-form', titleWrap)) return;
      const field = h('input', { type: 'text', value: S.session.title || '', maxLength: 500, testid: 'session-title-input', 'aria-label': 'New title' });
      const error = h('p', { class: 'form-error', role: 'alert' });
      const form = h('form', { class: 'rename-form' }, field,
        h('button', { type: 'submit', class: 'primary', testid: 'session-rename-save' }, 'Save'),
        h('button', { type: 'button', testid: 'session-rename-cancel', on: { click: () => close() } }, 'Cancel'));
      const wrap = h('div', null, form, error);
      const close = () => { wrap.remove(); titleWrap.prepend(titleEl); };
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        try {
          S.session = await api('PATCH', `/api/v1/sessions/${enc(S.id)}`, { title: field.value });
          close();
          renderHead();
          toast('Renamed');
        } catch (err) {
          setText(error, err.message);
        }
      });
      field.addEventListener('keydown', (e) => { if (e.key === 'Escape') close(); });
      titleEl.replaceWith(wrap);
      field.focus();
      field.select();
    });

    // ----- images: picked, pasted or dropped; sent as base64 with their type
    const MAX_IMAGE = 10 * 1024 * 1024;
    function addFiles(files) {
      for (const file of files) {
        if (!file.type.startsWith('image/')) { setText(composerError, `${file.name}: not an image`); continue; }
        if (file.size > MAX_IMAGE) { setText(composerError, `${file.name}: larger than 10 MiB`); continue; }
        const reader = new FileReader();
        reader.onload = () => {
          const url = String(reader.result);
          S.attachments.push({ name: file.name || 'pasted.png', type: file.type, size: file.size, url, data: url.slice(url.indexOf(',') + 1) });
          renderAttachments();
        };
        reader.readAsDataURL(file);
      }
    }
    function renderAttachments() {
      fill(attachmentsEl, ...S.attachments.map((a, i) => h('div', { class: 'attachment', testid: 'attachment' },
        h('img', { src: a.url, alt: '' }), h('span', { class: 'name', title: a.name }, a.name),
        h('button', { type: 'button', 'aria-label': `Remove ${a.name}`, on: { click: () => { S.attachments.splice(i, 1); renderAttachments(); } } }, '×'))));
    }
    fileInput.addEventListener('change', () => { addFiles([...fileInput.files]); fileInput.value = ''; });
    input.addEventListener('paste', (e) => {
      const files = [...(e.clipboardData ? e.clipboardData.files : [])].filter((f) => f.type.startsWith('image/'));
      if (files.length) { e.preventDefault(); addFiles(files); }
    });
    composer.addEventListener('dragover', (e) => { e.preventDefault(); composer.classList.add('dragging'); });
    composer.addEventListener('dragleave', () => composer.classList.remove('dragging'));
    composer.addEventListener('drop', (e) => {
      e.preventDefault();
      composer.classList.remove('dragging');
      addFiles([...(e.dataTransfer ? e.dataTransfer.files : [])]);
    });

    // ----- start: the record, then the stream from the first event
    (async () => {
      try {
        await loadSession();
      } catch (error) {
        if (!scope.alive) return;
        fill(main, pageHead('Session'), errorBox(error));
        return;
      }
      S.id = S.session.id;
      if (selector !== S.id) history.replaceState(null, '', `#/sessions/${enc(S.id)}`);
      scope.feed({
        session: S.id, after: 0, onEvent,
        // Back after a drop: the stream resumes from the last seq; the record is read again.
        onOpen: (again) => { if (again) { soon('session'); soon('runs'); } },
      });
      loadRuns().catch((e) => fill(runsBody, h('p', { class: 'panel-body form-error' }, e.message)));
      if (S.session.project_id) {
        GET(`/api/v1/projects/${enc(S.session.project_id)}`).then((p) => { if (scope.alive) { S.project = p; renderHead(); } }, () => {});
      }
    })();
    startGlobalFeed();
  }
  /** One image as prompt.send's `images` takes it over HTTP (see docs/http.md). */
  function imageParam(a) {
    return { name: a.name, media_type: a.type, data: a.data };
  }

  // ---------------------------------------------------------------- projects
  function pageProjects(main, scope) {
    document.title = 'Projects · corral';
    let showArchived = false;
    const tbody = h('tbody');
    const countEl = h('span', { class: 'count' });
    const archivedToggle = h('input', { type: 'checkbox', testid: 'projects-archived' });
    const addBtn = h('button', { type: 'button', class: 'primary', testid: 'project-add' }, 'Add project');
    const emptyEl = h('p', { class: 'empty', hidden: true }, 'No project yet. Add one: a name and the directory its agents work in.');
    main.append(
      pageHead('Projects', 'Where agents work, with which engine, and what they may do.',
        h('label', { class: 'check' }, archivedToggle, 'show archived'), addBtn),
      h('section', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', null, 'Projects', countEl)),
        table({
          cls: 'projects-table', stack: true,
          head: ['Project', 'Engine', 'Groups', 'Access', 'Instructions', 'Created', h('th', { class: 'num' }, '')],
          body: tbody,
        }),
        emptyEl),
      groupPanel());
    archivedToggle.addEventListener('change', () => { showArchived = archivedToggle.checked; load(); });
    addBtn.addEventListener('click', () => projectDialog(null, load));

    function rowOf(p) {
      const flags = h('div', { class: 'flags' },
        p.full_access ? fullAccessBadge() : h('span', { class: 'badge' }, 'sandboxed'),
        p.kind === 'remote' ? h('span', { class: 'badge info', title: "A remote project's engines are always read-only" }, 'remote · read-only') : null,
        p.keep_background ? h('span', { class: 'badge amber', title: 'Background processes its engines leave outlive their runs' }, 'keeps background') : null,
        p.isolation === 'worktree' ? h('span', { class: 'badge info', testid: 'project-isolation', title: `Each session its own git worktree and branch; sessions run in parallel${p.setup ? ` · setup: ${p.setup}` : ''}${p.worktrees_dir ? ` · under ${p.worktrees_dir}` : ''}` }, 'worktree per session') : null);
      return h('tr', { testid: 'project-row', data: { projectId: p.id } },
        td('Project', null, h('div', { class: 'pname' }, p.name, p.archived_at ? h('span', { class: 'badge', style: 'margin-left:6px' }, 'archived') : null),
          h('div', { class: 'sub mono' }, p.path)),
        td('Engine', null, p.engine || h('span', { class: 'faint' }, 'default'), p.model ? h('div', { class: 'sub' }, p.model) : null),
        td('Groups', null, p.groups && p.groups.length ? p.groups.join(', ') : h('span', { class: 'faint' }, '—')),
        td('Access', null, flags),
        td('Instructions', null, p.instructions ? h('div', { class: 'instructions-snippet', title: p.instructions }, p.instructions) : h('span', { class: 'faint' }, '—')),
        td('Created', { class: 'nowrap small', title: fmtFull(p.created_at) }, fmtTime(p.created_at)),
        td('', { class: 'actions' },
          h('a', { href: `#/?q=${enc(p.name)}`, class: 'small', style: 'margin-right:10px' }, 'sessions'),
          h('button', { type: 'button', class: 'small', testid: 'project-edit', on: { click: () => projectDialog(p, load) } }, 'Edit'), ' ',
          p.archived_at ? null : h('button', { type: 'button', class: 'small danger', testid: 'project-archive', on: { click: () => archive(p) } }, 'Archive')));
    }
    async function archive(p) {
      const yes = await confirmDialog({
        title: `Archive project ${p.name}?`,
        body: 'Archived projects refuse new sessions and prompts. Their sessions and history stay.',
        ok: 'Archive', danger: true,
      });
      if (!yes) return;
      try {
        await api('POST', `/api/v1/projects/${enc(p.id)}/archive`);
        toast(`Project ${p.name} archived`);
        load();
      } catch (error) {
        toast(error.message, 'error');
      }
    }
    async function load() {
      try {
        const list = await GET(`/api/v1/projects${qs({ archived: showArchived ? 'true' : '' })}`);
        if (!scope.alive) return;
        const fragment = document.createDocumentFragment();
        for (const p of list) fragment.appendChild(rowOf(p));
        fill(tbody, fragment);
        setText(countEl, list.length ? ` ${list.length}` : '');
        emptyEl.hidden = list.length > 0;
      } catch (error) {
        if (scope.alive) fill(tbody, h('tr', null, h('td', { colspan: 7, class: 'form-error' }, error.message)));
      }
    }
    load();
    startGlobalFeed();
  }

  /** Execution groups: a locking group lets one of its projects run at a time. */
  function groupPanel() {
    const name = h('input', { type: 'text', placeholder: 'frontend', testid: 'group-name', 'aria-label': 'Group name' });
    const locking = h('input', { type: 'checkbox', checked: true, testid: 'group-locking' });
    const error = h('p', { class: 'form-error', role: 'alert' });
    const form = h('form', { class: 'panel-body inline-form' },
      h('div', { class: 'field' }, h('label', null, 'Group'), name),
      h('label', { class: 'check', style: 'padding-bottom:8px' }, locking, h('span', null, 'locking', h('span', { class: 'hint' }, 'its projects run one at a time'))),
      h('button', { type: 'submit', testid: 'group-save' }, 'Save group'),
      h('div', { style: 'flex-basis:100%' }, error));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      setText(error, '');
      if (!name.value.trim()) { setText(error, 'Name the group.'); return; }
      try {
        const g = await api('PUT', `/api/v1/groups/${enc(name.value.trim())}`, { locking: locking.checked });
        toast(`Group ${g.name}: ${g.locking ? 'locking' : 'label only'}`);
      } catch (err) {
        setText(error, err.message);
      }
    });
    return panel('Execution groups', form);
  }

  /** Add (project null) or edit a project in a modal form. */
  function projectDialog(project, done) {
    const editing = !!project;
    const p = project || { name: '', path: '', engine: null, model: null, groups: [], full_access: false, kind: 'local', keep_background: false, instructions: null, isolation: null, worktrees_dir: null, setup: null };
    const f = {
      name: h('input', { type: 'text', value: p.name, required: true, disabled: editing, testid: 'project-name' }),
      path: h('input', { type: 'text', value: p.path, required: true, disabled: editing, placeholder: '/home/me/src/app', testid: 'project-path' }),
      engine: h('select', { testid: 'project-engine', value: p.engine || '' }, h('option', { value: '' }, "corral's default"), ENGINES.map((e) => h('option', { value: e }, e))),
      model: h('input', { type: 'text', value: p.model || '', placeholder: "the engine's default", testid: 'project-model' }),
      groups: h('input', { type: 'text', value: (p.groups || []).join(', '), placeholder: 'frontend, db', testid: 'project-groups' }),
      full_access: h('input', { type: 'checkbox', checked: !!p.full_access, testid: 'project-full-access' }),
      remote: h('input', { type: 'checkbox', checked: p.kind === 'remote', testid: 'project-remote' }),
      keep_background: h('input', { type: 'checkbox', checked: !!p.keep_background, testid: 'project-keep-background' }),
      instructions: h('textarea', { rows: 4, value: p.instructions || '', placeholder: 'House rules added to the prompts that begin a conversation', testid: 'project-instructions' }),
      // A new project's default is the daemon's: worktree in a git repository, else shared.
      isolation: h('select', { testid: 'project-isolation-input' },
        editing ? null : h('option', { value: '' }, 'default (worktree in a git repository)'),
        h('option', { value: 'worktree' }, 'worktree: each session its own worktree and branch'),
        h('option', { value: 'shared' }, 'shared: one session at a time in the path')),
      worktrees_dir: h('input', { type: 'text', value: p.worktrees_dir || '', placeholder: 'the setting worktrees.dir', testid: 'project-worktrees-dir', spellcheck: false }),
      setup: h('input', { type: 'text', value: p.setup || '', placeholder: 'npm ci', testid: 'project-setup', spellcheck: false }),
    };
    f.isolation.value = editing ? (p.isolation || 'shared') : '';
    if (p.engine && !ENGINES.includes(p.engine)) f.engine.appendChild(h('option', { value: p.engine }, p.engine));
    f.engine.value = p.engine || '';
    const warnEl = h('p', { class: 'form-error', hidden: !p.full_access }, '⚠ Full access: engines run without sandbox or approvals, with your rights.');
    f.full_access.addEventListener('change', async () => {
      if (!f.full_access.checked) { warnEl.hidden = true; return; }
      const yes = await confirmDialog({
        title: 'Give this project full access?',
        body: [h('p', null, 'Its engines will run ', h('strong', null, 'without sandbox and without approvals'), ': they can change any file you can and reach the network.'),
          h('p', { style: 'margin-top:8px' }, 'The project shows a warning wherever it appears.')],
        ok: 'Turn full access on', danger: true,
      });
      f.full_access.checked = yes;
      warnEl.hidden = !yes;
    });
    const error = h('p', { class: 'form-error', role: 'alert', testid: 'project-error' });
    const save = h('button', { type: 'submit', class: 'primary', testid: 'project-save' }, editing ? 'Save' : 'Add project');
    const cancel = h('button', { type: 'button' }, 'Cancel');
    const field = (label, el, hint, wide) => h('div', { class: `field ${wide ? 'wide' : ''}` }, h('label', null, label), el, hint ? h('span', { class: 'hint' }, hint) : null);
    const check = (el, label, hint) => h('label', { class: 'check wide' }, el, h('span', null, label, h('span', { class: 'hint' }, hint)));
    const form = h('form', { class: 'project-form', testid: 'project-form', autocomplete: 'off' },
      h('div', { class: 'form-grid' },
        field('Name', f.name, editing ? 'names do not change' : null),
        field('Path', f.path, 'the directory its agents work in'),
        field('Engine', f.engine), field('Model', f.model),
        field('Groups', f.groups, 'comma-separated execution groups', true),
        check(f.full_access, 'Full access', 'no sandbox, no approvals: only for projects you trust completely'),
        warnEl,
        check(f.remote, 'Remote', 'engines are always read-only'),
        check(f.keep_background, 'Keep background processes', 'what its engines leave running (a dev server) outlives the run'),
        field('Isolation', f.isolation, editing ? 'its new sessions only: a session keeps its directory' : null, true),
        field('Worktrees directory', f.worktrees_dir, 'where its sessions\' worktrees go'),
        field('Setup command', f.setup, 'run in a new worktree before its first prompt'),
        field('Instructions', f.instructions, null, true)),
      error);
    const dlg = h('dialog', { testid: 'project-dialog', 'aria-labelledby': 'project-dlg-title' },
      h('div', { class: 'dlg-head' }, h('h2', { id: 'project-dlg-title' }, editing ? `Edit ${p.name}` : 'Add a project')),
      form,
      h('div', { class: 'dlg-foot' }, cancel, save));
    save.setAttribute('form', 'project-form-el');
    form.id = 'project-form-el';
    const close = () => { if (dlg.open) dlg.close(); dlg.remove(); };
    cancel.addEventListener('click', close);
    dlg.addEventListener('close', () => dlg.remove());
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      setText(error, '');
      const groups = f.groups.value.split(',').map((g) => g.trim()).filter(Boolean);
      const values = {
        engine: f.engine.value || null,
        model: f.model.value.trim() || null,
        groups,
        full_access: f.full_access.checked,
        remote: f.remote.checked,
        keep_background: f.keep_background.checked,
        instructions: f.instructions.value.trim() ? f.instructions.value : null,
        isolation: f.isolation.value || null,
        worktrees_dir: f.worktrees_dir.value.trim() || null,
        setup: f.setup.value.trim() || null,
      };
      let body;
      if (editing) {
        const before = { engine: p.engine || null, model: p.model || null, groups: p.groups || [], full_access: !!p.full_access, remote: p.kind === 'remote', keep_background: !!p.keep_background, instructions: p.instructions || null,
          isolation: p.isolation || 'shared', worktrees_dir: p.worktrees_dir || null, setup: p.setup || null };
        body = {};
        for (const k of Object.keys(values)) if (JSON.stringify(values[k]) !== JSON.stringify(before[k])) body[k] = values[k];
        // project.set clears these with "" (null is "unchanged").
        for (const k of ['worktrees_dir', 'setup']) if (k in body && body[k] === null) body[k] = '';
        if (!Object.keys(body).length) { close(); return; }
      } else {
        if (!f.name.value.trim() || !f.path.value.trim()) { setText(error, 'A project needs a name and a path.'); return; }
        body = { name: f.name.value.trim(), path: f.path.value.trim() };
        for (const [k, v] of Object.entries(values)) if (v !== null && !(Array.isArray(v) && !v.length) && v !== false) body[k] = v;
      }
      save.disabled = true;
      try {
        const saved = editing ? await api('PATCH', `/api/v1/projects/${enc(p.id)}`, body) : await api('POST', '/api/v1/projects', body);
        toast(editing ? `Project ${saved.name} saved` : `Project ${saved.name} added`);
        close();
        done();
      } catch (err) {
        setText(error, err.message);
      } finally {
        save.disabled = false;
      }
    });
    document.body.appendChild(dlg);
    dlg.showModal();
    (editing ? f.engine : f.name).focus();
  }

  // ---------------------------------------------------------------- settings
  function pageSettings(main, scope) {
    document.title = 'Settings · corral';
    const theme = h('select', { testid: 'theme', 'aria-label': 'Theme' },
      h('option', { value: 'system' }, 'System'), h('option', { value: 'light' }, 'Light'), h('option', { value: 'dark' }, 'Dark'));
    theme.value = document.documentElement.getAttribute('data-theme') || 'system';
    const themeError = h('p', { class: 'setting-error', testid: 'theme-error', role: 'alert' });
    const groupsEl = h('div', { class: 'settings-groups' }, h('p', { class: 'loading' }, 'Loading settings…'));
    main.append(
      pageHead('Settings', "The daemon's settings: each with its default and what it means. A value is checked when saved."),
      panel('Appearance', h('div', { class: 'panel-body' },
        h('div', { class: 'inline-form' },
          h('div', { class: 'field' }, h('label', null, 'Theme'), theme,
            h('span', { class: 'hint' }, 'stored as the setting ui.theme; "system" follows your device')),
          h('div', { class: 'field grow' }, themeError)))),
      groupsEl);
    theme.addEventListener('change', async () => {
      const value = applyTheme(theme.value);
      rememberTheme(value);
      setText(themeError, '');
      try {
        await api('PUT', `/api/v1/settings/${enc('ui.theme')}`, { value });
      } catch (error) {
        setText(themeError, `Kept in this browser only: ${error.message}`);
      }
    });

    function row(name, def, meaning, stored) {
      const inputEl = h('input', { type: 'text', value: stored ?? '', placeholder: def === '' ? '(empty)' : def, testid: 'setting-input', 'aria-label': name, spellcheck: false });
      const save = h('button', { type: 'button', testid: 'setting-save' }, 'Save');
      const reset = h('button', { type: 'button', testid: 'setting-reset', title: 'Back to the default', hidden: stored === null || stored === undefined }, 'Reset');
      const error = h('p', { class: 'setting-error', testid: 'setting-error', role: 'alert' });
      const line = h('p', { class: 'state-line' }, stored === null || stored === undefined ? 'default' : 'set');
      const el = h('div', { class: 'setting', testid: 'setting-row', data: { name } },
        h('div', null, h('div', { class: 'name' }, name), h('p', { class: 'meaning' }, meaning || ''),
          h('p', { class: 'default' }, 'default: ', def === '' ? h('span', { class: 'faint' }, 'empty') : h('code', null, def))),
        h('div', { class: 'control' }, inputEl, error, line),
        h('div', { class: 'buttons' }, save, reset));
      const put = async (value) => {
        save.disabled = true;
        reset.disabled = true;
        try {
          const r = await api('PUT', `/api/v1/settings/${enc(name)}`, { value });
          const v = r && 'value' in r ? r.value : value;
          inputEl.value = v ?? '';
          setText(error, '');
          el.classList.remove('invalid');
          reset.hidden = v === null || v === undefined;
          setText(line, v === null || v === undefined ? 'default · saved' : 'saved');
          line.classList.add('saved');
          save.classList.remove('primary');
        } catch (err) {
          setText(error, err.message);
          el.classList.add('invalid');
          line.classList.remove('saved');
          setText(line, '');
        } finally {
          save.disabled = false;
          reset.disabled = false;
        }
      };
      save.addEventListener('click', () => put(inputEl.value));
      reset.addEventListener('click', () => put(null));
      inputEl.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); put(inputEl.value); } });
      inputEl.addEventListener('input', () => { line.classList.remove('saved'); setText(line, 'not saved'); save.classList.add('primary'); });
      return el;
    }
    const GROUP_TITLES = { slots: 'Slots', retry: 'Retries', engines: 'Engines', cancel: 'Cancellation', run: 'Runs', daemon: 'Daemon', store: 'Store', http: 'HTTP', ui: 'Dashboard' };
    async function load() {
      let list;
      try {
        list = await GET('/api/v1/settings');
      } catch (error) {
        if (scope.alive) fill(groupsEl, errorBox(error));
        return;
      }
      if (!scope.alive) return;
      const stored = new Map((list.stored || []).map((s) => [s.name, s.value]));
      if (stored.has('ui.theme') && THEMES.includes(stored.get('ui.theme'))) theme.value = stored.get('ui.theme');
      const groups = new Map();
      const shown = new Set(['ui.theme']);
      const groupOf = (name) => {
        const key = name.split('.')[0];
        if (!groups.has(key)) groups.set(key, []);
        return groups.get(key);
      };
      for (const k of list.known || []) {
        if (k.name === 'ui.theme') continue;
        const items = groupOf(k.name);
        if (k.name.includes('<engine>')) {
          items.push(h('div', { class: 'setting-pattern' }, h('code', null, k.name), ` — ${k.meaning} (one per engine)`));
          for (const e of ENGINES) {
            const name = k.name.replace('<engine>', e);
            if (shown.has(name)) continue;
            shown.add(name);
            items.push(row(name, k.default, '', stored.get(name)));
          }
        } else {
          shown.add(k.name);
          items.push(row(k.name, k.default, k.meaning, stored.get(k.name)));
        }
      }
      for (const [name, value] of stored) if (!shown.has(name)) groupOf(name).push(row(name, '', 'stored (not a setting this page knows)', value));
      fill(groupsEl, ...[...groups].map(([key, items]) => h('section', { class: 'panel settings-group' },
        h('div', { class: 'panel-head' }, h('h2', null, GROUP_TITLES[key] || key)), h('div', null, items))));
    }
    load();
    startGlobalFeed();
  }

  // ---------------------------------------------------------------- history
  function pageHistory(main, scope, query) {
    document.title = 'History · corral';
    const val = (k) => query.get(k) || '';
    const f = {
      search: h('input', { type: 'search', value: val('search'), placeholder: 'cargo test', testid: 'history-search', 'aria-label': 'Search the command line' }),
      outcome: h('select', { testid: 'history-outcome', 'aria-label': 'Outcome' },
        h('option', { value: '' }, 'any'), ['succeeded', 'failed', 'interrupted', 'lost', 'unknown'].map((o) => h('option', { value: o }, o))),
      caller: h('input', { type: 'text', value: val('caller'), placeholder: 'session id', testid: 'history-caller', 'aria-label': 'Session' }),
      repo: h('input', { type: 'text', value: val('repo'), placeholder: '/path/to/repo', testid: 'history-repo', 'aria-label': 'Repository' }),
      parent: h('input', { type: 'text', value: val('parent'), placeholder: 'exec id', testid: 'history-parent', 'aria-label': 'Parent exec' }),
      task: h('input', { type: 'text', value: val('task'), placeholder: 'task key', testid: 'history-task', 'aria-label': 'Task' }),
      wave: h('input', { type: 'text', value: val('wave'), placeholder: 'wave name or id', testid: 'history-wave', 'aria-label': 'Wave' }),
    };
    f.outcome.value = val('outcome');
    const tbody = h('tbody');
    const more = h('button', { type: 'button', testid: 'history-more', hidden: true }, 'More');
    const status = h('p', { class: 'muted small' });
    const error = h('p', { class: 'form-error', role: 'alert' });
    const field = (label, el) => h('div', { class: 'field' }, h('label', null, label), el);
    const form = h('form', { class: 'filters', testid: 'history-filters' },
      field('Command contains', f.search), field('Outcome', f.outcome), field('Session', f.caller), field('Repository', f.repo),
      h('button', { type: 'submit', class: 'primary' }, 'Search'),
      h('details', { class: 'more-filters', open: !!(val('parent') || val('task') || val('wave')) },
        h('summary', null, 'More filters'),
        h('div', { class: 'more-grid' }, field('Parent exec', f.parent), field('Task', f.task), field('Wave', f.wave))),
      h('div', { class: 'more-filters' }, error));
    main.append(
      pageHead('History', 'Every command corral recorded (the exec ledger), newest first.'),
      h('section', { class: 'panel' }, form,
        table({
          cls: 'exec-table fixed', stack: true,
          cols: ['c-time', 'c-cmd', 'c-outcome', 'c-exit', 'c-dur', 'c-session'],
          head: ['Started', 'Command', 'Outcome', 'Exit', 'Duration', 'Session'],
          body: tbody,
        }),
        h('div', { class: 'more-bar' }, more, status)));

    let next = null;
    let loading = false;
    // Session titles, from the overview this visit read (ids otherwise).
    const titles = new Map(((lastOverview && lastOverview.sessions) || []).map((x) => [x.id, x.title]).filter(([, t]) => t));
    const filters = () => {
      const out = {};
      for (const k of Object.keys(f)) if (f[k].value.trim()) out[k] = f[k].value.trim();
      return out;
    };
    function execRow(e) {
      const done = e.completed_at !== null && e.completed_at !== undefined;
      const outcome = e.outcome || (done ? 'unknown' : 'running');
      const tr = h('tr', { class: 'exec-row', testid: 'exec-row', data: { execId: e.id }, tabIndex: 0, 'aria-expanded': 'false' },
        td('Started', { class: 'nowrap small', title: fmtFull(e.started_at) }, fmtTime(e.started_at)),
        td('Command', { class: 'cmd clip', title: argvLine(e.command) }, oneLine(argvLine(e.command)) || '—'),
        td('Outcome', null, stateBadge(outcome)),
        td('Exit', { class: 'num' }, e.exit_code ?? (e.signal ? e.signal : '—')),
        td('Duration', { class: 'num' }, done ? dur(e.completed_at - e.started_at) : elapsedEl(e.started_at)),
        td('Session', { class: 'clip' }, e.caller_session_id ? h('a', { href: `#/sessions/${enc(e.caller_session_id)}`, title: e.caller_session_id, on: { click: (ev) => ev.stopPropagation() } }, titles.get(e.caller_session_id) || shortId(e.caller_session_id)) : h('span', { class: 'faint' }, e.via_agent ? 'agent' : 'person')));
      let detail = null;
      const toggle = () => {
        if (detail) { detail.remove(); detail = null; tr.setAttribute('aria-expanded', 'false'); return; }
        const kv = (k, v) => (v === null || v === undefined || v === '' ? null : [h('dt', null, k), h('dd', null, v)]);
        detail = h('tr', { class: 'exec-detail' }, h('td', { colspan: 6, class: 'no-label' },
          h('dl', { class: 'kv' },
            kv('id', h('span', { class: 'mono small' }, e.id)),
            kv('trace', e.trace_id !== e.id ? h('span', { class: 'mono small' }, e.trace_id) : null),
            kv('parent', e.parent_exec_id ? h('span', { class: 'mono small' }, e.parent_exec_id) : null),
            kv('command', h('pre', { class: 'cmd' }, argvLine(e.command))),
            kv('cwd', e.cwd), kv('repo', e.repo), kv('pid', e.pid),
            kv('started', fmtFull(e.started_at)), kv('completed', done ? fmtFull(e.completed_at) : null),
            kv('signal', e.signal), kv('by', e.via_agent ? 'an agent (CORRAL_SESSION_ID set)' : null))));
        tr.after(detail);
        tr.setAttribute('aria-expanded', 'true');
      };
      tr.addEventListener('click', toggle);
      tr.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); toggle(); } });
      return tr;
    }
    async function load(append) {
      if (loading) return;
      loading = true;
      more.disabled = true;
      setText(error, '');
      setText(status, 'Loading…');
      try {
        const page = await GET(`/api/v1/execs${qs(Object.assign({ limit: 50 }, filters(), append && next ? { after: next } : {}))}`);
        if (!scope.alive) return;
        const entries = page.entries || [];
        const fragment = document.createDocumentFragment();
        for (const e of entries) fragment.appendChild(execRow(e));
        if (append) tbody.appendChild(fragment); else fill(tbody, fragment);
        next = page.next || null;
        more.hidden = !next;
        const n = tbody.querySelectorAll('tr.exec-row').length;
        setText(status, n ? (next ? `${plural(n, 'command')} shown` : `${plural(n, 'command')}, all shown`) : 'No command matches.');
      } catch (err) {
        if (scope.alive) { setText(error, err.message); setText(status, ''); }
      } finally {
        loading = false;
        more.disabled = false;
      }
    }
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams(filters()).toString();
      const target = `#/history${q ? `?${q}` : ''}`;
      if (location.hash !== target) history.replaceState(null, '', target);
      next = null;
      load(false);
    });
    f.outcome.addEventListener('change', () => form.requestSubmit());
    more.addEventListener('click', () => load(true));
    load(false);
    startGlobalFeed();
  }

  // ---------------------------------------------------------------- router
  const ROUTES = [
    [/^\/?$/, 'overview', (m, s, match, q) => pageOverview(m, s, q)],
    [/^\/sessions\/([^/]+)\/?$/, 'overview', (m, s, match) => pageSession(m, s, decodeURIComponent(match[1]))],
    [/^\/projects\/?$/, 'projects', (m, s) => pageProjects(m, s)],
    [/^\/settings\/?$/, 'settings', (m, s) => pageSettings(m, s)],
    [/^\/history\/?$/, 'history', (m, s, match, q) => pageHistory(m, s, q)],
  ];
  let currentScope = null;
  function route() {
    const raw = location.hash.replace(/^#/, '') || '/';
    const [path, search] = raw.split('?');
    const main = $('#main');
    if (currentScope) currentScope.dispose();
    currentScope = new Scope();
    for (const dlg of document.querySelectorAll('dialog')) dlg.remove();
    fill(main);
    document.title = 'corral';
    let found = null;
    for (const [re, nav, fn] of ROUTES) {
      const match = path.match(re);
      if (match) { found = { nav, fn, match }; break; }
    }
    for (const a of document.querySelectorAll('.nav a')) {
      if (found && a.dataset.route === found.nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    $('#nav').classList.remove('open');
    $('.nav-toggle').setAttribute('aria-expanded', 'false');
    if (!found) {
      main.append(pageHead('Not found'), h('p', null, 'No page here. ', h('a', { href: '#/' }, 'Back to the overview')));
      startGlobalFeed();
      return;
    }
    try {
      found.fn(main, currentScope, found.match, new URLSearchParams(search || ''));
    } catch (error) {
      console.error(error);
      main.append(errorBox(error));
    }
    window.scrollTo(0, 0);
  }

  // ---------------------------------------------------------------- boot
  function boot() {
    const toggle = $('.nav-toggle');
    toggle.addEventListener('click', () => {
      const open = $('#nav').classList.toggle('open');
      toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
    });
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && $('#nav').classList.contains('open')) {
        $('#nav').classList.remove('open');
        toggle.setAttribute('aria-expanded', 'false');
        toggle.focus();
      }
    });
    window.addEventListener('hashchange', route);
    route();
    updateLive();
    startGlobalFeed();
    refreshNeedsYou();
    // The theme stored with the other settings wins over this browser's copy.
    GET(`/api/v1/settings/${enc('ui.theme')}`).then((s) => {
      const value = s && (s.value ?? s.default);
      if (THEMES.includes(value)) {
        applyTheme(value);
        rememberTheme(value);
        const select = document.querySelector('[data-testid="theme"]');
        if (select) select.value = value;
      }
    }, () => { /* not a known setting on this daemon: the browser's copy stays */ });
  }
  // The overview's read starts while the page is still being parsed; its page takes it over.
  if (/^(#\/?)?$/.test(location.hash)) fetchOverview().catch(() => {});
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
  else boot();

  // For tests with node (pure logic only; nothing here runs outside a browser otherwise).
  if (typeof window !== 'undefined') window.corralDashboard = { reasonText, describeBlocker, argvLine, dur, clock, ago, firstLine };
})();
