//! `corral connect SESSION --socket PATH`: a real daemon on a home of its own, the fake engine,
//! a `corral connect` process, and native clients that speak codex's app-server protocol on
//! raw Unix sockets. Every test stops its `corral connect` and its daemon, and checks that no
//! process of its home is left.

use crate::common;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::ops::Deref;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{kill, lines_of, wait_until, DaemonHome, DEADLINE};

const CORRAL: &str = env!("CARGO_BIN_EXE_corral");
const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A daemon home with the fake engine and a project `p`, and the native socket's place.
struct Home(DaemonHome);

impl Deref for Home {
    type Target = DaemonHome;

    fn deref(&self) -> &DaemonHome {
        &self.0
    }
}

impl Home {
    fn new() -> Self {
        Home(DaemonHome::new())
    }

    fn socket(&self) -> PathBuf {
        self.path().join("native.sock")
    }

    /// A daemon, the fake engine, short delays, and a project `p` on the fake engine.
    fn start(&self) {
        self.start_daemon();
        self.config(&[
            ("engines.fake.path", FAKE),
            ("engines.codex-app-server.path", FAKE),
            ("cancel.grace_ms", "500"),
            ("daemon.shutdown_grace_ms", "500"),
        ]);
        self.add_project("p", &self.work(), "fake");
    }

    /// A new session of project `p` on `engine`: its id.
    fn session(&self, title: &str, engine: &str) -> String {
        self.new_session(&["p", "--engine", engine, "--title", title])
    }

    /// The session's driver claim.
    fn driver(&self, session: &str) -> Value {
        self.json(&["session", "show", session, "--json"])["driver"].clone()
    }

    /// The exec holding the session's driver claim.
    fn driver_exec(&self, session: &str) -> String {
        self.driver(session)["exec_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no driver of {session}"))
            .to_string()
    }

    /// An exec row: (command, parent, outcome, exit code).
    fn exec(&self, id: &str) -> (Value, Option<String>, Option<String>, Option<i64>) {
        let row = self.store().row(&format!(
            "SELECT command, parent_exec_id, outcome, exit_code FROM execs WHERE id = {}",
            common::store::quoted(id)
        ));
        let text = |value: &Value| value.as_str().map(str::to_string);
        (
            serde_json::from_str(row[0].as_str().expect("a command")).unwrap(),
            text(&row[1]),
            text(&row[2]),
            row[3].as_i64(),
        )
    }

    /// Stops the daemon and waits until no process of this home is left.
    fn stop(&self) {
        self.stop_daemon();
    }

    /// `corral connect SESSION --socket PATH`, once it says where it listens.
    fn connect(&self, session: &str, socket: &Path) -> Connect {
        let mut child = self
            .corral(&["connect", session, "--socket", socket.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corral connect starts");
        let stdout = lines_of(child.stdout.take().unwrap());
        let stderr = lines_of(child.stderr.take().unwrap());
        let mut connect = Connect {
            child,
            stderr,
            banner: String::new(),
        };
        connect.banner = match stdout.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let said: Vec<String> = connect.stderr.try_iter().collect();
                panic!("corral connect never said where it listens; stderr: {said:?}");
            }
        };
        connect
    }
}

/// A running `corral connect`.
struct Connect {
    child: Child,
    stderr: mpsc::Receiver<String>,
    banner: String,
}

impl Connect {
    /// Sends `signal` and waits for the exit code.
    fn stop(&mut self, signal: i32) -> Option<i32> {
        kill(self.child.id() as i32, signal);
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < until, "corral connect did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A native client: what a person's Codex client would be, on the raw socket.
struct Native {
    reader: BufReader<UnixStream>,
    /// Notifications read while waiting for something else.
    pending: VecDeque<Value>,
    next_id: u64,
}

impl Native {
    fn connect(path: &Path) -> Native {
        let stream = UnixStream::connect(path).expect("the native socket accepts");
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        Native {
            reader: BufReader::new(stream),
            pending: VecDeque::new(),
            next_id: 1,
        }
    }

    /// Connects and initializes.
    fn initialized(path: &Path) -> Native {
        let mut native = Native::connect(path);
        let answer = native.request(
            "initialize",
            json!({ "clientInfo": { "name": "test", "title": "Test", "version": "0.0.1" } }),
        );
        assert!(
            answer["result"]["userAgent"]
                .as_str()
                .is_some_and(|agent| agent.starts_with("corral-connect/")),
            "{answer}"
        );
        native.write_line(r#"{"method":"initialized"}"#);
        native
    }

    fn write_line(&mut self, line: &str) {
        let stream = self.reader.get_mut();
        stream.write_all(line.as_bytes()).unwrap();
        stream.write_all(b"\n").unwrap();
        stream.flush().unwrap();
    }

    /// The next message; `None` when the server closed the connection.
    fn read(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|error| panic!("not JSON ({error}): {line}")),
            ),
            Err(error) => panic!("reading the native socket: {error}"),
        }
    }

