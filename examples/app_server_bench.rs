//! The `codex-app-server` engine on the fake engine's app-server mode (issue 5, Performance).
//!
//! 1. Turn overhead: N trivial turns sent straight to a fake app-server child over stdio
//!    JSON-RPC (`initialize`, `thread/start`, then `turn/start` → `turn/completed`, one after
//!    the other) against the same N turns through corral (the library, one `codex-app-server`
//!    session, `send` then `wait_prompt`, one after the other). p50/p90/p99 of each and the
//!    difference of the p50s (goal: ≤ 1 ms).
//! 2. Multiplexing: 100 sessions of ONE project (corral keys the app-server child by project,
//!    so one child means one project) with 10 turns each, every answer naming its session and
//!    turn (`@fake answer=s<i>-t<j>`); every prompt must get its own answer. Run twice: with
//!    the default slots, and with `slots.codex-app-server` and `slots.total` raised so that the
//!    project lock (one run per project at a time) is the only serializer. Turns/s and the
//!    memory high-water mark (VmHWM) of this process (corral runs in it) and of the child.
//!
//! Run: `cargo build --release && cargo build --release --examples &&
//!       target/release/examples/app_server_bench [N]`
//! (`corral-fake-engine` is found beside the example's directory: `target/release/`.)

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use corral::store::projects::NewProject;
use corral::store::prompts::{NewPrompt, PromptStatus};
use corral::store::sessions::NewSession;
use corral::store::{prompts, runs, sessions};
use corral::{Corral, CorralOptions};
use serde_json::{json, Value};

const ENGINE: &str = "codex-app-server";
const SESSIONS: usize = 100;
const TURNS_EACH: usize = 10;
const WARM_UP: usize = 10;

fn fake_engine() -> PathBuf {
    let me = std::env::current_exe().expect("the example's path");
    let fake = me
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/examples")
        .join("corral-fake-engine");
    assert!(
        fake.exists(),
        "build the fake engine first: cargo build --release ({} is missing)",
        fake.display()
    );
    fake
}

/// The `q` quantile of sorted samples (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

