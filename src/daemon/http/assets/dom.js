/* Building the page: h() makes elements, and every string from the daemon goes in as text,
 * never as HTML. */

/** An element: props set attributes/properties/listeners; children are nodes or text. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  let value;
  if (props) {
    for (const key of Object.keys(props)) {
      const v = props[key];
      if (v === undefined || v === null || v === false) continue;
      if (key === 'class') el.className = v;
      else if (key === 'testid') el.setAttribute('data-testid', v);
      else if (key === 'data') {
        for (const [dk, dv] of Object.entries(v)) if (dv !== undefined && dv !== null) el.dataset[dk] = String(dv);
      } else if (key === 'on') {
        for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      } else if (key === 'text') el.textContent = String(v);
      else if (key === 'value') value = v;
      else if (key.startsWith('aria-') || key === 'role' || key === 'for' || key === 'list' || key === 'colspan' || key === 'form') {
        el.setAttribute(key, v === true ? 'true' : String(v));
      } else if (key in el && typeof el[key] !== 'function') el[key] = v;
      else el.setAttribute(key, v === true ? '' : String(v));
    }
  }
  append(el, children);
  if (value !== undefined) el.value = value; // after the options of a <select>
  return el;
}
export function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false || child === true) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}
/** Replaces an element's children (null and false are skipped, unlike replaceChildren). */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}
/** Sets text only when it changed (no needless layout). */
export function setText(el, text) {
  const t = text === null || text === undefined ? '' : String(text);
  if (el.textContent !== t) el.textContent = t;
}
export function setAttr(el, name, value) {
  const v = String(value);
  if (el.getAttribute(name) !== v) el.setAttribute(name, v);
}
export const $ = (sel, root = document) => root.querySelector(sel);
