/* A session's transcript, built from its events as they come (the session page feeds it). */
import { fill, h, setText } from './dom.js';
import {
  argvLine, describeBlocker, dur, firstLine, fmtFull, oneLine, plural, shortId, shortSha,
} from './format.js';
import { api, enc } from './api.js';
import { toast } from './ui.js';

const META_KINDS = new Set(['thread.started', 'turn.started', 'turn.completed', 'usage', 'run.started', 'run.exited', 'slot.granted', 'prompt.done', 'title.generated',
  'worktree.created', 'worktree.removed', 'setup.started', 'setup.exited', 'session.merged']);
const LOG_KINDS = new Set(['stderr', 'raw', 'setup.output']);
const TITLE_LINE = /^\s*<!--\s*corral-title:.*?-->\s*\n?/;

/** What a tool event's detail says in one line, per engine shape (codex items, claude blocks). */
function toolSummary(name, d) {
  if (!d || typeof d !== 'object') return '';
  if (typeof d.command === 'string') return d.command;
  if (Array.isArray(d.command)) return argvLine(d.command);
  const input = d.input && typeof d.input === 'object' ? d.input : null;
  if (input) {
    for (const k of ['command', 'file_path', 'path', 'pattern', 'url', 'query', 'description', 'prompt']) if (typeof input[k] === 'string') return input[k];
    return JSON.stringify(input);
  }
  if (typeof d.text === 'string') return firstLine(d.text).replace(/\*\*/g, '');
  if (typeof d.query === 'string') return d.query;
  if (Array.isArray(d.changes)) return d.changes.map((c) => `${c.kind || ''} ${c.path || ''}`.trim()).join(', ');
  if (d.server || d.tool) return [d.server, d.tool].filter(Boolean).join(' · ');
  if (Array.isArray(d.items)) return `${d.items.length} items`;
  return '';
}
/** A tool_result's content: a string, or blocks of text. */
function resultText(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((b) => (b && typeof b.text === 'string' ? b.text : JSON.stringify(b))).join('\n');
  return content === undefined ? '' : JSON.stringify(content, null, 2);
}
const pretty = (v) => { try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); } };

/**
 * An agent's text with its code shown as code: ``` fences become <pre>, `spans` <code>.
 * Built from text nodes only, so whatever the agent wrote stays text.
 */
