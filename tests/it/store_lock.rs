//! A store another program locks: a `sqlite3` shell holds the write lock (`BEGIN IMMEDIATE`)
//! while a session streams events on the fake engine and other sends arrive.
//!
//! Under `store.lock_timeout_ms` (default 60 s), nothing is dropped: the writes wait, the
//! engine is held back on its full pipe meanwhile (its output is not piled up in memory), and
//! once the lock is released every event is stored, numbered without a hole and in order, the
//! sends succeed and the prompts finish. An 8 s lock ended by `COMMIT`, a 30 s one by killing
//! the shell. Past the limit (set to 5 s here), the run fails saying the store was locked,
//! its engine is ended, a send is refused with one line (the CLI) or a `BUSY` error (the
//! socket) naming the lock, and after the lock the failure is recorded and the session works.
//!
//! An app-server turn (the fake engine's app-server mode) cannot be held back on a pipe, since
//! its child's one reader serves every thread: a turn that falls 4,096 notifications behind
//! during a lock is given up (interrupted, failed saying so), and one whose writes wait past
//! the limit fails naming it, as a child run does; either way the session works afterwards.
//!
//! The `sqlite3` shell is killed on every path out of a test (`LockHolder` kills it when
//! dropped).

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{
    alive, finish, lines_of, next_line, wait_for, wait_until, DaemonHome, DEADLINE,
};
use common::rpc::Rpc;
use common::stderr;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The `sqlite3` shell (`CORRAL_TEST_SQLITE3` names another).
fn sqlite3() -> String {
    std::env::var("CORRAL_TEST_SQLITE3").unwrap_or_else(|_| "sqlite3".into())
}

/// Whether the `sqlite3` shell runs here. `.ci/run` installs it; where that install failed
/// (or on a machine without it) the tests say so and skip.
fn sqlite3_runs() -> bool {
    let runs = Command::new(sqlite3())
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !runs {
        eprintln!("skipped: {} does not run here (install sqlite3)", sqlite3());
    }
    runs
}

/// A `sqlite3` shell holding the store's write lock from [`LockHolder::take`] until it is
/// released ([`commit`](LockHolder::commit)) or killed (dropped).
struct LockHolder {
    child: Child,
    stdin: Option<ChildStdin>,
    taken: Instant,
}

