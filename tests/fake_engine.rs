//! The fake engine (`corral-fake-engine`) speaks codex's `exec --json` and claude's
//! `stream-json` exactly, and does what its directives say.

use std::borrow::BorrowMut;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

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

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
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
fn anything_else_is_a_usage_error() {
    for args in [
        &[][..],
        &["say hi"][..],
        &["exec", "--skip-git-repo-check", "x"][..],
        &["exec", "--json", "x"][..],
        &["exec", "--json", "--skip-git-repo-check"][..],
        &["exec", "--json", "--skip-git-repo-check", "a", "b"][..],
        &["exec", "--json", "--skip-git-repo-check", "resume", "x"][..],
        &["exec", "--json", "--skip-git-repo-check", "--bogus", "x"][..],
        &["--model"][..],
        &["-p", "--output-format", "stream-json", "x"][..],
        &["-p", "--verbose", "--output-format", "json", "x"][..],
        &["-p", "--verbose", "--output-format", "stream-json"][..],
    ] {
        let output = run(fake(args));
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert_eq!(stdout(&output), "", "{args:?}");
        assert!(stderr_has(&output, "usage: corral-fake-engine"), "{args:?}");
    }
}
