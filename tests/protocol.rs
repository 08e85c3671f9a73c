//! The daemon through its socket, the way any program drives it: a real `corral daemon
//! --detach` on a temporary home (the fake engine configured) and raw JSON-RPC lines on a
//! `UnixStream`.
//!
//! Covered: bad input of every kind (malformed JSON, an oversized line, an unknown method, a
//! bad protocol version, invalid UTF-8, a request before `initialize`, `jsonrpc` not "2.0"),
//! each answered with its error code while a well-behaved connection opened before it keeps
//! getting answers; a silent client timed out; one daemon per home; a socket path too long for
//! `sun_path`; SIGTERM with a prompt running (exit 0, socket removed, no engine left, prompt
//! requeued, run interrupted); subscriptions resumed across a reconnect with nothing missed or
//! repeated; a stale socket file replaced; a peer of another uid refused with one line, which
//! the CLI prints. The handshake in line order (nothing written before a successful
//! `initialize` runs, in the same write or not); ids of every JSON type, echoed as written.
//! Bounds per peer, measured on the daemon's /proc: 10,000 requests a client never reads (RSS,
//! then every answer once it reads, then a client that leaves), a client that neither
//! initializes nor reads, a 64 MiB line; 1,100 connections against a descriptor limit of 1,024,
//! with the daemon's own connection limit and without it (CPU time, log lines, recovery).
//!
//! Every test stops its daemon: SIGTERM to the pid in HOME/daemon.pid, then it waits for the
//! exit. The test process makes itself a child subreaper, so the detached daemon becomes its
//! child when `corral daemon --detach` exits and its exit status can be collected; a daemon a
//! failing test leaves running is stopped by `Drop` (SIGTERM, then SIGKILL).
//!
//! Tests whose name is preceded by a `FIXED BUG` comment pin a daemon-side bug found by these
//! tests (the comment says where it was), so that it stays fixed.
#![cfg(target_os = "linux")]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use corral::protocol::{self, code, MAX_LINE};
use serde_json::{json, Value};

// The store of the test pass for each home (a PostgreSQL database of its own under
// CORRAL_TEST_STORE=postgres) and the reader of either store; this file's own helpers stand in
// for the rest of the test kit.
use corral::testkit::store;

const CORRAL: &str = env!("CARGO_BIN_EXE_corral");
const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The longest any single read from the daemon may take before the test fails.
const READ_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest a daemon may take to exit after SIGTERM when nothing runs.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Processes

/// Makes this process the reaper of its orphaned descendants (the detached daemons).
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only.
        let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(done, 0, "PR_SET_CHILD_SUBREAPER failed");
    });
}

/// `corral --home HOME …` with no corral variable inherited from the test's environment.
fn corral(home: &Path) -> Command {
    let mut command = Command::new(CORRAL);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CORRAL_") {
            command.env_remove(key);
        }
    }
    command
        .arg("--home")
        .arg(home)
        .current_dir(home)
        .stdin(Stdio::null());
    command
}

/// Runs a command to its end, failing the test (and killing it) after `timeout`.
fn run(mut command: Command, timeout: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id() as i32;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(timeout) {
        Ok(output) => output.expect("the command's output"),
        Err(_) => {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let output = receiver.recv().ok().and_then(Result::ok);
            panic!("{command:?} did not end within {timeout:?}: {output:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A process's state letter and start time from /proc (`None`: no such process).
fn proc_stat(pid: i32) -> Option<(char, u64, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start, pgrp))
}

/// Whether `pid` runs (a zombie has ended).
fn running(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((state, _, _)) if state != 'Z')
}

/// The live processes of process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(
            |&pid| matches!(proc_stat(pid), Some((state, _, pgrp)) if pgrp == pgid && state != 'Z'),
        )
        .collect()
}

/// How a process ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signaled(i32),
    /// Not our child (no subreaper): only seen to be gone.
    Gone,
}

/// Waits for `pid` to end, up to `timeout`; `None` if it still runs.
fn wait_for_exit(pid: i32, timeout: Duration) -> Option<Ended> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on a pid with a status out-parameter we own.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if waited == pid {
            if libc::WIFEXITED(status) {
                return Some(Ended::Exited(libc::WEXITSTATUS(status)));
            }
            if libc::WIFSIGNALED(status) {
                return Some(Ended::Signaled(libc::WTERMSIG(status)));
            }
        } else if waited < 0 && !running(pid) {
            return Some(Ended::Gone);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A process's resident memory (VmRSS), in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// The CPU time a process used so far (user + system).
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the command name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Raises this process's descriptor limit to its hard limit (the tests that open a thousand
/// connections need more than a small default).
fn raise_own_descriptor_limit(at_least: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < at_least {
            limit.rlim_cur = limit.rlim_max.min(at_least.max(limit.rlim_cur));
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn open_descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

/// The daemon's open Unix-socket descriptors: its clients' connections and its listeners.
/// What the tests of closed connections count, since on a PostgreSQL store the daemon may
/// open a store connection (a TCP socket) at any moment.
fn unix_socket_descriptors(pid: i32) -> usize {
    let Ok(process) = procfs::process::Process::new(pid) else {
        return 0;
    };
    let Ok(unix) = process.unix() else { return 0 };
    let unix: std::collections::HashSet<u64> = unix.iter().map(|entry| entry.inode).collect();
    process.fd().map_or(0, |fds| {
        fds.flatten()
            .filter(|fd| {
                matches!(fd.target, procfs::process::FDTarget::Socket(inode) if unix.contains(&inode))
            })
            .count()
    })
}

// ---------------------------------------------------------------------------------------------
// The daemon

/// A detached daemon on a home of its own, stopped at the end of the test.
struct Daemon {
    home: PathBuf,
    pid: i32,
    stopped: bool,
    /// The home's PostgreSQL database, if its store is one; dropped after the daemon stopped
    /// (`Drop` runs before the fields go).
    database: Option<store::TestDatabase>,
    _dir: Option<tempfile::TempDir>,
}

impl Daemon {
    /// A daemon on a new temporary home.
    fn start(env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().expect("a temporary home");
        let mut daemon = Daemon::start_in(dir.path(), env);
        daemon._dir = Some(dir);
        daemon
    }

    /// A daemon on a new temporary home whose descriptor limit (RLIMIT_NOFILE, soft and
    /// hard) is `descriptors`.
    fn start_with_descriptors(env: &[(&str, &str)], descriptors: u64) -> Daemon {
        let dir = tempfile::tempdir().expect("a temporary home");
        let mut daemon = Daemon::start_configured(dir.path(), env, Some(descriptors));
        daemon._dir = Some(dir);
        daemon
    }

    /// A daemon on `home` (which exists): `corral --home HOME daemon --detach`.
    fn start_in(home: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_configured(home, env, None)
    }

    /// The home gets the store of the test pass unless its `config` already names one.
    fn start_configured(home: &Path, env: &[(&str, &str)], descriptors: Option<u64>) -> Daemon {
        become_subreaper();
        let database = if home.join("config").exists() {
            None
        } else {
            store::for_home(home)
        };
        let mut command = corral(home);
        command.args(["daemon", "--detach"]);
        if let Some(descriptors) = descriptors {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit between fork and exec, async-signal-safe; the detached daemon
            // inherits the limit.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: descriptors,
                        rlim_max: descriptors,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let output = run(command, Duration::from_secs(30));
        assert!(
            output.status.success(),
            "corral daemon --detach failed: {output:?}"
        );
        let pid: i32 = std::fs::read_to_string(home.join("daemon.pid"))
            .expect("HOME/daemon.pid after --detach")
            .trim()
            .parse()
            .expect("a pid in HOME/daemon.pid");
        assert!(
            text(&output.stdout).contains(&format!("pid {pid}")),
            "{output:?}"
        );
        Daemon {
            home: home.to_path_buf(),
            pid,
            stopped: false,
            database,
            _dir: None,
        }
    }

    fn socket(&self) -> PathBuf {
        self.home.join("corral.sock")
    }

    /// A connection past the handshake.
    fn connect(&self) -> Conn {
        let mut conn = Conn::open(&self.socket());
        conn.initialize();
        // One call right after `initialize`: until the daemon has handled it, it still counts
        // the connection as in its handshake (see the FIXED BUG test on idle clients).
        conn.call("status", Value::Null);
        conn
    }

    /// SIGTERM, then waits for the exit; returns how the daemon ended.
    fn stop(&mut self) -> Ended {
        self.stopped = true;
        // SAFETY: kill on the daemon's pid.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        wait_for_exit(self.pid, STOP_TIMEOUT).unwrap_or_else(|| {
            // SAFETY: as above.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            wait_for_exit(self.pid, STOP_TIMEOUT);
            panic!("the daemon did not exit within {STOP_TIMEOUT:?} of SIGTERM")
        })
    }

    /// Stops the daemon and asserts it exited 0.
    fn stop_cleanly(&mut self) {
        let ended = self.stop();
        assert_eq!(ended, Ended::Exited(0), "the daemon's exit");
        assert!(!self.socket().exists(), "the socket outlived the daemon");
    }

    /// The fake engine, short grace periods, a project and a session; returns the session id.
    fn session(&self, conn: &mut Conn, title: &str) -> String {
        for (name, value) in [("engines.fake.path", FAKE), ("cancel.grace_ms", "300")] {
            conn.call("settings.set", json!({ "name": name, "value": value }));
        }
        let project_dir = self.home.join("project");
        std::fs::create_dir_all(&project_dir).unwrap();
        let projects = conn.call("project.list", Value::Null);
        if projects.as_array().is_none_or(|list| list.is_empty()) {
            conn.call(
                "project.add",
                json!({ "name": "p", "path": project_dir, "engine": "fake" }),
            );
        }
        let session = conn.call("session.new", json!({ "project": "p", "title": title }));
        session["id"].as_str().expect("a session id").to_string()
    }

    /// The store, whichever it is, for reading what the daemon recorded.
    fn store(&self) -> store::HomeStore<'_> {
        let url = self.database.as_ref().map(|database| database.url.as_str());
        store::HomeStore::of(&self.home, url)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.stopped {
            // SAFETY: kill on the daemon's pid.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
            if wait_for_exit(self.pid, Duration::from_secs(15)).is_none() {
                // SAFETY: as above.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
                wait_for_exit(self.pid, Duration::from_secs(5));
            }
        }
    }
}

/// One connection, raw lines both ways.
struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    /// Notifications read while waiting for an answer.
    notifications: VecDeque<Value>,
}

