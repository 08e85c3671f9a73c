//! The cost of a backlog (issue 11, item 6): prompts queued through the daemon's socket while
//! nothing they wait for can run, side by side for a small and a large backlog, in one run.
//!
//! Each case starts its own daemon (`corral daemon --detach`) on a temporary home with the fake
//! engine, `slots.fake = 1`, and one project. It opens SESSIONS sessions (not timed), then
//! sends PROMPTS prompts round-robin over them on one connection, one request at a time
//! (timed: prompts/s, and the daemon's CPU time per prompt, which a busy machine disturbs
//! less than the wall clock). Every prompt is `@fake hang`, so the one prompt that gets the
//! engine's only slot never ends and every other session's first prompt waits for a slot: the
//! backlog only grows while the figures are taken. Then it cancels 1,000 queued prompts
//! (timed), and reads the daemon's RSS.
//!
//! The cases: LARGE_SESSIONS sessions with SMALL_PROMPTS prompts once (every prompt starts
//! its session's worker), then ROUNDS rounds of the small case and the large case in turn, so
//! that a busy moment of the machine falls on both alike; their medians are compared.
//!
//! The last large case's daemon is then stopped (SIGTERM) and a new one started on the same
//! store: the time from `corral daemon --detach` to the first `status` answered on the socket,
//! and a `status` round trip once booted (the goal: answers within 200 ms).
//!
//! Last, the slot table alone (`SlotTable`, no actor): the cost of one request, one release
//! that grants the next waiter, and one cancel, with 20, 2,000 and 20,000 waiters.
//!
//! Goals (issue 11): 20,000 prompts on 2,000 sessions queue at ≥ 80 % of the rate of 2,000 on
//! 20; daemon RSS with that backlog ≤ 64 MiB; a daemon started on that store answers `status`
//! within 200 ms.
//!
//! `BACKLOG_EXTRAS=DEPENDENCIES,SCHEDULES` (issue 35's ten times: `5000,1000` with `20 20000
//! 20000 200000`) gives the large cases that many schedules (added before the timing, none due
//! while it runs) and sends that many of their prompts `after` the prompt sent before it (in
//! another session), spread evenly; the small cases have none.
//!
//! Run: `cargo build --release --bin corral --bin corral-fake-engine --example backlog_bench &&
//! target/release/examples/backlog_bench [SMALL_SESSIONS SMALL_PROMPTS LARGE_SESSIONS LARGE_PROMPTS [ROUNDS]]`
//! (defaults 20 2000 2000 20000 3). It uses `corral` and `corral-fake-engine` from
//! target/release.
//!
//! `backlog_bench restart [SESSIONS PROMPTS STARTS [DIR...]]` (defaults 2000 20000 5): one
//! backlog store, then STARTS rounds of a daemon started on it with each DIR's `corral` in
//! turn (e.g. a copy of an earlier build's target/release and this one): builds compared on
//! the same store, alternating, in one sitting. `BACKLOG_HOME=DIR` keeps that home (and
//! reuses its store), e.g. to read the phases each daemon logs in DIR/daemon.log (`ready
//! since_exec_ms=… supervisor_ms=…`, `boot reconciled reconcile_ms=… claim_ms=…`).

mod common;

