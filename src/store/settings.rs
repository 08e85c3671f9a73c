//! Settings persisted in the store (`settings` table, migration 2).
//!
//! Reading is open to any read-only connection; writing goes through the ledger actor.

use rusqlite::{Connection, OptionalExtension};

/// Time between SIGTERM and SIGKILL when corral ends a process group.
pub const CANCEL_GRACE_MS: &str = "cancel.grace_ms";

/// The default of [`CANCEL_GRACE_MS`]: long enough for an engine to flush its rollout.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 5_000;

/// The stored value of `name`, if any. A store too old to have settings has none.
pub fn get(connection: &Connection, name: &str) -> Option<String> {
    connection
        .query_row(
            "SELECT value FROM settings WHERE name = ?1",
            [name],
            |row| row.get(0),
        )
        .optional()
        .ok()
        .flatten()
}

/// The grace period for ending a process group, from the store or the default.
pub fn cancel_grace(connection: Option<&Connection>) -> std::time::Duration {
    let ms = connection
        .and_then(|connection| get(connection, CANCEL_GRACE_MS))
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_CANCEL_GRACE_MS);
    std::time::Duration::from_millis(ms)
}
