//! Prompts: the user messages queued on a session and where each is in its life (`prompts`).
//!
//! Home of **one worker per session**: [`enqueue`] inserts a prompt as `running` only when the
//! session has no running prompt, else as `queued`; a unique partial index on
//! `prompts(session_id) WHERE status = 'running'` makes a second running prompt impossible.
//! Written by the ledger actor (`EnqueuePrompt`, `FinishPrompt`, ...); read by everyone.
//!
//! This is the queue as one daemon keeps it; where several daemons share the store, what
//! each claims and what is taken back from a dead one is `store::claims`, asked from here only
//! when another daemon is live.

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::claims::{look_shared, shares_the_store, total_goes_elsewhere, Rivals};
use super::daemons::Claim;
use super::dependencies::{self, waiting_sql, Released};
use super::drivers::{driver_claim, DriverClaim};
use super::pauses::paused_sql;
use super::sessions::SessionStatus;
use super::{json_list, now_ms};
use crate::engine::Policy;

/// Where a prompt is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PromptStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl PromptStatus {
    /// The event that tells a prompt ended with this status (`prompt.done` …).
    pub fn end_event(self) -> crate::events::EventKind {
        use crate::events::EventKind;
        match self {
            PromptStatus::Done => EventKind::PromptDone,
            PromptStatus::Failed => EventKind::PromptFailed,
            PromptStatus::Cancelled => EventKind::PromptCancelled,
            // Not an end: only the worker's bookkeeping ever passes these.
            PromptStatus::Queued => EventKind::PromptRequeued,
            PromptStatus::Running => EventKind::PromptStarted,
        }
    }

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
    /// On a shared store, the daemon that runs it and its epoch then (`None` on SQLite, and
    /// while it waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// How many tool uses the engine refused in its runs (`tool.denied`).
    #[serde(default)]
    pub denied: i64,
    /// The policy it runs under, over the session's and the project's (`None`: theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The prompts it runs after (`send --after`, `store::dependencies`): it stays queued
    /// until they have ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Whether it runs after them however they ended (`--after-any`); else a failed or
    /// cancelled one fails it.
    #[serde(default)]
    pub after_any: bool,
    /// Not to start before this time (ms; `send --at/--in`): it waits queued until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<i64>,
}

impl Prompt {
    /// Whether it is not due yet at `now` (ms).
    pub fn due_later(&self, now: i64) -> bool {
        self.due_at.is_some_and(|at| at > now)
    }
}

/// SQL: a prompt's columns as [`prompt_row`] reads them, each name after `$table` (`""`, or
/// `"p."` in a join).
macro_rules! prompt_columns {
    ($table:literal) => {
        concat!(
            $table,
            "id, ",
            $table,
            "session_id, ",
            $table,
            "text, ",
            $table,
            "images, ",
            $table,
            "read_only, ",
            $table,
            "status, ",
            $table,
            "attempts, ",
            $table,
            "error, ",
            $table,
            "answer, ",
            $table,
            "created_at, ",
            $table,
            "started_at, ",
            $table,
            "finished_at, ",
            $table,
            "claimed_by, ",
            $table,
            "claim_epoch, ",
            $table,
            "denied, ",
            $table,
            "policy, ",
            $table,
            "runs_after, ",
            $table,
            "runs_after_any, ",
            $table,
            "due_at"
        )
    };
}

pub(super) use prompt_columns;

pub(super) const PROMPT_COLUMNS: &str = prompt_columns!("");

pub(super) fn prompt_row(row: &Row<'_>) -> sql::Result<Prompt> {
    prompt_at(row, 0)
}

