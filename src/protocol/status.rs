//! The daemon itself: `initialize` (the version handshake), `status`, `shutdown`.

use serde::{Deserialize, Serialize};

use super::{method, named_params};
pub use crate::lease::holder::{LeaseState, LeaseStatus};
use crate::protocol::slots::SlotSummary;
use crate::store::processes;
pub use crate::store::processes::{AppServerState, ServerStatus};

method! {
    /// The version handshake; also tells the daemon which exec the client is.
    Initialize = "initialize": InitializeParams => InitializeResult,
    /// What the daemon is doing: its sessions, working count, slots, app-server children.
    Status = "status": StatusParams => StatusResult,
    /// The same as SIGTERM: the daemon drains, then stops (a second ask: at once).
    Shutdown = "shutdown": ShutdownParams => ShutdownResult,
}

/// `shutdown`'s params. A type of its own because stopping the daemon is a widening
/// (`daemon::origin::Widening`), which a method sharing `NoParams` is not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownParams {
    /// Hand the runs over instead of ending them (`corral daemon restart`, an upgrade): at
    /// once, with no grace, every run under a spooling shim is left running to its shim, and
    /// the next daemon adopts it. Runs that cannot be (an app-server turn) end as at a stop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover: bool,
}

/// `initialize`'s params (checked by the transport's handshake itself, with messages that
/// say which version the daemon speaks).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InitializeParams {
    pub protocol: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The client's exec id (the CLI's own exec row), used as the driver of what it sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitializeResult {
    pub protocol: u32,
    pub corral_version: String,
    pub daemon_pid: u32,
    pub home: String,
    /// `prompt.send` takes the caller's `exec` and records it (a compatible addition: an
    /// older daemon does not say it).
    #[serde(default)]
    pub records_execs: bool,
    /// The daemon is shutting down: its running prompts have their grace, and it takes no new
    /// one (a client that needs it waits for it to end; an older daemon does not say it).
    #[serde(default)]
    pub shutting_down: bool,
}

/// `status {waiters}`: how many slot waiters to list (with their blockers).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiters: Option<usize>,
}
named_params!(StatusParams { waiters: optional });

/// `status`'s answer. With no daemon the CLI fills the same keys from the store
/// (`cli::local`): `daemon` and `slots` null, `working` 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusResult {
    pub daemon: Option<DaemonInfo>,
    pub sessions: usize,
    pub working: usize,
    pub slots: Option<SlotSummary>,
    /// Each project's app-server child, as its actor reports it.
    pub app_servers: Vec<AppServerState>,
    /// Processes runs left behind that their projects keep, still alive.
    pub kept: Vec<KeptProcess>,
    /// Runs the daemon before left running that this one took over (live restore), while
    /// they run; empty with no daemon.
    #[serde(default)]
    pub taken_over: Vec<crate::store::runs::TakenOver>,
    /// The pauses in force (`pause`), oldest first; absent from an older daemon's answer.
    #[serde(default)]
    pub pauses: Vec<crate::store::pauses::Pause>,
    /// Each notification channel that is on (`notify.*`): sent, dropped, failing since when
    /// and why; empty with none on, and with no daemon.
    #[serde(default)]
    pub notify: Vec<NotifyChannel>,
    pub home: String,
    /// Where the HTTP API listens, or why it does not; null when off (and from the store:
    /// `cli::local`).
    #[serde(default)]
    pub http: Option<HttpServing>,
    /// The store: `{"kind": "sqlite"|"postgres", "at", "reachable", "refusing_writes"}` (`at`
    /// never shows a password; `reachable` false while writes wait for a PostgreSQL server that
    /// went away; `refusing_writes` why the store refuses writes while they wait for it, a
    /// read-only server or a full disk, else null).
    /// Null from an older daemon.
    #[serde(default)]
    pub store: Option<StoreStatus>,
    /// On a shared (PostgreSQL) store, every daemon that served it, live or not, with the
    /// projects each serves; empty on SQLite.
    #[serde(default)]
    pub daemons: Vec<DaemonStatus>,
    /// This daemon's lease on a shared store; null on SQLite and with no daemon.
    #[serde(default)]
    pub lease: Option<LeaseStatus>,
}

