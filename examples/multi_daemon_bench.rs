//! Several daemons on one PostgreSQL store (issue 14): throughput, failover and fencing,
//! measured on the real binaries run as processes.
//!
//! ```text
//! cargo build --release --bins --example multi_daemon_bench
//! CORRAL_BENCH_POSTGRES_URL=postgres://USER:PW@HOST:PORT/postgres \
//!   target/release/examples/multi_daemon_bench throughput|long|failover|fence|apart|backlog|all
//! ```
//!
//! Without `CORRAL_BENCH_POSTGRES_URL` (an admin URL to the `postgres` database) it prints why
//! and skips. Each scenario makes a fresh database there and drops it `WITH (FORCE)` after.
//!
//! - **throughput**: three daemons (`slots.fake = 8` each, `slots.total = 24`) run 1,000 fake
//!   runs of 50 ms on 50 projects × 4 sessions × 5 prompts, each project's prompts sent
//!   through one daemon (project i through daemon i mod 3: shared isolation runs a project's
//!   sessions one at a time, across daemons too); then ONE daemon, same settings and work, on
//!   a fresh database. Both wall times (first send → last prompt's `finished_at`) and the
//!   ratio; goal three ≤ one / 2.5. Every prompt done with exactly one succeeded run (SQL),
//!   no two engines of one session alive at once and at most 24 in all (the engines' own
//!   live check, below).
//! - **failover**: three daemons, `store.lease_ms = 2000`, 12 sessions (12 projects) spread
//!   over them; 20 rounds of one 500 ms prompt each, one daemon killed with SIGKILL mid-run
//!   (a different one each round) and started again for the next round. Kill → each of its
//!   prompts done elsewhere (goal ≤ lease + 2 s), lost prompts (0), live overlaps (0).
//! - **fence**: the same cluster; 20 rounds of 3 s prompts on 6 sessions, one daemon SIGSTOPped
//!   past its lease (lease + 1.5 s) and SIGCONTed: its engines gone by its deadline (the
//!   `daemons.lease_until` the others see), its late writes refused (its status'
//!   `lease.fenced_writes` grows), its prompts finished by another daemon once, none of its
//!   events stored after another daemon's run began; and in how many rounds it was frozen
//!   holding the store's write lock (its session idle in a transaction: the others wait).
//!
//! - **long** (not in `all`): the throughput scenario's work with runs of 250 ms: the same
//!   coordination, where this machine's cores are not the limit.
//! - **apart** (not in `all`): the throughput work on three daemons that share nothing but
//!   the machine and the server, each on a database of its own with a third of the
//!   projects: what three daemons reach here with no write lock, claim or fence between
//!   them, beside ONE daemon on all of the work (as in `throughput`).
//! - **backlog** (not in `all`): three daemons as in `throughput` with ten times the queue
//!   (10,000 prompts on the 200 sessions); once all are queued, how long the next 1,000 runs
//!   take: what a long queue costs the claims, which read it under the write lock.
//!
//! **The live check.** Every daemon's engines get `CORRAL_FAKE_LIVE_CHECK=<cluster>/live`: each
//! fake engine takes `flock`s the kernel holds until it exits, on its session's file and on
//! the first free numbered slot of all engines and of its home's, and logs what it took
//! (`src/bin/corral-fake-engine/main.rs`, "Live check"). From the log, exactly and with no polling:
//! the most engines alive at once in all and per daemon, and every session whose engine
//! started while another of it was alive. The throughput scenario reads it; failover and fence
//! also need when a killed daemon's engines were last seen, which the `/proc` scan tells.
//!
//! `CORRAL_BENCH_LOGS=1` prints each daemon's warnings and errors at the end of a scenario;
//! `CORRAL_BENCH_EXPLAIN=1` prints each fence round's prompts and runs.
//!
//! Map of this file: [`main`] (modes) → the scenarios ([`throughput`], [`failover`],
//! [`fence`]) → [`Cluster`] (a database, homes, daemons, their sockets; its drop ends every
//! process of its homes) over [`Database`] (SQL on the bench database), [`Daemon`] (one home's
//! process), [`Rpc`] (a socket connection, pipelined calls), [`LiveReport`] (the engines' live
//! check, read by [`Cluster::live_report`]) and [`Scanner`] (a thread that reads `/proc` every
//! [`SCAN_EVERY`]: live fake engines per session, and when each daemon's were last seen).
//!
//! The daemons are `corral` next to this example's directory (`target/release/corral`), or
//! `CORRAL_BIN`; the engine is `corral-fake-engine` beside it. Each daemon gets a home of its
//! own (a temporary directory, 0700, whose `config` names the store, 0600), none of this
//! process's `CORRAL_*` variables, and `CORRAL_HOST` = `host-a`, `host-b`, …

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

mod common;
use serde_json::{json, Value};

/// How often [`wait_all_ended`] counts the prompts ended.
const ENDED_POLL: Duration = Duration::from_millis(100);
/// How often the `/proc` scan looks (plus the scan's own time).
const SCAN_EVERY: Duration = Duration::from_millis(2);
/// The fake engine's `comm` (the kernel keeps 15 bytes of the name).
const FAKE_COMM: &str = "corral-fake-eng";
/// The lease of the failover and fence scenarios, in ms.
const SHORT_LEASE_MS: u64 = 2000;
/// Requests in flight on one connection while sending a batch.
const WINDOW: usize = 32;
/// A bound on any wait for the store or a daemon: past it the scenario fails.
const PATIENCE: Duration = Duration::from_secs(120);

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let Ok(admin) = std::env::var("CORRAL_BENCH_POSTGRES_URL") else {
        println!("skipped: CORRAL_BENCH_POSTGRES_URL is not set (an admin URL to a PostgreSQL server's `postgres` database)");
        return;
    };
    let outcome = binaries().and_then(|bins| {
        let run = |name: &str| match name {
            "throughput" => throughput(&bins, &admin, THROUGHPUT),
            "long" => throughput(&bins, &admin, LONG),
            "failover" => failover(&bins, &admin),
            "fence" => fence(&bins, &admin),
            "apart" => apart(&bins, &admin),
            "backlog" => backlog(&bins, &admin),
            other => {
                bail!("unknown mode {other:?}: throughput|long|failover|fence|apart|backlog|all")
            }
        };
        match mode.as_str() {
            "all" => ["throughput", "failover", "fence"]
                .into_iter()
                .try_for_each(run),
            one => run(one),
        }
    });
    if let Err(error) = outcome {
        eprintln!("multi_daemon_bench failed: {error:#}");
        std::process::exit(1);
    }
}

/// The release binaries: `corral` (`CORRAL_BIN`, else beside `target/<profile>/examples/`)
/// and `corral-fake-engine` beside it.
#[derive(Clone)]
struct Bins {
    corral: PathBuf,
    fake: PathBuf,
}

fn binaries() -> Result<Bins> {
    let corral = match std::env::var_os("CORRAL_BIN") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .context("this example's path")?
            .parent()
            .and_then(Path::parent)
            .context("target/<profile>/examples/..")?
            .join("corral"),
    };
    let fake = corral.with_file_name("corral-fake-engine");
    for binary in [&corral, &fake] {
        if !binary.exists() {
            bail!(
                "{} is missing: cargo build --release --bins first",
                binary.display()
            );
        }
    }
    Ok(Bins { corral, fake })
}

/// Wall-clock milliseconds: the daemons stamp `finished_at` with the same clock (one machine).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

// ---------------------------------------------------------------------------------------
// throughput

/// What one throughput run measured.
struct Throughput {
    /// First send → the last prompt's `finished_at`.
    wall_ms: i64,
    /// How long the sends took (part of the wall time).
    sent_ms: i64,
    /// Transactions the server committed on the bench database meanwhile: the daemons'
    /// reads and this bench's polls (one per 10 ms) included.
    commits: i64,
    /// A run's mean length, row to row (`runs.started_at` → `ended_at`).
    run_ms: i64,
    /// Prompts not `done`; prompts without exactly one succeeded run.
    not_done: i64,
    not_once: i64,
    /// Pairs of one session's runs whose recorded times overlap.
    store_overlaps: i64,
    /// Runs per daemon, by host.
    runs_per_daemon: Vec<(String, i64)>,
    live: LiveReport,
    /// CPU spent meanwhile, by whom.
    cpu: Cpu,
}

/// CPU time, in ms, of the daemons, of their reaped children (the engines), of the PostgreSQL
/// server's processes and of this bench (its scans of `/proc` and polls): what the work
/// costs on this machine, to tell the store's waits from a machine with no core left.
#[derive(Clone, Copy, Default)]
struct Cpu {
    daemons: i64,
    engines: i64,
    postgres: i64,
    bench: i64,
    /// Every core's busy time (`/proc/stat`): what the parts add up to, plus the kernel's
    /// interrupts and whoever else ran. The parts can be off when a server process ended
    /// between the two readings; this cannot.
    machine: i64,
}