    /// A request; its answer (notifications read meanwhile are kept).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.write_line(&json!({ "id": id, "method": method, "params": params }).to_string());
        self.answer(&json!(id))
    }

    fn answer(&mut self, id: &Value) -> Value {
        loop {
            let message = self.read().expect("the server hung up before answering");
            assert!(
                message.get("jsonrpc").is_none(),
                "app-server messages have no jsonrpc field: {message}"
            );
            if message.get("method").is_none() && &message["id"] == id {
                return message;
            }
            self.pending.push_back(message);
        }
    }

    /// Notifications up to and including the first one `wanted` accepts.
    fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = match self.pending.pop_front() {
                Some(message) => message,
                None => self
                    .read()
                    .unwrap_or_else(|| panic!("the server hung up before {what}; saw {seen:#?}")),
            };
            let found = wanted(&message);
            seen.push(message);
            if found {
                return seen;
            }
        }
    }

    /// Every notification of turn `turn` up to its `turn/completed`.
    fn turn(&mut self, turn: &str) -> Vec<Value> {
        let seen = self.until(&format!("turn/completed of {turn}"), |message| {
            message["method"] == "turn/completed" && message["params"]["turn"]["id"] == turn
        });
        seen.into_iter()
            .filter(|message| {
                message["params"]["turnId"] == turn || message["params"]["turn"]["id"] == turn
            })
            .collect()
    }

    /// Waits until the server closes the connection (what it still sends is dropped).
    fn closed(&mut self) {
        while self.read().is_some() {}
    }
}

fn methods(notifications: &[Value]) -> Vec<&str> {
    notifications
        .iter()
        .map(|message| message["method"].as_str().unwrap_or("?"))
        .collect()
}

/// The `item/completed` of the command the agent ran in a turn.
fn command_item(seen: &[Value]) -> &Value {
    seen.iter()
        .find(|m| {
            m["method"] == "item/completed" && m["params"]["item"]["type"] == "commandExecution"
        })
        .unwrap_or_else(|| panic!("no command item in {seen:#?}"))
}

fn turn_start(native: &mut Native, text: &str) -> Value {
    native.request(
        "turn/start",
        json!({ "threadId": "any", "input": [{ "type": "text", "text": text }] }),
    )
}

