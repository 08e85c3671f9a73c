//! Runs: the engine children started for a prompt, one row per attempt (`runs`), and the
//! boot recovery of the runs a dead supervisor left marked running.
//!
//! Written by the ledger actor (`StartRun`, `RunSpawned`, `EndRun`, `Recover`); read by the
//! supervisor at boot, the overview and the daemon's methods.

use crate::store::sql::{self, args, Conn, Dialect, Row};
use serde::{Deserialize, Serialize};

use super::drivers::{engine_started, engine_started_sql};
use super::events::{append_events, NewEvent};
use super::{json_list, now_ms};
use crate::engine::{EngineKind, FailureClass};
use crate::events::{EventKind, Payload, PromptRequeued, RunExited};

/// Where a run is in its life (`runs.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Ended by a daemon's end (its processes gone at boot, or a shutdown): run again.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        [
            RunStatus::Running,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// One engine child started for a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub prompt_id: String,
    pub session_id: String,
    pub attempt: i64,
    pub engine: EngineKind,
    pub argv: Vec<String>,
    pub thread_id: Option<String>,
    pub exec_id: Option<String>,
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
    pub pgid: Option<i64>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub status: RunStatus,
    /// Why it failed, as the retry policy saw it.
    pub failure_class: Option<FailureClass>,
    pub retry_decision: Option<String>,
    pub error: Option<String>,
    /// The node of the daemon that ran it (shared store): where its pid means something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

const RUN_COLUMNS: &str = "id, prompt_id, session_id, attempt, engine, argv, thread_id, exec_id, \
                           pid, pid_start, pgid, started_at, ended_at, exit_code, signal, status, \
                           failure_class, retry_decision, error, node_id";

fn run_row(row: &Row<'_>) -> sql::Result<Run> {
    // The table's CHECK keeps the status one of ours; a class this binary does not know (a
    // newer one's) reads as `other`.
    let status: String = row.get(15)?;
    let class: Option<String> = row.get(16)?;
    Ok(Run {
        id: row.get(0)?,
        prompt_id: row.get(1)?,
        session_id: row.get(2)?,
        attempt: row.get(3)?,
        engine: row.get(4)?,
        argv: json_list(row.get(5)?),
        thread_id: row.get(6)?,
        exec_id: row.get(7)?,
        pid: row.get(8)?,
        pid_start: row.get(9)?,
        pgid: row.get(10)?,
        started_at: row.get(11)?,
        ended_at: row.get(12)?,
        exit_code: row.get(13)?,
        signal: row.get(14)?,
        status: RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
        failure_class: class
            .map(|class| FailureClass::parse(&class).unwrap_or(FailureClass::Other)),
        retry_decision: row.get(17)?,
        error: row.get(18)?,
        node_id: row.get(19)?,
    })
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// A run about to start (its row is written before the child is spawned).
#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    pub prompt_id: String,
    pub session_id: String,
    pub attempt: i64,
    pub engine: EngineKind,
    pub argv: Vec<String>,
    pub thread_id: Option<String>,
    pub exec_id: Option<String>,
    /// The child serving the run when it is known before the run starts (an app-server
    /// turn's long-lived child): its pid and start time, written with the row in one commit.
    /// An engine child spawned for the run is recorded by [`run_spawned`] instead.
    pub child: Option<(u32, Option<u64>)>,
    /// The node of the daemon that runs it (shared store): where its pid means something.
    pub node_id: Option<String>,
}

/// The exec a run's agent works under: the session's driver (or the exec hosting the
/// supervisor), and the trace that exec belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDriver {
    pub exec_id: String,
    /// `None` when the exec is not in the store (a library caller's own id).
    pub trace_id: Option<String>,
}

/// SQL: the columns a run's row is written with, in the order of `insert_run`'s values.
macro_rules! run_columns {
    () => {
        "(id, prompt_id, session_id, attempt, engine, argv, thread_id, exec_id, started_at, pid, \
          pid_start, pgid, node_id)"
    };
}

