//! The exec ledger: one row per `corral` invocation (or per command wrapped by `corral run`).
//!
//! Writes ([`NewExec`], [`ExecCompletion`], [`close_lost`]) are applied by the ledger actor
//! inside its transaction; reads ([`list`], [`find_by_prefix`], [`open_execs`]) run on a
//! read-only connection of the caller's own.
//!
//! Each row names the host its process runs on ([`crate::host::name`]): on a shared store
//! several hosts record here, and a pid is only judged on its own host ([`Exec::is_here`]).
//! The column came with schema step [`HOST_SINCE`]; early commands record into a store of any
//! compatible version, so `record_whole` and `prepare_writes` read the store's version and
//! leave the host out of an older store's row.

use crate::store::sql::{self, args, Conn, Dialect, OptionalExt, Row, Value};
use serde::{Deserialize, Serialize};

/// How an exec ended. `None` in an [`Exec`] means unknown: still running, or never completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Succeeded,
    Failed,
    /// Ended by SIGINT/SIGTERM sent to corral itself.
    Interrupted,
    /// Never completed and its process is gone (closed by `corral monitor prune`).
    Lost,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
            Outcome::Lost => "lost",
        }
    }

    /// The outcome of a process that exited on its own with `code`.
    pub fn of_exit_code(code: i32) -> Self {
        if code == 0 {
            Outcome::Succeeded
        } else {
            Outcome::Failed
        }
    }
}

/// One exec as the ledger shows it (`monitor list` entries, `monitor show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exec {
    pub id: String,
    pub trace_id: String,
    pub parent_exec_id: Option<String>,
    pub caller_session_id: Option<String>,
    pub via_agent: Option<bool>,
    /// The argv: a JSON array of strings when corral wrote it; text that is not JSON (a row
    /// written by hand) is shown as a string.
    pub command: Option<serde_json::Value>,
    pub cwd: Option<String>,
    pub repo: Option<String>,
    /// The host the process runs on, where its pid means something; `None` for a row written
    /// before hosts were recorded ([`HOST_SINCE`]), which was this machine's: a store had one
    /// host then.
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub exit_code: Option<i32>,
    /// `succeeded`, `failed`, `interrupted`, `lost`; `None` = unknown.
    pub outcome: Option<String>,
    pub signal: Option<String>,
}

impl Exec {
    /// Whether this host can judge the exec's pid: it ran here, or before hosts were recorded.
    /// `shared`: the store is one several hosts share (PostgreSQL); a SQLite file is one
    /// host's, whatever name it had when the exec ran (a container's changes at each start).
    pub fn is_here(&self, shared: bool) -> bool {
        !shared
            || self
                .host
                .as_deref()
                .is_none_or(|host| host == crate::host::name())
    }