/// The prompt whose [`prompt_columns!`] begin at column `first`.
fn prompt_at(row: &Row<'_>, first: usize) -> sql::Result<Prompt> {
    let status: String = row.get(first + 5)?;
    Ok(Prompt {
        id: row.get(first)?,
        session_id: row.get(first + 1)?,
        text: row.get(first + 2)?,
        images: json_list(row.get(first + 3)?),
        read_only: row.get(first + 4)?,
        status: PromptStatus::parse(&status).unwrap_or(PromptStatus::Failed),
        attempts: row.get(first + 6)?,
        error: row.get(first + 7)?,
        answer: row.get(first + 8)?,
        created_at: row.get(first + 9)?,
        started_at: row.get(first + 10)?,
        finished_at: row.get(first + 11)?,
        claim: match (
            row.get::<Option<String>>(first + 12)?,
            row.get::<Option<i64>>(first + 13)?,
        ) {
            (Some(node_id), Some(epoch)) => Some(Claim { node_id, epoch }),
            _ => None,
        },
        denied: row.get(first + 14)?,
        policy: row.get(first + 15)?,
        after: row
            .get::<Option<String>>(first + 16)?
            .map(json_list)
            .unwrap_or_default(),
        after_any: row.get(first + 17)?,
        due_at: row.get(first + 18)?,
    })
}

/// The prompt whose [`prompt_columns!`] begin at column `first` of an outer join: `None`
/// when there was none (its id is NULL).
pub(super) fn maybe_prompt_at(row: &Row<'_>, first: usize) -> sql::Result<Option<Prompt>> {
    match row.get::<Option<String>>(first)? {
        Some(_) => prompt_at(row, first).map(Some),
        None => Ok(None),
    }
}

/// [`Claimer`], owned: what a ledger write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimBy {
    Alone,
    Daemon(Claim),
    Nobody,
}

impl ClaimBy {
    pub fn as_claimer(&self) -> Claimer<'_> {
        match self {
            ClaimBy::Alone => Claimer::Alone,
            ClaimBy::Daemon(claim) => Claimer::Daemon(claim),
            ClaimBy::Nobody => Claimer::Nobody,
        }
    }
}

/// Who may take a session's next prompt in a write that could start one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimer<'a> {
    /// The only daemon of a SQLite store: it takes it, no claim recorded.
    Alone,
    /// This daemon, under its claim (node and epoch), on a shared store.
    Daemon(&'a Claim),
    /// Nobody here (this daemon does not serve the project, or has no room): it stays queued
    /// for a daemon that can.
    Nobody,
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
    /// See [`Prompt::policy`].
    pub policy: Option<Policy>,
    pub sender_exec_id: Option<String>,
    /// The sender's driver claim generation: the prompt is refused if the claim moved on.
    pub driver_generation: Option<i64>,
    /// The prompts it runs after, by full id (see [`Prompt::after`]).
    pub after: Vec<String>,
    /// See [`Prompt::after_any`].
    pub after_any: bool,
    /// See [`Prompt::due_at`].
    pub due_at: Option<i64>,
}

/// What [`enqueue`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new prompt, `running` or `queued`.
    pub prompt: Prompt,
    /// The prompt that became `running` in this transaction (the new one, or an older one a
    /// dead worker left queued): the caller must start the session's worker on it.
    pub started: Option<Prompt>,
    /// Whether another prompt of the session was running, so the new one waits behind it
    /// (its runner takes it next): known from the claim's own look, for the ledger's
    /// decision whether to wake the other daemons, without asking again.
    #[serde(skip)]
    pub behind_running: bool,
}

/// Why [`enqueue`] queued nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotQueued {
    /// The sender's driver claim moved on: the claim as it is now.
    Superseded(DriverClaim),
    /// What it would run after does not let it be queued (`dependencies::refusal`).
    After(String),
}

