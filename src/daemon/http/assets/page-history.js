/* History (#/history): the exec ledger, filtered, newest first, 50 commands a page. */
import { fill, h, setText } from './dom.js';
import { argvLine, dur, fmtFull, fmtTime, oneLine, plural, shortId, stateBadge } from './format.js';
import { enc, GET, qs } from './api.js';
import { lastOverviewRead, startGlobalFeed } from './feeds.js';
import { elapsedEl, pageHead, table, td } from './ui.js';

export function pageHistory(main, scope, query) {
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
  const seen = lastOverviewRead();
  const titles = new Map(((seen && seen.sessions) || []).map((x) => [x.id, x.title]).filter(([, t]) => t));
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
