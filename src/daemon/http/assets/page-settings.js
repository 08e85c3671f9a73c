/* Settings (#/settings): the theme, and each of the daemon's settings with its default. */
import { applyTheme, rememberTheme, THEMES } from './theme.js';
import { fill, h, setText } from './dom.js';
import { ENGINES } from './format.js';
import { api, enc, GET } from './api.js';
import { startGlobalFeed } from './feeds.js';
import { errorBox, pageHead, panel } from './ui.js';

export function pageSettings(main, scope) {
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