    /// The argv for display, on one line: the JSON array joined by spaces, or the raw text,
    /// with control characters escaped (`\n`, `\t`, `\r`, `\u{1b}`), so that an argument
    /// with a newline in it never breaks a table's row.
    pub fn command_line(&self) -> String {
        let joined = match &self.command {
            None => String::new(),
            Some(serde_json::Value::String(raw)) => raw.clone(),
            Some(serde_json::Value::Array(argv)) => argv
                .iter()
                .map(|arg| match arg {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Some(other) => other.to_string(),
        };
        escape_controls(&joined)
    }
}

/// `text` with its control characters written as Rust escapes; everything else as it is.
pub(crate) fn escape_controls(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A page of `monitor list`: `next` continues it with `--after`, `null` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecPage {
    pub entries: Vec<Exec>,
    pub next: Option<String>,
}

const COLUMNS: &str = "id, trace_id, parent_exec_id, caller_session_id, via_agent, command, cwd, \
                       repo, host, pid, started_at, completed_at, exit_code, outcome, signal";

fn from_row(row: &Row<'_>) -> sql::Result<Exec> {
    Ok(Exec {
        id: row.get(0)?,
        trace_id: row.get(1)?,
        parent_exec_id: row.get(2)?,
        caller_session_id: row.get(3)?,
        via_agent: row.get::<Option<i64>>(4)?.map(|flag| flag != 0),
        command: row
            .get::<Option<String>>(5)?
            .map(|raw| serde_json::from_str(&raw).unwrap_or(serde_json::Value::String(raw))),
        cwd: row.get(6)?,
        repo: row.get(7)?,
        host: row.get(8)?,
        pid: row.get(9)?,
        started_at: row.get(10)?,
        completed_at: row.get(11)?,
        exit_code: row.get(12)?,
        outcome: row.get(13)?,
        signal: row.get(14)?,
    })
}

/// The row written when an exec starts. When `completion` is set the exec is recorded whole
/// in one insert (early commands know their exit before they record).
#[derive(Debug, Clone)]
pub struct NewExec {
    pub id: String,
    pub trace_id: String,
    pub parent_exec_id: Option<String>,
    pub caller_session_id: Option<String>,
    pub via_agent: bool,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub repo: Option<String>,
    pub pid: u32,
    pub pid_start: Option<u64>,
    pub started_at: i64,
    pub completion: Option<ExecCompletion>,
}

/// How an exec ended, written when it ends.
#[derive(Debug, Clone)]
pub struct ExecCompletion {
    pub completed_at: i64,
    pub exit_code: i32,
    pub outcome: Outcome,
    /// The name of a signal that really ended the process (`SIGKILL`), never a guess.
    pub signal: Option<String>,
}

/// The search text of an argv: space-joined and lower-cased the way SQLite's `lower()` does
/// (ASCII only), so that `instr(search_text, lower(?))` agrees with the insert trigger.
pub fn search_text(argv: &[String]) -> String {
    argv.join(" ").to_ascii_lowercase()
}

/// The schema step that added `execs.host`.
pub const HOST_SINCE: u32 = 10;

/// The insert of a store at [`HOST_SINCE`] or later.
const INSERT: &str = "INSERT INTO execs (id, trace_id, parent_exec_id, caller_session_id, \
     via_agent, command, search_text, cwd, repo, pid, pid_start, started_at, completed_at, \
     exit_code, outcome, signal, host) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";

/// The insert of an older store (an early command's): step 1's columns, which every version
/// has.
const INSERT_WITHOUT_HOST: &str = "INSERT INTO execs (id, trace_id, parent_exec_id, \
     caller_session_id, via_agent, command, search_text, cwd, repo, pid, pid_start, started_at, \
     completed_at, exit_code, outcome, signal) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";

/// The store's schema version, read on the writer's connection (PostgreSQL keeps it in
/// `corral_meta`, as text).
const VERSION_SQLITE: &str = "SELECT user_version FROM pragma_user_version";
const VERSION_POSTGRES: &str =
    "SELECT CAST(value AS BIGINT) FROM corral_meta WHERE key = 'schema_version'";

const COMPLETE: &str = "UPDATE execs SET completed_at = ?2, exit_code = ?3, outcome = ?4, \
     signal = ?5 WHERE id = ?1 AND completed_at IS NULL";

/// Compiles the exec writes into the connection's statement cache (the insert's plan covers
/// five indexes and a trigger): done when the ledger opens the store, which a short command
/// overlaps with its other work, so that its first write does not compile them. The insert
/// is the one the store's version takes (an early command's store may predate the host).
pub(crate) fn prepare_writes(connection: &Conn) -> sql::Result<()> {
    connection.prepare(if takes_host(connection)? {
        INSERT
    } else {
        INSERT_WITHOUT_HOST
    })?;
    connection.prepare(COMPLETE)?;
    Ok(())
}

/// Whether the store's execs have the host column: its schema is at [`HOST_SINCE`] or later.
/// One read of a value SQLite keeps in the file's header (PostgreSQL, in a one-row lookup).
fn takes_host(connection: &Conn) -> sql::Result<bool> {
    let sql = match connection.dialect() {
        Dialect::Sqlite => VERSION_SQLITE,
        Dialect::Postgres => VERSION_POSTGRES,
    };
    let version = connection.opt_row(sql, args![], |row| row.get::<Option<i64>>(0))?;
    Ok(version.flatten().unwrap_or(0) >= i64::from(HOST_SINCE))
}

/// Records an exec's start (or the whole exec). Only on a store at the current schema: every
/// command but an early one migrates its store before its first write, and early ones record
/// through [`record_whole`].
pub(crate) fn insert(transaction: &Conn, exec: &NewExec) -> sql::Result<()> {
    insert_as(transaction, exec, true)
}

/// The insert, with this host in the row or (`has_host` false: a store older than
/// [`HOST_SINCE`]) without the column.
fn insert_as(transaction: &Conn, exec: &NewExec, has_host: bool) -> sql::Result<()> {
    let command = serde_json::to_string(&exec.argv).expect("strings serialize");
    let completion = exec.completion.as_ref();
    let values = args![
        exec.id,
        exec.trace_id,
        exec.parent_exec_id,
        exec.caller_session_id,
        exec.via_agent,
        command,
        search_text(&exec.argv),
        exec.cwd,
        exec.repo,
        exec.pid,
        exec.pid_start.map(|start| start as i64),
        exec.started_at,
        completion.map(|c| c.completed_at),
        completion.map(|c| c.exit_code),
        completion.map(|c| c.outcome.as_str()),
        completion.and_then(|c| c.signal.clone()),
        crate::host::name(),
    ];
    if has_host {
        transaction.run_later(INSERT, values)
    } else {
        // The same values but the last, the host.
        transaction.run_later(INSERT_WITHOUT_HOST, &values[..values.len() - 1])
    }
}

/// Records a whole exec, start and end, whether or not its start is stored already: a
/// `send` whose daemon stored its start and died before answering records itself, and must
/// complete that row, not fail on a second one of the same id.
///
/// Early commands record this way, into a store of any compatible version: the row names
/// its host only when the store has the column.
pub(crate) fn record_whole(transaction: &Conn, exec: &NewExec) -> sql::Result<()> {
    let stored = transaction
        .opt_row("SELECT 1 FROM execs WHERE id = ?1", args![exec.id], |_| {
            Ok(())
        })?
        .is_some();
    match (&exec.completion, stored) {
        (Some(completion), true) => complete(transaction, &exec.id, completion).map(|_| ()),
        (None, true) => Ok(()),
        (_, false) => insert_as(transaction, exec, takes_host(transaction)?),
    }
}

/// Completes an exec; a row already completed (by prune, say) keeps its first completion.
pub(crate) fn complete(
    transaction: &Conn,
    id: &str,
    completion: &ExecCompletion,
) -> sql::Result<bool> {
    let changed = transaction.run(
        COMPLETE,
        args![
            id,
            completion.completed_at,
            completion.exit_code,
            completion.outcome.as_str(),
            completion.signal,
        ],
    )?;
    Ok(changed == 1)
}

/// Closes as `lost` the listed execs that are still open. Returns how many were closed.
pub(crate) fn close_lost(transaction: &Conn, ids: &[String], at: i64) -> sql::Result<usize> {
    let mut closed = 0;
    for id in ids {
        closed += transaction.run(
            "UPDATE execs SET completed_at = ?2, outcome = 'lost' \
             WHERE id = ?1 AND completed_at IS NULL",
            args![id, at],
        )? as usize;
    }
    Ok(closed)
}

/// Which outcome `monitor list --outcome` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeFilter {
    Is(Outcome),
    /// `outcome IS NULL`.
    Unknown,
}

/// The filters of `monitor list`. Every `Some` narrows the result.
#[derive(Debug, Clone, Default)]
pub struct ExecFilter {
    pub parent: Option<String>,
    pub caller: Option<String>,
    pub outcome: Option<OutcomeFilter>,
    /// Case-insensitive substring of the space-joined argv, `%` and `_` literal.
    pub search: Option<String>,
    /// `Some(None)`: only execs outside any repository.
    pub repo: Option<Option<String>>,
    /// Only execs whose caller session has this task key.
    pub task: Option<String>,
    /// Only execs whose caller session belongs to one of these wave ids.
    pub wave_ids: Option<Vec<String>>,
}

/// A position in the newest-first order: the last entry of the previous page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub started_at: i64,
    pub id: String,
}

impl Cursor {
    /// The opaque text form handed out as `next`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.started_at, self.id)
    }