/// Writes a run's row. The exec recorded as its parent is the session's current driver, else
/// `run.exec_id`; the provider generation is bumped (a new engine child). Returns that exec.
pub(crate) fn insert_run(connection: &Conn, run: &NewRun) -> sql::Result<Option<RunDriver>> {
    // The driver's exec comes back with the row, and its trace (`NULL` for no exec, or one
    // not recorded).
    let (statement, exec_id) = match connection.dialect() {
        Dialect::Sqlite => (
            concat!(
                "INSERT INTO runs ",
                run_columns!(),
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?10, ?12) \
                 RETURNING exec_id, (SELECT trace_id FROM execs WHERE execs.id = ?8)"
            ),
            engine_started(connection, &run.session_id)?.or_else(|| run.exec_id.clone()),
        ),
        // One statement, one round trip under the write lock: the driver's provider
        // generation bumped (`drivers::engine_started`) and the row written with that driver.
        Dialect::Postgres => (
            concat!(
                "WITH driver AS (",
                engine_started_sql!("?3"),
                ") INSERT INTO runs ",
                run_columns!(),
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
                  coalesce((SELECT exec_id FROM driver), ?8), ?9, ?10, ?11, ?10, ?12) \
                 RETURNING exec_id, (SELECT trace_id FROM execs WHERE execs.id = runs.exec_id)"
            ),
            run.exec_id.clone(),
        ),
    };
    let (exec_id, trace_id): (Option<String>, Option<String>) = connection.row(
        statement,
        args![
            run.id,
            run.prompt_id,
            run.session_id,
            run.attempt,
            run.engine,
            serde_json::to_string(&run.argv).expect("strings serialize"),
            run.thread_id,
            exec_id,
            now_ms(),
            run.child.map(|(pid, _)| pid),
            run.child
                .and_then(|(_, start)| start)
                .map(|start| start as i64),
            run.node_id,
        ],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    connection.run_later(
        "UPDATE prompts SET attempts = attempts + 1 WHERE id = ?1",
        args![&run.prompt_id],
    )?;
    Ok(exec_id.map(|exec_id| RunDriver { exec_id, trace_id }))
}

/// The child of a run was spawned: its identity, to end it (or find it after a crash).
pub(crate) fn run_spawned(
    connection: &Conn,
    run_id: &str,
    pid: u32,
    pid_start: Option<u64>,
) -> sql::Result<()> {
    connection.run_later(
        "UPDATE runs SET pid = ?2, pid_start = ?3, pgid = ?2 WHERE id = ?1",
        args![run_id, pid, pid_start.map(|start| start as i64)],
    )
}

/// How far a run's stored events cover its engine's output: the bytes of its stdout and of
/// its stderr read into them. A daemon that takes the run over (live restore) reads its spool
/// from there on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredThrough {
    pub stdout: u64,
    pub stderr: u64,
}

impl StoredThrough {
    /// From the `stdout_stored` and `stderr_stored` columns of `row`, at `at`, `at + 1`.
    fn read(row: &Row<'_>, at: usize) -> sql::Result<StoredThrough> {
        let column = |at| row.get::<i64>(at).map(|bytes| bytes.max(0) as u64);
        Ok(StoredThrough {
            stdout: column(at)?,
            stderr: column(at + 1)?,
        })
    }
}

/// Records how far run `run_id`'s stored events cover its output; written in the transaction
/// that stores them.
pub(crate) fn set_stored_through(
    connection: &Conn,
    run_id: &str,
    through: &StoredThrough,
) -> sql::Result<()> {
    connection.run_later(
        "UPDATE runs SET stdout_stored = ?2, stderr_stored = ?3 WHERE id = ?1",
        args![run_id, through.stdout as i64, through.stderr as i64],
    )
}

