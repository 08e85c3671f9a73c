//! The kill -9 loop, shared by `tests/it/crash_recovery.rs` (20 rounds) and
//! `examples/crash_bench.rs` (200, with the wall time): three sessions of the fake engine get
//! a prompt each per round — some of whose engines leave a process in their group or one that
//! called `setsid` — and the daemon is killed with SIGKILL at a random moment of one of four
//! kinds:
//!
//! - **mid-turn**: a random delay after the sends;
//! - **during boot**: a daemon started on the leftovers of the last one is killed a random few
//!   milliseconds after it starts (before, during or after its reconciliation);
//! - **at a boot point**: `CORRAL_TEST_KILL_AT` (see `crate::process::kill_point`) kills it
//!   exactly when it found the leftovers, signalled them, saw them gone, or closed their runs;
//! - **at a spawn**: killed between an engine's spawn and the commit of its pid.
//!
//! What is measured: prompts lost (not done at the end), prompts that succeeded other than
//! once, turns redone (runs closed as interrupted rather than taken over), moments at which two runs of one session had live processes (checked live from
//! `/proc` by a thread scanning every few milliseconds: the processes carrying the home's
//! `CORRAL_HOME`, grouped by `CORRAL_SESSION_ID`, must never carry two `CORRAL_RUN_ID`s),
//! runs overlapping in the store, processes left behind once the last daemon stopped, and
//! `PRAGMA integrity_check` (SQLite's; [`run_in`] leaves the check of a home's store, which
//! may be PostgreSQL, to its caller).
//!
//! Self-contained (its own small client), so that the example can include it by path.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The ways a round kills its daemon.
pub const KINDS: [&str; 4] = ["mid-turn", "during boot", "at a boot point", "at a spawn"];

/// The boot points a round may pick.
const BOOT_POINTS: [&str; 4] = [
    "boot.found",
    "boot.signalled",
    "boot.ended",
    "boot.committed",
];

/// What a loop found.
#[derive(Debug, Default)]
pub struct Figures {
    /// The rounds asked for.
    pub rounds: usize,
    pub prompts: usize,
    /// Kills of each kind of [`KINDS`] (a boot point no leftover reached is not counted).
    pub kills: [usize; 4],
    /// Prompts not done at the end.
    pub lost: usize,
    /// Prompts with other than one succeeded run.
    pub not_once: usize,
    /// Turns redone: runs closed as interrupted (their work thrown away and run again). A run
    /// whose shim outlived the kill is taken over instead (live restore).
    pub redone: usize,
    /// Distinct (session, run, run) pairs seen live at the same moment.
    pub live_overlaps: Vec<String>,
    /// How many times `/proc` was scanned.
    pub scans: usize,
    /// Pairs of one session's runs whose store times overlap.
    pub store_overlaps: Vec<String>,
    /// Processes of the home alive once the last daemon stopped.
    pub left_behind: Vec<String>,
    pub integrity: String,
    pub wall: Duration,
}

/// A small deterministic generator (no extra crate for randomness).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// Runs `rounds` rounds in a fresh temporary home with these binaries, its store SQLite's
/// file, whose `PRAGMA integrity_check` ends the figures. (`examples/crash_bench.rs`'s; the
/// test runs [`run_in`] on a home of the test pass.)
#[allow(dead_code)]
pub fn run(corral: &Path, fake: &Path, rounds: usize, seed: u64) -> Figures {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let mut figures = run_in(corral, fake, &home, rounds, seed);
    let db = rusqlite::Connection::open(home.join("corral.db")).unwrap();
    figures.integrity = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    figures.wall = started.elapsed();
    drop(db);
    let _ = std::fs::remove_dir_all(&home);
    figures
}