/// How a notification channel fares (`status`'s `notify`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyChannel {
    /// `command`, `webhook` or `desktop`.
    pub channel: String,
    pub sent: u64,
    /// Dropped because the channel's queue was full.
    pub dropped: u64,
    /// Failures since the last success (0: it works).
    pub failing: u64,
    /// The first failure of the current run of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The HTTP API, as `status` names it: `{listen, url}` or `{error}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HttpServing {
    /// It serves at `url` (`listen`: the address, its real port).
    Serving { listen: String, url: String },
    /// It was asked for and does not serve: why.
    Failed { error: String },
}

/// The store, as `status` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// `sqlite` or `postgres`.
    pub kind: String,
    /// Where it is (a PostgreSQL URL never shows its password).
    pub at: String,
    /// False while writes wait for a PostgreSQL server that went away.
    pub reachable: bool,
    /// Why the store refuses writes while they wait for it (a read-only server, a full
    /// disk), else null.
    pub refusing_writes: Option<String>,
    /// What the daemon's boot found when it checked the SQLite file (`PRAGMA quick_check`):
    /// `sound (…)`, or `unchecked (…)` for a store too large to check in time (a damaged one is
    /// refused: no daemon serves it). Null on PostgreSQL and with no daemon.
    #[serde(default)]
    pub checked: Option<String>,
}

/// One daemon of a shared store, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub node_id: String,
    pub host: String,
    pub home: String,
    pub pid: i64,
    pub epoch: i64,
    /// Its lease holds now.
    pub live: bool,
    /// What is left of its lease (negative: run out since); null: it stopped cleanly.
    pub lease_left_ms: Option<i64>,
    /// The names of the projects it serves (their paths are directories on its host).
    pub serves: Vec<String>,
    /// How many prompts it ran at its last renewal.
    pub running: i64,
    /// The daemon answering.
    pub this: bool,
}

/// Every daemon of the store, as `status` shows them (`this_node`: the answering one's).
pub fn daemons_status(
    conn: &crate::store::sql::Conn,
    this_node: Option<&str>,
) -> crate::store::sql::Result<Vec<DaemonStatus>> {
    let daemons = crate::store::daemons::daemons(conn)?;
    if daemons.is_empty() {
        return Ok(Vec::new());
    }
    let projects = crate::store::projects::projects(conn)?;
    Ok(daemons
        .into_iter()
        .map(|daemon| DaemonStatus {
            live: daemon.is_live(),
            lease_left_ms: daemon.lease_until.map(|until| until - daemon.now),
            serves: daemon
                .serves
                .iter()
                .filter_map(|id| projects.iter().find(|project| &project.id == id))
                .map(|project| project.name.clone())
                .collect(),
            running: daemon.status["running"].as_i64().unwrap_or(0),
            this: this_node == Some(daemon.node_id.as_str()),
            node_id: daemon.node_id,
            host: daemon.host,
            home: daemon.home,
            pid: daemon.pid,
            epoch: daemon.epoch,
        })
        .collect())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub pid: u32,
    pub version: String,
    pub home: String,
    pub shutting_down: bool,
}

/// A process a run left behind and its project kept (`processes::KeptProcess` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProcess {
    pub pid: i64,
    pub pid_start: i64,
    pub run_id: String,
    pub session_id: String,
    pub project_id: Option<String>,
    pub command: String,
    pub kept_at: i64,
    /// The node of the daemon whose host runs it (a shared store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

impl From<&processes::KeptProcess> for KeptProcess {
    fn from(kept: &processes::KeptProcess) -> Self {
        KeptProcess {
            pid: kept.pid,
            pid_start: kept.pid_start,
            run_id: kept.run_id.clone(),
            session_id: kept.session_id.clone(),
            project_id: kept.project_id.clone(),
            command: kept.command.clone(),
            kept_at: kept.kept_at,
            node_id: kept.node_id.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShutdownResult {
    pub stopping: bool,
}
