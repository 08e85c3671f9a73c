/* corral dashboard: the theme this browser stored, applied before the first paint. A classic
 * script loaded in <head>, not a module: modules are deferred, and the page would first paint in
 * the other theme. theme.js has the rest (the same key, the names, switching). */
(() => {
  'use strict';
  let theme = null;
  try { theme = localStorage.getItem('corral.theme'); } catch (_) { /* private mode */ }
  document.documentElement.setAttribute('data-theme', theme === 'light' || theme === 'dark' ? theme : 'system');
})();