impl Conn {
    fn open(socket: &Path) -> Conn {
        let stream = UnixStream::connect(socket)
            .unwrap_or_else(|error| panic!("connect {}: {error}", socket.display()));
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Conn {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
            next_id: 1,
            notifications: VecDeque::new(),
        }
    }

    /// Writes `bytes` and a newline.
    fn send_line(&mut self, bytes: &[u8]) {
        let mut line = Vec::with_capacity(bytes.len() + 1);
        line.extend_from_slice(bytes);
        line.push(b'\n');
        self.writer.write_all(&line).expect("the daemon reads");
    }

    /// The next line from the daemon as written (without its newline); `None` when the
    /// daemon closed the connection.
    fn read_raw(&mut self) -> Option<String> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) => {
                assert_eq!(line.pop(), Some(b'\n'), "a line cut short: {}", text(&line));
                Some(String::from_utf8(line).expect("the daemon writes UTF-8"))
            }
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(error) => panic!("reading from the daemon: {error}"),
        }
    }

    /// The next line from the daemon, parsed; `None` when the daemon closed the connection.
    fn read_message(&mut self) -> Option<Value> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_slice(&line).unwrap_or_else(|error| {
                panic!(
                    "the daemon wrote a line that is not JSON ({error}): {}",
                    text(&line)
                )
            })),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(error) => panic!("reading from the daemon: {error}"),
        }
    }

    /// The answer to the request with `id` (notifications in between are kept).
    fn answer(&mut self, id: &Value) -> Value {
        loop {
            let message = self.read_message().unwrap_or_else(|| {
                panic!("the daemon closed the connection before answering {id}")
            });
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return message;
            }
            if message.get("method").is_some() {
                self.notifications.push_back(message);
            } else {
                panic!("an answer to nothing we asked while waiting for {id}: {message}");
            }
        }
    }

    /// Sends a request and returns the whole response object.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        let mut request = json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if !params.is_null() {
            request["params"] = params;
        }
        self.send_line(request.to_string().as_bytes());
        self.answer(&id)
    }

    /// Sends a request and returns its result, failing the test on an error answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params.clone());
        match response.get("result") {
            Some(result) if response.get("error").is_none() => result.clone(),
            _ => panic!("{method} {params} failed: {response}"),
        }
    }

    fn initialize(&mut self) -> Value {
        self.call(
            "initialize",
            json!({ "protocol": 1, "client": "tests/protocol.rs" }),
        )
    }

    /// The next notification (kept or read now).
    fn notification(&mut self) -> Value {
        if let Some(notification) = self.notifications.pop_front() {
            return notification;
        }
        loop {
            let message = self
                .read_message()
                .expect("the daemon closed the connection while we waited for a notification");
            if message.get("method").is_some() {
                return message;
            }
        }
    }

    /// The next `events.event`'s event.
    fn event(&mut self) -> Value {
        let notification = self.notification();
        assert_eq!(
            notification["method"], "events.event",
            "expected an event: {notification}"
        );
        notification["params"]["event"].clone()
    }
}

/// The error code of a response, failing the test if it is not an error.
fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error answer: {response}"))
}

