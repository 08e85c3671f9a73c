//! History query speed: fills a store with 1,000,000 execs (through the ledger actor), then
//! times `corral monitor list --all --search X --limit 50 --json` against the `sqlite3` CLI
//! running the equivalent SQL on the same file, alternating, in the same run.
//!
//! Run: `cargo build --release && cargo run --release --example history_bench [ROWS] [RUNS]`
//! Goal (issue #2): corral's median wall time ≤ 1.5 × sqlite3's. Needs `sqlite3` on PATH.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use corral::actors::ledger::{LedgerHandle, RecordExec};
use corral::store::exec::NewExec;

const WINDOW: usize = 8192;
const SEARCH: &str = "pkg777";

fn row(index: usize) -> NewExec {
    NewExec {
        id: format!("{:012x}-hist-{index:09}", index),
        trace_id: format!("trace-{}", index / 10),
        parent_exec_id: None,
        caller_session_id: None,
        via_agent: false,
        argv: vec![
            "corral".into(),
            "run".into(),
            "--".into(),
            "cargo".into(),
            "test".into(),
            format!("pkg{}", index % 1000),
        ],
        cwd: Some("/home/user/project".into()),
        repo: Some("/home/user/project".into()),
        pid: 4242,
        pid_start: Some(1),
        started_at: 1_700_000_000_000 + index as i64,
        completion: None,
    }
}

fn corral_binary() -> PathBuf {
    // target/release/examples/history_bench → target/release/corral
    let me = std::env::current_exe().unwrap();
    me.parent().unwrap().parent().unwrap().join("corral")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(command: &mut Command) -> Duration {
    let started = Instant::now();
    let output = command.output().expect("the command runs");
    let elapsed = started.elapsed();
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.len() > 100, "no rows printed: {output:?}");
    elapsed
}

fn fill(home: &Path, rows: usize) {
    let path = home.join("corral.db");
    actix::System::new().block_on(async move {
        let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
        let mut next = 0;
        while next < rows {
            let end = (next + WINDOW).min(rows);
            let writes = (next..end).map(|index| ledger.write(RecordExec(row(index))));
            for result in futures::future::join_all(writes).await {
                result.unwrap();
            }
            next = end;
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(21);
    let home = tempfile::tempdir().unwrap();
    let started = Instant::now();
    fill(home.path(), rows);
    println!("filled {rows} execs in {:.1?}", started.elapsed());

    let corral = corral_binary();
    assert!(
        corral.exists(),
        "build the release binary first: cargo build --release"
    );
    let sql = format!(
        "SELECT id, trace_id, parent_exec_id, caller_session_id, via_agent, command, cwd, repo, \
         pid, started_at, completed_at, exit_code, outcome, signal FROM execs \
         WHERE instr(search_text, lower('{SEARCH}')) > 0 \
         ORDER BY started_at DESC, id DESC LIMIT 51;"
    );
    let db = home.path().join("corral.db");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(time(
            Command::new(&corral)
                .args([
                    "monitor", "list", "--all", "--search", SEARCH, "--limit", "50", "--json",
                ])
                .env("CORRAL_HOME", home.path()),
        ));
        theirs.push(time(
            Command::new("sqlite3").arg("-json").arg(&db).arg(&sql),
        ));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!("runs: {runs} each, alternating");
    println!("corral monitor list --search {SEARCH} --limit 50 --json: median {ours:.2?}");
    println!("sqlite3 -json, equivalent SQL:                   median {theirs:.2?}");
    println!(
        "ratio corral / sqlite3: {:.2}",
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}
