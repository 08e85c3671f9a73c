//! Dispatch latency: from a prompt accepted (`Corral::send` returned, so the prompt is durable)
//! to its engine child spawned, on the fake engine.
//!
//! Prompts go one at a time: each waits for its prompt's end before the next is sent, so a
//! slot is always free and only the dispatch path is measured. It is measured twice, N prompts
//! each:
//!
//! - **alternating**: two sessions (in two projects) take turns; their actors are warm.
//! - **fresh**: every prompt goes to a session opened just before (outside the timing), so the
//!   session actor is started by the dispatch itself.
//!
//! For every prompt, t0 is the moment `send` returned, and two ends are taken:
//!
//! - **child running**: the engine is this very example, run in engine mode (`engines.fake.path`
//!   points at it): its `main` reads `CLOCK_MONOTONIC` first thing, writes it to a file named by
//!   its pid, then `exec`s the real `corral-fake-engine` with the same argv. This is the spawn
//!   plus the child's own start (loader, runtime init), so the same wrapper is also spawned
//!   bare from here (same stdio, process group and argv) to show that part alone.
//! - **run.started received**: a subscriber's receive time of the `run.started` event, which the
//!   worker appends right after the spawn. This is an upper bound of the dispatch latency: it
//!   adds the `RunSpawned` and event commits after the spawn, and the publication.
//!
//! Run: `cargo build --release && cargo run --release --example dispatch_bench [N]
//! [--no-shim]` (without the shim every engine runs under: what it costs)
//! Goal: dispatch latency p50 ≤ 2 ms, p99 ≤ 10 ms.
//!
//! **On PostgreSQL** (issue 14): `CORRAL_BENCH_POSTGRES_URL=postgres://USER:PW@HOST:PORT/postgres
//! cargo run --release --example dispatch_bench [N] -- --store postgres` makes a fresh database
//! on that server (dropped at the end), points the home's `store.url` at it and measures the
//! same; the goal there is p50 ≤ 10 ms (prompt accepted → engine child running).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use corral::store::projects::NewProject;
use corral::store::prompts::{NewPrompt, PromptStatus};
use corral::store::sessions::{NewSession, Session};
use corral::store::{projects, runs};
use corral::{Corral, CorralOptions};
use tokio::sync::broadcast;

mod common;

/// Set in the environment for engine mode: the real fake engine to `exec`.
const REAL_ENGINE: &str = "CORRAL_BENCH_REAL_ENGINE";
/// Set in the environment for engine mode: where the start stamps go (one file per pid).
const STAMPS: &str = "CORRAL_BENCH_STAMPS";
/// Prompts sent before measuring, in each mode.
const WARMUP: usize = 10;

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for this process and its children.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Engine mode: stamp the start, then become the real fake engine.
fn engine_mode() -> ! {
    let started = monotonic_ns();
    let stamps = std::env::var_os(STAMPS).expect("engine mode needs CORRAL_BENCH_STAMPS");
    let real = std::env::var_os(REAL_ENGINE).expect("engine mode needs CORRAL_BENCH_REAL_ENGINE");
    let stamp = Path::new(&stamps).join(std::process::id().to_string());
    std::fs::write(stamp, started.to_string()).expect("write the start stamp");
    // Under the shim, the run's pid is the shim's, this process's parent.
    let parent = Path::new(&stamps).join(format!("parent-{}", std::os::unix::process::parent_id()));
    std::fs::write(parent, started.to_string()).expect("write the start stamp");
    let error = Command::new(real).args(std::env::args_os().skip(1)).exec();
    panic!("exec of the fake engine failed: {error}");
}

