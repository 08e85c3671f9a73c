//! The daemon itself: `status`, `shutdown`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{store_error, Caller, Serve};
use crate::protocol::*;
use crate::store::sql::{self, Conn as Store};
use crate::store::{processes, sessions};

/// How many slot waiters `status` lists (with their blockers) unless its `waiters` param
/// says otherwise; `slots.waiting_count` gives them all.
pub const STATUS_WAITERS: usize = 20;

/// What projects with `keep_background` kept after their runs and still lives: `status`
/// lists them, from the daemon and from the store alike (`cli::local`). On a shared store,
/// those of `node`'s host, this one (whether a pid lives can only be seen on its host).
///
/// Each with the command it runs now: a kept process may `exec` after its run ended (a
/// shell that becomes the dev server), and what was recorded then is only its past. The
/// recorded one stands in while the process shows none.
pub fn kept_alive(c: &Store, node: Option<&str>) -> sql::Result<Vec<KeptProcess>> {
    let kept = processes::kept_processes(c, node)?;
    Ok(kept
        .iter()
        .filter_map(|kept| {
            let now = crate::process::command_now(kept.pid as u32, kept.pid_start as u64)?;
            let mut listed = KeptProcess::from(kept);
            if let Some(command) = now {
                listed.command = command;
            }
            Some(listed)
        })
        .collect())
}

impl Serve for Status {
    async fn serve(caller: &Caller, p: StatusParams) -> Result<StatusResult, RpcError> {
        let context = &caller.context;
        let corral = &context.corral;
        let waiters = p.waiters.unwrap_or(STATUS_WAITERS);
        // A PostgreSQL server that cannot be reached leaves what the store holds out: status
        // still answers, saying so (`store.reachable`, `lease.state`). A SQLite file always
        // can be read.
        let server = corral.store().kind == "postgres";
        let unread = AtomicBool::new(false);
        let sessions = or_unreachable(corral.read(sessions::session_count), server, &unread)?;
        // Both kept as counts: the cost of `status` does not grow with the backlog.
        let working = corral.working().await;
        let slots = corral.slot_summary(waiters).await;
        let home = context.home.to_string_lossy().into_owned();
        Ok(StatusResult {
            daemon: Some(DaemonInfo {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").into(),
                home: home.clone(),
                shutting_down: context.is_shutting_down(),
            }),
            sessions,
            working,
            slots,
            app_servers: corral.app_servers().await,
            kept: or_unreachable(
                corral.read(|c| kept_alive(c, corral.node_id())),
                server,
                &unread,
            )?,
            // Those this daemon took over at its boot, while they run (one read for them all).
            taken_over: corral
                .read(|c| {
                    let mut running = Vec::new();
                    for run in &corral.recovered().taken_over {
                        if crate::store::runs::is_running(c, &run.run_id)? {
                            running.push(run.clone());
                        }
                    }
                    Ok(running)
                })
                .unwrap_or_default(),
            pauses: or_unreachable(corral.pauses(), server, &unread)?,
            notify: corral.notify_status(),
            // The HTTP API's address (`{listen, url}`), why it does not serve, or null when off.
            http: crate::daemon::http::status().serving(),
            store: {
                let mut store = corral.store();
                if unread.load(Ordering::Relaxed) {
                    store.reachable = false;
                }
                Some(store)
            },
            daemons: {
                let this = corral.lease().map(|lease| lease.node_id.clone());
                let daemons =
                    corral.read(|c| crate::protocol::status::daemons_status(c, this.as_deref()));
                or_unreachable(daemons, server, &unread)?
            },
            lease: corral.lease().map(|lease| lease.describe()),
            // As in the store's answer with no daemon (`cli::local`): the same keys.
            home,
        })
    }
}

/// A read of `status`: its value, or, on a PostgreSQL store (`server`) whose read failed,
/// nothing: the answer then says the store cannot be reached instead of failing.
fn or_unreachable<T: Default>(
    result: Result<T, crate::CorralError>,
    server: bool,
    unread: &AtomicBool,
) -> Result<T, RpcError> {
    match result {
        Ok(value) => Ok(value),
        Err(error) if server => {
            tracing::debug!(%error, "status: the store was not read");
            unread.store(true, Ordering::Relaxed);
            Ok(T::default())
        }
        Err(error) => Err(store_error(error)),
    }
}

/// The same as SIGTERM: the daemon drains, then stops (a second ask: at once).
impl Serve for Shutdown {
    async fn serve(caller: &Caller, p: ShutdownParams) -> Result<ShutdownResult, RpcError> {
        match p.handover {
            true => caller.context.shutdown.request_handover(),
            false => caller.context.shutdown.request(),
        }
        Ok(ShutdownResult { stopping: true })
    }
}
