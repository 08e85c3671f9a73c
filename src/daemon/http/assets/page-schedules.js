/* Schedules (#/schedules): prompts sent on a cron schedule, to a session or to a new session
 * of a project at each firing; the add form, each schedule's next time and last firing, its
 * firings (what each sent, or why it skipped), pause, resume and remove. */
import { fill, h, setText } from './dom.js';
import { fmtFull, fmtTime, oneLine, shortId } from './format.js';
import { api, enc, GET } from './api.js';
import { onGlobal, startGlobalFeed } from './feeds.js';
import { confirmDialog, pageHead, panel, table, td, toast } from './ui.js';

export function pageSchedules(main, scope) {
  document.title = 'Schedules · corral';
  const tbody = h('tbody');
  const countEl = h('span', { class: 'count' });
  const emptyEl = h('p', { class: 'empty', hidden: true, testid: 'schedules-empty' },
    'No schedule yet. Add one: where it sends, when (cron), and what.');
  main.append(
    pageHead('Schedules', 'Prompts sent at the times a cron expression names.'),
    addPanel(() => load()),
    h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', null, 'Schedules', countEl)),
      table({
        cls: 'schedules-table', stack: true,
        head: ['When', 'Sends', 'Next', 'Last firing', h('th', { class: 'num' }, '')],
        body: tbody,
      }),
      emptyEl));

  function rowOf(s) {
    const firingsEl = h('tr', { class: 'firings', hidden: true },
      h('td', { colspan: 5 }, h('ul', { class: 'firing-list', testid: 'schedule-firings' })));
    const toggle = h('button', { type: 'button', class: 'small', testid: 'schedule-firings-toggle' }, 'Firings');
    toggle.addEventListener('click', async () => {
      firingsEl.hidden = !firingsEl.hidden;
      if (firingsEl.hidden) return;
      try {
        const shown = await GET(`/api/v1/schedules/${enc(s.id)}?limit=20`);
        fill(firingsEl.querySelector('ul'), shown.firings.length
          ? shown.firings.map((f) => h('li', { testid: 'schedule-firing', data: { outcome: f.outcome } }, firingLine(f)))
          : h('li', { class: 'faint' }, 'no firing yet'));
      } catch (error) {
        fill(firingsEl.querySelector('ul'), h('li', { class: 'form-error' }, error.message));
      }
    });
    const pause = h('button', { type: 'button', class: 'small', testid: 'schedule-pause' }, s.paused ? 'Resume' : 'Pause');
    pause.addEventListener('click', () => change(s, s.paused ? 'resume' : 'pause'));
    const remove = h('button', { type: 'button', class: 'small danger', testid: 'schedule-remove' }, 'Remove');
    remove.addEventListener('click', () => removeSchedule(s));
    const next = s.paused ? h('span', { class: 'badge amber' }, 'paused')
      : s.next_at ? h('span', { title: fmtFull(s.next_at) }, fmtTime(s.next_at))
        : h('span', { class: 'faint' }, 'fires no more');
    const row = h('tr', { testid: 'schedule-row', data: { scheduleId: s.id, paused: String(s.paused) } },
      td('When', null, h('code', null, s.cron), s.catch_up ? h('div', { class: 'sub' }, 'catches up once') : null),
      td('Sends', null, h('div', null, target(s)), h('div', { class: 'sub', title: s.text }, oneLine(s.text).slice(0, 120))),
      td('Next', { class: 'nowrap small', testid: 'schedule-next' }, next),
      td('Last firing', { class: 'small', testid: 'schedule-last' }, s.last ? firingLine(s.last) : h('span', { class: 'faint' }, '—')),
      td('', { class: 'actions' }, toggle, ' ', pause, ' ', remove));
    return [row, firingsEl];
  }
  async function change(s, what) {
    try {
      const changed = await api('POST', `/api/v1/schedules/${enc(s.id)}/${what}`);
      toast(what === 'pause' ? 'Paused: it fires no more until resumed' : `Resumed; next ${fmtTime(changed.next_at)}`);
    } catch (error) {
      toast(error.message, 'error');
    }
    load();
  }
  async function removeSchedule(s) {
    const yes = await confirmDialog({
      title: 'Remove this schedule?',
      body: 'It fires no more and its firings are forgotten. The prompts it sent stay.',
      ok: 'Remove', danger: true,
    });
    if (!yes) return;
    try {
      await api('DELETE', `/api/v1/schedules/${enc(s.id)}`);
      toast('Schedule removed');
    } catch (error) {
      toast(error.message, 'error');
    }
    load();
  }
  // Read again when the earliest schedule is due (its firing sends a prompt, which the feed
  // tells too), not on a poll.
  let nextRead = null;
  async function load() {
    try {
      const list = await GET('/api/v1/schedules');
      if (!scope.alive) return;
      fill(tbody, list.flatMap(rowOf));
      setText(countEl, list.length ? ` ${list.length}` : '');
      emptyEl.hidden = list.length > 0;
      const soonest = Math.min(...list.filter((s) => !s.paused && s.next_at).map((s) => s.next_at));
      if (nextRead) clearTimeout(nextRead);
      if (Number.isFinite(soonest)) {
        // The daemon's clock may be ahead of this one (or a test's): at most a minute's wait.
        nextRead = scope.timeout(load, Math.min(Math.max(soonest - Date.now(), 0) + 1000, 60_000));
      }
    } catch (error) {
      if (scope.alive) fill(tbody, h('tr', null, h('td', { colspan: 5, class: 'form-error' }, error.message)));
    }
  }
  let soon = null;
  scope.add(onGlobal((ev) => {
    if (ev && !ev.kind.startsWith('prompt.')) return;
    if (!soon) soon = scope.timeout(() => { soon = null; load(); }, 300);
  }));
  load();
  startGlobalFeed();
}