/// Queues a prompt in one transaction: it becomes `running` when nothing else runs or waits
/// on the session and nothing it runs after is left to end (the caller then starts the
/// worker), else it is `queued` (the session's worker takes it in order, or the end of what
/// it runs after releases it).
pub(crate) fn enqueue(
    connection: &Conn,
    new: &NewPrompt,
    claimer: Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<Result<Enqueued, NotQueued>> {
    if let Some(generation) = new.driver_generation {
        if let Some(claim) = driver_claim(connection, &new.session_id)? {
            if claim.generation != generation {
                return Ok(Err(NotQueued::Superseded(claim)));
            }
        }
    }
    if !new.after.is_empty() {
        if let Some(why) = dependencies::refusal(connection, &new.after, new.after_any)? {
            return Ok(Err(NotQueued::After(why)));
        }
    }
    // The row as it is stored, made here: the insert is held (PostgreSQL), to go in the round
    // trip of the session's question below, which sees it.
    let queued = Prompt {
        id: uuid::Uuid::now_v7().to_string(),
        session_id: new.session_id.clone(),
        // As every text parameter is bound (`sql::storable`).
        text: sql::storable(&new.text).into_owned(),
        images: new.images.clone(),
        read_only: new.read_only,
        status: PromptStatus::Queued,
        attempts: 0,
        error: None,
        answer: None,
        created_at: now_ms(),
        started_at: None,
        finished_at: None,
        claim: None,
        denied: 0,
        policy: new.policy,
        after: new.after.clone(),
        after_any: new.after_any && !new.after.is_empty(),
        due_at: new.due_at,
    };
    connection.run_later(
        "INSERT INTO prompts (id, session_id, text, images, read_only, status, sender_exec_id, \
         created_at, policy, runs_after, runs_after_any, due_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11)",
        args![
            queued.id,
            queued.session_id,
            queued.text,
            serde_json::to_string(&queued.images).expect("strings serialize"),
            queued.read_only,
            new.sender_exec_id,
            queued.created_at,
            queued.policy.map(Policy::as_str),
            (!queued.after.is_empty())
                .then(|| serde_json::to_string(&queued.after).expect("strings serialize")),
            queued.after_any,
            queued.due_at,
        ],
    )?;
    dependencies::record(connection, &queued.id, &queued.after, queued.after_any)?;
    let (started, behind_running) =
        claim_next_looking(connection, &new.session_id, None, claimer, total)?;
    // The row as it stands: claimed just now, or still as queued.
    let prompt = match &started {
        Some(started) if started.id == queued.id => started.clone(),
        _ => queued,
    };
    Ok(Ok(Enqueued {
        prompt,
        started,
        behind_running,
    }))
}

pub(super) fn set_session_status(
    connection: &Conn,
    session_id: &str,
    status: SessionStatus,
) -> sql::Result<()> {
    connection.run_later(
        "UPDATE sessions SET status = ?2 WHERE id = ?1",
        args![session_id, status.as_str()],
    )
}

/// Ends prompt `prompt_id` of session `session_id` and, in the same transaction, claims the
/// session's next queued prompt (now `running`), so that the one-worker rule never has a gap
/// to slip through; a prompt ended already leaves its row as it is, and its session still
/// gets its next prompt claimed. `total`: `slots.total` when other daemons share the store
/// (see `claims::total_goes_elsewhere`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_and_claim_next(
    connection: &Conn,
    prompt_id: &str,
    session_id: &str,
    status: PromptStatus,
    error: Option<&str>,
    answer: Option<&str>,
    denied: i64,
    claimer: Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<Finished> {
    // Nothing of its answer is read: on PostgreSQL it goes in the next question's round trip
    // (the session's, below, which sees it).
    connection.run_later(
        "UPDATE prompts SET status = ?2, error = ?3, answer = ?4, finished_at = ?5, \
         denied = ?7 WHERE id = ?1 AND session_id = ?6 AND status IN ('running', 'queued')",
        args![
            prompt_id,
            status.as_str(),
            error,
            answer,
            now_ms(),
            session_id,
            denied
        ],
    )?;
    // Before the session's own claim: its head may be a prompt that fails with this one.
    let released =
        dependencies::release_after(connection, prompt_id, status, Some(session_id), claimer)?;
    let next = claim_next(connection, session_id, Some(status), claimer, total)?;
    Ok(Finished {
        next,
        released,
        paused: None,
    })
}

/// What [`finish_and_claim_next`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finished {
    /// The session's next prompt, now `running`, for its worker.
    pub next: Option<Prompt>,
    /// What the end did to the prompts that run after it, in other sessions.
    pub released: Released,
    /// The pauses in force, when its failure paused its project (`pause_on_failure`).
    pub paused: Option<Vec<super::pauses::Pause>>,
}