struct Summary {
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

fn summarize(label: &str, mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let summary = Summary {
        p50: quantile(&samples, 0.50),
        p90: quantile(&samples, 0.90),
        p99: quantile(&samples, 0.99),
    };
    println!(
        "  {label:<28} n={:<4} p50 {:>7.3} ms   p90 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms",
        samples.len(),
        ms(summary.p50),
        ms(summary.p90),
        ms(summary.p99),
        ms(*samples.last().unwrap()),
    );
    summary
}

/// A `VmXxx:` line of `/proc/<pid>/status`, in KiB.
fn vm_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

// ---------------------------------------------------------------------------------------------
// 1a. Straight to the child.

struct Direct {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: String,
}

impl Direct {
    fn spawn(fake: &Path, state: &Path, cwd: &Path) -> Direct {
        let mut child = Command::new(fake)
            .arg("app-server")
            .current_dir(cwd)
            .env("CORRAL_FAKE_STATE", state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the fake app-server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Direct {
            child,
            stdin,
            stdout,
            next_id: 1,
            line: String::new(),
        }
    }

    fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "id": id, "method": method, "params": params }));
        id
    }

    /// Reads messages until `done` says so; returns that message.
    fn read_until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        loop {
            self.line.clear();
            let read = self.stdout.read_line(&mut self.line).unwrap();
            assert!(read > 0, "the fake app-server closed its stdout");
            let Ok(message) = serde_json::from_str::<Value>(&self.line) else {
                continue;
            };
            if done(&message) {
                return message;
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        let answer =
            self.read_until(|message| message["id"] == id && message.get("method").is_none());
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    fn turn(&mut self, thread: &str, text: &str) -> Value {
        self.request(
            "turn/start",
            json!({ "threadId": thread, "input": [{ "type": "text", "text": text }] }),
        );
        self.read_until(|message| message["method"] == "turn/completed")
    }
}

fn direct_turns(fake: &Path, turns: usize) -> Vec<Duration> {
    let state = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut direct = Direct::spawn(fake, state.path(), cwd.path());
    direct.call(
        "initialize",
        json!({ "clientInfo": { "name": "bench", "title": "bench", "version": "0" } }),
    );
    direct.send(&json!({ "method": "initialized" }));
    let started = direct.call(
        "thread/start",
        json!({ "cwd": cwd.path().to_string_lossy() }),
    );
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let mut samples = Vec::with_capacity(turns);
    for turn in 0..WARM_UP + turns {
        let at = Instant::now();
        let completed = direct.turn(&thread, "hi");
        let took = at.elapsed();
        assert_eq!(
            completed["params"]["turn"]["status"], "completed",
            "{completed}"
        );
        if turn >= WARM_UP {
            samples.push(took);
        }
    }
    drop(direct.stdin);
    let _ = direct.child.wait();
    samples
}

// ---------------------------------------------------------------------------------------------
// corral.

struct Rig {
    corral: Corral,
    _dirs: Vec<tempfile::TempDir>,
    project_dir: PathBuf,
}

impl Rig {
    async fn start(fake: &Path, settings: &[(&str, &str)]) -> Rig {
        let home = tempfile::tempdir().unwrap();
        let project_dir = tempfile::tempdir().unwrap();
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        corral
            .set_setting(
                "engines.codex-app-server.path",
                Some(fake.to_str().unwrap()),
            )
            .await
            .unwrap();
        for (name, value) in settings {
            corral.set_setting(name, Some(value)).await.unwrap();
        }
        Rig {
            corral,
            project_dir: project_dir.path().to_path_buf(),
            _dirs: vec![home, project_dir],
        }
    }

    async fn project(&self) -> String {
        self.corral
            .add_project(NewProject {
                name: "bench".into(),
                path: self.project_dir.to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .unwrap()
            .id
    }

    async fn session(&self, project: &str) -> String {
        let session = self
            .corral
            .open_session(NewSession {
                project_id: project.to_string(),
                engine: Some(ENGINE.parse().expect("a known engine")),
                // A title keeps corral from asking for one in the first answer.
                title: Some("bench".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        session.id
    }

    async fn send(&self, session: &str, text: &str) -> String {
        self.corral
            .send(NewPrompt {
                session_id: session.to_string(),
                text: text.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .prompt
            .id
    }

    async fn wait(&self, prompt: &str) -> prompts::Prompt {
        tokio::time::timeout(Duration::from_secs(120), self.corral.wait_prompt(prompt))
            .await
            .expect("the prompt ends")
            .unwrap()
    }

    /// The pid of the app-server child that ran `prompt`.
    fn child_pid(&self, prompt: &str) -> i64 {
        let runs = self.corral.read(|c| runs::runs_of(c, prompt)).unwrap();
        runs[0].pid.expect("the run names its child")
    }
}

async fn corral_turns(fake: &Path, turns: usize) -> Vec<Duration> {
    let rig = Rig::start(fake, &[]).await;
    let project = rig.project().await;
    let session = rig.session(&project).await;
    let mut samples = Vec::with_capacity(turns);
    let mut pids = Vec::new();
    for turn in 0..WARM_UP + turns {
        let at = Instant::now();
        let prompt = rig.send(&session, "hi").await;
        let done = rig.wait(&prompt).await;
        let took = at.elapsed();
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        if turn >= WARM_UP {
            samples.push(took);
        }
        pids.push(rig.child_pid(&prompt));
    }
    pids.dedup();
    assert_eq!(pids.len(), 1, "one child served every turn: {pids:?}");
    samples
}

struct Multiplexed {
    turns: usize,
    elapsed: Duration,
    children: usize,
    child_hwm_kib: Option<u64>,
}

async fn multiplex(fake: &Path, settings: &[(&str, &str)]) -> Multiplexed {
    let rig = Rig::start(fake, settings).await;
    let project = rig.project().await;
    let mut sessions = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        sessions.push(rig.session(&project).await);
    }
    // Every prompt is queued at once (each session keeps its own order), then awaited.
    let started = Instant::now();
    let mut prompts = Vec::with_capacity(SESSIONS * TURNS_EACH);
    for turn in 0..TURNS_EACH {
        for (index, session) in sessions.iter().enumerate() {
            let expected = format!("s{index}-t{turn}");
            let text = format!("@fake answer={expected}\nturn {turn} of session {index}");
            prompts.push((rig.send(session, &text).await, session.clone(), expected));
        }
    }
    let mut finished = Vec::with_capacity(prompts.len());
    for (prompt, _, _) in &prompts {
        finished.push(rig.wait(prompt).await);
    }
    let elapsed = started.elapsed();

    // Every prompt done, in its own session, with its own answer; none lost, none crossed.
    let mut pids = Vec::new();
    let mut wrong = Vec::new();
    for ((prompt, session, expected), done) in prompts.iter().zip(&finished) {
        if done.status != PromptStatus::Done
            || &done.session_id != session
            || done.answer.as_deref() != Some(expected.as_str())
        {
            wrong.push(format!(
                "{prompt}: expected {expected} in {session}, got {:?} {:?} in {}",
                done.status, done.answer, done.session_id
            ));
        }
        pids.push(rig.child_pid(prompt));
    }
    assert!(wrong.is_empty(), "{} wrong: {wrong:#?}", wrong.len());
    // Each session kept one thread of its own.
    let mut threads: Vec<String> = sessions
        .iter()
        .map(|session| {
            rig.corral
                .read(|c| sessions::session(c, session))
                .unwrap()
                .unwrap()
                .thread_id
                .expect("a thread")
        })
        .collect();
    threads.sort();
    threads.dedup();
    assert_eq!(threads.len(), SESSIONS, "one thread per session");
    pids.sort_unstable();
    pids.dedup();
    let child_hwm_kib = vm_kib(&pids[0].to_string(), "VmHWM:");
    Multiplexed {
        turns: prompts.len(),
        elapsed,
        children: pids.len(),
        child_hwm_kib,
    }
}

fn main() {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(200);
    let fake = fake_engine();

    println!("== 1. turn overhead: {turns} sequential trivial turns (+{WARM_UP} warm-up) ==");
    let direct = summarize("direct stdio JSON-RPC", direct_turns(&fake, turns));
    let through = actix::System::new().block_on(corral_turns(&fake, turns));
    let through = summarize("through corral", through);
    let overhead = ms(through.p50) - ms(direct.p50);
    println!(
        "  overhead: p50 {:+.3} ms (goal <= 1 ms: {}), p90 {:+.3} ms, p99 {:+.3} ms",
        overhead,
        if overhead <= 1.0 { "met" } else { "NOT met" },
        ms(through.p90) - ms(direct.p90),
        ms(through.p99) - ms(direct.p99),
    );

    println!(
        "\n== 2. {SESSIONS} sessions x {TURNS_EACH} turns, one project, one app-server child =="
    );
    println!("  (corral keys the child by project and runs one prompt per project at a time:");
    println!("   the project lock serializes these turns whatever the slot limits)");
    for (label, settings) in [
        ("default slots", &[][..]),
        (
            "project lock only",
            &[("slots.codex-app-server", "1000"), ("slots.total", "1000")][..],
        ),
    ] {
        let result = actix::System::new().block_on(multiplex(&fake, settings));
        println!(
            "  {label:<18} {} turns in {:.2} s = {:.0} turns/s; {} child(ren); all answers their own; \
             child VmHWM {} KiB",
            result.turns,
            result.elapsed.as_secs_f64(),
            result.turns as f64 / result.elapsed.as_secs_f64(),
            result.children,
            result
                .child_hwm_kib
                .map_or("?".to_string(), |kib| kib.to_string()),
        );
    }
    println!(
        "  this process (corral library + bench): VmHWM {} KiB, VmRSS {} KiB",
        vm_kib("self", "VmHWM:").unwrap_or(0),
        vm_kib("self", "VmRSS:").unwrap_or(0),
    );
}
