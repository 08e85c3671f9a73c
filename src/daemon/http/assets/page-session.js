/* A session's page (#/sessions/ID): the transcript from the session's own feed, the composer
 * (prompt, images, steer, cancel), rename, compact, archive, the worktree panel, the runs. */
import { $, fill, h, setText } from './dom.js';
import {
  argvLine, dur, fmtFull, fmtTime, fullAccessBadge, oneLine, reasonText, shortId, STATE_KINDS,
  stateBadge, STEERABLE,
} from './format.js';
import { api, enc, GET, qs } from './api.js';
import { startGlobalFeed } from './feeds.js';
import { confirmDialog, elapsedEl, errorBox, pageHead, panel, toast } from './ui.js';
import { Transcript } from './transcript.js';
import { WORKTREE_HELP, worktreePanel } from './worktree.js';

export function pageSession(main, scope, selector) {
  const S = { id: null, session: null, prompts: [], runs: [], project: null, running: null, attachments: [] };
  const titleEl = h('h1', { testid: 'session-title' }, 'Loading…');
  const stateSlot = h('span');
  const metaEl = h('div', { class: 'meta' });
  const titleWrap = h('div', { class: 'title-wrap' }, titleEl, metaEl);
  const back = h('a', { href: '#/', class: 'back small' }, '← Overview');
  const renameBtn = h('button', { type: 'button', testid: 'session-rename', title: 'Rename this session' }, 'Rename');
  const compactBtn = h('button', { type: 'button', testid: 'session-compact', hidden: true, title: "Compact the thread's context" }, 'Compact');
  const pauseBtn = h('button', { type: 'button', testid: 'session-pause', title: 'Start no new run in this session until it is resumed' }, 'Pause');
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
    h('div', { class: 'session-head' }, titleWrap, h('div', { class: 'actions' }, renameBtn, pauseBtn, compactBtn, archiveBtn)),
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
    // Paused (by this session's pause or a wider one): the button resumes what the state's
    // next action names, which says which pause holds it.
    const paused = st.state === 'paused';
    setText(pauseBtn, paused ? 'Resume' : 'Pause');
    pauseBtn.title = paused ? `${st.reason} — ${st.next_action || ''}` : 'Start no new run in this session until it is resumed';
    pauseBtn.disabled = !!s.archived_at;
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
    // What it waits for besides its turn: the prompts it runs after, its due time.
    const waitsFor = (p) => [
      ...(p.after || []).map((id) => h('span', { class: 'muted', testid: 'queued-after', title: p.after_any ? 'runs however it ends' : 'runs once it is done' },
        `after ${shortId(id)}${p.after_any ? ' (any end)' : ''}`)),
      ...(p.due_at ? [h('span', { class: 'muted', testid: 'queued-due', title: fmtFull(p.due_at) }, `due ${fmtTime(p.due_at)}`)] : []),
    ];
    fill(queuedEl, ...queued.map((p) => h('div', { class: 'queued-item', testid: 'queued-prompt', data: { promptId: p.id } },
      stateBadge('queued'), h('span', { class: 'text', title: p.text }, oneLine(p.text)), ...waitsFor(p),
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
      if (prompt && prompt.status === 'queued') {
        toast(S.state && S.state.state === 'paused' ? 'Queued: it runs once the pause is lifted' : 'Queued: it runs after the current prompt');
      }
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
  pauseBtn.addEventListener('click', async () => {
    const st = S.state || {};
    pauseBtn.disabled = true;
    try {
      if (st.state === 'paused') {
        const r = await api('POST', '/api/v1/resume', resumeTarget(st.paused_by, S.id));
        toast(r.pauses && r.pauses.length && r.started.length === 0 && !r.lifted ? 'Not paused by this session' : `Resumed; ${r.started.length} prompt(s) started`);
      } else {
        await api('POST', '/api/v1/pause', { session: S.id });
        toast('Paused: no new run starts here until it is resumed');
      }
    } catch (error) {
      toast(error.message, 'error');
    }
    await loadSession().catch(() => {});
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

/** The scope a paused session's resume names: the pause that holds it (its state's
 * `paused_by`, `{scope, target}`), else the session's own. */
export function resumeTarget(pausedBy, sessionId) {
  if (!pausedBy) return { session: sessionId };
  if (pausedBy.scope === 'all') return { all: true };
  return { [pausedBy.scope]: pausedBy.target };
}