    /// Reads a cursor given to `--after`, bare or as the JSON string `next` was printed as.
    pub fn decode(text: &str) -> Option<Cursor> {
        let text = text.trim();
        let owned;
        let text = if text.starts_with('"') {
            owned = serde_json::from_str::<String>(text).ok()?;
            owned.as_str()
        } else {
            text
        };
        let (started_at, id) = text.split_once('.')?;
        let started_at = started_at.parse().ok()?;
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return None;
        }
        Some(Cursor {
            started_at,
            id: id.to_string(),
        })
    }
}

/// One page of execs, newest first, by keyset pagination on `(started_at, id)`.
pub fn list(
    connection: &Conn,
    filter: &ExecFilter,
    after: Option<&Cursor>,
    limit: usize,
) -> sql::Result<ExecPage> {
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    let bind = |clause: &str, value: Value, values: &mut Vec<Value>| {
        values.push(value);
        clause.replace('?', &format!("?{}", values.len()))
    };
    if let Some(parent) = &filter.parent {
        clauses.push(bind(
            "parent_exec_id = ?",
            parent.clone().into(),
            &mut values,
        ));
    }
    if let Some(caller) = &filter.caller {
        clauses.push(bind(
            "caller_session_id = ?",
            caller.clone().into(),
            &mut values,
        ));
    }
    match filter.outcome {
        Some(OutcomeFilter::Unknown) => clauses.push("outcome IS NULL".into()),
        Some(OutcomeFilter::Is(outcome)) => clauses.push(bind(
            "outcome = ?",
            outcome.as_str().to_string().into(),
            &mut values,
        )),
        None => {}
    }
    if let Some(search) = &filter.search {
        clauses.push(bind(
            // Lowered here, in ASCII as the stored search text is: PostgreSQL's `lower()` of a
            // parameter would fold other letters too, by the database's locale.
            "instr(search_text, ?) > 0",
            Value::Text(search.to_ascii_lowercase()),
            &mut values,
        ));
    }
    match &filter.repo {
        Some(Some(repo)) => clauses.push(bind("repo = ?", repo.clone().into(), &mut values)),
        Some(None) => clauses.push("repo IS NULL".into()),
        None => {}
    }
    if let Some(task) = &filter.task {
        clauses.push(bind(
            "caller_session_id IN (SELECT id FROM sessions WHERE task = ?)",
            task.clone().into(),
            &mut values,
        ));
    }
    if let Some(waves) = &filter.wave_ids {
        // Each wave id its own parameter: one text for both stores (no JSON table function).
        if waves.is_empty() {
            clauses.push("0 = 1".into());
        } else {
            let placeholders: Vec<String> = waves
                .iter()
                .map(|wave| {
                    values.push(Value::Text(wave.clone()));
                    format!("?{}", values.len())
                })
                .collect();
            clauses.push(format!(
                "caller_session_id IN (SELECT id FROM sessions WHERE wave_id IN ({}))",
                placeholders.join(", ")
            ));
        }
    }
    if let Some(cursor) = after {
        values.push(Value::Int(cursor.started_at));
        let at = values.len();
        values.push(Value::Text(cursor.id.clone()));
        clauses.push(format!(
            "(started_at < ?{at} OR (started_at = ?{at} AND id < ?{}))",
            at + 1
        ));
    }
    let condition = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    // One row more than asked tells whether there is a next page without a count query.
    values.push(Value::Int(limit as i64 + 1));
    let sql = format!(
        "SELECT {COLUMNS} FROM execs {condition} ORDER BY started_at DESC, id DESC LIMIT ?{}",
        values.len()
    );
    let params: Vec<&dyn sql::Param> = values
        .iter()
        .map(|value| value as &dyn sql::Param)
        .collect();
    let mut entries = connection.rows(&sql, &params, from_row)?;
    let next = if entries.len() > limit {
        entries.truncate(limit);
        entries.last().map(|last| {
            Cursor {
                started_at: last.started_at,
                id: last.id.clone(),
            }
            .encode()
        })
    } else {
        None
    };
    Ok(ExecPage { entries, next })
}

