//! Ledger throughput: 200,000 exec inserts sent through the ledger actor (group commit) against
//! raw rusqlite inserts batched in one transaction, on the same machine in the same run.
//!
//! Run: `cargo run --release --example ledger_bench [ROWS]`
//! Goal (issue #2): the actor reaches at least 50 % of the raw rate.

use std::time::Instant;

use corral::actors::ledger::{LedgerHandle, RecordExec};
use corral::store::exec::NewExec;
use corral::store::{migrations, open_writer};

/// Writes in flight at once: a burst as a busy daemon would send it.
const WINDOW: usize = 8192;

fn row(index: usize) -> NewExec {
    NewExec {
        id: format!("bench-{index:09}"),
        trace_id: format!("bench-{index:09}"),
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
        started_at: index as i64,
        completion: None,
    }
}

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("temp dir");

    // Raw: one connection, one transaction, one prepared statement.
    let raw_path = dir.path().join("raw.db");
    let (mut connection, _) = open_writer(&raw_path, true).unwrap();
    migrations::migrate(&mut connection).unwrap();
    let started = Instant::now();
    let transaction = connection.transaction().unwrap();
    {
        let mut statement = transaction
            .prepare(
                "INSERT INTO execs (id, trace_id, parent_exec_id, caller_session_id, via_agent, \
                 command, search_text, cwd, repo, pid, pid_start, started_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .unwrap();
        for index in 0..rows {
            let exec = row(index);
            let command = serde_json::to_string(&exec.argv).unwrap();
            statement
                .execute(rusqlite::params![
                    exec.id,
                    exec.trace_id,
                    exec.parent_exec_id,
                    exec.caller_session_id,
                    exec.via_agent,
                    command,
                    corral::store::exec::search_text(&exec.argv),
                    exec.cwd,
                    exec.repo,
                    exec.pid,
                    exec.pid_start.map(|start| start as i64),
                    exec.started_at,
                ])
                .unwrap();
        }
    }
    transaction.commit().unwrap();
    let raw = started.elapsed();
    drop(connection);

    // Through the actor.
    let actor_path = dir.path().join("actor.db");
    let (actor, stats) = actix::System::new().block_on(async move {
        let (ledger, _) = LedgerHandle::start(&actor_path, true).await.unwrap();
        let started = Instant::now();
        let mut next = 0;
        while next < rows {
            let end = (next + WINDOW).min(rows);
            let writes = (next..end).map(|index| ledger.write(RecordExec(row(index))));
            for result in futures::future::join_all(writes).await {
                result.unwrap();
            }
            next = end;
        }
        (started.elapsed(), ledger.stats().await.unwrap())
    });

    let rate = |elapsed: std::time::Duration| rows as f64 / elapsed.as_secs_f64();
    println!("rows: {rows}");
    println!(
        "raw rusqlite, one transaction: {:>10.0} rows/s ({:.2?})",
        rate(raw),
        raw
    );
    println!(
        "ledger actor, group commit:    {:>10.0} rows/s ({:.2?}; {} commits, {:.0} writes each)",
        rate(actor),
        actor,
        stats.commits,
        stats.writes as f64 / stats.commits.max(1) as f64
    );
    println!("actor / raw: {:.0} %", 100.0 * rate(actor) / rate(raw));
}