use common::binaries;
use common::daemon::{Conn, Daemon};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral::actors::slots::{SlotLimits, SlotRequest, SlotTable, Ticket};
use serde_json::{json, Value};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("restart") {
        return restarts(&args[1..]);
    }
    let args: Vec<usize> = args
        .iter()
        .map(|value| value.parse().expect("a number"))
        .collect();
    let arg = |index: usize, default: usize| args.get(index).copied().unwrap_or(default);
    let (small_sessions, small_prompts) = (arg(0, 20), arg(1, 2_000));
    let (large_sessions, large_prompts) = (arg(2, 2_000), arg(3, 20_000));
    let rounds = arg(4, 3).max(1);
    let extras = std::env::var("BACKLOG_EXTRAS")
        .ok()
        .map(|value| {
            let (deps, schedules) = value.split_once(',').expect("DEPENDENCIES,SCHEDULES");
            Extras {
                dependencies: deps.trim().parse().expect("a number"),
                schedules: schedules.trim().parse().expect("a number"),
            }
        })
        .unwrap_or_default();
    let (corral, fake) = binaries();

    // The cases alternate, round after round, so that a busy moment of the machine falls on
    // both alike; the medians are compared.
    let mut cases = vec![Case::run(
        &corral,
        &fake,
        large_sessions,
        small_prompts,
        false,
        Extras::default(),
    )];
    let mut small = Vec::new();
    let mut large = Vec::new();
    for round in 0..rounds {
        small.push(Case::run(
            &corral,
            &fake,
            small_sessions,
            small_prompts,
            false,
            Extras::default(),
        ));
        let last = round + 1 == rounds;
        large.push(Case::run(
            &corral,
            &fake,
            large_sessions,
            large_prompts,
            last,
            extras,
        ));
    }
    cases.extend(small.iter().cloned());
    cases.extend(large.iter().cloned());

    println!();
    println!(
        "| case | sessions opened | prompts queued | daemon CPU per prompt | 1,000 cancels | \
         daemon RSS (HWM) |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for case in &cases {
        case.row();
    }
    let median = |cases: &[Case], figure: fn(&Case) -> f64| {
        let mut figures: Vec<f64> = cases.iter().map(figure).collect();
        figures.sort_by(f64::total_cmp);
        figures[figures.len() / 2]
    };
    let (small_rate, large_rate) = (median(&small, Case::rate), median(&large, Case::rate));
    let (small_cpu, large_cpu) = (median(&small, Case::cpu_us), median(&large, Case::cpu_us));
    println!();
    println!(
        "{large_prompts} on {large_sessions} sessions vs {small_prompts} on {small_sessions}, \
         medians of {rounds} alternating rounds: {large_rate:.0}/s vs {small_rate:.0}/s = \
         {:.0} %  (goal >= 80 %); daemon CPU per prompt {large_cpu:.0} us vs {small_cpu:.0} us",
        large_rate / small_rate * 100.0
    );
    let last = large.last().expect("a round");
    println!(
        "daemon RSS with the large backlog: {:.1} MiB (HWM {:.1} MiB)  (goal <= 64 MiB)",
        mib(last.rss_kib),
        mib(last.hwm_kib)
    );
    if let Some(restart) = &last.restart {
        println!(
            "a daemon started on that store: first status answered {} after `corral daemon \
             --detach` was spawned (the detach itself {}), status round trip then p50 {} \
             max {} over 20 calls (goal: status within 200 ms); its RSS {:.1} MiB, {} slot \
             waiters",
            ms(restart.first_status),
            ms(restart.detached),
            ms(restart.status_p50),
            ms(restart.status_max),
            mib(restart.rss_kib),
            restart.waiters,
        );
    }
    println!();
    slot_table();
}

/// One backlog: its figures.
#[derive(Clone)]
struct Case {
    sessions: usize,
    prompts: usize,
    open: Duration,
    queue: Duration,
    /// The daemon's CPU time (user + system) while the prompts were queued.
    queue_cpu: Duration,
    cancels: usize,
    cancel: Duration,
    rss_kib: u64,
    hwm_kib: u64,
    restart: Option<Restart>,
}

#[derive(Clone)]
struct Restart {
    detached: Duration,
    first_status: Duration,
    status_p50: Duration,
    status_max: Duration,
    rss_kib: u64,
    waiters: usize,
}

/// What the large cases have beside their prompts (`BACKLOG_EXTRAS`).
#[derive(Debug, Clone, Copy, Default)]
struct Extras {
    dependencies: usize,
    schedules: usize,
}

impl Case {
    fn run(
        corral: &Path,
        fake: &Path,
        sessions: usize,
        prompts: usize,
        restart: bool,
        extras: Extras,
    ) -> Case {
        let home = tempfile::tempdir().expect("a temporary home");
        let mut case = Case::run_in(home.path(), corral, fake, sessions, prompts, extras);
        case.restart = restart.then(|| Restart::measure(corral, home.path()));
        case
    }