fn turn_id(answer: &Value) -> String {
    answer["result"]["turn"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no turn in {answer}"))
        .to_string()
}

/// The refusal of a write: its code and message.
fn refusal(answer: &Value) -> (i64, String) {
    assert!(answer.get("result").is_none(), "not refused: {answer}");
    (
        answer["error"]["code"].as_i64().expect("an error code"),
        answer["error"]["message"].as_str().unwrap().to_string(),
    )
}

/// The `corral connect` process's exec: the one whose argv has `--socket`.
fn connect_exec(home: &Home) -> String {
    home.store()
        .value("SELECT id FROM execs WHERE command LIKE '%\"connect\"%\"--socket\"%'")
        .as_str()
        .expect("the connect command's exec")
        .to_string()
}

#[test]
fn two_connections_see_every_turn_and_only_the_driver_writes() {
    let home = Home::new();
    home.start();
    let session = home.session("shared", "fake");
    let mut connect = home.connect("shared", &home.socket());
    assert!(
        connect.banner.contains(home.socket().to_str().unwrap()),
        "{}",
        connect.banner
    );
    let mode = std::fs::metadata(home.socket()).unwrap();
    assert!(mode.file_type().is_socket());
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);

    // Before initialize: refused as the app-server does.
    let mut a = Native::connect(&home.socket());
    let early = a.request("thread/start", json!({}));
    assert_eq!(
        early,
        json!({ "error": { "code": -32600, "message": "Not initialized" }, "id": 1 })
    );
    let mut a = Native::initialized(&home.socket());
    let mut b = Native::initialized(&home.socket());
    let again = a.request("initialize", json!({}));
    assert_eq!(refusal(&again).1, "Already initialized");
    let thread = a.request("thread/start", json!({ "cwd": "/elsewhere" }));
    assert!(thread["result"]["thread"]["id"].is_string(), "{thread}");

    // A drives a turn: both see it, whole, in the app-server's shapes.
    let started = turn_start(&mut a, "hello there");
    let turn = turn_id(&started);
    assert_eq!(started["result"]["turn"]["status"], "inProgress");
    let seen_a = a.turn(&turn);
    let seen_b = b.turn(&turn);
    let thread_id = home.json(&["session", "show", "shared", "--json"])["session"]["thread_id"]
        .as_str()
        .expect("the session has a thread")
        .to_string();
    for seen in [&seen_a, &seen_b] {
        let methods = methods(seen);
        assert_eq!(methods.first(), Some(&"turn/started"), "{seen:#?}");
        assert_eq!(methods.last(), Some(&"turn/completed"), "{seen:#?}");
        let message = seen
            .iter()
            .find(|message| {
                message["method"] == "item/completed"
                    && message["params"]["item"]["type"] == "agentMessage"
            })
            .unwrap_or_else(|| panic!("no agent message in {seen:#?}"));
        assert_eq!(
            message["params"]["item"]["text"],
            "fake answer: hello there"
        );
        assert!(message["emittedAtMs"].is_i64(), "{message}");
        for notification in seen.iter() {
            assert_eq!(
                notification["params"]["threadId"],
                thread_id.as_str(),
                "{notification}"
            );
        }
        let completed = &seen.last().unwrap()["params"]["turn"];
        assert_eq!(completed["status"], "completed");
        assert!(completed["error"].is_null());
    }

    // A holds the claim as an exec of its own, a child of the `corral connect` exec.
    let driver = home.driver(&session);
    let a_exec = driver["exec_id"].as_str().expect("A drives").to_string();
    let (command, parent, outcome, _) = home.exec(&a_exec);
    assert_eq!(command[1], "connect");
    assert_eq!(command[3], "--native-connection");
    assert_eq!(parent.as_deref(), Some(connect_exec(&home).as_str()));
    assert!(outcome.is_none(), "A's connection is still open");

    // B may not write while A drives: turn/start and turn/interrupt are refused naming A.
    let (code, message) = refusal(&turn_start(&mut b, "mine now"));
    assert_eq!(code, -32009);
    assert!(message.contains(&a_exec), "{message}");
    let interrupt = b.request(
        "turn/interrupt",
        json!({ "threadId": thread_id, "turnId": turn }),
    );
    let (code, message) = refusal(&interrupt);
    assert_eq!(code, -32009);
    assert!(message.contains(&a_exec), "{message}");

    // Unknown methods and garbage are answered, and the connection goes on.
    let unknown = b.request("model/list", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("model/list is not served by corral connect"));
    b.write_line("{this is not json");
    let garbage = b.answer(&Value::Null);
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    let read = b.request(
        "thread/read",
        json!({ "threadId": thread_id, "includeTurns": true }),
    );
    assert_eq!(read["result"]["thread"]["id"], thread_id.as_str(), "{read}");
    assert_eq!(
        read["result"]["thread"]["turns"][0]["id"],
        turn.as_str(),
        "{read}"
    );

    // A hand-over: the CLI takes the session over and sends a prompt of its own.
    let answer = home.ok(&[
        "send",
        "shared",
        "from the command line",
        "--wait",
        "--take-over",
    ]);
    assert_eq!(answer, "fake answer: from the command line\n");
    let cli_exec = home.driver(&session)["last_exec_id"]
        .as_str()
        .expect("the CLI drove")
        .to_string();
    assert_ne!(cli_exec, a_exec);
    // A, superseded, still sees the CLI's turn...
    let started = a.until("the CLI's turn", |m| m["method"] == "turn/started");
    let cli_turn = started.last().unwrap()["params"]["turn"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = a.turn(&cli_turn);
    assert!(seen.iter().any(|m| m["method"] == "item/completed"
        && m["params"]["item"]["text"] == "fake answer: from the command line"));
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    // ...but can no longer write, and is told who took over, every time.
    for _ in 0..2 {
        let (code, message) = refusal(&turn_start(&mut a, "still mine?"));
        assert_eq!(code, -32007);
        assert!(message.contains(&cli_exec), "{message}");
    }
    let (code, message) = refusal(&a.request(
        "turn/interrupt",
        json!({ "threadId": thread_id, "turnId": cli_turn }),
    ));
    assert_eq!(code, -32007);
    assert!(message.contains(&cli_exec), "{message}");

    // The CLI released its claim: B may drive now.
    let b_turn = turn_id(&turn_start(&mut b, "now B"));
    let seen = a.turn(&b_turn);
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    let b_exec = home.driver_exec(&session);
    assert!(b_exec != a_exec && b_exec != cli_exec);
    // The refused prompts were never queued.
    let history = home.json(&["history", "shared", "--json"]);
    let texts: Vec<&str> = history["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|prompt| prompt["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["hello there", "from the command line", "now B"]);

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    home.stop();
}

#[test]
fn the_driver_interrupts_a_hanging_turn() {
    let home = Home::new();
    home.start();
    let session = home.session("hang", "fake");
    let mut connect = home.connect(&session, &home.socket());
    let mut a = Native::initialized(&home.socket());
    let mut b = Native::initialized(&home.socket());
    let turn = turn_id(&turn_start(&mut a, "@fake hang\nwork forever"));
    a.until("turn/started", |m| m["method"] == "turn/started");
    b.until("turn/started", |m| m["method"] == "turn/started");

    // B is not the driver: its interrupt is refused and the turn goes on.
    let (code, _) =
        refusal(&b.request("turn/interrupt", json!({ "threadId": "t", "turnId": turn })));
    assert_eq!(code, -32009);
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(shown["prompts"][0]["status"], "running", "{shown}");

    // A names a turn that is not one of the thread's: refused.
    let wrong = a.request(
        "turn/interrupt",
        json!({ "threadId": "t", "turnId": session }),
    );
    assert!(wrong.get("error").is_some(), "{wrong}");

    // The driver's interrupt ends it; both see it end as interrupted.
    let answer = a.request("turn/interrupt", json!({ "threadId": "t", "turnId": turn }));
    assert_eq!(answer, json!({ "id": answer["id"], "result": {} }));
    for native in [&mut a, &mut b] {
        let seen = native.turn(&turn);
        let completed = &seen.last().unwrap()["params"]["turn"];
        assert_eq!(completed["status"], "interrupted", "{seen:#?}");
    }
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(shown["prompts"][0]["status"], "cancelled", "{shown}");

    // A hand-over while A's next turn hangs: the CLI takes the session over (its prompt
    // queues behind the hanging one). A's interrupt is now refused, naming the CLI's exec.
    let a_exec = home.driver_exec(&session); // A drives
    let turn = turn_id(&turn_start(&mut a, "@fake hang\nwork again"));
    a.until("turn/started", |m| {
        m["method"] == "turn/started" && m["params"]["turn"]["id"] == turn
    });
    let cli = home
        .corral(&["send", &session, "after the hang", "--wait", "--take-over"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cli_exec = String::new();
    wait_until("the CLI drives", || {
        match home.driver(&session)["exec_id"].as_str() {
            Some(exec) if exec != a_exec => {
                cli_exec = exec.to_string();
                true
            }
            _ => false,
        }
    });
    let (code, message) =
        refusal(&a.request("turn/interrupt", json!({ "threadId": "t", "turnId": turn })));
    assert_eq!(code, -32007, "{message}");
    assert!(message.contains(&cli_exec), "{message}");
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(shown["prompts"][1]["status"], "running", "{shown}");
    // The refusal sticks: the next write is refused too, without asking the daemon again.
    let (code, message) = refusal(&turn_start(&mut a, "mine again?"));
    assert_eq!(code, -32007, "{message}");
    assert!(message.contains(&cli_exec), "{message}");

    // The hanging turn is cancelled from the command line; A sees it end, then the CLI's turn.
    home.ok(&["cancel", &turn]);
    let seen = a.turn(&turn);
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "interrupted"
    );
    let started = a.until("the CLI's turn", |m| m["method"] == "turn/started");
    let cli_turn = started.last().unwrap()["params"]["turn"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = a.turn(&cli_turn);
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    let cli = cli.wait_with_output().unwrap();
    assert!(cli.status.success(), "{cli:?}");
    assert_eq!(
        String::from_utf8_lossy(&cli.stdout),
        "fake answer: after the hang\n"
    );

    assert_eq!(connect.stop(libc::SIGINT), Some(130));
    home.stop();
}

#[test]
fn the_agents_own_corral_call_is_recorded_under_the_native_connection() {
    let home = Home::new();
    home.start();
    let session = home.session("agent", "fake");
    let mut connect = home.connect("agent", &home.socket());
    let mut a = Native::initialized(&home.socket());
    let prompt = format!("@fake run={CORRAL} monitor list --all --limit 1\nwork");
    let turn = turn_id(&turn_start(&mut a, &prompt));
    let seen = a.turn(&turn);
    // The command the agent ran is shown as the engine's item.
    let command = command_item(&seen);
    assert_eq!(command["params"]["item"]["exitCode"], 0, "{command}");
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );

    let a_exec = home.driver_exec(&session);
    let row = home.store().row(
        "SELECT parent_exec_id, caller_session_id, via_agent FROM execs \
         WHERE command LIKE '%monitor%list%--limit%' AND command NOT LIKE '%@fake%'",
    );
    let parent = row[0].as_str().expect("a parent exec").to_string();
    let caller = row[1].as_str().expect("a caller session").to_string();
    // An integer on either store (0 or 1).
    let via_agent = row[2] == json!(1) || row[2] == json!(true);
    assert_eq!(
        parent, a_exec,
        "the agent's call is a child of the native connection"
    );
    assert_eq!(caller, session);
    assert!(via_agent);
    let (command, grandparent, _, _) = home.exec(&parent);
    assert_eq!(
        command,
        json!(["corral", "connect", "agent", "--native-connection", "1"])
    );
    assert_eq!(grandparent.as_deref(), Some(connect_exec(&home).as_str()));

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    home.stop();
}

#[test]
fn sigterm_closes_the_connections_releases_the_claim_and_removes_the_socket() {
    let home = Home::new();
    home.start();
    let session = home.session("stop", "fake");
    let mut connect = home.connect("stop", &home.socket());
    let mut a = Native::initialized(&home.socket());
    let mut b = Native::initialized(&home.socket());
    let turn = turn_id(&turn_start(&mut a, "one turn"));
    a.turn(&turn);
    let a_exec = home.driver_exec(&session);

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    a.closed();
    b.closed();
    assert!(!home.socket().exists(), "the socket is removed");
    let driver = home.driver(&session);
    assert!(
        driver["exec_id"].is_null(),
        "the claim is released: {driver}"
    );
    assert_eq!(driver["last_exec_id"], a_exec.as_str());
    // Each connection's exec is completed; the command's own exec was interrupted.
    let (_, _, outcome, code) = home.exec(&a_exec);
    assert_eq!((outcome.as_deref(), code), (Some("succeeded"), Some(0)));
    let open = home.store().value(
        "SELECT count(*) FROM execs WHERE command LIKE '%--native-connection%' \
         AND completed_at IS NULL",
    );
    assert_eq!(open, json!(0));
    let (_, _, outcome, code) = home.exec(&connect_exec(&home));
    assert_eq!((outcome.as_deref(), code), (Some("interrupted"), Some(143)));

    home.stop();
}

#[test]
fn a_closed_connection_gives_the_claim_back() {
    let home = Home::new();
    home.start();
    let session = home.session("leave", "fake");
    let mut connect = home.connect("leave", &home.socket());
    let mut a = Native::initialized(&home.socket());
    let mut b = Native::initialized(&home.socket());
    let turn = turn_id(&turn_start(&mut a, "first"));
    a.turn(&turn);
    let a_exec = home.driver_exec(&session);
    drop(a);
    wait_until("A's exec is completed", || home.exec(&a_exec).2.is_some());
    assert!(home.driver(&session)["exec_id"].is_null());
    let turn = turn_id(&turn_start(&mut b, "second"));
    let seen = b.turn(&turn);
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    home.stop();
}

#[test]
fn the_socket_is_never_stolen_and_a_stale_one_is_replaced() {
    let home = Home::new();
    home.start();
    home.session("sock", "fake");

    // A path too long for sun_path.
    let long = home.path().join("x".repeat(120));
    let output = home.run(&["connect", "sock", "--socket", long.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("a Unix socket path holds at most 107"),
        "{said}"
    );

    // A file that is not a socket is left alone.
    let file = home.path().join("plain");
    std::fs::write(&file, "mine").unwrap();
    let output = home.run(&["connect", "sock", "--socket", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");

    // A stale socket (nobody listens) is replaced.
    drop(std::os::unix::net::UnixListener::bind(home.socket()).unwrap());
    assert!(home.socket().exists());
    let mut connect = home.connect("sock", &home.socket());
    let _a = Native::initialized(&home.socket());

    // A live one is not taken over.
    let output = home.run(&[
        "connect",
        "sock",
        "--socket",
        home.socket().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("another process listens"), "{said}");
    let _b = Native::initialized(&home.socket());

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    assert!(!home.socket().exists());
    home.stop();
}

#[test]
fn an_app_server_session_streams_deltas_and_takes_steering() {
    let home = Home::new();
    home.start();
    home.session("app", "codex-app-server");
    let mut connect = home.connect("app", &home.socket());
    let mut a = Native::initialized(&home.socket());
    let mut b = Native::initialized(&home.socket());

    let turn = turn_id(&turn_start(&mut a, "@fake answer=streamed in words\nhello"));
    for native in [&mut a, &mut b] {
        let seen = native.turn(&turn);
        let deltas: String = seen
            .iter()
            .filter(|m| m["method"] == "item/agentMessage/delta")
            .map(|m| m["params"]["delta"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(deltas, "streamed in words", "{seen:#?}");
        let item = seen
            .iter()
            .find(|m| {
                m["method"] == "item/completed" && m["params"]["item"]["type"] == "agentMessage"
            })
            .unwrap();
        let delta = seen
            .iter()
            .find(|m| m["method"] == "item/agentMessage/delta")
            .unwrap();
        assert_eq!(delta["params"]["itemId"], item["params"]["item"]["id"]);
        assert_eq!(item["params"]["item"]["text"], "streamed in words");
    }

    // A steers its hanging turn; B may not.
    let turn = turn_id(&turn_start(&mut a, "@fake hang\nwork"));
    a.until("turn/started", |m| m["method"] == "turn/started");
    let steer = |native: &mut Native, expected: &str| {
        native.request(
            "turn/steer",
            json!({
                "threadId": "t",
                "input": [{ "type": "text", "text": "also the docs" }],
                "expectedTurnId": expected,
            }),
        )
    };
    let (code, _) = refusal(&steer(&mut b, &turn));
    assert_eq!(code, -32009);
    let wrong = steer(&mut a, "not-this-turn");
    assert!(
        refusal(&wrong).1.contains("expected active turn id"),
        "{wrong}"
    );
    // The turn may still be on its way to the app server: steer until it takes it.
    let until = Instant::now() + DEADLINE;
    loop {
        let answer = steer(&mut a, &turn);
        if answer.get("result").is_some() {
            assert_eq!(answer["result"]["turnId"], turn.as_str());
            break;
        }
        assert!(Instant::now() < until, "never steered: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = b.turn(&turn);
    assert!(
        seen.iter().any(|m| m["method"] == "item/completed"
            && m["params"]["item"]["text"] == "steered: also the docs"),
        "{seen:#?}"
    );
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );

    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    home.stop();
}

#[test]
fn an_approval_is_answered_by_the_projects_policy_and_shown_as_the_items_outcome() {
    let home = Home::new();
    home.start();
    home.session("asks", "codex-app-server");
    let mut connect = home.connect("asks", &home.socket());
    let mut a = Native::initialized(&home.socket());
    let turn = turn_id(&turn_start(&mut a, "@fake approval=command\nwork"));
    let seen = a.turn(&turn);
    // Project p has no full access: the command is declined by policy, and the native
    // client sees the item complete as declined. No request of the server reaches it.
    let command = command_item(&seen);
    assert_eq!(command["params"]["item"]["status"], "declined", "{command}");
    assert!(
        seen.iter()
            .chain(a.pending.iter())
            .all(|m| m.get("id").is_none()),
        "{seen:#?}"
    );
    assert_eq!(
        seen.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    assert_eq!(connect.stop(libc::SIGTERM), Some(143));
    home.stop();
}