impl LockHolder {
    /// Starts the shell on `db` and returns once it holds the write lock (it says so on
    /// stdout after `BEGIN IMMEDIATE`, waiting out a commit of the daemon's if need be).
    fn take(db: &Path) -> LockHolder {
        let mut child = Command::new(sqlite3())
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("{} does not start: {error}", sqlite3()));
        let stdout = child.stdout.take().expect("piped");
        let mut holder = LockHolder {
            stdin: child.stdin.take(),
            child,
            taken: Instant::now(),
        };
        holder.say(".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';");
        let lines = lines_of(stdout);
        next_line(&lines, |line| (line == "locked").then_some(()))
            .unwrap_or_else(|seen| panic!("sqlite3 did not take the lock: {seen:?}"));
        holder.taken = Instant::now();
        holder
    }

    fn say(&mut self, commands: &str) {
        let stdin = self.stdin.as_mut().expect("the shell's stdin is open");
        writeln!(stdin, "{commands}").expect("sqlite3 reads its stdin");
    }

    /// Keeps the lock until it has been held for `held`.
    fn hold_for(&self, held: Duration) {
        std::thread::sleep(held.saturating_sub(self.taken.elapsed()));
    }

    /// Ends the transaction and the shell (end of its input).
    fn commit(mut self) {
        self.say("COMMIT;");
        drop(self.stdin.take());
        let status = wait_for(&mut self.child);
        assert!(status.success(), "sqlite3 ended with {status}");
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        // The lock goes with the process (SQLite's locks are the process's).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `corral watch SESSION --follow`, read on a thread; killed when dropped.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(home: &DaemonHome, session: &str) -> Watch {
        let mut child = home
            .corral(&["watch", session, "--follow"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("corral watch starts");
        let lines = lines_of(child.stdout.take().expect("piped"));
        Watch { child, lines }
    }

    /// Waits for an event line of `kind` (`#SEQ KIND …`).
    fn until(&self, kind: &str) {
        next_line(&self.lines, |line| {
            (line.split_whitespace().nth(1) == Some(kind)).then_some(())
        })
        .unwrap_or_else(|seen| panic!("no {kind} event; saw {seen:?}"));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `corral` command started in the background, its output read when it ends.
fn spawn(home: &DaemonHome, args: &[&str]) -> Child {
    home.corral(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("corral starts")
}

/// A prompt that streams `steps` tool events, 2 ms apart: some 80 bytes a line, more than a
/// pipe and the worker's line buffer hold.
fn streaming(steps: usize) -> String {
    format!("@fake deltas={steps}\n@fake interval=2\nstream through a lock")
}

/// The engine's pid of the session's running run, once its row has it.
/// The engine of the session's running run: the child of the run's recorded process, its
/// shim (`corral-shim`).
fn engine_pid(home: &DaemonHome, session: &str) -> i32 {
    let shim = run_pid(home, session);
    let mut engine = None;
    wait_until("the shim's engine runs", || {
        engine = std::fs::read_to_string(format!("/proc/{shim}/task/{shim}/children"))
            .ok()
            .and_then(|children| children.split_whitespace().next()?.parse().ok());
        engine.is_some()
    });
    engine.expect("an engine")
}

/// The session's running run's recorded pid.
fn run_pid(home: &DaemonHome, session: &str) -> i32 {
    let mut pid = None;
    wait_until("the run's pid is stored", || {
        pid = home
            .db()
            .query_row(
                "SELECT pid FROM runs WHERE session_id = ?1 AND status = 'running'
                 AND pid IS NOT NULL",
                [session],
                |row| row.get(0),
            )
            .ok();
        pid.is_some()
    });
    pid.expect("a pid")
}

/// Whether `pid` sleeps in a write to a full pipe: its kernel wait channel says so, or, where
/// the kernel hides it, the system call it sleeps in is a `write` to its stdout.
fn blocked_on_pipe(pid: i32) -> bool {
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    if wchan.contains("pipe_write") {
        return true;
    }
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    let mut fields = syscall.split_whitespace();
    // x86_64: write is system call 1; aarch64: 64.
    let write = if cfg!(target_arch = "aarch64") {
        "64"
    } else {
        "1"
    };
    wchan.trim() == "0" && fields.next() == Some(write) && fields.next() == Some("0x1")
}

/// The session's events, in order: (seq, kind, prompt id, payload).
fn events(home: &DaemonHome, session: &str) -> Vec<(i64, String, Option<String>, Value)> {
    let db = home.db();
    let mut statement = db
        .prepare(
            "SELECT seq, kind, prompt_id, payload FROM events WHERE session_id = ?1 ORDER BY seq",
        )
        .unwrap();
    let rows = statement
        .query_map([session], |row| {
            let payload: String = row.get(3)?;
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                serde_json::from_str(&payload).unwrap(),
            ))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// The session's prompts, oldest first: (id, text, status, error).
fn prompts(home: &DaemonHome, session: &str) -> Vec<(String, String, String, Option<String>)> {
    let db = home.db();
    let mut statement = db
        .prepare(
            "SELECT id, text, status, error FROM prompts WHERE session_id = ?1
             ORDER BY created_at, id",
        )
        .unwrap();
    let rows = statement
        .query_map([session], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// Numbered 1, 2, 3… without a hole.
fn assert_no_hole(events: &[(i64, String, Option<String>, Value)]) {
    for (index, (seq, kind, _, _)) in events.iter().enumerate() {
        assert_eq!(*seq, index as i64 + 1, "a hole before #{seq} {kind}");
    }
}

/// The `step i` tool events of `prompt`, in order: i = 1, 2, 3…
fn steps_of(events: &[(i64, String, Option<String>, Value)], prompt: &str) -> usize {
    let steps: Vec<String> = events
        .iter()
        .filter(|(_, kind, of, _)| kind == "tool" && of.as_deref() == Some(prompt))
        .map(|(_, _, _, payload)| payload["detail"]["text"].as_str().unwrap_or("").to_string())
        .collect();
    for (index, step) in steps.iter().enumerate() {
        assert_eq!(step, &format!("step {}", index + 1), "steps out of order");
    }
    steps.len()
}

/// Locks the store for `held` while a prompt streams `steps` events and another is sent,
/// then releases it (`commit`, else kills the shell); checks that nothing was lost.
fn lock_loses_nothing(held: Duration, steps: usize, commit: bool) {
    if !sqlite3_runs() {
        return;
    }
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "locked", &[]);
    let watch = Watch::start(&home, &session);
    let stream = spawn(&home, &["send", &session, &streaming(steps), "--wait"]);
    watch.until("tool");
    let engine = engine_pid(&home, &session);
    // A socket client connected before the lock (the handshake writes nothing).
    let mut rpc = Rpc::connect(home.path());

    let lock = LockHolder::take(&home.path().join("corral.db"));
    let queued = spawn(&home, &["send", &session, "queued behind the lock"]);
    let session_for_rpc = session.clone();
    let over_socket = std::thread::spawn(move || {
        rpc.call(
            "prompt.send",
            json!({ "session": session_for_rpc, "text": "sent on the socket" }),
        )
    });
    // The worker cannot store the engine's events, so it stops reading them: the engine
    // blocks on its full pipe instead of its output piling up in the daemon.
    wait_until("the engine blocks on its full pipe", || {
        blocked_on_pipe(engine)
    });
    lock.hold_for(held);
    assert!(alive(engine), "the engine was not ended by the lock");
    assert!(
        !over_socket.is_finished(),
        "the send did not wait for the lock"
    );
    if commit {
        lock.commit();
    } else {
        drop(lock);
    }

    let queued = finish(queued);
    assert!(queued.status.success(), "{}", stderr(&queued));
    let sent = over_socket
        .join()
        .unwrap()
        .expect("the send over the socket succeeds");
    assert!(sent["id"].is_string(), "{sent}");
    let stream = finish(stream);
    assert!(stream.status.success(), "{}", stderr(&stream));
    wait_until("the prompts sent during the lock are done", || {
        prompts(&home, &session)
            .iter()
            .all(|(_, _, status, _)| status == "done")
    });

    let all = events(&home, &session);
    assert_no_hole(&all);
    let prompts = prompts(&home, &session);
    assert_eq!(prompts.len(), 3, "{prompts:?}");
    assert_eq!(
        steps_of(&all, &prompts[0].0),
        steps,
        "every streamed event is stored"
    );
    let done = all
        .iter()
        .filter(|(_, kind, _, _)| kind == "prompt.done")
        .count();
    assert_eq!(done, 3);
    drop(watch);
    home.stop_daemon();
}

#[test]
fn an_8_s_lock_delays_the_writes_and_loses_nothing() {
    lock_loses_nothing(Duration::from_secs(8), 6000, true);
}

#[test]
fn a_30_s_lock_within_the_default_limit_loses_nothing() {
    lock_loses_nothing(Duration::from_secs(30), 8000, false);
}

#[test]
fn a_lock_past_the_limit_fails_the_run_and_refuses_sends_clearly() {
    if !sqlite3_runs() {
        return;
    }
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "locked", &[("store.lock_timeout_ms", "5000")]);
    let watch = Watch::start(&home, &session);
    let stream = spawn(&home, &["send", &session, &streaming(20_000), "--wait"]);
    watch.until("tool");
    let engine = engine_pid(&home, &session);
    let mut rpc = Rpc::connect(home.path());

    let lock = LockHolder::take(&home.path().join("corral.db"));
    let refused = spawn(&home, &["send", &session, "refused by the lock"]);
    let refused_over_socket = rpc
        .call(
            "prompt.send",
            json!({ "session": session, "text": "refused on the socket" }),
        )
        .expect_err("a send past the limit is refused");
    assert_eq!(refused_over_socket["code"], -32006, "{refused_over_socket}");
    let message = refused_over_socket["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("locked by another writer") && message.contains("store.lock_timeout_ms"),
        "{message}"
    );
    let refused = finish(refused);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let line = stderr(&refused);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("store.lock_timeout_ms"), "{line}");
    // The run failed: its engine is ended while the store is still locked.
    wait_until("the engine is ended", || !alive(engine));
    lock.hold_for(Duration::from_secs(12));
    drop(lock);

    // The failure is recorded once the lock is gone; `send --wait` tells it.
    let stream = finish(stream);
    assert_eq!(stream.status.code(), Some(1), "{stream:?}");
    assert!(
        stderr(&stream).contains("store.lock_timeout_ms"),
        "{}",
        stderr(&stream)
    );
    let all = events(&home, &session);
    assert_no_hole(&all);
    let prompts_now = prompts(&home, &session);
    assert_eq!(
        prompts_now.len(),
        1,
        "no refused send was stored: {prompts_now:?}"
    );
    let (prompt, _, status, error) = &prompts_now[0];
    assert_eq!(status, "failed");
    let error = error.as_deref().unwrap_or_default();
    assert!(
        error.contains("locked by another writer") && error.contains("store.lock_timeout_ms"),
        "{error}"
    );
    assert!(steps_of(&all, prompt) > 0);
    let exited = all
        .iter()
        .find(|(_, kind, _, _)| kind == "run.exited")
        .expect("the run's exit is stored");
    assert_eq!(exited.3["ended_by"], "store unavailable", "{:?}", exited.3);
    assert!(all.iter().any(|(_, kind, _, _)| kind == "prompt.failed"));

    // The session works again.
    let answer = home.ok(&["send", &session, "after the lock", "--wait"]);
    assert!(answer.contains("after the lock"), "{answer}");
    let _ = DEADLINE;
    drop(watch);
    home.stop_daemon();
}

/// A session on the `codex-app-server` engine, served by the fake engine's app-server mode.
fn app_server_session(home: &DaemonHome, settings: &[(&str, &str)]) -> String {
    home.config(&[("engines.codex-app-server.path", FAKE)]);
    home.config(settings);
    home.add_project("p", &home.work(), "codex-app-server");
    home.new_session(&["p", "--title", "chatty"])
}

/// Runs an app-server turn streaming `deltas` notifications `interval` ms apart through a
/// lock held for `held`; returns the prompt's stored error once `send --wait` has ended.
fn app_server_turn_through_a_lock(
    settings: &[(&str, &str)],
    deltas: usize,
    interval: u64,
    held: Duration,
) -> Option<String> {
    let home = DaemonHome::new();
    let session = app_server_session(&home, settings);
    let watch = Watch::start(&home, &session);
    let script = format!("@fake deltas={deltas}\n@fake interval={interval}\nchatty turn");
    let turn = spawn(&home, &["send", &session, &script, "--wait"]);
    watch.until("tool");
    let lock = LockHolder::take(&home.path().join("corral.db"));
    lock.hold_for(held);
    drop(lock);
    let turn = finish(turn);
    assert_eq!(turn.status.code(), Some(1), "{turn:?}");
    assert_eq!(stderr(&turn).lines().count(), 1, "{}", stderr(&turn));
    let all = events(&home, &session);
    assert_no_hole(&all);
    let prompts_now = prompts(&home, &session);
    assert_eq!(prompts_now.len(), 1, "{prompts_now:?}");
    assert_eq!(prompts_now[0].2, "failed", "{prompts_now:?}");
    // The session works again, on the same app-server child.
    let answer = home.ok(&["send", &session, "after the lock", "--wait"]);
    assert!(answer.contains("after the lock"), "{answer}");
    drop(watch);
    home.stop_daemon();
    prompts_now[0].3.clone()
}

#[test]
fn an_app_server_turn_that_falls_behind_during_a_lock_is_given_up() {
    if !sqlite3_runs() {
        return;
    }
    let error = app_server_turn_through_a_lock(&[], 60_000, 0, Duration::from_secs(6));
    let error = error.unwrap_or_default();
    assert!(
        error.contains("4096 of the turn's notifications waited") && error.contains("interrupted"),
        "{error}"
    );
}

#[test]
fn an_app_server_turn_whose_writes_wait_past_the_limit_fails_naming_it() {
    if !sqlite3_runs() {
        return;
    }
    let settings = [("store.lock_timeout_ms", "3000")];
    let error = app_server_turn_through_a_lock(&settings, 3_000, 5, Duration::from_secs(8));
    let error = error.unwrap_or_default();
    assert!(
        error.contains("store.lock_timeout_ms") && error.contains("the turn was interrupted"),
        "{error}"
    );
}

/// The step numbers (`step i`) of a run's streamed events, in stored order: those of its
/// tool events, and those in the raw lines kept when its engine was ended mid-stream.
fn run_steps(home: &DaemonHome, run: &str) -> Vec<usize> {
    let db = home.db();
    let mut statement = db
        .prepare("SELECT kind, payload FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    let rows = statement
        .query_map([run], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .unwrap();
    let mut steps = Vec::new();
    for row in rows {
        let (kind, payload) = row.unwrap();
        if kind != "tool" && kind != "raw" {
            continue;
        }
        let Some(at) = payload.find("step ") else {
            continue;
        };
        let digits: String = payload[at + 5..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        steps.push(digits.parse().unwrap());
    }
    steps
}

/// The kinds of a session's events, for one run or one prompt's own (no run).
fn kinds_of(
    all: &[(i64, String, Option<String>, Value)],
    home: &DaemonHome,
    run: &str,
) -> Vec<String> {
    let db = home.db();
    let seqs: Vec<i64> = db
        .prepare("SELECT seq FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([run], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    all.iter()
        .filter(|(seq, ..)| seqs.contains(seq))
        .map(|(_, kind, ..)| kind.clone())
        .collect()
}

/// SIGTERM to the daemon while a `sqlite3` shell holds the store's lock and a prompt
/// streams: the events the worker holds go to `HOME/spill/<session>.jsonl`; the next daemon
/// stores them first, numbered without a hole, removes the file, and runs the prompt again
/// (its run stays `running` in the store and that boot closes it, as after a kill).
fn shutdown_during_a_lock_spills(settings: &[(&str, &str)], until_blocked: bool) {
    if !sqlite3_runs() {
        return;
    }
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "spilled", settings);
    let watch = Watch::start(&home, &session);
    let sent = finish(spawn(&home, &["send", &session, &streaming(3000)]));
    assert!(sent.status.success(), "{}", stderr(&sent));
    watch.until("tool");
    let engine = engine_pid(&home, &session);
    let lock = LockHolder::take(&home.path().join("corral.db"));
    if until_blocked {
        // The worker holds a batch it cannot store, so it no longer reads the engine.
        wait_until("the engine blocks on its full pipe", || {
            blocked_on_pipe(engine)
        });
    }
    let (run, prompt): (String, String) = home
        .db()
        .query_row(
            "SELECT id, prompt_id FROM runs WHERE session_id = ?1",
            [&session],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    let stored_before = run_steps(&home, &run).len();

    let daemon = home.daemon_pid().expect("a daemon");
    common::daemon::kill(daemon, libc::SIGTERM);
    let spill = home.path().join("spill").join(format!("{session}.jsonl"));
    wait_until("the worker spills its events", || spill.exists());
    assert!(!alive(engine), "the engine ended with the shutdown");
    // The store is still locked: the run and its prompt are still running in it.
    let run_status: String = home
        .db()
        .query_row("SELECT status FROM runs WHERE id = ?1", [&run], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(run_status, "running");
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&spill), 0o600);
    assert_eq!(mode(spill.parent().unwrap()), 0o700);
    let spilled = std::fs::read_to_string(&spill).unwrap().lines().count();
    assert!(spilled > 0);
    let journal = std::fs::read(&spill).unwrap();
    drop(lock);
    wait_until("the daemon exits", || !alive(daemon));
    drop(watch);

    home.start_daemon();
    assert!(!spill.exists(), "the boot stored the spill and removed it");
    wait_until("the prompt ran again", || {
        prompts(&home, &session)
            .iter()
            .all(|(_, _, status, _)| status == "done")
    });
    let all = events(&home, &session);
    assert_no_hole(&all);
    // Every event of the first run is stored: its steps 1…n without a gap, more of them
    // than were stored when the daemon was told to stop.
    let steps = run_steps(&home, &run);
    assert!(
        steps.len() > stored_before,
        "{} steps stored, {stored_before} before the shutdown",
        steps.len()
    );
    assert_eq!(
        steps,
        (1..=steps.len()).collect::<Vec<_>>(),
        "steps in order, none lost"
    );
    // Its end is told once (by the spill, not again by recovery), and it is closed as the
    // boot closes a dead daemon's run.
    let first = kinds_of(&all, &home, &run);
    assert_eq!(
        first.iter().filter(|kind| *kind == "run.exited").count(),
        1,
        "{first:?}"
    );
    let (status, decision): (String, Option<String>) = home
        .db()
        .query_row(
            "SELECT status, retry_decision FROM runs WHERE id = ?1",
            [&run],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (status.as_str(), decision.as_deref()),
        ("interrupted", Some("requeued"))
    );
    // The prompt was requeued once, never ended before its rerun, and its rerun streamed it all.
    let count = |kind: &str| {
        all.iter()
            .filter(|(_, k, of, _)| k == kind && of.as_deref() == Some(prompt.as_str()))
            .count()
    };
    assert_eq!(count("prompt.requeued"), 1, "{all:?}");
    assert_eq!(count("prompt.failed"), 0);
    assert_eq!(count("prompt.done"), 1);
    let rerun: String = home
        .db()
        .query_row(
            "SELECT id FROM runs WHERE prompt_id = ?1 AND status = 'succeeded'",
            [&prompt],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(run_steps(&home, &rerun), (1..=3000).collect::<Vec<_>>());
    // A boot killed after storing the file and before removing it: the next one finds it
    // stored (its first event after the number it names) and only removes it.
    home.stop_daemon();
    std::fs::write(&spill, journal).unwrap();
    home.start_daemon();
    assert!(!spill.exists());
    assert_eq!(
        events(&home, &session).len(),
        all.len(),
        "nothing stored twice"
    );
    home.stop_daemon();
}

#[test]
fn a_shutdown_past_the_lock_limit_spills_the_held_events_and_the_next_boot_stores_them() {
    // The run's writes are given up at 2 s while the daemon drains (10 s by default), before
    // its pipe fills; the prompt's end is then retried until the shutdown.
    shutdown_during_a_lock_spills(&[("store.lock_timeout_ms", "2000")], false);
}

#[test]
fn a_shutdown_within_the_lock_limit_spills_the_held_events_and_the_next_boot_stores_them() {
    // Under the default 60 s limit, the shutdown gives the waiting writes up at once.
    shutdown_during_a_lock_spills(&[("daemon.shutdown_grace_ms", "1000")], true);
}

#[test]
fn a_spill_file_that_does_not_parse_is_left_and_named_and_a_stray_is_not_touched() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "journal", &[]);
    home.stop_daemon();
    let dir = home.path().join("spill");
    std::fs::create_dir_all(&dir).unwrap();
    let corrupt = dir.join(format!("{session}.jsonl"));
    std::fs::write(&corrupt, "{\"session_id\": \"cut short\n").unwrap();
    let stray = dir.join("notes.jsonl");
    std::fs::write(&stray, "not corral's\n").unwrap();

    // Twice: a file left in place costs no boot (no crash loop).
    for _ in 0..2 {
        home.start_daemon();
        let answer = home.ok(&["send", &session, "after the journal", "--wait"]);
        assert!(answer.contains("after the journal"), "{answer}");
        home.stop_daemon();
    }
    assert_eq!(
        std::fs::read_to_string(&corrupt).unwrap(),
        "{\"session_id\": \"cut short\n"
    );
    assert_eq!(std::fs::read_to_string(&stray).unwrap(), "not corral's\n");
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    let named: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(&*corrupt.to_string_lossy()))
        .collect();
    assert_eq!(named.len(), 2, "one line per boot: {log}");
    assert!(named[0].contains("left in place"), "{}", named[0]);
    assert!(!log.contains("notes.jsonl"), "{log}");
    let all = events(&home, &session);
    assert_no_hole(&all);
}
