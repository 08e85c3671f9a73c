/* The overview (#/): every session, filtered by state or text and kept current from the
 * daemon-wide feed; slots, runs, gaps, recent commands; the new-session form. */
import { fill, h, setAttr, setText } from './dom.js';
import {
  ago, argvLine, describeBlocker, ENGINES, fmtFull, fmtTime, fullAccessBadge, oneLine,
  OVERVIEW_REFRESH_KINDS, plural, reasonText, shortId, STATE_HELP, STATE_RANK, stateBadge, STATES,
} from './format.js';
import { api, enc, GET } from './api.js';
import { fetchOverview, onGlobal, startGlobalFeed } from './feeds.js';
import { elapsedEl, panel, table, td, toast } from './ui.js';

export function pageOverview(main, scope, params) {
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
  // The pauses in force, each with its Resume; "Pause all" when everything is not paused.
  const pausesEl = h('div', { class: 'pauses', testid: 'pauses' });
  const pauseAll = h('button', { type: 'button', testid: 'pause-all', title: 'Start no new run anywhere until resumed (what runs goes on)' }, 'Pause all');
  pauseAll.addEventListener('click', () => pauseAction('/api/v1/pause', { all: true }, 'Everything paused: no new run starts'));

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
    h('div', { class: 'page-head' }, h('div', null, h('h1', null, 'Overview'), subEl), h('div', { class: 'actions' }, pauseAll, jump)),
    pausesEl,
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
  async function pauseAction(path, body, said) {
    try {
      const r = await api('POST', path, body);
      toast(r.started ? `Resumed; ${r.started.length} prompt(s) started` : said);
    } catch (error) {
      toast(error.message, 'error');
    }
    refreshSoon(0);
  }
  function renderPauses(pauses) {
    pauseAll.hidden = pauses.some((p) => p.scope === 'all');
    fill(pausesEl, pauses.map((p) => {
      const what = p.scope === 'all' ? 'everything' : `${p.scope} ${p.name || p.target}`;
      const target = p.scope === 'all' ? { all: true } : { [p.scope]: p.target };
      const resume = h('button', { type: 'button', class: 'small', testid: 'pause-resume' }, 'Resume');
      resume.addEventListener('click', () => pauseAction('/api/v1/resume', target));
      return h('div', { class: 'pause-banner', testid: 'pause-banner', role: 'status' },
        h('span', null, stateBadge('paused'), ' ', h('strong', null, what), ` — ${p.reason}${p.hard ? ' (runs interrupted)' : ''}, since ${fmtTime(p.paused_at)}`), resume);
    }));
  }
  async function load() {
    lastRead = Date.now();
    GET('/api/v1/pauses').then((pauses) => { if (scope.alive) renderPauses(pauses || []); }).catch(() => {});
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
