//! Processes the daemon keeps track of across its restarts: the last known state of each
//! project's app-server child (`app_servers`) and the processes runs left behind that their
//! project keeps (`kept_processes`, `keep_background`).
//!
//! Written by the ledger actor (`SaveAppServer`, `KeepProcesses`, `Recover`); read by the
//! supervisor at boot and by `status`.

use crate::store::sql::{self, args, Conn};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::now_ms;

/// A project's app-server child as its actor last told it: what `status` shows and the store
/// keeps (`app_servers.state`), so that the next daemon carries its generation, recent events
/// and restarts on, and its boot ends a child its dead predecessor left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppServerState {
    pub project_id: String,
    pub pid: Option<u32>,
    pub pid_start: Option<u64>,
    /// How many children the project has had.
    pub generation: u64,
    pub status: ServerStatus,
    /// How the last child ended, as its transport closed (exit code, signal, what closed it).
    pub last_exit: Option<Value>,
    /// Its last events, oldest first: `{at, kind, detail}`.
    pub recent: Vec<Value>,
    /// When the restarts of the last minute happened (ms since the epoch): kept in the
    /// store, so that a daemon restart neither forgets them nor resets the limit.
    #[serde(default)]
    pub restarts: Vec<i64>,
    /// On a shared store, the node whose child it is (only that node's next boot ends it; the
    /// other hosts' daemons list it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

impl AppServerState {
    /// Whether its child is known to be gone.
    pub fn is_stopped(&self) -> bool {
        self.status == ServerStatus::Stopped
    }
}

/// An app-server child's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerStatus {
    Stopped,
    Starting,
    Running,
    /// Restarts stopped (intensity limit); the reason says why.
    Failed {
        reason: String,
    },
}

/// A process a run left behind and its project kept; `status` lists the ones still alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProcess {
    pub pid: i64,
    /// Its start time: with the pid, it names the process for good.
    pub pid_start: i64,
    pub run_id: String,
    pub session_id: String,
    pub project_id: Option<String>,
    pub command: String,
    pub kept_at: i64,
    /// The daemon's node whose host runs it (a shared store), `None` on SQLite: a pid means
    /// something only on its own host, so only that node's daemon looks whether it lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

pub(crate) fn save_app_server(
    connection: &Conn,
    project_id: &str,
    state: &AppServerState,
) -> sql::Result<()> {
    let state = serde_json::to_string(state).expect("an app-server state is JSON");
    connection.run(
        "INSERT INTO app_servers (project_id, state, updated_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (project_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        args![project_id, state, now_ms()],
    )?;
    Ok(())
}

/// Records processes kept after a run, and forgets the ones seen gone (pid, start): both of
/// the writer's host (each kept process carries its node).
pub(crate) fn keep_processes(
    connection: &Conn,
    kept: &[KeptProcess],
    forget: &[(i64, i64)],
) -> sql::Result<()> {
    for (pid, start) in forget {
        connection.run(
            "DELETE FROM kept_processes WHERE pid = ?1 AND pid_start = ?2",
            args![pid, start],
        )?;
    }
    for process in kept {
        // An upsert rather than SQLite's `INSERT OR REPLACE` (PostgreSQL has no such form): the
        // primary key is the table's only unique constraint, so the two do the same.
        connection.run(
            "INSERT INTO kept_processes \
             (pid, pid_start, run_id, session_id, project_id, command, kept_at, node_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
             ON CONFLICT (pid, pid_start) DO UPDATE SET run_id = excluded.run_id, \
             session_id = excluded.session_id, project_id = excluded.project_id, \
             command = excluded.command, kept_at = excluded.kept_at, \
             node_id = excluded.node_id",
            args![
                process.pid,
                process.pid_start,
                process.run_id,
                process.session_id,
                process.project_id,
                process.command,
                process.kept_at,
                process.node_id,
            ],
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The last known state of every app-server child, by project.
pub fn app_servers(connection: &Conn) -> sql::Result<Vec<AppServerState>> {
    let states = connection.rows(
        "SELECT project_id, state FROM app_servers ORDER BY project_id",
        args![],
        |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
    )?;
    Ok(states
        .into_iter()
        .filter_map(|(project, text)| match serde_json::from_str(&text) {
            Ok(state) => Some(state),
            Err(error) => {
                tracing::warn!(%error, project, "an app-server state that does not read is left out");
                None
            }
        })
        .collect())
}

/// The kept processes recorded on `node`'s host (`None`: every one, as on SQLite's one
/// host), alive or not (the caller checks, on that host), oldest first.
pub fn kept_processes(connection: &Conn, node: Option<&str>) -> sql::Result<Vec<KeptProcess>> {
    let rows = connection
        .rows(
            "SELECT pid, pid_start, run_id, session_id, project_id, command, kept_at, node_id \
         FROM kept_processes WHERE CAST(?1 AS TEXT) IS NULL OR node_id = ?1 \
         ORDER BY kept_at, pid",
            args![node],
            |row| {
                Ok(KeptProcess {
                    pid: row.get(0)?,
                    pid_start: row.get(1)?,
                    run_id: row.get(2)?,
                    session_id: row.get(3)?,
                    project_id: row.get(4)?,
                    command: row.get(5)?,
                    kept_at: row.get(6)?,
                    node_id: row.get(7)?,
                })
            },
        )?
        .into_iter()
        .map(Ok);
    rows.collect()
}
