//! What a git worktree per session costs and buys (issue 13), in one run on one daemon:
//!
//! (a) Four 1 s prompts (`sleep 1` on the `command` engine) on four sessions of one worktree
//!     project, against the same on four sessions of one shared project: the wall time from
//!     the first `prompt.send` to the last prompt's end, ROUNDS rounds alternating the two
//!     (so that a busy moment of the machine falls on both alike), medians compared. Goal:
//!     worktree ≤ 1.3 s; shared ~4 s (one run at a time).
//! (b) In a generated repository of FILES small files (nested two levels, one commit): the
//!     wall time of `corral session new` on a worktree project (the CLI process, which returns
//!     once the worktree is made) against `git worktree add -b BRANCH DIR HEAD` alone on the
//!     same repository, N of each alternating (a `sync` before each, untimed); medians and
//!     their ratio. Goal: ≤ 1.5×. The worktrees are left in place until the end: removing
//!     10,000 files on a disk mounted with `discard` stalls the steps that follow it.
//!
//! Git is isolated from the person's (a config file in the temporary home, a fixed
//! identity), as in the tests; nothing outside the temporary directory is touched.
//!
//! Run: `cargo build --release --bin corral --bin corral-fake-engine --example worktree_bench
//! && target/release/examples/worktree_bench [ROUNDS [FILES [N]]]` (defaults 3 10000 9).
//! It prints figures and asserts nothing timed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::binaries;
use common::daemon::{Conn, Daemon};
use serde_json::{json, Value};

const PROMPTS: usize = 4;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|value| value.parse().expect("a number"))
        .collect();
    let arg = |index: usize, default: usize| args.get(index).copied().unwrap_or(default);
    let (rounds, files, samples) = (arg(0, 3).max(1), arg(1, 10_000), arg(2, 9).max(1));
    let (corral, _fake) = binaries();

    let dir = tempfile::tempdir().expect("a temporary directory");
    isolate_git(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let (daemon, _) = Daemon::start(&corral, &home);
    let mut conn = Conn::open(&daemon.socket());
    conn.call(
        "initialize",
        json!({ "protocol": 1, "client": "worktree_bench" }),
    );
    conn.call(
        "settings.set",
        json!({ "name": "slots.command", "value": "8" }),
    );

    parallel_prompts(&mut conn, dir.path(), rounds);
    worktree_creation(&mut conn, &corral, &home, dir.path(), files, samples);
    drop(conn);
    daemon.stop();
}

/// This process's environment, which the daemon and every git child inherit: git's
/// configuration in a file of `dir`, no system configuration, a fixed identity, `HOME` in
/// `dir`, and none of the caller's `GIT_*` (or `CORRAL_*`) variables.
fn isolate_git(dir: &Path) {
    let config = dir.join("gitconfig");
    std::fs::write(
        &config,
        "[user]\n\tname = Corral Bench\n\temail = bench@example.invalid\n\
         [init]\n\tdefaultBranch = main\n",
    )
    .unwrap();
    let user_home = dir.join("userhome");
    std::fs::create_dir(&user_home).unwrap();
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if key_text.starts_with("GIT_") || key_text.starts_with("CORRAL_") {
            std::env::remove_var(key);
        }
    }
    std::env::set_var("GIT_CONFIG_GLOBAL", &config);
    std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
    for (name, value) in [
        ("GIT_AUTHOR_NAME", "Corral Bench"),
        ("GIT_COMMITTER_NAME", "Corral Bench"),
        ("GIT_AUTHOR_EMAIL", "bench@example.invalid"),
        ("GIT_COMMITTER_EMAIL", "bench@example.invalid"),
    ] {
        std::env::set_var(name, value);
    }
    std::env::set_var("HOME", &user_home);
}

/// `git ARGS…` in `dir`, which must succeed; its stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A repository at `path` with `files` small files in nested directories, one commit.
fn repository(path: &Path, files: usize) {
    std::fs::create_dir_all(path).unwrap();
    git(path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("README.md"), "bench\n").unwrap();
    for n in 0..files {
        let dir = path
            .join(format!("d{:02}", n % 100))
            .join(format!("e{:02}", (n / 100) % 10));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{n}.txt")), format!("file {n}\n")).unwrap();
    }
    git(path, &["add", "-A"]);
    git(path, &["commit", "-q", "-m", "generated"]);
}

fn add_project(conn: &mut Conn, name: &str, path: &Path, isolation: &str) {
    conn.call(
        "project.add",
        json!({ "name": name, "path": path, "engine": "command", "isolation": isolation }),
    );
}

fn new_session(conn: &mut Conn, project: &str, title: &str) -> Value {
    conn.call("session.new", json!({ "project": project, "title": title }))
}

