//! What a daemon's end costs the running turns (live restore), as a person upgrading corral
//! meets it: TURNS sessions of the fake engine, each in a turn of about SECONDS, and the
//! daemon ended two seconds in — by `corral daemon restart` (a hand-over), then, in a second
//! home, by kill -9 followed by `corral daemon start`. Prints, for each:
//!
//! - the control socket's downtime: from the moment the daemon is told to go (or killed) to
//!   the first `corral status` the next one answers;
//! - turns redone (runs closed as interrupted and run again) and the agent-seconds they had
//!   run, thrown away; turns taken over;
//! - the wall time of the turns against the time they take undisturbed;
//! - each run's shim: its resident memory (VmRSS) while its engine runs.
//!
//! `cargo build --release && cargo build --release --examples &&
//! target/release/examples/restart_bench [TURNS [SECONDS]]` (defaults 8 and 6). It uses
//! `corral`, `corral-shim` and `corral-fake-engine` from the directory above its own.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn main() {
    let mut args = std::env::args().skip(1);
    let turns: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(8);
    let seconds: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(6);
    let (corral, fake) = common::binaries();
    println!("{turns} turns of about {seconds} s each (fake engine), the daemon ended 2 s in");
    for how in [End::Restart, End::Kill] {
        let figures = round(&corral, &fake, turns, seconds, how);
        println!("== {}", how.name());
        println!(
            "control socket down:  {:.0} ms",
            figures.downtime.as_secs_f64() * 1000.0
        );
        println!(
            "turns redone:         {} ({:.1} agent-seconds thrown away)",
            figures.redone, figures.lost_s
        );
        println!("turns taken over:     {}", figures.taken_over);
        println!("prompts done:         {}/{turns}", figures.done);
        println!(
            "turns' wall time:     {:.1} s (undisturbed: about {seconds} s)",
            figures.wall.as_secs_f64()
        );
        let mut rss = figures.shim_rss_kib.clone();
        rss.sort_unstable();
        if let (Some(low), Some(high)) = (rss.first(), rss.last()) {
            println!(
                "shim VmRSS:           {low}–{high} KiB ({:.2} MiB at most)",
                *high as f64 / 1024.0
            );
        }
    }
}

#[derive(Clone, Copy)]
enum End {
    Restart,
    Kill,
}

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Restart => "corral daemon restart",
            End::Kill => "kill -9, then corral daemon start",
        }
    }
}

struct Figures {
    downtime: Duration,
    redone: usize,
    lost_s: f64,
    taken_over: usize,
    done: usize,
    wall: Duration,
    shim_rss_kib: Vec<u64>,
}

fn round(corral: &Path, fake: &Path, turns: usize, seconds: u64, how: End) -> Figures {
    let home = tempfile::tempdir().expect("a temporary home");
    let cli = |args: &[&str]| -> Output {
        Command::new(corral)
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env_remove("CORRAL_HOME")
            .stdin(Stdio::null())
            .output()
            .expect("corral runs")
    };
    let ok = |args: &[&str]| -> String {
        let output = cli(args);
        assert!(output.status.success(), "corral {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    ok(&["daemon", "start"]);
    ok(&["config", "set", "engines.fake.path", fake.to_str().unwrap()]);
    ok(&["config", "set", "slots.fake", &turns.to_string()]);
    let interval = 100;
    let deltas = seconds * 1000 / interval;
    let text = format!("@fake deltas={deltas}\n@fake interval={interval}\n@fake answer=ok\nturn");
    let mut sessions = Vec::new();
    // A project each: the sessions of one project take turns.
    for index in 0..turns {
        let (project, title) = (format!("p{index}"), format!("s{index}"));
        let work = home.path().join("work").join(&project);
        std::fs::create_dir_all(&work).unwrap();
        ok(&["project", "add", &project, work.to_str().unwrap()]);
        ok(&[
            "session", "new", &project, "--engine", "fake", "--title", &title,
        ]);
        sessions.push(title);
    }
    let started = Instant::now();
    for session in &sessions {
        ok(&["send", session, &text]);
    }
    let history = |session: &str| -> Value {
        serde_json::from_str(&ok(&["history", session, "--json"])).expect("history --json")
    };
    let shims: Vec<i64> = sessions
        .iter()
        .map(|session| loop {
            if let Some(pid) = history(session)["runs"][0]["pid"].as_i64() {
                break pid;
            }
            std::thread::sleep(Duration::from_millis(20));
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()));
    let shim_rss_kib = shims.iter().filter_map(|pid| rss_kib(*pid)).collect();
    let told = Instant::now();
    match how {
        End::Restart => {
            ok(&["daemon", "restart"]);
        }
        End::Kill => {
            let pid: i32 = std::fs::read_to_string(home.path().join("daemon.pid"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // SAFETY: kill on the daemon this benchmark started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            while Path::new(&format!("/proc/{pid}")).exists()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z")
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            ok(&["daemon", "start"]);
        }
    }
    while !cli(&["status"]).status.success() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let downtime = told.elapsed();
    let mut figures = Figures {
        downtime,
        redone: 0,
        lost_s: 0.0,
        taken_over: 0,
        done: 0,
        wall: Duration::ZERO,
        shim_rss_kib,
    };
    for session in &sessions {
        let ended = loop {
            let seen = history(session);
            if seen["prompts"][0]["status"] != "running" {
                break seen;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if ended["prompts"][0]["status"] == "done" {
            figures.done += 1;
        }
        for run in ended["runs"].as_array().into_iter().flatten() {
            if run["status"] == "interrupted" {
                figures.redone += 1;
                let (from, to) = (run["started_at"].as_i64(), run["ended_at"].as_i64());
                if let (Some(from), Some(to)) = (from, to) {
                    figures.lost_s += (to - from) as f64 / 1000.0;
                }
            }
        }
        let events = ok(&["watch", session, "--json"]);
        figures.taken_over += events
            .lines()
            .filter(|line| line.contains("\"run.readopted\""))
            .count();
    }
    figures.wall = started.elapsed();
    ok(&["daemon", "stop"]);
    figures
}

/// A process's resident memory, in KiB.
fn rss_kib(pid: i64) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
