//! Prompts: the user messages queued on a session and where each is in its life (`prompts`).
//!
//! Home of **one worker per session**: [`enqueue`] inserts a prompt as `running` only when the
//! session has no running prompt, else as `queued`; a unique partial index on
//! `prompts(session_id) WHERE status = 'running'` makes a second running prompt impossible.
//! Written by the ledger actor (`EnqueuePrompt`, `FinishPrompt`, ...); read by everyone.

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::drivers::{driver_claim, DriverClaim};
use super::{json_list, now_ms};

/// Where a prompt is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl PromptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptStatus::Queued => "queued",
            PromptStatus::Running => "running",
            PromptStatus::Done => "done",
            PromptStatus::Failed => "failed",
            PromptStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => PromptStatus::Queued,
            "running" => PromptStatus::Running,
            "done" => PromptStatus::Done,
            "failed" => PromptStatus::Failed,
            "cancelled" => PromptStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the prompt has ended for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            PromptStatus::Done | PromptStatus::Failed | PromptStatus::Cancelled
        )
    }
}

/// One user message queued on a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    pub id: String,
    pub session_id: String,
    pub text: String,
    pub images: Vec<String>,
    pub read_only: bool,
    pub status: PromptStatus,
    pub attempts: i64,
    pub error: Option<String>,
    /// The agent's final answer (title line removed).
    pub answer: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

const PROMPT_COLUMNS: &str = "id, session_id, text, images, read_only, status, attempts, \
                              error, answer, created_at, started_at, finished_at";

fn prompt_row(row: &Row<'_>) -> sql::Result<Prompt> {
    let status: String = row.get(5)?;
    Ok(Prompt {
        id: row.get(0)?,
        session_id: row.get(1)?,
        text: row.get(2)?,
        images: json_list(row.get(3)?),
        read_only: row.get(4)?,
        status: PromptStatus::parse(&status).unwrap_or(PromptStatus::Failed),
        attempts: row.get(6)?,
        error: row.get(7)?,
        answer: row.get(8)?,
        created_at: row.get(9)?,
        started_at: row.get(10)?,
        finished_at: row.get(11)?,
    })
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// A prompt to queue.
#[derive(Debug, Clone, Default)]
pub struct NewPrompt {
    pub session_id: String,
    pub text: String,
    pub images: Vec<String>,
    pub read_only: bool,
    pub sender_exec_id: Option<String>,
    /// The sender's driver claim generation: the prompt is refused if the claim moved on.
    pub driver_generation: Option<i64>,
}

/// What [`enqueue`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new prompt, `running` or `queued`.
    pub prompt: Prompt,
    /// The prompt that became `running` in this transaction (the new one, or an older one a
    /// dead worker left queued): the caller must start the session's worker on it.
    pub started: Option<Prompt>,
}

/// Queues a prompt in one transaction: it becomes `running` when nothing else runs or waits
/// on the session (the caller then starts the worker), else it is `queued` (the session's
/// worker takes it in order).
pub(crate) fn enqueue(
    connection: &Conn,
    new: &NewPrompt,
) -> sql::Result<Result<Enqueued, DriverClaim>> {
    if let Some(generation) = new.driver_generation {
        if let Some(claim) = driver_claim(connection, &new.session_id)? {
            if claim.generation != generation {
                return Ok(Err(claim));
            }
        }
    }
    let id = uuid::Uuid::now_v7().to_string();
    connection.run(
        "INSERT INTO prompts (id, session_id, text, images, read_only, status, sender_exec_id, \
         created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7)",
        args![
            id,
            new.session_id,
            new.text,
            serde_json::to_string(&new.images).expect("strings serialize"),
            new.read_only,
            new.sender_exec_id,
            now_ms(),
        ],
    )?;
    let started = claim_next(connection, &new.session_id, None)?;
    let prompt = prompt(connection, &id)?.ok_or(sql::DbError::NoRows)?;
    Ok(Ok(Enqueued { prompt, started }))
}

fn set_session_status(connection: &Conn, session_id: &str, status: &str) -> sql::Result<()> {
    connection.run(
        "UPDATE sessions SET status = ?2 WHERE id = ?1",
        args![session_id, status],
    )?;
    Ok(())
}

/// Ends a prompt and, in the same transaction, claims the session's next queued prompt (now
/// `running`), so that the one-worker rule never has a gap to slip through.
pub(crate) fn finish_and_claim_next(
    connection: &Conn,
    prompt_id: &str,
    status: PromptStatus,
    error: Option<&str>,
    answer: Option<&str>,
) -> sql::Result<Option<Prompt>> {
    let now = now_ms();
    let session_id: Option<String> = connection
        .row(
            "SELECT session_id FROM prompts WHERE id = ?1",
            args![prompt_id],
            |row| row.get(0),
        )
        .optional()?;
    let Some(session_id) = session_id else {
        return Ok(None);
    };
    connection.run(
        "UPDATE prompts SET status = ?2, error = ?3, answer = ?4, finished_at = ?5 \
         WHERE id = ?1 AND status IN ('running', 'queued')",
        args![prompt_id, status.as_str(), error, answer, now],
    )?;
    claim_next(connection, &session_id, Some(status))
}