impl Cpu {
    fn now(daemons: &[i32]) -> Cpu {
        let ms = |ticks: u64| (ticks * 1000 / procfs::ticks_per_second()) as i64;
        let mut cpu = Cpu::default();
        for &pid in daemons {
            if let Ok(stat) = procfs::process::Process::new(pid).and_then(|p| p.stat()) {
                cpu.daemons += ms(stat.utime + stat.stime);
                cpu.engines += ms((stat.cutime + stat.cstime).max(0) as u64);
            }
        }
        // The server's backends (the daemons' connections live through the run) and what the
        // postmaster reaped.
        for process in procfs::process::all_processes()
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(stat) = process.stat() {
                if stat.comm == "postgres" {
                    cpu.postgres +=
                        ms(stat.utime + stat.stime + (stat.cutime + stat.cstime).max(0) as u64);
                }
            }
        }
        if let Ok(stat) = procfs::process::Process::myself().and_then(|p| p.stat()) {
            cpu.bench += ms(stat.utime + stat.stime);
        }
        if let Ok(all) = <procfs::KernelStats as procfs::CurrentSI>::current() {
            let total = all.total;
            cpu.machine = ms(total.user
                + total.nice
                + total.system
                + total.irq.unwrap_or(0)
                + total.softirq.unwrap_or(0)
                + total.steal.unwrap_or(0));
        }
        cpu
    }

    /// The parts' sum.
    fn parts(&self) -> i64 {
        self.daemons + self.engines + self.postgres + self.bench
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            daemons: self.daemons - before.daemons,
            engines: self.engines - before.engines,
            postgres: self.postgres - before.postgres,
            bench: self.bench - before.bench,
            machine: self.machine - before.machine,
        }
    }
}

/// The work of a throughput scenario: 50 projects × 4 sessions × `prompts_per_session`
/// fake runs of `run_ms`.
#[derive(Clone, Copy)]
struct Work {
    run_ms: u64,
    prompts_per_session: usize,
}

impl Work {
    const PROJECTS: usize = 50;
    const SESSIONS_PER_PROJECT: usize = 4;

    fn prompts(self) -> usize {
        Self::PROJECTS * Self::SESSIONS_PER_PROJECT * self.prompts_per_session
    }

    /// The prompts in the order they are queued, as `(project, session)`: round-major, each
    /// daemon's share (project mod `daemons`) sent at once beside the others' (interleaved).
    fn queued(self, daemons: usize) -> Vec<(usize, usize)> {
        let mut shares: Vec<Vec<(usize, usize)>> = vec![Vec::new(); daemons];
        for _ in 0..self.prompts_per_session {
            for session in 0..Self::PROJECTS * Self::SESSIONS_PER_PROJECT {
                let project = session / Self::SESSIONS_PER_PROJECT;
                shares[project % daemons].push((project, session));
            }
        }
        let longest = shares.iter().map(Vec::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|index| shares.iter().filter_map(move |share| share.get(index)))
            .copied()
            .collect()
    }

    /// How long `slots` slots take on this work with nothing between runs: whenever a slot is
    /// free, the oldest queued prompt whose project runs nothing starts (shared isolation,
    /// first come first served), and runs `run_ms`. The bound the daemons' own costs add to.
    fn ideal_ms(self, daemons: usize, slots: usize) -> f64 {
        let mut queue = self.queued(daemons);
        let mut busy: HashSet<usize> = HashSet::new();
        // (end, project) of each running prompt.
        let mut running: Vec<(u64, usize)> = Vec::new();
        let mut now = 0;
        loop {
            while running.len() < slots {
                let Some(next) = queue
                    .iter()
                    .position(|(project, _)| !busy.contains(project))
                else {
                    break;
                };
                let (project, _) = queue.remove(next);
                busy.insert(project);
                running.push((now + self.run_ms, project));
            }
            let Some(first) = (0..running.len()).min_by_key(|&index| running[index].0) else {
                return now as f64;
            };
            let (end, project) = running.swap_remove(first);
            now = end;
            busy.remove(&project);
        }
    }
}

/// The issue's work: 1,000 runs of 50 ms.
const THROUGHPUT: Work = Work {
    run_ms: 50,
    prompts_per_session: 5,
};

/// The same work with runs five times as long: what the daemons' coordination allows where
/// this machine's cores are not the limit (about a third of them busy). Shared isolation and
/// first-come grants bound it too: with no cost at all between runs, three daemons would
/// take 0.344 of one's time on this work, whatever the run's length.
const LONG: Work = Work {
    run_ms: 250,
    prompts_per_session: 5,
};

fn throughput(bins: &Bins, admin: &str, work: Work) -> Result<()> {
    let total = if std::env::var_os("CORRAL_BENCH_NO_TOTAL").is_some() {
        "unset"
    } else {
        "24"
    };
    println!(
        "== throughput: {} fake runs of {} ms, {} projects × {} sessions × {} prompts, slots.fake = 8 per daemon, slots.total = {total}",
        work.prompts(),
        work.run_ms,
        Work::PROJECTS,
        Work::SESSIONS_PER_PROJECT,
        work.prompts_per_session
    );
    let three = throughput_run(bins, admin, 3, work)?;
    let one = throughput_run(bins, admin, 1, work)?;
    for (label, run) in [("three daemons", &three), ("one daemon", &one)] {
        println!(
            "  {label:<13}: wall {:>6} ms (sends {} ms, a run's mean length {} ms, {} transactions on the store, reads included: {:.0}/s); not done {}, not exactly one succeeded run {}, store overlaps {}; runs per daemon {:?}",
            run.wall_ms, run.sent_ms, run.run_ms, run.commits,
            run.commits as f64 * 1000.0 / run.wall_ms.max(1) as f64, run.not_done, run.not_once, run.store_overlaps, run.runs_per_daemon
        );
        println!(
            "  {:<13}  live (the engines' locks, {} engines logged): max concurrent {} in all, per daemon {:?}; sessions with an engine started while another of theirs was alive: {}",
            "",
            run.live.engines,
            run.live.max_total,
            run.live.max_per_home,
            run.live.overlap_sessions,
        );
        let cpu = run.cpu;
        println!(
            "  {:<13}  CPU: daemons {} ms, engines {} ms, postgres {} ms, this bench {} ms ({:.1} ms a prompt); the machine's cores {} ms: {:.1} ms a prompt, {:.0} % busy",
            "",
            cpu.daemons,
            cpu.engines,
            cpu.postgres,
            cpu.bench,
            cpu.parts() as f64 / work.prompts() as f64,
            cpu.machine,
            cpu.machine as f64 / work.prompts() as f64,
            cpu.machine as f64 * 100.0
                / (run.wall_ms.max(1) as f64 * std::thread::available_parallelism().map_or(1, |n| n.get()) as f64)
        );
    }
    let ratio = three.wall_ms as f64 / one.wall_ms.max(1) as f64;
    println!(
        "  three / one = {:.3} (one / three = {:.2} ×); goal ≤ 0.400: {}",
        ratio,
        1.0 / ratio.max(1e-9),
        verdict(ratio <= 0.4)
    );
    println!(
        "  with no cost between runs and every core it wants, first-come grants under shared isolation give three / one = {:.3} on this work",
        work.ideal_ms(3, 24) / work.ideal_ms(1, 8)
    );
    // The machine's bound: the three daemons' run cannot be shorter than the CPU it spent
    // (every party's, the engines', the bench's and the kernel's included) spread over every
    // core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let three_cpu = three.cpu.machine;
    let floor_ms = three_cpu as f64 / cores as f64;
    println!(
        "  the three daemons' run spent {three_cpu} ms of CPU: on {cores} cores it takes at least {floor_ms:.0} ms, three / one ≥ {:.3} at this CPU a prompt; 0.400 needs ≤ {:.1} ms a prompt in all",
        floor_ms / one.wall_ms.max(1) as f64,
        0.4 * one.wall_ms as f64 * cores as f64 / work.prompts() as f64,
    );
    let correct = [&three, &one].iter().all(|run| {
        run.not_done == 0
                && run.not_once == 0
                && run.live.overlap_sessions == 0
                // Every engine took its locks: the check saw every run.
                && run.live.engines == work.prompts()
    });
    println!(
        "  every prompt done once, no live overlap: {}; max concurrent ≤ 24 (slots.total, held across daemons by their claims): {}",
        verdict(correct),
        verdict(three.live.max_total <= 24)
    );
    Ok(())
}

