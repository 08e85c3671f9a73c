//! `corral-fake-engine`: a scripted stand-in for the coding-agent CLIs that corral drives.
//!
//! Tests and `corral demo` run on it instead of a real engine. It speaks the exact output
//! formats of `codex exec --json`, of `claude -p --output-format stream-json` and the JSON-RPC
//! protocol of `codex app-server` (as measured on the real CLIs; the tests of `tests/fake_engine.rs` pin them),
//! answers at once, and can be told to stall, rate-limit, conflict on a thread, lose its
//! rollout, fail, crash or hang. The app-server mode has a section of its own below.
//!
//! # Command line
//!
//! Which format it speaks is decided from argv.
//!
//! **codex form** (what corral builds for codex), speaks `codex exec --json`:
//!
//! ```text
//! corral-fake-engine [--model M] [--config K=V]… [--sandbox S] [--ask-for-approval A]
//!                    [--dangerously-bypass-approvals-and-sandbox]
//!                    exec --json --skip-git-repo-check
//!                    [resume [--image F]… THREAD | [--image F]…] [--] [PROMPT]
//! ```
//!
//! `resume THREAD` continues that thread: `thread.started` carries THREAD. Without it a new
//! thread id (a UUIDv7) is made. `--json` and `--skip-git-repo-check` are required. The short
//! spellings `-m`, `-c`, `-s`, `-a`, `-i` and the `--flag=value` spelling are accepted too, and
//! the options may also come after `exec`. Option values are accepted and otherwise ignored.
//!
//! **claude form**, speaks claude's `stream-json`:
//!
//! ```text
//! corral-fake-engine -p --verbose --output-format stream-json [--model M] [--effort E]
//!                    [--resume ID] [--resume-session-at UUID]
//!                    [--permission-mode MODE | --dangerously-skip-permissions] [--] [PROMPT]
//! ```
//!
//! In both forms, as in the real CLIs, a missing PROMPT (or `-`) means the prompt is all of
//! stdin, byte for byte (`--resume-session-at` is accepted and ignored: the fake keeps no
//! transcript).
//!
//! The session id is ID when resuming, else a new UUIDv4; the model (default `fake-model`) is
//! shown in the `init` and `assistant` lines. `--print` and `-r` are accepted for `-p` and
//! `--resume`; `-p`, `--verbose` and `--output-format stream-json` are required.
//!
//! **app-server form**, speaks `codex app-server` (see [app-server mode](#app-server-mode)):
//!
//! ```text
//! corral-fake-engine [-c K=V]… app-server [--listen stdio://] [-c K=V]…
//! ```
//!
//! Anything else prints a usage on stderr and exits 2 (`--help` prints it on stdout, exit 0).
//! In the exec and claude forms stdin is read only when it carries the prompt. Every stdout line is flushed
//! as soon as it is written, so a reader sees the stream while the engine runs.
//!
//! # Output
//!
//! A successful codex turn (usage numbers are small fixed numbers):
//!
//! ```text
//! {"type":"thread.started","thread_id":"<THREAD>"}
//! {"type":"turn.started"}
//! {"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"<ANSWER>"}}
//! {"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0}}
//! ```
//!
//! A successful claude turn: `{"type":"system","subtype":"init","session_id":…,…}`, then
//! `{"type":"assistant","message":{…,"content":[{"type":"text","text":ANSWER}],…},"session_id":…,…}`,
//! then `{"type":"result","subtype":"success","is_error":false,"api_error_status":null,…,
//! "result":ANSWER,…,"session_id":…,"usage":{…},…}`; exit 0.
//!
//! # Script
//!
//! Behaviour is scripted by directives, read first from the environment variable
//! `CORRAL_FAKE_SCRIPT` (directives separated by `;` or newlines), then from the lines of the
//! prompt of the form `@fake DIRECTIVE` (one directive per line, so a prompt directive may
//! contain `;`). A later directive of the same name replaces an earlier one, so prompt
//! directives override the environment's. The attempt number is read from
//! `CORRAL_RUN_ATTEMPT` (1-based, default 1).
//!
//! The prompt's *first line* below means its first line that is not blank, not an `@fake` line
//! and does not contain the title marker `corral-title:` (if there is no such line: the first
//! non-blank, non-`@fake` line; if none either: empty).
//!
//! | directive | effect |
//! |---|---|
//! | `answer=TEXT` | The final answer. Default: `fake answer: ` + the prompt's first line cut to 80 characters. |
//! | `delay=MS` | Sleep MS ms after the turn started, before anything else happens (a stall). |
//! | `deltas=N` | Before the answer, print N progress items: codex `item.completed` items of type `reasoning` with text `step i`; claude `assistant` lines with a text block `step i` (i = 1…N). |
//! | `interval=MS` | Sleep MS ms after each progress item. |
//! | `exit=CODE` | Exit with CODE instead of the usual status (0 on success, 1 on the failures below), after the usual output. Not for `crash` and `hang`. |
//! | `rate-limit=N` | On attempts ≤ N fail like a rate limit, exit 1. codex: `thread.started`, `turn.started`, `{"type":"error","message":"exceeded retry limit, last status: 429 Too Many Requests"}`, `{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`. claude: `init`, a synthetic `assistant` line (`"model":"<synthetic>"`, `"error":"rate_limit"`) and a `result` with `"subtype":"success","is_error":true,"api_error_status":429`, result text `API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit`. |
//! | `writer-conflict=N` | codex form only, when resuming, on attempts ≤ N: stdout empty, stderr `Error: thread/resume: thread/resume failed: thread THREAD already has an active writer (code -32600)`, exit 1. |
//! | `missing-rollout` | codex form only, when resuming: stdout empty, stderr `Error: thread/resume: thread/resume failed: no rollout found for thread id THREAD (code -32600)`, exit 1. A new thread succeeds normally. |
//! | `fail=MESSAGE` | Fail the turn with MESSAGE on every attempt, exit 1. codex: `{"type":"error","message":MESSAGE}` and `{"type":"turn.failed","error":{"message":MESSAGE}}`; claude: synthetic `assistant` line (`"error":"unknown"`) and a `result` with `"is_error":true,"api_error_status":null,"result":MESSAGE`. |
//! | `crash` | Print the stream up to the answer, then the first half of the answer's line without a newline, then kill itself with SIGKILL (a crash mid-stream). |
//! | `partial` | Print the normal output, but leave the last line (`turn.completed` / `result`) without its trailing newline. |
//! | `garbage` | Before the answer, also print the line `this is not JSON {"type":` and a line of invalid UTF-8 bytes. |
//! | `long-line=N` | codex form: before the answer, print one line of N `x` bytes (not JSON). |
//! | `hang` | Print the stream up to the answer (with no other directive: `thread.started` and `turn.started`, or claude's `init`), then sleep until killed. |
//! | `ignore-sigterm` | Ignore SIGTERM from the start (SIGKILL still ends it). |
//! | `stderr=TEXT` | Print TEXT as a line on stderr at the start. |
//! | `title=TEXT` | When the prompt contains `corral-title:`, begin the answer with `<!-- corral-title: TEXT -->` and a newline. With the marker but no `title` directive, TEXT is the first 4 words of the prompt's first line. Without the marker there is no title line. |
//! | `echo-env` | The answer is a JSON object of the variables `CORRAL_HOME`, `CORRAL_SESSION_ID`, `CORRAL_PARENT_EXEC`, `CORRAL_RUN_ATTEMPT`, `CLAUDE_CODE_MAX_RETRIES`, `CORRAL_TRACE_ID`, `CORRAL_RUN_ID` and `CORRAL_DAEMON_NOTIFY` (null when unset). |
//! | `spawn=CMD` | Right after the turn started (before `delay`), start `sh -c CMD` in the background (stdin, stdout and stderr on /dev/null; the engine's process group, directory and environment, `CORRAL_RUN_ID` included) and leave it running, never waited for; print `fake-engine: spawned PID` (the shell's pid) on stderr. `spawn=sleep 30` is an engine that leaves a process in its group, `spawn=setsid sleep 30` one that left the group. Exec forms only. |
//! | `deny=TOOL:TARGET` | claude form: the final `result` lists a refused tool use in `permission_denials` (`tool_name` TOOL, `tool_input.file_path` TARGET), as claude does when its permission mode refused it. Repeatable. |
//! | `ask=TOOL:TARGET` | claude form: before the progress items, the model calls TOOL (`Write` writes `approved\n` to the path TARGET, `Bash` runs TARGET as a command). Started with `--input-format stream-json --permission-prompt-tool stdio` (claude's `ask`), it first writes `{"type":"control_request","request_id":…,"request":{"subtype":"can_use_tool","tool_name":TOOL,"input":…,"decision_reason":"fake engine asks"}}` (the input carries `fake_asked_at_us`, when it asked, and the tool's result `fake_ran_at_us`, when the tool ran, in microseconds since the epoch) and reads stdin until the `control_response` for that id: `allow` runs the tool with the answer's `updatedInput`, `deny` (or stdin closed) refuses it, told to the model as an error `tool_result` with the answer's message and listed in `permission_denials`. Without the prompt tool it is refused at once, as print mode does. Repeatable. |
//! | `unknown-control` | claude form with the prompt tool: first send a `control_request` of subtype `fake_unknown` and read its `control_response` (an `error` one is expected). |
//! | `run=CMD` | Before the progress items, run `sh -c CMD` (stdin closed, stderr merged into stdout, environment and directory inherited) and report it. codex: `item.started` then `item.completed` of type `command_execution` with `command` (CMD), `aggregated_output`, `exit_code` and `status` (`completed` for exit 0, `failed` otherwise, as codex does). claude: an `assistant` line with a `tool_use` of `Bash` and a `user` line with its `tool_result`. |
//!
//! `crash`, `partial`, `garbage`, `hang`, `missing-rollout`, `ignore-sigterm` and `echo-env`
//! take no value. An unknown directive, a flag given a value or a value that does not parse
//! prints a warning line on stderr and is ignored (so does a `CORRAL_RUN_ATTEMPT` that is not a
//! number, which then counts as attempt 1). `writer-conflict` and `missing-rollout` do nothing
//! in the claude form. With `ignore-sigterm`, a `run=` command inherits the ignored SIGTERM.
//!
//! **Live check** (exec forms, read at start; for benchmarks): with `CORRAL_FAKE_LIVE_CHECK=DIR`
//! the process takes, before anything else, exclusive `flock`s it holds until it exits (the
//! kernel lets go of them then, so nothing polls and nothing is missed): `DIR/session-<id>`
//! for its `CORRAL_SESSION_ID` (already held: another engine of that session is alive), then
//! the first free of `DIR/all-0`, `DIR/all-1`, … and of `DIR/home-<name>-0`, … (`<name>`: the
//! last part of its `CORRAL_HOME`). It appends one line to `DIR/log`: `ALL HOME NAME OVERLAP
//! SESSION`, the two slot numbers taken, its home's name, 1 if the session's file was held
//! (else 0) and the session. A slot k taken means k others were alive then; at the moment the
//! most were alive, M engines held M distinct slots, so one of them holds M - 1 or more: the
//! largest slot logged, plus one, is exactly the most engines alive at once (from each one's
//! locks to its exit), in all and per home.
//!
//! # Order of a turn
//!
//! 1. `ignore-sigterm`, warnings and `stderr=` (stderr only);
//! 2. codex form when resuming: `writer-conflict`, then `missing-rollout` (and exit);
//! 3. `thread.started` + `turn.started` (claude: `init`), then `spawn`;
//! 4. `delay`;
//! 5. `rate-limit`, then `fail` (and exit);
//! 6. `run`, the `deltas` progress items, `garbage`, `long-line`;
//! 7. `hang` (sleeps forever), `crash` (half the answer line, then SIGKILL);
//! 8. the answer (`item.completed` agent_message / `assistant`), then `turn.completed` /
//!    `result` (`partial`), and exit 0 or `exit=CODE`.
//!
//! # app-server mode
//!
//! `corral-fake-engine app-server` speaks codex's `app-server` JSON-RPC over stdin/stdout, one
//! JSON object per line, shaped like the real codex 0.171.0 messages (as recorded from it): no `"jsonrpc"` field (one on
//! input is ignored), notifications carry `"emittedAtMs"`, server requests have integer ids
//! (0, 1, …). Answers are `{"id":N,"result":…}`; refusals are
//! `{"error":{"code":-32600,"message":…},"id":N}` (`-32603` when the state dir cannot be
//! written). `--listen` and `-c` are accepted and ignored. stderr gets tracing-like log lines
//! (`<time>  INFO corral_fake_engine::app_server: …`), one at start. A line that is not a JSON
//! object is logged on stderr and ignored; client notifications (`initialized`, …) are
//! accepted. Closing stdin makes it exit 0 at once, whatever turns are running (their thread
//! locks are removed). Several threads may run turns at the same time (a thread per turn);
//! stdout lines are written whole, never interleaved.
//!
//! | request | answer |
//! |---|---|
//! | `initialize {clientInfo}` | `{"userAgent":"corral-fake-engine/<version>","codexHome":<state dir>,"platformFamily":"unix","platformOs":"linux"}`. A second one: error `Already initialized`. Any other request before it: error `Not initialized`. No answer at all under `CORRAL_FAKE_APP_SERVER=no-initialize` (below). |
//! | `thread/start {cwd?, model?, approvalPolicy?, sandbox?, …}` | `{"thread":{"id":<UUIDv7>,…},"model":…,"modelProvider":"fake",…,"cwd":…,"approvalPolicy":…,"sandbox":…,…}` then the notification `thread/started {thread}`. `cwd`, `model` (default `fake-model`) and `approvalPolicy` (default `on-request`) are echoed as given; `sandbox` `read-only` (the default), `workspace-write` and `danger-full-access` become codex's policy objects (`{"type":"readOnly","networkAccess":false}`, `{"type":"workspaceWrite","writableRoots":[cwd],…}`, `{"type":"dangerFullAccess"}`), anything else is echoed as given. The thread's file keeps the params as given (`startParams`). |
//! | `thread/resume {threadId, …}` | The thread (same result shape, after a `thread/status/changed {idle}` notification) if its file is in the state dir; settings given override the stored ones. No file: error `no rollout found for thread id <id>`. Open in another live fake: error `thread <id> already has an active writer`. |
//! | `turn/start {threadId, input}` | `{"turn":{"id":<UUIDv7>,…,"status":"inProgress",…}}`, then the turn's notifications (below). `input` items: `{type:"text",text}`, `{type:"localImage",path}`, `{type:"image",url}` (shown in the userMessage item); the text items, one per line, are the turn's prompt. Refused when the thread has a turn in progress (`thread <id> already has a turn in progress: <turn>`). |
//! | `turn/steer {threadId, input, expectedTurnId}` (required, as codex 0.171.0 requires it) | `{"turnId":<turn>}` (as codex), and the turn in progress answers `steered: <text>` (a `hang` turn then completes). No turn in progress: error `no active turn to steer`; another `expectedTurnId`: error `expected active turn id <x> but found <y>`. |
//! | `turn/interrupt {threadId, turnId}` | `{}`, then the turn ends: `thread/status/changed {idle}`, `turn/completed` with `"status":"interrupted"` (at any pause of the turn: `delay`, `interval`, `hang`, waiting for an approval). With no such turn in progress: `{}` and nothing else. |
//! | `thread/compact/start {threadId}` | `{}`, then a short turn of its own: `thread/status/changed {active}`, `turn/started`, `item/started` + `item/completed` of `{"type":"contextCompaction","id":…}`, `thread/status/changed {idle}`, `turn/completed` (completed). (No `thread/compacted`: the samples show none.) |
//! | anything else | error ``Invalid request: unknown variant `<method>` `` |
//!
//! A thread-scoped request (turn/start, turn/steer, turn/interrupt, thread/compact/start) on a
//! thread that this process has not started or resumed is refused with `no rollout found for
//! thread id <id>` when the state dir has no file of it, else `thread not found: <id>`. A
//! missing or mistyped field: ``Invalid request: missing field `<name>` ``.
//!
//! **State dir**: `CORRAL_FAKE_STATE`, else `$CORRAL_HOME/fake-engine`, else
//! `<temp dir>/corral-fake-engine-<uid>`. `threads/<id>.json` is a thread (like a codex
//! rollout: it outlives the process, so another process can resume it), `threads/<id>.lock`
//! holds the pid of the fake that has it open (a lock of a dead or zombie pid is taken over),
//! `attempts/<hash>` counts the turns of each text (for `rate-limit`).
//!
//! **A turn**, in codex's order: `thread/status/changed {"type":"active","activeFlags":[]}`,
//! `turn/started`, `item/started` + `item/completed` of the userMessage, (the directives' items
//! and errors), `item/started` of the agentMessage (`msg_fake_N`, text `""`),
//! `item/agentMessage/delta` one per word of the answer (each word with the whitespace before
//! it), `item/completed` of the agentMessage (full text), `thread/tokenUsage/updated`
//! (100 in + 10 out per turn), `account/rateLimits/updated`, `thread/status/changed {idle}`,
//! `turn/completed` with `"status":"completed"` and the agentMessage as its only item
//! (`"itemsView":"summary"`). A failed turn ends with `thread/status/changed {systemError}`,
//! an `error` notification (`"willRetry":false`) and `turn/completed` with
//! `"status":"failed"`, `"items":[]` and the same error object
//! (`{"message","codexErrorInfo","additionalDetails":null,"misalignment":null}`).
//!
//! **Directives** come from `CORRAL_FAKE_SCRIPT` and the turn's text, as above, per turn.
//! `answer`, `delay`, `deltas` (reasoning items with summary `step i`), `interval`, `title`,
//! `echo-env`, `stderr` (a stderr line when the turn starts), `fail` and `garbage` (the two
//! lines above, before the answer) work as in the exec form; `run=CMD` is a `commandExecution`
//! item (`item/started` in progress, then `item/completed` with `aggregatedOutput`, `exitCode`,
//! `status` `completed`/`failed`), run in the thread's cwd. `ignore-sigterm` is read from
//! `CORRAL_FAKE_SCRIPT` only (at start). `exit`, `partial`, `writer-conflict` and
//! `missing-rollout` do nothing here. And, for this mode only:
//!
//! | directive | effect |
//! |---|---|
//! | `will-retry=N` | N `error` notifications with `"willRetry":true`, codexErrorInfo `{"responseStreamDisconnected":{"httpStatusCode":429}}`, message `Reconnecting... i/N`, additionalDetails the 429 message; then the turn goes on (completes). |
//! | `rate-limit=N` | The first N turns with this same text (counted in the state dir, across processes) fail: message `exceeded retry limit, last status: 429 Too Many Requests`, codexErrorInfo `{"responseTooManyFailedAttempts":{"httpStatusCode":429}}`. `CORRAL_RUN_ATTEMPT` is not used here. |
//! | `usage-limit` | Fails with codexErrorInfo `"usageLimitExceeded"`, message `You’ve hit your usage limit. Upgrade to Pro (…), visit … or try again at 7:28 AM.` |
//! | `overloaded` | Fails with codexErrorInfo `"serverOverloaded"`. |
//! | `fail=MESSAGE` | Fails with MESSAGE, codexErrorInfo `"other"`. |
//! | `hang` | Stays in progress (after the other items) until `turn/interrupt` (→ interrupted) or `turn/steer` (→ completes with `steered: <text>`). |
//! | `ignore-interrupt` | Like `hang`, but `turn/interrupt` is answered `{}` and otherwise ignored (a steer still completes it). |
//! | `exit-mid-turn=CODE` | After the userMessage items, write the first half of the next line (no newline) and exit with CODE: a transport loss with a partial last line. |
//! | `crash` | After the userMessage items, SIGKILL itself (only whole lines written). |
//! | `approval=command` | Mid-turn, `item/started` of a `commandExecution` (the `run` command, else `touch fake-engine.txt`), then the server request `{"id":N,"method":"item/commandExecution/requestApproval","params":{"threadId","turnId","itemId","command","cwd","commandActions"}}`; waits for the client's response. The answer is `approval: <result.decision>` (`approval: error <message>` for an error response). Decisions starting with `accept` run the `run` command, if any; the item completes `completed`/`failed`, else `declined`. |
//! | `approval=file` | The same with a `fileChange` item (one added file `fake-engine.txt`) and `item/fileChange/requestApproval` `{"threadId","turnId","itemId","reason":null,"grantRoot":null}`; nothing is written. |
//! | `unknown-request` | Sends the server request `fake/unknownRequest {threadId, turnId}`, waits for the response; the answer is `unknown request: <error message>` (or `<result JSON>`). |
//! | `final-no-newline` | The turn ends as it would, but its last line (`turn/completed`) is written without a trailing newline; then the process exits 0 at once (stdin unread, thread locks removed). |
//! | `stray-response` | Before answering `turn/start`, writes a response to a request id the client never sent: `{"id":987654,"result":{}}`. The turn then runs as usual. |
//! | `double-response` | Answers `turn/start` twice: the same response line (same id) is written two times in a row. The turn runs once. |
//!
//! **Environment switch** (read at start, not a directive): `CORRAL_FAKE_APP_SERVER=no-initialize`
//! makes the process never answer `initialize` (each one is logged on stderr and left
//! unanswered; any other request still gets `Not initialized`); it keeps reading stdin until
//! EOF, then exits 0. Another non-empty value logs a warning and is ignored.
//!
//! Order of a turn's directives: `stray-response`, the `turn/start` answer (twice with
//! `double-response`); `stderr`; the turn's start; `exit-mid-turn`, `crash`;
//! `delay`; `will-retry`; `rate-limit`, `usage-limit`, `overloaded`, `fail` (and the failed
//! end); `approval` (else `run`); `unknown-request`; `deltas`; `garbage`; `hang`; the answer;
//! the end's `turn/completed` (whatever its status; unterminated and exit 0 with
//! `final-no-newline`).
//! The answer is `steered: <text>` after a steer, else the approval's or unknown request's
//! text, else as in the exec form (`answer`, `echo-env`, the default, the title rule).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: corral-fake-engine [--model M] [--config K=V]... [--sandbox S] [--ask-for-approval A]
                          [--dangerously-bypass-approvals-and-sandbox]
                          exec --json --skip-git-repo-check
                          [resume [--image F]... THREAD | [--image F]...] [--] PROMPT
       corral-fake-engine -p --verbose --output-format stream-json [--model M] [--effort E]
                          [--resume ID] [--permission-mode MODE | --dangerously-skip-permissions]
                          [--] PROMPT
       corral-fake-engine [-c K=V]... app-server [--listen stdio://] [-c K=V]...
Scripted by CORRAL_FAKE_SCRIPT (directives separated by ';' or newlines) and by prompt lines
'@fake DIRECTIVE'; the attempt number is CORRAL_RUN_ATTEMPT. Directives: answer=TEXT delay=MS
deltas=N interval=MS exit=CODE rate-limit=N writer-conflict=N missing-rollout fail=MESSAGE
crash partial garbage hang ignore-sigterm stderr=TEXT title=TEXT echo-env run=CMD spawn=CMD;
app-server only: will-retry=N usage-limit overloaded ignore-interrupt exit-mid-turn=CODE
approval=command|file unknown-request final-no-newline stray-response double-response
(state dir: CORRAL_FAKE_STATE; CORRAL_FAKE_APP_SERVER=no-initialize never answers initialize)";

const TITLE_MARKER: &str = "corral-title:";
const CODEX_RATE_LIMIT: &str = "exceeded retry limit, last status: 429 Too Many Requests";
const CLAUDE_RATE_LIMIT: &str = "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit";
const CLAUDE_VERSION: &str = "2.1.197";

/// JSON text whose object keys stay in the order they were written (serde_json's `Value`
/// sorts them; the real CLIs print theirs in a fixed order, `type` first).
#[derive(Debug, Clone)]
struct J(String);

impl J {
    fn null() -> J {
        J("null".into())
    }

    fn object<const N: usize>(fields: [(&str, J); N]) -> J {
        let fields: Vec<String> = fields
            .iter()
            .map(|(key, value)| format!("{}:{}", J::from(*key).0, value.0))
            .collect();
        J(format!("{{{}}}", fields.join(",")))
    }

    fn array<const N: usize>(items: [J; N]) -> J {
        J::list(items)
    }

    /// An array of any length.
    fn list(items: impl IntoIterator<Item = J>) -> J {
        let items: Vec<String> = items.into_iter().map(|item| item.0).collect();
        J(format!("[{}]", items.join(",")))
    }
}

impl From<&str> for J {
    fn from(text: &str) -> J {
        J(serde_json::to_string(text).expect("a string serializes"))
    }
}

impl From<&String> for J {
    fn from(text: &String) -> J {
        J::from(text.as_str())
    }
}

impl From<String> for J {
    fn from(text: String) -> J {
        J::from(text.as_str())
    }
}

impl From<u64> for J {
    fn from(number: u64) -> J {
        J(number.to_string())
    }
}

impl From<i64> for J {
    fn from(number: i64) -> J {
        J(number.to_string())
    }
}

/// A parsed JSON value, as it is (its keys in serde_json's order).
impl From<&serde_json::Value> for J {
    fn from(value: &serde_json::Value) -> J {
        J(value.to_string())
    }
}

impl From<i32> for J {
    fn from(number: i32) -> J {
        J(number.to_string())
    }
}

impl From<bool> for J {
    fn from(value: bool) -> J {
        J(value.to_string())
    }
}

impl<T: Into<J>> From<Option<T>> for J {
    fn from(value: Option<T>) -> J {
        value.map_or_else(J::null, Into::into)
    }
}

/// `obj! { "key" => value, … }`: an object with its keys in this order.
macro_rules! obj {
    ($($key:literal => $value:expr),* $(,)?) => {
        J::object([$(($key, J::from($value))),*])
    };
}

/// `arr![value, …]`: an array.
macro_rules! arr {
    ($($value:expr),* $(,)?) => {
        J::array([$(J::from($value)),*])
    };
}

/// Which CLI the fake imitates, with what argv told it.
#[derive(Debug)]
enum Form {
    Codex {
        thread: Option<String>,
    },
    Claude {
        resume: Option<String>,
        model: Option<String>,
        /// claude's permission mode, as its `init` line says it.
        permission_mode: String,
        /// `--input-format stream-json --permission-prompt-tool stdio`: stdin carries the
        /// prompt as a user message and then the answers to `control_request`s.
        converses: bool,
    },
    /// `codex app-server`: JSON-RPC on stdin/stdout, scripted per turn.
    AppServer,
}

#[derive(Debug)]
struct Invocation {
    form: Form,
    prompt: String,
}

/// An option of the command line: `NAME VALUE`, `NAME=VALUE` or a flag.
enum Opt {
    Flag,
    Value(String),
}

/// Matches `args[*i]` against the option `names`; moves `*i` past what it consumed.
fn take_option(
    args: &[String],
    i: &mut usize,
    names: &[&str],
    with_value: bool,
) -> Result<Option<Opt>, String> {
    let arg = &args[*i];
    for name in names {
        if arg == name {
            if !with_value {
                *i += 1;
                return Ok(Some(Opt::Flag));
            }
            let value = args
                .get(*i + 1)
                .ok_or_else(|| format!("option {name} needs a value"))?;
            *i += 2;
            return Ok(Some(Opt::Value(value.clone())));
        }
        if with_value && name.starts_with("--") {
            if let Some(value) = arg
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
            {
                *i += 1;
                return Ok(Some(Opt::Value(value.to_string())));
            }
        }
    }
    Ok(None)
}

/// The codex options that may come before `exec` (and after it): accepted, values ignored.
fn take_codex_global(args: &[String], i: &mut usize) -> Result<bool, String> {
    for (names, with_value) in [
        (&["--model", "-m"][..], true),
        (&["--config", "-c"][..], true),
        (&["--sandbox", "-s"][..], true),
        (&["--ask-for-approval", "-a"][..], true),
        (&["--dangerously-bypass-approvals-and-sandbox"][..], false),
    ] {
        if take_option(args, i, names, with_value)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn parse_args(args: &[String]) -> Result<Invocation, String> {
    let mut i = 0;
    while i < args.len() {
        if args[i] == "exec" {
            return parse_codex_exec(&args[i + 1..]);
        }
        if args[i] == "app-server" {
            return parse_app_server(&args[i + 1..]);
        }
        if !take_codex_global(args, &mut i)? {
            break;
        }
    }
    parse_claude(args)
}

/// The prompt given, or (none, or `-`) all of stdin, byte for byte.
fn prompt_or_stdin(given: Option<&String>) -> Result<String, String> {
    match given {
        Some(prompt) if prompt != "-" => Ok(prompt.clone()),
        _ => {
            let mut prompt = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut prompt)
                .map_err(|error| format!("reading the prompt from stdin: {error}"))?;
            Ok(prompt)
        }
    }
}

fn parse_codex_exec(args: &[String]) -> Result<Invocation, String> {
    let (mut json_output, mut skip_git_check) = (false, false);
    // Positionals, each with whether it came after `--`.
    let mut positionals: Vec<(String, bool)> = Vec::new();
    let mut after_dashes = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if after_dashes {
            positionals.push((arg.clone(), true));
            i += 1;
        } else if arg == "--" {
            after_dashes = true;
            i += 1;
        } else if arg == "--json" {
            json_output = true;
            i += 1;
        } else if arg == "--skip-git-repo-check" {
            skip_git_check = true;
            i += 1;
        } else if take_option(args, &mut i, &["--image", "-i"], true)?.is_some()
            || take_codex_global(args, &mut i)?
        {
            // Accepted; the values do not change what the fake does.
            continue;
        } else if arg.starts_with('-') && arg != "-" {
            return Err(format!("unknown option {arg} after exec"));
        } else {
            positionals.push((arg.clone(), false));
            i += 1;
        }
    }
    if !json_output {
        return Err("exec needs --json".into());
    }
    if !skip_git_check {
        return Err("exec needs --skip-git-repo-check".into());
    }
    let resume = matches!(positionals.first(), Some((word, false)) if word == "resume");
    let rest = if resume {
        &positionals[1..]
    } else {
        &positionals[..]
    };
    // As codex: no PROMPT, or `-`, reads the prompt from stdin.
    match (resume, rest) {
        (true, [(thread, _), (prompt, _)]) => Ok(Invocation {
            form: Form::Codex {
                thread: Some(thread.clone()),
            },
            prompt: prompt_or_stdin(Some(prompt))?,
        }),
        (true, [(thread, _)]) => Ok(Invocation {
            form: Form::Codex {
                thread: Some(thread.clone()),
            },
            prompt: prompt_or_stdin(None)?,
        }),
        (false, [(prompt, _)]) => Ok(Invocation {
            form: Form::Codex { thread: None },
            prompt: prompt_or_stdin(Some(prompt))?,
        }),
        (false, []) => Ok(Invocation {
            form: Form::Codex { thread: None },
            prompt: prompt_or_stdin(None)?,
        }),
        (true, _) => Err("exec resume needs THREAD and at most one PROMPT".into()),
        (false, _) => Err("exec takes at most one PROMPT".into()),
    }
}

/// `app-server [--listen URL] [-c K=V]…`: options accepted and ignored (an unknown option is
/// warned about), positionals refused.
fn parse_app_server(args: &[String]) -> Result<Invocation, String> {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if let Some(Opt::Value(url)) = take_option(args, &mut i, &["--listen"], true)? {
            if url != "stdio://" {
                eprintln!("corral-fake-engine: warning: --listen {url}: only stdio:// is spoken (using it)");
            }
        } else if take_codex_global(args, &mut i)? {
            continue;
        } else if arg.starts_with('-') && arg != "-" {
            eprintln!("corral-fake-engine: warning: unknown app-server option {arg} (ignored)");
            i += 1;
        } else {
            return Err(format!("app-server takes no argument {arg}"));
        }
    }
    Ok(Invocation {
        form: Form::AppServer,
        prompt: String::new(),
    })
}

