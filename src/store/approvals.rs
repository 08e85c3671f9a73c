//! Approvals (`approvals`, #32): what an engine asked a person under the policy `ask`, and
//! how it was answered.
//!
//! ```text
//!  engine asks ─► insert (pending) + approval.requested ─► corral approvals / HTTP / page
//!  a person answers ─► answer (pending → approved|denied, once) + approval.answered ─► engine
//! ```
//!
//! An approval is answered once: [`answer`] changes only a pending row, and a second answer
//! (or one from a stale view) is told the first. A decision kept for the session
//! (`--for-session`) keeps its `pattern`: [`session_rules`] are what the session's worker
//! answers later requests with, without asking. Written by the ledger actor; read by the
//! daemon's methods and the CLI.

use crate::engine::EngineKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::now_ms;
use crate::store::sql::{self, args, Conn, OptionalExt, Row};

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// The engine waits for the answer.
    Pending,
    Approved,
    Denied,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
        }
    }
}

impl sql::Get for ApprovalStatus {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        match String::from_value(value)?.as_str() {
            "pending" => Ok(ApprovalStatus::Pending),
            "approved" => Ok(ApprovalStatus::Approved),
            "denied" => Ok(ApprovalStatus::Denied),
            other => Err(format!("{other:?} is not an approval status")),
        }
    }
}

/// Who (or what) answered an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnsweredBy {
    /// A person: `corral approve` / `deny`, the HTTP API, the dashboard, a terminal.
    Person,
    /// A decision a person kept for the session (`--for-session`) that matched it.
    SessionRule,
    /// Nobody answered within `approvals.timeout_s`: denied.
    Timeout,
    /// Its run ended (cancelled, timed out, the engine exited, the daemon restarted) before
    /// anyone answered: denied, since no engine waits for it any more.
    RunEnded,
}

impl AnsweredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Person => "person",
            AnsweredBy::SessionRule => "session-rule",
            AnsweredBy::Timeout => "timeout",
            AnsweredBy::RunEnded => "run-ended",
        }
    }
}

impl sql::Get for AnsweredBy {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        match String::from_value(value)?.as_str() {
            "person" => Ok(AnsweredBy::Person),
            "session-rule" => Ok(AnsweredBy::SessionRule),
            "timeout" => Ok(AnsweredBy::Timeout),
            "run-ended" => Ok(AnsweredBy::RunEnded),
            other => Err(format!("{other:?} is not who answers an approval")),
        }
    }
}

/// One request an engine made under `ask`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub session_id: String,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub engine: EngineKind,
    /// The tool the agent wants to use (`Write`, `Bash`, `commandExecution`, `fileChange`).
    pub tool: String,
    /// What it would touch: a path, a command, a URL (when the engine says).
    pub target: Option<String>,
    /// The agent's or the engine's stated reason.
    pub reason: Option<String>,
    /// The tool's input as the engine sent it.
    pub input: Value,
    pub asked_at: i64,
    pub status: ApprovalStatus,
    pub answered_at: Option<i64>,
    pub answered_by: Option<AnsweredBy>,
    /// The answer's reason: a person's `--reason`, or why it was denied without one.
    pub answer_reason: Option<String>,
    /// Kept for the session: later requests for `tool` whose target matches are answered the
    /// same way ([`matches`]).
    pub pattern: Option<String>,
    /// On a shared store, the daemon whose run asked.
    pub node_id: Option<String>,
}

const APPROVAL_COLUMNS: &str = "id, session_id, prompt_id, run_id, engine, tool, target, reason, \
                                input, asked_at, status, answered_at, answered_by, \
                                answer_reason, pattern, node_id";

fn approval_row(row: &Row<'_>) -> sql::Result<Approval> {
    let input: String = row.get(8)?;
    Ok(Approval {
        id: row.get(0)?,
        session_id: row.get(1)?,
        prompt_id: row.get(2)?,
        run_id: row.get(3)?,
        engine: row.get(4)?,
        tool: row.get(5)?,
        target: row.get(6)?,
        reason: row.get(7)?,
        input: serde_json::from_str(&input).unwrap_or(Value::String(input)),
        asked_at: row.get(9)?,
        status: row.get(10)?,
        answered_at: row.get(11)?,
        answered_by: row.get(12)?,
        answer_reason: row.get(13)?,
        pattern: row.get(14)?,
        node_id: row.get(15)?,
    })
}