/// Waits until `total` prompts of the bench database have ended. Polled every 100 ms, not
/// 10: the wall time is read from the rows (`finished_at`), not from when the poll saw them,
/// and a count of the prompts every 10 ms cost the server 0.14 ms of CPU a prompt, taken
/// from the daemons it measures.
fn wait_all_ended(db: &Database, total: i64) -> Result<()> {
    db.wait_until_every("every prompt ended", PATIENCE, ENDED_POLL, |db| {
        db.int(
            "SELECT count(*) FROM prompts WHERE status NOT IN ('queued', 'running')",
            &[],
        )
        .map(|ended| ended >= total)
    })
}

/// The throughput scenario's three daemons with ten times the queue: 50 prompts on each of
/// the 200 sessions. Once all 10,000 are queued, how long the next 1,000 runs take, against
/// the 1,000 of the throughput scenario (~1,000 queued at most): what a long backlog costs
/// each claim, which reads the queue under the store's write lock.
fn backlog(bins: &Bins, admin: &str) -> Result<()> {
    const PROJECTS: usize = 50;
    const SESSIONS_PER_PROJECT: usize = 4;
    const PROMPTS_PER_SESSION: usize = 50;
    const MEASURED: i64 = 1000;
    println!("== backlog: three daemons (slots.fake = 8 each, slots.total = 24), 10,000 fake runs of 50 ms queued on 200 sessions; the 1,000 runs after the last send");
    let settings = vec![
        ("slots.fake", "8".to_string()),
        ("slots.total", "24".to_string()),
    ];
    let mut cluster = Cluster::start(bins, admin, 3, &settings, PROJECTS)?;
    let sessions = cluster.sessions(SESSIONS_PER_PROJECT)?;
    let mut batches: Vec<Vec<Value>> = vec![Vec::new(); 3];
    for round in 0..PROMPTS_PER_SESSION {
        for (index, session) in sessions.iter().enumerate() {
            let project = index / SESSIONS_PER_PROJECT;
            batches[project % 3].push(json!({
                "session": session,
                "text": format!("@fake delay=50\nbacklog {round}"),
            }));
        }
    }
    let ended = "SELECT count(*) FROM prompts WHERE status NOT IN ('queued', 'running')";
    let started = wall_ms();
    cluster.send_batches(&batches)?;
    let sent = wall_ms();
    let ended_then = cluster.db.int(ended, &[])?;
    let queued_then = cluster
        .db
        .int("SELECT count(*) FROM prompts WHERE status = 'queued'", &[])?;
    let cpu_before = Cpu::now(&cluster.daemon_pids());
    cluster
        .db
        .wait_until("1,000 more prompts ended", PATIENCE, |db| {
            db.int(ended, &[]).map(|now| now >= ended_then + MEASURED)
        })?;
    let cpu = Cpu::now(&cluster.daemon_pids()).since(cpu_before);
    let done = wall_ms();
    let wrong = cluster.db.int(
        "SELECT count(*) FROM prompts WHERE status NOT IN ('queued', 'running', 'done')",
        &[],
    )? + store_overlaps(&cluster.db)?;
    println!(
        "  sends {} ms ({} ended meanwhile, {queued_then} queued after them); the next {MEASURED} runs: {} ms ({:.0} runs/s); the machine's cores {} ms ({:.1} ms a run); prompts failed or overlapping in the store: {wrong}",
        sent - started,
        ended_then,
        done - sent,
        MEASURED as f64 * 1000.0 / (done - sent).max(1) as f64,
        cpu.machine,
        cpu.machine as f64 / MEASURED as f64,
    );
    Ok(())
}

/// Three daemons on three databases (a third of the projects each, sent at once) vs one
/// daemon on all of them: the machine's own bound on the throughput scenario.
fn apart(bins: &Bins, admin: &str) -> Result<()> {
    const PROJECTS: [usize; 3] = [17, 17, 16];
    const SESSIONS_PER_PROJECT: usize = 4;
    const PROMPTS_PER_SESSION: usize = 5;
    println!("== apart: the throughput work on three daemons, each alone on a database of its own (slots.fake = 8 each), vs one daemon on all of it");
    let settings = vec![("slots.fake", "8".to_string())];
    let mut clusters = PROJECTS
        .iter()
        .map(|&projects| Cluster::start(bins, admin, 1, &settings, projects))
        .collect::<Result<Vec<_>>>()?;
    let mut batches = Vec::new();
    for cluster in &mut clusters {
        let sessions = cluster.sessions(SESSIONS_PER_PROJECT)?;
        let mut batch = Vec::new();
        for round in 0..PROMPTS_PER_SESSION {
            for session in &sessions {
                batch.push(json!({
                    "session": session,
                    "text": format!("@fake delay=50\nthroughput {round}"),
                }));
            }
        }
        batches.push(batch);
    }
    let pids: Vec<i32> = clusters.iter().flat_map(Cluster::daemon_pids).collect();
    let cpu_before = Cpu::now(&pids);
    let started = wall_ms();
    std::thread::scope(|scope| {
        let sends: Vec<_> = clusters
            .iter_mut()
            .zip(&batches)
            .map(|(cluster, batch)| {
                scope.spawn(move || cluster.send_batches(std::slice::from_ref(batch)))
            })
            .collect();
        sends
            .into_iter()
            .try_for_each(|send| send.join().expect("a send thread").map(drop))
    })?;
    let mut last = 0;
    let mut wrong = 0;
    for (cluster, batch) in clusters.iter().zip(&batches) {
        wait_all_ended(&cluster.db, batch.len() as i64)?;
        last = last.max(
            cluster
                .db
                .int("SELECT coalesce(max(finished_at), 0) FROM prompts", &[])?,
        );
        wrong += cluster
            .db
            .int("SELECT count(*) FROM prompts WHERE status <> 'done'", &[])?
            + not_once(&cluster.db, None)?;
    }
    let cpu = Cpu::now(&pids).since(cpu_before);
    drop(clusters);
    let apart_ms = last - started;
    println!(
        "  three apart : wall {apart_ms:>6} ms; prompts not done once {wrong}; CPU: daemons {} ms, engines {} ms, postgres {} ms, this bench {} ms; the machine's cores {} ms: {:.1} ms a prompt",
        cpu.daemons,
        cpu.engines,
        cpu.postgres,
        cpu.bench,
        cpu.machine,
        cpu.machine as f64 / 1000.0
    );
    let one = throughput_run(bins, admin, 1, THROUGHPUT)?;
    println!(
        "  one daemon  : wall {:>6} ms; three apart / one = {:.3}",
        one.wall_ms,
        apart_ms as f64 / one.wall_ms.max(1) as f64
    );
    Ok(())
}

fn throughput_run(bins: &Bins, admin: &str, daemons: usize, work: Work) -> Result<Throughput> {
    const PROJECTS: usize = Work::PROJECTS;
    const SESSIONS_PER_PROJECT: usize = Work::SESSIONS_PER_PROJECT;
    // CORRAL_BENCH_NO_TOTAL=1: without `slots.total`, to tell its effect apart.
    let mut settings = vec![("slots.fake", "8".to_string())];
    if std::env::var_os("CORRAL_BENCH_NO_TOTAL").is_none() {
        settings.push(("slots.total", "24".to_string()));
    }
    let mut cluster = Cluster::start(bins, admin, daemons, &settings, PROJECTS)?;
    let sessions = cluster.sessions(SESSIONS_PER_PROJECT)?;
    // Round-major: every session has work from the start; a project's prompts go through
    // daemon (project mod n).
    let mut batches: Vec<Vec<Value>> = vec![Vec::new(); daemons];
    for round in 0..work.prompts_per_session {
        for (index, session) in sessions.iter().enumerate() {
            let project = index / SESSIONS_PER_PROJECT;
            batches[project % daemons].push(json!({
                "session": session,
                "text": format!("@fake delay={}\nthroughput {round}", work.run_ms),
            }));
        }
    }
    // The server's commit counter of this database (its statistics lag by up to a second:
    // read again after the work, once they are flushed).
    let commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    let commits_before = cluster.db.int(commits, &[])?;
    let cpu_before = Cpu::now(&cluster.daemon_pids());
    let started = wall_ms();
    cluster.send_batches(&batches)?;
    let sent_ms = wall_ms() - started;
    let total = work.prompts() as i64;
    wait_all_ended(&cluster.db, total)?;
    let cpu = Cpu::now(&cluster.daemon_pids()).since(cpu_before);
    let live = cluster.live_report()?;
    std::thread::sleep(Duration::from_millis(1200));
    let db = &cluster.db;
    let commits = db.int(commits, &[])? - commits_before;
    let last = db.int("SELECT coalesce(max(finished_at), 0) FROM prompts", &[])?;
    Ok(Throughput {
        wall_ms: last - started,
        sent_ms,
        commits,
        run_ms: db.int(
            "SELECT coalesce(avg(ended_at - started_at), 0)::bigint FROM runs",
            &[],
        )?,
        not_done: db.int("SELECT count(*) FROM prompts WHERE status <> 'done'", &[])?,
        not_once: not_once(db, None)?,
        store_overlaps: store_overlaps(db)?,
        runs_per_daemon: runs_per_daemon(&cluster)?,
        live,
        cpu,
    })
}

