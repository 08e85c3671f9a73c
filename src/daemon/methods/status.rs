//! The daemon itself: `status`, `shutdown`.

use super::{store_error, Caller, Serve};
use crate::protocol::*;
use crate::store::sql::{self, Conn as Store};
use crate::store::{processes, sessions};

/// How many slot waiters `status` lists (with their blockers) unless its `waiters` param
/// says otherwise; `slots.waiting_count` gives them all.
pub const STATUS_WAITERS: usize = 20;

/// What projects with `keep_background` kept after their runs and still lives: `status`
/// lists them, from the daemon and from the store alike (`cli::local`).
pub fn kept_alive(c: &Store) -> sql::Result<Vec<KeptProcess>> {
    let kept = processes::kept_processes(c)?;
    Ok(kept
        .iter()
        .filter(|kept| crate::process::is_alive(kept.pid as u32, Some(kept.pid_start as u64)))
        .map(KeptProcess::from)
        .collect())
}

impl Serve for Status {
    async fn serve(caller: &Caller, p: StatusParams) -> Result<StatusResult, RpcError> {
        let context = &caller.context;
        let corral = &context.corral;
        let waiters = p.waiters.unwrap_or(STATUS_WAITERS);
        let sessions = corral.read(sessions::session_count).map_err(store_error)?;
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
            kept: corral.read(kept_alive).map_err(store_error)?,
            // The HTTP API's address (`{listen, url}`), why it does not serve, or null when off.
            http: crate::http::status().to_json(),
            store: corral.store(),
            daemons: {
                let this = corral.lease().map(|lease| lease.node_id.clone());
                corral
                    .read(|c| crate::protocol::status::daemons_status(c, this.as_deref()))
                    .map_err(store_error)?
            },
            lease: corral
                .lease()
                .map(|lease| lease.describe())
                .unwrap_or_default(),
            // As in the store's answer with no daemon (`cli::local`): the same keys.
            home,
        })
    }
}

/// The same as SIGTERM: the daemon drains, then stops (a second ask: at once).
impl Serve for Shutdown {
    async fn serve(caller: &Caller, _: ShutdownParams) -> Result<ShutdownResult, RpcError> {
        caller.context.shutdown.request();
        Ok(ShutdownResult { stopping: true })
    }
}
