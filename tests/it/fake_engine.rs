//! The fake engine (`corral-fake-engine`) speaks codex's `exec --json`, codex's `app-server`
//! JSON-RPC and claude's `stream-json` exactly, and does what its directives say.

use crate::common;

use std::borrow::BorrowMut;
use std::io::{BufRead, BufReader, Read as _, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::stderr;

const CODEX_TURN_COMPLETED: &str = r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0}}"#;
const CODEX_429: &str = "exceeded retry limit, last status: 429 Too Many Requests";
const CLAUDE_429: &str = "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit";
/// How long any run may take before the test gives up on it.
const LIMIT: Duration = Duration::from_secs(20);

/// The fake engine with ARGS, stdin closed, and no `CORRAL_*` variable inherited.
fn fake(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral-fake-engine"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CORRAL_") {
            command.env_remove(key);
        }
    }
    command.args(args).stdin(Stdio::null());
    command
}

/// The codex form corral builds: a new thread, or `resume THREAD`.
fn codex(prompt: &str, thread: Option<&str>) -> Command {
    let mut args = vec!["exec", "--json", "--skip-git-repo-check"];
    if let Some(thread) = thread {
        args.extend(["resume", thread]);
    }
    args.extend(["--", prompt]);
    fake(&args)
}

/// The claude form corral builds.
fn claude(prompt: &str, resume: Option<&str>) -> Command {
    let mut args = vec!["-p", "--verbose", "--output-format", "stream-json"];
    if let Some(resume) = resume {
        args.extend(["--resume", resume]);
    }
    args.push(prompt);
    fake(&args)
}

