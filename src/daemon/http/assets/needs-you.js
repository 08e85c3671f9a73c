/* The header's *Needs you*: how many requests of agents wait for a person. Its listener on the
 * daemon-wide feed is added when this module loads, before any page's. */
import { $, setText } from './dom.js';
import { enc, GET } from './api.js';
import { onGlobal } from './feeds.js';

/** The header's *Needs you*: how many requests of agents wait for a person, kept by the
 * daemon-wide feed (read again on each approval event, and after a reconnect). */
let needsYouRead = null;
export function refreshNeedsYou() {
  if (needsYouRead) return;
  needsYouRead = GET('/api/v1/approvals').then((pending) => {
    const link = $('[data-testid="needs-you"]');
    const n = Array.isArray(pending) ? pending.length : 0;
    setText($('[data-testid="needs-you-count"]'), String(n));
    link.hidden = n === 0;
    // The oldest request's session: where a click takes the person.
    if (n) link.setAttribute('href', `#/sessions/${enc(pending[0].session_id)}`);
  }, () => { /* an older daemon, or the page is leaving: the count stays */ }).finally(() => { needsYouRead = null; });
}
onGlobal((event) => {
  if (!event || /^approval\./.test(event.kind)) refreshNeedsYou();
});
