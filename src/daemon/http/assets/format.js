/* Words and numbers as the page shows them: times, durations, argv, short ids; and the
 * daemon's words (session states, engines, the event kinds after which a state may change). */
import { h } from './dom.js';

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const pad2 = (n) => String(n).padStart(2, '0');

export function fmtTime(ms) {
  if (ms === null || ms === undefined) return '—';
  const d = new Date(ms);
  return d.toDateString() === new Date().toDateString() ? timeFmt.format(d) : dayFmt.format(d);
}
export function fmtFull(ms) { return ms === null || ms === undefined ? '' : fullFmt.format(new Date(ms)); }
export function ago(ms, now = Date.now()) {
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
export function dur(ms) {
  if (ms === null || ms === undefined || !isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad2(Math.floor(s % 60))}s`;
  return `${Math.floor(m / 60)}h ${pad2(m % 60)}m`;
}
/** A running clock: 0:07, 12:03, 1:02:03. */
export function clock(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
  return hh ? `${hh}:${pad2(mm)}:${pad2(ss)}` : `${mm}:${pad2(ss)}`;
}
/** What the CLI shows of an id: its first 18 characters (ShortIds' least). */
export const shortId = (id) => (id ? String(id).slice(0, 18) : '—');
export function firstLine(text) {
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
export function argvLine(argv) {
  if (argv === null || argv === undefined) return '';
  if (Array.isArray(argv)) return argv.map(shellQuote).join(' ');
  return typeof argv === 'string' ? argv : JSON.stringify(argv);
}
export const oneLine = (text) => String(text === null || text === undefined ? '' : text).replace(/\s*\n\s*/g, ' ⏎ ');
export const plural = (n, word, many) => `${n} ${n === 1 ? word : (many || word + 's')}`;

// The daemon's words for a session (store/overview.rs computes them; this page never does).
export const STATES = ['needs-you', 'working', 'waiting-for-slot', 'backing-off', 'paused', 'queued', 'idle', 'failed', 'archived'];
export const STATE_RANK = Object.fromEntries(STATES.map((s, i) => [s, i]));
export const STATE_HELP = {
  'needs-you': 'the agent asked you something and waits for your answer',
  working: 'an engine runs a prompt',
  'waiting-for-slot': 'a prompt waits for a slot (the reason says what holds it)',
  'backing-off': 'a failed run waits before its retry',
  paused: 'a pause holds it: no new run starts until it is resumed',
  queued: 'prompts wait their turn',
  idle: 'answered; waits for a prompt',
  failed: 'the last prompt failed',
  archived: 'archived',
};
/** A badge: colour from data-state, and the word itself. */
export function stateBadge(state, props = {}) {
  const word = state || 'unknown';
  return h('span', Object.assign({ class: 'state', data: { state: word }, title: STATE_HELP[word] || '' }, props), word);
}
export function fullAccessBadge() {
  return h('span', { class: 'badge warn-full', testid: 'full-access-warning', title: 'Engines of this project run without sandbox or approvals' }, 'full access');
}

/** `reason`, with a countdown to `until` when there is one (backing off). */
export function reasonText(reason, until, now = Date.now()) {
  if (!until) return reason || '';
  const left = Math.max(0, until - now);
  return `${reason || ''} · ${left ? `next try in ${Math.ceil(left / 1000)} s` : 'trying again'}`;
}

/** What a slot waiter waits for (a `held_by` / `blocker`), in words. */
export function describeBlocker(b) {
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

export const ENGINES = ['codex', 'codex-app-server', 'claude', 'opencode', 'command', 'fake'];
/** Engines that take steering and compaction (docs/protocol.md: session.steer, session.compact). */
export const STEERABLE = new Set(['codex-app-server']);

/** Kinds after which the overview is read again (queued counts, slots, runs move). */
export const OVERVIEW_REFRESH_KINDS = /^(prompt\.|run\.|slot\.|app_server\.|approval\.|retry\.)/;
/** The events after which a session's state may read differently. */
export const STATE_KINDS = OVERVIEW_REFRESH_KINDS;

/** A commit's short form, as git prints it. */
export const shortSha = (sha) => (sha ? String(sha).slice(0, 7) : '—');
