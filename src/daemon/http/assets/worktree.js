/* The session page's worktree panel (a worktree session only): branch, base, state, diff stat,
 * merge, recreate, discard. */
import { fill, h, setAttr, setText } from './dom.js';
import { plural, shortSha } from './format.js';
import { api, enc, GET, qs } from './api.js';
import { confirmDialog, panel, toast } from './ui.js';

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
export const WORKTREE_HELP = {
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
export function worktreePanel(scope, hooks) {
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