/// Prompts (all, or those of `ids`) without exactly one succeeded run.
fn not_once(db: &Database, ids: Option<&[String]>) -> Result<i64> {
    let query = "SELECT count(*) FROM prompts p WHERE ($1::text[] IS NULL OR p.id = ANY($1)) \
                 AND (SELECT count(*) FROM runs r WHERE r.prompt_id = p.id \
                      AND r.status = 'succeeded') <> 1";
    let ids: Option<Vec<String>> = ids.map(<[String]>::to_vec);
    db.int(query, &[&ids])
}

/// Pairs of runs of one session whose recorded times overlap.
fn store_overlaps(db: &Database) -> Result<i64> {
    db.int(
        "SELECT count(*) FROM runs a JOIN runs b ON a.session_id = b.session_id AND a.id < b.id \
          WHERE a.started_at < coalesce(b.ended_at, 9000000000000000000) \
            AND b.started_at < coalesce(a.ended_at, 9000000000000000000)",
        &[],
    )
}

/// How many runs each daemon (by host) did.
fn runs_per_daemon(cluster: &Cluster) -> Result<Vec<(String, i64)>> {
    let rows = cluster.db.rows(
        "SELECT coalesce(r.node_id, '-'), count(*) FROM runs r GROUP BY 1 ORDER BY 1",
        &[],
    )?;
    let mut counts: Vec<(String, i64)> = rows
        .iter()
        .map(|row| {
            let node: String = row.get(0);
            let host = cluster
                .daemons
                .iter()
                .find(|daemon| daemon.node_id.as_deref() == Some(node.as_str()))
                .map_or(node.clone(), |daemon| daemon.host.clone());
            (host, row.get::<_, i64>(1))
        })
        .collect();
    counts.sort();
    Ok(counts)
}

// ---------------------------------------------------------------------------------------
// failover