function richText(el, text) {
  const src = String(text);
  const out = [];
  const fence = /```[^\n`]*\n([\s\S]*?)(?:\n?```[ \t]*(?:\n|$)|$)/g;
  let at = 0;
  let m;
  while ((m = fence.exec(src)) !== null) {
    if (m.index > at) out.push(inlineCode(src.slice(at, m.index)));
    out.push(h('pre', { class: 'code' }, m[1]));
    at = fence.lastIndex;
    if (m[0] === '') { fence.lastIndex += 1; }
  }
  if (at < src.length) out.push(inlineCode(src.slice(at)));
  fill(el, out);
}
function inlineCode(text) {
  const parts = text.split(/`([^`\n]+)`/);
  return parts.map((part, i) => (i % 2 ? h('code', null, part) : part));
}

/**
 * The transcript of one session, built from its events as they come: each event is an
 * element `[data-testid=event]` with `data-kind` and `data-seq`, grouped by prompt. Deltas
 * grow one agent message; a tool's later events (codex item.completed, claude tool_result)
 * fold into the first one's <details>. Events are added once per animation frame.
 */
export class Transcript {
  constructor(root, hooks) {
    this.root = root;
    this.hooks = hooks;
    this.turns = new Map();
    this.tools = new Map();
    this.streams = new Map();
    this.spoke = new Set(); // prompts whose agent text is shown
    this.queue = [];
    this.scheduled = false;
    this.dirty = new Set(); // streams whose text grew in this frame
    this.emptyEl = h('p', { class: 'empty' }, 'No event yet. Send a prompt below.');
    this.root.appendChild(this.emptyEl);
  }
  push(ev) {
    this.queue.push(ev);
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }
  flush() {
    this.scheduled = false;
    const stick = atBottom();
    // A long replay is built a slice per frame, so the page keeps answering meanwhile.
    const batch = this.queue.splice(0, 1500);
    if (this.queue.length) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
    for (const ev of batch) {
      try { this.add(ev); } catch (error) { console.error('event', ev, error); }
    }
    for (const s of this.dirty) s.text.textContent = s.raw.replace(TITLE_LINE, '');
    this.dirty.clear();
    if (batch.length && this.emptyEl.parentNode) this.emptyEl.remove();
    if (stick && batch.length) window.scrollTo(0, document.documentElement.scrollHeight);
  }
  base(ev, cls, ...children) {
    return h('div', { class: `ev ${cls}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq, at: ev.at }, title: fmtFull(ev.at) }, ...children);
  }
  turn(promptId, text) {
    let t = this.turns.get(promptId);
    if (!t) {
      t = h('section', { class: 'turn', data: { promptId } });
      this.turns.set(promptId, t);
      this.root.appendChild(t);
    }
    return t;
  }
  container(ev) { return ev.prompt_id ? this.turn(ev.prompt_id) : this.root; }
  add(ev) {
    const kind = ev.kind;
    const p = ev.payload || {};
    const box = this.container(ev);
    if (kind === 'prompt.started') return this.user(box, ev, p);
    if (kind === 'message.delta') return this.delta(box, ev, p);
    if (kind === 'message') return this.message(box, ev, p);
    if (kind === 'tool') return this.tool(box, ev, p);
    if (kind === 'approval.requested') return this.approval(box, ev, p.approval || {});
    if (kind === 'approval.answered') return this.answered(box, ev, p.approval || {});
    if (LOG_KINDS.has(kind)) return this.log(box, ev, kind === 'raw' ? (p.line ?? pretty(p)) : p.line, kind === 'setup.output' ? 'setup output' : 'engine output');
    if (kind === 'prompt.done') {
      this.endStream(ev);
      if (!this.spoke.has(ev.prompt_id) && p.answer) {
        // No message told the answer (the command engine): show it, as part of this event.
        this.spoke.add(ev.prompt_id);
        const body = h('div', { class: 'agent-text', testid: 'agent-text' });
        richText(body, String(p.answer).replace(TITLE_LINE, ''));
        box.appendChild(h('div', { class: 'ev ev-agent' }, body));
      }
    }
    if (kind === 'title.generated' && p.title && this.hooks.onTitle) this.hooks.onTitle(p.title);
    if (META_KINDS.has(kind)) return this.meta(box, ev, p);
    const note = this.noteOf(kind, p);
    if (note) {
      if (kind === 'prompt.failed' || kind === 'prompt.cancelled') this.endStream(ev);
      return box.appendChild(this.base(ev, `ev-note ${note.cls}`, h('span', { class: 'label' }, note.label), h('span', { class: 'detail' }, note.detail || '')));
    }
    // A kind this page does not know: shown as it is.
    box.appendChild(this.base(ev, 'ev-generic', h('details', null, h('summary', null, h('span', { class: 'mono' }, kind)), h('div', { class: 'tbody' }, h('pre', null, pretty(p))))));
  }
  /** What the engine asks a person: the request, with Approve / Deny while it waits. */
  approval(box, ev, a) {
    const actions = h('div', { class: 'approval-actions' });
    const status = h('span', { class: 'approval-status', testid: 'approval-status' }, 'waits for you');
    const card = this.base(ev, 'ev-approval waiting',
      h('div', { class: 'approval-head' }, h('span', { class: 'label' }, 'Needs you'), h('span', { class: 'mono' }, `${a.tool || 'tool'}${a.target ? ` ${a.target}` : ''}`)),
      a.reason ? h('div', { class: 'approval-why' }, `why: ${a.reason}`) : null,
      h('div', { class: 'approval-foot' }, status, actions));
    card.dataset.approval = a.id || '';
    card.setAttribute('data-testid', 'approval');
    const answer = (decision) => async () => {
      for (const b of actions.querySelectorAll('button')) b.disabled = true;
      try {
        const done = await api('POST', `/api/v1/approvals/${enc(a.id)}/${decision}`, {});
        this.settle(card, done);
      } catch (error) {
        toast(error.message || String(error), 'error');
        for (const b of actions.querySelectorAll('button')) b.disabled = false;
      }
    };
    if (a.status === 'pending') {
      fill(actions,
        h('button', { class: 'primary', type: 'button', testid: 'approve', on: { click: answer('approve') } }, 'Approve'),
        h('button', { class: 'danger', type: 'button', testid: 'deny', on: { click: answer('deny') } }, 'Deny'));
    }
    this.approvals = this.approvals || new Map();
    this.approvals.set(a.id, card);
    box.appendChild(card);
  }
  /** An answer: the request's card says it; one answered without asking gets a note. */
  answered(box, ev, a) {
    const card = this.approvals && this.approvals.get(a.id);
    if (card) return this.settle(card, a);
    const by = a.answered_by === 'session-rule' ? 'kept for the session' : (a.answered_by || '');
    box.appendChild(this.base(ev, `ev-note ${a.status === 'approved' ? '' : 'warn'}`, h('span', { class: 'label' }, a.status === 'approved' ? 'Approved' : 'Denied'),
      h('span', { class: 'detail' }, [`${a.tool || 'tool'}${a.target ? ` ${a.target}` : ''}`, by, a.answer_reason].filter(Boolean).join(' — '))));
  }
  settle(card, a) {
    if (!a || a.status === 'pending') return;
    card.classList.remove('waiting');
    card.classList.add(a.status === 'approved' ? 'approved' : 'denied');
    const status = card.querySelector('[data-testid="approval-status"]');
    const by = { person: 'by a person', 'session-rule': 'by a decision kept for the session', timeout: 'nobody answered in time', 'run-ended': 'its run ended' }[a.answered_by] || '';
    setText(status, [a.status, by, a.answer_reason].filter(Boolean).join(' · '));
    fill(card.querySelector('.approval-actions'));
  }
  user(box, ev, p) {
    const images = Array.isArray(p.images) ? p.images : [];
    box.appendChild(this.base(ev, 'ev-user',
      h('div', { class: 'text' }, p.text || ''),
      images.length ? h('div', { class: 'images' }, images.map((img) => h('span', { class: 'badge' }, `image: ${typeof img === 'string' ? img.split('/').pop() : (img.name || 'image')}`))) : null));
  }
  agent(box, ev, text) {
    this.spoke.add(ev.prompt_id);
    const body = h('div', { class: 'agent-text', testid: 'agent-text' });
    richText(body, String(text).replace(TITLE_LINE, ''));
    const el = this.base(ev, 'ev-agent', body);
    box.appendChild(el);
    return el;
  }
  streamKey(ev) { return ev.run_id || ev.prompt_id || '-'; }
  delta(box, ev, p) {
    const key = this.streamKey(ev);
    let s = this.streams.get(key);
    if (!s) {
      const text = h('div', { class: 'agent-text', testid: 'agent-text' });
      const el = this.base(ev, 'ev-agent streaming', text);
      s = { el, text, raw: '' };
      this.streams.set(key, s);
      box.appendChild(el);
      this.spoke.add(ev.prompt_id);
    }
    s.raw += p.text || '';
    this.dirty.add(s);
    s.el.dataset.lastSeq = String(ev.seq);
  }
  message(box, ev, p) {
    const s = this.streams.get(this.streamKey(ev));
    if (s) {
      // The whole message after its deltas: the streamed element becomes it.
      this.streams.delete(this.streamKey(ev));
      s.el.classList.remove('streaming');
      // It takes the message's kind and number, unless later events follow it already
      // (then the numbers in the page would go back).
      if (s.el.parentNode && s.el.parentNode.lastElementChild === s.el) {
        s.el.dataset.kind = 'message';
        s.el.dataset.seq = String(ev.seq);
      }
      s.el.dataset.messageSeq = String(ev.seq);
      this.dirty.delete(s);
      richText(s.text, String(p.text || s.raw).replace(TITLE_LINE, ''));
      return;
    }
    this.agent(box, ev, p.text || '');
  }
  endStream(ev) {
    for (const [key, s] of this.streams) {
      if (s.el.closest('.turn') === this.turns.get(ev.prompt_id) || key === ev.run_id) {
        s.el.classList.remove('streaming');
        this.dirty.delete(s);
        richText(s.text, s.raw.replace(TITLE_LINE, ''));
        this.streams.delete(key);
      }
    }
  }
  tool(box, ev, p) {
    const d = p.detail && typeof p.detail === 'object' ? p.detail : {};
    const name = p.name || d.type || 'tool';
    const isResult = name === 'tool_result' || d.type === 'tool_result';
    const id = isResult ? d.tool_use_id : d.id;
    const key = id ? `${ev.run_id || ev.prompt_id}:${id}` : null;
    const known = key ? this.tools.get(key) : null;
    if (known && isResult) {
      // claude: the result folds into its tool_use.
      const out = h('div', { class: `out ${d.is_error ? 'is-error' : ''}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq } },
        h('div', { class: 'out-label' }, d.is_error ? 'error' : 'output'), h('pre', null, resultText(d.content) || '(no output)'));
      known.body.appendChild(out);
      this.status(known, d.is_error ? 'bad' : 'ok', d.is_error ? 'error' : 'done');
      return;
    }
    if (name === 'reasoning' && !known && typeof d.text === 'string' && !d.text.trim().includes('\n') && d.text.length <= 240) {
      // One-line thoughts need no fold each; a run of them shares one (the fake's, or
      // an engine thinking aloud step by step).
      return this.thought(box, ev, d.text);
    }
    if (known) {
      // codex: item.started, then item.completed of the same item.
      this.fillTool(known, name, d);
      known.el.dataset.lastSeq = String(ev.seq);
      return;
    }
    const summary = h('summary');
    const body = h('div', { class: 'tbody' });
    const details = h('details', null, summary, body);
    const el = this.base(ev, 'ev-tool', details);
    const t = { el, summary, body, details };
    this.fillTool(t, name, d, isResult);
    if (key) this.tools.set(key, t);
    box.appendChild(el);
  }
  fillTool(t, name, d, isResult = false) {
    const label = name === 'command_execution' ? '$' : name === 'reasoning' ? 'Reasoning' : name;
    const status = h('span', { class: 'tstatus' });
    fill(t.summary, h('span', { class: 'tname' }, label), h('span', { class: 'tdesc' }, oneLine(isResult ? resultText(d.content) : toolSummary(name, d))), status);
    t.statusEl = status;
    const parts = [];
    if (name === 'command_execution') {
      parts.push(h('pre', null, d.aggregated_output || (d.status === 'in_progress' ? '…' : '(no output)')));
      if (d.status === 'in_progress') this.status(t, 'run', 'running');
      else if (d.exit_code !== undefined && d.exit_code !== null) this.status(t, d.exit_code === 0 ? 'ok' : 'bad', `exit ${d.exit_code}`);
      else if (d.status) this.status(t, d.status === 'completed' ? 'ok' : 'bad', d.status);
    } else if (name === 'reasoning' && typeof d.text === 'string') {
      parts.push(h('pre', null, d.text));
    } else if (isResult) {
      parts.push(h('div', { class: `out ${d.is_error ? 'is-error' : ''}` }, h('pre', null, resultText(d.content) || '(no output)')));
      if (d.is_error) this.status(t, 'bad', 'error');
    } else {
      if (d.input !== undefined) parts.push(h('div', { class: 'out-label' }, 'input'), h('pre', null, pretty(d.input)));
      else parts.push(h('pre', null, pretty(d)));
      if (d.status) this.status(t, /fail|error|declin/.test(d.status) ? 'bad' : /progress/.test(d.status) ? 'run' : 'ok', d.status);
    }
    // Keep what folded in already (a claude result), replace the rest.
    const folded = [...t.body.querySelectorAll(':scope > [data-testid="event"]')];
    fill(t.body, ...parts, ...folded);
  }
  status(t, cls, text) {
    t.statusEl.className = `tstatus ${cls}`;
    t.statusEl.textContent = text;
  }
  thought(box, ev, text) {
    let group = box.lastElementChild;
    if (!group || !group.classList.contains('thought-group')) {
      const count = h('span', { class: 'small faint' });
      const preview = h('span', { class: 'preview' });
      const lines = h('div', { class: 'lines' });
      const summary = h('summary', null, h('span', { class: 'small' }, 'thinking'), count, preview);
      group = h('details', { class: 'log-group thought-group', open: true }, summary, lines);
      group._parts = { count, preview, lines, n: 0, touched: false };
      // A person's click (not the fold below) decides from then on.
      summary.addEventListener('click', () => { group._parts.touched = true; });
      box.appendChild(group);
    }
    const parts = group._parts;
    parts.n += 1;
    parts.lines.appendChild(this.base(ev, 'ev-thought', text));
    parts.count.textContent = parts.n > 1 ? `${parts.n} steps` : '';
    parts.preview.textContent = parts.n > 3 ? oneLine(text) : '';
    // Open while short; folded once it grows, unless the person opened or closed it.
    if (parts.n === 4 && !parts.touched) group.open = false;
  }
  log(box, ev, line, label = 'engine output') {
    let group = box.lastElementChild;
    if (!group || !group.classList.contains('log-group') || group.classList.contains('thought-group') || group.dataset.label !== label) {
      const preview = h('span', { class: 'preview' });
      const count = h('span', { class: 'small faint' });
      const lines = h('div', { class: 'lines' });
      group = h('details', { class: 'log-group', data: { label } }, h('summary', null, h('span', { class: 'small' }, label), count, preview), lines);
      group._parts = { preview, count, lines, n: 0 };
      box.appendChild(group);
    }
    const parts = group._parts;
    parts.n += 1;
    parts.lines.appendChild(this.base(ev, 'ev-log', line === undefined || line === null ? '' : String(line)));
    parts.count.textContent = plural(parts.n, 'line');
    parts.preview.textContent = oneLine(line);
  }
  meta(box, ev, p) {
    let row = box.lastElementChild;
    if (!row || !row.classList.contains('meta-row')) {
      row = h('div', { class: 'meta-row' });
      box.appendChild(row);
    }
    let text = ev.kind;
    let cls = '';
    let title = fmtFull(ev.at);
    switch (ev.kind) {
      case 'thread.started': text = `thread ${shortId(p.thread_id)}`; title = p.thread_id || ''; break;
      case 'turn.started': text = 'turn started'; break;
      case 'turn.completed': text = 'turn completed'; cls = 'ok'; break;
      case 'usage': {
        const u = p.usage || {};
        text = `tokens: ${u.input_tokens ?? '?'} in · ${u.output_tokens ?? '?'} out`;
        title = pretty(u);
        break;
      }
      case 'run.started': text = `run started · ${p.engine || ''}${p.pid ? ` · pid ${p.pid}` : ''}`; title = argvLine(p.argv); break;
      case 'run.exited': {
        const how = p.verdict || p.ended_by || (p.signal ? `signal ${p.signal}` : '');
        text = `run exited${p.exit_code !== null && p.exit_code !== undefined ? ` ${p.exit_code}` : ''}${how ? ` · ${how}` : ''}`;
        cls = p.verdict === 'succeeded' ? 'ok' : (p.verdict === 'failed' || p.error || p.ended_by) ? 'bad' : '';
        title = p.error || p.reason || title;
        break;
      }
      case 'slot.granted': text = `slot granted${p.waited_ms ? ` after ${dur(p.waited_ms)}` : ''}`; break;
      // Done, but with refusals: not the whole job, and said so.
      case 'prompt.done': text = p.denied ? `done · denied: ${p.denied}` : 'done'; cls = p.denied ? 'bad' : 'ok'; break;
      case 'title.generated': text = `titled “${p.title || ''}”`; break;
      case 'worktree.created': text = `worktree made · ${p.branch || ''} from ${shortSha(p.base_commit)}`; title = p.path || ''; break;
      case 'worktree.removed': text = `worktree removed${p.kept_branch ? ` · ${p.kept_branch} kept` : ''}`; title = p.path || ''; break;
      case 'setup.started': text = 'setup started'; title = p.command || ''; break;
      case 'setup.exited': {
        const ok = p.code === 0;
        text = `setup exited${p.code !== null && p.code !== undefined ? ` ${p.code}` : ''}${p.signal ? ` · ${p.signal}` : ''}`;
        cls = ok ? 'ok' : 'bad';
        break;
      }
      case 'session.merged': text = `merged into ${p.into || '?'} · ${shortSha(p.commit)}${p.squash ? ' (squashed)' : ''}`; cls = 'ok'; title = p.commit || ''; break;
      default:
    }
    row.appendChild(h('span', { class: `ev ev-meta ${cls}`, testid: 'event', data: { kind: ev.kind, seq: ev.seq }, title }, text));
  }
  noteOf(kind, p) {
    switch (kind) {
      case 'prompt.failed': return { cls: 'error', label: 'Failed', detail: p.error || '' };
      case 'tool.denied': return { cls: 'warn', label: `Denied: ${p.tool || 'tool'}`, detail: [p.target, p.reason].filter(Boolean).join(' — ') };
      case 'turn.failed': return { cls: 'error', label: 'Turn failed', detail: p.message || '' };
      case 'prompt.cancelled': return { cls: 'cancel', label: 'Cancelled', detail: p.error || '' };
      case 'retry.scheduled': return {
        cls: 'warn', label: 'Retry scheduled',
        detail: [`${p.reason || 'failure'}`, p.retry ? `retry ${p.retry}${p.retries ? ` of ${p.retries}` : ''}` : '', p.delay_ms !== undefined ? `in ${dur(p.delay_ms)}` : '',
          p.new_thread ? 'on a new thread' : '', p.continue ? 'continuing the turn' : '', p.message ? `— ${p.message}` : ''].filter(Boolean).join(' · '),
      };
      case 'slot.waiting': return { cls: 'warn', label: 'Waiting for a slot', detail: `${p.engine ? `${p.engine}: ` : ''}waits for ${describeBlocker(p.held_by)}` };
      case 'app_server.unavailable': return { cls: 'warn', label: 'App server unavailable', detail: `${p.reason || ''}${p.retry_in_ms ? ` · retry in ${dur(p.retry_in_ms)}` : ''}` };
      case 'notice': return { cls: 'warn', label: 'Notice', detail: p.message || pretty(p) };
      case 'prompt.requeued': return { cls: 'warn', label: 'Requeued', detail: p.reason || '' };
      case 'prompt.unserved': return { cls: 'warn', label: 'Waiting for a daemon', detail: p.reason || '' };
      case 'request.refused': return { cls: 'error', label: 'Request refused', detail: [p.method, p.what, p.found_by ? `found by ${p.found_by}` : '', p.peer_pid ? `pid ${p.peer_pid}` : ''].filter(Boolean).join(' · ') };
      case 'transport.closed': return { cls: 'error', label: 'Transport closed', detail: p.message || p.reason || pretty(p) };
      case 'server.request': return { cls: '', label: 'Server request', detail: p.method || oneLine(pretty(p)).slice(0, 300) };
      default: return null;
    }
  }
}
function atBottom() {
  const doc = document.documentElement;
  return window.innerHeight + window.scrollY >= doc.scrollHeight - 120;
}