/// How far run `run_id`'s stored events cover its output (nothing, for a run not found).
pub fn stored_through(connection: &Conn, run_id: &str) -> sql::Result<StoredThrough> {
    let found = connection.opt_row(
        "SELECT stdout_stored, stderr_stored FROM runs WHERE id = ?1",
        args![run_id],
        |row| StoredThrough::read(row, 0),
    )?;
    Ok(found.unwrap_or_default())
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd {
    pub run_id: String,
    /// When the child was gone (taken before its slot is released, so that the runs of a
    /// slot never seem to overlap); `None`: now.
    pub ended_at: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// Never `running`.
    pub status: RunStatus,
    pub failure_class: Option<FailureClass>,
    pub retry_decision: Option<String>,
    pub error: Option<String>,
}

pub(crate) fn end_run(connection: &Conn, end: &RunEnd) -> sql::Result<()> {
    connection.run_later(
        "UPDATE runs SET ended_at = ?2, exit_code = ?3, signal = ?4, status = ?5, \
         failure_class = ?6, retry_decision = ?7, error = ?8 WHERE id = ?1",
        args![
            end.run_id,
            end.ended_at.unwrap_or_else(now_ms),
            end.exit_code,
            end.signal,
            end.status.as_str(),
            end.failure_class.map(FailureClass::as_str),
            end.retry_decision,
            end.error,
        ],
    )
}

/// What the spill journal stored at boot already tells (`store::spill`): the runs whose
/// `run.exited` and the prompts whose `prompt.requeued` it held, which recovery then does not
/// tell a second time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Told {
    pub runs: std::collections::HashSet<String>,
    pub requeued: std::collections::HashSet<String>,
}

impl Told {
    /// Notes what `event`, stored from a spill, tells.
    pub fn note(&mut self, event: &NewEvent) {
        match event.kind {
            EventKind::RunExited => {
                if let Some(run) = &event.run_id {
                    self.runs.insert(run.clone());
                }
            }
            EventKind::PromptRequeued => {
                if let Some(prompt) = &event.prompt_id {
                    self.requeued.insert(prompt.clone());
                }
            }
            _ => {}
        }
    }
}

/// What a previous supervisor left behind, and what was done about it at boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// Runs that were marked running: (run id, pid, pid start), now closed as interrupted.
    pub interrupted_runs: Vec<(String, Option<i64>, Option<i64>)>,
    /// Sessions with a prompt to run now (their running prompt, requeued, or the next one).
    pub sessions: Vec<String>,
    /// Runs left running that were taken over rather than closed (live restore).
    #[serde(default)]
    pub taken_over: Vec<TakenOver>,
}

/// A run the daemon before left running, which this one took over (live restore): `status`
/// lists it while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakenOver {
    pub run_id: String,
    pub session_id: String,
    pub prompt_id: String,
    /// Its shim's pid, which leads its process group.
    pub shim_pid: Option<i64>,
}

/// A run a dead supervisor left marked running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftoverRun {
    pub id: String,
    pub session_id: String,
    pub prompt_id: String,
    /// The status of its prompt (`running` unless it was cancelled or ended meanwhile).
    pub prompt_status: String,
    /// Its engine's pid (which leads its group), once recorded; its start time.
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
    /// How far its stored events cover its output.
    pub stored: StoredThrough,
}

