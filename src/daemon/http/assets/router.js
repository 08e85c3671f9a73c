/* Hash routes: #/, #/sessions/ID, #/projects, #/schedules, #/settings, #/history. Each page gets a fresh
 * Scope, disposed of when the route changes. */
import { $, fill, h } from './dom.js';
import { startGlobalFeed } from './feeds.js';
import { errorBox, pageHead, Scope } from './ui.js';
import { pageOverview } from './page-overview.js';
import { pageSession } from './page-session.js';
import { pageProjects } from './page-projects.js';
import { pageSchedules } from './page-schedules.js';
import { pageSettings } from './page-settings.js';
import { pageHistory } from './page-history.js';

const ROUTES = [
  [/^\/?$/, 'overview', (m, s, match, q) => pageOverview(m, s, q)],
  [/^\/sessions\/([^/]+)\/?$/, 'overview', (m, s, match) => pageSession(m, s, decodeURIComponent(match[1]))],
  [/^\/projects\/?$/, 'projects', (m, s) => pageProjects(m, s)],
  [/^\/schedules\/?$/, 'schedules', (m, s) => pageSchedules(m, s)],
  [/^\/settings\/?$/, 'settings', (m, s) => pageSettings(m, s)],
  [/^\/history\/?$/, 'history', (m, s, match, q) => pageHistory(m, s, q)],
];
let currentScope = null;
export function route() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, search] = raw.split('?');
  const main = $('#main');
  if (currentScope) currentScope.dispose();
  currentScope = new Scope();
  for (const dlg of document.querySelectorAll('dialog')) dlg.remove();
  fill(main);
  document.title = 'corral';
  let found = null;
  for (const [re, nav, fn] of ROUTES) {
    const match = path.match(re);
    if (match) { found = { nav, fn, match }; break; }
  }
  for (const a of document.querySelectorAll('.nav a')) {
    if (found && a.dataset.route === found.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  $('#nav').classList.remove('open');
  $('.nav-toggle').setAttribute('aria-expanded', 'false');
  if (!found) {
    main.append(pageHead('Not found'), h('p', null, 'No page here. ', h('a', { href: '#/' }, 'Back to the overview')));
    startGlobalFeed();
    return;
  }
  try {
    found.fn(main, currentScope, found.match, new URLSearchParams(search || ''));
  } catch (error) {
    console.error(error);
    main.append(errorBox(error));
  }
  window.scrollTo(0, 0);
}