/// [`run`] in `home`, which exists and may name its store in `HOME/config` (the tests' pass on
/// PostgreSQL): every figure but `integrity`, left empty for the caller, who knows the store.
/// The home is left as the last daemon left it (none of its processes running).
pub fn run_in(corral: &Path, fake: &Path, home: &Path, rounds: usize, seed: u64) -> Figures {
    let started = Instant::now();
    let home = home.to_path_buf();
    let mut figures = Figures {
        rounds,
        ..Figures::default()
    };
    let monitor = Monitor::start(&home);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rounds_in(corral, fake, &home, rounds, seed, &mut figures)
    }));
    // Whatever happened, nothing of the home is left running.
    if let Some(pid) = daemon_pid(&home) {
        kill(pid, libc::SIGTERM);
        wait_gone(pid, Duration::from_secs(30));
    }
    let (overlaps, scans) = monitor.stop();
    figures.live_overlaps = overlaps;
    figures.scans = scans;
    figures.left_behind = processes_of(&home)
        .into_iter()
        .map(|(pid, command)| format!("{pid} {command}"))
        .collect();
    for (pid, _) in processes_of(&home) {
        kill(pid, libc::SIGKILL);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    figures.wall = started.elapsed();
    figures
}

fn rounds_in(
    corral: &Path,
    fake: &Path,
    home: &Path,
    rounds: usize,
    seed: u64,
    figures: &mut Figures,
) {
    let mut daemon = start_daemon(corral, home, None).expect("the first daemon starts");
    let mut rpc = Client::connect(home);
    for (name, value) in [
        ("engines.fake.path", fake.to_str().unwrap()),
        ("cancel.grace_ms", "200"),
    ] {
        rpc.call("settings.set", json!({ "name": name, "value": value }))
            .unwrap();
    }
    let projects = home.join("projects");
    let mut sessions = Vec::new();
    for index in 0..3 {
        let path: PathBuf = projects.join(format!("p{index}"));
        std::fs::create_dir_all(&path).unwrap();
        rpc.call(
            "project.add",
            json!({ "name": format!("p{index}"), "path": path }),
        )
        .unwrap();
        let session = rpc
            .call(
                "session.new",
                json!({ "project": format!("p{index}"), "engine": "fake" }),
            )
            .unwrap();
        sessions.push(session["id"].as_str().unwrap().to_string());
    }
    let mut random = Lcg(seed);
    let mut prompts = Vec::new();
    for round in 0..rounds {
        for (index, session) in sessions.iter().enumerate() {
            let delay = 20 + random.next(300);
            // Session 0 leaves nothing, 1 a process in its group, 2 one that left it.
            let spawn = match index {
                0 => String::new(),
                1 => "@fake spawn=sleep 30\n".to_string(),
                _ => "@fake spawn=exec setsid sleep 30\n".to_string(),
            };
            let text = format!("{spawn}@fake delay={delay}\nround {round}");
            let sent = rpc
                .call("prompt.send", json!({ "session": session, "text": text }))
                .unwrap();
            prompts.push(sent["id"].as_str().unwrap().to_string());
        }
        let kind = random.next(KINDS.len() as u64) as usize;
        std::thread::sleep(Duration::from_millis(random.next(250)));
        kill(daemon, libc::SIGKILL);
        wait_gone(daemon, Duration::from_secs(20));
        match kind {
            0 => figures.kills[0] += 1,
            1 => {
                // A daemon on the leftovers, killed a few milliseconds into its life.
                let mut child = Command::new(corral)
                    .arg("--home")
                    .arg(home)
                    .arg("daemon")
                    .env_remove("CORRAL_HOME")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                std::thread::sleep(Duration::from_millis(random.next(80)));
                let _ = child.kill();
                let _ = child.wait();
                figures.kills[1] += 1;
            }
            2 => {
                let point = BOOT_POINTS[random.next(BOOT_POINTS.len() as u64) as usize];
                match start_daemon(corral, home, Some(point)) {
                    // Nothing to signal: the point was not reached; this one is stopped.
                    Some(pid) => {
                        kill(pid, libc::SIGKILL);
                        wait_gone(pid, Duration::from_secs(20));
                    }
                    None => figures.kills[2] += 1,
                }
            }
            _ => {
                // It dies at its first spawn (a rerun), maybe before it said it was ready; one
                // that spawns nothing is killed.
                match start_daemon(corral, home, Some("run.spawned")) {
                    Some(pid) if !wait_gone_within(pid, Duration::from_secs(5)) => {
                        kill(pid, libc::SIGKILL);
                        wait_gone(pid, Duration::from_secs(20));
                    }
                    _ => figures.kills[3] += 1,
                }
            }
        }
        daemon = start_daemon(corral, home, None).expect("a daemon starts after the kill");
        rpc = Client::connect(home);
    }
    figures.prompts = prompts.len();

    for prompt in &prompts {
        let done = rpc.call("prompt.wait", json!({ "prompt": prompt }));
        if !matches!(&done, Ok(done) if done["status"] == "done") {
            figures.lost += 1;
            eprintln!("lost: prompt {prompt}: {done:?}");
        }
    }
    for session in &sessions {
        let history = rpc.call("history", json!({ "session": session })).unwrap();
        let runs = history["runs"].as_array().cloned().unwrap_or_default();
        for prompt in history["prompts"].as_array().into_iter().flatten() {
            let succeeded = runs
                .iter()
                .filter(|run| run["prompt_id"] == prompt["id"] && run["status"] == "succeeded")
                .count();
            if succeeded != 1 {
                figures.not_once += 1;
            }
        }
        figures.redone += runs
            .iter()
            .filter(|run| run["status"] == "interrupted")
            .count();
        for (index, run) in runs.iter().enumerate() {
            let (start, end) = (run["started_at"].as_i64(), run["ended_at"].as_i64());
            let (Some(start), Some(end)) = (start, end) else {
                figures.store_overlaps.push(format!("unfinished: {run}"));
                continue;
            };
            for later in &runs[index + 1..] {
                let Some(later_start) = later["started_at"].as_i64() else {
                    continue;
                };
                if later_start >= start && later_start < end {
                    figures
                        .store_overlaps
                        .push(format!("{} and {}", run["id"], later["id"]));
                }
            }
        }
    }
}