fn failover(bins: &Bins, admin: &str) -> Result<()> {
    const ROUNDS: usize = 20;
    const SESSIONS: usize = 12;
    println!("== failover: three daemons, store.lease_ms = {SHORT_LEASE_MS}, {ROUNDS} rounds of 500 ms prompts on {SESSIONS} sessions, kill -9 of one daemon mid-run");
    let settings = [
        ("store.lease_ms", SHORT_LEASE_MS.to_string()),
        ("slots.fake", "8".to_string()),
    ];
    let mut cluster = Cluster::start(bins, admin, 3, &settings, SESSIONS)?;
    let sessions = cluster.sessions(1)?;
    let scanner = Scanner::start(cluster.daemon_pids(), cluster.root());
    let (mut handovers, mut engines_gone) = (Vec::new(), Vec::new());
    let (mut lost, mut not_once_total, mut ran_on_victim) = (0, 0, 0);
    // A fixed sequence of kill moments within the runs (deterministic, spread over 0–300 ms).
    let mut seed: u64 = 0x5eed;
    for round in 0..ROUNDS {
        let victim = round % 3;
        let ids = cluster.send_round(&sessions, &format!("@fake delay=500\nfailover {round}"))?;
        // Mid-run: once every engine of the victim's prompts is running.
        let node = cluster.daemons[victim].node()?.to_string();
        let victims_prompts = (SESSIONS / 3) as i64;
        cluster.wait_for_engines(&node, &ids, victims_prompts, round)?;
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((seed >> 33) % 300));
        let killed_at = wall_ms();
        let killed = Instant::now();
        cluster.rpcs[victim] = None;
        cluster.daemons[victim].kill9()?;
        let home = cluster.daemons[victim].home_text();
        let its: Vec<String> = cluster
            .db
            .rows(
                "SELECT id FROM prompts WHERE claimed_by = $1 AND status = 'running' AND id = ANY($2)",
                &[&node, &ids],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let bound = Duration::from_millis(SHORT_LEASE_MS) + Duration::from_secs(10);
        let ended = cluster.db.wait_until("the round's prompts end", bound, |db| {
            db.int(
                "SELECT count(*) FROM prompts WHERE id = ANY($1) AND status NOT IN ('queued', 'running')",
                &[&ids],
            )
            .map(|count| count >= ids.len() as i64)
        });
        if ended.is_err() {
            lost += cluster.db.int(
                "SELECT count(*) FROM prompts WHERE id = ANY($1) AND status <> 'done'",
                &[&ids],
            )?;
        }
        for row in cluster.db.rows(
            "SELECT finished_at FROM prompts WHERE id = ANY($1) AND status = 'done'",
            &[&its],
        )? {
            handovers.push(row.get::<_, i64>(0) - killed_at);
        }
        not_once_total += not_once(&cluster.db, Some(&ids))?;
        ran_on_victim += cluster.db.int(
            "SELECT count(*) FROM runs WHERE node_id = $1 AND status = 'succeeded' AND prompt_id = ANY($2)",
            &[&node, &its],
        )?;
        if let Some(seen) = scanner.last_seen(&home) {
            engines_gone.push(seen.saturating_duration_since(killed).as_millis() as i64);
        }
        cluster.daemons[victim].start(&cluster.bins)?;
        scanner.set_daemons(cluster.daemon_pids());
        cluster.wait_held(victim)?;
    }
    let scan = scanner.stop();
    let overlaps = store_overlaps(&cluster.db)?;
    drop(cluster);
    handovers.sort_unstable();
    engines_gone.sort_unstable();
    let goal = SHORT_LEASE_MS as i64 + 2000;
    let worst = handovers.last().copied().unwrap_or(i64::MAX);
    println!(
        "  kill → its prompt done elsewhere ({} prompts): p50 {} ms, p90 {} ms, max {} ms; goal ≤ {goal} ms: {}",
        handovers.len(),
        percentile(&handovers, 0.5),
        percentile(&handovers, 0.9),
        worst,
        verdict(worst <= goal && !handovers.is_empty())
    );
    println!(
        "  kill → the killed daemon's engines last seen alive: p50 {} ms, max {} ms",
        percentile(&engines_gone, 0.5),
        engines_gone.last().copied().unwrap_or(0)
    );
    println!(
        "  lost prompts {lost}, not exactly one succeeded run {not_once_total}, succeeded on the killed daemon {ran_on_victim}, store overlaps {overlaps}"
    );
    println!(
        "  live ({} scans of /proc): sessions seen with two engines alive {} ({} scans), max concurrent {}; all 0: {}",
        scan.scans,
        scan.overlap_sessions,
        scan.overlap_scans,
        scan.max_total,
        verdict(lost == 0 && not_once_total == 0 && scan.overlap_sessions == 0 && ran_on_victim == 0)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// fence

fn fence(bins: &Bins, admin: &str) -> Result<()> {
    const ROUNDS: usize = 20;
    const SESSIONS: usize = 6;
    let pause = Duration::from_millis(SHORT_LEASE_MS + 1500);
    println!("== fence: three daemons, store.lease_ms = {SHORT_LEASE_MS}, {ROUNDS} rounds of 3 s prompts on {SESSIONS} sessions, one daemon SIGSTOPped for {} ms", pause.as_millis());
    let settings = [
        ("store.lease_ms", SHORT_LEASE_MS.to_string()),
        ("slots.fake", "8".to_string()),
    ];
    let mut cluster = Cluster::start(bins, admin, 3, &settings, SESSIONS)?;
    let sessions = cluster.sessions(1)?;
    let scanner = Scanner::start(cluster.daemon_pids(), cluster.root());
    let mut past_deadline = Vec::new();
    let (mut fenced_rounds, mut fenced_total, mut not_elsewhere, mut not_once_total) = (0, 0, 0, 0);
    let mut never_seen = 0;
    let (mut lock_held_rounds, mut waiting_writers) = (0, 0);
    // The same counts over the rounds whose pause held no lock.
    let (mut fenced_free, mut stayed_free) = (0, 0);
    let mut stale = 0;
    for round in 0..ROUNDS {
        let victim = round % 3;
        let node = cluster.daemons[victim].node()?.to_string();
        let before = cluster.daemons[victim].fenced_writes()?;
        let ids = cluster.send_round(&sessions, &format!("@fake delay=3000\nfence {round}"))?;
        let victims_prompts = (SESSIONS / 3) as i64;
        cluster.wait_for_engines(&node, &ids, victims_prompts, round)?;
        let its: Vec<String> = cluster
            .db
            .rows(
                "SELECT id FROM prompts WHERE claimed_by = $1 AND status = 'running' AND id = ANY($2)",
                &[&node, &ids],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let home = cluster.daemons[victim].home_text();
        let stopped = Instant::now();
        cluster.daemons[victim].signal(libc::SIGSTOP)?;
        // Its deadline as the other daemons see it: the lease the store holds.
        let left = cluster.db.int(
            "SELECT lease_until - corral_now_ms() FROM daemons WHERE node_id = $1",
            &[&node],
        )?;
        let deadline = Instant::now() + Duration::from_millis(left.max(0) as u64);
        std::thread::sleep(pause.saturating_sub(stopped.elapsed()));
        match scanner.last_seen(&home) {
            Some(seen) if seen >= stopped => {
                let late = if seen >= deadline {
                    seen.duration_since(deadline).as_millis() as i64
                } else {
                    -(deadline.duration_since(seen).as_millis() as i64)
                };
                past_deadline.push(late);
            }
            _ => never_seen += 1,
        }
        // Whether it was paused inside a ledger transaction: then it holds the store's write
        // lock (an advisory lock) while frozen, and every other daemon's writes wait for it.
        let held = cluster.db.int(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid \
              WHERE a.datname = current_database() AND l.locktype = 'advisory' AND l.granted \
                AND a.state = 'idle in transaction' AND now() - a.state_change > interval '1 second'",
            &[],
        )?;
        let waiting = cluster.db.int(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )?;
        let held = held > 0;
        if held {
            lock_held_rounds += 1;
            waiting_writers = waiting_writers.max(waiting);
        }
        cluster.daemons[victim].signal(libc::SIGCONT)?;
        let mut after = before;
        let grew = cluster
            .db
            .wait_until("its fenced writes grow", Duration::from_secs(10), |_| {
                after = cluster.daemons[victim].fenced_writes()?;
                Ok(after > before)
            });
        if grew.is_ok() {
            fenced_rounds += 1;
            if !held {
                fenced_free += 1;
            }
        }
        let stopped_ms = wall_ms() - stopped.elapsed().as_millis() as i64;
        fenced_total += after.saturating_sub(before);
        cluster.db.wait_until("the round's prompts end", PATIENCE, |db| {
            db.int(
                "SELECT count(*) FROM prompts WHERE id = ANY($1) AND status NOT IN ('queued', 'running')",
                &[&ids],
            )
            .map(|count| count >= ids.len() as i64)
        })?;
        not_once_total += not_once(&cluster.db, Some(&ids))?;
        let stayed = cluster.db.int(
            "SELECT count(*) FROM prompts p WHERE p.id = ANY($2) AND NOT EXISTS \
               (SELECT 1 FROM runs r WHERE r.prompt_id = p.id AND r.status = 'succeeded' \
                  AND r.node_id <> $1)",
            &[&node, &its],
        )?;
        not_elsewhere += stayed;
        // Stale writes the store took: events of the paused daemon's runs of these prompts
        // stored after another daemon's run of the same prompt began (per-session numbers).
        stale += cluster.db.int(
            "SELECT count(*) FROM events e JOIN runs v ON v.id = e.run_id \
              WHERE v.prompt_id = ANY($2) AND v.node_id = $1 \
                AND e.seq > (SELECT coalesce(min(o.seq), 9000000000000000000) FROM events o \
                               JOIN runs w ON w.id = o.run_id \
                              WHERE w.prompt_id = v.prompt_id AND w.node_id <> $1)",
            &[&node, &its],
        )?;
        if !held {
            stayed_free += stayed;
        }
        if std::env::var_os("CORRAL_BENCH_EXPLAIN").is_some() {
            println!(
                "round {round}: victim {} stopped at {stopped_ms}, deadline in {left} ms, write lock held {held}, fenced {before} → {after}; its {its:?}{}",
                cluster.daemons[victim].host,
                cluster.explain(&ids)
            );
        }
        cluster.wait_held(victim)?;
    }
    let scan = scanner.stop();
    drop(cluster);
    past_deadline.sort_unstable();
    let worst = past_deadline.last().copied().unwrap_or(i64::MAX);
    // A scan's interval is the measure's resolution.
    let resolution = 5;
    println!(
        "  the paused daemon's engines last seen alive, relative to its deadline: p50 {} ms, max {} ms ({} rounds; {} with no engine seen while paused); gone by the deadline (±{resolution} ms): {}",
        percentile(&past_deadline, 0.5),
        worst,
        past_deadline.len(),
        never_seen,
        verdict(worst <= resolution && never_seen == 0)
    );
    println!(
        "  paused holding the store's write lock (idle in transaction > 1 s at the pause's end, others' writes waiting): {lock_held_rounds} of {ROUNDS} rounds, up to {waiting_writers} writers waiting"
    );
    println!(
        "  its late writes refused (lease.fenced_writes grew): {fenced_rounds} of {ROUNDS} rounds ({fenced_free} of the {} without the lock), {fenced_total} writes in all: {}",
        ROUNDS - lock_held_rounds,
        verdict(fenced_rounds == ROUNDS)
    );
    println!(
        "  its prompts not finished by another daemon {not_elsewhere} ({stayed_free} in rounds without the lock), prompts without exactly one succeeded run {not_once_total}, its events stored after another daemon's run began {stale}; live: sessions seen with two engines alive {} ({} scans of /proc): {}",
        scan.overlap_sessions,
        scan.scans,
        verdict(
            not_elsewhere == 0 && not_once_total == 0 && stale == 0 && scan.overlap_sessions == 0
        )
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// the cluster

/// A fresh database, `n` homes with a daemon each, and `projects` project directories.
/// Dropped, it ends every daemon (woken first if paused), then whatever process of its homes
/// is left (engines, lease guards; counted and printed), then drops the database.
struct Cluster {
    bins: Bins,
    daemons: Vec<Daemon>,
    /// One connection per daemon, for sends and status; made again after a restart.
    rpcs: Vec<Option<Rpc>>,
    /// Project names, in order (`p00`, `p01`, …).
    projects: Vec<String>,
    db: Database,
    /// The homes and the projects' directories; removed last.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Makes the database and the homes; sets the store's settings (plus the fake engine
    /// and short graces) and adds the projects through home 0's daemon, which is then
    /// stopped so that every daemon starts with the settings in the store; starts them all.
    fn start(
        bins: &Bins,
        admin: &str,
        n: usize,
        settings: &[(&str, String)],
        projects: usize,
    ) -> Result<Cluster> {
        let db = Database::create(admin)?;
        let dir = tempfile::tempdir().context("a temporary directory")?;
        let live = dir.path().join("live");
        std::fs::create_dir(&live).context("the live check's directory")?;
        let mut daemons = Vec::new();
        for index in 0..n {
            let home = dir.path().join(format!("home-{index}"));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&home)
                .context("a home")?;
            let mut config = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(home.join("config"))
                .context("HOME/config")?;
            writeln!(config, "store.url = {}", db.url).context("HOME/config")?;
            daemons.push(Daemon {
                home,
                live: live.clone(),
                host: format!("host-{}", (b'a' + index as u8) as char),
                pid: None,
                paused: false,
                node_id: None,
            });
        }
        let mut cluster = Cluster {
            bins: bins.clone(),
            daemons,
            rpcs: (0..n).map(|_| None).collect(),
            projects: Vec::new(),
            db,
            dir,
        };
        cluster.daemons[0].start(&cluster.bins)?;
        let fake = cluster.bins.fake.to_string_lossy().into_owned();
        let mut calls: Vec<(&str, Value)> = vec![
            (
                "settings.set",
                json!({ "name": "engines.fake.path", "value": fake }),
            ),
            (
                "settings.set",
                json!({ "name": "daemon.shutdown_grace_ms", "value": "200" }),
            ),
            (
                "settings.set",
                json!({ "name": "cancel.grace_ms", "value": "200" }),
            ),
        ];
        for (name, value) in settings {
            calls.push(("settings.set", json!({ "name": name, "value": value })));
        }
        for index in 0..projects {
            let name = format!("p{index:02}");
            let path = cluster.dir.path().join("work").join(&name);
            std::fs::create_dir_all(&path).context("a project directory")?;
            calls.push((
                "project.add",
                json!({ "name": name, "path": path.to_string_lossy(), "engine": "fake" }),
            ));
            cluster.projects.push(name);
        }
        cluster.rpc(0)?.call_many(&calls)?;
        cluster.rpcs[0] = None;
        cluster.daemons[0].stop()?;
        for index in 0..n {
            cluster.daemons[index].start(&cluster.bins)?;
        }
        for index in 0..n {
            cluster.wait_held(index)?;
        }
        // Work is sent once every daemon lists the others live (a daemon that believes itself
        // alone takes every prompt it serves).
        for index in 0..n {
            cluster.wait_sees(index, n)?;
        }
        Ok(cluster)
    }

    /// The connection to daemon `index`, made when there is none.
    fn rpc(&mut self, index: usize) -> Result<&mut Rpc> {
        if self.rpcs[index].is_none() {
            self.rpcs[index] = Some(Rpc::connect(&self.daemons[index].home)?);
        }
        self.rpcs[index]
            .as_mut()
            .ok_or_else(|| anyhow!("no connection"))
    }

    /// `per_project` sessions in each project (through daemon 0): their ids, project-major.
    fn sessions(&mut self, per_project: usize) -> Result<Vec<String>> {
        let calls: Vec<(&str, Value)> = self
            .projects
            .iter()
            .flat_map(|project| {
                (0..per_project).map(move |index| {
                    (
                        "session.new",
                        json!({ "project": project, "title": format!("{project}-s{index}") }),
                    )
                })
            })
            .collect();
        self.rpc(0)?
            .call_many(&calls)?
            .iter()
            .map(|session| {
                session["id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("session.new answered no id: {session}"))
            })
            .collect()
    }

    /// Sends `batches[i]` (`prompt.send` params) through daemon i, all daemons at once.
    fn send_batches(&mut self, batches: &[Vec<Value>]) -> Result<Vec<String>> {
        for index in 0..batches.len() {
            self.rpc(index)?;
        }
        let rpcs = &mut self.rpcs;
        let answers: Vec<Result<Vec<Value>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = rpcs
                .iter_mut()
                .zip(batches)
                .map(|(rpc, batch)| {
                    scope.spawn(move || {
                        let rpc = rpc.as_mut().ok_or_else(|| anyhow!("no connection"))?;
                        let calls: Vec<(&str, Value)> = batch
                            .iter()
                            .map(|params| ("prompt.send", params.clone()))
                            .collect();
                        rpc.call_many(&calls)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(anyhow!("a sender panicked")))
                })
                .collect()
        });
        let mut ids = Vec::new();
        for answer in answers {
            for prompt in answer? {
                let id = prompt["id"]
                    .as_str()
                    .ok_or_else(|| anyhow!("prompt.send answered no id: {prompt}"))?;
                ids.push(id.to_string());
            }
        }
        Ok(ids)
    }

    /// One prompt `text` on every session, session i through daemon (i mod n): their ids.
    fn send_round(&mut self, sessions: &[String], text: &str) -> Result<Vec<String>> {
        let n = self.daemons.len();
        let mut batches = vec![Vec::new(); n];
        for (index, session) in sessions.iter().enumerate() {
            batches[index % n].push(json!({ "session": session, "text": text }));
        }
        self.send_batches(&batches)
    }

    /// Waits until daemon `index` answers `status` holding its lease (registered anew after
    /// a start or a pause); learns its node id.
    fn wait_held(&mut self, index: usize) -> Result<()> {
        let until = Instant::now() + PATIENCE;
        loop {
            let status = self
                .rpc(index)
                .and_then(|rpc| rpc.call("status", json!({})));
            match status {
                Ok(status) if status["lease"]["state"] == "held" => {
                    let node = status["lease"]["node_id"]
                        .as_str()
                        .ok_or_else(|| anyhow!("a lease without a node id: {status}"))?;
                    self.daemons[index].node_id = Some(node.to_string());
                    return Ok(());
                }
                Ok(_) => {}
                // A connection the daemon closed (it was restarted): a new one next time.
                Err(_) => self.rpcs[index] = None,
            }
            if Instant::now() > until {
                bail!("daemon {index} never held its lease");
            }
            // Nothing tells another process that a lease is held: a bounded poll.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until daemon `index`'s status lists `n` live daemons.
    fn wait_sees(&mut self, index: usize, n: usize) -> Result<()> {
        let until = Instant::now() + PATIENCE;
        loop {
            let status = self.rpc(index)?.call("status", json!({}))?;
            let live = status["daemons"].as_array().map_or(0, |daemons| {
                daemons.iter().filter(|d| d["live"] == true).count()
            });
            if live >= n {
                return Ok(());
            }
            if Instant::now() > until {
                bail!("daemon {index} sees {live} live daemons of {n}: {status}");
            }
            // Nothing tells another process what a daemon sees: a bounded poll.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The prompts `ids` and their runs, each with its daemon's host: for a failure's message.
    fn explain(&self, ids: &[String]) -> String {
        let host = |node: Option<String>| {
            node.and_then(|node| {
                self.daemons
                    .iter()
                    .find(|daemon| daemon.node_id.as_deref() == Some(node.as_str()))
                    .map(|daemon| daemon.host.clone())
            })
            .unwrap_or_else(|| "-".into())
        };
        let ids = ids.to_vec();
        let rows = self.db.rows(
            "SELECT p.id, p.status, p.claimed_by, r.id, r.status, r.node_id, r.pid, \
                    r.started_at, r.ended_at, p.finished_at \
               FROM prompts p LEFT JOIN runs r ON r.prompt_id = p.id \
              WHERE p.id = ANY($1) ORDER BY p.id, r.started_at",
            &[&ids],
        );
        match rows {
            Ok(rows) => rows
                .iter()
                .map(|row| {
                    format!(
                        "\n  prompt {} {} on {} (ended {:?}); run {:?} {:?} on {} pid {:?} {:?}..{:?}",
                        row.get::<_, String>(0),
                        row.get::<_, String>(1),
                        host(row.get(2)),
                        row.get::<_, Option<i64>>(9),
                        row.get::<_, Option<String>>(3),
                        row.get::<_, Option<String>>(4),
                        host(row.get(5)),
                        row.get::<_, Option<i64>>(6),
                        row.get::<_, Option<i64>>(7),
                        row.get::<_, Option<i64>>(8),
                    )
                })
                .collect(),
            Err(error) => format!("(the store: {error:#})"),
        }
    }

    /// What the engines' live check logged so far (see the module doc).
    fn live_report(&self) -> Result<LiveReport> {
        let path = self.dir.path().join("live").join("log");
        let log = match std::fs::read_to_string(&path) {
            Ok(log) => log,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error).context("the live check's log"),
        };
        let mut report = LiveReport::default();
        let mut per_home: HashMap<String, usize> = HashMap::new();
        let mut overlapping: HashSet<String> = HashSet::new();
        for line in log.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [all, mine, home, overlap, session] = fields[..] else {
                bail!("the live check's log has the line {line:?}");
            };
            let slot = |text: &str| -> Result<usize> {
                text.parse()
                    .with_context(|| format!("the live check's log has the line {line:?}"))
            };
            report.engines += 1;
            report.max_total = report.max_total.max(slot(all)? + 1);
            let max = per_home.entry(home.to_string()).or_default();
            *max = (*max).max(slot(mine)? + 1);
            if overlap == "1" {
                overlapping.insert(session.to_string());
            }
        }
        let mut homes: Vec<(String, usize)> = per_home.into_iter().collect();
        homes.sort();
        report.max_per_home = homes.into_iter().map(|(_, max)| max).collect();
        report.overlap_sessions = overlapping.len();
        Ok(report)
    }

    /// The directory every home of this cluster is in: the scan counts only their engines
    /// (other programs on the machine may run fake engines too).
    fn root(&self) -> String {
        self.dir.path().to_string_lossy().into_owned()
    }

    /// Waits until `count` of the prompts `ids` have an engine running on daemon `node`
    /// (mid-run: the moment a round kills or pauses it).
    fn wait_for_engines(&self, node: &str, ids: &[String], count: i64, round: usize) -> Result<()> {
        self.db
            .wait_until("the victim's engines run", PATIENCE, |db| {
                db.int(
                    "SELECT count(*) FROM runs WHERE node_id = $1 AND status = 'running' \
                     AND pid IS NOT NULL AND prompt_id = ANY($2)",
                    &[&node, &ids],
                )
                .map(|running| running >= count)
            })
            .with_context(|| format!("round {round}: {}", self.explain(ids)))
    }

    fn daemon_pids(&self) -> Vec<i32> {
        self.daemons
            .iter()
            .filter_map(|daemon| daemon.pid)
            .collect()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Err(error) = self.drop_database() {
            eprintln!(
                "  the bench database {} was not dropped: {error:#}",
                self.name
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.rpcs.clear();
        // CORRAL_BENCH_LOGS=1: each daemon's warnings and errors, to see why a figure is off.
        if std::env::var_os("CORRAL_BENCH_LOGS").is_some() {
            for daemon in &self.daemons {
                let log =
                    std::fs::read_to_string(daemon.home.join("daemon.log")).unwrap_or_default();
                let bad: Vec<&str> = log
                    .lines()
                    .filter(|line| {
                        line.contains("WARN")
                            || line.contains("ERROR")
                            || line.contains("lease guard")
                    })
                    .collect();
                println!(
                    "  {} daemon.log: {} warnings and errors",
                    daemon.host,
                    bad.len()
                );
                for line in bad.iter().take(40) {
                    println!("    {line}");
                }
            }
        }
        for daemon in &mut self.daemons {
            daemon.ask_to_stop();
        }
        for daemon in &mut self.daemons {
            daemon.wait_stopped(Duration::from_secs(15));
        }
        let homes: Vec<String> = self.daemons.iter().map(Daemon::home_text).collect();
        let left = processes_of(&homes);
        if !left.is_empty() {
            println!(
                "  left behind once the daemons stopped: {} processes ({left:?}), killed",
                left.len()
            );
            for pid in left {
                // SAFETY: plain kill(2) of a pid that carried our homes a moment ago.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Err(error) = self.db.drop_database() {
            eprintln!("  the bench database was not dropped: {error:#}");
        }
    }
}

/// The processes whose environment names one of `homes` as `CORRAL_HOME`, or whose arguments
/// name it (a lease guard may have a clean environment).
fn processes_of(homes: &[String]) -> Vec<i32> {
    let marks: Vec<Vec<u8>> = homes
        .iter()
        .map(|home| format!("CORRAL_HOME={home}").into_bytes())
        .collect();
    let me = std::process::id() as i32;
    proc_pids()
        .into_iter()
        .filter(|&pid| pid != me && live(pid))
        .filter(|&pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            environ
                .split(|&byte| byte == 0)
                .any(|pair| marks.iter().any(|mark| pair == mark.as_slice()))
                || homes.iter().any(|home| cmdline.contains(home.as_str()))
        })
        .collect()
}

/// Every pid in `/proc`.
fn proc_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// `/proc/PID/stat`'s command name, state and parent, or `None` once it is gone.
fn stat_of(pid: i32) -> Option<(String, char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// Alive: not gone and not a zombie.
fn live(pid: i32) -> bool {
    stat_of(pid).is_some_and(|(_, state, _)| state != 'Z')
}

// ---------------------------------------------------------------------------------------
// a daemon

/// One home's daemon process (`corral daemon --detach`: in a session of its own, not our
/// child once its starter returned).
struct Daemon {
    home: PathBuf,
    /// Its engines' `CORRAL_FAKE_LIVE_CHECK` (the cluster's, shared by every daemon).
    live: PathBuf,
    /// Its `CORRAL_HOST`: distinct names, as if each were on a host of its own.
    host: String,
    /// `None` while none runs.
    pid: Option<i32>,
    /// SIGSTOPped: woken before it is asked to stop.
    paused: bool,
    /// Learned from its status once it holds its lease.
    node_id: Option<String>,
}

impl Daemon {
    fn home_text(&self) -> String {
        self.home.to_string_lossy().into_owned()
    }

    fn node(&self) -> Result<&str> {
        self.node_id
            .as_deref()
            .ok_or_else(|| anyhow!("{} has no node id yet", self.host))
    }

    /// `corral --home HOME daemon --detach`, which returns once the socket serves.
    fn start(&mut self, bins: &Bins) -> Result<()> {
        let mut command = Command::new(&bins.corral);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CORRAL_") {
                command.env_remove(key);
            }
        }
        let output = command
            .env("CORRAL_HOST", &self.host)
            .env("CORRAL_FAKE_LIVE_CHECK", &self.live)
            .arg("--home")
            .arg(&self.home)
            .args(["daemon", "--detach"])
            .stdin(Stdio::null())
            .output()
            .context("corral daemon --detach")?;
        if !output.status.success() {
            bail!(
                "the daemon of {} did not start: {}{}",
                self.host,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let pid = std::fs::read_to_string(self.home.join("daemon.pid"))
            .context("HOME/daemon.pid")?
            .trim()
            .parse()
            .context("HOME/daemon.pid holds a pid")?;
        self.pid = Some(pid);
        self.paused = false;
        Ok(())
    }

    fn signal(&mut self, signal: libc::c_int) -> Result<()> {
        let pid = self
            .pid
            .ok_or_else(|| anyhow!("{} runs no daemon", self.host))?;
        // SAFETY: plain kill(2) of the daemon we started (it has not been waited out yet).
        if unsafe { libc::kill(pid, signal) } != 0 {
            bail!("kill({pid}, {signal}): {}", std::io::Error::last_os_error());
        }
        match signal {
            libc::SIGSTOP => self.paused = true,
            libc::SIGCONT => self.paused = false,
            _ => {}
        }
        Ok(())
    }

    /// SIGKILL, then waits until it is gone.
    fn kill9(&mut self) -> Result<()> {
        self.signal(libc::SIGKILL)?;
        if !self.wait_stopped(Duration::from_secs(10)) {
            bail!("{}'s daemon outlived SIGKILL", self.host);
        }
        Ok(())
    }

    /// SIGTERM, then waits until it is gone.
    fn stop(&mut self) -> Result<()> {
        self.ask_to_stop();
        if !self.wait_stopped(Duration::from_secs(30)) {
            bail!("{}'s daemon did not stop on SIGTERM", self.host);
        }
        Ok(())
    }

    /// SIGCONT when paused, then SIGTERM.
    fn ask_to_stop(&mut self) {
        if let Some(pid) = self.pid {
            // SAFETY: plain kill(2) of the daemon we started.
            unsafe {
                if self.paused {
                    libc::kill(pid, libc::SIGCONT);
                }
                libc::kill(pid, libc::SIGTERM);
            }
            self.paused = false;
        }
    }

    /// Waits (a pidfd: woken by its exit) until the daemon is gone, at most `limit`, then
    /// SIGKILLs it; whether it ended within `limit`.
    fn wait_stopped(&mut self, limit: Duration) -> bool {
        let Some(pid) = self.pid.take() else {
            return true;
        };
        let ended = wait_gone(pid, limit);
        if !ended {
            // SAFETY: plain kill(2) of the daemon we started, which did not end.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait_gone(pid, Duration::from_secs(5));
        }
        ended
    }

    /// Its `lease.fenced_writes`, from its own status.
    fn fenced_writes(&self) -> Result<u64> {
        let status = Rpc::connect(&self.home)?.call("status", json!({}))?;
        Ok(status["lease"]["fenced_writes"].as_u64().unwrap_or(0))
    }
}

/// Waits until `pid` has ended (a zombie has), at most `limit`: a pidfd polled for its exit,
/// so the wait wakes at the exit; whether it ended.
fn wait_gone(pid: i32, limit: Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        return !live(pid);
    }
    let until = Instant::now() + limit;
    let ended = loop {
        let left = until.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the timeout is bounded.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis().min(60_000) as i32) };
        if ready > 0 || !live(pid) {
            break true;
        }
        if ready == 0 && Instant::now() >= until {
            break false;
        }
    };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    ended
}

// ---------------------------------------------------------------------------------------
// the socket

/// A JSON-RPC connection to a daemon's socket (initialized).
struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    fn connect(home: &Path) -> Result<Rpc> {
        let stream =
            UnixStream::connect(home.join("corral.sock")).context("the daemon's socket")?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .context("a read timeout")?;
        let mut rpc = Rpc {
            writer: stream.try_clone().context("a socket clone")?,
            reader: BufReader::with_capacity(1 << 16, stream),
            next_id: 1,
        };
        rpc.call(
            "initialize",
            json!({ "protocol": 1, "client": "multi_daemon_bench" }),
        )?;
        Ok(rpc)
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let mut answers = self.call_many(&[(method, params)])?;
        answers.pop().ok_or_else(|| anyhow!("no answer"))
    }

    /// Calls each of `calls`, at most [`WINDOW`] in flight; their results in order. An error
    /// answer fails the whole.
    fn call_many(&mut self, calls: &[(&str, Value)]) -> Result<Vec<Value>> {
        let first = self.next_id;
        let mut results: Vec<Option<Value>> = vec![None; calls.len()];
        let (mut sent, mut received) = (0, 0);
        let mut line = String::new();
        while received < calls.len() {
            while sent < calls.len() && sent - received < WINDOW {
                let (method, params) = &calls[sent];
                let request = json!({ "jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params });
                self.next_id += 1;
                writeln!(self.writer, "{request}").context("a request to the daemon")?;
                sent += 1;
            }
            line.clear();
            if self
                .reader
                .read_line(&mut line)
                .context("the daemon's answer")?
                == 0
            {
                bail!("the daemon closed the connection");
            }
            let message: Value = serde_json::from_str(&line).context("a JSON line")?;
            let Some(id) = message["id"].as_u64() else {
                continue; // a notification
            };
            let Some(index) = id.checked_sub(first).map(|index| index as usize) else {
                continue;
            };
            if index >= calls.len() {
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("{} failed: {error}", calls[index].0);
            }
            results[index] = Some(message["result"].clone());
            received += 1;
        }
        Ok(results.into_iter().map(Option::unwrap_or_default).collect())
    }
}

// ---------------------------------------------------------------------------------------
// the store

/// A connection to the bench's own database, and the admin URL it was made from.
struct Database {
    runtime: tokio::runtime::Runtime,
    client: Option<tokio_postgres::Client>,
    admin: String,
    name: String,
    /// The bench database's URL (password included: the homes' `config` holds it, 0600).
    url: String,
    dropped: bool,
}

impl Database {
    fn create(admin: &str) -> Result<Database> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("a runtime")?;
        let name = format!("corral_mdb_{}", uuid::Uuid::new_v4().simple());
        let (base, _) = admin
            .rsplit_once('/')
            .ok_or_else(|| anyhow!("CORRAL_BENCH_POSTGRES_URL has no database path"))?;
        let url = format!("{base}/{name}");
        admin_sql(admin, &format!("CREATE DATABASE {name}"))?;
        let mut database = Database {
            runtime,
            client: None,
            admin: admin.to_string(),
            name,
            url,
            dropped: false,
        };
        let client = database.runtime.block_on(async {
            let (client, connection) =
                tokio_postgres::connect(&database.url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            Ok::<_, tokio_postgres::Error>(client)
        });
        database.client = Some(client.context("the bench database")?);
        Ok(database)
    }

    fn rows(
        &self,
        query: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| anyhow!("the database is dropped"))?;
        self.runtime
            .block_on(client.query(query, params))
            .with_context(|| format!("{query:?}"))
    }

    /// The one integer of `query`'s one row.
    fn int(
        &self,
        query: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<i64> {
        let rows = self.rows(query, params)?;
        let row = rows.first().ok_or_else(|| anyhow!("{query:?}: no row"))?;
        row.try_get(0).with_context(|| format!("{query:?}"))
    }

    /// Polls `condition` every 10 ms (rows other processes write: nothing tells us), at
    /// most `limit`.
    fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        condition: impl FnMut(&Database) -> Result<bool>,
    ) -> Result<()> {
        self.wait_until_every(what, limit, Duration::from_millis(10), condition)
    }

    /// [`Database::wait_until`], polling every `every`.
    fn wait_until_every(
        &self,
        what: &str,
        limit: Duration,
        every: Duration,
        mut condition: impl FnMut(&Database) -> Result<bool>,
    ) -> Result<()> {
        let until = Instant::now() + limit;
        while !condition(self)? {
            if Instant::now() > until {
                bail!("timed out after {limit:?} waiting until {what}");
            }
            std::thread::sleep(every);
        }
        Ok(())
    }

    fn drop_database(&mut self) -> Result<()> {
        if self.dropped {
            return Ok(());
        }
        self.client = None;
        self.dropped = true;
        admin_sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        )
    }
}

/// Runs `statement` on the admin URL.
fn admin_sql(admin: &str, statement: &str) -> Result<()> {
    common::postgres_execute(admin, statement).map_err(|error| anyhow!(error))
}

// ---------------------------------------------------------------------------------------
// the /proc scan

/// What the engines' live check logged (see the module doc): exact, from their own locks.
#[derive(Debug, Default, Clone)]
struct LiveReport {
    /// Engines that took their locks (one line each).
    engines: usize,
    /// The most engines alive at once, in all and per daemon home.
    max_total: usize,
    max_per_home: Vec<usize>,
    /// Sessions with an engine started while another of theirs was alive.
    overlap_sessions: usize,
}

/// What a scan found over its life.
#[derive(Debug, Default, Clone)]
struct ScanReport {
    scans: u64,
    /// The most fake engines seen alive at once, in all.
    max_total: usize,
    /// Sessions seen with two engines alive at once, and in how many scans.
    overlap_sessions: usize,
    overlap_scans: u64,
}

/// What the scan thread shares with the bench.
#[derive(Default)]
struct ScanState {
    scans: u64,
    max_total: usize,
    overlap_sessions: HashSet<String>,
    overlap_scans: u64,
    /// When an engine of each home was last seen alive.
    last_seen: HashMap<String, Instant>,
    /// The daemons' pids: a child of one that is not an engine yet may become one (exec).
    daemons: HashSet<i32>,
}

/// A thread that reads `/proc` every [`SCAN_EVERY`]: live fake engines by their
/// `CORRAL_SESSION_ID` and `CORRAL_HOME` (set by the daemon for every engine child).
struct Scanner {
    state: Arc<Mutex<ScanState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A process the scan has classified.
#[derive(Clone)]
enum Seen {
    /// A fake engine: its session and home.
    Engine { session: String, home: String },
    /// Anything else (not re-read while its pid lives).
    Other,
}

impl Scanner {
    /// Scans for the engines of the homes under `root`, the children of `daemons` looked at
    /// again until they exec.
    fn start(daemons: Vec<i32>, root: String) -> Scanner {
        let state = Arc::new(Mutex::new(ScanState {
            daemons: daemons.into_iter().collect(),
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || scan_loop(&state, &stop, &root))
        };
        Scanner {
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScanState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_daemons(&self, daemons: Vec<i32>) {
        self.lock().daemons = daemons.into_iter().collect();
    }

    /// When an engine of `home` was last seen alive.
    fn last_seen(&self, home: &str) -> Option<Instant> {
        self.lock().last_seen.get(home).copied()
    }

    fn stop(mut self) -> ScanReport {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let state = self.lock();
        ScanReport {
            scans: state.scans,
            max_total: state.max_total,
            overlap_sessions: state.overlap_sessions.len(),
            overlap_scans: state.overlap_scans,
        }
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn scan_loop(state: &Mutex<ScanState>, stop: &AtomicBool, root: &str) {
    let mut known: HashMap<i32, Seen> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        let daemons = state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .daemons
            .clone();
        let pids = proc_pids();
        let present: HashSet<i32> = pids.iter().copied().collect();
        known.retain(|pid, _| present.contains(pid));
        let now = Instant::now();
        let mut per_session: HashMap<String, usize> = HashMap::new();
        let mut per_home: HashMap<String, usize> = HashMap::new();
        for pid in pids {
            let seen = match known.get(&pid) {
                Some(Seen::Other) => continue,
                Some(engine) => Some(engine.clone()),
                None => None,
            };
            let Some((comm, state, ppid)) = stat_of(pid) else {
                continue;
            };
            let engine = match seen {
                Some(engine) => engine,
                None if comm == FAKE_COMM => match engine_of(pid, root) {
                    Some(engine) => {
                        known.insert(pid, engine.clone());
                        engine
                    }
                    None => continue,
                },
                None => {
                    // A daemon's child may not have exec'd its engine yet: looked at again.
                    if !daemons.contains(&ppid) {
                        known.insert(pid, Seen::Other);
                    }
                    continue;
                }
            };
            if state == 'Z' {
                continue;
            }
            if let Seen::Engine { session, home } = engine {
                *per_session.entry(session).or_default() += 1;
                *per_home.entry(home).or_default() += 1;
            }
        }
        let mut shared = state.lock().unwrap_or_else(PoisonError::into_inner);
        shared.scans += 1;
        shared.max_total = shared.max_total.max(per_home.values().sum());
        for home in per_home.into_keys() {
            shared.last_seen.insert(home, now);
        }
        let overlapping: Vec<String> = per_session
            .into_iter()
            .filter(|(_, count)| *count > 1)
            .map(|(session, _)| session)
            .collect();
        if !overlapping.is_empty() {
            shared.overlap_scans += 1;
            shared.overlap_sessions.extend(overlapping);
        }
        drop(shared);
        std::thread::sleep(SCAN_EVERY);
    }
}

/// A fake engine's session and home, from its environment (final once it exec'd); `Other`
/// when its home is not under `root`.
fn engine_of(pid: i32, root: &str) -> Option<Seen> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let (mut session, mut home) = (None, None);
    for pair in environ.split(|&byte| byte == 0) {
        let pair = String::from_utf8_lossy(pair);
        if let Some(value) = pair.strip_prefix("CORRAL_SESSION_ID=") {
            session = Some(value.to_string());
        } else if let Some(value) = pair.strip_prefix("CORRAL_HOME=") {
            home = Some(value.to_string());
        }
    }
    let home = home?;
    if !home.starts_with(root) {
        return Some(Seen::Other);
    }
    Some(Seen::Engine {
        session: session?,
        home,
    })
}
