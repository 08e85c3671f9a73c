//! Dependencies between prompts (`send --after`): a prompt that runs after others stays
//! queued until they have ended, in any session.
//!
//! The edges are rows of `prompt_after` (the prompt, the one it runs after, and whether any
//! end of that one will do: `--after-any`). They are written once, with the prompt, so a
//! dependency can only name a prompt older than its own: no cycle can be made.
//!
//! The rule lives in two places, both here:
//! - **Holding**: [`waiting_sql!`] is asked of a session's queued head wherever a head is
//!   claimed (`prompts::claim_next`'s look, `claims::claim_work`), in the claim's own
//!   statement, as a pause is: no path can start a prompt whose dependencies have not ended.
//!   A head that waits holds its session's later prompts too: a session is one conversation,
//!   in order.
//! - **Releasing**: [`release_after`] runs in the transaction that ends a prompt (its run's
//!   end, or a cancel while it was queued). A dependent that may now run has its session's
//!   head claimed in that transaction; one that may never run (what it runs after failed or
//!   was cancelled, without `--after-any`) fails there, and so, in turn, do its own.

use std::collections::BTreeSet;

use crate::store::sql::{self, args, Conn, OptionalExt};

use super::events::{append_events, Event, NewEvent};
use super::prompts::{claim_next, Claimer, Prompt, PromptStatus};
use crate::events::{Payload, PromptEnded};

/// The most prompts one prompt runs after.
pub const MAX_AFTER: usize = 64;

/// SQL: whether the queued prompt whose id is `$prompt` (a column) still waits for one it
/// runs after: one that has not ended, or (without `--after-any`) one that ended other than
/// done (such a prompt is failed by [`release_after`] in the same transaction; the clause
/// keeps it from running should anything have left it queued).
macro_rules! waiting_sql {
    ($prompt:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM prompt_after d JOIN prompts a ON a.id = d.after_id \
              WHERE d.prompt_id = ",
            $prompt,
            " AND (a.status IN ('queued', 'running') \
                   OR (a.status <> 'done' AND d.any_end = 0)))"
        )
    };
}
pub(crate) use waiting_sql;

/// Why a prompt cannot be queued to run after `after` (`None`: it can), read in the
/// transaction that would queue it: a prompt that does not exist, or one that has already
/// failed or been cancelled when `any` is not set (the new prompt would fail at once).
pub(crate) fn refusal(
    connection: &Conn,
    after: &[String],
    any: bool,
) -> sql::Result<Option<String>> {
    if after.len() > MAX_AFTER {
        return Ok(Some(format!(
            "a prompt runs after at most {MAX_AFTER} prompts ({} given)",
            after.len()
        )));
    }
    for id in after {
        let status: Option<String> = connection
            .row(
                "SELECT status FROM prompts WHERE id = ?1",
                args![id],
                |row| row.get(0),
            )
            .optional()?;
        let Some(status) = status.as_deref().and_then(PromptStatus::parse) else {
            return Ok(Some(format!("no prompt '{id}' to run after")));
        };
        if !any && matches!(status, PromptStatus::Failed | PromptStatus::Cancelled) {
            return Ok(Some(format!(
                "prompt {id} has already {status}: a prompt after it would fail at once \
                 (--after-any runs it anyway)",
                status = status.as_str()
            )));
        }
    }
    Ok(None)
}

/// Records that `prompt_id` runs after `after` (held with the prompt's own insert).
pub(crate) fn record(
    connection: &Conn,
    prompt_id: &str,
    after: &[String],
    any: bool,
) -> sql::Result<()> {
    for after_id in after {
        connection.run_later(
            "INSERT INTO prompt_after (prompt_id, after_id, any_end) VALUES (?1, ?2, ?3) \
             ON CONFLICT (prompt_id, after_id) DO NOTHING",
            args![prompt_id, after_id, any],
        )?;
    }
    Ok(())
}

/// What the end of a prompt did to those that run after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Released {
    /// The `prompt.failed` of each that failed with it (and of theirs after them), stored in
    /// the same transaction, for the caller to publish.
    pub told: Vec<Event>,
    /// Claimed for their sessions' workers: the heads it let run.
    pub started: Vec<Prompt>,
    /// On a shared store, it touched sessions whose heads are the claims' to take (this
    /// daemon's claimer among them: it knows what each daemon serves and has room for).
    pub unclaimed: bool,
}

/// Lets go of what waited for `ended`, which has just ended with `status` in this
/// transaction: its dependents that can never run fail (and theirs, in turn), and the heads
/// of every session they are in are claimed, but `own`'s (the session whose own next prompt
/// the caller claims), when `claimer` is a store's only daemon; on a shared store they are
/// left to the claims (`unclaimed`). Costs one indexed lookup when nothing waits for it.
pub(crate) fn release_after(
    connection: &Conn,
    ended: &str,
    status: PromptStatus,
    own: Option<&str>,
    claimer: Claimer<'_>,
) -> sql::Result<Released> {
    let mut released = Released::default();
    let mut failed = Vec::new();
    let mut sessions = BTreeSet::new();
    let mut ends = vec![(ended.to_string(), status)];
    while let Some((ended, status)) = ends.pop() {
        let dependents: Vec<(String, String, bool)> = connection.rows(
            "SELECT d.prompt_id, p.session_id, d.any_end FROM prompt_after d \
               JOIN prompts p ON p.id = d.prompt_id \
              WHERE d.after_id = ?1 AND p.status = 'queued' ORDER BY p.created_at, p.id",
            args![ended],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?;
        for (prompt_id, session_id, any) in dependents {
            if status != PromptStatus::Done && !any {
                let error = format!(
                    "prompt {ended} it runs after {}",
                    match status {
                        PromptStatus::Cancelled => "was cancelled",
                        _ => "failed",
                    }
                );
                connection.run(
                    "UPDATE prompts SET status = 'failed', error = ?2, finished_at = ?3 \
                      WHERE id = ?1 AND status = 'queued'",
                    args![prompt_id, error, super::now_ms()],
                )?;
                ends.push((prompt_id.clone(), PromptStatus::Failed));
                failed.push(NewEvent::new(
                    session_id.clone(),
                    Some(prompt_id),
                    None,
                    Payload::PromptFailed(PromptEnded {
                        error: Some(error),
                        ..PromptEnded::default()
                    }),
                ));
            }
            sessions.insert(session_id);
        }
    }
    released.told = append_events(connection, &failed)?;
    for session_id in sessions.iter().filter(|id| Some(id.as_str()) != own) {
        // On a shared store the claims take them, which know what each daemon serves and
        // has room for.
        if claimer != Claimer::Alone {
            released.unclaimed = true;
            continue;
        }
        released
            .started
            .extend(claim_next(connection, session_id, None, claimer, None)?);
    }
    Ok(released)
}
