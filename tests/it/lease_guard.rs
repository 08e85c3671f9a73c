//! The lease guard process (`corral __lease-guard`, src/lease/guard.rs) against real process
//! groups: it ends the runs listed with it when the daemon's pipe closes and when the lease
//! deadline passes, keeps them while the deadline is renewed, and lives in a session of its
//! own.
//!
//! The "engines" are `sh` loops in groups of their own carrying `CORRAL_RUN_ID`; each test
//! ends what it started, on failure too ([`Engine`]'s drop). A few checks are that something
//! does *not* happen; nothing tells a test that, so they look after a fixed window.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corral::env::LEASE_GUARD as GUARDED_ENV;
use corral::lease::guard::Guard;

const RUN_ID_ENV: &str = "CORRAL_RUN_ID";

/// How long a test waits for what should happen (a group's end) before failing.
const PATIENCE: Duration = Duration::from_secs(10);

fn program() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_corral"))
}

/// Waits until `condition` holds, failing after [`PATIENCE`]; for another process's end,
/// which no notification tells us about.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A run's engine: `sh` leading a group of its own with `CORRAL_RUN_ID=<id>`, with a child in
/// the group and one that left it (`setsid`), found only by its environment.
struct Engine {
    child: Child,
    pgid: i32,
    run_id: String,
}

impl Engine {
    fn start(name: &str) -> Engine {
        Engine::start_marked(name, None)
    }

    /// An engine whose processes also carry a guard's mark `mark` (as every child of a
    /// guarded daemon does), listed or not.
    fn start_marked(name: &str, mark: Option<&str>) -> Engine {
        let run_id = format!("lease-guard-{}-{name}", std::process::id());
        let mut command = Command::new("sh");
        command.env_remove(GUARDED_ENV);
        if let Some(mark) = mark {
            command.env(GUARDED_ENV, mark);
        }
        let child = command
            .args(["-c", "sleep 300 & setsid sleep 300 & wait"])
            .env(RUN_ID_ENV, &run_id)
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .expect("sh starts");
        let pgid = child.id() as i32;
        let engine = Engine {
            child,
            pgid,
            run_id,
        };
        // Both sleeps are up: the test then sees what the guard ends, not what never started.
        wait_until("the engine's processes start", || {
            engine.processes().len() >= 3
        });
        engine
    }

    fn start_time(&self) -> Option<u64> {
        corral::process::start_time(self.child.id())
    }

    fn list(&self, guard: &Guard) {
        guard.run_started(&self.run_id, self.pgid, self.start_time());
    }

    /// Its live processes: the group's and whatever carries its id.
    fn processes(&self) -> Vec<i32> {
        let mark =
            corral::process::Mark::of_leader(Some(self.pgid), None, RUN_ID_ENV, &self.run_id);
        corral::process::members(&[mark])
            .remove(0)
            .into_iter()
            .map(|member| member.pid)
            .collect()
    }

    fn alive(&self) -> bool {
        corral::process::group_exists(self.pgid)
    }

    fn gone(&self) -> bool {
        self.processes().is_empty()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for pid in self.processes() {
            // SAFETY: kill on processes this test started (found by its group or run id).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        // SAFETY: as above, the group this test's engine leads.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Whether process `pid` is gone (or a zombie).
fn exited(pid: u32) -> bool {
    !corral::process::is_alive(pid, None)
}

/// Field `index` (1-based, as in proc(5)) of `/proc/PID/stat`, past the command's parentheses.
fn stat_field(pid: u32, index: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a stat");
    let after = &stat[stat.rfind(')').expect("a command in parentheses") + 2..];
    after
        .split(' ')
        .nth(index - 3)
        .and_then(|field| field.parse().ok())
        .expect("a number")
}

#[test]
fn closing_the_pipe_ends_the_listed_runs() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    let listed = Engine::start("pipe-listed");
    let ended = Engine::start("pipe-ended");
    listed.list(&guard);
    ended.list(&guard);
    guard.run_ended(&ended.run_id);
    assert!(guard.is_alive());
    drop(guard);
    wait_until("the listed run is gone", || listed.gone());
    // The guard ends what it was told and exits; the run that ended was left alone.
    wait_until("the guard exits", || exited(pid));
    assert!(ended.alive(), "a run that ended was ended again");
    assert_eq!(ended.processes().len(), 3);
}

#[test]
fn a_passed_deadline_ends_the_runs_and_later_ones_at_once() {
    let guard = Guard::start(program()).expect("the guard starts");
    let first = Engine::start("deadline-first");
    let second = Engine::start("deadline-second");
    let set = Instant::now();
    guard.set_deadline(set + Duration::from_millis(300));
    first.list(&guard);
    second.list(&guard);
    wait_until("the runs are gone", || first.gone() && second.gone());
    assert!(
        set.elapsed() >= Duration::from_millis(290),
        "ended before the deadline: {:?}",
        set.elapsed()
    );
    // No new deadline yet: a run listed now is ended at once.
    let late = Engine::start("deadline-late");
    late.list(&guard);
    wait_until("the late run is gone", || late.gone());
    // A new lease lets a run listed after it live.
    guard.set_deadline(Instant::now() + Duration::from_secs(60));
    let renewed = Engine::start("deadline-renewed");
    renewed.list(&guard);
    std::thread::sleep(Duration::from_millis(500));
    assert!(renewed.alive(), "a run under a live lease was ended");
    assert!(guard.is_alive());
    // It is still listed: the pipe's end ends it.
    drop(guard);
    wait_until("the renewed run is gone", || renewed.gone());
}

#[test]
fn a_renewed_deadline_keeps_the_runs() {
    let guard = Guard::start(program()).expect("the guard starts");
    let engine = Engine::start("renewed");
    guard.set_deadline(Instant::now() + Duration::from_millis(300));
    engine.list(&guard);
    let renewing = Instant::now();
    while renewing.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(100));
        guard.set_deadline(Instant::now() + Duration::from_millis(300));
    }
    assert!(engine.alive(), "a renewed lease's run was ended");
    let stopped = Instant::now();
    wait_until("the run is gone once renewals stop", || engine.gone());
    assert!(
        stopped.elapsed() >= Duration::from_millis(250),
        "ended before the last deadline: {:?}",
        stopped.elapsed()
    );
    assert!(guard.is_alive(), "the guard outlives the runs it ended");
}