fn parse_claude(args: &[String]) -> Result<Invocation, String> {
    let (mut print, mut verbose, mut stream_json, mut skip_permissions) =
        (false, false, false, false);
    let (mut model, mut resume, mut mode) = (None, None, None);
    let (mut stream_input, mut prompt_tool) = (false, false);
    let mut positionals = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            positionals.extend(args[i + 1..].iter().cloned());
            break;
        }
        if take_option(args, &mut i, &["-p", "--print"], false)?.is_some() {
            print = true;
        } else if take_option(args, &mut i, &["--verbose"], false)?.is_some() {
            verbose = true;
        } else if take_option(args, &mut i, &["--dangerously-skip-permissions"], false)?.is_some() {
            skip_permissions = true;
        } else if let Some(Opt::Value(value)) =
            take_option(args, &mut i, &["--permission-mode"], true)?
        {
            // As claude 2.1.197: one of its modes, or a usage error.
            const MODES: [&str; 6] = [
                "acceptEdits",
                "auto",
                "bypassPermissions",
                "default",
                "dontAsk",
                "plan",
            ];
            if !MODES.contains(&value.as_str()) {
                return Err(format!("--permission-mode: invalid mode '{value}'"));
            }
            mode = Some(value);
        } else if let Some(Opt::Value(format)) =
            take_option(args, &mut i, &["--input-format"], true)?
        {
            match format.as_str() {
                "stream-json" => stream_input = true,
                "text" => {}
                other => return Err(format!("unsupported --input-format {other}")),
            }
        } else if let Some(Opt::Value(tool)) =
            take_option(args, &mut i, &["--permission-prompt-tool"], true)?
        {
            if tool != "stdio" {
                return Err(format!(
                    "the fake knows only --permission-prompt-tool stdio, not {tool}"
                ));
            }
            prompt_tool = true;
        } else if take_option(args, &mut i, &["--effort"], true)?.is_some() {
            // Accepted; the fake has no model to tell.
            continue;
        } else if let Some(Opt::Value(format)) =
            take_option(args, &mut i, &["--output-format"], true)?
        {
            if format != "stream-json" {
                return Err(format!("unsupported --output-format {format}"));
            }
            stream_json = true;
        } else if let Some(Opt::Value(value)) = take_option(args, &mut i, &["--model"], true)? {
            model = Some(value);
        } else if let Some(Opt::Value(value)) =
            take_option(args, &mut i, &["--resume", "-r"], true)?
        {
            resume = Some(value);
        } else if take_option(args, &mut i, &["--resume-session-at"], true)?.is_some() {
            // Accepted; the fake keeps no transcript to cut.
            continue;
        } else if arg.starts_with('-') && arg != "-" {
            return Err(format!("unknown option {arg}"));
        } else {
            positionals.push(arg.clone());
            i += 1;
        }
    }
    if !print {
        return Err("neither `exec` (codex form) nor `-p` (claude form)".into());
    }
    if !verbose || !stream_json {
        return Err("-p needs --verbose --output-format stream-json".into());
    }
    if prompt_tool && !stream_input {
        return Err("--permission-prompt-tool stdio needs --input-format stream-json".into());
    }
    // As claude: with no PROMPT, stdin is the prompt (in stream-json, its first user message,
    // stdin staying open for the answers).
    let prompt = match (positionals.as_slice(), stream_input) {
        ([], true) => first_user_message()?,
        ([prompt], false) => prompt.clone(),
        ([], false) => prompt_or_stdin(None)?,
        (_, true) => return Err("--input-format stream-json takes no PROMPT".into()),
        _ => return Err("-p takes at most one PROMPT".into()),
    };
    Ok(Invocation {
        form: Form::Claude {
            resume,
            model,
            permission_mode: if skip_permissions {
                "bypassPermissions".to_string()
            } else {
                mode.unwrap_or_else(|| "default".to_string())
            },
            converses: prompt_tool,
        },
        prompt,
    })
}

