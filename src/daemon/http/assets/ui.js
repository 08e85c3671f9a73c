/* What every page uses: its Scope (what it set up, undone when it is left), toasts, the confirm
 * dialog, page heads, panels and tables; and the one clock, started when this module loads, that
 * keeps elapsed times, "N min ago" and countdowns current. */
import { $, h, setText } from './dom.js';
import { ago, clock, fmtFull, oneLine, reasonText } from './format.js';
import { ApiError } from './api.js';
import { Feed } from './feeds.js';

/** Everything a page set up, undone when the page is left. */
export class Scope {
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

export function toast(message, kind = 'ok') {
  const box = $('#toasts');
  if (!box) return;
  const el = h('div', { class: `toast ${kind === 'error' ? 'error' : ''}`, role: kind === 'error' ? 'alert' : 'status' }, message);
  box.appendChild(el);
  setTimeout(() => el.remove(), kind === 'error' ? 8000 : 3500);
}

/** An explicit yes/no in a modal dialog (no window.confirm: it blocks, and tests drive it as DOM). */
export function confirmDialog({ title, body, ok = 'OK', danger = false }) {
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
export const elapsedEl = (since, props = {}) => h('span', Object.assign({ class: 'elapsed', data: { elapsed: since }, title: `since ${fmtFull(since)}` }, props), clock(Date.now() - since));
export const agoEl = (ms) => (ms ? h('span', { data: { ago: ms }, title: fmtFull(ms) }, ago(ms)) : h('span', { class: 'faint' }, '—'));

export function pageHead(title, sub, ...right) {
  return h('div', { class: 'page-head' },
    h('div', null, h('h1', null, title), sub ? h('p', { class: 'sub' }, sub) : null),
    right.length ? h('div', { class: 'row' }, right) : null);
}
export function panel(title, body, ...headRight) {
  return h('section', { class: 'panel' },
    h('div', { class: 'panel-head' }, typeof title === 'string' ? h('h2', null, title) : title, headRight.length ? h('div', { class: 'row' }, headRight) : null),
    body);
}
export function errorBox(error) {
  return h('div', { class: 'panel' }, h('div', { class: 'panel-body' },
    h('p', { class: 'form-error', role: 'alert' }, error instanceof ApiError ? error.message : String(error))));
}
/** A table that scrolls sideways on narrow screens, or stacks into cards (`stack`). */
export function table({ cls = '', cols, head, stack = false, body }) {
  return h('div', { class: 'table-wrap' },
    h('table', { class: `${cls} ${stack ? 'stack' : ''}` },
      cols ? h('colgroup', null, cols.map((c) => h('col', { class: c }))) : null,
      h('thead', null, h('tr', null, head.map((t) => (typeof t === 'string' ? h('th', null, t) : t)))),
      body));
}
export const td = (label, props, ...children) => h('td', Object.assign({ data: { label } }, props || {}), ...children);