/// The exec with this id.
pub fn get(connection: &Conn, id: &str) -> sql::Result<Option<Exec>> {
    connection.opt_row(
        &format!("SELECT {COLUMNS} FROM execs WHERE id = ?1"),
        args![id],
        from_row,
    )
}

/// Every exec whose id starts with `prefix` (at most `limit`, to name candidates).
pub fn find_by_prefix(connection: &Conn, prefix: &str, limit: usize) -> sql::Result<Vec<Exec>> {
    // A range scan on the primary key: ids are ASCII, so every id with the prefix sorts
    // between the prefix and the prefix followed by the highest ASCII character.
    let upper = format!("{prefix}\u{7f}");
    connection.rows(
        &format!("SELECT {COLUMNS} FROM execs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3"),
        args![prefix, upper, limit as i64],
        from_row,
    )
}

/// An exec still open, with what prune needs to tell whether its process lives.
#[derive(Debug, Clone)]
pub struct OpenExec {
    pub exec: Exec,
    pub pid_start: Option<u64>,
}

/// Every exec not completed, newest first.
pub fn open_execs(connection: &Conn) -> sql::Result<Vec<OpenExec>> {
    connection.rows(
        &format!(
            "SELECT {COLUMNS}, pid_start FROM execs WHERE completed_at IS NULL \
         ORDER BY started_at DESC, id DESC"
        ),
        args![],
        |row| {
            Ok(OpenExec {
                exec: from_row(row)?,
                pid_start: row.get::<Option<i64>>(15)?.map(|start| start as u64),
            })
        },
    )
}

