//! The CLI as a client of the daemon: each test starts a real daemon on a home of its own and
//! drives it only through the `corral` binary (one test also opens the socket itself, to play
//! a driver whose claim goes stale). Prompts run on the fake engine. Every test stops its
//! daemon at the end and checks that no process of its home is left.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::ops::Deref;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;

use serde_json::{json, Value};

use common::daemon::{
    alive, finish, lines_of, next_line, processes_of, wait_for, wait_until, DaemonHome, DEADLINE,
};
use common::{stderr, stdout};

/// A daemon home with the fake engine set up the way these tests use it.
struct TestHome(DaemonHome);

impl Deref for TestHome {
    type Target = DaemonHome;

    fn deref(&self) -> &DaemonHome {
        &self.0
    }
}

impl TestHome {
    fn new() -> Self {
        TestHome(DaemonHome::new())
    }

    /// The fake engine, short retry delays, a quick shutdown and a project `p` on it.
    fn setup_fake(&self) {
        self.config(&[
            (
                "engines.fake.path",
                env!("CARGO_BIN_EXE_corral-fake-engine"),
            ),
            ("retry.rate_limit_delays", "0.05"),
            ("daemon.shutdown_grace_ms", "500"),
            ("cancel.grace_ms", "500"),
        ]);
        self.add_project("p", &self.work(), "fake");
    }

    /// A new session in project `p`: its id.
    fn session(&self, title: &str) -> String {
        self.new_session(&["p", "--title", title])
    }
}

/// The next line that contains `needle` (earlier ones are returned too, for the message).
fn line_containing(lines: &mpsc::Receiver<String>, needle: &str) -> Vec<String> {
    match next_line(lines, |line| {
        line.contains(needle).then(|| line.to_string())
    }) {
        Ok((line, mut seen)) => {
            seen.push(line);
            seen
        }
        Err(seen) => panic!("no line containing {needle:?}; saw {seen:?}"),
    }
}

/// `#SEQ KIND …` lines as (seq, kind).
fn parse_events(text: &str) -> Vec<(i64, String)> {
    text.lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let seq = words
                .next()
                .and_then(|word| word.strip_prefix('#'))
                .and_then(|seq| seq.parse().ok())
                .unwrap_or_else(|| panic!("not an event line: {line}"));
            (seq, words.next().unwrap_or_default().to_string())
        })
        .collect()
}

fn prompts(history: &Value) -> Vec<Value> {
    history["prompts"].as_array().cloned().unwrap_or_default()
}