/// Boot reconciliation, once the leftover runs' processes are gone: closes each run in
/// `ended` (its id and when its last process was seen gone) as `interrupted`, tells it in its
/// session's events (`run.exited` ended by recovery, `prompt.requeued`), and lists the
/// sessions whose work must resume (a prompt left `running` stays running: the new worker
/// takes it again).
pub(crate) fn recover(
    connection: &Conn,
    node_id: &str,
    ended: &[(String, i64)],
    told: &Told,
) -> sql::Result<Recovered> {
    let leftovers = leftover_runs(connection, node_id)?;
    let mut telling = Vec::new();
    let mut interrupted_runs = Vec::new();
    for (run_id, ended_at) in ended {
        // A run closed since it was read is not closed twice.
        let Some(run) = leftovers.iter().find(|run| &run.id == run_id) else {
            continue;
        };
        connection.run(
            "UPDATE runs SET status = 'interrupted', ended_at = ?2, retry_decision = 'requeued' \
             WHERE id = ?1 AND status = 'running'",
            args![run_id, ended_at],
        )?;
        // What happened is told in the sessions' events, as after a SIGTERM: the run ended
        // by recovery, its prompt queued again (it runs again once the worker takes it);
        // unless the spill journal stored at this boot told it already (`store::spill`).
        if !told.runs.contains(&run.id) {
            let exited = RunExited {
                ended_by: Some("recovery".into()),
                reason: Some(
                    "the daemon that ran it died; a new one ended its processes and closed the run"
                        .into(),
                ),
                ..RunExited::default()
            };
            telling.push(NewEvent::new(
                run.session_id.clone(),
                Some(run.prompt_id.clone()),
                Some(run.id.clone()),
                Payload::RunExited(exited),
            ));
        }
        if run.prompt_status == "running" && !told.requeued.contains(&run.prompt_id) {
            let requeued = PromptRequeued {
                reason: "recovery after the daemon died".into(),
            };
            telling.push(NewEvent::new(
                run.session_id.clone(),
                Some(run.prompt_id.clone()),
                None,
                Payload::PromptRequeued(requeued),
            ));
        }
        interrupted_runs.push((run.id.clone(), run.pid, run.pid_start));
    }
    append_events(connection, &telling)?;
    let sessions = connection.rows("SELECT DISTINCT session_id FROM prompts WHERE status IN ('running', 'queued') ORDER BY session_id", args![], |row| row.get(0))?;
    Ok(Recovered {
        interrupted_runs,
        sessions,
        taken_over: Vec::new(),
    })
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The runs marked running of node `node_id` ("" on SQLite, whose runs name none), and those
/// naming no node (written before a store was shared, by its one daemon): at boot, the ones
/// its dead supervisor left (only this supervisor's ledger writes about them, and no worker
/// has started yet). Another daemon's runs are never its: their pids are another host's, or
/// another home's.
pub fn leftover_runs(connection: &Conn, node_id: &str) -> sql::Result<Vec<LeftoverRun>> {
    connection.rows("SELECT runs.id, runs.session_id, runs.prompt_id, prompts.status, runs.pid, runs.pid_start, \
         runs.stdout_stored, runs.stderr_stored FROM runs JOIN prompts ON prompts.id = runs.prompt_id WHERE runs.status = 'running' \
         AND coalesce(runs.node_id, ?1) = ?1 ORDER BY runs.started_at", args![node_id], |row| {
        Ok(LeftoverRun {
            id: row.get(0)?,
            session_id: row.get(1)?,
            prompt_id: row.get(2)?,
            prompt_status: row.get(3)?,
            pid: row.get(4)?,
            pid_start: row.get(5)?,
            stored: StoredThrough::read(row, 6)?,
        })
    })
}

#[cfg(any(test, feature = "testkit"))]
pub fn runs_of(connection: &Conn, prompt_id: &str) -> sql::Result<Vec<Run>> {
    connection.rows(
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE prompt_id = ?1 ORDER BY attempt, started_at"
        ),
        args![prompt_id],
        run_row,
    )
}

pub fn runs_of_session(connection: &Conn, session_id: &str) -> sql::Result<Vec<Run>> {
    connection.rows(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 ORDER BY started_at, id"),
        args![session_id],
        run_row,
    )
}

/// The run of `prompt_id` still marked running: at its worker's start, one the daemon before
/// left running to its shim, which boot found alive and did not close (live restore).
pub fn left_running(connection: &Conn, prompt_id: &str) -> sql::Result<Option<Run>> {
    use sql::OptionalExt;
    connection
        .row(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE prompt_id = ?1 AND status = 'running' \
                 ORDER BY started_at DESC LIMIT 1"
            ),
            args![prompt_id],
            run_row,
        )
        .optional()
}

/// Whether run `run_id` is still marked running.
pub fn is_running(connection: &Conn, run_id: &str) -> sql::Result<bool> {
    let status: Option<String> = connection.opt_row(
        "SELECT status FROM runs WHERE id = ?1",
        args![run_id],
        |row| row.get(0),
    )?;
    Ok(status.as_deref() == Some("running"))
}

/// Every run marked running.
pub fn running_runs(connection: &Conn) -> sql::Result<Vec<Run>> {
    connection.rows(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running' ORDER BY started_at, id"),
        args![],
        run_row,
    )
}