/// Wave ids whose id is `selector`, or else whose name is `selector` (within `repo` when
/// given). Each result is `(id, repo)`.
pub fn waves_matching(
    connection: &Conn,
    selector: &str,
    repo: Option<Option<&str>>,
) -> sql::Result<Vec<(String, Option<String>)>> {
    let by_id: Option<(String, Option<String>)> = connection
        .row(
            "SELECT id, repo FROM waves WHERE id = ?1",
            args![selector],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    if let Some(wave) = by_id {
        return Ok(vec![wave]);
    }
    let waves: Vec<(String, Option<String>)> = connection.rows(
        "SELECT id, repo FROM waves WHERE name = ?1 ORDER BY id",
        args![selector],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(match repo {
        Some(repo) => waves
            .into_iter()
            .filter(|(_, wave_repo)| wave_repo.as_deref() == repo)
            .collect(),
        None => waves,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`HOST_SINCE`] names the step that adds the column, on both stores.
    #[test]
    fn the_host_column_comes_with_its_step() {
        let step = HOST_SINCE as usize - 1;
        let adds = "ALTER TABLE execs ADD COLUMN host TEXT";
        let sqlite = crate::store::migrations::MIGRATIONS;
        assert!(sqlite[step].sql.contains(adds));
        assert!(!sqlite[..step]
            .iter()
            .any(|earlier| earlier.sql.contains(adds)));
        let postgres = crate::store::migrations_postgres::STEPS;
        assert!(postgres[step].contains(adds));
        assert!(!postgres[..step]
            .iter()
            .any(|earlier| earlier.contains(adds)));
    }

    #[test]
    fn a_command_line_is_one_line() {
        let exec = |argv: serde_json::Value| Exec {
            id: "x".into(),
            trace_id: "x".into(),
            parent_exec_id: None,
            caller_session_id: None,
            via_agent: None,
            command: Some(argv),
            cwd: None,
            repo: None,
            host: None,
            pid: None,
            started_at: 0,
            completed_at: None,
            exit_code: None,
            outcome: None,
            signal: None,
        };
        let line = exec(serde_json::json!([
            "corral",
            "send",
            "s",
            "two\nlines\tand\u{1b}[31m"
        ]))
        .command_line();
        assert_eq!(line, "corral send s two\\nlines\\tand\\u{1b}[31m");
        assert_eq!(
            exec(serde_json::json!(["é", "a b"])).command_line(),
            "é a b"
        );
    }
}
