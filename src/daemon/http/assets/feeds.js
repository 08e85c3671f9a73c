/* The event feeds: WebSockets on /api/v1/events that resume from the last seq seen, and
 * [data-testid=live], true while all of them are connected. Also the daemon-wide feed, open for
 * the whole visit, and the overview read it starts after (the overview page shares that read).
 * Feeds are poked to reconnect when the page or the network comes back (listeners set here). */
import { setAttr, setText } from './dom.js';
import { GET } from './api.js';

/** Every open feed; [data-testid=live] is true when all of them are connected. */
const feeds = new Set();
export function updateLive() {
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
export class Feed {
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
export function fetchOverview() {
  if (overviewInFlight) return overviewInFlight;
  overviewInFlight = GET('/api/v1/overview').then((ov) => {
    lastOverview = ov;
    return ov;
  }).finally(() => { overviewInFlight = null; });
  return overviewInFlight;
}
export function startGlobalFeed() {
  if (globalFeed) return;
  const begin = (after) => {
    if (globalFeed) return;
    globalFeed = new Feed({
      after,
      onEvent: (event) => globalListeners.forEach((fn) => fn(event)),
      onOpen: (again) => {
        if (again) globalListeners.forEach((fn) => fn(null));
        noteDaemon(again);
      },
    });
  };
  (overviewInFlight || fetchOverview()).then(
    (ov) => begin(typeof ov.feed_seq === 'number' ? ov.feed_seq : null),
    () => setTimeout(() => { globalFeed = null; startGlobalFeed(); }, 3000),
  );
}
/** The daemon's pid as this visit last saw it, and how many times the feed came back. */
let daemonPid = null;
let reconnects = 0;
/**
 * Reads which daemon serves the page. When the feed came back (`again`), says so on
 * [data-testid=live] (`data-reconnects`, `data-restarted`) and with a `corral:reconnected`
 * event (the app shows it as a notice): a restarted daemon is news, not a failure.
 */
function noteDaemon(again) {
  GET('/api/v1/status').then((status) => {
    const pid = status && status.daemon ? status.daemon.pid : null;
    if (again) {
      const restarted = daemonPid !== null && pid !== null && pid !== daemonPid;
      reconnects += 1;
      const el = document.querySelector('[data-testid="live"]');
      if (el) {
        setAttr(el, 'data-reconnects', String(reconnects));
        setAttr(el, 'data-restarted', restarted ? 'true' : 'false');
      }
      document.dispatchEvent(new CustomEvent('corral:reconnected', { detail: { restarted } }));
    }
    if (pid !== null) daemonPid = pid;
  }, () => { /* a 401 sends the page to the login; anything else: the next reconnect reads */ });
}
/** The overview this visit read last, or null: the history page takes sessions' titles from it. */
export function lastOverviewRead() {
  return lastOverview;
}
/** Listen to the daemon-wide feed; `fn(null)` means "reconnected: read everything again". */
export function onGlobal(fn) {
  globalListeners.add(fn);
  return () => globalListeners.delete(fn);
}