/// Claims the session's oldest queued prompt if nothing runs on it, for `claimer`. `last` is
/// the status of the prompt just finished, which becomes the session's status when nothing
/// is left.
pub(crate) fn claim_next(
    connection: &Conn,
    session_id: &str,
    last: Option<PromptStatus>,
    claimer: Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<Option<Prompt>> {
    Ok(claim_next_looking(connection, session_id, last, claimer, total)?.0)
}

/// [`claim_next`], and whether a prompt of the session was running (then nothing is
/// claimed).
fn claim_next_looking(
    connection: &Conn,
    session_id: &str,
    last: Option<PromptStatus>,
    claimer: Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<(Option<Prompt>, bool)> {
    let node = match claimer {
        Claimer::Daemon(claim) => Some(claim.node_id.as_str()),
        Claimer::Alone | Claimer::Nobody => None,
    };
    // Other daemons live: the locks are the claims' to keep (see `claims::claim_work`).
    let shared = match claimer {
        Claimer::Daemon(claim) => shares_the_store(connection, claim)?,
        Claimer::Alone | Claimer::Nobody => false,
    };
    // One look: whether a prompt of the session runs, its oldest queued one, whole (its row
    // in `queue_heads`: a plan made on a young store's statistics walked the whole queue's
    // index for it; whole, so that its claim is written without waiting for an answer), and
    // whether its worktree is on another daemon's host (never, without a node to compare);
    // with other daemons live, what stands between that head and its claim too
    // (`claims::Rivals`).
    let Look {
        runs,
        next,
        worktree_elsewhere,
        paused,
        waiting,
        rivals: asked,
    } = match shared {
        false => look_alone(connection, session_id, node)?,
        true => look_shared(connection, session_id, node, total)?,
    };
    if runs {
        return Ok((None, true));
    }
    let idle = match last {
        Some(PromptStatus::Failed) => SessionStatus::Failed,
        Some(PromptStatus::Done) => SessionStatus::Waiting,
        _ => SessionStatus::Idle,
    };
    let taken_here = match claimer {
        // A paused session's prompts wait queued (`store::pauses`), and so does a head that
        // runs after a prompt that has not ended (`store::dependencies`), or that is not due
        // yet (the daemon's timer claims it then, `actors::due`).
        _ if (paused || waiting) && next.is_some() => false,
        _ if next.as_ref().is_some_and(|head| head.due_later(now_ms())) => false,
        Claimer::Daemon(_) => match (&next, asked) {
            (Some(_), _) if worktree_elsewhere => false,
            (Some(head), Some(rivals)) => {
                !rivals.hold_or_go_first()
                    && !total_goes_elsewhere(connection, &head.id, total, rivals.running)?
            }
            _ => true,
        },
        Claimer::Nobody => next.is_none(),
        _ => true,
    };
    if !taken_here {
        // Left queued for a daemon that can take it: nothing runs on the session now.
        if last.is_some() {
            set_session_status(connection, session_id, idle)?;
        }
        return Ok((None, false));
    }
    let epoch = match claimer {
        Claimer::Daemon(claim) => Some(claim.epoch),
        Claimer::Alone | Claimer::Nobody => None,
    };
    match next {
        Some(mut head) => {
            // The row as the claim leaves it, known already: the claim goes with the next
            // statement instead of waiting for its answer under the write lock.
            let started_at = now_ms();
            connection.run_later(
                "UPDATE prompts SET status = 'running', started_at = ?2, claimed_by = ?3, \
                 claim_epoch = ?4 WHERE id = ?1",
                args![head.id, started_at, node, epoch],
            )?;
            head.status = PromptStatus::Running;
            head.started_at = Some(started_at);
            head.claim = match (node, epoch) {
                (Some(node_id), Some(epoch)) => Some(Claim {
                    node_id: node_id.to_string(),
                    epoch,
                }),
                _ => None,
            };
            set_session_status(connection, session_id, SessionStatus::Running)?;
            Ok((Some(head), false))
        }
        None => {
            set_session_status(connection, session_id, idle)?;
            Ok((None, false))
        }
    }
}

/// What [`claim_next_looking`] learns of a session in one statement.
pub(super) struct Look {
    /// A prompt of the session runs.
    pub(super) runs: bool,
    /// Its oldest queued prompt, whole.
    pub(super) next: Option<Prompt>,
    /// Its worktree is on another daemon's host.
    pub(super) worktree_elsewhere: bool,
    /// A pause covers it (`store::pauses`): its next prompt stays queued.
    pub(super) paused: bool,
    /// Its next prompt runs after one that has not ended (`store::dependencies`).
    pub(super) waiting: bool,
    /// With other daemons live: what stands between `next` and its claim.
    pub(super) rivals: Option<Rivals>,
}

/// [`Look`] for a daemon alone on its store (or SQLite's): no rivals to ask about.
fn look_alone(connection: &Conn, session_id: &str, node: Option<&str>) -> sql::Result<Look> {
    let (runs, next, elsewhere, paused, waiting): (bool, Option<Prompt>, bool, bool, bool) =
        connection.row(
            concat!(
            "SELECT EXISTS (SELECT 1 FROM prompts WHERE session_id = ?1 AND status = 'running'), \
                    EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND worktree_node <> ?2), \
                    EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?1 AND ",
            paused_sql!("s"),
            "), ",
            waiting_sql!("h.prompt_id"),
            ", ",
            prompt_columns!("p."),
            " FROM (SELECT 1) AS one \
               LEFT JOIN queue_heads h ON h.session_id = ?1 \
               LEFT JOIN prompts p ON p.id = h.prompt_id"
        ),
            args![session_id, node],
            |row| {
                Ok((
                    row.get(0)?,
                    maybe_prompt_at(row, 4)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                ))
            },
        )?;
    Ok(Look {
        runs,
        next,
        worktree_elsewhere: elsewhere,
        paused,
        waiting,
        rivals: None,
    })
}

/// What cancelling a prompt found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cancel", rename_all = "snake_case")]
pub enum CancelFound {
    /// It was queued: it is now cancelled and will never run.
    Dequeued { session_id: String },
    /// It is running: its session's worker must end it.
    Running { session_id: String },
    /// It had already ended.
    Finished { status: PromptStatus },
}

/// Cancels a prompt if it is queued (and lets go of what ran after it, claiming for
/// `claimer` the heads that may run now, its own session's among them: it may have been the
/// head that held them); says whether it runs or already ended.
pub(crate) fn cancel_prompt(
    connection: &Conn,
    prompt_id: &str,
    claimer: Claimer<'_>,
) -> sql::Result<Option<(CancelFound, Released)>> {
    let Some(found) = prompt(connection, prompt_id)? else {
        return Ok(None);
    };
    let mut released = Released::default();
    let found = match found.status {
        PromptStatus::Queued => {
            connection.run(
                "UPDATE prompts SET status = 'cancelled', finished_at = ?2 WHERE id = ?1",
                args![prompt_id, now_ms()],
            )?;
            released = dependencies::release_after(
                connection,
                prompt_id,
                PromptStatus::Cancelled,
                Some(&found.session_id),
                claimer,
            )?;
            released.started.extend(claim_next(
                connection,
                &found.session_id,
                None,
                claimer,
                None,
            )?);
            CancelFound::Dequeued {
                session_id: found.session_id,
            }
        }
        PromptStatus::Running => {
            // Kept on the row: whoever ends or takes the prompt back sees it (`claims::rescue`,
            // `cancels_asked`), notice heard or not.
            connection.run(
                "UPDATE prompts SET cancel_asked_at = ?2 WHERE id = ?1 AND cancel_asked_at IS NULL",
                args![prompt_id, now_ms()],
            )?;
            CancelFound::Running {
                session_id: found.session_id,
            }
        }
        status => CancelFound::Finished { status },
    };
    Ok(Some((found, released)))
}

/// For each session, the prompt its worker runs now: its running prompt, else its next queued
/// one, claimed (now running). The running ones are read in one query (the partial index of
/// running prompts), not one per session: a boot with thousands of sessions waiting.
///
/// On a shared store only the prompts this daemon's node claimed are taken, under its new
/// epoch: they were its previous incarnation's, whose processes boot ended (that boot holds
/// the home's lock, so that one is dead); another daemon's are not touched. Running prompts
/// that name no daemon were left by the store's one daemon before it was shared: the first
/// to boot takes them.
pub(crate) fn current_or_next(
    connection: &Conn,
    session_ids: &[String],
    claimer: Claimer<'_>,
) -> sql::Result<Vec<Prompt>> {
    let node = match claimer {
        Claimer::Daemon(claim) => {
            connection.run(
                "UPDATE prompts SET claimed_by = ?1, claim_epoch = ?2 \
                 WHERE status = 'running' AND (claimed_by = ?1 OR claimed_by IS NULL)",
                args![claim.node_id, claim.epoch],
            )?;
            claim.node_id.as_str()
        }
        Claimer::Alone | Claimer::Nobody => "",
    };
    let mut running: std::collections::HashMap<String, Prompt> = connection
        .rows(
            &format!(
                "SELECT {PROMPT_COLUMNS} FROM prompts WHERE status = 'running' \
                 AND coalesce(claimed_by, '') = ?1"
            ),
            args![node],
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
            // On a shared store the queued heads are claimed by `claims::claim_work`, as room allows.
            None if node.is_empty() => {
                prompts.extend(claim_next(connection, session_id, None, claimer, None)?)
            }
            None => {}
        }
    }
    Ok(prompts)
}

/// Ends a running prompt whose cancel was asked but whose daemon no longer runs it (it died,
/// or is shutting down) as cancelled; the session's next prompt stays queued for whoever
/// serves it next.
pub(super) fn end_cancelled(
    connection: &Conn,
    prompt_id: &str,
    session_id: &str,
    now: i64,
) -> sql::Result<()> {
    connection.run(
        "UPDATE prompts SET status = 'cancelled', finished_at = ?2, claimed_by = NULL, \
                claim_epoch = NULL WHERE id = ?1",
        args![prompt_id, now],
    )?;
    claim_next(
        connection,
        session_id,
        Some(PromptStatus::Cancelled),
        Claimer::Nobody,
        None,
    )?;
    Ok(())
}

/// What a daemon's shutdown did with a prompt it was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutBack {
    /// Queued again: it runs again, first in its session, later or elsewhere.
    Queued,
    /// Its cancel was asked (through another daemon, say, while this one was stopping its
    /// engine): ended as cancelled, never run again.
    Cancelled,
}

