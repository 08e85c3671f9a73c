/* The theme: system, light or dark, as <html data-theme>. This browser keeps a copy in
 * localStorage so that the next visit paints in it at once (theme-early.js applies it before the
 * first paint); the setting ui.theme, read at boot, wins over that copy. */

export const THEMES = ['system', 'light', 'dark'];
const THEME_KEY = 'corral.theme'; // theme-early.js reads it too
export function applyTheme(theme) {
  const chosen = THEMES.includes(theme) ? theme : 'system';
  document.documentElement.setAttribute('data-theme', chosen);
  return chosen;
}
export function rememberTheme(theme) {
  try { localStorage.setItem(THEME_KEY, theme); } catch (_) { /* private mode */ }
}