/// One line of stdin (`None` at its end).
fn stdin_line() -> Option<String> {
    let mut line = String::new();
    match std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

/// The prompt of stream-json input: the first user message's text.
fn first_user_message() -> Result<String, String> {
    let line = stdin_line().ok_or("stdin ended before a user message")?;
    let message: serde_json::Value =
        serde_json::from_str(line.trim_end()).map_err(|error| format!("stdin: {error}"))?;
    if message["type"] != "user" {
        return Err(format!(
            "stdin: expected a user message, got {}",
            line.trim_end()
        ));
    }
    match message["message"]["content"].as_str() {
        Some(text) => Ok(text.to_string()),
        None => Err("stdin: the user message has no text content".into()),
    }
}

/// What the directives asked for.
#[derive(Debug, Default)]
struct Script {
    answer: Option<String>,
    delay_ms: u64,
    deltas: u64,
    interval_ms: u64,
    exit: Option<i32>,
    rate_limit: u64,
    writer_conflict: u64,
    missing_rollout: bool,
    fail: Option<String>,
    crash: bool,
    partial: bool,
    garbage: bool,
    /// Bytes of one raw line printed before the answer (`long-line=N`).
    long_line: u64,
    hang: bool,
    ignore_sigterm: bool,
    stderr: Option<String>,
    title: Option<String>,
    echo_env: bool,
    run: Option<String>,
    /// A command left running in the background (`spawn=CMD`).
    spawn: Option<String>,
    /// Tool uses the claude form reports as refused (`deny=TOOL:TARGET`).
    denials: Vec<(String, String)>,
    /// Tool uses the claude form asks permission for (`ask=TOOL:TARGET`).
    asks: Vec<(String, String)>,
    unknown_control: bool,
    // app-server mode only:
    will_retry: u64,
    usage_limit: bool,
    overloaded: bool,
    ignore_interrupt: bool,
    exit_mid_turn: Option<i32>,
    approval: Option<Approval>,
    unknown_request: bool,
    final_no_newline: bool,
    stray_response: bool,
    double_response: bool,
}

/// What `approval=` asks the client to approve.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Approval {
    Command,
    File,
}

impl Script {
    /// Applies one directive; returns a warning when it is not understood.
    fn apply(&mut self, directive: &str) -> Result<(), String> {
        let (name, value) = match directive.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value)),
            None => (directive.trim(), None),
        };
        fn number<T: std::str::FromStr>(name: &str, value: Option<&str>) -> Result<T, String> {
            let value = value.ok_or_else(|| format!("directive '{name}' needs a value"))?;
            value
                .trim()
                .parse()
                .map_err(|_| format!("directive '{name}': '{value}' is not a number"))
        }
        fn text(name: &str, value: Option<&str>) -> Result<String, String> {
            value
                .map(str::to_string)
                .ok_or_else(|| format!("directive '{name}' needs a value"))
        }
        let flag = |field: &mut bool| match value {
            None => {
                *field = true;
                Ok(())
            }
            Some(_) => Err(format!("directive '{name}' takes no value")),
        };
        match name {
            "answer" => self.answer = Some(text(name, value)?),
            "delay" => self.delay_ms = number(name, value)?,
            "deltas" => self.deltas = number(name, value)?,
            "interval" => self.interval_ms = number(name, value)?,
            "exit" => self.exit = Some(number(name, value)?),
            "rate-limit" => self.rate_limit = number(name, value)?,
            "writer-conflict" => self.writer_conflict = number(name, value)?,
            "missing-rollout" => flag(&mut self.missing_rollout)?,
            "fail" => self.fail = Some(text(name, value)?),
            "crash" => flag(&mut self.crash)?,
            "partial" => flag(&mut self.partial)?,
            "garbage" => flag(&mut self.garbage)?,
            "long-line" => self.long_line = number(name, value)?,
            "hang" => flag(&mut self.hang)?,
            "ignore-sigterm" => flag(&mut self.ignore_sigterm)?,
            "stderr" => self.stderr = Some(text(name, value)?),
            "title" => self.title = Some(text(name, value)?),
            "echo-env" => flag(&mut self.echo_env)?,
            "run" => self.run = Some(text(name, value)?),
            "spawn" => self.spawn = Some(text(name, value)?),
            "deny" => {
                let value = text(name, value)?;
                let (tool, target) = value
                    .split_once(':')
                    .ok_or_else(|| format!("directive 'deny' is TOOL:TARGET, not '{value}'"))?;
                self.denials.push((tool.to_string(), target.to_string()));
            }
            "ask" => {
                let value = text(name, value)?;
                let (tool, target) = value
                    .split_once(':')
                    .ok_or_else(|| format!("directive 'ask' is TOOL:TARGET, not '{value}'"))?;
                self.asks.push((tool.to_string(), target.to_string()));
            }
            "unknown-control" => flag(&mut self.unknown_control)?,
            "will-retry" => self.will_retry = number(name, value)?,
            "usage-limit" => flag(&mut self.usage_limit)?,
            "overloaded" => flag(&mut self.overloaded)?,
            "ignore-interrupt" => flag(&mut self.ignore_interrupt)?,
            "exit-mid-turn" => self.exit_mid_turn = Some(number(name, value)?),
            "approval" => {
                self.approval = Some(match text(name, value)?.trim() {
                    "command" => Approval::Command,
                    "file" => Approval::File,
                    other => {
                        return Err(format!(
                            "directive '{name}': '{other}' is neither command nor file"
                        ))
                    }
                })
            }
            "unknown-request" => flag(&mut self.unknown_request)?,
            "final-no-newline" => flag(&mut self.final_no_newline)?,
            "stray-response" => flag(&mut self.stray_response)?,
            "double-response" => flag(&mut self.double_response)?,
            _ => return Err(format!("unknown directive '{name}'")),
        }
        Ok(())
    }

    /// The script of `CORRAL_FAKE_SCRIPT` and then of the prompt's `@fake` lines, with the
    /// warnings about what was ignored.
    fn load(env_script: &str, prompt: &str) -> (Script, Vec<String>) {
        let mut script = Script::default();
        let mut warnings = Vec::new();
        let from_env = env_script.split([';', '\n']);
        let from_prompt = prompt.lines().filter_map(prompt_directive);
        for directive in from_env.chain(from_prompt) {
            let directive = directive.trim();
            if directive.is_empty() {
                continue;
            }
            if let Err(warning) = script.apply(directive) {
                warnings.push(format!("{warning} (ignored)"));
            }
        }
        (script, warnings)
    }
}

