//! The kill -9 loop of `tests/it/crash_recovery.rs` at length: ROUNDS rounds (default 200) of
//! three prompts each, the daemon killed with SIGKILL at a random moment of one of four kinds
//! each round (mid-turn, during its successor's boot, at a named point of the reconciliation,
//! between an engine's spawn and the commit of its pid; see `src/testkit/crash_loop.rs`),
//! with engines that leave processes in their group and outside it (`setsid`). Prints the
//! figures the issue asks for — prompts lost, runs overlapping on one session (live, from
//! `/proc`, and in the store), processes left behind, `PRAGMA integrity_check` — and the wall
//! time.
//!
//! `cargo build --release && cargo build --release --examples &&
//! target/release/examples/crash_bench [ROUNDS] [SEED] [--store-url postgres://…|--postgres
//! postgres://…/postgres]`. It uses `corral` and `corral-fake-engine` from the directory
//! above its own (target/release). With a store URL (an empty database, or a corral store)
//! the home's `config` names it and the store is PostgreSQL's: `integrity_check` is SQLite's,
//! so it is not run, and no SQLite file may appear beside it. With `--postgres` (a URL of the
//! server's `postgres` database, whose user may create databases) the loop runs on a fresh
//! database made there, dropped after.

mod common;

use common::binaries;
use corral::testkit::crash_loop;

fn main() {
    let mut positional = Vec::new();
    let mut store_url = None;
    let mut admin_url: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store-url" => store_url = Some(args.next().expect("--store-url needs a URL")),
            "--postgres" => admin_url = Some(args.next().expect("--postgres needs a URL")),
            _ => positional.push(arg),
        }
    }
    let rounds: usize = positional
        .first()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let seed: u64 = positional
        .get(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x5eed);
    let (corral, fake) = binaries();
    // A fresh database on the given server, dropped after (whatever the figures).
    let fresh = admin_url.map(|admin| FreshDatabase::create(&admin));
    if let Some(fresh) = &fresh {
        store_url = Some(fresh.url.clone());
    }
    println!(
        "kill -9 loop: {rounds} rounds, seed {seed}, {}, store {}",
        corral.display(),
        if store_url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    let figures = match &store_url {
        None => crash_loop::run(&corral, &fake, rounds, seed),
        Some(url) => on_postgres(&corral, &fake, rounds, seed, url),
    };
    println!(
        "prompts sent:              {} ({} rounds)",
        figures.prompts, figures.rounds
    );
    for (kind, kills) in crash_loop::KINDS.iter().zip(figures.kills) {
        println!("kills {kind:<20} {kills}");
    }
    println!("prompts lost:              {}", figures.lost);
    println!("prompts not done once:     {}", figures.not_once);
    println!("turns redone:              {}", figures.redone);
    println!(
        "runs overlapping (live):   {} (in {} scans of /proc)",
        figures.live_overlaps.len(),
        figures.scans
    );
    println!(
        "runs overlapping (store):  {}",
        figures.store_overlaps.len()
    );
    println!("processes left behind:     {}", figures.left_behind.len());
    println!("integrity_check:           {}", figures.integrity);
    println!(
        "wall time:                 {:.1} s ({:.0} ms a round)",
        figures.wall.as_secs_f64(),
        figures.wall.as_secs_f64() * 1000.0 / rounds.max(1) as f64
    );
    for line in figures
        .live_overlaps
        .iter()
        .chain(&figures.store_overlaps)
        .chain(&figures.left_behind)
        .take(10)
    {
        println!("  {line}");
    }
    scan_cost();
    drop(fresh);
    let clean = figures.lost == 0
        && figures.not_once == 0
        && figures.live_overlaps.is_empty()
        && figures.store_overlaps.is_empty()
        && figures.left_behind.is_empty()
        && figures.integrity == "ok";
    std::process::exit(if clean { 0 } else { 1 });
}

/// A database made for this run on the server of `--postgres`, dropped when this is.
struct FreshDatabase {
    admin: String,
    name: String,
    /// Its URL (the admin URL's, with this database's name).
    url: String,
}

impl FreshDatabase {
    /// Exits 1 with one line when the server refuses.
    fn create(admin: &str) -> FreshDatabase {
        let name = format!("corral_crash_{}", uuid::Uuid::new_v4().simple());
        let Some((base, _)) = admin.rsplit_once('/') else {
            eprintln!("crash_bench: --postgres {admin}: no database path in the URL");
            std::process::exit(1);
        };
        if let Err(error) = common::postgres_execute(admin, &format!("CREATE DATABASE {name}")) {
            eprintln!("crash_bench: --postgres: {error}");
            std::process::exit(1);
        }
        FreshDatabase {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(error) = common::postgres_execute(&self.admin, &drop) {
            eprintln!(
                "crash_bench: the database {} was not dropped: {error}",
                self.name
            );
        }
    }
}

/// [`crash_loop::run_in`] in a home whose `config` names the PostgreSQL store at `url`.
fn on_postgres(
    corral: &std::path::Path,
    fake: &std::path::Path,
    rounds: usize,
    seed: u64,
    url: &str,
) -> crash_loop::Figures {
    use corral::store::location::HomeConfig;
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().expect("a temporary home");
    // As `corral config set store.url` writes it (0600: the URL carries a password).
    let mut config = HomeConfig::load(dir.path()).expect("the home's config");
    config.set("store.url", url).expect("a store URL");
    config.save(dir.path()).expect("the home's config");
    let mut figures = crash_loop::run_in(corral, fake, dir.path(), rounds, seed);
    figures.integrity = if dir.path().join("corral.db").exists() {
        "a SQLite store appeared beside the PostgreSQL one".to_string()
    } else {
        "ok".to_string()
    };
    figures.wall = started.elapsed();
    figures
}

/// What a run's end costs to look for its leftovers: one pass over `/proc` for a run started
/// now (its group and its id in the environment of processes started since), median of 200,
/// and the same with every environment read (a run whose engine's start time is unknown).
fn scan_cost() {
    let processes = procfs::process::all_processes()
        .map(|all| all.count())
        .unwrap_or(0);
    let me = std::process::id();
    let median = |since: Option<u64>| {
        let mark = corral::process::Mark {
            group: Some(i32::MAX - 1),
            env: Some(("CORRAL_RUN_ID".into(), "no-such-run".into())),
            since,
            born: None,
            spawned_here: false,
        };
        let mut times: Vec<std::time::Duration> = (0..200)
            .map(|_| {
                let started = std::time::Instant::now();
                let found = corral::process::members(std::slice::from_ref(&mark));
                assert!(found[0].is_empty());
                started.elapsed()
            })
            .collect();
        times.sort();
        times[times.len() / 2]
    };
    println!(
        "leftover scan at a run's end: {:?} ({processes} processes; {:?} reading every environment)",
        median(corral::process::start_time(me)),
        median(None)
    );
}