/// Claims the session's oldest queued prompt if nothing runs on it. `last` is the status of
/// the prompt just finished, which becomes the session's status when nothing is left.
pub(crate) fn claim_next(
    connection: &Conn,
    session_id: &str,
    last: Option<PromptStatus>,
) -> sql::Result<Option<Prompt>> {
    let running: bool = connection.row(
        "SELECT EXISTS (SELECT 1 FROM prompts WHERE session_id = ?1 AND status = 'running')",
        args![session_id],
        |row| row.get(0),
    )?;
    if running {
        return Ok(None);
    }
    let next: Option<String> = connection
        .row(
            "SELECT id FROM prompts WHERE session_id = ?1 AND status = 'queued' \
             ORDER BY created_at, id LIMIT 1",
            args![session_id],
            |row| row.get(0),
        )
        .optional()?;
    match next {
        Some(id) => {
            connection.run(
                "UPDATE prompts SET status = 'running', started_at = ?2 WHERE id = ?1",
                args![id, now_ms()],
            )?;
            set_session_status(connection, session_id, "running")?;
            prompt(connection, &id)
        }
        None => {
            let idle = match last {
                Some(PromptStatus::Failed) => "failed",
                Some(PromptStatus::Done) => "waiting",
                _ => "idle",
            };
            set_session_status(connection, session_id, idle)?;
            Ok(None)
        }
    }
}

/// What cancelling a prompt found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cancel", rename_all = "snake_case")]
pub enum CancelFound {
    /// It was queued: it is now cancelled and will never run.
    Dequeued,
    /// It is running: its session's worker must end it.
    Running { session_id: String },
    /// It had already ended.
    Finished { status: PromptStatus },
}

pub(crate) fn cancel_prompt(
    connection: &Conn,
    prompt_id: &str,
) -> sql::Result<Option<CancelFound>> {
    let Some(found) = prompt(connection, prompt_id)? else {
        return Ok(None);
    };
    Ok(Some(match found.status {
        PromptStatus::Queued => {
            connection.run(
                "UPDATE prompts SET status = 'cancelled', finished_at = ?2 WHERE id = ?1",
                args![prompt_id, now_ms()],
            )?;
            CancelFound::Dequeued
        }
        PromptStatus::Running => CancelFound::Running {
            session_id: found.session_id,
        },
        status => CancelFound::Finished { status },
    }))
}

/// For each session, the prompt its worker runs now: its running prompt, else its next queued
/// one, claimed (now running). The running ones are read in one query (the partial index of
/// running prompts), not one per session: a boot with thousands of sessions waiting.
pub(crate) fn current_or_next(
    connection: &Conn,
    session_ids: &[String],
) -> sql::Result<Vec<Prompt>> {
    let mut running: std::collections::HashMap<String, Prompt> = connection
        .rows(
            &format!("SELECT {PROMPT_COLUMNS} FROM prompts WHERE status = 'running'"),
            args![],
            prompt_row,
        )?
        .into_iter()
        .map(Ok)
        .map(|prompt| prompt.map(|prompt| (prompt.session_id.clone(), prompt)))
        .collect::<sql::Result<_>>()?;
    let mut prompts = Vec::with_capacity(session_ids.len());
    for session_id in session_ids {
        match running.remove(session_id) {
            Some(prompt) => prompts.push(prompt),
            None => prompts.extend(claim_next(connection, session_id, None)?),
        }
    }
    Ok(prompts)
}

/// Puts a running prompt back in the queue (daemon shutdown): it runs again, first, later.
pub(crate) fn requeue(connection: &Conn, prompt_id: &str) -> sql::Result<()> {
    connection.run(
        "UPDATE prompts SET status = 'queued' WHERE id = ?1 AND status = 'running'",
        args![prompt_id],
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The session's prompt that runs now, else its oldest queued one: work that would use its
/// worktree.
pub fn busy_prompt(connection: &Conn, session_id: &str) -> sql::Result<Option<Prompt>> {
    let id: Option<String> = connection
        .row(
            "SELECT id FROM prompts WHERE session_id = ?1 AND status IN ('running', 'queued') \
             ORDER BY status = 'running' DESC, created_at LIMIT 1",
            args![session_id],
            |row| row.get(0),
        )
        .optional()?;
    match id {
        Some(id) => prompt(connection, &id),
        None => Ok(None),
    }
}

pub fn prompt(connection: &Conn, id: &str) -> sql::Result<Option<Prompt>> {
    connection
        .row(
            &format!("SELECT {PROMPT_COLUMNS} FROM prompts WHERE id = ?1"),
            args![id],
            prompt_row,
        )
        .optional()
}

pub fn prompts_of(connection: &Conn, session_id: &str) -> sql::Result<Vec<Prompt>> {
    connection.rows(
        &format!(
            "SELECT {PROMPT_COLUMNS} FROM prompts WHERE session_id = ?1 ORDER BY created_at, id"
        ),
        args![session_id],
        prompt_row,
    )
}
