//! `corral-fake-engine`: a scripted stand-in for the coding-agent CLIs that corral drives.
//!
//! Tests and `corral demo` run on it instead of a real engine. It speaks the exact output
//! formats of `codex exec --json`, of `claude -p --output-format stream-json` and the JSON-RPC
//! protocol of `codex app-server` (as measured on the real CLIs; the tests of `tests/it/fake_engine.rs` pin them),
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

mod app_server;
mod claude;
mod codex;
mod live_check;

pub(crate) fn main() {
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
        Form::Codex { thread } => {
            codex::codex(&script, &invocation.prompt, thread.as_deref(), attempt)
        }
        Form::Claude {
            resume,
            model,
            permission_mode,
            converses,
        } => claude::claude(
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