fn runs(history: &Value) -> Vec<Value> {
    history["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn the_whole_prompt_life_cycle() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    let id = home.session("life");

    // send --wait prints the answer.
    assert_eq!(
        home.ok(&["send", "life", "hello", "world", "--wait"]),
        "fake answer: hello world\n"
    );
    // A rate-limited prompt is retried and still answers.
    assert_eq!(
        home.ok(&["send", "life", "@fake rate-limit=1\nretry me", "--wait"]),
        "fake answer: retry me\n"
    );
    // A failing prompt: exit 1, the error on stderr, nothing on stdout.
    let output = home.run(&[
        "send",
        "life",
        "@fake fail=the engine exploded\nboom",
        "--wait",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("the engine exploded"),
        "{output:?}"
    );
    assert_eq!(stdout(&output), "");

    // history shows each prompt with its status, answer or error, and runs.
    let text = home.ok(&["history", "life"]);
    assert!(text.contains("fake answer: hello world"), "{text}");
    assert!(text.contains("attempts 2"), "{text}");
    assert!(text.contains("rate_limit"), "{text}");
    assert!(text.contains("error: "), "{text}");
    let history = home.json(&["history", &id, "--json"]);
    let sent = prompts(&history);
    assert_eq!(sent.len(), 3, "{history}");
    assert_eq!(sent[0]["status"], "done");
    assert_eq!(sent[0]["answer"], "fake answer: hello world");
    assert_eq!(sent[1]["status"], "done");
    assert_eq!(sent[1]["attempts"], 2);
    assert_eq!(sent[2]["status"], "failed");
    let all_runs = runs(&history);
    let retried: Vec<&Value> = all_runs
        .iter()
        .filter(|run| run["prompt_id"] == sent[1]["id"])
        .collect();
    assert_eq!(retried.len(), 2, "{history}");
    assert_eq!(retried[0]["failure_class"], "rate_limit");
    assert_eq!(retried[1]["status"], "succeeded");

    // watch --after 0 prints every stored event, in order, once.
    let shown = home.json(&["session", "show", "life", "--json"]);
    let last = shown["session"]["last_event_seq"].as_i64().unwrap();
    let events = parse_events(&home.ok(&["watch", "life", "--after", "0"]));
    let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
    let kinds: Vec<&str> = events.iter().map(|(_, kind)| kind.as_str()).collect();
    assert_eq!(kinds[0], "prompt.started");
    for kind in [
        "run.started",
        "retry.scheduled",
        "prompt.done",
        "prompt.failed",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let first_done = kinds.iter().position(|k| *k == "prompt.done").unwrap();
    let retry = kinds.iter().position(|k| *k == "retry.scheduled").unwrap();
    assert!(first_done < retry, "{kinds:?}");
    // --after N: only what follows N.
    let tail = parse_events(&home.ok(&["watch", "life", "--after", "5"]));
    assert_eq!(tail.first().map(|(seq, _)| *seq), Some(6));
    assert_eq!(tail.len() as i64, last - 5);
    assert_eq!(
        home.ok(&["watch", "life", "--after", &last.to_string()]),
        ""
    );
    // --json: one event object per line.
    let json_lines = home.ok(&["watch", "life", "--after", "0", "--json"]);
    let parsed: Vec<Value> = json_lines
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed.len() as i64, last);
    assert_eq!(parsed[0]["seq"], 1);
    assert_eq!(parsed[0]["session_id"], id.as_str());

    // watch --follow streams what happens next.
    let mut follower = home
        .corral(&["watch", "life", "--after", &last.to_string(), "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(follower.stdout.take().unwrap());
    assert_eq!(
        home.ok(&["send", "life", "followed", "--wait"]),
        "fake answer: followed\n"
    );
    let seen = line_containing(&lines, "prompt.done fake answer: followed");
    assert!(
        seen[0].starts_with(&format!("#{} prompt.started followed", last + 1)),
        "{seen:?}"
    );
    unsafe {
        libc::kill(follower.id() as i32, libc::SIGTERM);
    }
    assert_eq!(wait_for(&mut follower).code(), Some(143));

    // Images: a relative path is the CLI's, not the daemon's; a missing one is refused.
    std::fs::write(home.work().join("pic.png"), b"not really a png").unwrap();
    assert_eq!(
        home.ok(&["send", "life", "look", "--image", "work/pic.png", "--wait"]),
        "fake answer: look\n"
    );
    let history = home.json(&["history", "life", "--json"]);
    let picture = home.work().join("pic.png").canonicalize().unwrap();
    assert_eq!(
        prompts(&history).last().unwrap()["images"],
        json!([picture.to_str().unwrap()])
    );
    let missing = home.fails(&["send", "life", "look", "--image", "work/none.png"], 1);
    assert!(missing.contains("image not found"), "{missing}");

    // cancel: a running prompt is ended.
    let sent = home.ok(&["send", "life", "@fake delay=20000\nslow"]);
    let (prompt, status) = sent.trim().split_once(' ').unwrap();
    assert_eq!(status, "running", "{sent}");
    let cancelled = home.ok(&["cancel", prompt]);
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    wait_until("the cancelled prompt ends", || {
        let history = home.json(&["history", "life", "--json"]);
        prompts(&history).last().unwrap()["status"] == "cancelled"
    });
    // Cancelling a session with nothing left to cancel says so and succeeds.
    assert!(home
        .ok(&["cancel", "life"])
        .contains("no prompt was cancelled"));

    home.stop_daemon();
}

#[test]
fn two_clis_sending_at_once_never_overlap() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("pair");

    // Two CLIs send at the same moment: one runs, the other waits its turn.
    let first = home
        .corral(&["send", "pair", "@fake delay=600\nfirst"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let second = home
        .corral(&["send", "pair", "@fake delay=600\nsecond"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (first, second) = (finish(first), finish(second));
    assert!(first.status.success() && second.status.success());
    let mut statuses: Vec<String> = [&first, &second]
        .iter()
        .map(|output| {
            stdout(output)
                .split_whitespace()
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["queued", "running"]);

    // Two waiting CLIs: the second takes the driver over while the first waits.
    let waiter = home
        .corral(&["send", "pair", "@fake delay=300\nthird", "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the third prompt is queued", || {
        prompts(&home.json(&["history", "pair", "--json"])).len() == 3
    });
    let taker = home
        .corral(&["send", "pair", "fourth", "--wait", "--take-over"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (waiter, taker) = (finish(waiter), finish(taker));
    assert!(waiter.status.success(), "{waiter:?}");
    assert_eq!(stdout(&waiter), "fake answer: third\n");
    assert!(taker.status.success(), "{taker:?}");
    assert_eq!(stdout(&taker), "fake answer: fourth\n");

    wait_until("every prompt is done", || {
        prompts(&home.json(&["history", "pair", "--json"]))
            .iter()
            .all(|prompt| prompt["status"] == "done")
    });
    let history = home.json(&["history", "pair", "--json"]);
    assert_eq!(prompts(&history).len(), 4);
    let mut runs = runs(&history);
    assert_eq!(runs.len(), 4, "{history}");
    runs.sort_by_key(|run| run["started_at"].as_i64().unwrap());
    for pair in runs.windows(2) {
        let ended = pair[0]["ended_at"].as_i64().expect("an ended run");
        let started = pair[1]["started_at"].as_i64().unwrap();
        assert!(ended <= started, "runs overlap: {pair:?}");
    }
    // Prompts ran one after the other, in the order they were queued.
    let prompts = prompts(&history);
    for pair in prompts.windows(2) {
        assert!(pair[0]["finished_at"].as_i64() <= pair[1]["started_at"].as_i64());
    }

    home.stop_daemon();
}

#[test]
fn a_superseded_driver_is_refused() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("drv");

    // A attaches: it drives the session.
    let mut attach = home
        .corral(&["attach", "drv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let attach_err = lines_of(attach.stderr.take().unwrap());
    let _attach_out = lines_of(attach.stdout.take().unwrap());
    line_containing(&attach_err, "attached to session");
    let driver = home.json(&["session", "show", "drv", "--json"])["driver"].clone();
    let a_exec = driver["exec_id"].as_str().expect("a driver").to_string();
    let a_generation = driver["generation"].as_i64().unwrap();

    // Another exec cannot drive it without taking it over.
    let refused = home.fails(&["send", "drv", "not mine", "--wait"], 1);
    assert!(
        refused.contains(&format!("driven by exec {a_exec}")),
        "{refused}"
    );
    assert!(refused.contains("--take-over"), "{refused}");
    assert_eq!(refused.lines().count(), 1, "{refused}");

    // B takes it over and waits for its prompt.
    let taker = home
        .corral(&[
            "send",
            "drv",
            "@fake delay=3000\ntaken over",
            "--wait",
            "--take-over",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut b_exec = String::new();
    wait_until("B drives the session", || {
        let driver = home.json(&["session", "show", "drv", "--json"])["driver"].clone();
        match driver["exec_id"].as_str() {
            Some(exec) if exec != a_exec => {
                assert!(driver["generation"].as_i64().unwrap() > a_generation);
                b_exec = exec.to_string();
                true
            }
            _ => false,
        }
    });

    // A's next prompt carries its old generation: refused, and attach ends with exit 1.
    let mut input = attach.stdin.take().unwrap();
    writeln!(input, "from the old driver").unwrap();
    input.flush().unwrap();
    line_containing(&attach_err, &format!("superseded by exec {b_exec}"));
    assert_eq!(wait_for(&mut attach).code(), Some(1));
    drop(input);

    let taker = finish(taker);
    assert!(taker.status.success(), "{taker:?}");
    assert_eq!(stdout(&taker), "fake answer: taken over\n");
    // B released its claim; the refused prompts were never queued.
    let shown = home.json(&["session", "show", "drv", "--json"]);
    assert!(shown["driver"]["exec_id"].is_null(), "{shown}");
    let texts: Vec<String> = prompts(&shown)
        .iter()
        .map(|prompt| prompt["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["@fake delay=3000\ntaken over"]);

    home.stop_daemon();
}

/// One JSON-RPC request on a raw socket connection; the response.
fn rpc(
    stream: &mut BufReader<std::os::unix::net::UnixStream>,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let writer = stream.get_mut();
    writeln!(writer, "{request}").unwrap();
    writer.flush().unwrap();
    loop {
        let mut line = String::new();
        assert!(
            stream.read_line(&mut line).unwrap() > 0,
            "the daemon hung up"
        );
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == id {
            return message;
        }
    }
}

#[test]
fn a_stale_generation_is_refused_over_the_socket() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("raw");

    // A: a program on the socket that claims the session.
    let socket = std::os::unix::net::UnixStream::connect(home.path().join("corral.sock")).unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut a = BufReader::new(socket);
    let init = rpc(
        &mut a,
        1,
        "initialize",
        json!({ "protocol": 1, "client": "test", "exec_id": "exec-a-of-the-test" }),
    );
    assert!(init.get("result").is_some(), "{init}");
    let claim = rpc(&mut a, 2, "driver.claim", json!({ "session": "raw" }));
    let generation = claim["result"]["generation"].as_i64().expect("a claim");

    // B takes over through the CLI.
    assert_eq!(
        home.ok(&["send", "raw", "mine now", "--wait", "--take-over"]),
        "fake answer: mine now\n"
    );

    // A's send with its old generation is refused.
    let refused = rpc(
        &mut a,
        3,
        "prompt.send",
        json!({ "session": "raw", "text": "stale", "generation": generation }),
    );
    assert_eq!(refused["error"]["code"], -32007, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("superseded by exec"), "{message}");
    drop(a);
    let history = home.json(&["history", "raw", "--json"]);
    assert_eq!(prompts(&history).len(), 1, "{history}");

    home.stop_daemon();
}

/// A NUL character, which PostgreSQL's text cannot hold and no argv can carry, in a prompt
/// sent over the socket and in an engine's answer: each is stored and read back as U+FFFD,
/// the same on both stores, and the session goes on. (On PostgreSQL the answer's NUL had its
/// prompt's end refused, and the session stayed running for good.)
#[test]
fn a_nul_in_a_prompt_or_an_answer_is_kept_as_a_replacement_character() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("nul");
    home.add_project("shell", &home.work(), "command");
    home.new_session(&["shell", "--title", "printer"]);

    let socket = std::os::unix::net::UnixStream::connect(home.path().join("corral.sock")).unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut client = BufReader::new(socket);
    let init = rpc(&mut client, 1, "initialize", json!({ "protocol": 1 }));
    assert!(init.get("result").is_some(), "{init}");
    let sent = rpc(
        &mut client,
        2,
        "prompt.send",
        json!({ "session": "nul", "text": "one\u{0}two" }),
    );
    assert_eq!(sent["result"]["text"], "one\u{FFFD}two", "{sent}");
    let prompt = sent["result"]["id"].clone();
    let ended = rpc(&mut client, 3, "prompt.wait", json!({ "prompt": prompt }));
    assert_eq!(ended["result"]["status"], "done", "{ended}");
    // The fake engine answers with the prompt's first line: it was given the character.
    assert_eq!(
        ended["result"]["answer"], "fake answer: one\u{FFFD}two",
        "{ended}"
    );

    // An engine whose answer holds a NUL byte.
    assert_eq!(
        home.ok(&["send", "printer", "printf 'a\\000b\\n'", "--wait"]),
        "a\u{FFFD}b\n"
    );
    // The session was not left running: its next prompt runs.
    assert_eq!(
        home.ok(&["send", "printer", "echo next", "--wait"]),
        "next\n"
    );
    let history = home.json(&["history", "printer", "--json"]);
    let answers: Vec<Value> = prompts(&history)
        .iter()
        .map(|prompt| prompt["answer"].clone())
        .collect();
    assert_eq!(answers, [json!("a\u{FFFD}b"), json!("next")], "{history}");
    home.stop_daemon();
}

/// An engine corral does not know is refused where its name is read, in one line naming the
/// known ones, by `project add`, `project set` and `session new` alike; nothing is stored.
#[test]
fn an_unknown_engine_is_refused_with_the_known_ones_and_nothing_is_stored() {
    let home = TestHome::new();
    home.start_daemon();
    let work = home.work();
    std::fs::create_dir_all(&work).unwrap();
    let dir = work.to_str().unwrap();
    for refused in [
        home.fails(&["project", "add", "p", dir, "--engine", "gpt"], 1),
        {
            home.add_project("p", &work, "fake");
            home.fails(&["project", "set", "p", "--engine", "gpt"], 1)
        },
        home.fails(&["session", "new", "p", "--engine", "gpt"], 1),
    ] {
        assert!(refused.contains("unknown engine 'gpt'"), "{refused}");
        assert!(
            refused.contains("codex") && refused.contains("fake"),
            "{refused}"
        );
        assert_eq!(refused.lines().count(), 1, "{refused}");
    }
    let projects = home.json(&["project", "list", "--json"]);
    assert_eq!(projects.as_array().unwrap().len(), 1, "{projects}");
    assert_eq!(projects[0]["engine"], "fake", "{projects}");
    let sessions = home.json(&["session", "list", "--json"]);
    assert_eq!(sessions.as_array().unwrap().len(), 0, "{sessions}");
    home.stop_daemon();
}

#[test]
fn config_refuses_unknown_names_and_bad_values_with_exit_2() {
    let home = TestHome::new();
    home.start_daemon();

    let unknown = home.fails(&["config", "set", "no.such", "1"], 2);
    assert!(unknown.contains("unknown setting 'no.such'"), "{unknown}");
    assert!(
        unknown.contains("slots.total") && unknown.contains("daemon.autostart"),
        "{unknown}"
    );
    assert_eq!(unknown.lines().count(), 1, "{unknown}");
    let bad = home.fails(&["config", "set", "daemon.autostart", "maybe"], 2);
    assert!(bad.contains("true or false"), "{bad}");
    let zero = home.fails(&["config", "set", "slots.fake", "0"], 2);
    assert!(zero.contains("at least 1"), "{zero}");
    let engine = home.fails(&["config", "set", "slots.nosuch", "2"], 2);
    assert!(
        engine.contains("codex") && engine.contains("fake"),
        "{engine}"
    );
    let get = home.fails(&["config", "get", "no.such"], 2);
    assert!(
        get.contains("unknown setting") && get.contains("slots.total"),
        "{get}"
    );
    home.fails(&["config", "unset", "no.such"], 2);

    // A good value is stored, read back and applied at once.
    assert_eq!(
        home.ok(&["config", "set", "slots.fake", "2"]),
        "slots.fake = 2\n"
    );
    assert_eq!(home.ok(&["config", "get", "slots.fake"]), "2\n");
    assert_eq!(home.ok(&["config", "get", "slots.codex"]), "3\n");
    let status = home.json(&["status", "--json"]);
    assert_eq!(
        status["slots"]["limits"]["per_engine"]["fake"], 2,
        "{status}"
    );
    let list = home.json(&["config", "list", "--json"]);
    assert!(list["stored"]
        .as_array()
        .unwrap()
        .contains(&json!({ "name": "slots.fake", "value": "2" })));
    assert!(home.ok(&["config", "list"]).contains("slots.fake"));
    home.ok(&["config", "unset", "slots.fake"]);
    assert_eq!(home.ok(&["config", "get", "slots.fake"]), "3\n");

    home.stop_daemon();
}

#[test]
fn ambiguous_selectors_list_their_candidates() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    let one = home.session("twin");
    let two = home.session("twin");

    for command in [
        vec!["session", "show", "twin"],
        vec!["send", "twin", "hello"],
        vec!["history", "twin"],
        vec!["watch", "twin"],
    ] {
        let error = home.fails(&command, 1);
        assert!(
            error.contains("Ambiguous session 'twin'"),
            "{command:?}: {error}"
        );
        assert!(error.contains(&one) && error.contains(&two), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
    // A prefix both share is ambiguous too; a unique one resolves.
    let common: String = one
        .chars()
        .zip(two.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    let error = home.fails(&["session", "show", &common], 1);
    assert!(error.contains(&one) && error.contains(&two), "{error}");
    let unique = &one[..one.len() - 1];
    let shown = home.json(&["session", "show", unique, "--json"]);
    assert_eq!(shown["session"]["id"], one.as_str());
    assert!(home
        .fails(&["session", "show", "nosuch"], 1)
        .contains("No session matches"));

    // Projects: a shared id prefix lists both, with their names.
    home.ok(&["project", "add", "q", home.work().to_str().unwrap()]);
    let error = home.fails(&["project", "show", "0"], 1);
    assert!(error.contains("(p)") && error.contains("(q)"), "{error}");

    home.stop_daemon();
}

#[test]
fn auto_start_says_so_once_and_no_spawn_does_not_start() {
    let home = TestHome::new();

    // --no-spawn with no daemon: one line, exit 1, nothing started. (Commands that only look
    // never start one anyway: tests/it/home_safety.rs.)
    for args in [
        vec!["config", "set", "slots.total", "4", "--no-spawn"],
        vec!["--no-spawn", "session", "new", "p"],
    ] {
        let error = home.fails(&args, 1);
        assert_eq!(error.lines().count(), 1, "{error}");
        assert!(error.contains("no daemon answers"), "{error}");
    }
    assert!(home.daemon_pid().is_none());
    assert!(processes_of(home.path()).is_empty());

    // The first command that changes something starts one and says so in one line.
    let output = home.run(&["config", "set", "slots.total", "4"]);
    assert!(output.status.success(), "{output:?}");
    let said = stderr(&output);
    assert_eq!(said.lines().count(), 1, "{said}");
    let pid = home.daemon_pid().expect("a pid file");
    assert!(said.contains(&format!("started one (pid {pid})")), "{said}");
    assert!(home.ok(&["status"]).contains(&format!("pid {pid}")));
    // The leftover check sees the daemon (so it would see one left behind).
    assert!(processes_of(home.path()).contains(&pid));
    // The next one finds it and says nothing.
    let output = home.run(&["config", "set", "slots.total", "5"]);
    assert!(output.status.success());
    assert_eq!(stderr(&output), "");

    // daemon.autostart = false: no daemon is started either.
    home.ok(&["config", "set", "daemon.autostart", "false"]);
    home.stop_daemon();
    let error = home.fails(&["config", "set", "slots.total", "6"], 1);
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(home.daemon_pid().is_none());
    assert!(processes_of(home.path()).is_empty());
}

#[test]
fn completions_print_a_script() {
    let home = TestHome::new();
    let script = home.ok(&["completions", "bash"]);
    assert!(script.contains("_corral()"), "{script}");
    assert!(script.contains("complete -F _corral"), "{script}");
    for command in ["attach", "watch", "send", "history", "config"] {
        assert!(script.contains(command), "{command} missing");
    }
    assert!(home.ok(&["completions", "zsh"]).contains("#compdef corral"));
    home.fails(&["completions", "tcsh"], 2);
    // No daemon was needed.
    assert!(home.daemon_pid().is_none());
    assert!(!home.path().join("corral.sock").exists());
}

#[test]
fn projects_and_sessions_are_managed_through_the_daemon() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();

    // A relative path is the CLI's, not the daemon's.
    let web = home.json(&[
        "project",
        "add",
        "web",
        "work",
        "--engine",
        "fake",
        "--model",
        "m1",
        "--group",
        "g1",
        "--group",
        "g2",
        "--instructions",
        "be brief",
        "--json",
    ]);
    let work = home.work().canonicalize().unwrap();
    assert_eq!(web["path"], work.to_str().unwrap());
    assert_eq!(web["groups"], json!(["g1", "g2"]));
    assert_eq!(web["instructions"], "be brief");
    assert_eq!(web["full_access"], false);
    assert!(home
        .fails(&["project", "add", "web", "work"], 1)
        .contains("exists already"));
    assert!(home
        .fails(&["project", "add", "x", "no/such/dir"], 1)
        .contains("not an existing"));

    let set = home.json(&[
        "project",
        "set",
        "web",
        "--full-access",
        "true",
        "--remote",
        "true",
        "--no-groups",
        "--json",
    ]);
    assert_eq!(set["full_access"], true);
    assert_eq!(set["kind"], "remote");
    assert_eq!(set["groups"], json!([]));
    assert_eq!(set["model"], "m1");
    home.fails(&["project", "set", "web"], 2);
    home.fails(&["project", "set", "web", "--full-access", "maybe"], 2);
    assert!(home
        .ok(&["project", "show", "web"])
        .contains("full (no sandbox"));
    assert!(home.ok(&["project", "list"]).contains("web"));
    home.ok(&["project", "archive", "web"]);
    let names = |args: &[&str]| -> Vec<String> {
        home.json(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&["project", "list", "--json"]), ["p"]);
    assert_eq!(names(&["project", "list", "--all", "--json"]), ["p", "web"]);

    let session = home.json(&[
        "session", "new", "p", "--title", "one", "--effort", "high", "--task", "T-1", "--wave",
        "w1", "--json",
    ]);
    assert_eq!(session["reasoning_effort"], "high");
    assert_eq!(session["task"], "T-1");
    assert_eq!(session["engine"], "fake");
    assert!(session["wave_id"].is_string(), "{session}");
    let id = session["id"].as_str().unwrap();
    // Without --json, `session new` prints the id alone.
    let plain = home.ok(&["session", "new", "p"]);
    assert_eq!(plain.trim().len(), id.len(), "{plain}");
    assert!(home
        .ok(&["session", "rename", "one", "uno"])
        .contains("'uno'"));
    assert!(home.ok(&["session", "list"]).contains("uno"));
    let listed = home.json(&["session", "list", "--project", "p", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    home.ok(&["session", "archive", "uno"]);
    assert_eq!(
        home.json(&["session", "list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        home.json(&["session", "list", "--all", "--json"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(home
        .fails(&["send", "uno", "hello"], 1)
        .contains("archived"));
    assert!(home
        .ok(&["session", "show", id])
        .contains("title:     uno (human)"));

    let status = home.json(&["status", "--json"]);
    assert_eq!(
        status["daemon"]["pid"].as_i64(),
        home.daemon_pid().map(i64::from)
    );
    assert_eq!(status["sessions"], 2);
    let text = home.ok(&["status"]);
    assert!(text.contains("sessions: 2"), "{text}");

    home.stop_daemon();
}

#[test]
fn a_stalled_watcher_misses_nothing_and_repeats_nothing() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("flood");

    // A follower that nobody reads for a while: its pipe, its stream and the daemon's buffers
    // fill up, and 30,000 events run well past the daemon's broadcast buffer (16,384): the
    // daemon says `events.lagged` and the follower subscribes again from where it stopped.
    let mut follower = home
        .corral(&["watch", "flood", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let errors = lines_of(follower.stderr.take().unwrap());
    let mut out = follower.stdout.take().unwrap();
    // The session is never held up by the stalled reader.
    assert_eq!(
        home.ok(&["send", "flood", "@fake deltas=30000\nflood", "--wait"]),
        "fake answer: flood\n"
    );
    let last = home.json(&["session", "show", "flood", "--json"])["session"]["last_event_seq"]
        .as_i64()
        .unwrap();
    assert!(last > 30_000, "{last}");
    // Now read: every event once, in order.
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(&mut out);
        let mut expected = 1;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = sender.send(Err(format!("ended before #{expected}")));
                return;
            }
            let seq: i64 = line
                .split_whitespace()
                .next()
                .and_then(|word| word.strip_prefix('#'))
                .and_then(|seq| seq.parse().ok())
                .unwrap_or(-1);
            if seq != expected {
                let _ = sender.send(Err(format!("#{expected} expected, got {line}")));
                return;
            }
            if seq == last {
                let _ = sender.send(Ok(()));
                return;
            }
            expected += 1;
        }
    });
    let read = receiver
        .recv_timeout(DEADLINE)
        .expect("the follower printed everything");
    unsafe {
        libc::kill(follower.id() as i32, libc::SIGTERM);
    }
    assert_eq!(wait_for(&mut follower).code(), Some(143));
    let said: Vec<String> = errors.try_iter().collect();
    read.unwrap_or_else(|error| panic!("{error}; stderr {said:?}"));

    home.stop_daemon();
}

#[test]
fn two_first_commands_at_once_share_one_daemon() {
    let home = TestHome::new();
    // The store exists (a first command made it); no daemon runs.
    home.ok(&["monitor", "list", "--all"]);
    let children: Vec<Child> = (0..2)
        .map(|_| {
            home.corral(&["config", "set", "slots.total", "3"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children.into_iter().map(finish).collect();
    let mut announced = 0;
    for output in &outputs {
        assert!(output.status.success(), "{output:?}");
        announced += stderr(output).matches("started one").count();
    }
    // One daemon serves both: the one that was announced, and it is the one running.
    assert_eq!(announced, 1, "{outputs:?}");
    let status = home.json(&["status", "--json"]);
    assert_eq!(
        home.daemon_pid().map(i64::from),
        status["daemon"]["pid"].as_i64()
    );

    home.stop_daemon();
}

#[test]
fn app_server_sessions_compact_steer_and_show_their_child_in_status() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    home.ok(&["config", "set", "engines.codex-app-server.path", fake]);
    let session = home.json(&[
        "session",
        "new",
        "p",
        "--engine",
        "codex-app-server",
        "--title",
        "app",
        "--json",
    ]);
    assert_eq!(session["engine"], "codex-app-server");
    let answer = home.ok(&[
        "send",
        "app",
        "@fake answer=from the app server\nhello",
        "--wait",
    ]);
    assert!(answer.contains("from the app server"), "{answer}");

    // Steer a hanging turn: the turn ends with the steering text.
    let sent = home.ok(&["send", "app", "@fake hang\nwork"]);
    let prompt = sent.split_whitespace().next().unwrap().to_string();
    wait_until("the turn runs", || {
        let history = home.json(&["history", "app", "--json"]);
        runs(&history).len() >= 2
    });
    let mut steered = false;
    for _ in 0..50 {
        if home
            .run(&["steer", "app", "more", "context"])
            .status
            .success()
        {
            steered = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(steered, "steer was refused while the turn ran");
    wait_until("the steered turn ends", || {
        let history = home.json(&["history", "app", "--json"]);
        prompts(&history)
            .iter()
            .any(|p| p["id"] == prompt.as_str() && p["status"] == "done")
    });
    let history = home.json(&["history", "app", "--json"]);
    let steered = prompts(&history)
        .into_iter()
        .find(|p| p["id"] == prompt.as_str())
        .unwrap();
    assert_eq!(steered["answer"], "steered: more context", "{steered}");

    let compacted = home.ok(&["compact", "app"]);
    assert!(compacted.contains("compacted 2 exchange(s)"), "{compacted}");
    let status = home.json(&["status", "--json"]);
    let servers = status["app_servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{status}");
    assert!(servers[0]["pid"].as_u64().is_some(), "{status}");
    assert_eq!(servers[0]["status"], "running");

    // A fake session cannot be steered or compacted.
    home.session("plain");
    let refused = home.fails(&["compact", "plain"], 1);
    assert!(
        refused.contains("only codex-app-server sessions"),
        "{refused}"
    );
    home.stop_daemon();
}

#[test]
fn the_agents_own_commands_are_recorded_under_the_driver() {
    let home = TestHome::new();
    home.start_daemon();
    home.setup_fake();
    home.session("driven");
    let corral = env!("CARGO_BIN_EXE_corral");
    let prompt = format!("@fake run={corral} monitor list --all --limit 1\nwork");
    home.ok(&["send", "driven", &prompt, "--wait"]);
    // The agent's call: made for the session, via the agent, under the `send --wait` exec.
    let call = home.sql(
        "SELECT parent_exec_id, caller_session_id, via_agent FROM execs \
         WHERE command LIKE '%monitor%list%--limit%' AND command NOT LIKE '%\"send\"%'",
    );
    let [parent, caller, via_agent] = &call.first().expect("the agent's call is recorded")[..]
    else {
        panic!("{call:?}")
    };
    let parent = parent.as_str().expect("the call has a parent exec");
    let driver = home.sql(&format!(
        "SELECT command FROM execs WHERE id = {}",
        common::store::quoted(parent)
    ));
    let driver = driver[0][0].as_str().expect("the parent exec's command");
    assert!(
        driver.contains("\"send\"") && driver.contains("--wait"),
        "{driver}"
    );
    let session = home.sql("SELECT id FROM sessions WHERE title = 'driven'");
    assert_eq!(caller, &session[0][0]);
    assert!(caller.is_string(), "{caller}");
    assert_eq!(via_agent, &json!(1), "via_agent");
    home.stop_daemon();
}

/// Cancelling a *queued* prompt ends every wait on it: `send --wait` returns at once (exit 1,
/// saying it was cancelled) and lets its driver claim go, and the HTTP wait answers.
#[test]
fn cancelling_a_queued_prompt_ends_every_wait_on_it() {
    let home = TestHome::new();
    home.setup_fake();
    home.config(&[("http.listen", "127.0.0.1:0")]);
    let session = home.session("q");
    // The first prompt runs a while; the next ones queue behind it.
    home.ok(&["send", "q", "@fake delay=20000\nlong"]);
    let waiting = home
        .corral(&["send", "q", "queued behind", "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let queued_id = |text: &str| {
        let history = home.json(&["history", "q", "--json"]);
        prompts(&history)
            .into_iter()
            .find(|prompt| prompt["text"] == text && prompt["status"] == "queued")
            .and_then(|prompt| prompt["id"].as_str().map(str::to_string))
    };
    let mut waited = None;
    wait_until("the waiting send's prompt is queued", || {
        waited = queued_id("queued behind");
        waited.is_some()
    });
    let waited = waited.unwrap();
    wait_until("the waiting send drives the session", || {
        home.json(&["session", "show", "q", "--json"])["driver"]["exec_id"].is_string()
    });
    home.ok(&["send", "q", "also queued"]);
    let also = queued_id("also queued").expect("queued");
    let web = home.json(&["web", "--json"]);
    let listen = web["listen"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(home.path().join("http.token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let http_wait = std::thread::spawn(move || {
        common::browser::request(
            &listen,
            "GET",
            &format!("/api/v1/prompts/{also}/wait"),
            &[("Authorization", &bearer)],
            None,
        )
    });

    home.ok(&["cancel", &waited]);
    let output = finish(waiting);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("cancelled"), "{output:?}");
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert!(shown["driver"]["exec_id"].is_null(), "released: {shown}");

    let also = queued_id("also queued").expect("still queued");
    home.ok(&["cancel", &also]);
    let answered = http_wait.join().unwrap();
    assert_eq!(answered.status, 200, "{answered:?}");
    assert_eq!(answered.json()["status"], "cancelled", "{answered:?}");
    home.ok(&["cancel", "q"]);
    home.stop_daemon();
}

/// A refusal is never a silent success, on every surface of the CLI: `send --wait` prints the
/// answer and says `denied: N` on stderr, `history` shows `done · denied: N` (and `--json` the
/// count), `watch` shows each `tool.denied` with its target and the end with the count.
/// (The claude form of the fake engine reports refusals as claude does; the real CLIs are
/// tests/it/real_engines.rs's.)
#[test]
fn a_prompt_done_with_refusals_says_so_everywhere() {
    let home = TestHome::new();
    home.setup_fake();
    home.config(&[(
        "engines.claude.path",
        env!("CARGO_BIN_EXE_corral-fake-engine"),
    )]);
    home.add_project("c", &home.work(), "claude");
    home.new_session(&["c", "--title", "refused"]);
    let output = home.run(&[
        "send",
        "refused",
        "@fake deny=Write:/elsewhere/a.txt\n@fake deny=Bash:rm -rf build\n@fake answer=Partly done.\ngo",
        "--wait",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "Partly done.\n");
    let said = stderr(&output);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.starts_with("corral: denied: 2 "), "{said}");
    let history = home.ok(&["history", "refused"]);
    assert!(history.contains("done · denied: 2"), "{history}");
    let json = home.json(&["history", "refused", "--json"]);
    assert_eq!(json["prompts"][0]["denied"], 2, "{json}");
    let watch = home.ok(&["watch", "refused"]);
    assert!(
        watch.contains("tool.denied Write /elsewhere/a.txt"),
        "{watch}"
    );
    assert!(watch.contains("tool.denied Bash rm -rf build"), "{watch}");
    assert!(
        watch.contains("prompt.done denied: 2 · Partly done."),
        "{watch}"
    );
    // A prompt without refusals says nothing of them.
    let clean = home.run(&["send", "refused", "@fake answer=All done.\nagain", "--wait"]);
    assert_eq!(stderr(&clean), "", "{clean:?}");
    home.stop_daemon();
}

/// Honest states (issue 32, item 8), one vocabulary computed by the daemon: a session blocked
/// on its project's lock is `waiting-for-slot` saying what holds it, one in a rate limit's
/// backoff is `backing-off` until a time, a new one is `idle` with no prompt yet, an answered
/// one `idle` too; `monitor`, `overview`, `session show` and the HTTP API say the same.
#[test]
fn every_surface_says_the_same_honest_state() {
    let home = TestHome::new();
    home.setup_fake();
    home.config(&[("retry.rate_limit_delays", "30")]);
    home.session("holder");
    home.session("blocked");
    let fresh = home.session("fresh");
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    home.add_project("q", &elsewhere, "fake");
    home.ok(&["send", "holder", "@fake hang\nhold the lock"]);
    home.ok(&["send", "blocked", "wait for it"]);
    home.ok(&[
        "send",
        &home.new_session(&["q", "--title", "backoff"]),
        "@fake rate-limit=5\nslow down",
    ]);
    let state_of = |title: &str| -> Value {
        let overview = home.json(&["monitor", "--json"]);
        overview["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["title"] == title)
            .cloned()
            .unwrap_or_else(|| panic!("no {title} in {overview}"))
    };
    wait_until("the blocked session waits for the lock", || {
        state_of("blocked")["state"] == "waiting-for-slot"
    });
    let blocked = state_of("blocked");
    assert_eq!(
        blocked["reason"], "waits for a fake slot: project p locked by session \"holder\"",
        "{blocked}"
    );
    assert_eq!(state_of("holder")["state"], "working");
    wait_until("the limited session backs off", || {
        state_of("backoff")["state"] == "backing-off"
    });
    let backoff = state_of("backoff");
    assert_eq!(backoff["reason"], "rate limit: retry 1/1", "{backoff}");
    let until = backoff["until"].as_i64().expect("until when");
    assert!(
        until > backoff["last_activity_at"].as_i64().unwrap(),
        "{backoff}"
    );
    let fresh_state = state_of("fresh");
    assert_eq!(fresh_state["state"], "idle");
    assert_eq!(fresh_state["reason"], "no prompt yet");
    // The same word on `session show` and its text, and in the table.
    let shown = home.json(&["session", "show", "blocked", "--json"]);
    assert_eq!(shown["state"]["state"], "waiting-for-slot", "{shown}");
    let text = home.ok(&["session", "show", &fresh]);
    assert!(text.contains("state:     idle · no prompt yet"), "{text}");
    let table = home.ok(&["monitor"]);
    assert!(
        table
            .lines()
            .any(|line| line.contains("backing-off") && line.contains("rate limit: retry 1/1")),
        "{table}"
    );
    home.ok(&["cancel", "backoff"]);
    home.ok(&["cancel", "holder"]);
    wait_until("the blocked one ran and answered", || {
        state_of("blocked")["state"] == "idle"
    });
    assert!(state_of("blocked")["reason"]
        .as_str()
        .unwrap()
        .starts_with("answered: fake answer"));
    home.stop_daemon();
}

/// The daemon's front door (issue 34, item 4): `daemon status` says whether one serves the
/// home (exit 3 when none); `start` starts one, once; `stop` says what happens to a running
/// prompt (back at the head of its queue), returns once the daemon is gone, and the prompt
/// runs again under the next daemon; `restart` serves from a new process; `stop --now`.
#[test]
fn the_daemon_starts_stops_restarts_and_says_so() {
    let home = DaemonHome::new();
    let session = home.fake_session(
        env!("CARGO_BIN_EXE_corral-fake-engine"),
        "front",
        &[
            ("daemon.shutdown_grace_ms", "300"),
            ("cancel.grace_ms", "300"),
        ],
    );
    // Making the session started one.
    if let Some(pid) = home.daemon_pid().filter(|&pid| alive(pid)) {
        let stopped = home.ok(&["daemon", "stop"]);
        assert_eq!(stopped, format!("corral daemon stopped (pid {pid})\n"));
    }
    let none = home.run(&["daemon", "status"]);
    assert_eq!(none.status.code(), Some(3), "{none:?}");
    assert!(stdout(&none).contains("no daemon runs for"), "{none:?}");
    let stopped = home.ok(&["daemon", "stop"]);
    assert!(stopped.starts_with("no daemon runs for"), "{stopped}");

    let started = home.ok(&["daemon", "start"]);
    assert!(
        started.starts_with("corral daemon started (pid "),
        "{started}"
    );
    let pid = home.daemon_pid().expect("the daemon's pid file");
    let again = home.ok(&["daemon", "start"]);
    assert_eq!(again, format!("corral daemon already runs (pid {pid})\n"));
    let runs = home.ok(&["daemon", "status"]);
    assert!(
        runs.starts_with(&format!("corral daemon runs: pid {pid}, version ")),
        "{runs}"
    );

    // A prompt that runs while the daemon stops goes back to its queue, and runs again.
    let sent = home.ok(&["send", &session, "@fake delay=60000\nlong", "--json"]);
    let prompt: Value = serde_json::from_str(&sent).unwrap();
    let prompt = prompt["id"].as_str().unwrap().to_string();
    wait_until("the prompt runs", || {
        home.json(&["history", &session, "--json"])["prompts"][0]["status"] == "running"
    });
    let output = home.run(&["daemon", "stop"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!("corral daemon stopped (pid {pid})\n")
    );
    assert!(
        stderr(&output).contains(
            "1 session works: its prompt goes back to the head of its queue if it has not ended within 300 ms"
        ),
        "{output:?}"
    );
    assert!(!alive(pid), "stop returned before the daemon was gone");
    let gone = home.run(&["daemon", "status"]);
    assert_eq!(gone.status.code(), Some(3), "{gone:?}");
    assert_eq!(
        home.json(&["history", &session, "--json"])["prompts"][0]["status"],
        "queued"
    );

    // Restarted: a new process serves, and the prompt runs again.
    home.ok(&["daemon", "start"]);
    let first = home.daemon_pid().unwrap();
    let restarted = home.ok(&["daemon", "restart"]);
    assert!(
        restarted.starts_with(&format!(
            "corral daemon stopped (pid {first})\ncorral daemon started (pid "
        )),
        "{restarted}"
    );
    let second = home.daemon_pid().unwrap();
    assert_ne!(first, second);
    assert!(!alive(first));
    wait_until("the prompt runs again", || {
        home.json(&["history", &session, "--json"])["prompts"][0]["status"] == "running"
    });
    let history = home.json(&["history", &session, "--json"]);
    assert_eq!(history["prompts"][0]["id"], prompt.as_str(), "{history}");

    let now = home.run(&["daemon", "stop", "--now"]);
    assert_eq!(
        stdout(&now),
        format!("corral daemon stopped (pid {second})\n")
    );
    assert!(
        stderr(&now).contains("goes back to the head of its queue at once"),
        "{now:?}"
    );
    assert!(!alive(second));
}

/// Under systemd (`Type=notify`, docs/corral.service) the daemon says `READY=1` (with its
/// pid) once it serves, and `STOPPING=1` when asked to stop; its engines never inherit the
/// socket. The unit file itself passes `systemd-analyze verify` where that tool is installed.
#[test]
fn the_daemon_tells_systemd_it_is_ready_and_then_stopping() {
    use std::os::unix::net::UnixDatagram;
    let home = DaemonHome::new();
    let notify_dir = tempfile::tempdir().unwrap();
    let notify_path = notify_dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut daemon = home
        .corral(&["daemon"])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buffer = [0u8; 256];
    let size = notify.recv(&mut buffer).expect("READY=1 within a minute");
    let ready = String::from_utf8_lossy(&buffer[..size]).into_owned();
    assert_eq!(ready, format!("READY=1\nMAINPID={}", daemon.id()));
    // Serving: a client is answered.
    assert!(home
        .ok(&["daemon", "status"])
        .starts_with("corral daemon runs"));
    common::daemon::kill(daemon.id() as i32, libc::SIGTERM);
    let size = notify
        .recv(&mut buffer)
        .expect("STOPPING=1 within a minute");
    assert_eq!(&buffer[..size], b"STOPPING=1");
    assert!(wait_for(&mut daemon).success());

    let Some(analyze) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("systemd-analyze"))
        .find(|path| path.is_file())
    else {
        eprintln!("skipped: systemd-analyze is not installed, the unit file is not verified");
        return;
    };
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/corral.service"))
        .unwrap()
        .replace("%h/.cargo/bin/corral", env!("CARGO_BIN_EXE_corral"));
    let unit_path = notify_dir.path().join("corral.service");
    std::fs::write(&unit_path, unit).unwrap();
    let verified = std::process::Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&unit_path)
        .output()
        .unwrap();
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{verified:?}"
    );
}

/// `CORRAL_LOG` filters the daemon's log per module, as `RUST_LOG` is written: here the
/// daemon's own lines at info and nothing else below warn; a value that does not parse is
/// said once, and info stands.
#[test]
fn the_daemons_log_is_filtered_per_module() {
    let run = |filter: &str| {
        let home = DaemonHome::new();
        let mut daemon = home
            .corral(&["daemon"])
            .env("CORRAL_LOG", filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(daemon.stderr.take().unwrap());
        let (ready, mut log) = next_line(&lines, |line| {
            line.contains("corral::daemon: ready")
                .then(|| line.to_string())
        })
        .unwrap_or_else(|seen| panic!("no ready line: {seen:#?}"));
        log.push(ready);
        home.ok(&["daemon", "stop"]);
        assert!(wait_for(&mut daemon).success());
        // To the end of its stderr: the daemon is gone.
        log.extend(lines.iter());
        log.join("\n")
    };
    let log = run("corral::daemon=info,warn");
    assert!(log.contains("daemon stopped"), "{log}");
    assert!(!log.contains("boot reconciled"), "{log}");
    let log = run("info");
    assert!(log.contains("daemon stopped"), "{log}");
    let log = run("corral=notalevel");
    assert!(log.contains("CORRAL_LOG was not understood"), "{log}");
    assert!(log.contains("daemon stopped"), "{log}");
}

/// A line corral cannot write (stderr on a full disk: `/dev/full`) is dropped, never a crash:
/// a daemon whose home gets tightened (a note on stderr) serves all the same and stops when
/// asked.
#[test]
fn a_full_stderr_does_not_take_the_daemon_down() {
    use std::os::unix::fs::PermissionsExt;
    let home = DaemonHome::new();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut daemon = home
        .corral(&["daemon"])
        .stdout(Stdio::null())
        .stderr(full)
        .spawn()
        .unwrap();
    // The daemon alone touches the home until it serves (another command would tighten
    // the home first, and say so on its own stderr).
    let socket = home.path().join("corral.sock");
    wait_until("the daemon serves or ends", || {
        socket.exists() || matches!(daemon.try_wait(), Ok(Some(_)))
    });
    assert_eq!(daemon.try_wait().unwrap(), None, "the daemon ended");
    assert!(home
        .ok(&["daemon", "status"])
        .starts_with("corral daemon runs"));
    let stopped = home.ok(&["daemon", "stop"]);
    assert!(stopped.starts_with("corral daemon stopped"), "{stopped}");
    assert!(wait_for(&mut daemon).success());
}

/// Two `project add` of one name at once: one adds it, the other is told it exists already
/// (in one line, exit 1), never a constraint's words; ten times over.
#[test]
fn two_adds_of_one_project_name_at_once_are_told_it_exists() {
    let home = DaemonHome::new();
    home.start_daemon();
    for round in 0..10 {
        let name = format!("twin{round}");
        let work = home.work();
        let work = work.to_str().unwrap();
        let both: Vec<Child> = (0..2)
            .map(|_| {
                home.corral(&["project", "add", &name, work])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outputs: Vec<Output> = both.into_iter().map(finish).collect();
        let added = outputs
            .iter()
            .filter(|output| output.status.success())
            .count();
        assert_eq!(added, 1, "{outputs:?}");
        let refused = outputs
            .iter()
            .find(|output| !output.status.success())
            .unwrap();
        assert_eq!(refused.status.code(), Some(1), "{refused:?}");
        assert_eq!(
            stderr(refused),
            format!("corral: a project named '{name}' exists already\n")
        );
    }
    home.stop_daemon();
}
