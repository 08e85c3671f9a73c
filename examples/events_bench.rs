//! Event streaming at scale: SESSIONS sessions, each running one prompt whose fake engine
//! streams EVENTS progress items (`@fake deltas=EVENTS`), with `slots.fake = SLOTS` children at
//! once. Every session is in its own project (a project runs one child at a time). All prompts
//! are sent at once; the wall time runs from the first send to the last prompt's end.
//!
//! What one prompt stores, counted from the fake engine's output (`@fake deltas=N` prints
//! `thread.started`, `turn.started`, N reasoning items, the answer, `turn.completed`): the
//! worker's `prompt.started` and `run.started`, then `thread.started`, `turn.started`, N `tool`
//! events, `message`, `usage` and `turn.completed` (the last line gives two), then `run.exited`
//! and `prompt.done`: N + 9 events. The sessions are given a title, so no `title.generated`.
//! A prompt that waits long for a slot may also get `slot.waiting` and `slot.granted` notices;
//! those depend on timing and are counted apart. Each session's rows in `events` are counted
//! after the run: exactly N + 9 besides the notices, N of them `tool`, numbered without gaps.
//!
//! Memory: VmRSS of this process before the `Corral` starts, and at the end VmRSS and the
//! peak VmHWM (which also covers setting up the projects and sessions). One subscriber drains
//! the event stream throughout, as a UI following the supervisor would (`--no-subscriber`
//! leaves it out).
//!
//! Run: `cargo build --release && cargo run --release --example events_bench [SESSIONS [EVENTS [SLOTS]]] [--no-subscriber]`
//! (defaults 1000 1000 32; e.g. `… events_bench 50 200` for a quick check).
//! Goal: peak RSS growth ≤ 64 MiB, no event lost.

use corral::args;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::store::projects::NewProject;
use corral::store::prompts::NewPrompt;
use corral::store::sessions::NewSession;
use corral::{Corral, CorralOptions};
use tokio::sync::broadcast::error::RecvError;

/// Events stored per prompt besides the progress items (see the module doc).
const OTHER_EVENTS: usize = 9;

/// One session's rows in `events`.
struct Tally {
    session_id: String,
    count: i64,
    max_seq: i64,
    /// `slot.*` notices (timing-dependent).
    notices: i64,
    tools: i64,
}

/// A field of /proc/self/status, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} not in /proc/self/status"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// How many prompts have ended (any final status).
fn finished(corral: &Corral) -> usize {
    corral
        .read(|c| {
            c.row(
                "SELECT count(*) FROM prompts WHERE status IN ('done', 'failed', 'cancelled')",
                args![],
                |row| row.get::<i64>(0),
            )
        })
        .unwrap() as usize
}