/// `corral daemon --detach` in `home` (with `CORRAL_TEST_KILL_AT=kill_at`): its pid, or
/// `None` when it died before it was ready (only expected with a kill point). A start that
/// meets the lock of a daemon still exiting is tried again.
fn start_daemon(corral: &Path, home: &Path, kill_at: Option<&str>) -> Option<i32> {
    let _ = std::fs::remove_file(home.join("daemon.pid"));
    for _ in 0..50 {
        let mut command = Command::new(corral);
        command
            .arg("--home")
            .arg(home)
            .args(["daemon", "--detach"])
            .env_remove("CORRAL_HOME")
            .stdin(Stdio::null());
        match kill_at {
            Some(point) => command.env("CORRAL_TEST_KILL_AT", point),
            None => command.env_remove("CORRAL_TEST_KILL_AT"),
        };
        let output = command.output().unwrap();
        if output.status.success() {
            return daemon_pid(home);
        }
        if kill_at.is_some() {
            return None;
        }
        // The last daemon's lock may outlive its readiness pipe by a moment.
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn daemon_pid(home: &Path) -> Option<i32> {
    std::fs::read_to_string(home.join("daemon.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill on a pid this loop started (or read from its own home).
    unsafe {
        libc::kill(pid, signal);
    }
}

fn alive(pid: i32) -> bool {
    crate::process::is_alive(pid as u32, None)
}

/// Waits until `pid` is gone; false after `within`.
fn wait_gone_within(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn wait_gone(pid: i32, within: Duration) {
    assert!(wait_gone_within(pid, within), "pid {pid} did not exit");
}

/// The live processes whose environment names `home` as their `CORRAL_HOME`, with their
/// command lines.
fn processes_of(home: &Path) -> Vec<(i32, String)> {
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    processes
        .filter_map(Result::ok)
        .filter(|process| process.stat().is_ok_and(|stat| stat.state != 'Z'))
        .filter(|process| {
            process.environ().is_ok_and(|environment| {
                environment
                    .get(OsStr::new("CORRAL_HOME"))
                    .map(|found| found.as_os_str())
                    == Some(home.as_os_str())
            })
        })
        .map(|process| {
            let command = process.cmdline().unwrap_or_default().join(" ");
            (process.pid(), command)
        })
        .collect()
}

/// The thread that watches `/proc` for two runs of one session alive at once.
struct Monitor {
    stop: Arc<AtomicBool>,
    scans: Arc<AtomicUsize>,
    found: Arc<Mutex<BTreeSet<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Monitor {
    fn start(home: &Path) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let scans = Arc::new(AtomicUsize::new(0));
        let found = Arc::new(Mutex::new(BTreeSet::new()));
        let home = home.as_os_str().to_owned();
        let thread = std::thread::spawn({
            let (stop, scans, found) = (stop.clone(), scans.clone(), found.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    for overlap in overlaps_now(&home) {
                        found.lock().unwrap().insert(overlap);
                    }
                    scans.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(3));
                }
            }
        });
        Monitor {
            stop,
            scans,
            found,
            thread,
        }
    }

    /// Stops the thread: the overlaps it saw, and how many scans it made.
    fn stop(self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let found = self.found.lock().unwrap().iter().cloned().collect();
        (found, self.scans.load(Ordering::Relaxed))
    }
}

/// One scan: each session whose live processes carry more than one run id.
fn overlaps_now(home: &OsStr) -> Vec<String> {
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut runs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for process in processes.filter_map(Result::ok) {
        if !process.stat().is_ok_and(|stat| stat.state != 'Z') {
            continue;
        }
        let Ok(environment) = process.environ() else {
            continue;
        };
        if environment
            .get(OsStr::new("CORRAL_HOME"))
            .map(|h| h.as_os_str())
            != Some(home)
        {
            continue;
        }
        let (Some(session), Some(run)) = (
            environment.get(OsStr::new("CORRAL_SESSION_ID")),
            environment.get(OsStr::new("CORRAL_RUN_ID")),
        ) else {
            continue;
        };
        runs.entry(session.to_string_lossy().into_owned())
            .or_default()
            .insert(run.to_string_lossy().into_owned());
    }
    // Each pair once (a leftover seen beside several later runs is several overlaps).
    let mut pairs = Vec::new();
    for (session, runs) in runs {
        let runs: Vec<String> = runs.into_iter().collect();
        for (index, run) in runs.iter().enumerate() {
            for other in &runs[index + 1..] {
                pairs.push(format!("session {session}: runs {run} and {other}"));
            }
        }
    }
    pairs
}

/// A blocking JSON-RPC client of the daemon's socket: one request at a time.
struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
}

impl Client {
    fn connect(home: &Path) -> Client {
        let stream = UnixStream::connect(home.join("corral.sock")).expect("the daemon listens");
        // A prompt that never ends fails the loop instead of hanging it.
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut client = Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next: 1,
        };
        client
            .call("initialize", json!({ "protocol": 1 }))
            .expect("the handshake");
        client
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next;
        self.next += 1;
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        writeln!(self.writer, "{line}").map_err(|error| json!(error.to_string()))?;
        loop {
            let mut answer = String::new();
            match self.reader.read_line(&mut answer) {
                Ok(0) => return Err(json!("the daemon hung up")),
                Ok(_) => {}
                Err(error) => return Err(json!(error.to_string())),
            }
            let answer: Value = serde_json::from_str(&answer).unwrap();
            if answer["id"] == id {
                return match answer.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(answer["result"].clone()),
                };
            }
        }
    }
}
