//! `corral-fake-engine`: a scripted stand-in for the coding-agent CLIs that corral drives.
//!
//! Tests and `corral demo` run on it instead of a real engine. It speaks the exact output
//! formats of `codex exec --json` and of `claude -p --output-format stream-json` (as measured on
//! the real CLIs, see `../shared/reference/`), answers at once, and can be told to stall,
//! rate-limit, conflict on a thread, lose its rollout, fail, crash or hang.
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
//!                    [resume [--image F]… THREAD | [--image F]…] [--] PROMPT
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
//! corral-fake-engine -p --verbose --output-format stream-json [--model M] [--resume ID]
//!                    [--dangerously-skip-permissions] [--] PROMPT
//! ```
//!
//! The session id is ID when resuming, else a new UUIDv4; the model (default `fake-model`) is
//! shown in the `init` and `assistant` lines. `--print` and `-r` are accepted for `-p` and
//! `--resume`; `-p`, `--verbose` and `--output-format stream-json` are required.
//!
//! Anything else prints a usage on stderr and exits 2 (`--help` prints it on stdout, exit 0).
//! stdin is never read (corral starts engines with stdin closed). Every stdout line is flushed
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
//! | `hang` | Print the stream up to the answer (with no other directive: `thread.started` and `turn.started`, or claude's `init`), then sleep until killed. |
//! | `ignore-sigterm` | Ignore SIGTERM from the start (SIGKILL still ends it). |
//! | `stderr=TEXT` | Print TEXT as a line on stderr at the start. |
//! | `title=TEXT` | When the prompt contains `corral-title:`, begin the answer with `<!-- corral-title: TEXT -->` and a newline. With the marker but no `title` directive, TEXT is the first 4 words of the prompt's first line. Without the marker there is no title line. |
//! | `echo-env` | The answer is a JSON object of the variables `CORRAL_HOME`, `CORRAL_SESSION_ID`, `CORRAL_PARENT_EXEC` and `CORRAL_RUN_ATTEMPT` (null when unset). |
//! | `run=CMD` | Before the progress items, run `sh -c CMD` (stdin closed, stderr merged into stdout, environment and directory inherited) and report it. codex: `item.started` then `item.completed` of type `command_execution` with `command` (CMD), `aggregated_output`, `exit_code` and `status` (`completed` for exit 0, `failed` otherwise, as codex does). claude: an `assistant` line with a `tool_use` of `Bash` and a `user` line with its `tool_result`. |
//!
//! `crash`, `partial`, `garbage`, `hang`, `missing-rollout`, `ignore-sigterm` and `echo-env`
//! take no value. An unknown directive, a flag given a value or a value that does not parse
//! prints a warning line on stderr and is ignored (so does a `CORRAL_RUN_ATTEMPT` that is not a
//! number, which then counts as attempt 1). `writer-conflict` and `missing-rollout` do nothing
//! in the claude form. With `ignore-sigterm`, a `run=` command inherits the ignored SIGTERM.
//!
//! # Order of a turn
//!
//! 1. `ignore-sigterm`, warnings and `stderr=` (stderr only);
//! 2. codex form when resuming: `writer-conflict`, then `missing-rollout` (and exit);
//! 3. `thread.started` + `turn.started` (claude: `init`);
//! 4. `delay`;
//! 5. `rate-limit`, then `fail` (and exit);
//! 6. `run`, the `deltas` progress items, `garbage`;
//! 7. `hang` (sleeps forever), `crash` (half the answer line, then SIGKILL);
//! 8. the answer (`item.completed` agent_message / `assistant`), then `turn.completed` /
//!    `result` (`partial`), and exit 0 or `exit=CODE`.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: corral-fake-engine [--model M] [--config K=V]... [--sandbox S] [--ask-for-approval A]
                          [--dangerously-bypass-approvals-and-sandbox]
                          exec --json --skip-git-repo-check
                          [resume [--image F]... THREAD | [--image F]...] [--] PROMPT
       corral-fake-engine -p --verbose --output-format stream-json [--model M] [--resume ID]
                          [--dangerously-skip-permissions] [--] PROMPT
