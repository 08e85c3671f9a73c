//! The daemon itself: `status`, `shutdown`.

use rusqlite::Connection as Store;
use serde_json::{json, Value};

use super::{optional, store_error, Caller};
use crate::protocol::RpcError;
use crate::store::work;

/// How many slot waiters `status` lists (with their blockers) unless its `waiters` param
/// says otherwise; `slots.waiting_count` gives them all.
pub const STATUS_WAITERS: usize = 20;

/// What projects with `keep_background` kept after their runs and still lives: `status`
/// lists them, from the daemon and from the store alike (`cli::local`).
pub fn kept_alive(c: &Store) -> rusqlite::Result<Vec<work::KeptProcess>> {
    let kept = work::kept_processes(c)?;
    Ok(kept
        .into_iter()
        .filter(|kept| crate::process::is_alive(kept.pid as u32, Some(kept.pid_start as u64)))
        .collect())
}

pub(super) async fn status(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let context = &caller.context;
    let corral = &context.corral;
    let waiters = optional::<usize>(params_value, "waiters")?.unwrap_or(STATUS_WAITERS);
    let sessions = corral.read(work::session_count).map_err(store_error)?;
    // Both kept as counts: the cost of `status` does not grow with the backlog.
    let working = corral.working().await;
    let slots = corral.slot_summary(waiters).await;
    Ok(json!({
        "daemon": {
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "home": context.home.to_string_lossy(),
            "shutting_down": context.is_shutting_down(),
        },
        "sessions": sessions,
        "working": working,
        "slots": slots,
        "app_servers": corral.app_servers().await,
        "kept": corral.read(kept_alive).map_err(store_error)?,
        // As in the store's answer with no daemon (`cli::local`): the same keys.
        "home": context.home.to_string_lossy(),
    }))
}

/// The same as SIGTERM: the daemon drains, then stops (a second ask: at once).
pub(super) fn shutdown(caller: &Caller) -> Result<Value, RpcError> {
    caller.context.shutdown.request();
    Ok(json!({ "stopping": true }))
}