/// A child that is killed (and reaped) when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs COMMAND to its end (at most [`LIMIT`]) and returns what it printed.
fn run(mut command: impl BorrowMut<Command>) -> Output {
    let child = command
        .borrow_mut()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fake engine starts");
    let mut running = Running(child);
    let mut stdout = running.0.stdout.take().unwrap();
    let mut stderr = running.0.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let status = wait_for(&mut running.0, LIMIT).expect("the fake engine ends in time");
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

/// stdout's lines; asserts that the last one ends with a newline.
fn lines(output: &Output) -> Vec<String> {
    let text = stdout(output);
    assert!(text.ends_with('\n'), "unterminated stdout: {text:?}");
    text.lines().map(str::to_string).collect()
}

fn agent_message(id: &str, text: &str) -> String {
    format!(
        r#"{{"type":"item.completed","item":{{"id":"{id}","type":"agent_message","text":{}}}}}"#,
        json!(text)
    )
}

/// The four lines of a successful codex turn.
fn codex_success(thread: &str, answer: &str) -> Vec<String> {
    vec![
        format!(r#"{{"type":"thread.started","thread_id":"{thread}"}}"#),
        r#"{"type":"turn.started"}"#.to_string(),
        agent_message("item_0", answer),
        CODEX_TURN_COMPLETED.to_string(),
    ]
}

/// The thread id of a codex stream's first line.
fn thread_of(line: &str) -> String {
    let value: Value = serde_json::from_str(line).unwrap();
    assert_eq!(value["type"], "thread.started", "{line}");
    value["thread_id"].as_str().unwrap().to_string()
}

fn send(child: &Child, signal: i32) {
    // SAFETY: kill(2) on a child this test owns and has not reaped.
    let result = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(result, 0, "kill failed");
}

/// Reads one line of a running child's stdout.
fn read_line(reader: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

#[test]
fn codex_new_thread_answers_like_codex_exec_json() {
    let output = run(codex("say hi", None));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let printed = lines(&output);
    let thread = thread_of(&printed[0]);
    let uuid = uuid::Uuid::parse_str(&thread).expect("a UUID");
    assert_eq!(uuid.get_version_num(), 7, "{thread}");
    assert_eq!(printed, codex_success(&thread, "fake answer: say hi"));
    assert_eq!(stderr(&output), "");

    let again = run(codex("say hi", None));
    assert_ne!(
        thread_of(&lines(&again)[0]),
        thread,
        "each new thread has its own id"
    );
}

#[test]
fn codex_accepts_the_options_corral_passes() {
    let output = run(fake(&[
        "--model",
        "gpt-x",
        "--config",
        "model_reasoning_effort=\"high\"",
        "--sandbox",
        "workspace-write",
        "--ask-for-approval",
        "never",
        "--dangerously-bypass-approvals-and-sandbox",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "resume",
        "--image",
        "a.png",
        "--image",
        "b.png",
        "T-1",
        "--",
        "--looks like an option",
    ]));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        lines(&output),
        codex_success("T-1", "fake answer: --looks like an option")
    );

    let output = run(fake(&[
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--image",
        "a.png",
        "--",
        "look",
    ]));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        lines(&output)[2],
        agent_message("item_0", "fake answer: look")
    );
}

#[test]
fn codex_resume_carries_the_thread_id() {
    let first = run(codex("say hi", None));
    let thread = thread_of(&lines(&first)[0]);
    let output = run(codex("next", Some(&thread)));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(lines(&output), codex_success(&thread, "fake answer: next"));
}

#[test]
fn codex_rate_limit_fails_the_first_attempts_only() {
    for attempt in ["1", "2"] {
        let output = run(codex("go\n@fake rate-limit=2", None).env("CORRAL_RUN_ATTEMPT", attempt));
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let lines = lines(&output);
        let thread = thread_of(&lines[0]);
        assert_eq!(
            lines,
            vec![
                format!(r#"{{"type":"thread.started","thread_id":"{thread}"}}"#),
                r#"{"type":"turn.started"}"#.to_string(),
                format!(r#"{{"type":"error","message":"{CODEX_429}"}}"#),
                format!(r#"{{"type":"turn.failed","error":{{"message":"{CODEX_429}"}}}}"#),
            ]
        );
    }
    let output = run(codex("go\n@fake rate-limit=2", Some("T-9")).env("CORRAL_RUN_ATTEMPT", "3"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(lines(&output), codex_success("T-9", "fake answer: go"));
    // Without CORRAL_RUN_ATTEMPT it is attempt 1.
    let output = run(codex("go", None).env("CORRAL_FAKE_SCRIPT", "rate-limit=1"));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
}

#[test]
fn codex_writer_conflict_fails_resumes_on_early_attempts() {
    let output = run(codex("go\n@fake writer-conflict=1", Some("T-2")));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(stdout(&output), "");
    assert_eq!(
        stderr(&output),
        "Error: thread/resume: thread/resume failed: thread T-2 already has an active writer (code -32600)\n"
    );
    let output =
        run(codex("go\n@fake writer-conflict=1", Some("T-2")).env("CORRAL_RUN_ATTEMPT", "2"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(lines(&output), codex_success("T-2", "fake answer: go"));
    // A new thread cannot conflict.
    let output = run(codex("go\n@fake writer-conflict=5", None));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn codex_missing_rollout_fails_resumes_only() {
    let thread = "00000000-0000-4000-8000-000000000000";
    for attempt in ["1", "4"] {
        let output = run(
            codex("go\n@fake missing-rollout", Some(thread)).env("CORRAL_RUN_ATTEMPT", attempt)
        );
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert_eq!(stdout(&output), "");
        assert_eq!(
            stderr(&output),
            format!("Error: thread/resume: thread/resume failed: no rollout found for thread id {thread} (code -32600)\n")
        );
    }
    let output = run(codex("go\n@fake missing-rollout", None));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = lines(&output);
    assert_eq!(
        lines,
        codex_success(&thread_of(&lines[0]), "fake answer: go")
    );
}

#[test]
fn codex_fail_fails_every_attempt_with_the_message() {
    let message = "Quota exceeded. Check your plan and billing details.";
    let output = run(
        codex(&format!("go\n@fake fail={message}"), Some("T-3")).env("CORRAL_RUN_ATTEMPT", "7")
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        lines(&output),
        vec![
            r#"{"type":"thread.started","thread_id":"T-3"}"#.to_string(),
            r#"{"type":"turn.started"}"#.to_string(),
            format!(r#"{{"type":"error","message":"{message}"}}"#),
            format!(r#"{{"type":"turn.failed","error":{{"message":"{message}"}}}}"#),
        ]
    );
}

#[test]
fn codex_crash_leaves_half_a_line_and_dies_by_sigkill() {
    let output = run(codex("boom\n@fake crash", Some("T-4")));
    assert_eq!(output.status.code(), None, "{output:?}");
    assert_eq!(output.status.signal(), Some(libc::SIGKILL));
    let text = stdout(&output);
    assert!(!text.ends_with('\n'), "{text:?}");
    let full = agent_message("item_0", "fake answer: boom");
    let expected = format!(
        "{}\n{}\n{}",
        r#"{"type":"thread.started","thread_id":"T-4"}"#,
        r#"{"type":"turn.started"}"#,
        &full[..full.len() / 2]
    );
    assert_eq!(text, expected);
    let last = text.lines().last().unwrap();
    assert!(serde_json::from_str::<Value>(last).is_err());
}

#[test]
fn codex_partial_leaves_the_last_line_unterminated() {
    let output = run(codex("half\n@fake partial", Some("T-5")));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert_eq!(
        text,
        codex_success("T-5", "fake answer: half").join("\n"),
        "all four lines, the last without its newline"
    );
}

#[test]
fn hang_prints_the_turn_start_and_ends_on_sigterm() {
    let child = codex("wait\n@fake hang", Some("T-6"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let mut reader = BufReader::new(running.0.stdout.take().unwrap());
    // Both lines arrive while the engine runs: they are flushed as they are written.
    assert_eq!(
        read_line(&mut reader),
        "{\"type\":\"thread.started\",\"thread_id\":\"T-6\"}\n"
    );
    assert_eq!(read_line(&mut reader), "{\"type\":\"turn.started\"}\n");
    assert_eq!(wait_for(&mut running.0, Duration::from_millis(200)), None);
    send(&running.0, libc::SIGTERM);
    let status = wait_for(&mut running.0, LIMIT).expect("SIGTERM ends a hanging engine");
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert_eq!(read_line(&mut reader), "", "nothing after turn.started");
}

#[test]
fn ignore_sigterm_survives_sigterm_but_not_sigkill() {
    let child = claude("wait", None)
        .env("CORRAL_FAKE_SCRIPT", "hang;ignore-sigterm")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let mut reader = BufReader::new(running.0.stdout.take().unwrap());
    let init: Value = serde_json::from_str(&read_line(&mut reader)).unwrap();
    assert_eq!(init["subtype"], "init");
    send(&running.0, libc::SIGTERM);
    assert_eq!(
        wait_for(&mut running.0, Duration::from_millis(300)),
        None,
        "SIGTERM is ignored"
    );
    send(&running.0, libc::SIGKILL);
    let status = wait_for(&mut running.0, LIMIT).expect("SIGKILL ends it");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn title_marker_makes_the_answer_start_with_a_title() {
    let prompt =
        "Fix the login bug in auth.rs\n\nBegin your answer with <!-- corral-title: a short title -->";
    let output = run(codex(prompt, Some("T-7")));
    assert_eq!(
        lines(&output)[2],
        agent_message(
            "item_0",
            "<!-- corral-title: Fix the login bug -->\nfake answer: Fix the login bug in auth.rs"
        )
    );
    let output =
        run(codex(prompt, Some("T-7")).env("CORRAL_FAKE_SCRIPT", "title=Login fix;answer=done"));
    assert_eq!(
        lines(&output)[2],
        agent_message("item_0", "<!-- corral-title: Login fix -->\ndone")
    );
    // Without the marker, no title, even with a title directive.
    let output = run(codex("Fix it\n@fake title=Login fix", Some("T-7")));
    assert_eq!(
        lines(&output)[2],
        agent_message("item_0", "fake answer: Fix it")
    );
}

#[test]
fn echo_env_answers_with_the_corral_variables() {
    let output = run(codex("env?\n@fake echo-env", Some("T-8"))
        .env("CORRAL_HOME", "/tmp/some home")
        .env("CORRAL_SESSION_ID", "0190-session")
        .env("CORRAL_RUN_ATTEMPT", "2"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let item: Value = serde_json::from_str(&lines(&output)[2]).unwrap();
    let answer: Value = serde_json::from_str(item["item"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        answer,
        json!({
            "CORRAL_HOME": "/tmp/some home",
            "CORRAL_SESSION_ID": "0190-session",
            "CORRAL_PARENT_EXEC": null,
            "CORRAL_RUN_ATTEMPT": "2",
            "CLAUDE_CODE_MAX_RETRIES": null,
            "CORRAL_TRACE_ID": null,
            "CORRAL_RUN_ID": null,
            "CORRAL_DAEMON_NOTIFY": null,
        })
    );
}

#[test]
fn run_runs_the_command_and_reports_it_as_codex_does() {
    let dir = tempfile::tempdir().unwrap();
    let prompt = "do it\n@fake run=echo made > proof.txt; echo out; echo err >&2";
    let output = run(codex(prompt, Some("T-10")).current_dir(dir.path()));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("proof.txt")).unwrap(),
        "made\n"
    );
    let command = "echo made > proof.txt; echo out; echo err >&2";
    assert_eq!(
        lines(&output),
        vec![
            r#"{"type":"thread.started","thread_id":"T-10"}"#.to_string(),
            r#"{"type":"turn.started"}"#.to_string(),
            format!(
                r#"{{"type":"item.started","item":{{"id":"item_0","type":"command_execution","command":"{command}","aggregated_output":"","exit_code":null,"status":"in_progress"}}}}"#
            ),
            format!(
                r#"{{"type":"item.completed","item":{{"id":"item_0","type":"command_execution","command":"{command}","aggregated_output":"out\nerr\n","exit_code":0,"status":"completed"}}}}"#
            ),
            agent_message("item_1", "fake answer: do it"),
            CODEX_TURN_COMPLETED.to_string(),
        ]
    );
    let output = run(codex("x", Some("T-10")).env("CORRAL_FAKE_SCRIPT", "run=exit 3"));
    assert_eq!(
        lines(&output)[3],
        r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"exit 3","aggregated_output":"","exit_code":3,"status":"failed"}}"#
    );
}

#[test]
fn deltas_and_garbage_come_before_the_answer() {
    let output =
        run(codex("go", Some("T-11")).env("CORRAL_FAKE_SCRIPT", "deltas=2\ninterval=1\ngarbage"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let raw: Vec<&[u8]> = output.stdout.split(|&byte| byte == b'\n').collect();
    assert_eq!(raw.len(), 9, "8 lines and the empty rest: {raw:?}");
    assert_eq!(
        raw[2],
        br#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"step 1"}}"#
    );
    assert_eq!(
        raw[3],
        br#"{"type":"item.completed","item":{"id":"item_1","type":"reasoning","text":"step 2"}}"#
    );
    assert!(serde_json::from_slice::<Value>(raw[4]).is_err());
    assert!(
        std::str::from_utf8(raw[5]).is_err(),
        "a line of invalid UTF-8"
    );
    assert_eq!(
        raw[6],
        agent_message("item_2", "fake answer: go").as_bytes()
    );
    assert_eq!(raw[7], CODEX_TURN_COMPLETED.as_bytes());
    assert_eq!(raw[8], b"");
}

#[test]
fn exit_overrides_the_status_after_the_normal_output() {
    let output = run(codex("go\n@fake exit=7", Some("T-12")));
    assert_eq!(output.status.code(), Some(7), "{output:?}");
    assert_eq!(lines(&output), codex_success("T-12", "fake answer: go"));
}

#[test]
fn prompt_directives_override_the_environment_script() {
    let output = run(
        codex("  @fake answer=from the prompt\nquestion", Some("T-13")).env(
            "CORRAL_FAKE_SCRIPT",
            "answer=from the env; stderr=a note ;bogus=1",
        ),
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        lines(&output)[2],
        agent_message("item_0", "from the prompt")
    );
    let stderr = stderr(&output);
    assert!(stderr.contains("a note\n"), "{stderr}");
    assert!(
        stderr.contains("warning: unknown directive 'bogus'"),
        "{stderr}"
    );

    let output = run(codex("q", Some("T-13")).env("CORRAL_FAKE_SCRIPT", "answer=only env;delay=x"));
    assert_eq!(lines(&output)[2], agent_message("item_0", "only env"));
    assert!(stderr_has(&output, "'x' is not a number"));
}

fn stderr_has(output: &Output, text: &str) -> bool {
    stderr(output).contains(text)
}

#[test]
fn delay_stalls_after_the_turn_starts() {
    let started = Instant::now();
    let output = run(codex("slow\n@fake delay=300", Some("T-14")));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(lines(&output), codex_success("T-14", "fake answer: slow"));
}

/// `CORRAL_FAKE_LIVE_CHECK` (the throughput bench's exact count): engines alive at once take
/// distinct slots, a session's second live engine says so, and a slot is free again once its
/// engine exited.
#[test]
fn the_live_check_logs_engines_alive_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = |session: &str, home: &str, prompt: &str| {
        let mut command = codex(prompt, None);
        command
            .env("CORRAL_FAKE_LIVE_CHECK", dir.path())
            .env("CORRAL_SESSION_ID", session)
            .env("CORRAL_HOME", format!("/homes/{home}"))
            .stdout(Stdio::piped());
        command.spawn().unwrap()
    };
    let log = || std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    let until_logged = |lines: usize| {
        let until = Instant::now() + LIMIT;
        // The engines write the log; nothing tells this process: a bounded poll.
        while log().lines().count() < lines {
            assert!(Instant::now() < until, "logged: {}", log());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Started in turn, each once the one before logged: the slots come in order.
    let mut alive = Vec::new();
    for (session, home) in [("s1", "a"), ("s2", "b"), ("s1", "b")] {
        alive.push(Running(engine(session, home, "@fake hang")));
        until_logged(alive.len());
    }
    assert_eq!(log(), "0 0 a 0 s1\n1 0 b 0 s2\n2 1 b 1 s1\n");
    drop(alive);
    let output = engine("s1", "a", "done").wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(log().lines().last(), Some("0 0 a 0 s1"), "{}", log());
}

#[test]
fn the_default_answer_is_cut_to_80_characters() {
    let long = "é".repeat(100);
    let output = run(codex(
        &format!("\n@fake deltas=0\n{long}\nsecond"),
        Some("T-15"),
    ));
    assert_eq!(
        lines(&output)[2],
        agent_message("item_0", &format!("fake answer: {}", "é".repeat(80)))
    );
}

/// Replaces the fields that change from run to run, after checking their shape.
fn normalize(mut line: Value) -> Value {
    let object = line.as_object_mut().unwrap();
    if let Some(uuid) = object.get_mut("uuid") {
        uuid::Uuid::parse_str(uuid.as_str().unwrap()).unwrap();
        *uuid = json!("<uuid>");
    }
    if let Some(cwd) = object.get_mut("cwd") {
        assert!(cwd.as_str().unwrap().starts_with('/'));
        *cwd = json!("<cwd>");
    }
    for key in ["duration_ms", "duration_api_ms"] {
        if let Some(value) = object.get_mut(key) {
            assert!(value.is_u64());
            *value = json!(0);
        }
    }
    if let Some(request) = object.get_mut("request_id") {
        assert!(request.as_str().unwrap().starts_with("req_fake_"));
        *request = json!("<request>");
    }
    if let Some(id) = object
        .get_mut("message")
        .and_then(|message| message.get_mut("id"))
    {
        *id = json!("<message>");
    }
    line
}

/// stdout's lines as normalized JSON, checking that each begins with its `type`.
fn claude_lines(output: &Output) -> Vec<Value> {
    lines(output)
        .iter()
        .map(|line| {
            assert!(line.starts_with(r#"{"type":""#), "{line}");
            normalize(serde_json::from_str(line).unwrap())
        })
        .collect()
}

fn claude_usage(input: u64, output: u64) -> Value {
    json!({"input_tokens": input, "output_tokens": output,
           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

fn claude_init(session: &str, model: &str, mode: &str) -> Value {
    json!({
        "type": "system", "subtype": "init", "cwd": "<cwd>", "session_id": session,
        "tools": ["Bash", "Edit", "Read", "Write"], "mcp_servers": [], "model": model,
        "permissionMode": mode, "slash_commands": [], "apiKeySource": "none",
        "claude_code_version": "2.1.197", "output_style": "default", "agents": [],
        "skills": [], "plugins": [], "uuid": "<uuid>", "fast_mode_state": "off"
    })
}

fn claude_assistant(session: &str, model: &str, content: Value) -> Value {
    json!({
        "type": "assistant",
        "message": {
            "id": "<message>", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": null, "stop_sequence": null,
            "usage": claude_usage(100, 10), "context_management": null
        },
        "parent_tool_use_id": null, "session_id": session, "uuid": "<uuid>",
        "request_id": "<request>"
    })
}

fn claude_result(session: &str, answer: &str) -> Value {
    json!({
        "type": "result", "subtype": "success", "is_error": false, "api_error_status": null,
        "duration_ms": 0, "duration_api_ms": 0, "num_turns": 1, "result": answer,
        "stop_reason": "end_turn", "session_id": session, "total_cost_usd": 0,
        "usage": claude_usage(100, 10), "modelUsage": {}, "permission_denials": [],
        "terminal_reason": "completed", "fast_mode_state": "off", "uuid": "<uuid>"
    })
}

fn claude_failure(session: &str, message: &str, error: &str, status: Value) -> Vec<Value> {
    vec![
        json!({
            "type": "assistant",
            "message": {
                "id": "<message>", "container": null, "model": "<synthetic>", "role": "assistant",
                "stop_details": null, "stop_reason": "stop_sequence", "stop_sequence": "",
                "type": "message", "usage": claude_usage(0, 0),
                "content": [{"type": "text", "text": message}], "context_management": null
            },
            "parent_tool_use_id": null, "session_id": session, "uuid": "<uuid>",
            "error": error, "request_id": "<request>"
        }),
        json!({
            "type": "result", "subtype": "success", "is_error": true, "api_error_status": status,
            "duration_ms": 0, "duration_api_ms": 0, "num_turns": 1, "result": message,
            "stop_reason": "stop_sequence", "session_id": session, "total_cost_usd": 0,
            "usage": claude_usage(0, 0), "modelUsage": {}, "permission_denials": [],
            "terminal_reason": "completed", "fast_mode_state": "off", "uuid": "<uuid>"
        }),
    ]
}

fn text_block(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

#[test]
fn claude_new_session_answers_in_stream_json() {
    let output = run(claude("say hi", None));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = claude_lines(&output);
    let session = lines[0]["session_id"].as_str().unwrap().to_string();
    let uuid = uuid::Uuid::parse_str(&session).unwrap();
    assert_eq!(uuid.get_version_num(), 4);
    assert_eq!(
        lines,
        vec![
            claude_init(&session, "fake-model", "default"),
            claude_assistant(&session, "fake-model", text_block("fake answer: say hi")),
            claude_result(&session, "fake answer: say hi"),
        ]
    );
    assert_eq!(stderr(&output), "");
}

#[test]
fn claude_resume_keeps_the_session_id() {
    let output = run(fake(&[
        "-p",
        "--verbose",
        "--output-format",
        "stream-json",
        "--model",
        "claude-x",
        "--resume",
        "S-1",
        "--dangerously-skip-permissions",
        "and again",
    ]));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        claude_lines(&output),
        vec![
            claude_init("S-1", "claude-x", "bypassPermissions"),
            claude_assistant("S-1", "claude-x", text_block("fake answer: and again")),
            claude_result("S-1", "fake answer: and again"),
        ]
    );
}

/// As claude: `--permission-mode` is said by the `init` line, an unknown mode is a usage
/// error, and `--effort` is taken.
#[test]
fn claude_permission_mode_and_effort_are_taken_as_claude_takes_them() {
    let argv = |mode: &str| {
        let args = [
            "-p",
            "--verbose",
            "--output-format",
            "stream-json",
            "--effort",
            "low",
            "--permission-mode",
            mode,
            "--resume",
            "S-3",
            "edit it",
        ];
        run(fake(&args))
    };
    let output = argv("acceptEdits");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        claude_lines(&output)[0],
        claude_init("S-3", "fake-model", "acceptEdits")
    );
    let refused = argv("yolo");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        stderr(&refused).contains("invalid mode 'yolo'"),
        "{refused:?}"
    );
}

#[test]
fn claude_rate_limit_fails_the_first_attempt_only() {
    let output = run(claude("go\n@fake rate-limit=1", Some("S-2")).env("CORRAL_RUN_ATTEMPT", "1"));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let mut expected = vec![claude_init("S-2", "fake-model", "default")];
    expected.extend(claude_failure("S-2", CLAUDE_429, "rate_limit", json!(429)));
    assert_eq!(claude_lines(&output), expected);
    assert_eq!(
        stderr(&output),
        "",
        "claude says nothing on stderr for a 429"
    );

    let output = run(claude("go\n@fake rate-limit=1", Some("S-2")).env("CORRAL_RUN_ATTEMPT", "2"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        claude_lines(&output)[2],
        claude_result("S-2", "fake answer: go")
    );
}

#[test]
fn claude_fail_reports_an_error_result() {
    let output = run(claude("go", Some("S-3")).env("CORRAL_FAKE_SCRIPT", "fail=Request timed out"));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let mut expected = vec![claude_init("S-3", "fake-model", "default")];
    expected.extend(claude_failure(
        "S-3",
        "Request timed out",
        "unknown",
        Value::Null,
    ));
    assert_eq!(claude_lines(&output), expected);
}

#[test]
fn claude_run_deltas_partial_and_crash() {
    let output = run(claude("go", Some("S-4")).env("CORRAL_FAKE_SCRIPT", "run=echo hi\ndeltas=1"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = claude_lines(&output);
    assert_eq!(lines.len(), 6, "{lines:?}");
    let tool = &lines[1]["message"]["content"][0];
    assert_eq!(tool["type"], "tool_use");
    assert_eq!(tool["name"], "Bash");
    assert_eq!(tool["input"]["command"], "echo hi");
    let id = tool["id"].as_str().unwrap();
    assert_eq!(
        lines[2],
        json!({
            "type": "user",
            "message": {"role": "user", "content": [{
                "tool_use_id": id, "type": "tool_result", "content": "hi\n", "is_error": false
            }]},
            "parent_tool_use_id": null, "session_id": "S-4", "uuid": "<uuid>"
        })
    );
    assert_eq!(
        lines[3],
        claude_assistant("S-4", "fake-model", text_block("step 1"))
    );
    assert_eq!(
        lines[4],
        claude_assistant("S-4", "fake-model", text_block("fake answer: go"))
    );
    assert_eq!(lines[5], claude_result("S-4", "fake answer: go"));

    let output = run(claude("go\n@fake partial", Some("S-4")));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert!(!text.ends_with('\n'));
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(normalize(last), claude_result("S-4", "fake answer: go"));

    let output = run(claude("go\n@fake crash", Some("S-4")));
    assert_eq!(output.status.signal(), Some(libc::SIGKILL), "{output:?}");
    let text = stdout(&output);
    assert!(!text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[1].starts_with(r#"{"type":"assistant","message":{"#),
        "{text}"
    );
    assert!(serde_json::from_str::<Value>(lines[1]).is_err());
}

#[test]
fn a_missing_prompt_or_dash_reads_the_prompt_from_stdin() {
    let prompt = "-v \"quoted\"\n@fake answer=from stdin";
    for args in [
        &["exec", "--json", "--skip-git-repo-check", "--", "-"][..],
        &["exec", "--json", "--skip-git-repo-check"][..],
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "resume",
            "t-1",
            "-",
        ][..],
        &["-p", "--verbose", "--output-format", "stream-json"][..],
    ] {
        let output = common::output_with_stdin(fake(args), prompt, |child| {
            child.wait_with_output().unwrap()
        });
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert!(
            stdout(&output).contains("from stdin"),
            "{args:?}: {output:?}"
        );
    }
}

#[test]
fn anything_else_is_a_usage_error() {
    for args in [
        &[][..],
        &["say hi"][..],
        &["exec", "--skip-git-repo-check", "x"][..],
        &["exec", "--json", "x"][..],
        &["exec", "--json", "--skip-git-repo-check", "a", "b"][..],
        &["exec", "--json", "--skip-git-repo-check", "--bogus", "x"][..],
        &["--model"][..],
        &["-p", "--output-format", "stream-json", "x"][..],
        &["-p", "--verbose", "--output-format", "json", "x"][..],
    ] {
        let output = run(fake(args));
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert_eq!(stdout(&output), "", "{args:?}");
        assert!(stderr_has(&output, "usage: corral-fake-engine"), "{args:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// app-server mode
// ---------------------------------------------------------------------------------------------

/// What the reader of an app-server's stdout saw.
enum Read {
    Line(String),
    /// Bytes before EOF without a newline.
    Partial(Vec<u8>),
    Eof,
}

/// One message of an app-server: its line as written, and parsed.
struct Msg {
    raw: String,
    value: Value,
}

impl std::ops::Index<&str> for Msg {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        &self.value[key]
    }
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Msg {
    fn method(&self) -> &str {
        self.value["method"].as_str().unwrap_or("")
    }

    /// Whether this is the answer to our request `id`.
    fn answers(&self, id: i64) -> bool {
        self.value.get("method").is_none() && self.value["id"] == json!(id)
    }
}

/// Parses one line of an app-server and checks what every message of codex has in common.
fn wire_message(raw: String) -> Msg {
    let value: Value =
        serde_json::from_str(&raw).unwrap_or_else(|error| panic!("not JSON ({error}): {raw}"));
    assert!(value.is_object(), "{raw}");
    assert!(
        value.get("jsonrpc").is_none(),
        "codex sends no jsonrpc field: {raw}"
    );
    let method = value.get("method");
    match value.get("id") {
        // A server request: integer id.
        Some(id) if method.is_some() => assert!(id.is_i64(), "{raw}"),
        // A response.
        Some(_) => assert!(
            value.get("result").is_some() != value.get("error").is_some(),
            "{raw}"
        ),
        // A notification.
        None => {
            assert!(method.is_some_and(Value::is_string), "{raw}");
            assert!(value["emittedAtMs"].is_u64(), "no emittedAtMs: {raw}");
        }
    }
    Msg { raw, value }
}

/// A `corral-fake-engine app-server` with piped stdin, stdout and stderr; killed and reaped
/// when dropped.
struct AppServer {
    running: Running,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::sync::mpsc::Receiver<Read>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    next_id: i64,
    cwd: String,
}

fn app_server(state: &std::path::Path) -> AppServer {
    app_server_with(state, &[])
}

fn app_server_with(state: &std::path::Path, env: &[(&str, &str)]) -> AppServer {
    let mut command = fake(&[
        "-c",
        "a=b",
        "app-server",
        "--listen",
        "stdio://",
        "-c",
        "x=1",
    ]);
    command
        .env("CORRAL_FAKE_STATE", state)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the fake engine starts");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut bytes = Vec::new();
            let read = match reader.read_until(b'\n', &mut bytes) {
                Ok(0) | Err(_) => Read::Eof,
                Ok(_) if bytes.ends_with(b"\n") => {
                    bytes.pop();
                    Read::Line(String::from_utf8_lossy(&bytes).into_owned())
                }
                Ok(_) => Read::Partial(bytes),
            };
            let eof = matches!(read, Read::Eof);
            if sender.send(read).is_err() || eof {
                return;
            }
        }
    });
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&stderr);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read @ 1..) = stderr_pipe.read(&mut buffer) {
            sink.lock().unwrap().extend_from_slice(&buffer[..read]);
        }
    });
    AppServer {
        running: Running(child),
        stdin,
        stdout: receiver,
        stderr,
        next_id: 1,
        cwd: state.to_string_lossy().into_owned(),
    }
}

impl AppServer {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    /// Sends a request; returns its id.
    fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"id": id, "method": method, "params": params}));
        id
    }

    fn read(&mut self, limit: Duration) -> Option<Read> {
        self.stdout.recv_timeout(limit).ok()
    }

    /// The next message (within [`LIMIT`]).
    fn next(&mut self) -> Msg {
        match self.read(LIMIT) {
            Some(Read::Line(line)) => wire_message(line),
            Some(Read::Partial(bytes)) => panic!(
                "unterminated line {:?}; stderr:\n{}",
                String::from_utf8_lossy(&bytes),
                self.stderr()
            ),
            Some(Read::Eof) => panic!("stdout ended; stderr:\n{}", self.stderr()),
            None => panic!("nothing in time; stderr:\n{}", self.stderr()),
        }
    }

    /// The messages up to and including the first one that `last` accepts.
    fn until(&mut self, last: impl Fn(&Msg) -> bool) -> Vec<Msg> {
        let mut seen = Vec::new();
        loop {
            let message = self.next();
            let done = last(&message);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    /// Asserts that nothing comes on stdout for `ms` milliseconds.
    fn quiet(&mut self, ms: u64) {
        match self.read(Duration::from_millis(ms)) {
            None => {}
            Some(Read::Line(line)) => panic!("unexpected line: {line}"),
            Some(Read::Partial(bytes)) => panic!("unexpected bytes: {bytes:?}"),
            Some(Read::Eof) => panic!("unexpected EOF; stderr:\n{}", self.stderr()),
        }
    }

    /// Sends a request and returns its answer, with everything that came before it.
    fn call_all(&mut self, method: &str, params: Value) -> Vec<Msg> {
        let id = self.request(method, params);
        self.until(|message| message.answers(id))
    }

    fn call(&mut self, method: &str, params: Value) -> Msg {
        self.call_all(method, params).pop().unwrap()
    }

    fn initialize(&mut self) {
        let answer = self.call(
            "initialize",
            json!({"clientInfo": {"name": "corral-test", "title": "Test", "version": "0.0.1"}}),
        );
        assert!(answer["result"]["userAgent"].is_string(), "{answer:?}");
        self.send(&json!({"method": "initialized"}));
    }

    /// thread/start in the state dir; returns the thread id (after `thread/started`).
    fn start_thread(&mut self) -> String {
        let cwd = self.cwd.clone();
        let answer = self.call("thread/start", json!({"cwd": cwd}));
        let thread = answer["result"]["thread"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no thread: {answer:?}"))
            .to_string();
        let started = self.next();
        assert_eq!(started.method(), "thread/started", "{started:?}");
        assert_eq!(started["params"]["thread"]["id"], json!(thread));
        thread
    }

    /// turn/start with TEXT; returns the turn id.
    fn start_turn(&mut self, thread: &str, text: &str) -> String {
        let input = json!([{"type": "text", "text": text}]);
        let answer = self.call("turn/start", json!({"threadId": thread, "input": input}));
        let turn = &answer["result"]["turn"];
        assert_eq!(turn["status"], "inProgress", "{answer:?}");
        turn["id"].as_str().unwrap().to_string()
    }

    /// A whole turn: its notifications up to `turn/completed`.
    fn turn(&mut self, thread: &str, text: &str) -> Vec<Msg> {
        self.start_turn(thread, text);
        self.until(|message| message.method() == "turn/completed")
    }

    /// Closes stdin and waits for the end.
    fn close(&mut self) -> ExitStatus {
        self.stdin.take();
        wait_for(&mut self.running.0, LIMIT).expect("the fake engine ends in time")
    }
}

fn methods(messages: &[Msg]) -> Vec<&str> {
    messages.iter().map(Msg::method).collect()
}

/// The final answer of a turn's notifications (the completed agentMessage).
fn answer_of(messages: &[Msg]) -> String {
    let answers: Vec<&Value> = messages
        .iter()
        .filter(|message| {
            message.method() == "item/completed"
                && message["params"]["item"]["type"] == "agentMessage"
        })
        .map(|message| &message["params"]["item"]["text"])
        .collect();
    assert_eq!(answers.len(), 1, "{messages:#?}");
    answers[0].as_str().unwrap().to_string()
}

fn last_turn(messages: &[Msg]) -> &Value {
    let last = messages.last().unwrap();
    assert_eq!(last.method(), "turn/completed", "{last:?}");
    &last["params"]["turn"]
}

fn state() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn app_server_handshake_rules() {
    let state = state();
    let mut server = app_server(state.path());
    let early = server.call("thread/start", json!({}));
    assert_eq!(
        early.raw,
        r#"{"error":{"code":-32600,"message":"Not initialized"},"id":1}"#
    );
    // An unparseable line is ignored.
    server.send_raw("this is not JSON {");
    let id = server.request(
        "initialize",
        json!({"clientInfo": {"name": "corral-test", "version": "1"}}),
    );
    let answer = server.next();
    assert!(
        answer.raw.starts_with(&format!(
            r#"{{"id":{id},"result":{{"userAgent":"corral-fake-engine/"#
        )),
        "{answer:?}"
    );
    assert_eq!(
        answer["result"]["userAgent"],
        format!("corral-fake-engine/{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(answer["result"]["platformFamily"], "unix");
    assert_eq!(answer["result"]["platformOs"], "linux");
    assert!(answer["result"]["codexHome"].is_string());
    server.send(&json!({"method": "initialized"}));
    let again = server.call(
        "initialize",
        json!({"clientInfo": {"name": "x", "version": "1"}}),
    );
    assert_eq!(
        again.raw,
        r#"{"error":{"code":-32600,"message":"Already initialized"},"id":3}"#
    );
    let unknown = server.call("model/bogus", json!({}));
    assert_eq!(
        unknown.raw,
        r#"{"error":{"code":-32600,"message":"Invalid request: unknown variant `model/bogus`"},"id":4}"#
    );
    let missing = server.call("turn/start", json!({"input": []}));
    assert_eq!(
        missing["error"]["message"],
        "Invalid request: missing field `threadId`"
    );
    // A string id is echoed as it came.
    server.send(&json!({"id": "x-1", "method": "nope", "params": {}}));
    assert_eq!(server.next()["id"], "x-1");
    server.quiet(100);
    assert_eq!(server.close().code(), Some(0));
    let stderr = server.stderr();
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|line| line.contains("app-server")),
        "{stderr}"
    );
    assert!(stderr.contains("this is not JSON {"), "{stderr}");
}

#[test]
fn app_server_turn_streams_deltas_and_completes() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let cwd = state.path().to_string_lossy().into_owned();
    let params = json!({
        "cwd": cwd,
        "model": "gpt-test",
        "approvalPolicy": "never",
        "sandbox": "workspace-write",
    });
    let started = server.call("thread/start", params);
    let result = &started["result"];
    let thread = result["thread"]["id"].as_str().unwrap().to_string();
    let uuid = uuid::Uuid::parse_str(&thread).expect("a UUID");
    assert_eq!(uuid.get_version_num(), 7);
    assert_eq!(result["model"], "gpt-test");
    assert_eq!(result["cwd"], json!(cwd));
    assert_eq!(result["approvalPolicy"], "never");
    assert_eq!(
        result["sandbox"],
        json!({"type": "workspaceWrite", "writableRoots": [cwd], "networkAccess": false,
               "excludeTmpdirEnvVar": false, "excludeSlashTmp": false})
    );
    assert_eq!(result["thread"]["status"], json!({"type": "idle"}));
    let notification = server.next();
    assert_eq!(notification.method(), "thread/started");
    assert_eq!(notification["params"]["thread"]["id"], json!(thread));

    let text = "say hi\n@fake answer=hello from fake";
    let turn = server.start_turn(&thread, text);
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(
        methods(&messages),
        [
            "thread/status/changed",
            "turn/started",
            "item/started",
            "item/completed",
            "item/started",
            "item/agentMessage/delta",
            "item/agentMessage/delta",
            "item/agentMessage/delta",
            "item/completed",
            "thread/tokenUsage/updated",
            "account/rateLimits/updated",
            "thread/status/changed",
            "turn/completed",
        ],
        "{messages:#?}"
    );
    assert_eq!(
        messages[0]["params"],
        json!({"threadId": thread, "status": {"type": "active", "activeFlags": []}})
    );
    assert_eq!(messages[1]["params"]["turn"]["id"], json!(turn));
    assert_eq!(messages[1]["params"]["turn"]["status"], "inProgress");
    let user = &messages[3]["params"]["item"];
    assert_eq!(user["type"], "userMessage");
    assert_eq!(
        user["content"],
        json!([{"type": "text", "text": text, "text_elements": []}])
    );
    let deltas: Vec<&str> = messages[5..8]
        .iter()
        .map(|message| message["params"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, ["hello", " from", " fake"]);
    let item_id = &messages[4]["params"]["item"]["id"];
    assert!(messages[5..8]
        .iter()
        .all(|message| &message["params"]["itemId"] == item_id
            && message["params"]["turnId"] == json!(turn)));
    assert_eq!(answer_of(&messages), "hello from fake");
    assert_eq!(
        messages[11]["params"]["status"],
        json!({"type": "idle"}),
        "{messages:#?}"
    );
    let completed = messages.last().unwrap();
    assert!(
        completed.raw.starts_with(&format!(
            r#"{{"method":"turn/completed","params":{{"threadId":"{thread}","turn":{{"id":"{turn}","rootTurnId":"{turn}","items":[{{"type":"agentMessage","#
        )),
        "{completed:?}"
    );
    assert!(
        completed
            .raw
            .contains(r#""itemsView":"summary","status":"completed","error":null,"startedAt":"#),
        "{completed:?}"
    );
    let done = last_turn(&messages);
    assert_eq!(done["items"][0]["text"], "hello from fake");
    assert!(done["durationMs"].is_u64() && done["completedAt"].is_u64());

    // A second turn of the same thread; usage adds up.
    let messages = server.turn(&thread, "again");
    assert_eq!(answer_of(&messages), "fake answer: again");
    let usage = messages
        .iter()
        .find(|message| message.method() == "thread/tokenUsage/updated")
        .unwrap();
    assert_eq!(usage["params"]["tokenUsage"]["total"]["inputTokens"], 200);
    assert_eq!(usage["params"]["tokenUsage"]["last"]["inputTokens"], 100);
    assert_eq!(server.close().code(), Some(0));
}

#[test]
fn app_server_threads_outlive_the_process_like_rollouts() {
    let state = state();
    let mut first = app_server(state.path());
    first.initialize();
    let thread = first.start_thread();
    assert_eq!(answer_of(&first.turn(&thread, "one")), "fake answer: one");
    assert_eq!(first.close().code(), Some(0));

    let mut second = app_server(state.path());
    second.initialize();
    let resumed = second.call_all("thread/resume", json!({"threadId": thread}));
    assert_eq!(resumed.len(), 2, "{resumed:#?}");
    assert_eq!(resumed[0].method(), "thread/status/changed");
    assert_eq!(resumed[1]["result"]["thread"]["id"], json!(thread));
    assert_eq!(resumed[1]["result"]["thread"]["preview"], "one");
    assert_eq!(answer_of(&second.turn(&thread, "two")), "fake answer: two");

    let missing = "00000000-0000-4000-8000-000000000000";
    let answer = second.call("thread/resume", json!({"threadId": missing}));
    assert_eq!(
        answer.raw,
        format!(
            r#"{{"error":{{"code":-32600,"message":"no rollout found for thread id {missing}"}},"id":{}}}"#,
            answer["id"]
        )
    );
    // A turn on a thread that no process has.
    let input = json!([{"type": "text", "text": "x"}]);
    let answer = second.call("turn/start", json!({"threadId": missing, "input": input}));
    assert_eq!(
        answer["error"]["message"],
        format!("no rollout found for thread id {missing}")
    );

    // While the second process holds the thread, a third cannot resume it.
    let mut third = app_server(state.path());
    third.initialize();
    let answer = third.call("thread/resume", json!({"threadId": thread}));
    assert_eq!(
        answer.raw,
        format!(
            r#"{{"error":{{"code":-32600,"message":"thread {thread} already has an active writer"}},"id":{}}}"#,
            answer["id"]
        )
    );
    // Known but not resumed here.
    let answer = third.call("turn/start", json!({"threadId": thread, "input": input}));
    assert_eq!(
        answer["error"]["message"],
        format!("thread not found: {thread}")
    );
    // Once the second is gone, the third can.
    assert_eq!(second.close().code(), Some(0));
    let answer = third.call("thread/resume", json!({"threadId": thread}));
    assert_eq!(
        answer["result"]["thread"]["id"],
        json!(thread),
        "{answer:?}"
    );
    assert_eq!(
        answer_of(&third.turn(&thread, "three")),
        "fake answer: three"
    );
    assert_eq!(third.close().code(), Some(0));
}

#[test]
fn app_server_will_retry_reports_retries_then_completes() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let messages = server.turn(&thread, "hi\n@fake will-retry=2");
    let errors: Vec<&Msg> = messages
        .iter()
        .filter(|message| message.method() == "error")
        .collect();
    assert_eq!(errors.len(), 2, "{messages:#?}");
    for (index, error) in errors.iter().enumerate() {
        assert_eq!(
            error["params"]["error"],
            json!({
                "message": format!("Reconnecting... {}/2", index + 1),
                "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 429}},
                "additionalDetails": CODEX_429,
                "misalignment": null,
            })
        );
        assert_eq!(error["params"]["willRetry"], true);
        assert_eq!(error["params"]["threadId"], json!(thread));
    }
    assert_eq!(last_turn(&messages)["status"], "completed");
    assert_eq!(answer_of(&messages), "fake answer: hi");
}

/// The failure of a turn: its `error` notification and `turn/completed`, after a
/// `systemError` status; returns the error object.
fn failure_of(messages: &[Msg]) -> Value {
    let count = messages.len();
    assert!(count >= 3, "{messages:#?}");
    assert_eq!(
        methods(&messages[count - 3..]),
        ["thread/status/changed", "error", "turn/completed"],
        "{messages:#?}"
    );
    assert_eq!(
        messages[count - 3]["params"]["status"],
        json!({"type": "systemError"})
    );
    let notification = &messages[count - 2];
    assert_eq!(notification["params"]["willRetry"], false);
    let error = notification["params"]["error"].clone();
    let turn = last_turn(messages);
    assert_eq!(turn["status"], "failed");
    assert_eq!(turn["items"], json!([]));
    assert_eq!(turn["error"], error);
    assert!(!messages
        .iter()
        .any(|message| message.method() == "item/agentMessage/delta"));
    error
}

#[test]
fn app_server_rate_limit_fails_the_first_turns_of_a_text_across_processes() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let text = "hi\n@fake rate-limit=1";
    let messages = server.turn(&thread, text);
    let error = failure_of(&messages);
    assert_eq!(
        error,
        json!({
            "message": CODEX_429,
            "codexErrorInfo": {"responseTooManyFailedAttempts": {"httpStatusCode": 429}},
            "additionalDetails": null,
            "misalignment": null,
        })
    );
    let notification = &messages[messages.len() - 2];
    let turn = last_turn(&messages)["id"].as_str().unwrap();
    assert!(
        notification.raw.starts_with(&format!(
            r#"{{"method":"error","params":{{"error":{{"message":"{CODEX_429}","codexErrorInfo":{{"responseTooManyFailedAttempts":{{"httpStatusCode":429}}}},"additionalDetails":null,"misalignment":null}},"willRetry":false,"threadId":"{thread}","turnId":"{turn}"}},"emittedAtMs":"#
        )),
        "{notification:?}"
    );
    let completed = messages.last().unwrap();
    assert!(
        completed.raw.contains(&format!(
            r#""items":[],"itemsView":"notLoaded","status":"failed","error":{{"message":"{CODEX_429}","#
        )),
        "{completed:?}"
    );
    let messages = server.turn(&thread, text);
    assert_eq!(last_turn(&messages)["status"], "completed");

    // rate-limit=2: one failure in this process, one in the next, then success.
    let text = "other\n@fake rate-limit=2";
    failure_of(&server.turn(&thread, text));
    assert_eq!(server.close().code(), Some(0));
    let mut next = app_server(state.path());
    next.initialize();
    next.call("thread/resume", json!({"threadId": thread}));
    failure_of(&next.turn(&thread, text));
    assert_eq!(last_turn(&next.turn(&thread, text))["status"], "completed");
}

#[test]
fn app_server_usage_limit_overload_and_fail_fail_the_turn() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let error = failure_of(&server.turn(&thread, "hi\n@fake usage-limit"));
    assert_eq!(error["codexErrorInfo"], "usageLimitExceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("You’ve hit your usage limit.")
            && message.ends_with("try again at 7:28 AM."),
        "{message}"
    );
    let error = failure_of(&server.turn(&thread, "hi\n@fake overloaded"));
    assert_eq!(error["codexErrorInfo"], "serverOverloaded");
    let error = failure_of(&server.turn(&thread, "hi\n@fake fail=it broke; badly"));
    assert_eq!(
        error,
        json!({"message": "it broke; badly", "codexErrorInfo": "other",
               "additionalDetails": null, "misalignment": null})
    );
    // The thread goes on.
    assert_eq!(
        answer_of(&server.turn(&thread, "fine")),
        "fake answer: fine"
    );
}

/// Starts a turn and reads up to its userMessage's `item/completed`; returns the turn id.
fn start_and_settle(server: &mut AppServer, thread: &str, text: &str) -> String {
    let turn = server.start_turn(thread, text);
    let messages = server.until(|message| {
        message.method() == "item/completed" && message["params"]["item"]["type"] == "userMessage"
    });
    assert_eq!(
        methods(&messages),
        [
            "thread/status/changed",
            "turn/started",
            "item/started",
            "item/completed"
        ]
    );
    turn
}

#[test]
fn app_server_interrupt_ends_a_hanging_turn() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let turn = start_and_settle(&mut server, &thread, "wait\n@fake hang");
    server.quiet(200);
    let id = server.request(
        "turn/interrupt",
        json!({"threadId": thread, "turnId": turn}),
    );
    assert_eq!(server.next().raw, format!(r#"{{"id":{id},"result":{{}}}}"#));
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(
        methods(&messages),
        ["thread/status/changed", "turn/completed"]
    );
    assert_eq!(messages[0]["params"]["status"], json!({"type": "idle"}));
    let completed = &messages[1];
    assert!(
        completed.raw.starts_with(&format!(
            r#"{{"method":"turn/completed","params":{{"threadId":"{thread}","turn":{{"id":"{turn}","rootTurnId":"{turn}","items":[],"itemsView":"notLoaded","status":"interrupted","error":null,"startedAt":"#
        )),
        "{completed:?}"
    );
    // The thread takes a new turn.
    assert_eq!(
        answer_of(&server.turn(&thread, "next")),
        "fake answer: next"
    );

    // ignore-interrupt: answered, but the turn goes on.
    let turn = start_and_settle(&mut server, &thread, "stuck\n@fake ignore-interrupt");
    let id = server.request(
        "turn/interrupt",
        json!({"threadId": thread, "turnId": turn}),
    );
    assert_eq!(server.next().raw, format!(r#"{{"id":{id},"result":{{}}}}"#));
    server.quiet(300);
    let input = json!([{"type": "text", "text": "more"}]);
    let busy = server.call("turn/start", json!({"threadId": thread, "input": input}));
    assert!(
        busy["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("already has a turn in progress")),
        "{busy:?}"
    );
    assert_eq!(server.close().code(), Some(0));
}

#[test]
fn app_server_steer_completes_a_hanging_turn() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    // As codex 0.171.0: the turn must be named.
    let unnamed = server.call(
        "turn/steer",
        json!({"threadId": thread, "input": [{"type": "text", "text": "x"}]}),
    );
    assert!(
        unnamed.raw.contains("missing field `expectedTurnId`"),
        "{}",
        unnamed.raw
    );
    let no_turn = server.call(
        "turn/steer",
        json!({"threadId": thread, "input": [{"type": "text", "text": "x"}],
               "expectedTurnId": "t"}),
    );
    assert_eq!(
        no_turn.raw,
        format!(
            r#"{{"error":{{"code":-32600,"message":"no active turn to steer"}},"id":{}}}"#,
            no_turn["id"]
        )
    );
    let turn = start_and_settle(&mut server, &thread, "wait\n@fake hang");
    let wrong = server.call(
        "turn/steer",
        json!({"threadId": thread, "input": [{"type": "text", "text": "x"}],
               "expectedTurnId": "not-this-one"}),
    );
    assert!(wrong["error"]["message"].is_string(), "{wrong:?}");
    server.quiet(100);
    let steered = server.call(
        "turn/steer",
        json!({"threadId": thread, "input": [{"type": "text", "text": "go left"}],
               "expectedTurnId": turn}),
    );
    assert_eq!(steered["result"], json!({"turnId": turn}), "{steered:?}");
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(answer_of(&messages), "steered: go left");
    assert_eq!(last_turn(&messages)["status"], "completed");
    assert_eq!(last_turn(&messages)["id"], json!(turn));
}

#[test]
fn app_server_exit_mid_turn_leaves_a_partial_line() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    start_and_settle(&mut server, &thread, "bye\n@fake exit-mid-turn=3");
    let partial = match server.read(LIMIT) {
        Some(Read::Partial(bytes)) => bytes,
        Some(Read::Line(line)) => panic!("a whole line: {line}"),
        _ => panic!("no partial line; stderr:\n{}", server.stderr()),
    };
    assert!(!partial.is_empty() && !partial.ends_with(b"\n"));
    assert!(partial.starts_with(b"{\"method\":"), "{partial:?}");
    assert!(serde_json::from_slice::<Value>(&partial).is_err());
    assert!(matches!(server.read(LIMIT), Some(Read::Eof)));
    let status = wait_for(&mut server.running.0, LIMIT).expect("it exits");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn app_server_crash_dies_by_sigkill_mid_turn() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    start_and_settle(&mut server, &thread, "bye\n@fake crash");
    assert!(matches!(server.read(LIMIT), Some(Read::Eof)));
    let status = wait_for(&mut server.running.0, LIMIT).expect("it dies");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // Its lock is stale: another process resumes the thread.
    let mut next = app_server(state.path());
    next.initialize();
    let answer = next.call("thread/resume", json!({"threadId": thread}));
    assert_eq!(
        answer["result"]["thread"]["id"],
        json!(thread),
        "{answer:?}"
    );
}

#[test]
fn app_server_approval_requests_wait_for_the_client() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let marker = state.path().join("ran.txt");
    let command = format!("echo ran > '{}'", marker.display());
    let text = format!("do it\n@fake approval=command\n@fake run={command}");
    let turn = server.start_turn(&thread, &text);
    let messages = server.until(|message| message.value.get("id").is_some());
    let request = messages.last().unwrap();
    let started = &messages[messages.len() - 2];
    assert_eq!(started.method(), "item/started");
    let item = &started["params"]["item"];
    assert_eq!(item["type"], "commandExecution");
    assert_eq!(item["status"], "inProgress");
    let id = request["id"].as_i64().expect("an integer id");
    assert!(
        request.raw.starts_with(&format!(
            r#"{{"id":{id},"method":"item/commandExecution/requestApproval","params":{{"threadId":"{thread}","turnId":"{turn}","itemId":{},"command":{}"#,
            item["id"],
            json!(command)
        )),
        "{request:?}"
    );
    // Nothing happens until the client answers.
    server.quiet(200);
    server.send(&json!({"id": id, "result": {"decision": "decline"}}));
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(answer_of(&messages), "approval: decline");
    let declined = messages
        .iter()
        .find(|message| {
            message.method() == "item/completed"
                && message["params"]["item"]["type"] == "commandExecution"
        })
        .expect("the command's item completes");
    assert_eq!(declined["params"]["item"]["status"], "declined");
    assert!(!marker.exists(), "a declined command ran");

    // Accepted: the command runs.
    server.start_turn(&thread, &text);
    let request = server
        .until(|message| message.value.get("id").is_some())
        .pop()
        .unwrap();
    let id = request["id"].as_i64().unwrap();
    server.send(&json!({"id": id, "result": {"decision": "accept"}}));
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(answer_of(&messages), "approval: accept");
    assert!(marker.exists(), "an accepted command did not run");

    // A file change, answered with an error.
    server.start_turn(&thread, "edit\n@fake approval=file");
    let request = server
        .until(|message| message.value.get("id").is_some())
        .pop()
        .unwrap();
    assert_eq!(request.method(), "item/fileChange/requestApproval");
    assert_eq!(request["params"]["threadId"], json!(thread));
    assert!(request["params"]["itemId"].is_string());
    let id = request["id"].as_i64().unwrap();
    server.send(&json!({"id": id, "error": {"code": -32000, "message": "no UI"}}));
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(answer_of(&messages), "approval: error no UI");
}

#[test]
fn app_server_unknown_server_request_gets_the_clients_error() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let turn = server.start_turn(&thread, "hi\n@fake unknown-request");
    let request = server
        .until(|message| message.value.get("id").is_some())
        .pop()
        .unwrap();
    assert_eq!(request.method(), "fake/unknownRequest");
    assert_eq!(request["params"]["turnId"], json!(turn));
    let id = request["id"].as_i64().expect("an integer id");
    server.send(&json!({"id": id, "error": {"code": -32601, "message": "Method not found"}}));
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(answer_of(&messages), "unknown request: Method not found");
}

#[test]
fn app_server_compaction_reports_a_context_compaction_item() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let id = server.request("thread/compact/start", json!({"threadId": thread}));
    assert_eq!(server.next().raw, format!(r#"{{"id":{id},"result":{{}}}}"#));
    let messages = server.until(|message| message.method() == "turn/completed");
    let compacted = messages
        .iter()
        .find(|message| message.method() == "item/completed")
        .expect("an item/completed");
    let item = &compacted["params"]["item"];
    assert_eq!(item["type"], "contextCompaction");
    assert!(item["id"].is_string());
    assert_eq!(compacted["params"]["threadId"], json!(thread));
    assert_eq!(last_turn(&messages)["status"], "completed");
    let missing = "00000000-0000-4000-8000-000000000001";
    let answer = server.call("thread/compact/start", json!({"threadId": missing}));
    assert_eq!(
        answer["error"],
        json!({"code": -32600, "message": format!("no rollout found for thread id {missing}")})
    );
}

#[test]
fn app_server_runs_turns_of_several_threads_at_once() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let slow = server.start_thread();
    let fast = server.start_thread();
    let slow_turn = start_and_settle(&mut server, &slow, "slow\n@fake hang");
    let messages = server.turn(&fast, "fast\n@fake deltas=2\n@fake interval=10");
    // Only the fast thread's turn speaks (account/rateLimits/updated names no thread).
    assert!(messages
        .iter()
        .filter(|message| message.method() != "account/rateLimits/updated")
        .all(|message| message["params"]["threadId"] == json!(fast)));
    assert_eq!(answer_of(&messages), "fake answer: fast");
    server.call(
        "turn/interrupt",
        json!({"threadId": slow, "turnId": slow_turn}),
    );
    let messages = server.until(|message| message.method() == "turn/completed");
    assert_eq!(last_turn(&messages)["status"], "interrupted");
    assert_eq!(messages.last().unwrap()["params"]["threadId"], json!(slow));
}

#[test]
fn app_server_exits_0_promptly_when_stdin_closes() {
    let state = state();
    let mut server = app_server(state.path());
    server.initialize();
    let thread = server.start_thread();
    let lock = state.path().join("threads").join(format!("{thread}.lock"));
    assert!(lock.exists());
    start_and_settle(&mut server, &thread, "wait\n@fake hang");
    let started = Instant::now();
    assert_eq!(server.close().code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!lock.exists(), "the thread's lock is left behind");
    assert!(state
        .path()
        .join("threads")
        .join(format!("{thread}.json"))
        .exists());
}
