/* corral dashboard: plain ES modules served from the binary, no framework, no build step,
 * nothing from another host. This one boots it. index.html loads it with <script type=module>;
 * modules are deferred, so the stored theme is applied before the first paint by theme-early.js,
 * a classic script in <head>.
 *
 * The modules, files of assets/ served as /assets/NAME (api.rs lists them); each imports only
 * from those above it here:
 *   theme.js        the themes; apply one, remember it in this browser
 *   dom.js          h() builds elements; every string from the daemon goes in as text, never HTML
 *   format.js       times, durations, argv, short ids, session states, engines, event kinds
 *   api.js          fetch of /api/v1 with the CSRF token on writes; errors as ApiError
 *   feeds.js        WebSockets on /api/v1/events that resume from the last seq seen;
 *                   [data-testid=live], and a notice when they come back (a restart);
 *                   the daemon-wide feed and the overview read it follows
 *   needs-you.js    the header's Needs you count
 *   ui.js           a page's Scope, dialogs (confirm), toasts, the one-second ticker, panels, tables
 *   transcript.js   a session's transcript, from its events
 *   worktree.js     a worktree session's panel: branch, diff stat, merge, recreate, discard
 *   page-overview.js, page-session.js, page-projects.js, page-settings.js, page-history.js
 *   router.js       hash routes (#/, #/sessions/ID, #/projects, #/settings, #/history)
 *   app.js          boot
 * State that two modules share is kept by one and read through its functions (the overview last
 * read: feeds.js's lastOverviewRead()); the rest of each module's state is its own.
 *
 * The DOM contract is its data-testid names: the browser tests (tests/it/dashboard.rs) rely on
 * them.
 */
import { applyTheme, rememberTheme, THEMES } from './theme.js';
import { $ } from './dom.js';
import { ago, argvLine, clock, describeBlocker, dur, firstLine, reasonText } from './format.js';
import { enc, GET } from './api.js';
import { fetchOverview, startGlobalFeed, updateLive } from './feeds.js';
import { refreshNeedsYou } from './needs-you.js';
import { route } from './router.js';
import { toast } from './ui.js';

function boot() {
  const toggle = $('.nav-toggle');
  toggle.addEventListener('click', () => {
    const open = $('#nav').classList.toggle('open');
    toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && $('#nav').classList.contains('open')) {
      $('#nav').classList.remove('open');
      toggle.setAttribute('aria-expanded', 'false');
      toggle.focus();
    }
  });
  window.addEventListener('hashchange', route);
  // The live feed came back: a notice, as the connection's loss is not an error the person
  // made (a restart or an upgrade of the daemon reads as such).
  document.addEventListener('corral:reconnected', (e) => {
    toast(e.detail.restarted ? 'Reconnected: the daemon was restarted' : 'Reconnected to the daemon');
  });
  route();
  updateLive();
  startGlobalFeed();
  refreshNeedsYou();
  // The theme stored with the other settings wins over this browser's copy.
  GET(`/api/v1/settings/${enc('ui.theme')}`).then((s) => {
    const value = s && (s.value ?? s.default);
    if (THEMES.includes(value)) {
      applyTheme(value);
      rememberTheme(value);
      const select = document.querySelector('[data-testid="theme"]');
      if (select) select.value = value;
    }
  }, () => { /* not a known setting on this daemon: the browser's copy stays */ });
}
// The overview's read starts before the first route; its page takes it over.
if (/^(#\/?)?$/.test(location.hash)) fetchOverview().catch(() => {});
// A module runs once the page is parsed, so this boots at once; the wait is for a page that
// loads this otherwise.
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();

// For tests with node (pure logic only; nothing here runs outside a browser otherwise).
if (typeof window !== 'undefined') window.corralDashboard = { reasonText, describeBlocker, argvLine, dur, clock, ago, firstLine };
