//! The inspections answered from the store itself, when no daemon runs: `project.list`,
//! `project.show`, `session.list`, `session.show`, `history`, `settings.get`,
//! `settings.list`, and a session's stored events. They are the daemon's own read-only methods
//! (`daemon::methods::inspect`), run on one read-only connection, so the result is the one
//! the daemon gives (the commands print either the same way; `tests/home_safety.rs` compares
//! them).
//!
//! The connection is [`Context::reader`]'s: it exists only once the store passed the check
//! every command takes (`store::inspect`, then the ledger's `check_connection`), so a file
//! that is not ours is never opened here either. Nothing here writes, and nothing starts a
//! daemon.

use rusqlite::Connection;
use serde_json::{json, Value};

use super::{CliError, Context};
use crate::client::ClientError;
use crate::protocol::{code, RpcError};
use crate::store::work::{self, Event};

/// The store of a home no daemon serves, read directly.
pub struct LocalStore {
    connection: Connection,
    home: String,
}

type Answer = Result<Value, RpcError>;

impl LocalStore {
    /// A read-only connection to the context's store (refused, silently, when the store was
    /// refused: its line was printed then).
    pub fn open(context: &Context) -> Result<LocalStore, CliError> {
        Ok(LocalStore {
            connection: context.reader()?,
            home: context.home.to_string_lossy().into_owned(),
        })
    }

    /// Answers `method` as the daemon would. Only the read-only methods are known here.
    pub fn call(&self, method: &str, params: &Value) -> Result<Value, ClientError> {
        self.answer(method, params).map_err(ClientError::Rpc)
    }

    fn answer(&self, method: &str, params: &Value) -> Answer {
        crate::daemon::methods::inspect(&self.connection, method, params).unwrap_or_else(|| {
            Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("{method} needs a daemon, and none runs for {}", self.home),
            ))
        })
    }

    /// A session's stored events after `after`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        session_id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, CliError> {
        Ok(work::events_after(
            &self.connection,
            session_id,
            after,
            limit,
        )?)
    }

    /// What `status --json` says of a home no daemon serves.
    pub fn status(&self) -> Result<Value, CliError> {
        let sessions = work::sessions(&self.connection)?;
        Ok(json!({ "daemon": null, "home": self.home, "sessions": sessions.len() }))
    }
}