Scripted by CORRAL_FAKE_SCRIPT (directives separated by ';' or newlines) and by prompt lines
'@fake DIRECTIVE'; the attempt number is CORRAL_RUN_ATTEMPT. Directives: answer=TEXT delay=MS
deltas=N interval=MS exit=CODE rate-limit=N writer-conflict=N missing-rollout fail=MESSAGE
crash partial garbage hang ignore-sigterm stderr=TEXT title=TEXT echo-env run=CMD";

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
        let items: Vec<&str> = items.iter().map(|item| item.0.as_str()).collect();
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
        skip_permissions: bool,
    },
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
        if !take_codex_global(args, &mut i)? {
            break;
        }
    }
    parse_claude(args)
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
    match (resume, rest) {
        (true, [(thread, _), (prompt, _)]) => Ok(Invocation {
            form: Form::Codex {
                thread: Some(thread.clone()),
            },
            prompt: prompt.clone(),
        }),
        (false, [(prompt, _)]) => Ok(Invocation {
            form: Form::Codex { thread: None },
            prompt: prompt.clone(),
        }),
        (true, _) => Err("exec resume needs THREAD and PROMPT".into()),
        (false, _) => Err("exec needs exactly one PROMPT".into()),
    }
}

fn parse_claude(args: &[String]) -> Result<Invocation, String> {
    let (mut print, mut verbose, mut stream_json, mut skip_permissions) =
        (false, false, false, false);
    let (mut model, mut resume) = (None, None);
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
    match positionals.as_slice() {
        [prompt] => Ok(Invocation {
            form: Form::Claude {
                resume,
                model,
                skip_permissions,
            },
            prompt: prompt.clone(),
        }),
        _ => Err("-p needs exactly one PROMPT".into()),
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
    hang: bool,
    ignore_sigterm: bool,
    stderr: Option<String>,
    title: Option<String>,
    echo_env: bool,
    run: Option<String>,
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
            "hang" => flag(&mut self.hang)?,
            "ignore-sigterm" => flag(&mut self.ignore_sigterm)?,
            "stderr" => self.stderr = Some(text(name, value)?),
            "title" => self.title = Some(text(name, value)?),
            "echo-env" => flag(&mut self.echo_env)?,
            "run" => self.run = Some(text(name, value)?),
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
        // SAFETY: plain libc calls on this very process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        sleep_forever()
    }

    fn garbage(&mut self) {
        self.bytes(b"this is not JSON {\"type\":\n");
        self.bytes(b"\xff\xfe invalid \xc3\x28 utf-8 \x80\n");
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

/// Runs `sh -c CMD` with stderr merged into stdout; returns its output and exit code.
fn run_command(command: &str) -> (String, i32) {
    let child = Command::new("sh")
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
        let (output, code) = run_command(command);
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

    fn init(&mut self, skip_permissions: bool) {
        let cwd = std::env::current_dir()
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mode = if skip_permissions {
            "bypassPermissions"
        } else {
            "default"
        };
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
        let (output, code) = run_command(command);
        let result = obj! {
            "type" => "user",
            "message" => obj! {
                "role" => "user",
                "content" => arr![obj! {
                    "tool_use_id" => &id,
                    "type" => "tool_result",
                    "content" => output,
                    "is_error" => code != 0,
                }],
            },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
        };
        self.out.line(&result);
    }

    fn result(&self, answer: &str) -> J {
        let elapsed = self.elapsed_ms();
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
            "permission_denials" => arr![],
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
    skip_permissions: bool,
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
    claude.init(skip_permissions);
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
    let result = claude.result(&answer);
    claude.out.last_line(&result, script.partial);
    exit(script, 0)
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
    let env_script = std::env::var("CORRAL_FAKE_SCRIPT").unwrap_or_default();
    let (script, warnings) = Script::load(&env_script, &invocation.prompt);
    if script.ignore_sigterm {
        // SAFETY: setting a signal's disposition to "ignore" installs no handler code.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
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
    match &invocation.form {
        Form::Codex { thread } => codex(&script, &invocation.prompt, thread.as_deref(), attempt),
        Form::Claude {
            resume,
            model,
            skip_permissions,
        } => claude(
            &script,
            &invocation.prompt,
            resume.as_deref(),
            model.as_deref(),
            *skip_permissions,
            attempt,
        ),
    }
}