    /// One backlog made in `home`; its daemon stopped after the figures.
    fn run_in(
        home: &Path,
        corral: &Path,
        fake: &Path,
        sessions: usize,
        prompts: usize,
        extras: Extras,
    ) -> Case {
        let (daemon, _) = Daemon::start(corral, home);
        let mut conn = Conn::open(&daemon.socket());
        conn.call(
            "initialize",
            json!({ "protocol": 1, "client": "backlog_bench" }),
        );
        conn.call(
            "settings.set",
            json!({ "name": "engines.fake.path", "value": fake }),
        );
        conn.call(
            "settings.set",
            json!({ "name": "slots.fake", "value": "1" }),
        );
        let project = home.join("project");
        std::fs::create_dir_all(&project).unwrap();
        conn.call(
            "project.add",
            json!({ "name": "bench", "path": project, "engine": "fake" }),
        );

        let started = Instant::now();
        let ids: Vec<String> = (0..sessions)
            .map(|n| {
                let session = conn.call(
                    "session.new",
                    json!({ "project": "bench", "title": format!("s{n}") }),
                );
                session["id"].as_str().unwrap().to_string()
            })
            .collect();
        let open = started.elapsed();
        // Schedules that fire on the first of January only: held, not firing, while it runs.
        for n in 0..extras.schedules {
            conn.call(
                "schedule.add",
                json!({ "session": ids[n % sessions], "cron": "0 0 1 1 *", "text": "yearly" }),
            );
        }
        let every = match extras.dependencies {
            0 => usize::MAX,
            deps => (prompts / deps).max(1),
        };

        let cpu = cpu_time(daemon.pid);
        let started = Instant::now();
        let mut queued = Vec::new();
        let mut last: Option<String> = None;
        let mut after = 0;
        for n in 0..prompts {
            let mut params =
                json!({ "session": ids[n % sessions], "text": format!("@fake hang\nprompt {n}") });
            if n % every == every - 1 && after < extras.dependencies {
                if let Some(last) = &last {
                    params["after"] = json!([last]);
                    after += 1;
                }
            }
            let prompt = conn.call("prompt.send", params);
            last = prompt["id"].as_str().map(str::to_string);
            if prompt["status"] == "queued" {
                queued.push(prompt["id"].as_str().unwrap().to_string());
            }
        }
        let queue = started.elapsed();
        let queue_cpu = cpu_time(daemon.pid).saturating_sub(cpu);

        // The last ones queued: those a cancel finds deepest in the backlog.
        let cancels = queued.len().min(1_000);
        let started = Instant::now();
        for id in queued.iter().rev().take(cancels) {
            conn.call("prompt.cancel", json!({ "target": id }));
        }
        let cancel = started.elapsed();
        let (rss_kib, hwm_kib) = memory(daemon.pid);
        println!(
            "{sessions} sessions, {prompts} prompts ({after} after another, {} schedules): opened \
             in {}, queued in {} ({:.0}/s), {cancels} cancels in {}, daemon RSS {:.1} MiB (HWM \
             {:.1} MiB)",
            extras.schedules,
            ms(open),
            ms(queue),
            prompts as f64 / queue.as_secs_f64(),
            ms(cancel),
            mib(rss_kib),
            mib(hwm_kib)
        );
        drop(conn);
        let stopped = daemon.stop();
        println!("  daemon stopped in {}", ms(stopped));
        Case {
            sessions,
            prompts,
            open,
            queue,
            queue_cpu,
            cancels,
            cancel,
            rss_kib,
            hwm_kib,
            restart: None,
        }
    }

    fn rate(&self) -> f64 {
        self.prompts as f64 / self.queue.as_secs_f64()
    }

    /// The daemon's CPU time per prompt queued, in microseconds.
    fn cpu_us(&self) -> f64 {
        self.queue_cpu.as_secs_f64() * 1e6 / self.prompts as f64
    }

    fn row(&self) {
        println!(
            "| {} prompts on {} sessions | {} ({:.0}/s) | {} ({:.0}/s) | {:.0} us | {} ({:.0}/s) \
             | {:.1} MiB ({:.1}) |",
            self.prompts,
            self.sessions,
            ms(self.open),
            self.sessions as f64 / self.open.as_secs_f64(),
            ms(self.queue),
            self.rate(),
            self.cpu_us(),
            ms(self.cancel),
            self.cancels as f64 / self.cancel.as_secs_f64(),
            mib(self.rss_kib),
            mib(self.hwm_kib),
        );
    }
}

impl Restart {
    fn measure(corral: &Path, home: &Path) -> Restart {
        let spawned = Instant::now();
        let (daemon, detached) = Daemon::start(corral, home);
        let mut conn = Conn::open(&daemon.socket());
        conn.call(
            "initialize",
            json!({ "protocol": 1, "client": "backlog_bench" }),
        );
        let status = conn.call("status", Value::Null);
        let first_status = spawned.elapsed();
        let mut times: Vec<Duration> = (0..20)
            .map(|_| {
                let started = Instant::now();
                conn.call("status", Value::Null);
                started.elapsed()
            })
            .collect();
        times.sort();
        // The sessions' workers may still be asking for their slots: read once they settled.
        let slots = &conn.call("status", Value::Null)["slots"];
        // `waiting_count` since the status lists only the first waiters; before, all of them.
        let waiters = slots["waiting_count"].as_u64().map_or_else(
            || slots["waiting"].as_array().map_or(0, Vec::len),
            |count| count as usize,
        );
        let _ = status;
        let (rss_kib, _) = memory(daemon.pid);
        drop(conn);
        daemon.stop();
        Restart {
            detached,
            first_status,
            status_p50: times[times.len() / 2],
            status_max: *times.last().unwrap(),
            rss_kib,
            waiters,
        }
    }
}