/// A person's (or a rule's) decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

impl Decision {
    pub fn status(self) -> ApprovalStatus {
        match self {
            Decision::Approve => ApprovalStatus::Approved,
            Decision::Deny => ApprovalStatus::Denied,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

pub(crate) fn insert(connection: &Conn, approval: &Approval) -> sql::Result<()> {
    connection.run(
        &format!(
            "INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        ),
        args![
            approval.id,
            approval.session_id,
            approval.prompt_id,
            approval.run_id,
            approval.engine,
            approval.tool,
            approval.target,
            approval.reason,
            approval.input.to_string(),
            approval.asked_at,
            approval.status.as_str(),
            approval.answered_at,
            approval.answered_by.map(AnsweredBy::as_str),
            approval.answer_reason,
            approval.pattern,
            approval.node_id,
        ],
    )?;
    Ok(())
}

/// An answer to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    pub by: AnsweredBy,
    pub reason: Option<String>,
    /// Kept for the session: see [`Approval::pattern`].
    pub pattern: Option<String>,
}

/// What answering found.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    /// Answered now.
    Now(Approval),
    /// It was answered before: the first answer stands.
    Before(Approval),
    NotFound,
}

/// Answers a pending approval, once.
pub(crate) fn answer(connection: &Conn, id: &str, answer: &Answer) -> sql::Result<Answered> {
    let changed = connection.run(
        "UPDATE approvals SET status = ?2, answered_at = ?3, answered_by = ?4, \
         answer_reason = ?5, pattern = ?6 WHERE id = ?1 AND status = 'pending'",
        args![
            id,
            answer.decision.status().as_str(),
            now_ms(),
            answer.by.as_str(),
            answer.reason,
            answer.pattern,
        ],
    )?;
    Ok(match (changed, approval(connection, id)?) {
        (_, None) => Answered::NotFound,
        (0, Some(first)) => Answered::Before(first),
        (_, Some(now)) => Answered::Now(now),
    })
}

/// Denies the pending approvals of a run that ended (`AnsweredBy::RunEnded`), or of every run
/// of this daemon (`run_id` `None`: at boot, when no run of before is alive to wait for an
/// answer); replies with them.
pub(crate) fn deny_left(
    connection: &Conn,
    run_id: Option<&str>,
    node_id: Option<&str>,
    reason: &str,
) -> sql::Result<Vec<Approval>> {
    // Two statements, not `?1 IS NULL OR …`: PostgreSQL cannot type a parameter that is only
    // compared with NULL.
    let left: Vec<Approval> = match run_id {
        Some(run_id) => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
                 AND run_id = ?1 AND node_id IS NOT DISTINCT FROM ?2 ORDER BY asked_at, id"
            ),
            args![run_id, node_id],
            approval_row,
        )?,
        None => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
                 AND node_id IS NOT DISTINCT FROM ?1 ORDER BY asked_at, id"
            ),
            args![node_id],
            approval_row,
        )?,
    };
    let denial = Answer {
        decision: Decision::Deny,
        by: AnsweredBy::RunEnded,
        reason: Some(reason.to_string()),
        pattern: None,
    };
    let mut denied = Vec::with_capacity(left.len());
    for approval in left {
        if let Answered::Now(now) = answer(connection, &approval.id, &denial)? {
            denied.push(now);
        }
    }
    Ok(denied)
}

// ---------------------------------------------------------------------------------------------
// Reads.

pub fn approval(connection: &Conn, id: &str) -> sql::Result<Option<Approval>> {
    connection
        .row(
            &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
            args![id],
            approval_row,
        )
        .optional()
}

/// The approvals whose id starts with `prefix` (at most 2: enough to tell a unique one).
/// The answered approvals of the runs daemon `node_id` runs now: what it routes again to
/// its runs when notices may have been missed (a run takes an answer once; the others are
/// not waited for).
pub fn answered_for_live_runs(connection: &Conn, node_id: &str) -> sql::Result<Vec<Approval>> {
    let columns = APPROVAL_COLUMNS
        .split(", ")
        .map(|column| format!("approvals.{column}"))
        .collect::<Vec<_>>()
        .join(", ");
    connection.rows(
        &format!(
            "SELECT {columns} FROM approvals JOIN runs ON runs.id = approvals.run_id \
             WHERE approvals.status <> 'pending' AND runs.ended_at IS NULL \
             AND runs.node_id = ?1 ORDER BY approvals.answered_at, approvals.id"
        ),
        args![node_id],
        approval_row,
    )
}

