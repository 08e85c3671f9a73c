//! `corral monitor prune`: closes as `lost` the execs that never completed and whose process
//! is gone (no such pid, or a pid recycled by another process with another start time).
//!
//! Only this host's execs are judged (and those recorded before hosts were, which were this
//! machine's): on a store several hosts share, another host's pid says nothing here.

use serde::Serialize;

use super::{format_time, print_json};
use crate::actors::ledger::CloseLostExecs;
use crate::cli::{CliError, Context, Exit};
use crate::process;
use crate::store::exec::{self, Exec};
use crate::store::now_ms;

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Say what would be closed, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON: {"dry_run":…,"pruned":N,"candidates":[…]}, the candidates as
    /// they are after pruning.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct PruneReport {
    dry_run: bool,
    /// How many execs were closed (0 on a dry run).
    pruned: usize,
    /// The execs found lost (those closed, or that would be), as they are after pruning.
    candidates: Vec<Exec>,
}

pub async fn execute(context: &Context, args: &PruneArgs) -> Result<Exit, CliError> {
    let connection = context.reader()?;
    let shared = connection.dialect() == crate::store::sql::Dialect::Postgres;
    let candidates: Vec<Exec> = exec::open_execs(&connection)?
        .into_iter()
        .filter(|open| open.exec.is_here(shared))
        .filter(|open| {
            !open
                .exec
                .pid
                .is_some_and(|pid| process::is_alive(pid as u32, open.pid_start))
        })
        .map(|open| open.exec)
        .collect();
    let pruned = match (&context.ledger, args.dry_run || candidates.is_empty()) {
        (Some(ledger), false) => {
            ledger
                .write(CloseLostExecs {
                    ids: candidates.iter().map(|exec| exec.id.clone()).collect(),
                    at: now_ms(),
                })
                .await?
        }
        _ => 0,
    };
    if args.json {
        // The execs as they are now: closed as `lost` unless this was a dry run (or the
        // exec completed meanwhile, on its own).
        let mut after = Vec::with_capacity(candidates.len());
        for exec in candidates {
            after.push(exec::get(&connection, &exec.id)?.unwrap_or(exec));
        }
        print_json(&PruneReport {
            dry_run: args.dry_run,
            pruned,
            candidates: after,
        });
        return Ok(Exit::success());
    }
    let action = if args.dry_run {
        "WOULD PRUNE"
    } else {
        "PRUNED"
    };
    for exec in &candidates {
        println!(
            "{action} {} pid {} started {} UTC: {}",
            exec.id,
            exec.pid
                .map(|pid| pid.to_string())
                .unwrap_or_else(|| "-".into()),
            format_time(exec.started_at),
            exec.command_line()
        );
    }
    if candidates.is_empty() {
        println!("nothing to prune: every open exec's process is alive");
    }
    Ok(Exit::success())
}