/// (a): worktree against shared, four `sleep 1` prompts each, alternating rounds.
fn parallel_prompts(conn: &mut Conn, dir: &Path, rounds: usize) {
    let worktree_repo = dir.join("parallel-worktree");
    let shared_repo = dir.join("parallel-shared");
    repository(&worktree_repo, 10);
    repository(&shared_repo, 10);
    add_project(conn, "par-worktree", &worktree_repo, "worktree");
    add_project(conn, "par-shared", &shared_repo, "shared");
    let sessions = |conn: &mut Conn, project: &str| -> Vec<String> {
        (0..PROMPTS)
            .map(|n| {
                let session = new_session(conn, project, &format!("p{n}"));
                session["id"].as_str().expect("a session id").to_string()
            })
            .collect()
    };
    let worktree_sessions = sessions(conn, "par-worktree");
    let shared_sessions = sessions(conn, "par-shared");

    let mut worktree = Vec::new();
    let mut shared = Vec::new();
    for round in 0..rounds {
        let w = four_prompts(conn, &worktree_sessions);
        let s = four_prompts(conn, &shared_sessions);
        println!(
            "(a) round {}: {PROMPTS} x `sleep 1`: worktree {:>7.3} s   shared {:>7.3} s",
            round + 1,
            w.as_secs_f64(),
            s.as_secs_f64()
        );
        worktree.push(w);
        shared.push(s);
    }
    let (w, s) = (median(worktree), median(shared));
    println!(
        "(a) median of {rounds}: worktree {:.3} s (goal <= 1.3 s), shared {:.3} s (~4 s): {:.2}x faster",
        w.as_secs_f64(),
        s.as_secs_f64(),
        s.as_secs_f64() / w.as_secs_f64()
    );
}

/// Sends `sleep 1` to each session, then waits for all: the wall time; each must be done.
fn four_prompts(conn: &mut Conn, sessions: &[String]) -> Duration {
    let started = Instant::now();
    let prompts: Vec<String> = sessions
        .iter()
        .map(|session| {
            let prompt = conn.call(
                "prompt.send",
                json!({ "session": session, "text": "sleep 1" }),
            );
            prompt["id"].as_str().expect("a prompt id").to_string()
        })
        .collect();
    for prompt in &prompts {
        let done = conn.call("prompt.wait", json!({ "prompt": prompt }));
        assert_eq!(done["status"], "done", "{done}");
    }
    started.elapsed()
}

/// (b): `corral session new` against `git worktree add`, alternating, on one big repository.
fn worktree_creation(
    conn: &mut Conn,
    corral: &Path,
    home: &Path,
    dir: &Path,
    files: usize,
    samples: usize,
) {
    let repo = dir.join("big");
    let started = Instant::now();
    repository(&repo, files);
    println!(
        "(b) generated a repository of {} files in {:.1} s",
        files + 1,
        started.elapsed().as_secs_f64()
    );
    add_project(conn, "big", &repo, "worktree");
    let plain_dir = dir.join("plain-worktrees");
    std::fs::create_dir(&plain_dir).unwrap();
    // One of each first, not timed: the repository's files in the page cache for both.
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "warm",
            plain_dir.join("warm").to_str().unwrap(),
            "HEAD",
        ],
    );
    corral_session_new(corral, home, "warm");

    let mut corral_times = Vec::new();
    let mut git_times = Vec::new();
    for n in 0..samples {
        let path = plain_dir.join(format!("g{n}"));
        let branch = format!("plain-{n}");
        // Each timed step starts with nothing dirty to write back: the disk's backlog of the
        // step before (10,000 new files) is not charged to the next.
        nix::unistd::sync();
        let started = Instant::now();
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                &branch,
                path.to_str().unwrap(),
                "HEAD",
            ],
        );
        git_times.push(started.elapsed());

        nix::unistd::sync();
        let started = Instant::now();
        let session = corral_session_new(corral, home, &format!("s{n}"));
        corral_times.push(started.elapsed());
        let made = session["worktree"]
            .as_str()
            .map(PathBuf::from)
            .is_some_and(|worktree| worktree.join("README.md").is_file());
        if !made {
            println!("(b) warning: session new returned before its worktree was made: {session}");
        }
    }
    let show = |times: &[Duration]| {
        times
            .iter()
            .map(|time| format!("{:.0}", time.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("(b) git worktree add, ms:    {}", show(&git_times));
    println!("(b) corral session new, ms:  {}", show(&corral_times));
    let (c, g) = (median(corral_times), median(git_times));
    println!(
        "(b) median of {samples}: corral session new {:.1} ms, git worktree add {:.1} ms: {:.2}x (goal <= 1.5x)",
        c.as_secs_f64() * 1000.0,
        g.as_secs_f64() * 1000.0,
        c.as_secs_f64() / g.as_secs_f64()
    );
}

/// `corral session new big --title TITLE --json` as a person runs it: the session.
fn corral_session_new(corral: &Path, home: &Path, title: &str) -> Value {
    let output = Command::new(corral)
        .arg("--home")
        .arg(home)
        .args(["session", "new", "big", "--title", title, "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("corral runs");
    assert!(
        output.status.success(),
        "corral session new: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let session: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    session.get("session").cloned().unwrap_or(session)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