/// `restart SESSIONS PROMPTS STARTS [DIR...]`: one backlog store made (as a large case, with
/// the first DIR's binaries), then STARTS rounds of daemons started on it, one per DIR in turn
/// in each round (DIR holds `corral` and `corral-fake-engine`; default: this example's
/// target dir): two builds compared on one store, alternating, in one sitting.
fn restarts(args: &[String]) {
    let number = |index: usize, default: usize| {
        args.get(index)
            .map_or(default, |value| value.parse().expect("a number"))
    };
    let (sessions, prompts, starts) = (number(0, 2_000), number(1, 20_000), number(2, 5));
    let dirs: Vec<PathBuf> = if args.len() > 3 {
        args[3..].iter().map(PathBuf::from).collect()
    } else {
        let (corral, _) = binaries();
        vec![corral.parent().unwrap().to_path_buf()]
    };
    let (corral, fake) = (dirs[0].join("corral"), dirs[0].join("corral-fake-engine"));
    // BACKLOG_HOME: a home kept (and reused when it has a store) to look at the boot further.
    let temporary = tempfile::tempdir().expect("a temporary home");
    let kept = std::env::var_os("BACKLOG_HOME").map(PathBuf::from);
    let home = kept.as_deref().unwrap_or(temporary.path());
    std::fs::create_dir_all(home).expect("BACKLOG_HOME");
    if !home.join("corral.db").exists() {
        Case::run_in(home, &corral, &fake, sessions, prompts, Extras::default());
    }
    println!();
    println!(
        "| build | start | detach | first status after spawn | status p50 | max | waiters | RSS |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for start in 0..starts {
        for dir in &dirs {
            let restart = Restart::measure(&dir.join("corral"), home);
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} MiB |",
                dir.display(),
                start + 1,
                ms(restart.detached),
                ms(restart.first_status),
                ms(restart.status_p50),
                ms(restart.status_max),
                restart.waiters,
                mib(restart.rss_kib)
            );
        }
    }
}

/// The slot table alone: a request, a release that grants the next waiter, and a cancel, with
/// N waiters behind a project lock and behind the engine's limit.
fn slot_table() {
    println!("slot table alone (no actor), mean per operation:");
    println!("| waiters | request (waits) | release (grants one) | cancel of a waiter |");
    println!("| --- | --- | --- | --- |");
    for waiters in [20usize, 2_000, 20_000] {
        let limits = SlotLimits {
            default_per_engine: 1,
            ..SlotLimits::default()
        };
        let mut table = SlotTable::new(limits);
        let mut next = 0u64;
        let mut ticket = || {
            next += 1;
            Ticket(next)
        };
        // One runs; the waiters are of many projects (engine-bound) and of its project.
        assert!(table.request(ticket(), SlotRequest::new("fake", "p0", ["g"])));
        for n in 0..waiters {
            let project = if n % 2 == 0 {
                "p0".to_string()
            } else {
                format!("p{n}")
            };
            table.request(
                ticket(),
                SlotRequest::new("fake", project, Vec::<String>::new()),
            );
        }
        let rounds = 2_000;
        let started = Instant::now();
        let mut extra = Vec::with_capacity(rounds);
        for n in 0..rounds {
            let t = ticket();
            table.request(t, SlotRequest::new("fake", format!("x{n}"), ["g"]));
            extra.push(t);
        }
        let request = started.elapsed() / rounds as u32;
        let started = Instant::now();
        for t in &extra {
            table.cancel(*t);
        }
        let cancel = started.elapsed() / rounds as u32;
        let started = Instant::now();
        for _ in 0..rounds.min(waiters) {
            let running = table.running();
            for t in running {
                let granted = table.release(t);
                // Keep the backlog: the granted one asks again at the end.
                for _ in granted {
                    let t = ticket();
                    table.request(t, SlotRequest::new("fake", "p0", Vec::<String>::new()));
                }
            }
        }
        let release = started.elapsed() / rounds.min(waiters) as u32;
        println!(
            "| {waiters} | {} | {} | {} |",
            us(request),
            us(release),
            us(cancel)
        );
    }
}

/// A process's CPU time so far (user + system).
fn cpu_time(pid: i32) -> Duration {
    let Ok(stat) = procfs::process::Process::new(pid).and_then(|process| process.stat()) else {
        return Duration::ZERO;
    };
    let ticks = stat.utime + stat.stime;
    Duration::from_secs_f64(ticks as f64 / procfs::ticks_per_second() as f64)
}

/// VmRSS and VmHWM of a process, in KiB.
fn memory(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn us(duration: Duration) -> String {
    format!("{:.2} us", duration.as_secs_f64() * 1e6)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}