/// The directive of a prompt line `@fake DIRECTIVE`.
fn prompt_directive(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("@fake")?;
    rest.starts_with(char::is_whitespace).then(|| rest.trim())
}

/// The prompt's first line that is not blank, not a directive and not the title instruction.
fn first_line(prompt: &str) -> &str {
    let content = || {
        prompt
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && prompt_directive(line).is_none())
    };
    let mut lines = content();
    lines
        .find(|line| !line.contains(TITLE_MARKER))
        .or_else(|| content().next())
        .unwrap_or("")
}

fn answer_text(script: &Script, prompt: &str) -> String {
    let line = first_line(prompt);
    let answer = if script.echo_env {
        let var =
            |key: &str| std::env::var_os(key).map(|value| value.to_string_lossy().into_owned());
        obj! {
            "CORRAL_HOME" => var("CORRAL_HOME"),
            "CORRAL_SESSION_ID" => var("CORRAL_SESSION_ID"),
            "CORRAL_PARENT_EXEC" => var("CORRAL_PARENT_EXEC"),
            "CORRAL_RUN_ATTEMPT" => var("CORRAL_RUN_ATTEMPT"),
            "CLAUDE_CODE_MAX_RETRIES" => var("CLAUDE_CODE_MAX_RETRIES"),
            "CORRAL_TRACE_ID" => var("CORRAL_TRACE_ID"),
            "CORRAL_RUN_ID" => var("CORRAL_RUN_ID"),
            "CORRAL_DAEMON_NOTIFY" => var("CORRAL_DAEMON_NOTIFY"),
        }
        .0
    } else if let Some(answer) = &script.answer {
        answer.clone()
    } else {
        let cut: String = line.chars().take(80).collect();
        format!("fake answer: {cut}")
    };
    if !prompt.contains(TITLE_MARKER) {
        return answer;
    }
    let title = match &script.title {
        Some(title) => title.clone(),
        None => line
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" "),
    };
    format!("<!-- corral-title: {title} -->\n{answer}")
}

/// stdout, written and flushed line by line.
struct Out {
    stdout: std::io::Stdout,
}

impl Out {
    fn bytes(&mut self, bytes: &[u8]) {
        let mut stdout = self.stdout.lock();
        // A reader that went away is not the fake's business: keep going as scripted.
        let _ = stdout.write_all(bytes);
        let _ = stdout.flush();
    }

    fn line(&mut self, value: &J) {
        self.bytes(format!("{}\n", value.0).as_bytes());
    }

    /// The last line: without its newline when `partial`.
    fn last_line(&mut self, value: &J, partial: bool) {
        if partial {
            self.bytes(value.0.as_bytes());
        } else {
            self.line(value);
        }
    }

    /// Half of `value`'s line, no newline, then death by SIGKILL.
    fn crash(&mut self, value: &J) -> ! {
        let text = value.0.as_bytes();
        self.bytes(&text[..text.len() / 2]);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
        sleep_forever()
    }

    fn garbage(&mut self) {
        self.bytes(b"this is not JSON {\"type\":\n");
        self.bytes(b"\xff\xfe invalid \xc3\x28 utf-8 \x80\n");
    }

    /// One line of `bytes` `x` characters (not JSON), written in pieces.
    fn long_line(&mut self, bytes: u64) {
        let piece = [b'x'; 64 * 1024];
        let mut left = bytes as usize;
        while left > 0 {
            let n = left.min(piece.len());
            self.bytes(&piece[..n]);
            left -= n;
        }
        self.bytes(b"\n");
    }
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn exit(script: &Script, code: i32) -> ! {
    std::process::exit(script.exit.unwrap_or(code))
}

/// `spawn=CMD`: starts `sh -c CMD` with stdin, stdout and stderr on /dev/null, in the
/// engine's process group and environment, and leaves it running (never waited for); says
/// `fake-engine: spawned PID` on stderr (the shell's pid).
fn spawn_background(script: &Script) {
    let Some(command) = &script.spawn else { return };
    let spawned = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(child) => eprintln!("fake-engine: spawned {}", child.id()),
        Err(error) => eprintln!("fake-engine: spawn: {error}"),
    }
}

/// Runs `sh -c CMD` (in `cwd`, else the current directory, with `env` added, as codex's
/// `shell_environment_policy.set` does) with stderr merged into stdout; returns its output
/// and exit code.
fn run_command(
    command: &str,
    cwd: Option<&std::path::Path>,
    env: &[(String, String)],
) -> (String, i32) {
    let mut child = Command::new("sh");
    child.envs(env.iter().map(|(name, value)| (name, value)));
    if let Some(cwd) = cwd.filter(|cwd| cwd.is_dir()) {
        child.current_dir(cwd);
    }
    let child = child
        .arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => return (format!("sh: {error}\n"), 127),
    };
    let mut output = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut output);
    }
    let code = match child.wait() {
        Ok(status) => status.code().unwrap_or(-1),
        Err(_) => -1,
    };
    (String::from_utf8_lossy(&output).into_owned(), code)
}

/// codex's token usage of a turn (small fixed numbers).
fn codex_usage() -> J {
    obj! {
        "input_tokens" => 100u64,
        "cached_input_tokens" => 0u64,
        "cache_write_input_tokens" => 0u64,
        "output_tokens" => 10u64,
        "reasoning_output_tokens" => 0u64,
    }
}

fn codex(script: &Script, prompt: &str, resumed: Option<&str>, attempt: u64) -> ! {
    let mut out = Out {
        stdout: std::io::stdout(),
    };
    if let Some(thread) = resumed {
        if attempt <= script.writer_conflict {
            eprintln!(
                "Error: thread/resume: thread/resume failed: thread {thread} already has an active writer (code -32600)"
            );
            exit(script, 1);
        }
        if script.missing_rollout {
            eprintln!(
                "Error: thread/resume: thread/resume failed: no rollout found for thread id {thread} (code -32600)"
            );
            exit(script, 1);
        }
    }
    let thread_id = match resumed {
        Some(thread) => thread.to_string(),
        None => uuid::Uuid::now_v7().to_string(),
    };
    out.line(&obj! {"type" => "thread.started", "thread_id" => thread_id});
    out.line(&obj! {"type" => "turn.started"});
    spawn_background(script);
    sleep_ms(script.delay_ms);

    let failure = if attempt <= script.rate_limit {
        Some(CODEX_RATE_LIMIT.to_string())
    } else {
        script.fail.clone()
    };
    if let Some(message) = failure {
        out.line(&obj! {"type" => "error", "message" => &message});
        out.line(&obj! {"type" => "turn.failed", "error" => obj! {"message" => &message}});
        exit(script, 1);
    }

    let mut items = 0u64;
    let mut next_id = || {
        items += 1;
        format!("item_{}", items - 1)
    };
    if let Some(command) = &script.run {
        let id = next_id();
        out.line(&obj! {"type" => "item.started", "item" => obj! {
            "id" => &id,
            "type" => "command_execution",
            "command" => command,
            "aggregated_output" => "",
            "exit_code" => J::null(),
            "status" => "in_progress",
        }});
        let (output, code) = run_command(command, None, &[]);
        let status = if code == 0 { "completed" } else { "failed" };
        out.line(&obj! {"type" => "item.completed", "item" => obj! {
            "id" => &id,
            "type" => "command_execution",
            "command" => command,
            "aggregated_output" => output,
            "exit_code" => code,
            "status" => status,
        }});
    }
    for step in 1..=script.deltas {
        out.line(&obj! {"type" => "item.completed", "item" => obj! {
            "id" => next_id(),
            "type" => "reasoning",
            "text" => format!("step {step}"),
        }});
        sleep_ms(script.interval_ms);
    }
    if script.garbage {
        out.garbage();
    }
    if script.long_line > 0 {
        out.long_line(script.long_line);
    }
    if script.hang {
        sleep_forever();
    }
    let answer = obj! {"type" => "item.completed", "item" => obj! {
        "id" => next_id(),
        "type" => "agent_message",
        "text" => answer_text(script, prompt),
    }};
    if script.crash {
        out.crash(&answer);
    }
    out.line(&answer);
    out.last_line(
        &obj! {"type" => "turn.completed", "usage" => codex_usage()},
        script.partial,
    );
    exit(script, 0)
}

/// The claude stream of one turn.
struct Claude {
    out: Out,
    session_id: String,
    model: String,
    started: Instant,
}

impl Claude {
    fn uuid() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    /// A random 20-hex-digit suffix for message, request and tool ids.
    fn token() -> String {
        uuid::Uuid::new_v4().simple().to_string()[..20].to_string()
    }