/** What a schedule sends to, in words. */
function target(s) {
  const project = s.project_name || shortId(s.project_id);
  if (s.session_id) {
    return h('a', { href: `#/sessions/${enc(s.session_id)}` }, s.session_title || shortId(s.session_id));
  }
  return h('span', null, 'a new session of ', h('strong', null, project));
}

/** A firing: when it was due, what came of it, and what it sent or why not. */
function firingLine(f) {
  const kind = { sent: 'ok', skipped: 'amber', failed: 'danger', sending: 'info' }[f.outcome] || '';
  return h('span', null,
    h('span', { title: fmtFull(f.due_at) }, fmtTime(f.due_at)), ' ',
    h('span', { class: `badge ${kind}` }, f.outcome),
    f.prompt_id && f.session_id ? [' ', h('a', { href: `#/sessions/${enc(f.session_id)}` }, 'its session')] : null,
    f.reason ? h('span', { class: 'sub' }, ` ${f.reason}`) : null);
}

/** The add form: where (a session, or a project: a new session per firing), when, what. */
function addPanel(added) {
  const where = h('select', { testid: 'schedule-target', 'aria-label': 'Where it sends' });
  const cron = h('input', { type: 'text', placeholder: '0 9 * * 1-5', testid: 'schedule-cron', spellcheck: false, 'aria-label': 'When (cron)' });
  const text = h('textarea', { rows: 2, placeholder: 'Triage the new issues', testid: 'schedule-text', 'aria-label': 'The prompt' });
  const catchUp = h('input', { type: 'checkbox', testid: 'schedule-catch-up' });
  const error = h('p', { class: 'form-error', role: 'alert', testid: 'schedule-error' });
  const form = h('form', { class: 'panel-body inline-form', testid: 'schedule-form' },
    h('div', { class: 'field' }, h('label', null, 'Sends to'), where),
    h('div', { class: 'field' }, h('label', null, 'When'), cron,
      h('span', { class: 'hint' }, 'minute hour day month weekday, local time')),
    h('div', { class: 'field wide' }, h('label', null, 'Prompt'), text),
    h('label', { class: 'check', style: 'padding-bottom:8px' }, catchUp,
      h('span', null, 'catch up', h('span', { class: 'hint' }, 'a time missed while no daemon ran is sent once, late'))),
    h('button', { type: 'submit', class: 'primary', testid: 'schedule-add' }, 'Add schedule'),
    h('div', { style: 'flex-basis:100%' }, error));
  Promise.all([GET('/api/v1/sessions'), GET('/api/v1/projects')]).then(([sessions, projects]) => {
    fill(where,
      h('optgroup', { label: 'A session' }, sessions.map((s) => h('option', { value: `session:${s.id}` }, s.title || shortId(s.id)))),
      h('optgroup', { label: 'A new session of a project, each time' }, projects.map((p) => h('option', { value: `project:${p.id}` }, p.name))));
  }).catch((err) => setText(error, err.message));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setText(error, '');
    const [kind, id] = where.value.split(/:(.*)/s);
    if (!id) { setText(error, 'Choose where it sends.'); return; }
    try {
      const s = await api('POST', '/api/v1/schedules', { [kind]: id, cron: cron.value.trim(), text: text.value, catch_up: catchUp.checked });
      toast(`Schedule added; next ${fmtTime(s.next_at)}`);
      text.value = '';
      added();
    } catch (err) {
      setText(error, err.message);
    }
  });
  return panel('Add a schedule', form);
}