/// Puts a running prompt back in the queue (daemon shutdown, a pause), unless its cancel was
/// asked: then it ends cancelled, as `claims::rescue` ends it, since a cancel is the person's
/// last word. With `again`, its session's head is then claimed for that claimer if it may
/// run (a pause lifted before this write: its resume found the prompt running, and claimed
/// nothing).
pub(crate) fn requeue(
    connection: &Conn,
    prompt_id: &str,
    again: Option<Claimer<'_>>,
) -> sql::Result<(PutBack, Option<Prompt>)> {
    let cancelled: Option<(String, bool)> = connection
        .row(
            "SELECT session_id, cancel_asked_at IS NOT NULL FROM prompts \
              WHERE id = ?1 AND status = 'running'",
            args![prompt_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    match cancelled {
        Some((session_id, true)) => {
            end_cancelled(connection, prompt_id, &session_id, now_ms())?;
            Ok((PutBack::Cancelled, None))
        }
        found => {
            connection.run(
                "UPDATE prompts SET status = 'queued', claimed_by = NULL, claim_epoch = NULL \
                 WHERE id = ?1 AND status = 'running'",
                args![prompt_id],
            )?;
            let claimed = match (found, again) {
                (Some((session_id, _)), Some(claimer)) => {
                    claim_next(connection, &session_id, None, claimer, None)?
                }
                _ => None,
            };
            Ok((PutBack::Queued, claimed))
        }
    }
}

/// Runs a failed or cancelled prompt again in place (`corral retry`): it goes back to
/// `queued` with its id, its place (the oldest queued of its session: the head) and its
/// runs' history, `text` replacing its text when given; claimed at once for `claimer` when
/// nothing runs on its session. `Err`: its status, when it had not failed or been cancelled.
pub(crate) fn retry(
    connection: &Conn,
    prompt_id: &str,
    text: Option<&str>,
    claimer: Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<Result<(Prompt, Option<Prompt>), PromptStatus>> {
    let Some(found) = prompt(connection, prompt_id)? else {
        return Err(sql::DbError::NoRows);
    };
    if !matches!(found.status, PromptStatus::Failed | PromptStatus::Cancelled) {
        return Ok(Err(found.status));
    }
    connection.run(
        "UPDATE prompts SET status = 'queued', text = COALESCE(?2, text), error = NULL, \
                answer = NULL, started_at = NULL, finished_at = NULL, cancel_asked_at = NULL, \
                claimed_by = NULL, claim_epoch = NULL, denied = 0, phase = NULL, \
                phase_reason = NULL, phase_until = NULL \
          WHERE id = ?1 AND status IN ('failed', 'cancelled')",
        args![prompt_id, text.map(|text| sql::storable(text).into_owned())],
    )?;
    let (started, _) = claim_next_looking(connection, &found.session_id, None, claimer, total)?;
    let again = match &started {
        Some(started) if started.id == prompt_id => started.clone(),
        _ => prompt(connection, prompt_id)?.ok_or(sql::DbError::NoRows)?,
    };
    Ok(Ok((again, started)))
}

/// Replaces a queued prompt's text (`corral prompt edit`). `Err`: its status, when it is no
/// longer queued (it started: its text reached the engine).
pub(crate) fn edit(
    connection: &Conn,
    prompt_id: &str,
    text: &str,
) -> sql::Result<Result<Prompt, PromptStatus>> {
    let changed = connection.run(
        "UPDATE prompts SET text = ?2 WHERE id = ?1 AND status = 'queued'",
        args![prompt_id, sql::storable(text).into_owned()],
    )?;
    let found = prompt(connection, prompt_id)?.ok_or(sql::DbError::NoRows)?;
    Ok(match changed {
        0 => Err(found.status),
        _ => Ok(found),
    })
}

/// Claims, for `claimer`, the queued heads that are due at `now` (`send --at/--in`), each as
/// its session allows (`claim_next`: nothing running, no pause, nothing it runs after left).
pub(crate) fn claim_due(
    connection: &Conn,
    now: i64,
    claimer: Claimer<'_>,
) -> sql::Result<Vec<Prompt>> {
    let sessions: Vec<String> = connection.rows(
        "SELECT q.session_id FROM queue_heads q JOIN prompts p ON p.id = q.prompt_id \
          WHERE p.due_at IS NOT NULL AND p.due_at <= ?1 ORDER BY p.due_at, q.prompt_id",
        args![now],
        |row| row.get(0),
    )?;
    let mut claimed = Vec::new();
    for session_id in sessions {
        claimed.extend(claim_next(connection, &session_id, None, claimer, None)?);
    }
    Ok(claimed)
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The earliest time after `now` a queued prompt is due (what the daemon's timer sleeps
/// until); one seek of the partial index of due prompts.
pub fn next_due(connection: &Conn, now: i64) -> sql::Result<Option<i64>> {
    connection.row(
        "SELECT min(due_at) FROM prompts WHERE status = 'queued' AND due_at IS NOT NULL \
            AND due_at > ?1",
        args![now],
        |row| row.get(0),
    )
}

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

/// The ids of the prompts that start with `prefix`, in order, at most `limit`.
pub fn ids_starting(connection: &Conn, prefix: &str, limit: i64) -> sql::Result<Vec<String>> {
    connection.rows(
        "SELECT id FROM prompts WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3",
        args![prefix, format!("{prefix}\u{7f}"), limit],
        |row| row.get::<String>(0),
    )
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