/// Asserts that `conn` still gets a correct `status` answer from daemon `pid`.
fn assert_serves(conn: &mut Conn, pid: i32, who: &str) {
    let status = conn.request("status", Value::Null);
    assert_eq!(
        status["result"]["daemon"]["pid"],
        json!(pid),
        "{who} got no correct status answer: {status}"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input: each line is answered with its error code; the daemon keeps serving the
// connection opened before it, and the same connection where that makes sense.

/// Sends `bad` on a fresh, initialized connection and checks the answer's code and id; then
/// checks that the same connection and a witness opened before it still get answers.
fn bad_line_is_answered(bad: &[u8], expected_code: i64, expected_id: Value) {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = daemon.connect();
    conn.send_line(bad);
    let answer = conn
        .read_message()
        .expect("the daemon closed the connection instead of answering");
    assert_eq!(error_code(&answer), expected_code, "{answer}");
    assert_eq!(answer["id"], expected_id, "{answer}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_serves(&mut conn, daemon.pid, "the same connection");
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    assert_serves(&mut daemon.connect(), daemon.pid, "a new connection");
    daemon.stop_cleanly();
}

#[test]
fn malformed_json_is_a_parse_error() {
    bad_line_is_answered(
        br#"{"jsonrpc":"2.0","id":1,"method":"status""#,
        code::PARSE_ERROR,
        Value::Null,
    );
}

#[test]
fn invalid_utf8_is_a_parse_error() {
    bad_line_is_answered(
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"st\xff\xfeatus\"}",
        code::PARSE_ERROR,
        Value::Null,
    );
}

#[test]
fn an_unknown_method_is_method_not_found() {
    bad_line_is_answered(
        br#"{"jsonrpc":"2.0","id":41,"method":"no.such.method"}"#,
        code::METHOD_NOT_FOUND,
        json!(41),
    );
}

#[test]
fn jsonrpc_other_than_2_0_is_an_invalid_request() {
    bad_line_is_answered(
        br#"{"jsonrpc":"1.0","id":"x","method":"status"}"#,
        code::INVALID_REQUEST,
        json!("x"),
    );
}

#[test]
fn an_oversized_line_is_refused_and_skipped() {
    // One byte over the limit, in a request that would be valid otherwise; then a request on
    // the same connection right behind it.
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = daemon.connect();
    let head = br#"{"jsonrpc":"2.0","id":5,"method":"status","params":{"pad":""#;
    let tail = br#""}}"#;
    let mut line = head.to_vec();
    line.resize(MAX_LINE + 1 - tail.len(), b'x');
    line.extend_from_slice(tail);
    assert_eq!(line.len(), MAX_LINE + 1);
    conn.send_line(&line);
    let answer = conn.read_message().expect("an answer to the long line");
    assert_eq!(error_code(&answer), code::INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_serves(&mut conn, daemon.pid, "the same connection");
    assert_serves(&mut witness, daemon.pid, "the connection opened before");

    // A line of exactly MAX_LINE bytes is still a request.
    let mut line = head.to_vec();
    line.resize(MAX_LINE - tail.len(), b'x');
    line.extend_from_slice(tail);
    conn.send_line(&line);
    let answer = conn.answer(&json!(5));
    assert!(
        answer.get("result").is_some(),
        "a line of MAX_LINE bytes: {}",
        answer["error"]
    );

    // Several MiB without any newline, then one: one error, and the connection goes on.
    let mut huge = vec![b' '; 5 * MAX_LINE];
    huge.extend_from_slice(br#"{"jsonrpc":"2.0","id":6,"method":"status"}"#);
    conn.send_line(&huge);
    let answer = conn.read_message().expect("an answer to the huge line");
    assert_eq!(error_code(&answer), code::INVALID_REQUEST, "{answer}");
    assert_serves(&mut conn, daemon.pid, "the same connection after 5 MiB");
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

#[test]
fn a_request_before_initialize_is_refused() {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = Conn::open(&daemon.socket());
    for method in ["status", "session.list", "events.subscribe", "shutdown"] {
        let answer = conn.request(method, json!({ "session": "x" }));
        assert_eq!(
            error_code(&answer),
            code::VERSION_MISMATCH,
            "{method}: {answer}"
        );
    }
    // The refused `shutdown` did not stop anything.
    assert!(running(daemon.pid));
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    // The same connection may still do its handshake.
    conn.initialize();
    assert_serves(
        &mut conn,
        daemon.pid,
        "the same connection after initialize",
    );
    daemon.stop_cleanly();
}

#[test]
fn a_bad_protocol_version_is_refused() {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = Conn::open(&daemon.socket());
    // Another version, in the protocol's own terms.
    for params in [
        json!({ "protocol": 2 }),
        json!({ "protocol": 0 }),
        json!({ "protocol": 1.5 }),
    ] {
        let answer = conn.request("initialize", params.clone());
        assert_eq!(
            error_code(&answer),
            code::VERSION_MISMATCH,
            "{params}: {answer}"
        );
        assert_eq!(answer["error"]["data"]["protocol"], json!(1), "{answer}");
    }
    // Not a version at all: a bad parameter, saying what it is and what was expected.
    for (params, says) in [
        (
            json!({ "protocol": "1" }),
            "protocol must be an integer, not the string \"1\"",
        ),
        (
            json!({ "protocol": [1] }),
            "protocol must be an integer, not an array",
        ),
        (json!({}), "protocol is required"),
        (json!([1]), "initialize takes an object"),
        (
            json!({ "protocol": 1, "exec_id": 7 }),
            "exec_id must be a string",
        ),
    ] {
        let answer = conn.request("initialize", params.clone());
        assert_eq!(
            error_code(&answer),
            code::INVALID_PARAMS,
            "{params}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{params}: {message}");
        if params.get("exec_id").is_none() {
            assert!(
                message.contains("this daemon speaks 1"),
                "{params}: {message}"
            );
            assert_eq!(answer["error"]["data"]["protocol"], json!(1), "{answer}");
        }
    }
    // Still not initialized.
    let answer = conn.request("status", Value::Null);
    assert_eq!(error_code(&answer), code::VERSION_MISMATCH, "{answer}");
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    conn.initialize();
    assert_serves(
        &mut conn,
        daemon.pid,
        "the same connection after initialize",
    );
    daemon.stop_cleanly();
}

// FIXED BUG (src/daemon/server.rs, `serve`): the handshake was checked when a request's task
// ran, not when its line was read, so a request written in the same burst as `initialize`
// could run once the handshake had succeeded, even if it came before it, or before a refused
// one: `project.add`, `initialize` (protocol 2, refused), `initialize` (protocol 1) created
// the project. Now the reader refuses every request it reads before a successful
// `initialize`, in line order. (Fixed; this test keeps it so.)
#[test]
fn nothing_written_before_a_successful_initialize_runs_whatever_the_timing() {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let project_dir = daemon.home.join("project");
    std::fs::create_dir_all(&project_dir).unwrap();
    for round in 0..20 {
        let add = |id: Value, name: String| {
            let mut request = json!({
                "jsonrpc": "2.0", "method": "project.add",
                "params": { "name": name, "path": project_dir },
            });
            if !id.is_null() {
                request["id"] = id;
            }
            request.to_string()
        };
        let initialize = |id: u64, protocol: u64| {
            json!({
                "jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": { "protocol": protocol },
            })
            .to_string()
        };
        // One write: a request, a notification, a refused initialize, a request, a good
        // initialize, and a request that may run.
        let burst = [
            add(json!(1), format!("before-{round}")),
            add(Value::Null, format!("notified-{round}")),
            initialize(2, 2),
            add(json!(3), format!("after-refused-{round}")),
            initialize(4, 1),
            json!({ "jsonrpc": "2.0", "id": 5, "method": "project.list" }).to_string(),
        ]
        .join("\n");
        let mut conn = Conn::open(&daemon.socket());
        conn.send_line(burst.as_bytes());
        for (id, expected) in [
            (1, code::VERSION_MISMATCH),
            (2, code::VERSION_MISMATCH),
            (3, code::VERSION_MISMATCH),
        ] {
            let answer = conn.answer(&json!(id));
            assert_eq!(
                error_code(&answer),
                expected,
                "round {round}, id {id}: {answer}"
            );
        }
        assert!(conn.answer(&json!(4)).get("result").is_some());
        let list = conn.answer(&json!(5));
        assert_eq!(list["result"], json!([]), "round {round}: {list}");
    }
    // Nothing of it reached the store.
    assert_eq!(witness.call("project.list", Value::Null), json!([]));
    let stored = daemon.store().value("SELECT count(*) FROM projects");
    assert_eq!(
        stored,
        json!(0),
        "a request sent before initialize created a project"
    );
    daemon.stop_cleanly();
}

// FIXED BUG (src/daemon/server.rs and src/protocol.rs): ids were parsed into a `Value`, so an
// integer beyond u64 came back as a float (`18446744073709551617` as `1.8446744073709552e19`),
// an id of any type was accepted (an object, an array, a boolean), and a request with
// `"id": null` was taken for a notification and never answered. (Fixed; this test keeps it
// so.)
#[test]
fn ids_of_every_json_type() {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = daemon.connect();
    // Valid ids come back exactly as written.
    for id in [
        r#""x""#,
        r#""""#,
        r#""é\n\u00e9""#,
        "0",
        "-7",
        "18446744073709551617",
        "-18446744073709551617",
        "123456789012345678901234567890",
        "1.50",
        "2e3",
        "null",
    ] {
        conn.send_line(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"status"}}"#).as_bytes());
        let line = conn.read_raw().expect("an answer");
        assert!(
            line.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"#)),
            "id {id} came back as: {}",
            &line[..line.len().min(120)]
        );
    }
    // Any other type is an invalid request, answered with a null id.
    for id in ["{}", r#"{"id":1}"#, "[]", "[1]", "true", "false"] {
        conn.send_line(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"status"}}"#).as_bytes());
        let answer = conn.read_message().expect("an answer");
        assert_eq!(
            error_code(&answer),
            code::INVALID_REQUEST,
            "id {id}: {answer}"
        );
        assert_eq!(answer["id"], Value::Null, "id {id}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("id must be a string, a number or null"),
            "id {id}: {answer}"
        );
    }
    // A missing id is a notification: carried out, not answered (the next answer is the
    // next request's).
    conn.send_line(br#"{"jsonrpc":"2.0","method":"status"}"#);
    conn.send_line(br#"{"jsonrpc":"2.0","id":"after","method":"status"}"#);
    let answer = conn.read_message().unwrap();
    assert_eq!(answer["id"], "after", "{answer}");
    // A big id before initialize is refused with that same id.
    let mut fresh = Conn::open(&daemon.socket());
    fresh.send_line(br#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"status"}"#);
    let line = fresh.read_raw().unwrap();
    assert!(
        line.starts_with(r#"{"jsonrpc":"2.0","id":18446744073709551617,"error":{"code":-32008"#),
        "{line}"
    );
    assert_serves(&mut conn, daemon.pid, "the same connection");
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

#[test]
fn a_silent_client_is_closed_after_the_handshake_timeout() {
    let mut daemon = Daemon::start(&[("CORRAL_HANDSHAKE_TIMEOUT_MS", "300")]);
    let mut witness = daemon.connect();
    let descriptors = unix_socket_descriptors(daemon.pid);
    let started = Instant::now();
    let mut silent = Conn::open(&daemon.socket());
    let notice = silent
        .read_message()
        .expect("a line saying why the connection closes");
    assert_eq!(error_code(&notice), code::INVALID_REQUEST, "{notice}");
    assert!(
        notice["error"]["message"]
            .as_str()
            .unwrap()
            .contains("handshake"),
        "{notice}"
    );
    assert!(silent.read_message().is_none(), "the connection stays open");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "closed after {waited:?}, the timeout being 300 ms"
    );
    // No resource held: the daemon's descriptors are back to what they were.
    drop(silent);
    let deadline = Instant::now() + Duration::from_secs(5);
    while unix_socket_descriptors(daemon.pid) > descriptors && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        unix_socket_descriptors(daemon.pid),
        descriptors,
        "descriptors held"
    );
    // A connection that sends only part of a line is timed out too.
    let mut partial = Conn::open(&daemon.socket());
    partial
        .writer
        .write_all(br#"{"jsonrpc":"2.0","id":1,"#)
        .unwrap();
    let notice = partial.read_message().expect("the timeout notice");
    assert_eq!(error_code(&notice), code::INVALID_REQUEST, "{notice}");
    assert!(partial.read_message().is_none());
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

// FIXED BUG (src/daemon/server.rs, `serve`): `initialize` runs as a spawned task, so when the
// read loop asks for the next line `connection.initialized` is still false and the read is
// put under the handshake timeout. A client that initializes and then sends nothing for the
// handshake timeout (10 s by default; 300 ms here) is told "no initialize within the handshake
// timeout" and disconnected. (Fixed; this test keeps it so.)
#[test]
fn an_initialized_client_may_stay_idle_past_the_handshake_timeout() {
    let mut daemon = Daemon::start(&[("CORRAL_HANDSHAKE_TIMEOUT_MS", "300")]);
    let mut conn = Conn::open(&daemon.socket());
    conn.initialize();
    std::thread::sleep(Duration::from_millis(800));
    let id = json!(99);
    let request = json!({ "jsonrpc": "2.0", "id": id, "method": "status" });
    let sent = conn
        .writer
        .write_all(format!("{request}\n").as_bytes())
        .is_ok();
    let first = conn.read_message();
    daemon.stop_cleanly();
    assert!(
        sent && first
            .as_ref()
            .is_some_and(|m| m["id"] == id && m.get("result").is_some()),
        "an initialized client idle for 800 ms (handshake timeout 300 ms) lost its connection; \
         the daemon wrote: {first:?}"
    );
}

// FIXED BUG (src/daemon/server.rs, `serve`): the handshake timeout is applied to each line
// read, not to the handshake as a whole, so a client that never initializes but writes a line
// (any line: each is refused with -32008) more often than the timeout keeps its connection
// for as long as it likes. The module doc says "a client must `initialize` within
// HANDSHAKE_TIMEOUT". A deadline fixed at accept time (checked against `initialized`) fixes
// this and the idle-client bug above. (Fixed; this test keeps it so.)
#[test]
fn a_client_that_never_initializes_is_closed_even_if_it_keeps_talking() {
    let mut daemon = Daemon::start(&[("CORRAL_HANDSHAKE_TIMEOUT_MS", "300")]);
    let mut chatty = Conn::open(&daemon.socket());
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_millis(2_000) {
        let request = br#"{"jsonrpc":"2.0","id":1,"method":"status"}"#;
        if chatty
            .writer
            .write_all(&[&request[..], b"\n"].concat())
            .is_err()
        {
            closed = true;
            break;
        }
        match chatty.read_message() {
            Some(answer) if answer["id"] == json!(1) => {
                assert_eq!(error_code(&answer), code::VERSION_MISMATCH, "{answer}");
            }
            // The timeout notice, then the end.
            Some(_) | None => {
                closed = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.stop_cleanly();
    assert!(
        closed,
        "a client that never initialized kept its connection for {:?} (handshake timeout \
         300 ms) by sending a line every 100 ms",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// One daemon per home, the socket path, stale sockets, peers

#[test]
fn a_second_daemon_is_refused_and_the_first_keeps_serving() {
    let mut first = Daemon::start(&[]);
    let mut witness = first.connect();
    // In the foreground, as `corral daemon`.
    let output = run(
        {
            let mut command = corral(&first.home);
            command.arg("daemon");
            command
        },
        Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("pid {}", first.pid)) && stderr.contains("already"),
        "stderr does not name the pid holding the lock: {stderr}"
    );
    // And as `corral daemon --detach`.
    let output = run(
        {
            let mut command = corral(&first.home);
            command.args(["daemon", "--detach"]);
            command
        },
        Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("pid {}", first.pid)),
        "stderr does not name the pid holding the lock: {stderr}"
    );
    // The first one keeps serving, its lock, socket and pid file untouched.
    assert_serves(&mut witness, first.pid, "the first daemon's client");
    let mut fresh = first.connect();
    assert_eq!(
        fresh.initialize()["daemon_pid"],
        json!(first.pid),
        "a new client reached another daemon"
    );
    for file in ["daemon.lock", "daemon.pid"] {
        let content = std::fs::read_to_string(first.home.join(file)).unwrap();
        assert_eq!(content.trim(), first.pid.to_string(), "{file}");
    }
    first.stop_cleanly();
}

#[test]
fn a_socket_path_too_long_for_sun_path_is_refused_naming_the_limit() {
    let base = tempfile::tempdir().unwrap();
    let home = base.path().join("h".repeat(110));
    std::fs::create_dir(&home).unwrap();
    let _database = store::for_home(&home);
    let socket = home.join("corral.sock");
    assert!(socket.as_os_str().len() > 107);
    for args in [&["daemon"][..], &["daemon", "--detach"][..]] {
        let output = run(
            {
                let mut command = corral(&home);
                command.args(args);
                command
            },
            Duration::from_secs(30),
        );
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("107") && stderr.contains("socket path"),
            "{args:?}: the error does not name the limit: {stderr}"
        );
        assert!(!socket.exists() && !home.join("daemon.pid").exists());
    }
    // The client says the same instead of trying to connect.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let error = runtime
        .block_on(corral::client::Client::connect(&home, None))
        .err()
        .expect("the client cannot connect through a path that long");
    assert!(error.to_string().contains("107"), "{error}");
}

#[test]
fn a_stale_plain_file_at_the_socket_path_is_replaced() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("corral.sock"), "left over").unwrap();
    let mut daemon = Daemon::start_in(home.path(), &[]);
    assert_is_our_socket(&daemon.socket());
    assert_serves(&mut daemon.connect(), daemon.pid, "a client");
    daemon.stop_cleanly();
}

#[test]
fn a_stale_socket_of_a_dead_daemon_is_replaced() {
    let home = tempfile::tempdir().unwrap();
    let socket = home.path().join("corral.sock");
    // Bound, then its owner gone: the file stays, nobody listens.
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    assert_eq!(
        UnixStream::connect(&socket).unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    let mut daemon = Daemon::start_in(home.path(), &[]);
    assert_is_our_socket(&daemon.socket());
    assert_serves(&mut daemon.connect(), daemon.pid, "a client");
    daemon.stop_cleanly();
}

fn assert_is_our_socket(path: &Path) {
    let metadata = std::fs::metadata(path).unwrap();
    assert!(
        metadata.file_type().is_socket(),
        "{} is not a socket",
        path.display()
    );
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600, "socket mode");
}

/// Runs `work` on a thread whose effective uid is `nobody` (65534). The raw syscall changes
/// the calling thread's credentials only (libc's wrapper would change every thread's).
fn as_another_user<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: setresuid on this thread only; -1 leaves the real and saved uids.
        let changed = unsafe { libc::syscall(libc::SYS_setresuid, -1i64, 65534i64, -1i64) };
        assert_eq!(changed, 0, "setresuid");
        work()
    })
    .join()
    .expect("the other user's thread")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Opens the home and the socket to everyone, connects as `nobody`, sends `initialize` and
/// returns what the daemon wrote back before closing.
fn connect_as_another_user(daemon: &Daemon) -> std::io::Result<Vec<u8>> {
    let socket = daemon.socket();
    // As created: another user cannot reach the socket at all.
    let probe = socket.clone();
    let refused = as_another_user(move || UnixStream::connect(&probe).map(|_| ()));
    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied,
        "another user reached a socket of mode 0600"
    );
    // Past the file permissions, the daemon's own check must refuse.
    std::fs::set_permissions(&daemon.home, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    as_another_user(move || {
        let mut stream = UnixStream::connect(&socket)?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        // The daemon may close before reading: a failed write is a refusal too.
        let _ = stream.write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol\":1}}\n",
        );
        let mut answer = Vec::new();
        match stream.read_to_end(&mut answer) {
            Ok(_) => Ok(answer),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => Ok(answer),
            Err(error) => Err(error),
        }
    })
}

#[test]
fn a_peer_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: connecting as another uid needs root");
        return;
    }
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let answer = connect_as_another_user(&daemon).expect("the connection as nobody");
    // One line says why, then the connection closes; the initialize sent was not answered.
    let answer = text(&answer);
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "the daemon wrote to a peer of another uid: {answer:?}"
    );
    let refusal: Value = serde_json::from_str(lines[0]).expect("a JSON-RPC line");
    assert_eq!(refusal["id"], Value::Null, "{refusal}");
    assert_eq!(error_code(&refusal), code::PEER_REFUSED, "{refusal}");
    assert_eq!(
        refusal["error"]["message"],
        "refused: this daemon serves uid 0 only, and this connection is uid 65534"
    );
    assert_serves(&mut witness, daemon.pid, "the daemon's own user");
    daemon.stop_cleanly();
}

/// The CLI says what the daemon said when it refused the connection: here a socket that
/// answers every connection with the daemon's own refusal line (what a peer of another uid
/// gets), so the client's side is tested with one uid.
#[test]
fn the_cli_prints_why_the_daemon_refused_it() {
    let home = tempfile::tempdir().unwrap();
    let _database = store::for_home(home.path());
    let listener = UnixListener::bind(home.path().join("corral.sock")).unwrap();
    let refusal = corral::daemon::server::refusal_line(
        corral::daemon::server::peer_refusal(0, &Ok(65534)).unwrap(),
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let done = done.clone();
        std::thread::spawn(move || {
            listener.set_nonblocking(true).unwrap();
            let mut served = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        // Refused before anything is read, as the daemon does.
                        let _ = stream.write_all(refusal.as_bytes());
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        served += 1;
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(error) => panic!("accept: {error}"),
                }
            }
            served
        })
    };
    let output = run(
        {
            let mut command = corral(home.path());
            command.args(["--no-spawn", "project", "add", "p", "/tmp"]);
            command
        },
        Duration::from_secs(30),
    );
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(server.join().unwrap() >= 1, "the CLI never connected");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("refused: this daemon serves uid 0 only, and this connection is uid 65534"),
        "the CLI did not say why it was refused: {stderr:?}"
    );
}