pub fn by_prefix(connection: &Conn, prefix: &str) -> sql::Result<Vec<Approval>> {
    connection.rows(
        &format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id >= ?1 AND id < ?1 || '~' \
             ORDER BY id LIMIT 2"
        ),
        args![prefix],
        approval_row,
    )
}

/// The pending approvals, oldest first (of one session, or of all).
pub fn pending(connection: &Conn, session_id: Option<&str>) -> sql::Result<Vec<Approval>> {
    match session_id {
        Some(session_id) => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
                 AND session_id = ?1 ORDER BY asked_at, id"
            ),
            args![session_id],
            approval_row,
        ),
        None => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
                 ORDER BY asked_at, id"
            ),
            args![],
            approval_row,
        ),
    }
}

/// The last `limit` approvals, answered or not, newest first (of one session, or of all).
pub fn recent(
    connection: &Conn,
    session_id: Option<&str>,
    limit: i64,
) -> sql::Result<Vec<Approval>> {
    match session_id {
        Some(session_id) => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = ?1 \
                 ORDER BY asked_at DESC, id DESC LIMIT ?2"
            ),
            args![session_id, limit],
            approval_row,
        ),
        None => connection.rows(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY asked_at DESC, id DESC LIMIT ?1"
            ),
            args![limit],
            approval_row,
        ),
    }
}

/// The decisions a person kept for the session (`--for-session`), newest first: the first
/// that [`matches`] a request answers it.
pub fn session_rules(connection: &Conn, session_id: &str) -> sql::Result<Vec<Approval>> {
    connection.rows(
        &format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = ?1 \
             AND pattern IS NOT NULL AND status <> 'pending' AND answered_by = 'person' \
             ORDER BY answered_at DESC, id DESC"
        ),
        args![session_id],
        approval_row,
    )
}

// ---------------------------------------------------------------------------------------------
// Patterns (pure).

/// Whether a kept decision's `pattern` covers `target`: `*` stands for any run of characters,
/// everything else for itself. A request with no target is matched by the empty pattern only.
pub fn matches(pattern: &str, target: Option<&str>) -> bool {
    let target = target.unwrap_or("");
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = target.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole target.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Why a pattern may not be kept for a session, if it may not: one that would match every
/// target (`*`, `/**`, ` * `) hands the agent the tool outright, which is what the policy
/// `full` is for.
pub fn too_broad(pattern: &str) -> Option<String> {
    let literal = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '/' | '.' | '?') && !c.is_whitespace())
        .count();
    (pattern.contains('*') && literal == 0).then(|| {
        format!(
            "the pattern '{pattern}' would match everything: name the path or command it \
             covers (for instance 'src/*' or 'npm test*')"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_without_a_star_is_the_target_itself() {
        assert!(matches("/src/a.rs", Some("/src/a.rs")));
        assert!(!matches("/src/a.rs", Some("/src/a.rsx")));
        assert!(!matches("/src/a.rs", Some("/src/a")));
        assert!(matches("", None));
        assert!(!matches("", Some("x")));
    }

    #[test]
    fn a_star_stands_for_any_run_of_characters() {
        assert!(matches("/src/*", Some("/src/a/b.rs")));
        assert!(matches("npm test*", Some("npm test -- --watch")));
        assert!(matches("*.rs", Some("/x/y.rs")));
        assert!(!matches("*.rs", Some("/x/y.rsx")));
        assert!(matches("a*b*c", Some("aXbYc")));
        assert!(!matches("a*b*c", Some("aXcYb")));
        // The ends may not overlap.
        assert!(!matches("ab*ba", Some("aba")));
        assert!(!matches("/src/*", None));
    }

    #[test]
    fn a_pattern_that_matches_everything_is_refused() {
        for pattern in ["*", "**", "/**", " * ", "*.*", "/*/"] {
            assert!(too_broad(pattern).is_some(), "{pattern}");
        }
        for pattern in ["src/*", "npm test*", "/tmp/x", "", "*.rs"] {
            assert!(too_broad(pattern).is_none(), "{pattern}");
        }
    }
}