#[test]
fn forgotten_runs_outlive_the_guard() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    let engine = Engine::start("forgotten");
    engine.list(&guard);
    guard.forget_all();
    drop(guard);
    wait_until("the guard exits", || exited(pid));
    assert!(engine.alive(), "a forgotten run was ended");
}

// What no run lists (an app-server child, an engine a kill -9 caught between its spawn and
// its listing) carries the guard's mark: it goes with the daemon all the same, setsid'd
// processes included; another guard's mark is not this one's.
#[test]
fn an_unlisted_child_with_the_mark_goes_with_the_daemon() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    let marked = Engine::start_marked("mark-pipe", Some(guard.mark()));
    let other = Engine::start_marked("mark-other", Some("another-guards-mark"));
    drop(guard);
    wait_until("the marked child is gone", || marked.gone());
    wait_until("the guard exits", || exited(pid));
    assert_eq!(
        other.processes().len(),
        3,
        "another guard's child was ended"
    );
}

#[test]
fn a_passed_deadline_sweeps_the_marked_children() {
    let guard = Guard::start(program()).expect("the guard starts");
    let marked = Engine::start_marked("mark-deadline", Some(guard.mark()));
    guard.set_deadline(Instant::now());
    wait_until("the marked child is gone", || marked.gone());
    assert!(guard.is_alive(), "the guard outlives what it ended");
}

// A project that keeps what its runs leave: the daemon tells the guard, and the sweep leaves
// those processes as the run's end did.
#[test]
fn a_kept_process_outlives_the_daemon() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    let kept = Engine::start_marked("mark-kept-one", Some(guard.mark()));
    let swept = Engine::start_marked("mark-swept-one", Some(guard.mark()));
    // The engines' `sh` and its two sleeps, each kept (the run's end found them so).
    for process in kept.processes() {
        let start = corral::process::start_time(process as u32).expect("a start time");
        guard.kept(process, start);
    }
    drop(guard);
    wait_until("the unkept child is gone", || swept.gone());
    wait_until("the guard exits", || exited(pid));
    assert_eq!(kept.processes().len(), 3, "a kept process was ended");
}

#[test]
fn a_clean_shutdown_leaves_the_marked_children() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    // A project's kept background process: meant to outlive a clean shutdown.
    let kept = Engine::start_marked("mark-kept", Some(guard.mark()));
    guard.forget_all();
    drop(guard);
    wait_until("the guard exits", || exited(pid));
    assert_eq!(
        kept.processes().len(),
        3,
        "a clean shutdown's child was ended"
    );
}

#[test]
fn the_guard_is_in_its_own_session() {
    let guard = Guard::start(program()).expect("the guard starts");
    let pid = guard.pid();
    // Fields 5 and 6 of stat: the process group and the session.
    let session = stat_field(pid, 6);
    assert_eq!(session, i64::from(pid), "the guard leads its session");
    assert_ne!(session, stat_field(std::process::id(), 6));
    assert_eq!(stat_field(pid, 5), i64::from(pid));
    // It ignores a terminal's SIGINT and SIGHUP (set once it runs), not SIGTERM.
    let ignored = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0)
    };
    let bit = |signal: i32| 1u64 << (signal - 1);
    wait_until("the guard ignores SIGINT and SIGHUP", || {
        ignored() & (bit(libc::SIGINT) | bit(libc::SIGHUP)) == bit(libc::SIGINT) | bit(libc::SIGHUP)
    });
    assert_eq!(ignored() & bit(libc::SIGTERM), 0, "SIGTERM must end it");
    // SAFETY: a signal to the guard this test started.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    wait_until("SIGTERM ends the guard", || !guard.is_alive());
}
