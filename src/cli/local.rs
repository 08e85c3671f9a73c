//! The inspections answered from the store itself, when no daemon runs: `project.list`,
//! `project.show`, `session.list`, `session.show`, `history`, `settings.get`,
//! `settings.list`, and a session's stored events. They are the daemon's own read-only methods
//! (`daemon::methods::inspect`), run on one read-only connection, so the result is the one
//! the daemon gives (the commands print either the same way; `tests/it/home_safety.rs` compares
//! them). `status --json` gets the daemon's `status` shape, filled with what the store can
//! say (`tests/it/status_local.rs` compares the two).
//!
//! The connection is [`Context::reader`]'s: it exists only once the store passed the check
//! every command takes (`store::inspect`, then the ledger's `check_connection`), so a file
//! that is not ours is never opened here either. Nothing here writes, and nothing starts a
//! daemon.

use serde_json::Value;

use super::{CliError, Context};
use crate::client::ClientError;
use crate::protocol::status::{StatusResult, StoreStatus};
use crate::protocol::{code, RpcError};
use crate::store::events::Event;
use crate::store::processes::{AppServerState, ServerStatus};
use crate::store::sql::Conn;
use crate::store::{events, processes, sessions};

/// The store of a home no daemon serves, read directly.
pub struct LocalStore {
    connection: Conn,
    home: String,
    /// The store, as `status` names it.
    store: StoreStatus,
    /// On a shared store, the home's node if a daemon of it ever ran: whose kept processes
    /// `status` can look at here (`None` on SQLite: every one is this host's).
    node: Option<Option<String>>,
}

type Answer = Result<Value, RpcError>;

impl LocalStore {
    /// A read-only connection to the context's store (refused, silently, when the store was
    /// refused: its line was printed then).
    pub fn open(context: &Context) -> Result<LocalStore, CliError> {
        Ok(LocalStore {
            connection: context.reader()?,
            home: context.home.to_string_lossy().into_owned(),
            store: StoreStatus {
                kind: if context.location.is_postgres() {
                    "postgres"
                } else {
                    "sqlite"
                }
                .into(),
                at: context.store_path.display().to_string(),
                // It was just opened.
                reachable: true,
                refusing_writes: None,
                checked: None,
            },
            node: context
                .location
                .is_postgres()
                .then(|| crate::lease::holder::known_node_id(&context.home)),
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
        Ok(events::events_after(
            &self.connection,
            session_id,
            after,
            limit,
        )?)
    }

    /// What `status --json` says of a home no daemon serves, in the daemon's shape
    /// (`daemon::methods` `status`): the sessions, the app-server children and the kept
    /// background processes as the store knows them; nothing works (`working` 0) and there
    /// is no slot table (`slots` null) without a daemon.
    pub fn status(&self) -> Result<StatusResult, CliError> {
        let c = &self.connection;
        let kept = match &self.node {
            None => crate::daemon::methods::kept_alive(c, None)?,
            Some(Some(node)) => crate::daemon::methods::kept_alive(c, Some(node))?,
            // No daemon of this home ever ran: it kept nothing.
            Some(None) => Vec::new(),
        };
        let app_servers = processes::app_servers(c)?
            .into_iter()
            .map(app_server_now)
            .collect();
        Ok(StatusResult {
            daemon: None,
            sessions: sessions::session_count(c)?,
            working: 0,
            slots: None,
            app_servers,
            kept,
            // Only a daemon follows runs.
            taken_over: Vec::new(),
            pauses: crate::store::pauses::pauses(c)?,
            // Only a daemon notifies.
            notify: Vec::new(),
            // The HTTP API is the daemon's.
            http: None,
            store: Some(self.store.clone()),
            daemons: crate::protocol::status::daemons_status(c, None)?,
            lease: None,
            home: self.home.clone(),
        })
    }
}

/// An app-server child's stored state, as it is now: the state a daemon last stored, except
/// that a child whose process is gone (a daemon killed with -9 stored it running; the boot
/// of the next daemon will say how it ended) is shown stopped, without a pid. One that still
/// lives (its daemon died, it did not yet) is shown as stored.
fn app_server_now(mut state: AppServerState) -> AppServerState {
    let Some(pid) = state.pid else {
        return state;
    };
    if crate::process::is_alive(pid, state.pid_start) {
        return state;
    }
    state.pid = None;
    state.pid_start = None;
    state.status = ServerStatus::Stopped;
    state
}