/// The start stamp the child with `pid` left, removed once read.
fn take_stamp(stamps: &Path, pid: u64) -> u64 {
    let mut path = stamps.join(pid.to_string());
    if !path.exists() {
        // The run's pid is its shim's: the engine named its stamp after its parent too.
        path = stamps.join(format!("parent-{pid}"));
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("no start stamp of pid {pid}: {error}"));
    let _ = std::fs::remove_file(path);
    text.trim().parse().expect("a stamp is a number")
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One line of percentiles, in microseconds.
fn report(label: &str, samples_ns: &[u64]) -> (u64, u64) {
    let mut us: Vec<u64> = samples_ns.iter().map(|ns| ns / 1000).collect();
    us.sort_unstable();
    let (p50, p90, p99) = (
        percentile(&us, 0.50),
        percentile(&us, 0.90),
        percentile(&us, 0.99),
    );
    let max = *us.last().unwrap();
    println!("  {label:<38} p50 {p50:>6} µs  p90 {p90:>6} µs  p99 {p99:>6} µs  max {max:>6} µs");
    (p50, p99)
}

struct Bench {
    corral: Corral,
    events: broadcast::Receiver<std::sync::Arc<corral::actors::publisher::Published>>,
    stamps: PathBuf,
    projects: tempfile::TempDir,
}

/// The two ends of one dispatch, in ns after `send` returned.
struct Sample {
    child_running: u64,
    event_received: u64,
}

impl Bench {
    async fn project(&self, name: &str) -> projects::Project {
        let path = self.projects.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        self.corral
            .add_project(NewProject {
                name: name.into(),
                path: path.to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    async fn session(&self, project: &projects::Project) -> Session {
        self.corral
            .open_session(NewSession {
                project_id: project.id.clone(),
                engine: Some(corral::engine::EngineKind::Fake),
                title: Some("dispatch bench".into()),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// Sends one prompt, takes its dispatch times, and waits for its end.
    async fn dispatch(&mut self, session: &Session) -> Sample {
        let sent = self
            .corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "dispatch".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let t0 = monotonic_ns();
        assert_eq!(
            sent.prompt.status,
            PromptStatus::Running,
            "the session was busy"
        );
        let prompt_id = sent.prompt.id;
        let (mut received, mut pid) = (None, None);
        loop {
            let event = tokio::time::timeout(Duration::from_secs(30), self.events.recv())
                .await
                .expect("no event for 30 s")
                .expect("the subscriber lagged or the supervisor stopped");
            if event.prompt_id.as_deref() != Some(prompt_id.as_str()) {
                continue;
            }
            match event.kind.as_str() {
                "run.started" => {
                    received = Some(monotonic_ns());
                    pid = event.payload["pid"].as_u64();
                }
                "prompt.done" => break,
                kind if kind.starts_with("prompt.") && kind != "prompt.started" => {
                    panic!("the prompt ended as {kind}: {:?}", event.payload)
                }
                _ => {}
            }
        }
        let received = received.expect("a run.started event");
        let child = take_stamp(&self.stamps, pid.expect("run.started carries the pid"));
        Sample {
            child_running: child.saturating_sub(t0),
            event_received: received - t0,
        }
    }
}

/// The same wrapper spawned bare, as the session worker spawns its child: what the spawn and
/// the child's start cost without corral.
fn bare_spawns(me: &Path, argv: &[String], cwd: &Path, stamps: &Path, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let t0 = monotonic_ns();
            let child = Command::new(me)
                .args(argv)
                .current_dir(cwd)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the wrapper");
            let pid = child.id() as u64;
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "{output:?}");
            take_stamp(stamps, pid) - t0
        })
        .collect()
}

fn main() {
    if std::env::args().any(|arg| arg == "--json") {
        engine_mode();
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(500);
    let me = std::env::current_exe().unwrap();
    let fake = me
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("corral-fake-engine");
    assert!(
        fake.exists(),
        "{} is missing: build it first with cargo build --release",
        fake.display()
    );
    // The engines run under the shim, as a daemon's do; `--no-shim` measures them without it
    // (what an embedding program without `corral-shim` gets), for what the shim costs.
    if !std::env::args().any(|arg| arg == "--no-shim") {
        std::env::set_var("CORRAL_SHIM", fake.with_file_name("corral-shim"));
    }
    let home = tempfile::tempdir().unwrap();
    let on_postgres = std::env::args().any(|arg| arg == "postgres");
    let database = on_postgres.then(|| BenchDatabase::create(home.path()));
    let stamps = tempfile::tempdir().unwrap();
    // Inherited by the engine children (the variables mean nothing to corral itself).
    std::env::set_var(REAL_ENGINE, &fake);
    std::env::set_var(STAMPS, stamps.path());

    let (alternating, fresh, argv, cwd, projects) = actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        corral
            .set_setting("engines.fake.path", Some(me.to_str().unwrap()))
            .await
            .unwrap();
        let events = corral.subscribe();
        let mut bench = Bench {
            corral,
            events,
            stamps: stamps.path().to_path_buf(),
            projects: tempfile::tempdir().unwrap(),
        };
        let (a, b) = (bench.project("a").await, bench.project("b").await);
        let pair = [bench.session(&a).await, bench.session(&b).await];

        for index in 0..WARMUP {
            bench.dispatch(&pair[index % 2]).await;
        }
        let mut alternating = Vec::with_capacity(n);
        for index in 0..n {
            alternating.push(bench.dispatch(&pair[index % 2]).await);
        }

        for _ in 0..WARMUP {
            let session = bench.session(&a).await;
            bench.dispatch(&session).await;
        }
        let mut fresh = Vec::with_capacity(n);
        for _ in 0..n {
            let session = bench.session(&a).await;
            fresh.push(bench.dispatch(&session).await);
        }

        // The argv corral gave its children, for the bare spawns.
        let runs = bench
            .corral
            .read(|c| runs::runs_of_session(c, &pair[0].id))
            .unwrap();
        let argv = runs.last().unwrap().argv[1..].to_vec();
        (alternating, fresh, argv, a.path, bench.projects)
    });

    for _ in 0..WARMUP {
        bare_spawns(&me, &argv, Path::new(&cwd), stamps.path(), 1);
    }
    let bare = bare_spawns(&me, &argv, Path::new(&cwd), stamps.path(), n);
    drop(projects);

    drop(database);
    let store = if on_postgres { "PostgreSQL" } else { "SQLite" };
    println!(
        "prompts: {n} per mode, one at a time (each waits for its end); fake engine; {store} store"
    );
    println!("t0 = Corral::send returned (prompt accepted and durable)");
    let (mut child_met, mut bound_met) = (true, true);
    // PostgreSQL commits durably over a socket (fsync on the server): its goal is p50 ≤ 10 ms.
    let meets = |(p50, p99): (u64, u64)| {
        if on_postgres {
            p50 <= 10_000
        } else {
            p50 <= 2_000 && p99 <= 10_000
        }
    };
    for (mode, samples) in [
        ("alternating (2 warm sessions)", &alternating),
        ("fresh (a new session each time)", &fresh),
    ] {
        println!("{mode}:");
        let child: Vec<u64> = samples.iter().map(|s| s.child_running).collect();
        let event: Vec<u64> = samples.iter().map(|s| s.event_received).collect();
        child_met &= meets(report("t0 → child running (wrapper main)", &child));
        bound_met &= meets(report("t0 → run.started received (bound)", &event));
    }
    println!("without corral:");
    report("spawn → child running (bare spawn)", &bare);
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let goal = if on_postgres {
        "p50 ≤ 10000 µs"
    } else {
        "p50 ≤ 2000 µs, p99 ≤ 10000 µs"
    };
    println!(
        "goal {goal}: t0 → child running {}, t0 → run.started received {}",
        verdict(child_met),
        verdict(bound_met)
    );
}

/// A database of its own on `CORRAL_BENCH_POSTGRES_URL`'s server for one run, named in the
/// home's `store.url`; dropped at the end.
struct BenchDatabase {
    admin: String,
    name: String,
}

impl BenchDatabase {
    fn create(home: &Path) -> BenchDatabase {
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(admin) = std::env::var("CORRAL_BENCH_POSTGRES_URL") else {
            eprintln!(
                "dispatch_bench: --store postgres needs CORRAL_BENCH_POSTGRES_URL (an admin URL to the server's postgres database)"
            );
            std::process::exit(2);
        };
        let name = format!("corral_bench_{}", uuid::Uuid::new_v4().simple());
        admin_sql(&admin, &format!("CREATE DATABASE {name}"));
        let (base, _) = admin.rsplit_once('/').expect("a URL with a database path");
        let url = format!("{base}/{name}");
        let mut config = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(home.join("config"))
            .unwrap();
        std::io::Write::write_all(&mut config, format!("store.url = {url}\n").as_bytes()).unwrap();
        BenchDatabase { admin, name }
    }
}

impl Drop for BenchDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(error) = common::postgres_execute(&self.admin, &drop) {
            eprintln!(
                "dispatch_bench: the database {} was not dropped: {error}",
                self.name
            );
        }
    }
}

/// Runs `statement` on the admin URL; a server that refuses ends the bench in one line.
fn admin_sql(admin: &str, statement: &str) {
    if let Err(error) = common::postgres_execute(admin, statement) {
        eprintln!("dispatch_bench: {error}");
        std::process::exit(1);
    }
}
