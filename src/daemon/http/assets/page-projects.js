/* Projects (#/projects): the list, the add and edit dialog, archive; execution groups. */
import { fill, h, setText } from './dom.js';
import { ENGINES, fmtFull, fmtTime, fullAccessBadge } from './format.js';
import { api, enc, GET, qs } from './api.js';
import { startGlobalFeed } from './feeds.js';
import { confirmDialog, pageHead, panel, table, td, toast } from './ui.js';

export function pageProjects(main, scope) {
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
