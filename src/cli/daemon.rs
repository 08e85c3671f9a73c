//! `corral daemon [--detach]`: runs the supervisor as a service on the home's socket.

use super::{CliError, Context, Exit};
use crate::daemon::{self, DaemonOptions};

#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Run in the background (its own session; output to HOME/daemon.log; pid in
    /// HOME/daemon.pid) and return once it serves.
    #[arg(long)]
    pub detach: bool,
}

pub async fn execute(context: &Context, args: &DaemonArgs) -> Result<Exit, CliError> {
    if context.ledger.is_none() {
        return Err(CliError::silent(1));
    }
    if args.detach {
        let home = context.home.clone();
        // The daemon's exec is a child of this one.
        let starter = daemon::Starter {
            exec_id: Some(context.invocation.id.clone()),
            trace_id: Some(context.invocation.trace_id.clone()),
        };
        let pid = tokio::task::spawn_blocking(move || daemon::spawn_detached(&home, &starter))
            .await
            .map_err(|error| CliError::failure(error.to_string()))?
            .map_err(CliError::failure)?;
        println!(
            "corral daemon started (pid {pid}), socket {}",
            daemon::socket_path(&context.home).display()
        );
        return Ok(Exit::success());
    }
    init_logging();
    let served = daemon::run(DaemonOptions {
        home: context.home.clone(),
        exec_id: Some(context.invocation.id.clone()),
    })
    .await;
    // The daemon was asked to stop: its exec's end gets one attempt, not the store's wait
    // (`store.lock_timeout_ms`), which a store gone away (maybe why it was stopped) would
    // spend in full. An end not written is left for `monitor prune`.
    if let Some(ledger) = &context.ledger {
        ledger.stop_waiting();
    }
    served.map_err(CliError::failure)?;
    Ok(Exit::success())
}

/// The daemon logs to stderr (which `--detach` sends to HOME/daemon.log): refused peers,
/// restarts, shutdowns. `CORRAL_LOG` sets the level (error, warn, info, debug, trace).
fn init_logging() {
    let level = std::env::var(crate::env::LOG)
        .ok()
        .and_then(|level| level.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .try_init();
}