/// The real thing: `corral` run as `nobody` against a root daemon prints the refusal.
#[test]
fn the_cli_of_another_user_prints_the_refusal() {
    if !is_root() {
        eprintln!("skipped: running the CLI as another uid needs root");
        return;
    }
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    std::fs::set_permissions(&daemon.home, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(daemon.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    // The CLI has a home of its own (its exec is recorded in its own store), whose socket is
    // the daemon's.
    let own_home = tempfile::tempdir().unwrap();
    let _database = store::for_home(own_home.path());
    std::os::unix::fs::symlink(daemon.socket(), own_home.path().join("corral.sock")).unwrap();
    std::os::unix::fs::lchown(own_home.path(), Some(65534), Some(65534)).unwrap();
    // Its config (PostgreSQL's pass) is the CLI's user's, as corral requires.
    let config = own_home.path().join("config");
    if config.exists() {
        std::os::unix::fs::lchown(&config, Some(65534), Some(65534)).unwrap();
    }
    let mut command = corral(own_home.path());
    command.args(["--no-spawn", "project", "add", "p", "/tmp"]);
    use std::os::unix::process::CommandExt;
    // SAFETY: setgid/setuid between fork and exec, async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = run(command, Duration::from_secs(30));
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr.contains("refused: this daemon serves uid 0 only, and this connection is uid 65534"),
        "the CLI of another user did not say why it was refused: {stderr:?}"
    );
    assert_serves(&mut witness, daemon.pid, "the daemon's own user");
    let projects = witness.call("project.list", Value::Null);
    assert_eq!(projects, json!([]), "the refused CLI added a project");
    daemon.stop_cleanly();
}

// FIXED BUG (src/daemon/server.rs, `serve`, with no tracing subscriber anywhere): a refused
// peer is reported with `tracing::warn!`, but nothing installs a subscriber, so the refusal
// reaches neither stderr nor HOME/daemon.log; the issue asks for "refused, logged". (Fixed:
// the daemon now logs to stderr, which --detach sends to daemon.log.)
#[test]
fn a_refused_peer_is_logged() {
    if !is_root() {
        eprintln!("skipped: connecting as another uid needs root");
        return;
    }
    let mut daemon = Daemon::start(&[]);
    let _ = connect_as_another_user(&daemon);
    std::thread::sleep(Duration::from_millis(200));
    let log = std::fs::read_to_string(daemon.home.join("daemon.log")).unwrap_or_default();
    daemon.stop_cleanly();
    assert!(
        log.contains("65534") || log.to_lowercase().contains("refused"),
        "HOME/daemon.log says nothing of the refused peer: {log:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Bounds per peer

/// How much more than its baseline the daemon may hold for one hostile client.
const RSS_GROWTH_LIMIT_KIB: u64 = 24 << 10;

/// Writes `lines` on a clone of `conn`'s socket from a thread (the writes block once the
/// daemon stops reading); returns the thread and the count of lines written so far.
fn write_from_a_thread(
    conn: &Conn,
    lines: Vec<Vec<u8>>,
) -> (
    std::thread::JoinHandle<std::io::Result<()>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let mut writer = conn.writer.try_clone().unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = written.clone();
    let thread = std::thread::spawn(move || {
        for line in lines {
            writer.write_all(&line)?;
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    });
    (thread, written)
}

/// Waits until `written` stops growing for 500 ms (the daemon stopped reading) or reaches
/// `all`; returns it.
fn until_writes_stall(written: &std::sync::atomic::AtomicUsize, all: usize) -> usize {
    let mut last = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = written.load(std::sync::atomic::Ordering::SeqCst);
        if now == all || (now == last && now > 0) || Instant::now() > deadline {
            return now;
        }
        last = now;
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn status_requests(ids: std::ops::RangeInclusive<u64>) -> Vec<Vec<u8>> {
    ids.map(|id| {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\"}}\n").into_bytes()
    })
    .collect()
}

// FIXED BUG (src/daemon/server.rs, `serve`): every request ran as a task at once and its
// answer waited in an unbounded way, so a client that wrote requests and never read made the
// daemon hold about 14 KiB per request, never given back (60,000 requests: 850 MB). Now a
// connection has a few MiB of requests in flight and of answers queued, and the daemon stops
// reading it until answers drain. (Fixed; this test keeps it so.)
#[test]
fn ten_thousand_unread_requests_hold_a_few_mib_and_are_all_answered_once_read() {
    const REQUESTS: u64 = 10_000;
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    for _ in 0..50 {
        assert_serves(&mut witness, daemon.pid, "the witness");
    }
    let baseline = rss_kib(daemon.pid);

    // A client that writes 10,000 requests and reads nothing.
    let mut flood = daemon.connect();
    let (writing, written) = write_from_a_thread(&flood, status_requests(1..=REQUESTS));
    let stalled = until_writes_stall(&written, REQUESTS as usize);
    let held = rss_kib(daemon.pid).saturating_sub(baseline);
    eprintln!(
        "10,000 unread requests: the daemon read {stalled} before it stopped reading; \
         RSS {baseline} KiB before, +{held} KiB with them"
    );
    assert!(
        stalled < REQUESTS as usize,
        "the daemon read all {REQUESTS} requests of a client that reads nothing"
    );
    assert!(
        held < RSS_GROWTH_LIMIT_KIB,
        "the daemon holds {held} KiB more for a client that does not read"
    );
    // Others are served meanwhile.
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    assert_serves(&mut daemon.connect(), daemon.pid, "a new connection");

    // The client reads at last: every request is answered, once.
    let mut answered = vec![false; REQUESTS as usize + 1];
    for _ in 1..=REQUESTS {
        let answer = flood.read_message().expect("an answer");
        let id = answer["id"].as_u64().expect("a numeric id") as usize;
        assert!(answer.get("result").is_some(), "{answer}");
        assert!(!answered[id], "id {id} answered twice");
        answered[id] = true;
    }
    writing.join().unwrap().expect("every request written");
    assert_serves(
        &mut flood,
        daemon.pid,
        "the flooding connection, once it reads",
    );
    eprintln!(
        "after the answers were read: RSS +{} KiB over the baseline",
        rss_kib(daemon.pid).saturating_sub(baseline)
    );

    // Another client floods and leaves without reading: the daemon lets it go.
    let descriptors = unix_socket_descriptors(daemon.pid);
    let leaver = daemon.connect();
    let (writing, written) = write_from_a_thread(&leaver, status_requests(1..=REQUESTS));
    until_writes_stall(&written, REQUESTS as usize);
    leaver.writer.shutdown(std::net::Shutdown::Both).unwrap();
    drop(leaver);
    let _ = writing.join();
    let deadline = Instant::now() + Duration::from_secs(10);
    while unix_socket_descriptors(daemon.pid) > descriptors && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        unix_socket_descriptors(daemon.pid),
        descriptors,
        "the daemon kept the connection of a client that left"
    );
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

#[test]
fn a_client_that_neither_initializes_nor_reads_is_closed_all_the_same() {
    let mut daemon = Daemon::start(&[("CORRAL_HANDSHAKE_TIMEOUT_MS", "300")]);
    let mut witness = daemon.connect();
    let descriptors = unix_socket_descriptors(daemon.pid);
    // 30,000 requests before initialize: 30,000 refusals it never reads (more than the
    // daemon queues for it and the socket's buffers hold).
    let mute = Conn::open(&daemon.socket());
    let (writing, _) = write_from_a_thread(&mute, status_requests(1..=30_000));
    let deadline = Instant::now() + Duration::from_secs(10);
    std::thread::sleep(Duration::from_millis(300));
    while unix_socket_descriptors(daemon.pid) > descriptors && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        unix_socket_descriptors(daemon.pid),
        descriptors,
        "the connection of a client that never initialized nor read is still open"
    );
    assert!(
        writing.join().unwrap().is_err(),
        "the daemon read all 30,000 lines"
    );
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

#[test]
fn a_64_mib_line_is_refused_skipped_and_held_nowhere() {
    let mut daemon = Daemon::start(&[]);
    let mut witness = daemon.connect();
    let mut conn = daemon.connect();
    let baseline = rss_kib(daemon.pid);
    let head = br#"{"jsonrpc":"2.0","id":1,"method":"project.add","params":{"name":"big","path":"/tmp","instructions":""#;
    let mut line = head.to_vec();
    line.resize(64 << 20, b'x');
    line.extend_from_slice(b"\"}}\n");
    let (writing, _) = write_from_a_thread(
        &conn,
        vec![
            line,
            br#"{"jsonrpc":"2.0","id":2,"method":"status"}"#.to_vec(),
            b"\n".to_vec(),
        ],
    );
    let answer = conn.read_message().expect("an answer to the long line");
    assert_eq!(error_code(&answer), code::INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    let status = conn.answer(&json!(2));
    assert!(status.get("result").is_some(), "{status}");
    writing.join().unwrap().unwrap();
    let held = rss_kib(daemon.pid).saturating_sub(baseline);
    eprintln!("a 64 MiB line: RSS +{held} KiB");
    assert!(
        held < RSS_GROWTH_LIMIT_KIB,
        "the daemon holds {held} KiB more after a 64 MiB line"
    );
    assert_eq!(conn.call("project.list", Value::Null), json!([]));
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    daemon.stop_cleanly();
}

/// Opens `count` connections to `socket` without a word on them.
fn open_many(socket: &Path, count: usize) -> Vec<UnixStream> {
    (0..count)
        .map(|_| UnixStream::connect(socket).expect("connect"))
        .collect()
}

/// Reads what each connection has to say now: the lines of those the daemon refused.
fn refusals(connections: &[UnixStream]) -> Vec<Value> {
    let mut refused = Vec::new();
    for stream in connections {
        stream.set_nonblocking(true).unwrap();
        let mut bytes = Vec::new();
        let _ = (&*stream).read_to_end(&mut bytes);
        if !bytes.is_empty() {
            refused.push(serde_json::from_slice(&bytes).expect("one JSON-RPC line"));
        }
    }
    refused
}

/// Lines of the daemon's log that mention failed accepts.
fn accept_failures_logged(daemon: &Daemon) -> usize {
    std::fs::read_to_string(daemon.home.join("daemon.log"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("accept failed"))
        .count()
}

#[test]
fn over_its_connection_limit_the_daemon_says_so_and_serves_the_rest() {
    const LIMIT: u64 = 1024;
    raise_own_descriptor_limit(4096);
    let mut daemon =
        Daemon::start_with_descriptors(&[("CORRAL_HANDSHAKE_TIMEOUT_MS", "600000")], LIMIT);
    let served_at_most = (LIMIT / 4 * 3) as usize;
    let mut witness = daemon.connect();
    let cpu_before = cpu_time(daemon.pid);
    let started = Instant::now();
    let mut connections = open_many(&daemon.socket(), 1_100);
    std::thread::sleep(Duration::from_secs(2));
    let refused = refusals(&connections);
    // Everyone past the limit was told why (the witness holds one place).
    assert_eq!(refused.len(), 1_100 - (served_at_most - 1), "refused");
    for refusal in &refused {
        assert_eq!(error_code(refusal), code::BUSY, "{refusal}");
        assert_eq!(refusal["id"], Value::Null, "{refusal}");
        assert!(
            refusal["error"]["message"]
                .as_str()
                .unwrap()
                .contains("serves 768 connections"),
            "{refusal}"
        );
    }
    // At the limit, the daemon still has descriptors for its own work.
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    let project_dir = daemon.home.join("project");
    std::fs::create_dir_all(&project_dir).unwrap();
    witness.call("project.add", json!({ "name": "p", "path": project_dir }));
    let cpu = cpu_time(daemon.pid) - cpu_before;
    let elapsed = started.elapsed();
    eprintln!(
        "1,100 connections, limit {LIMIT}: {} refused; daemon CPU {cpu:?} in {elapsed:?}",
        refused.len()
    );
    assert!(
        cpu < elapsed / 3,
        "the daemon used {cpu:?} of CPU in {elapsed:?}"
    );
    // Served connections close; a new client is served again (refused until the daemon has
    // seen some of them close).
    connections.truncate(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        let mut conn = Conn::open(&daemon.socket());
        let _ = conn.writer.write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol\":1}}\n",
        );
        let answer = conn.read_message().expect("an answer or a refusal");
        if answer["id"] == json!(1) && answer.get("result").is_some() {
            break conn;
        }
        assert_eq!(error_code(&answer), code::BUSY, "{answer}");
        assert!(
            Instant::now() < deadline,
            "no new client served after connections closed: {answer}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_serves(&mut conn, daemon.pid, "a new client");
    daemon.stop_cleanly();
}

// FIXED BUG (src/daemon/mod.rs, `serve_until_signal`): at the descriptor limit `accept` fails
// with EMFILE at once and forever, the pending connection keeps the listener ready, and the
// loop logged and retried at once: 100 % CPU and 35 MB/s of "Too many open files" lines. Now
// it waits 10 ms, doubling to 1 s, logs once per 10 s, and accepts again as soon as
// descriptors free up. (Fixed; this test keeps it so.)
#[test]
fn at_the_descriptor_limit_the_accept_loop_backs_off_and_recovers() {
    const LIMIT: u64 = 1024;
    raise_own_descriptor_limit(4096);
    // No connection limit of its own: the daemon runs into the descriptor limit itself.
    let mut daemon = Daemon::start_with_descriptors(
        &[
            ("CORRAL_HANDSHAKE_TIMEOUT_MS", "600000"),
            ("CORRAL_MAX_CONNECTIONS", "100000"),
        ],
        LIMIT,
    );
    let mut witness = daemon.connect();
    let mut connections = open_many(&daemon.socket(), 1_100);
    // Until the daemon holds all the descriptors it may.
    let deadline = Instant::now() + Duration::from_secs(20);
    while open_descriptors(daemon.pid) < LIMIT as usize - 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        open_descriptors(daemon.pid) >= LIMIT as usize - 1,
        "the daemon never reached its limit"
    );
    let cpu_before = cpu_time(daemon.pid);
    let logged_before = accept_failures_logged(&daemon);
    std::thread::sleep(Duration::from_secs(4));
    let cpu = cpu_time(daemon.pid) - cpu_before;
    let logged = accept_failures_logged(&daemon) - logged_before;
    eprintln!(
        "at the descriptor limit for 4 s: daemon CPU {cpu:?}, {logged} accept failures logged"
    );
    assert!(
        cpu < Duration::from_millis(400),
        "the daemon used {cpu:?} of CPU in 4 s at the limit"
    );
    assert!(logged <= 1, "{logged} lines of failed accepts in 4 s");
    assert!(
        accept_failures_logged(&daemon) >= 1,
        "the limit was never logged"
    );
    // The connection opened before is still answered (at the limit, whatever its method
    // needs may fail, but with an answer).
    let status = witness.request("status", Value::Null);
    assert!(
        status.get("result").is_some() || status.get("error").is_some(),
        "{status}"
    );

    // Some close: the daemon takes the waiting ones, then a new client, within a backoff.
    connections.drain(..300);
    let closed = Instant::now();
    let mut conn = Conn::open(&daemon.socket());
    conn.initialize();
    let waited = closed.elapsed();
    eprintln!("a new client served {waited:?} after 300 connections closed");
    assert!(
        waited < Duration::from_secs(5),
        "a new client waited {waited:?}"
    );
    assert_serves(&mut conn, daemon.pid, "a new client");
    drop(connections);
    assert_serves(&mut witness, daemon.pid, "the connection opened before");
    let log = std::fs::read_to_string(daemon.home.join("daemon.log")).unwrap_or_default();
    for line in log.lines().filter(|line| line.contains("accept")) {
        eprintln!("daemon.log: {line}");
    }
    daemon.stop_cleanly();
}

// ---------------------------------------------------------------------------------------------
// Shutdown

/// `corral config set NAME VALUE` when the CLI has that command, else `settings.set`.
fn set_setting_as_a_user_would(daemon: &Daemon, conn: &mut Conn, name: &str, value: &str) {
    let help = run(
        {
            let mut command = corral(&daemon.home);
            command.args(["config", "set", "--help"]);
            command
        },
        Duration::from_secs(30),
    );
    if help.status.success() {
        let output = run(
            {
                let mut command = corral(&daemon.home);
                command.args(["config", "set", name, value]);
                command
            },
            Duration::from_secs(30),
        );
        assert!(output.status.success(), "corral config set: {output:?}");
    } else {
        conn.call("settings.set", json!({ "name": name, "value": value }));
    }
    let list = conn.call("settings.list", Value::Null);
    assert!(
        list["stored"]
            .as_array()
            .unwrap()
            .contains(&json!({ "name": name, "value": value })),
        "{name} not stored: {list}"
    );
}

#[test]
fn sigterm_with_a_prompt_running_requeues_it_and_leaves_no_engine() {
    let mut daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let session = daemon.session(&mut conn, "busy");
    set_setting_as_a_user_would(&daemon, &mut conn, "daemon.shutdown_grace_ms", "300");
    let mut watcher = daemon.connect();
    watcher.call(
        "events.subscribe",
        json!({ "session": session, "after": 0 }),
    );
    let prompt = conn.call(
        "prompt.send",
        json!({ "session": session, "text": "@fake hang\nwork until stopped" }),
    );
    let prompt_id = prompt["id"].as_str().unwrap().to_string();
    let mut engine_pid = None;
    loop {
        let event = watcher.event();
        if event["kind"] == "run.started" {
            engine_pid = event["payload"]["pid"].as_i64().map(|pid| pid as i32);
        }
        if event["kind"] == "turn.started" {
            break;
        }
    }
    let engine_pid = engine_pid.expect("run.started names the engine's pid");
    let (_, engine_start, engine_group) = proc_stat(engine_pid).expect("the engine runs");

    let signalled = Instant::now();
    // SAFETY: kill on the daemon's pid.
    unsafe { libc::kill(daemon.pid, libc::SIGTERM) };
    daemon.stopped = true;
    let ended = wait_for_exit(daemon.pid, STOP_TIMEOUT);
    let took = signalled.elapsed();
    assert_eq!(
        ended,
        Some(Ended::Exited(0)),
        "the daemon's exit after SIGTERM"
    );
    // 300 ms of grace, then the engine's group is ended (300 ms cancel grace at most); the
    // rest is slack for a loaded machine.
    assert!(
        took < Duration::from_millis(300 + 300 + 2_400),
        "the daemon took {took:?} to exit (grace 300 ms)"
    );
    assert!(!daemon.socket().exists(), "the socket was left behind");
    assert!(
        !daemon.home.join("daemon.pid").exists(),
        "the pid file was left behind"
    );

    // No engine left: not the run's process (the same pid and start time, not even a zombie
    // handed to us), not any member of its group.
    assert!(
        !matches!(proc_stat(engine_pid), Some((_, start, _)) if start == engine_start),
        "the engine {engine_pid} outlived the daemon: {:?}",
        proc_stat(engine_pid)
    );
    assert!(
        group_members(engine_group).is_empty(),
        "processes of the engine's group outlived the daemon: {:?}",
        group_members(engine_group)
    );

    // The prompt is queued again and its run closed as interrupted.
    let store = daemon.store();
    let prompt = store::quoted(&prompt_id);
    let status = store.value(&format!("SELECT status FROM prompts WHERE id = {prompt}"));
    assert_eq!(status, "queued");
    let runs = store.sql(&format!(
        "SELECT status, pid FROM runs WHERE prompt_id = {prompt}"
    ));
    assert_eq!(
        runs,
        vec![vec![json!("interrupted"), json!(engine_pid as i64)]],
        "the prompt's runs"
    );
    eprintln!("SIGTERM to exit with a prompt running: {took:?}");
}

// ---------------------------------------------------------------------------------------------
// Subscriptions

#[test]
fn subscribing_after_an_offset_misses_and_repeats_nothing_across_a_reconnect() {
    const SPLIT: i64 = 40;
    let mut daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let session = daemon.session(&mut conn, "stream");

    // The first connection sees events 1..=SPLIT live, then goes away mid-stream.
    let mut first = daemon.connect();
    first.call(
        "events.subscribe",
        json!({ "session": session, "after": 0 }),
    );
    let prompt = conn.call(
        "prompt.send",
        json!({ "session": session, "text": "@fake deltas=300\n@fake interval=2\nstream" }),
    );
    let mut seen = Vec::new();
    while seen.len() < SPLIT as usize {
        seen.push(first.event());
    }
    drop(first);

    // The second subscribes after SPLIT while the prompt still streams.
    let mut second = daemon.connect();
    let subscribed = second.call(
        "events.subscribe",
        json!({ "session": session, "after": SPLIT }),
    );
    assert_eq!(subscribed["after"], json!(SPLIT));
    loop {
        let event = second.event();
        let last = event["kind"] == "prompt.done";
        seen.push(event);
        if last {
            break;
        }
    }
    let done = conn.call("prompt.wait", json!({ "prompt": prompt["id"] }));
    assert_eq!(done["status"], "done", "{done}");
    let sequence: Vec<i64> = seen.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let expected: Vec<i64> = (1..=sequence.len() as i64).collect();
    assert_eq!(
        sequence, expected,
        "events missed or repeated across the reconnect"
    );
    assert!(
        sequence.len() > 300,
        "the stream was too short to test anything"
    );
    assert!(seen.iter().all(|e| e["session_id"] == json!(session)));
    let shown = conn.call("session.show", json!({ "session": session }));
    assert_eq!(
        shown["session"]["last_event_seq"],
        json!(sequence.len()),
        "the session has events the subscribers never got"
    );

    // A subscription after the end replays exactly the same events from the store.
    let mut third = daemon.connect();
    third.call(
        "events.subscribe",
        json!({ "session": session, "after": 0 }),
    );
    for live in &seen {
        assert_eq!(
            &third.event(),
            live,
            "a replayed event differs from the live one"
        );
    }
    // And one after the last event gets nothing until something happens.
    let mut fourth = daemon.connect();
    fourth.call(
        "events.subscribe",
        json!({ "session": session, "after": sequence.len() }),
    );
    let more = conn.call(
        "prompt.send",
        json!({ "session": session, "text": "one more" }),
    );
    assert_eq!(
        fourth.event()["seq"],
        json!(sequence.len() + 1),
        "the next event after the offset"
    );
    let done = conn.call("prompt.wait", json!({ "prompt": more["id"] }));
    assert_eq!(done["status"], "done", "{done}");
    daemon.stop_cleanly();
}

#[test]
fn a_subscription_ended_by_lag_is_gone_and_a_bad_offset_is_refused() {
    let mut daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let session = daemon.session(&mut conn, "firehose");
    for after in [json!("7"), json!(-1), json!(1.5)] {
        let refused = conn.request(
            "events.subscribe",
            json!({ "session": session, "after": after }),
        );
        assert_eq!(error_code(&refused), -32602, "after {after}: {refused}");
    }
    let refused = conn.request("events.unsubscribe", json!({}));
    assert_eq!(error_code(&refused), -32602, "{refused}");

    // A client that does not read while 40,000 events stream falls behind and lags.
    let mut slow = daemon.connect();
    let subscribed = slow.call(
        "events.subscribe",
        json!({ "session": session, "after": 0 }),
    );
    let subscription = subscribed["subscription"].clone();
    let prompt = conn.call(
        "prompt.send",
        json!({ "session": session, "text": "@fake deltas=40000\nflood" }),
    );
    let done = conn.call("prompt.wait", json!({ "prompt": prompt["id"] }));
    assert_eq!(done["status"], "done", "{done}");
    let lagged = loop {
        let notification = slow.notification();
        if notification["method"] == "events.lagged" {
            break notification;
        }
    };
    assert_eq!(lagged["params"]["subscription"], subscription, "{lagged}");
    // The lagged subscription ended: it is not the connection's any more.
    let gone = slow.request(
        "events.unsubscribe",
        json!({ "subscription": subscription }),
    );
    assert_eq!(error_code(&gone), -32004, "{gone}");
    // A new one resumes from the notice's sequence.
    let resumed = slow.call(
        "events.subscribe",
        json!({ "session": session, "after": lagged["params"]["resume_after"] }),
    );
    assert_ne!(resumed["subscription"], subscription);
    let next = slow.event();
    assert_eq!(
        next["seq"].as_i64().unwrap(),
        lagged["params"]["resume_after"].as_i64().unwrap() + 1
    );
    daemon.stop_cleanly();
}

// ---------------------------------------------------------------------------------------------
// Found while writing these tests

// FIXED BUG (src/corral.rs, `Corral::start`, through `store::inspect`): in `corral daemon` the
// CLI's ledger has the store open before `Corral::start` reads the file's header with plain
// file I/O; closing that descriptor drops every POSIX lock the process holds on corral.db,
// including SQLite's shared lock, and SQLite never takes it again. Any other process that
// opens the store read-write and closes it then believes it is the last connection: it
// checkpoints and deletes corral.db-wal and -shm under the running daemon, whose later writes
// go to the deleted file and are lost. (Fixed; this test keeps it so.)
#[test]
fn an_outside_connection_to_the_store_does_not_hide_the_daemons_writes() {
    if store::skip_sqlite_only("SQLite's locks and WAL under an outside connection") {
        return;
    }
    let mut daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let project_dir = daemon.home.join("project");
    std::fs::create_dir_all(&project_dir).unwrap();
    conn.call(
        "project.add",
        json!({ "name": "before", "path": project_dir }),
    );
    {
        // What `sqlite3 corral.db 'SELECT …'` does.
        let outside = rusqlite::Connection::open(daemon.home.join("corral.db")).unwrap();
        let count: i64 = outside
            .query_row("SELECT count(*) FROM projects", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 1);
    }
    conn.call(
        "project.add",
        json!({ "name": "after", "path": project_dir }),
    );
    let wal_exists = daemon.home.join("corral.db-wal").exists();
    let names = rusqlite::Connection::open_with_flags(
        daemon.home.join("corral.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .and_then(|store| {
        store
            .prepare("SELECT name FROM projects ORDER BY name")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()
            })
    });
    daemon.stop_cleanly();
    assert!(
        wal_exists
            && names
                .as_ref()
                .is_ok_and(|names| names == &["after", "before"]),
        "after an outside connection closed, the daemon's write is invisible (projects in the \
         store: {names:?}; corral.db-wal exists: {wal_exists})"
    );
}

// FIXED BUG (src/client.rs, `Client::read_message`, and src/daemon/methods.rs, `history`): the
// daemon writes answers of any length (a session's whole history in one line), but the client
// reads at most MAX_LINE + 1 bytes of a line and fails to parse the rest: `corral history` of
// a long session (here 12 prompts of 100 kB) fails with "the daemon broke the protocol" and the
// connection is out of step. (Fixed; this test keeps it so.)
#[test]
fn a_long_history_reaches_the_client() {
    let mut daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let session = daemon.session(&mut conn, "long");
    let mut last = Value::Null;
    for index in 0..12 {
        let text = format!("@fake answer=ok {index}\n{}", "x".repeat(100_000));
        last = conn.call("prompt.send", json!({ "session": session, "text": text }))["id"].clone();
    }
    assert_eq!(
        conn.call("prompt.wait", json!({ "prompt": last }))["status"],
        "done"
    );
    let raw = conn.request("history", json!({ "session": session }));
    let raw_length = raw.to_string().len();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let home = daemon.home.clone();
    let outcome = runtime.block_on(async {
        let mut client = corral::client::Client::connect(&home, None).await?;
        // Typed calls: the answer decodes as the method's result type.
        let history = client
            .call::<protocol::History>(&protocol::SessionSelector::new(&session))
            .await?;
        let status = client
            .call::<protocol::Status>(&protocol::StatusParams::default())
            .await?;
        Ok::<_, corral::client::ClientError>((history, status))
    });
    daemon.stop_cleanly();
    let (history, status) = outcome.unwrap_or_else(|error| {
        panic!(
            "the client could not read a history answer of {raw_length} bytes \
             (MAX_LINE is {MAX_LINE}): {error}"
        )
    });
    assert_eq!(history.prompts.len(), 12);
    assert!(history.prompts.iter().all(|p| p.text.len() > 100_000));
    assert!(status.daemon.is_some());
}

/// `prompt.send`'s `due_at` and `after` refused as the CLI would refuse them, for a client that
/// is not the CLI: a time past, a prompt that does not exist; nothing is stored.
#[test]
fn a_send_due_in_the_past_or_after_nothing_is_refused() {
    let daemon = Daemon::start(&[]);
    let mut conn = daemon.connect();
    let session = daemon.session(&mut conn, "later");
    let past = conn.request(
        "prompt.send",
        json!({ "session": session, "text": "x", "due_at": 1_000 }),
    );
    assert_eq!(error_code(&past), -32602, "{past}");
    assert!(
        past["error"]["message"]
            .as_str()
            .unwrap()
            .contains("would be due in the past"),
        "{past}"
    );
    let nothing = conn.request(
        "prompt.send",
        json!({ "session": session, "text": "x", "after": ["0000"] }),
    );
    assert_eq!(error_code(&nothing), -32004, "{nothing}");
    let history = conn.call("history", json!({ "session": session }));
    assert_eq!(history["prompts"], json!([]), "{history}");
}