    fn usage(input: u64, output: u64) -> J {
        obj! {
            "input_tokens" => input,
            "output_tokens" => output,
            "cache_creation_input_tokens" => 0u64,
            "cache_read_input_tokens" => 0u64,
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn init(&mut self, mode: &str) {
        let cwd = std::env::current_dir()
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default();
        let line = obj! {
            "type" => "system",
            "subtype" => "init",
            "cwd" => cwd,
            "session_id" => &self.session_id,
            "tools" => arr!["Bash", "Edit", "Read", "Write"],
            "mcp_servers" => arr![],
            "model" => &self.model,
            "permissionMode" => mode,
            "slash_commands" => arr![],
            "apiKeySource" => "none",
            "claude_code_version" => CLAUDE_VERSION,
            "output_style" => "default",
            "agents" => arr![],
            "skills" => arr![],
            "plugins" => arr![],
            "uuid" => Self::uuid(),
            "fast_mode_state" => "off",
        };
        self.out.line(&line);
    }

    /// An `assistant` line with these content blocks.
    fn assistant(&self, content: J) -> J {
        obj! {
            "type" => "assistant",
            "message" => obj! {
                "id" => format!("msg_fake_{}", Self::token()),
                "type" => "message",
                "role" => "assistant",
                "model" => &self.model,
                "content" => content,
                "stop_reason" => J::null(),
                "stop_sequence" => J::null(),
                "usage" => Self::usage(100, 10),
                "context_management" => J::null(),
            },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
            "request_id" => format!("req_fake_{}", Self::token()),
        }
    }

    fn text_line(&self, text: &str) -> J {
        self.assistant(arr![obj! {"type" => "text", "text" => text}])
    }

    /// A failed turn as claude reports API errors: a synthetic assistant line, then an error
    /// result (whose subtype is still `success`).
    fn fail(&mut self, message: &str, error: &str, status: Option<u64>) {
        let assistant = obj! {
            "type" => "assistant",
            "message" => obj! {
                "id" => Self::uuid(),
                "container" => J::null(),
                "model" => "<synthetic>",
                "role" => "assistant",
                "stop_details" => J::null(),
                "stop_reason" => "stop_sequence",
                "stop_sequence" => "",
                "type" => "message",
                "usage" => Self::usage(0, 0),
                "content" => arr![obj! {"type" => "text", "text" => message}],
                "context_management" => J::null(),
            },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
            "error" => error,
            "request_id" => format!("req_fake_{}", Self::token()),
        };
        self.out.line(&assistant);
        let result = obj! {
            "type" => "result",
            "subtype" => "success",
            "is_error" => true,
            "api_error_status" => status,
            "duration_ms" => self.elapsed_ms(),
            "duration_api_ms" => 0u64,
            "num_turns" => 1u64,
            "result" => message,
            "stop_reason" => "stop_sequence",
            "session_id" => &self.session_id,
            "total_cost_usd" => 0u64,
            "usage" => Self::usage(0, 0),
            "modelUsage" => obj! {},
            "permission_denials" => arr![],
            "terminal_reason" => "completed",
            "fast_mode_state" => "off",
            "uuid" => Self::uuid(),
        };
        self.out.line(&result);
    }

    fn tool(&mut self, command: &str) {
        let id = format!("toolu_fake_{}", Self::token());
        let call = self.assistant(arr![obj! {
            "type" => "tool_use",
            "id" => &id,
            "name" => "Bash",
            "input" => obj! {"command" => command, "description" => "Run a command"},
        }]);
        self.out.line(&call);
        let (output, code) = run_command(command, None, &[]);
        let result = self.tool_result(&id, &output, code != 0, None);
        self.out.line(&result);
    }

    /// The `user` line carrying a tool's result (with when it ran, for the asking form).
    fn tool_result(&self, id: &str, content: &str, is_error: bool, ran_at: Option<u64>) -> J {
        let block = match ran_at {
            Some(ran_at) => obj! {
                "tool_use_id" => id,
                "type" => "tool_result",
                "content" => content,
                "is_error" => is_error,
                "fake_ran_at_us" => ran_at,
            },
            None => obj! {
                "tool_use_id" => id,
                "type" => "tool_result",
                "content" => content,
                "is_error" => is_error,
            },
        };
        obj! {
            "type" => "user",
            "message" => obj! { "role" => "user", "content" => arr![block] },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
        }
    }

    /// A `control_request` of `subtype` with `fields`, then stdin read up to its
    /// `control_response`: the response (`None`: stdin ended first).
    fn control(&mut self, subtype: &str, fields: serde_json::Value) -> Option<serde_json::Value> {
        let request_id = format!("req_fake_{}", Self::token());
        let mut request = fields;
        request["subtype"] = subtype.into();
        let line = obj! {
            "type" => "control_request",
            "request_id" => &request_id,
            "request" => &request,
        };
        self.out.line(&line);
        while let Some(line) = stdin_line() {
            let Ok(answer) = serde_json::from_str::<serde_json::Value>(line.trim_end()) else {
                eprintln!("fake-engine: stdin line is not JSON: {}", line.trim_end());
                continue;
            };
            let response = &answer["response"];
            if answer["type"] == "control_response" && response["request_id"] == request_id.as_str()
            {
                return Some(response.clone());
            }
            eprintln!("fake-engine: unexpected stdin line: {}", line.trim_end());
        }
        None
    }

    /// The model calls `tool` on `target`, asking first when `converses`. Returns the
    /// target when the call was refused.
    fn asked_tool(&mut self, tool: &str, target: &str, converses: bool) -> Option<String> {
        use serde_json::json;
        let id = format!("toolu_fake_{}", Self::token());
        let mut input = match tool {
            "Bash" => json!({ "command": target, "description": "Run a command" }),
            _ => json!({ "file_path": target, "content": "approved\n" }),
        };
        // When it asked, for `examples/approval_bench.rs` (microseconds since the epoch).
        if converses {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            input["fake_asked_at_us"] = (now.as_micros() as u64).into();
        }
        let call = self.assistant(arr![obj! {
            "type" => "tool_use",
            "id" => &id,
            "name" => tool,
            "input" => &input,
        }]);
        self.out.line(&call);
        let answer = if converses {
            self.control(
                "can_use_tool",
                json!({
                    "tool_name": tool,
                    "input": input,
                    "tool_use_id": id,
                    "decision_reason": "fake engine asks",
                }),
            )
        } else {
            None
        };
        let inner = answer.as_ref().map(|response| &response["response"]);
        let allowed = inner.is_some_and(|inner| inner["behavior"] == "allow");
        let (content, is_error) = if allowed {
            let given = &inner.expect("allowed")["updatedInput"];
            let input = if given.is_object() { given } else { &input };
            match tool {
                "Bash" => {
                    let command = input["command"].as_str().unwrap_or_default();
                    let (output, code) = run_command(command, None, &[]);
                    (output, code != 0)
                }
                _ => {
                    let path = input["file_path"].as_str().unwrap_or_default();
                    let content = input["content"].as_str().unwrap_or_default();
                    match std::fs::write(path, content) {
                        Ok(()) => (format!("File created successfully at: {path}"), false),
                        Err(error) => (format!("{path}: {error}"), true),
                    }
                }
            }
        } else {
            let message = inner.and_then(|inner| inner["message"].as_str()).unwrap_or(
                "Claude requested permissions to use this tool, but you haven't granted it yet.",
            );
            (message.to_string(), true)
        };
        // When the tool ran, for `examples/approval_bench.rs` (microseconds since the epoch).
        let ran_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        let result = self.tool_result(&id, &content, is_error, Some(ran_at));
        self.out.line(&result);
        (!allowed).then(|| target.to_string())
    }

    fn result(&self, answer: &str, denials: &[(String, String)]) -> J {
        let elapsed = self.elapsed_ms();
        let denials = J::list(denials.iter().map(|(tool, target)| {
            obj! {
                "tool_name" => tool,
                "tool_use_id" => format!("toolu_fake_{}", Self::uuid()),
                "tool_input" => obj! { "file_path" => target },
            }
        }));
        obj! {
            "type" => "result",
            "subtype" => "success",
            "is_error" => false,
            "api_error_status" => J::null(),
            "duration_ms" => elapsed,
            "duration_api_ms" => elapsed,
            "num_turns" => 1u64,
            "result" => answer,
            "stop_reason" => "end_turn",
            "session_id" => &self.session_id,
            "total_cost_usd" => 0u64,
            "usage" => Self::usage(100, 10),
            "modelUsage" => obj! {},
            "permission_denials" => denials,
            "terminal_reason" => "completed",
            "fast_mode_state" => "off",
            "uuid" => Self::uuid(),
        }
    }
}

fn claude(
    script: &Script,
    prompt: &str,
    resume: Option<&str>,
    model: Option<&str>,
    permission_mode: &str,
    converses: bool,
    attempt: u64,
) -> ! {
    let mut claude = Claude {
        out: Out {
            stdout: std::io::stdout(),
        },
        session_id: resume.map_or_else(Claude::uuid, str::to_string),
        model: model.unwrap_or("fake-model").to_string(),
        started: Instant::now(),
    };
    claude.init(permission_mode);
    spawn_background(script);
    sleep_ms(script.delay_ms);
    if attempt <= script.rate_limit {
        claude.fail(CLAUDE_RATE_LIMIT, "rate_limit", Some(429));
        exit(script, 1);
    }
    if let Some(message) = &script.fail {
        claude.fail(message, "unknown", None);
        exit(script, 1);
    }
    if let Some(command) = &script.run {
        claude.tool(command);
    }
    if script.unknown_control && converses {
        claude.control("fake_unknown", serde_json::json!({}));
    }
    let mut denials = script.denials.clone();
    for (tool, target) in &script.asks {
        if let Some(refused) = claude.asked_tool(tool, target, converses) {
            denials.push((tool.clone(), refused));
        }
    }
    for step in 1..=script.deltas {
        let line = claude.text_line(&format!("step {step}"));
        claude.out.line(&line);
        sleep_ms(script.interval_ms);
    }
    if script.garbage {
        claude.out.garbage();
    }
    if script.hang {
        sleep_forever();
    }
    let answer = answer_text(script, prompt);
    let line = claude.text_line(&answer);
    if script.crash {
        claude.out.crash(&line);
    }
    claude.out.line(&line);
    let result = claude.result(&answer, &denials);
    claude.out.last_line(&result, script.partial);
    // As claude with stream-json input: the process ends when its stdin does.
    if converses {
        while stdin_line().is_some() {}
    }
    exit(script, 0)
}

/// The live check of the module doc (`CORRAL_FAKE_LIVE_CHECK`).
mod live_check {
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::path::Path;

    use nix::fcntl::{Flock, FlockArg};

    /// Takes the locks and logs them; the locks are held while the result lives. Nothing
    /// without the variable; a failure is a warning on stderr (the turn runs anyway).
    pub fn enter() -> Vec<Flock<File>> {
        let Some(dir) = std::env::var_os("CORRAL_FAKE_LIVE_CHECK") else {
            return Vec::new();
        };
        match take(Path::new(&dir)) {
            Ok(held) => held,
            Err(error) => {
                eprintln!("corral-fake-engine: warning: the live check failed: {error}");
                Vec::new()
            }
        }
    }

    fn take(dir: &Path) -> std::io::Result<Vec<Flock<File>>> {
        let session = std::env::var("CORRAL_SESSION_ID").unwrap_or_default();
        let home = std::env::var("CORRAL_HOME").unwrap_or_default();
        let name: String = Path::new(&home)
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        let mut held = Vec::new();
        let overlap = match lock(&dir.join(format!("session-{session}")))? {
            Some(lock) => {
                held.push(lock);
                0
            }
            None => 1,
        };
        let mut slot = |prefix: &str| -> std::io::Result<usize> {
            for k in 0.. {
                if let Some(lock) = lock(&dir.join(format!("{prefix}-{k}")))? {
                    held.push(lock);
                    return Ok(k);
                }
            }
            unreachable!("an unbounded range")
        };
        let all = slot("all")?;
        let mine = slot(&format!("home-{name}"))?;
        // One write of a short line with O_APPEND: lines of engines at once do not mix.
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))?
            .write_all(format!("{all} {mine} {name} {overlap} {session}\n").as_bytes())?;
        Ok(held)
    }

    /// The file's exclusive lock, or `None` when another process holds it.
    fn lock(path: &Path) -> std::io::Result<Option<Flock<File>>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(lock)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(errno.into()),
        }
    }
}

/// `corral-fake-engine app-server`: codex's `app-server` protocol over stdin/stdout.
///
/// The main thread reads stdin and answers requests in order; every turn runs on a thread of
/// its own and talks to the main thread through its `Control` channel (interrupts, steers
/// and the client's answers to the turn's server requests). Every stdout line goes through
/// `Wire`, whole and flushed.
mod app_server {
    use super::{answer_text, run_command, sleep_forever, Approval, Script, J};
    use serde_json::Value;
    use std::collections::HashMap;
    use std::io::{BufRead, Write};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    /// JSON-RPC's "invalid request", which codex uses for every refusal.
    const INVALID_REQUEST: i64 = -32600;
    const INTERNAL_ERROR: i64 = -32603;
    const RATE_LIMIT: &str = "exceeded retry limit, last status: 429 Too Many Requests";
    const USAGE_LIMIT: &str = "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 7:28 AM.";
    const OVERLOADED: &str =
        "We're currently experiencing high demand, which may cause temporary errors.";
    const CONTEXT_WINDOW: u64 = 121_600;
    /// The id of `stray-response`'s answer to a request that was never sent.
    const STRAY_RESPONSE_ID: i64 = 987_654;
    const METHODS: [&str; 7] = [
        "initialize",
        "thread/start",
        "thread/resume",
        "turn/start",
        "turn/steer",
        "turn/interrupt",
        "thread/compact/start",
    ];

    fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64)
    }

    fn now_s() -> u64 {
        now_ms() / 1000
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a time in ms since the epoch (proleptic Gregorian).
    fn timestamp(ms: u64) -> String {
        let secs = ms / 1000;
        let (hour, minute, second) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
        // Days since 0000-03-01, counted in 400-year eras of 146097 days.
        let days = (secs / 86_400) as i64 + 719_468;
        let (era, day_of_era) = (days.div_euclid(146_097), days.rem_euclid(146_097));
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_from_march = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
        let month = if month_from_march < 10 {
            month_from_march + 3
        } else {
            month_from_march - 9
        };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{:03}Z",
            ms % 1000
        )
    }

    /// A tracing-style line on stderr, as codex logs (without the colours).
    fn log(level: &str, message: &str) {
        eprintln!(
            "{} {level:>5} corral_fake_engine::app_server: {message}",
            timestamp(now_ms())
        );
    }

    /// stdout: one whole JSON line at a time, flushed.
    struct Wire {
        stdout: Mutex<std::io::Stdout>,
    }

    impl Wire {
        fn lock(&self) -> MutexGuard<'_, std::io::Stdout> {
            self.stdout.lock().unwrap_or_else(PoisonError::into_inner)
        }

        fn raw(&self, bytes: &[u8]) {
            let mut stdout = self.lock();
            // A client that went away is noticed on stdin (EOF), not here.
            let _ = stdout.write_all(bytes);
            let _ = stdout.flush();
        }

        fn send(&self, message: &J) {
            self.raw(format!("{}\n", message.0).as_bytes());
        }

        fn notify(&self, method: &str, params: J) {
            self.send(&obj! {"method" => method, "params" => params, "emittedAtMs" => now_ms()});
        }

        fn respond(&self, id: &J, result: J) {
            self.send(&obj! {"id" => id.clone(), "result" => result});
        }

        fn error(&self, id: &J, code: i64, message: &str) {
            self.send(&obj! {
                "error" => obj! {"code" => code, "message" => message},
                "id" => id.clone(),
            });
        }
    }

    /// What the main thread tells a running turn.
    enum Control {
        Interrupt,
        Steer(String),
        /// The client's answer (the whole message) to the server request with this id.
        Response(i64, Value),
    }

    /// A refusal: the JSON-RPC error code and message.
    struct Refusal(i64, String);

    impl From<String> for Refusal {
        fn from(message: String) -> Refusal {
            Refusal(INVALID_REQUEST, message)
        }
    }

    impl From<&str> for Refusal {
        fn from(message: &str) -> Refusal {
            Refusal(INVALID_REQUEST, message.to_string())
        }
    }

    /// A thread this process has started or resumed.
    struct Loaded {
        /// The thread's file (see [`Server::save`]).
        record: Value,
        active: Option<Active>,
    }

    /// The turn in progress on a loaded thread.
    struct Active {
        turn: String,
        control: Sender<Control>,
    }

    struct Server {
        wire: Wire,
        state: PathBuf,
        env_script: String,
        /// `clientInfo.name` of `initialize`: the threads' `originator`.
        originator: Mutex<String>,
        threads: Mutex<HashMap<String, Loaded>>,
        /// Server requests waiting for the client's answer: id → the asking turn.
        pending: Mutex<HashMap<i64, Sender<Control>>>,
        next_request: AtomicI64,
        next_item: AtomicU64,
    }

    fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `CORRAL_FAKE_STATE`, else `$CORRAL_HOME/fake-engine`, else a directory under the
    /// system's temporary directory.
    fn state_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("CORRAL_FAKE_STATE").filter(|dir| !dir.is_empty()) {
            return PathBuf::from(dir);
        }
        if let Some(home) = std::env::var_os("CORRAL_HOME").filter(|dir| !dir.is_empty()) {
            return PathBuf::from(home).join("fake-engine");
        }
        let uid = nix::unistd::getuid();
        std::env::temp_dir().join(format!("corral-fake-engine-{uid}"))
    }

    /// Whether process `pid` is alive (a zombie is not).
    fn alive(pid: i32) -> bool {
        // No signal (`None`) only checks that the process exists.
        let exists = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) | Err(nix::errno::Errno::EPERM) => true,
            Err(_) => false,
        };
        if !exists {
            return false;
        }
        match procfs::process::Process::new(pid).and_then(|process| process.stat()) {
            Ok(stat) => stat.state != 'Z',
            Err(_) => true,
        }
    }

    /// FNV-1a: a hash that stays the same across processes and builds.
    fn fnv1a(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// `params[key]` as a string, or codex's refusal of a missing field.
    fn string<'a>(params: &'a Value, key: &str) -> Result<&'a str, Refusal> {
        match params.get(key) {
            Some(Value::String(text)) => Ok(text),
            None | Some(Value::Null) => {
                Err(format!("Invalid request: missing field `{key}`").into())
            }
            Some(other) => {
                Err(format!("Invalid request: invalid type: {other}, expected a string").into())
            }
        }
    }

    /// `params[key]` as a string when it is given.
    fn optional<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, Refusal> {
        match params.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => string(params, key).map(Some),
        }
    }

    /// A user input list: the userMessage content as codex shows it, and its text (the text
    /// items, one per line).
    fn user_input(params: &Value) -> Result<(J, String), Refusal> {
        let items = match params.get("input") {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => return Err("Invalid request: missing field `input`".into()),
            Some(other) => {
                return Err(
                    format!("Invalid request: invalid type: {other}, expected a sequence").into(),
                )
            }
        };
        let mut content = Vec::new();
        let mut texts = Vec::new();
        for item in items {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
            content.push(match kind {
                "text" => {
                    let text = string(item, "text")?;
                    texts.push(text.to_string());
                    obj! {"type" => "text", "text" => text, "text_elements" => arr![]}
                }
                "localImage" => obj! {"type" => "localImage", "path" => string(item, "path")?},
                "image" => obj! {"type" => "image", "url" => string(item, "url")?},
                _ => J::from(item),
            });
        }
        Ok((J::list(content), texts.join("\n")))
    }

    /// A turn as codex shows it.
    fn turn_json(
        id: &str,
        status: &str,
        items: Option<J>,
        error: J,
        started_at: Option<u64>,
        completed_at: Option<u64>,
        duration_ms: Option<u64>,
    ) -> J {
        let view = if items.is_some() {
            "summary"
        } else {
            "notLoaded"
        };
        obj! {
            "id" => id,
            "rootTurnId" => id,
            "items" => items.unwrap_or_else(|| arr![]),
            "itemsView" => view,
            "status" => status,
            "error" => error,
            "startedAt" => started_at,
            "completedAt" => completed_at,
            "durationMs" => duration_ms,
        }
    }

    /// codex's error object (of `error` notifications and failed turns).
    fn error_json(message: &str, info: J, details: Option<&str>) -> J {
        obj! {
            "message" => message,
            "codexErrorInfo" => info,
            "additionalDetails" => details,
            "misalignment" => J::null(),
        }
    }

    fn status_json(status: &str) -> J {
        if status == "active" {
            obj! {"type" => "active", "activeFlags" => arr![]}
        } else {
            obj! {"type" => status}
        }
    }

    /// The `sandbox` of a thread/start response: codex's policy object for the sandbox modes,
    /// anything else echoed as given.
    fn sandbox_json(given: &Value, cwd: &str) -> J {
        match given.as_str() {
            None if given.is_null() => obj! {"type" => "readOnly", "networkAccess" => false},
            Some("read-only") => obj! {"type" => "readOnly", "networkAccess" => false},
            Some("workspace-write") => obj! {
                "type" => "workspaceWrite",
                "writableRoots" => arr![cwd],
                "networkAccess" => false,
                "excludeTmpdirEnvVar" => false,
                "excludeSlashTmp" => false,
            },
            Some("danger-full-access") => obj! {"type" => "dangerFullAccess"},
            _ => J::from(given),
        }
    }

    fn record_str<'a>(record: &'a Value, key: &str) -> &'a str {
        record.get(key).and_then(Value::as_str).unwrap_or("")
    }

    fn record_u64(record: &Value, key: &str) -> u64 {
        record.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    /// Cuts `text` into codex-like deltas: each word with the whitespace before it.
    fn words(text: &str) -> Vec<&str> {
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut previous_space = false;
        for (index, character) in text.char_indices() {
            let space = character.is_whitespace();
            if space && !previous_space && index > start {
                pieces.push(&text[start..index]);
                start = index;
            }
            previous_space = space;
        }
        if start < text.len() {
            pieces.push(&text[start..]);
        }
        pieces
    }

    impl Server {
        fn threads_dir(&self) -> PathBuf {
            self.state.join("threads")
        }

        fn thread_file(&self, id: &str) -> PathBuf {
            self.threads_dir().join(format!("{id}.json"))
        }

        fn lock_file(&self, id: &str) -> PathBuf {
            self.threads_dir().join(format!("{id}.lock"))
        }

        /// Writes a thread's file (whole, by rename).
        fn save(&self, record: &Value) -> Result<(), Refusal> {
            let id = record_str(record, "id");
            let path = self.thread_file(id);
            let temporary = path.with_extension(format!("json.{}", std::process::id()));
            std::fs::create_dir_all(self.threads_dir())
                .and_then(|()| std::fs::write(&temporary, format!("{record:#}\n")))
                .and_then(|()| std::fs::rename(&temporary, &path))
                .map_err(|error| {
                    Refusal(
                        INTERNAL_ERROR,
                        format!("failed to write {}: {error}", path.display()),
                    )
                })
        }

        /// Takes the thread's writer lock for this process.
        fn lock(&self, id: &str) -> Result<(), Refusal> {
            let path = self.lock_file(id);
            let own = std::process::id() as i32;
            let failed = |error: std::io::Error| {
                Refusal(
                    INTERNAL_ERROR,
                    format!("failed to lock thread {id}: {error}"),
                )
            };
            std::fs::create_dir_all(self.threads_dir()).map_err(failed)?;
            for _ in 0..3 {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                {
                    Ok(mut file) => {
                        return file.write_all(own.to_string().as_bytes()).map_err(failed)
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                        let holder = std::fs::read_to_string(&path)
                            .ok()
                            .and_then(|text| text.trim().parse::<i32>().ok());
                        match holder {
                            Some(pid) if pid == own => return Ok(()),
                            Some(pid) if alive(pid) => {
                                return Err(
                                    format!("thread {id} already has an active writer").into()
                                )
                            }
                            // A lock of a process that is gone.
                            _ => {
                                let _ = std::fs::remove_file(&path);
                            }
                        }
                    }
                    Err(error) => return Err(failed(error)),
                }
            }
            Err(format!("thread {id} already has an active writer").into())
        }

        /// Removes the locks this process holds (at exit).
        fn unlock_all(&self) {
            let own = std::process::id().to_string();
            for id in locked(&self.threads).keys() {
                let path = self.lock_file(id);
                if std::fs::read_to_string(&path).is_ok_and(|pid| pid.trim() == own) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }

        /// Why a thread that this process has not loaded cannot be used.
        fn not_loaded(&self, id: &str) -> Refusal {
            if uuid::Uuid::parse_str(id).is_ok() && self.thread_file(id).exists() {
                format!("thread not found: {id}").into()
            } else {
                format!("no rollout found for thread id {id}").into()
            }
        }

        /// A thread as codex shows it.
        fn thread_json(&self, record: &Value) -> J {
            let id = record_str(record, "id");
            let cwd = record_str(record, "cwd");
            let created = record_u64(record, "createdAt");
            let updated = record_u64(record, "updatedAt");
            let originator = locked(&self.originator).clone();
            let path = self.thread_file(id).to_string_lossy().into_owned();
            obj! {
                "id" => id,
                "environments" => arr![obj! {
                    "environmentId" => "local",
                    "cwd" => cwd,
                    "runtimeWorkspaceRoots" => arr![cwd],
                }],
                "extra" => J::null(),
                "sessionId" => id,
                "forkedFromId" => J::null(),
                "attachedToThreadId" => J::null(),
                "parentThreadId" => J::null(),
                "preview" => record_str(record, "preview"),
                "ephemeral" => false,
                "section" => J::null(),
                "sectionEnteredAt" => J::null(),
                "projectId" => J::null(),
                "historyMode" => "paginated",
                "modelProvider" => "fake",
                "model" => record_str(record, "model"),
                "reasoningEffort" => J::null(),
                "createdAt" => created,
                "updatedAt" => updated,
                "recencyAt" => updated,
                "status" => status_json("idle"),
                "path" => path,
                "cwd" => cwd,
                "cliVersion" => env!("CARGO_PKG_VERSION"),
                "originator" => originator,
                "source" => "vscode",
                "canAcceptDirectInput" => true,
                "threadSource" => J::null(),
                "agentNickname" => J::null(),
                "agentRole" => J::null(),
                "gitInfo" => J::null(),
                "name" => J::null(),
                "daybreakEnabled" => J::null(),
                "turns" => arr![],
            }
        }

        /// The result of thread/start and thread/resume.
        fn thread_result(&self, record: &Value) -> J {
            let cwd = record_str(record, "cwd");
            let sandbox = record.get("sandbox").unwrap_or(&Value::Null);
            let profile = match sandbox.as_str() {
                Some(mode) => format!(":{mode}"),
                None => ":read-only".to_string(),
            };
            obj! {
                "thread" => self.thread_json(record),
                "model" => record_str(record, "model"),
                "modelProvider" => "fake",
                "serviceTier" => J::null(),
                "disabledPluginIds" => arr![],
                "cwd" => cwd,
                "runtimeWorkspaceRoots" => arr![cwd],
                "instructionSources" => arr![],
                "approvalPolicy" => record.get("approvalPolicy").unwrap_or(&Value::Null),
                "approvalsReviewer" => "user",
                "sandbox" => sandbox_json(sandbox, cwd),
                "activePermissionProfile" => obj! {"id" => profile, "extends" => J::null()},
                "reasoningEffort" => J::null(),
                "multiAgentMode" => "explicitRequestOnly",
            }
        }

        /// Applies the settings a thread/start or thread/resume gives to a thread's record.
        fn apply_settings(record: &mut Value, params: &Value) -> Result<(), Refusal> {
            if let Some(cwd) = optional(params, "cwd")? {
                record["cwd"] = cwd.into();
            }
            if let Some(model) = optional(params, "model")? {
                record["model"] = model.into();
            }
            for key in ["approvalPolicy", "sandbox"] {
                if let Some(value) = params.get(key).filter(|value| !value.is_null()) {
                    record[key] = value.clone();
                }
            }
            Ok(())
        }

        fn thread_start(&self, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = uuid::Uuid::now_v7().to_string();
            let cwd = std::env::current_dir()
                .map(|dir| dir.to_string_lossy().into_owned())
                .unwrap_or_default();
            let now = now_s();
            let mut record = serde_json::json!({
                "id": thread,
                "cwd": cwd,
                "model": "fake-model",
                "approvalPolicy": "on-request",
                "sandbox": null,
                "createdAt": now,
                "updatedAt": now,
                "preview": "",
                "turns": 0,
                "startParams": params,
            });
            Self::apply_settings(&mut record, params)?;
            self.lock(&thread)?;
            self.save(&record)?;
            log(
                "INFO",
                &format!(
                    "thread/start {thread}: {}",
                    serde_json::to_string(params).unwrap_or_default()
                ),
            );
            let result = self.thread_result(&record);
            let shown = self.thread_json(&record);
            locked(&self.threads).insert(
                thread.clone(),
                Loaded {
                    record,
                    active: None,
                },
            );
            self.wire.respond(id, result);
            self.wire.notify("thread/started", obj! {"thread" => shown});
            Ok(())
        }

        fn thread_resume(&self, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = string(params, "threadId")?.to_string();
            let loaded_record = locked(&self.threads)
                .get(&thread)
                .map(|loaded| loaded.record.clone());
            let mut record = match loaded_record {
                Some(record) => record,
                None => {
                    let text = uuid::Uuid::parse_str(&thread)
                        .ok()
                        .and_then(|_| std::fs::read_to_string(self.thread_file(&thread)).ok());
                    let record = text.and_then(|text| serde_json::from_str::<Value>(&text).ok());
                    let Some(record) = record else {
                        return Err(format!("no rollout found for thread id {thread}").into());
                    };
                    self.lock(&thread)?;
                    record
                }
            };
            Self::apply_settings(&mut record, params)?;
            self.save(&record)?;
            log("INFO", &format!("thread/resume {thread}"));
            let result = self.thread_result(&record);
            locked(&self.threads)
                .entry(thread.clone())
                .and_modify(|loaded| loaded.record = record.clone())
                .or_insert(Loaded {
                    record,
                    active: None,
                });
            self.wire.notify(
                "thread/status/changed",
                obj! {"threadId" => &thread, "status" => status_json("idle")},
            );
            self.wire.respond(id, result);
            Ok(())
        }

        fn turn_start(self: &Arc<Self>, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = string(params, "threadId")?.to_string();
            let (content, text) = user_input(params)?;
            let turn = uuid::Uuid::now_v7().to_string();
            let (sender, receiver) = mpsc::channel();
            let number = {
                let mut threads = locked(&self.threads);
                let Some(loaded) = threads.get_mut(&thread) else {
                    return Err(self.not_loaded(&thread));
                };
                if let Some(active) = &loaded.active {
                    return Err(format!(
                        "thread {thread} already has a turn in progress: {}",
                        active.turn
                    )
                    .into());
                }
                let record = &mut loaded.record;
                let number = record_u64(record, "turns") + 1;
                record["turns"] = number.into();
                record["updatedAt"] = now_s().into();
                if record_str(record, "preview").is_empty() {
                    record["preview"] = super::first_line(&text).into();
                }
                let record = record.clone();
                self.save(&record)?;
                loaded.active = Some(Active {
                    turn: turn.clone(),
                    control: sender.clone(),
                });
                number
            };
            let (script, warnings) = Script::load(&self.env_script, &text);
            if script.stray_response {
                // A response to a request id the client never sent.
                self.wire.respond(&J::from(STRAY_RESPONSE_ID), obj! {});
            }
            let answer =
                obj! {"turn" => turn_json(&turn, "inProgress", None, J::null(), None, None, None)};
            self.wire.respond(id, answer.clone());
            if script.double_response {
                self.wire.respond(id, answer);
            }
            let turn = Turn {
                server: Arc::clone(self),
                thread,
                id: turn,
                number,
                text,
                content,
                script,
                control: receiver,
                sender,
                started: Instant::now(),
                started_at: now_s(),
                steered: None,
            };
            std::thread::spawn(move || turn.run(warnings));
            Ok(())
        }

        /// The control channel of the thread's turn in progress, if any.
        fn active(&self, thread: &str) -> Result<Option<(String, Sender<Control>)>, Refusal> {
            let threads = locked(&self.threads);
            let loaded = threads.get(thread).ok_or_else(|| self.not_loaded(thread))?;
            Ok(loaded
                .active
                .as_ref()
                .map(|active| (active.turn.clone(), active.control.clone())))
        }

        fn turn_steer(&self, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = string(params, "threadId")?;
            let (_, text) = user_input(params)?;
            // Required, as codex 0.171.0 requires it.
            let expected = string(params, "expectedTurnId")?;
            let Some((turn, control)) = self.active(thread)? else {
                return Err("no active turn to steer".into());
            };
            if expected != turn {
                return Err(format!("expected active turn id {expected} but found {turn}").into());
            }
            self.wire.respond(id, obj! {"turnId" => &turn});
            let _ = control.send(Control::Steer(text));
            Ok(())
        }

        fn turn_interrupt(&self, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = string(params, "threadId")?;
            let wanted = optional(params, "turnId")?;
            let active = self.active(thread)?;
            self.wire.respond(id, obj! {});
            match active {
                Some((turn, control)) if wanted.is_none_or(|wanted| wanted == turn) => {
                    log("INFO", &format!("turn/interrupt {turn}"));
                    let _ = control.send(Control::Interrupt);
                }
                _ => log(
                    "INFO",
                    "turn/interrupt: no such turn in progress (nothing to do)",
                ),
            }
            Ok(())
        }

        /// A compaction: a short turn of its own with a contextCompaction item.
        fn compact(&self, id: &J, params: &Value) -> Result<(), Refusal> {
            let thread = string(params, "threadId")?;
            if let Some((turn, _)) = self.active(thread)? {
                return Err(
                    format!("thread {thread} already has a turn in progress: {turn}").into(),
                );
            }
            self.wire.respond(id, obj! {});
            let turn = uuid::Uuid::now_v7().to_string();
            let started = Instant::now();
            let started_at = now_s();
            let item =
                obj! {"type" => "contextCompaction", "id" => uuid::Uuid::now_v7().to_string()};
            let wire = &self.wire;
            wire.notify(
                "thread/status/changed",
                obj! {"threadId" => thread, "status" => status_json("active")},
            );
            wire.notify(
                "turn/started",
                obj! {
                    "threadId" => thread,
                    "turn" => turn_json(&turn, "inProgress", None, J::null(), Some(started_at), None, None),
                },
            );
            wire.notify(
                "item/started",
                obj! {"item" => item.clone(), "threadId" => thread, "turnId" => &turn, "startedAtMs" => now_ms()},
            );
            wire.notify(
                "item/completed",
                obj! {
                    "item" => item.clone(),
                    "threadId" => thread,
                    "turnId" => &turn,
                    "contentTokenCount" => J::null(),
                    "completedAtMs" => now_ms(),
                },
            );
            wire.notify(
                "thread/status/changed",
                obj! {"threadId" => thread, "status" => status_json("idle")},
            );
            let duration = started.elapsed().as_millis() as u64;
            wire.notify(
                "turn/completed",
                obj! {
                    "threadId" => thread,
                    "turn" => turn_json(&turn, "completed", Some(arr![item]), J::null(), Some(started_at), Some(now_s()), Some(duration)),
                },
            );
            Ok(())
        }

        fn request(self: &Arc<Self>, id: &J, method: &str, params: &Value) -> Result<(), Refusal> {
            match method {
                "thread/start" => self.thread_start(id, params),
                "thread/resume" => self.thread_resume(id, params),
                "turn/start" => self.turn_start(id, params),
                "turn/steer" => self.turn_steer(id, params),
                "turn/interrupt" => self.turn_interrupt(id, params),
                "thread/compact/start" => self.compact(id, params),
                _ => Err(format!("Invalid request: unknown variant `{method}`").into()),
            }
        }

        /// A message from the client that answers one of our server requests.
        fn response(&self, message: Value) {
            let Some(id) = message.get("id").and_then(Value::as_i64) else {
                log(
                    "WARN",
                    &format!("a response with an unknown id (ignored): {message}"),
                );
                return;
            };
            match locked(&self.pending).remove(&id) {
                Some(turn) => {
                    let _ = turn.send(Control::Response(id, message));
                }
                None => log(
                    "WARN",
                    &format!("a response to no pending request (ignored): {message}"),
                ),
            }
        }
    }

    /// A turn running on its own thread.
    struct Turn {
        server: Arc<Server>,
        thread: String,
        id: String,
        /// Which turn of its thread this is (1-based).
        number: u64,
        text: String,
        content: J,
        script: Script,
        control: Receiver<Control>,
        /// The sending side of `control`, for server requests to answer through.
        sender: Sender<Control>,
        started: Instant,
        started_at: u64,
        steered: Option<String>,
    }

    /// How a turn ends.
    enum End {
        Completed(String),
        Failed(J),
        Interrupted,
    }

    /// The turn was interrupted.
    struct Stop;

    impl Turn {
        fn wire(&self) -> &Wire {
            &self.server.wire
        }

        fn item_id(&self, prefix: &str) -> String {
            let number = self.server.next_item.fetch_add(1, Ordering::Relaxed) + 1;
            format!("{prefix}_fake_{number}")
        }

        fn item_started(&self, item: J) {
            self.wire().notify(
                "item/started",
                obj! {"item" => item, "threadId" => &self.thread, "turnId" => &self.id, "startedAtMs" => now_ms()},
            );
        }

        fn item_completed(&self, item: J) {
            self.wire().notify(
                "item/completed",
                obj! {
                    "item" => item,
                    "threadId" => &self.thread,
                    "turnId" => &self.id,
                    "contentTokenCount" => J::null(),
                    "completedAtMs" => now_ms(),
                },
            );
        }

        fn status(&self, status: &str) {
            self.wire().notify(
                "thread/status/changed",
                obj! {"threadId" => &self.thread, "status" => status_json(status)},
            );
        }

        fn error(&self, error: J, will_retry: bool) {
            self.wire().notify(
                "error",
                obj! {
                    "error" => error,
                    "willRetry" => will_retry,
                    "threadId" => &self.thread,
                    "turnId" => &self.id,
                },
            );
        }

        /// Handles one control message; an interrupt stops the turn unless ignored.
        fn control(&mut self, control: Control) -> Result<Option<(i64, Value)>, Stop> {
            match control {
                Control::Interrupt if self.script.ignore_interrupt => {
                    log(
                        "INFO",
                        &format!("turn {}: interrupt ignored (ignore-interrupt)", self.id),
                    );
                    Ok(None)
                }
                Control::Interrupt => Err(Stop),
                Control::Steer(text) => {
                    self.steered = Some(text);
                    Ok(None)
                }
                Control::Response(id, message) => Ok(Some((id, message))),
            }
        }

        /// Sleeps `ms`, interruptibly.
        fn pause(&mut self, ms: u64) -> Result<(), Stop> {
            let deadline = Instant::now() + Duration::from_millis(ms);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(());
                }
                match self.control.recv_timeout(left) {
                    Ok(control) => {
                        self.control(control)?;
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                        return Ok(())
                    }
                }
            }
        }

        /// Waits until a steer (or an interrupt) comes.
        fn hang(&mut self) -> Result<(), Stop> {
            while self.steered.is_none() {
                match self.control.recv() {
                    Ok(control) => {
                        self.control(control)?;
                    }
                    Err(_) => sleep_forever(),
                }
            }
            Ok(())
        }

        /// Sends a server request and waits for the client's answer: `Ok(result)` or
        /// `Err(error)`.
        fn ask(&mut self, method: &str, params: J) -> Result<Result<Value, Value>, Stop> {
            let id = self.server.next_request.fetch_add(1, Ordering::Relaxed);
            locked(&self.server.pending).insert(id, self.sender.clone());
            self.wire()
                .send(&obj! {"id" => id, "method" => method, "params" => params});
            loop {
                let control = match self.control.recv() {
                    Ok(control) => control,
                    Err(_) => sleep_forever(),
                };
                match self.control(control) {
                    Ok(Some((answered, message))) if answered == id => {
                        return Ok(match message.get("error") {
                            Some(error) => Err(error.clone()),
                            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                        })
                    }
                    Ok(_) => {}
                    Err(Stop) => {
                        locked(&self.server.pending).remove(&id);
                        return Err(Stop);
                    }
                }
            }
        }

        fn command_item(
            &self,
            id: &str,
            command: &str,
            status: &str,
            output: Option<(&str, i32, u64)>,
        ) -> J {
            let cwd = self.cwd();
            obj! {
                "type" => "commandExecution",
                "id" => id,
                "command" => command,
                "cwd" => cwd,
                "processId" => J::null(),
                "source" => "agent",
                "status" => status,
                "commandActions" => arr![obj! {"type" => "unknown", "command" => command}],
                "aggregatedOutput" => output.map(|(text, _, _)| text),
                "exitCode" => output.map(|(_, code, _)| code),
                "durationMs" => output.map(|(_, _, ms)| ms),
            }
        }

        /// The variables the thread's config asks commands to get
        /// (`config: {"shell_environment_policy.set": {NAME: VALUE}}` at `thread/start`).
        fn shell_env(&self) -> Vec<(String, String)> {
            locked(&self.server.threads)
                .get(&self.thread)
                .and_then(|loaded| {
                    let set = loaded
                        .record
                        .get("startParams")?
                        .get("config")?
                        .get("shell_environment_policy.set")?;
                    Some(
                        set.as_object()?
                            .iter()
                            .filter_map(|(name, value)| {
                                Some((name.clone(), value.as_str()?.to_string()))
                            })
                            .collect(),
                    )
                })
                .unwrap_or_default()
        }

        fn cwd(&self) -> String {
            locked(&self.server.threads)
                .get(&self.thread)
                .map(|loaded| record_str(&loaded.record, "cwd").to_string())
                .unwrap_or_default()
        }

        /// Runs `command` (when allowed) and completes its item.
        fn finish_command(&self, id: &str, command: &str) {
            let started = Instant::now();
            let cwd = self.cwd();
            let env = self.shell_env();
            let (output, code) = run_command(command, Some(std::path::Path::new(&cwd)), &env);
            let status = if code == 0 { "completed" } else { "failed" };
            let elapsed = started.elapsed().as_millis() as u64;
            self.item_completed(self.command_item(
                id,
                command,
                status,
                Some((&output, code, elapsed)),
            ));
        }

        /// `approval=`: asks the client, returns the answer text.
        fn approval(&mut self, kind: Approval) -> Result<String, Stop> {
            let (method, item_id) = match kind {
                Approval::Command => (
                    "item/commandExecution/requestApproval",
                    self.item_id("call"),
                ),
                Approval::File => ("item/fileChange/requestApproval", self.item_id("patch")),
            };
            let command = self
                .script
                .run
                .clone()
                .unwrap_or_else(|| "touch fake-engine.txt".to_string());
            let changes = arr![obj! {
                "path" => "fake-engine.txt",
                "kind" => obj! {"type" => "add"},
                "diff" => "fake engine\n",
            }];
            let file_item = |status: &str| {
                obj! {"type" => "fileChange", "id" => &item_id, "changes" => changes.clone(), "status" => status}
            };
            let params = match kind {
                Approval::Command => {
                    self.item_started(self.command_item(&item_id, &command, "inProgress", None));
                    obj! {
                        "threadId" => &self.thread,
                        "turnId" => &self.id,
                        "itemId" => &item_id,
                        "command" => &command,
                        "cwd" => self.cwd(),
                        "commandActions" => arr![obj! {"type" => "unknown", "command" => &command}],
                    }
                }
                Approval::File => {
                    self.item_started(file_item("inProgress"));
                    obj! {
                        "threadId" => &self.thread,
                        "turnId" => &self.id,
                        "itemId" => &item_id,
                        "reason" => J::null(),
                        "grantRoot" => J::null(),
                    }
                }
            };
            let answer = self.ask(method, params)?;
            let (decision, text) = match &answer {
                Ok(result) => {
                    let decision = match result.get("decision") {
                        Some(Value::String(decision)) => decision.clone(),
                        Some(other) => other.to_string(),
                        None => "null".to_string(),
                    };
                    (decision.clone(), format!("approval: {decision}"))
                }
                Err(error) => (
                    String::new(),
                    format!("approval: error {}", error_message(error)),
                ),
            };
            let accepted = decision.starts_with("accept");
            match kind {
                Approval::Command if accepted && self.script.run.is_some() => {
                    self.finish_command(&item_id, &command)
                }
                Approval::Command => {
                    let status = if accepted { "completed" } else { "declined" };
                    let output = accepted.then_some(("", 0, 0));
                    self.item_completed(self.command_item(&item_id, &command, status, output));
                }
                Approval::File => {
                    self.item_completed(file_item(if accepted { "completed" } else { "declined" }))
                }
            }
            Ok(text)
        }

        /// The turn's failure, if the script asks for one (`rate-limit` counts attempts).
        fn failure(&self) -> Option<J> {
            if self.script.rate_limit > 0 {
                let attempt = self.count_attempt();
                if attempt <= self.script.rate_limit {
                    let info =
                        obj! {"responseTooManyFailedAttempts" => obj! {"httpStatusCode" => 429u64}};
                    return Some(error_json(RATE_LIMIT, info, None));
                }
            }
            if self.script.usage_limit {
                return Some(error_json(USAGE_LIMIT, J::from("usageLimitExceeded"), None));
            }
            if self.script.overloaded {
                return Some(error_json(OVERLOADED, J::from("serverOverloaded"), None));
            }
            self.script
                .fail
                .as_ref()
                .map(|message| error_json(message, J::from("other"), None))
        }

        /// Counts one more attempt of this turn's text in the state dir; returns the count.
        fn count_attempt(&self) -> u64 {
            let dir = self.server.state.join("attempts");
            let path = dir.join(format!("{:016x}", fnv1a(&self.text)));
            let count = std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            if let Err(error) = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&path, format!("{count}\n")))
            {
                log(
                    "WARN",
                    &format!("cannot count attempts in {}: {error}", path.display()),
                );
            }
            count
        }

        /// Everything between the user message and the answer.
        fn body(&mut self) -> Result<End, Stop> {
            self.pause(self.script.delay_ms)?;
            let retries = self.script.will_retry;
            for retry in 1..=retries {
                let info = obj! {"responseStreamDisconnected" => obj! {"httpStatusCode" => 429u64}};
                let message = format!("Reconnecting... {retry}/{retries}");
                self.error(error_json(&message, info, Some(RATE_LIMIT)), true);
                self.pause(self.script.interval_ms)?;
            }
            if let Some(error) = self.failure() {
                return Ok(End::Failed(error));
            }
            let mut answer = None;
            if let Some(kind) = self.script.approval {
                answer = Some(self.approval(kind)?);
            } else if let Some(command) = self.script.run.clone() {
                let id = self.item_id("call");
                self.item_started(self.command_item(&id, &command, "inProgress", None));
                self.finish_command(&id, &command);
            }
            if self.script.unknown_request {
                let params = obj! {"threadId" => &self.thread, "turnId" => &self.id};
                let text = match self.ask("fake/unknownRequest", params)? {
                    Ok(result) => result.to_string(),
                    Err(error) => error_message(&error),
                };
                answer = Some(format!("unknown request: {text}"));
            }
            for step in 1..=self.script.deltas {
                let id = self.item_id("rs");
                self.item_started(obj! {"type" => "reasoning", "id" => &id, "summary" => arr![], "content" => arr![]});
                self.item_completed(obj! {
                    "type" => "reasoning",
                    "id" => &id,
                    "summary" => arr![format!("step {step}")],
                    "content" => arr![],
                });
                self.pause(self.script.interval_ms)?;
            }
            if self.script.garbage {
                self.wire().raw(b"this is not JSON {\"method\":\n");
                self.wire().raw(b"\xff\xfe invalid \xc3\x28 utf-8 \x80\n");
            }
            if self.script.hang || self.script.ignore_interrupt {
                self.hang()?;
            }
            Ok(End::Completed(match (&self.steered, answer) {
                (Some(steer), _) => format!("steered: {steer}"),
                (None, Some(answer)) => answer,
                (None, None) => answer_text(&self.script, &self.text),
            }))
        }

        fn run(mut self, warnings: Vec<String>) {
            for warning in warnings {
                log("WARN", &format!("{warning} (turn {})", self.id));
            }
            if let Some(text) = &self.script.stderr {
                eprintln!("{text}");
            }
            self.status("active");
            let turn = turn_json(
                &self.id,
                "inProgress",
                None,
                J::null(),
                Some(self.started_at),
                None,
                None,
            );
            self.wire().notify(
                "turn/started",
                obj! {"threadId" => &self.thread, "turn" => turn},
            );
            let user_id = uuid::Uuid::now_v7().to_string();
            let user_started = now_ms();
            let user = |completed: Option<u64>| {
                obj! {
                    "type" => "userMessage",
                    "id" => &user_id,
                    "clientId" => J::null(),
                    "content" => self.content.clone(),
                    "startedAtMs" => user_started,
                    "completedAtMs" => completed,
                }
            };
            self.item_started(user(None));
            self.item_completed(user(Some(now_ms())));
            if let Some(code) = self.script.exit_mid_turn {
                let item = self.agent_item("msg_fake_cut", "", now_ms(), None);
                let line = format!(r#"{{"method":"item/started","params":{{"item":{}"#, item.0);
                let mut stdout = self.wire().lock();
                let _ = stdout.write_all(&line.as_bytes()[..line.len() / 2]);
                let _ = stdout.flush();
                log("INFO", &format!("exit-mid-turn: exiting with {code}"));
                std::process::exit(code);
            }
            if self.script.crash {
                let _stdout = self.wire().lock();
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::this(),
                    nix::sys::signal::Signal::SIGKILL,
                );
                sleep_forever();
            }
            let end = self.body().unwrap_or(End::Interrupted);
            self.finish(end);
        }

        fn agent_item(&self, id: &str, text: &str, started: u64, completed: Option<u64>) -> J {
            obj! {
                "type" => "agentMessage",
                "moderation" => J::null(),
                "id" => id,
                "text" => text,
                "phase" => J::null(),
                "memoryCitation" => J::null(),
                "delivery" => J::null(),
                "questions" => J::null(),
                "startedAtMs" => started,
                "completedAtMs" => completed,
            }
        }

        /// Marks the thread idle again (before anything says the turn ended).
        fn release(&self) {
            if let Some(loaded) = locked(&self.server.threads).get_mut(&self.thread) {
                if loaded
                    .active
                    .as_ref()
                    .is_some_and(|active| active.turn == self.id)
                {
                    loaded.active = None;
                }
            }
        }

        fn completed(&self, status: &str, items: Option<J>, error: J) {
            let duration = self.started.elapsed().as_millis() as u64;
            let turn = turn_json(
                &self.id,
                status,
                items,
                error,
                Some(self.started_at),
                Some(now_s()),
                Some(duration),
            );
            let params = obj! {"threadId" => &self.thread, "turn" => turn};
            if !self.script.final_no_newline {
                self.wire().notify("turn/completed", params);
                return;
            }
            // The last line, without its newline, then the process ends at once.
            self.server.unlock_all();
            let line =
                obj! {"method" => "turn/completed", "params" => params, "emittedAtMs" => now_ms()};
            let mut stdout = self.wire().lock();
            let _ = stdout.write_all(line.0.as_bytes());
            let _ = stdout.flush();
            log("INFO", "final-no-newline: exiting with 0");
            std::process::exit(0);
        }

        fn finish(self, end: End) {
            match end {
                End::Completed(answer) => {
                    let id = self.item_id("msg");
                    let started_ms = now_ms();
                    self.item_started(self.agent_item(&id, "", started_ms, None));
                    for delta in words(&answer) {
                        self.wire().notify(
                            "item/agentMessage/delta",
                            obj! {"threadId" => &self.thread, "turnId" => &self.id, "itemId" => &id, "delta" => delta},
                        );
                    }
                    let item = self.agent_item(&id, &answer, started_ms, Some(now_ms()));
                    self.item_completed(item.clone());
                    self.wire()
                        .notify("thread/tokenUsage/updated", self.token_usage());
                    self.wire()
                        .notify("account/rateLimits/updated", rate_limits());
                    self.release();
                    self.status("idle");
                    self.completed("completed", Some(arr![item]), J::null());
                }
                End::Failed(error) => {
                    self.release();
                    self.status("systemError");
                    self.error(error.clone(), false);
                    self.completed("failed", None, error);
                }
                End::Interrupted => {
                    self.release();
                    self.status("idle");
                    self.completed("interrupted", None, J::null());
                }
            }
        }

        fn token_usage(&self) -> J {
            let breakdown = |turns: u64| {
                obj! {
                    "totalTokens" => 110 * turns,
                    "inputTokens" => 100 * turns,
                    "cachedInputTokens" => 0u64,
                    "cacheWriteInputTokens" => 0u64,
                    "outputTokens" => 10 * turns,
                    "reasoningOutputTokens" => 0u64,
                }
            };
            obj! {
                "threadId" => &self.thread,
                "turnId" => &self.id,
                "tokenUsage" => obj! {
                    "total" => breakdown(self.number),
                    "last" => breakdown(1),
                    "modelContextWindow" => CONTEXT_WINDOW,
                },
            }
        }
    }

    fn rate_limits() -> J {
        obj! {"rateLimits" => obj! {
            "limitId" => "codex",
            "limitName" => J::null(),
            "normalModelSlug" => J::null(),
            "primary" => J::null(),
            "secondary" => J::null(),
            "credits" => J::null(),
            "individualLimit" => J::null(),
            "spendControlReached" => J::null(),
            "planType" => J::null(),
            "rateLimitReachedType" => J::null(),
        }}
    }

    /// The message of a JSON-RPC error object (or the object itself).
    fn error_message(error: &Value) -> String {
        match error.get("message").and_then(Value::as_str) {
            Some(message) => message.to_string(),
            None => error.to_string(),
        }
    }

    pub(super) fn run() -> ! {
        let env_script = std::env::var("CORRAL_FAKE_SCRIPT").unwrap_or_default();
        let (script, warnings) = Script::load(&env_script, "");
        for warning in warnings {
            log("WARN", &format!("CORRAL_FAKE_SCRIPT: {warning}"));
        }
        if script.ignore_sigterm {
            // SAFETY: setting a signal's disposition to "ignore" installs no handler code.
            unsafe {
                let _ = nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGTERM,
                    nix::sys::signal::SigHandler::SigIgn,
                );
            }
        }
        let no_initialize = match std::env::var("CORRAL_FAKE_APP_SERVER") {
            Ok(mode) if mode.trim() == "no-initialize" => true,
            Ok(mode) if !mode.trim().is_empty() => {
                log(
                    "WARN",
                    &format!("CORRAL_FAKE_APP_SERVER: unknown mode '{mode}' (ignored)"),
                );
                false
            }
            _ => false,
        };
        let state = state_dir();
        let server = Arc::new(Server {
            wire: Wire {
                stdout: Mutex::new(std::io::stdout()),
            },
            state,
            env_script,
            originator: Mutex::new("corral-fake-engine".to_string()),
            threads: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicI64::new(0),
            next_item: AtomicU64::new(0),
        });
        log(
            "INFO",
            &format!(
                "corral-fake-engine {} app-server listening on stdio:// (state dir {})",
                env!("CARGO_PKG_VERSION"),
                server.state.display()
            ),
        );
        let mut initialized = false;
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    log("ERROR", &format!("reading stdin: {error}"));
                    break;
                }
            }
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            let message = match serde_json::from_str::<Value>(text.trim()) {
                Ok(message @ Value::Object(_)) => message,
                Ok(_) | Err(_) => {
                    log(
                        "WARN",
                        &format!("not a JSON-RPC message (ignored): {}", text.trim_end()),
                    );
                    continue;
                }
            };
            if no_initialize && message.get("method").and_then(Value::as_str) == Some("initialize")
            {
                log("INFO", "no-initialize: initialize left unanswered");
                continue;
            }
            handle(&server, message, &mut initialized);
        }
        log("INFO", "stdin closed: exiting");
        server.unlock_all();
        // Holding the wire: no turn writes half a line while the process ends.
        let _stdout = server.wire.lock();
        std::process::exit(0)
    }

    fn handle(server: &Arc<Server>, message: Value, initialized: &mut bool) {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").filter(|id| !id.is_null());
        let (Some(method), Some(id)) = (method, id) else {
            match (method, id) {
                (Some("initialized"), None) => {}
                (Some(method), None) => log("INFO", &format!("notification {method} (ignored)")),
                (None, Some(_)) => server.response(message),
                _ => log(
                    "WARN",
                    &format!("not a request, notification or response (ignored): {message}"),
                ),
            }
            return;
        };
        let id = J::from(id);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let outcome = if !METHODS.contains(&method) {
            Err(format!("Invalid request: unknown variant `{method}`").into())
        } else if method == "initialize" {
            if *initialized {
                Err("Already initialized".into())
            } else {
                *initialized = true;
                initialize(server, &id, &params);
                Ok(())
            }
        } else if !*initialized {
            Err("Not initialized".into())
        } else {
            server.request(&id, method, &params)
        };
        if let Err(Refusal(code, text)) = outcome {
            log("INFO", &format!("{method} refused: {text}"));
            server.wire.error(&id, code, &text);
        }
    }

    fn initialize(server: &Server, id: &J, params: &Value) {
        if let Some(name) = params
            .get("clientInfo")
            .and_then(|info| info.get("name"))
            .and_then(Value::as_str)
        {
            *locked(&server.originator) = name.to_string();
        }
        let home = server.state.to_string_lossy().into_owned();
        server.wire.respond(
            id,
            obj! {
                "userAgent" => format!("corral-fake-engine/{}", env!("CARGO_PKG_VERSION")),
                "codexHome" => home,
                "platformFamily" => "unix",
                "platformOs" => "linux",
            },
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    if matches!(args.as_slice(), [flag] if flag == "--help" || flag == "-h") {
        println!("{USAGE}");
        return;
    }
    let invocation = match parse_args(&args) {
        Ok(invocation) => invocation,
        Err(error) => {
            eprintln!("corral-fake-engine: {error}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Form::AppServer = invocation.form {
        app_server::run();
    }
    let env_script = std::env::var("CORRAL_FAKE_SCRIPT").unwrap_or_default();
    let (script, warnings) = Script::load(&env_script, &invocation.prompt);
    if script.ignore_sigterm {
        // SAFETY: setting a signal's disposition to "ignore" installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGTERM,
                nix::sys::signal::SigHandler::SigIgn,
            );
        }
    }
    for warning in warnings {
        eprintln!("corral-fake-engine: warning: {warning}");
    }
    let attempt = match std::env::var("CORRAL_RUN_ATTEMPT") {
        Err(_) => 1,
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!(
                "corral-fake-engine: warning: CORRAL_RUN_ATTEMPT={text} is not a number (using 1)"
            );
            1
        }),
    };
    if let Some(text) = &script.stderr {
        eprintln!("{text}");
    }
    // Held until the process exits (`codex` and `claude` end it with `exit`).
    let _live = live_check::enter();
    match &invocation.form {
        Form::Codex { thread } => codex(&script, &invocation.prompt, thread.as_deref(), attempt),
        Form::Claude {
            resume,
            model,
            permission_mode,
            converses,
        } => claude(
            &script,
            &invocation.prompt,
            resume.as_deref(),
            model.as_deref(),
            permission_mode,
            *converses,
            attempt,
        ),
        Form::AppServer => unreachable!("app-server mode returned above"),
    }
}