fn main() {
    let subscriber = !std::env::args().any(|arg| arg == "--no-subscriber");
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .map(|arg| arg.parse().expect("arguments are numbers"))
        .collect();
    let sessions = numbers.first().copied().unwrap_or(1000);
    let deltas = numbers.get(1).copied().unwrap_or(1000);
    let slots = numbers.get(2).copied().unwrap_or(32);
    let per_session = deltas + OTHER_EVENTS;
    let fake = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("corral-fake-engine");
    assert!(
        fake.exists(),
        "{} is missing: build it first with cargo build --release",
        fake.display()
    );
    let home = tempfile::tempdir().unwrap();
    let projects_dir = tempfile::tempdir().unwrap();
    let prompt = format!("@fake deltas={deltas}\nstream");

    let system = actix::System::new();
    let rss_before = status_kib("VmRSS");
    let result = system.block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        for (name, value) in [
            ("engines.fake.path", fake.to_string_lossy().into_owned()),
            ("slots.fake", slots.to_string()),
        ] {
            corral.set_setting(name, Some(&value)).await.unwrap();
        }
        let mut session_ids = Vec::with_capacity(sessions);
        for index in 0..sessions {
            let path = projects_dir.path().join(format!("p{index}"));
            std::fs::create_dir_all(&path).unwrap();
            let project = corral
                .add_project(NewProject {
                    name: format!("p{index}"),
                    path: path.to_string_lossy().into_owned(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let session = corral
                .open_session(NewSession {
                    project_id: project.id,
                    engine: Some(corral::engine::EngineKind::Fake),
                    title: Some(format!("events {index}")),
                    ..Default::default()
                })
                .await
                .unwrap();
            session_ids.push(session.id);
        }
        let rss_ready = status_kib("VmRSS");

        // A UI-like subscriber: receives every event it can, notes how many it missed.
        let received = Arc::new(AtomicU64::new(0));
        let lagged = Arc::new(AtomicU64::new(0));
        if subscriber {
            let mut events = corral.subscribe();
            let (received, lagged) = (received.clone(), lagged.clone());
            actix::spawn(async move {
                loop {
                    match events.recv().await {
                        Ok(_) => {
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(RecvError::Lagged(missed)) => {
                            lagged.fetch_add(missed, Ordering::Relaxed);
                        }
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }

        let started = Instant::now();
        let sends = session_ids.iter().map(|session_id| {
            corral.send(NewPrompt {
                session_id: session_id.clone(),
                text: prompt.clone(),
                ..Default::default()
            })
        });
        for sent in futures::future::join_all(sends).await {
            sent.unwrap();
        }
        let mut rss_peak_seen = status_kib("VmRSS");
        while finished(&corral) < sessions {
            tokio::time::sleep(Duration::from_millis(20)).await;
            rss_peak_seen = rss_peak_seen.max(status_kib("VmRSS"));
        }
        let wall = started.elapsed();

        // Every event stored: per session, exactly the expected count, numbered without gaps.
        let counts: Vec<Tally> = corral
            .read(|c| {
                c.rows(
                    "SELECT session_id, count(*), max(seq), sum(kind LIKE 'slot.%'), \
                     sum(kind = 'tool') FROM events GROUP BY session_id",
                    args![],
                    |row| {
                        Ok(Tally {
                            session_id: row.get(0)?,
                            count: row.get(1)?,
                            max_seq: row.get(2)?,
                            notices: row.get(3)?,
                            tools: row.get(4)?,
                        })
                    },
                )
            })
            .unwrap();
        let is_wrong = |tally: &Tally| {
            tally.count - tally.notices != per_session as i64
                || tally.max_seq != tally.count
                || tally.tools != deltas as i64
        };
        // For a session with a wrong count: how many events of each kind it has.
        let kinds_of_wrong: Vec<(String, i64)> = match counts.iter().find(|t| is_wrong(t)) {
            Some(Tally { session_id, .. }) => corral
                .read(|c| {
                    c.rows(
                        "SELECT kind, count(*) FROM events WHERE session_id = ?1 GROUP BY kind",
                        args![session_id],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                })
                .unwrap(),
            None => Vec::new(),
        };
        let not_done: i64 = corral
            .read(|c| {
                c.row(
                    "SELECT count(*) FROM prompts WHERE status != 'done'",
                    args![],
                    |row| row.get(0),
                )
            })
            .unwrap();
        // Let the subscriber drain what is left.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let wrong: Vec<String> = counts
            .iter()
            .filter(|t| is_wrong(t))
            .map(|t| {
                format!(
                    "{} ({} events, max seq {})",
                    t.session_id, t.count, t.max_seq
                )
            })
            .collect();
        (
            wall,
            counts,
            wrong,
            not_done,
            kinds_of_wrong,
            rss_ready,
            rss_peak_seen,
            received.load(Ordering::Relaxed),
            lagged.load(Ordering::Relaxed),
        )
    });
    let (wall, counts, wrong, not_done, kinds_of_wrong, rss_ready, rss_peak_seen, received, lagged) =
        result;
    let rss_end = status_kib("VmRSS");
    let hwm = status_kib("VmHWM");

    let stored: i64 = counts.iter().map(|t| t.count).sum();
    let notices: i64 = counts.iter().map(|t| t.notices).sum();
    let expected = (sessions * per_session) as i64;
    println!(
        "sessions: {sessions} (one project each), {deltas} progress items each, slots.fake={slots}"
    );
    println!(
        "events stored: {stored}: {} of {expected} expected ({per_session} per session; {} sessions with events) + {notices} slot notices",
        stored - notices,
        counts.len()
    );
    println!(
        "wall: {wall:.2?}, {:.0} events/s stored",
        stored as f64 / wall.as_secs_f64()
    );
    if subscriber {
        println!("subscriber: received {received}, lagged past {lagged}");
    }
    println!(
        "RSS: before {:.1} MiB, after setup {:.1} MiB, end {:.1} MiB, peak (VmHWM) {:.1} MiB, peak sampled while running {:.1} MiB",
        mib(rss_before),
        mib(rss_ready),
        mib(rss_end),
        mib(hwm),
        mib(rss_peak_seen)
    );
    // VmHWM is kept from lazily synced counters: a sample taken meanwhile can exceed it.
    let growth = hwm.max(rss_peak_seen).saturating_sub(rss_before);
    println!(
        "RSS growth: peak {:.1} MiB (the larger of VmHWM and the samples), at the end {:.1} MiB (goal peak ≤ 64 MiB: {})",
        mib(growth),
        mib(rss_end.saturating_sub(rss_before)),
        if growth <= 64 * 1024 { "met" } else { "MISSED" }
    );
    assert_eq!(not_done, 0, "prompts not done");
    assert!(
        wrong.is_empty() && counts.len() == sessions,
        "{} sessions with a wrong count, e.g. {:?}, whose events are {kinds_of_wrong:?}",
        wrong.len() + sessions - counts.len(),
        wrong.first()
    );
    println!("no event lost");
}
