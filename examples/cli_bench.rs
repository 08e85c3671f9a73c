//! The CLI's own cost, as whole processes, and where it goes: each case is run RUNS times,
//! the cases alternating (so that a change of the machine's load touches them all alike), and
//! printed as p50 / p90 beside bare `true`. The cases add one thing at a time, so the
//! differences of their medians say where the milliseconds go:
//!
//! 1. `true`: a process, the floor;
//! 2. `corral --version` in a home without a store: corral's process start (a 10 MB binary's
//!    loading and page faults, Rust's runtime, clap building the whole command tree) and exit;
//! 3. `corral --version` in a home with a store: + the store opened (the ledger's thread, a
//!    writing connection, the header and schema check) and one exec row written;
//! 4. `corral run -- true`: the child spawned as soon as the arguments are read, the store
//!    opened and the exec written beside it (in one write when the child is quicker);
//! 5. `corral send SESSION PROMPT`, the daemon running: no store at all (its header read), a
//!    socket connect, the handshake and `prompt.send` in one write, the daemon recording the
//!    exec with the prompt (queued behind one that hangs, so nothing else runs meanwhile).
//!
//! Goals (issue #11): `corral send` p50 ≤ 3 ms; `corral run -- true` ≤ `true` + 2 ms.
//!
//! Run: `cargo build --release && cargo run --release --example cli_bench [RUNS]` (default
//! 200). It uses `corral` and `corral-fake-engine` from the directory above its own
//! (target/release), starts a daemon on a temporary home and stops it at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One case: a name and how to make its command.
struct Case {
    name: &'static str,
    command: Box<dyn Fn() -> Command>,
    samples: Vec<Duration>,
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Runs a command to its end, its output discarded; how long it took. It must succeed.
fn time(mut command: Command) -> Duration {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let status = command.status().expect("the command runs");
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?}: {status}");
    elapsed
}

/// `corral ARGS…` in `home`.
fn corral(binary: &Path, home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .args(args)
        .env("CORRAL_HOME", home)
        .current_dir(home);
    command
}

/// Runs `corral ARGS…` in `home`, which must succeed; its stdout.
fn ok(binary: &Path, home: &Path, args: &[&str]) -> String {
    let output = corral(binary, home, args).output().expect("corral runs");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// SIGTERM to the home's daemon (which ends the hanging prompt's engine), and waits for it
/// to go.
fn stop_daemon(home: &Path) {
    let Some(pid) = std::fs::read_to_string(home.join("daemon.pid"))
        .ok()
        .and_then(|pid| pid.trim().parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: signals the daemon this benchmark started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(30);
    // SAFETY: signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("RUNS is a number"))
        .unwrap_or(200);
    let dir: PathBuf = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let binary = dir.join("corral");
    let fake = dir.join("corral-fake-engine");
    assert!(
        binary.exists() && fake.exists(),
        "build the release binaries first: cargo build --release"
    );
    let true_path = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("true(1)");

    let home = tempfile::tempdir().unwrap();
    let bare = tempfile::tempdir().unwrap();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (h, b) = (home.path(), &binary);
    ok(b, h, &["daemon", "--detach"]);
    ok(
        b,
        h,
        &["config", "set", "engines.fake.path", fake.to_str().unwrap()],
    );
    ok(
        b,
        h,
        &[
            "project",
            "add",
            "p",
            work.to_str().unwrap(),
            "--engine",
            "fake",
        ],
    );
    ok(b, h, &["session", "new", "p", "--title", "bench"]);
    // The session's worker is busy with this one for good: the measured sends only queue.
    ok(b, h, &["send", "bench", "@fake hang\nhold the session"]);

    let (home_path, bare_path) = (h.to_path_buf(), bare.path().to_path_buf());
    let case = |name: &'static str, command: Box<dyn Fn() -> Command>| Case {
        name,
        command,
        samples: Vec::with_capacity(runs),
    };
    let mut cases = vec![
        case("true", Box::new(move || Command::new(true_path))),
        case("corral --version, no store", {
            let (binary, bare) = (binary.clone(), bare_path.clone());
            Box::new(move || corral(&binary, &bare, &["--version"]))
        }),
        case("corral --version, a store", {
            let (binary, home) = (binary.clone(), home_path.clone());
            Box::new(move || corral(&binary, &home, &["--version"]))
        }),
        case("corral run -- true", {
            let (binary, home) = (binary.clone(), home_path.clone());
            Box::new(move || corral(&binary, &home, &["run", "--", true_path]))
        }),
        case("corral send (daemon running)", {
            let (binary, home) = (binary.clone(), home_path.clone());
            Box::new(move || corral(&binary, &home, &["send", "bench", "queued"]))
        }),
    ];
    // A warm-up round: page cache, the store's first pages, the daemon's first connection.
    for case in &cases {
        time((case.command)());
    }
    for _ in 0..runs {
        for case in cases.iter_mut() {
            let elapsed = time((case.command)());
            case.samples.push(elapsed);
        }
    }
    stop_daemon(h);

    println!("runs: {runs} of each, alternating\n");
    println!("{:<30} {:>9} {:>9}", "case", "p50 ms", "p90 ms");
    let p50: Vec<f64> = cases
        .iter()
        .map(|case| ms(percentile(&case.samples, 0.5)))
        .collect();
    for (case, median) in cases.iter().zip(&p50) {
        println!(
            "{:<30} {:>9.2} {:>9.2}",
            case.name,
            median,
            ms(percentile(&case.samples, 0.9))
        );
    }
    let [bare_true, version, stored, run, send] = p50[..] else {
        unreachable!()
    };
    println!("\nwhere the time goes (differences of the medians):");
    println!(
        "  corral's process start, clap and exit   {:>6.2} ms",
        version - bare_true
    );
    println!(
        "  the store opened, one exec row written  {:>6.2} ms",
        stored - version
    );
    println!(
        "  run: the child, the store beside it      {:>5.2} ms (beyond the start and the child's own run)",
        run - version - bare_true
    );
    println!(
        "  send: socket, one write, the daemon      {:>5.2} ms (beyond the start; no store)",
        send - version
    );
    println!("\ngoals:");
    println!(
        "  corral send p50 {send:.2} ms (goal ≤ 3 ms): {}",
        if send <= 3.0 { "met" } else { "not met" }
    );
    println!(
        "  corral run -- true p50 {run:.2} ms = true + {:.2} ms (goal ≤ + 2 ms): {}",
        run - bare_true,
        if run - bare_true <= 2.0 {
            "met"
        } else {
            "not met"
        }
    );
}
