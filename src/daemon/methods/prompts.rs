//! Prompts: `prompt.send` (with the sender's exec recorded when it asks), `prompt.cancel`,
//! `prompt.wait`.

use serde_json::{json, Value};

use super::{answer, resolve_session, select, store_error, Caller, Serve};
use crate::actors::ledger::{CompleteExec, RecordExec};
use crate::protocol::*;
use crate::store::exec::{ExecCompletion, Outcome};
use crate::store::prompts;
use crate::store::prompts::NewPrompt;
use crate::store::sql::args;
use crate::{Corral, CorralError};

/// A prompt by its id or a unique id prefix.
pub(crate) fn resolve_prompt(corral: &Corral, selector: &str) -> Result<prompts::Prompt, RpcError> {
    let selector = selector.trim();
    let found = corral
        .read(|c| {
            c.rows(
                "SELECT id FROM prompts WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 11",
                args![selector, format!("{selector}\u{7f}")],
                |row| row.get::<String>(0),
            )
        })
        .map_err(store_error)?;
    let id = select("prompt", selector, found, |id| id.as_str(), |_| None)?;
    corral
        .read(|c| prompts::prompt(c, &id))
        .map_err(store_error)?
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, format!("No prompt matches '{selector}'")))
}

/// The `exec` a `prompt.send` asks the daemon to record, checked before anything else (a
/// refused one is not recorded, and the error says nothing of it: the client records it).
pub(super) fn exec_to_record(
    caller: &Caller,
    params: &Value,
) -> Result<Option<ExecRecord>, RpcError> {
    let Some(value) = params.get("exec").filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    let record: ExecRecord = serde_json::from_value(value.clone())
        .map_err(|error| RpcError::new(code::INVALID_PARAMS, format!("exec: {error}")))?;
    super::execs::claim(caller, record).map(Some)
}

/// `prompt.send` with the caller's exec: its start is handed to the ledger before the prompt
/// (so it commits before it, or in the same batch: no queued prompt without its sender's
/// row), its end is committed before the answer (exit 0 with a prompt, 1 with an error), so
/// that the client exits knowing its row is complete. An error answer whose exec was recorded
/// says so (`data.exec_recorded`); one that does not was not recorded.
pub(super) async fn send_recording(
    caller: &Caller,
    params_value: &Value,
    record: ExecRecord,
) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let id = record.id.clone();
    let start = corral.write(RecordExec(record.into_new_exec(None)));
    let (started, answered) = tokio::join!(start, answer(caller, PromptSend::NAME, params_value));
    if let Err(error) = started {
        tracing::warn!(%error, exec = id, "a client's exec was not recorded");
        return Err(match answered {
            Ok(prompt) => RpcError::new(
                code::BUSY,
                format!(
                    "prompt {} is queued, but exec {id} could not be recorded: {error}",
                    prompt.get("id").and_then(Value::as_str).unwrap_or("-")
                ),
            ),
            Err(refused) => refused,
        });
    }
    let exit_code = if answered.is_ok() { 0 } else { 1 };
    let completion = ExecCompletion {
        completed_at: crate::store::now_ms(),
        exit_code,
        outcome: Outcome::of_exit_code(exit_code),
        signal: None,
    };
    if let Err(error) = corral
        .write(CompleteExec {
            id: id.clone(),
            completion,
        })
        .await
    {
        // Left open: `monitor prune` closes it as lost once its process is gone.
        tracing::warn!(%error, exec = id, "a client's exec end was not recorded");
    }
    answered.map_err(|mut refused| {
        let mut data = match refused.data.take() {
            Some(Value::Object(data)) => data,
            Some(other) => serde_json::Map::from_iter([("data".to_string(), other)]),
            None => serde_json::Map::new(),
        };
        data.insert("exec_recorded".into(), Value::Bool(true));
        refused.data = Some(Value::Object(data));
        refused
    })
}

impl Serve for PromptSend {
    async fn serve(caller: &Caller, p: SendParams) -> Result<Prompt, RpcError> {
        let context = &caller.context;
        let corral = &context.corral;
        if context.is_shutting_down() {
            return Err(RpcError::new(code::BUSY, "the daemon is shutting down"));
        }
        // The session and its project as the check read them (judged by id: the selector
        // was pinned), else read now.
        let judged = caller.take_judged();
        let session = match judged.session(&p.session) {
            Some(session) => session.clone(),
            None => resolve_session(corral, &p.session)?,
        };
        let project = session
            .project_id
            .as_deref()
            .and_then(|id| judged.project(id))
            .cloned();
        let sender = caller.exec_id.borrow().clone();
        let enqueued = corral
            .send_to(
                session,
                project,
                NewPrompt {
                    // The session's, filled in by `send_to`.
                    session_id: String::new(),
                    text: p.text,
                    images: p.images,
                    read_only: p.read_only,
                    policy: p.policy,
                    sender_exec_id: sender,
                    // Checked in the enqueue's own transaction: a take-over cannot slip in
                    // between the check and the queueing.
                    driver_generation: p.generation,
                },
            )
            .await;
        match enqueued {
            Ok(enqueued) => Ok((&enqueued.prompt).into()),
            Err(CorralError::Superseded(claim)) => {
                let by = match (&claim.exec_id, &claim.last_exec_id) {
                    (Some(exec), _) => format!("superseded by exec {exec}"),
                    (None, Some(last)) => format!("superseded by exec {last} (since released)"),
                    (None, None) => format!(
                        "superseded: the driver claim is at generation {}",
                        claim.generation
                    ),
                };
                Err(RpcError::new(code::SUPERSEDED, by)
                    .with_data(json!({ "driver": Claim::from(&claim) })))
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// `prompt.cancel {target}`: a prompt, or a session (its running prompt and everything
/// queued on it).
impl Serve for PromptCancel {
    async fn serve(caller: &Caller, p: CancelParams) -> Result<CancelResult, RpcError> {
        let corral = caller.corral();
        let target = p.target.as_str();
        let prompts = match resolve_prompt(corral, target) {
            Ok(prompt) => vec![prompt],
            Err(error) if error.code == code::NOT_FOUND => {
                let session = resolve_session(corral, target)?;
                let prompts = corral
                    .read(|c| prompts::prompts_of(c, &session.id))
                    .map_err(store_error)?;
                prompts
                    .into_iter()
                    .filter(|p| !p.status.is_final())
                    .collect()
            }
            Err(error) => return Err(error),
        };
        let mut cancelled = Vec::new();
        for prompt in prompts {
            let found = corral.cancel(&prompt.id).await?;
            cancelled.push(Cancelled {
                prompt: prompt.id,
                found: (&found).into(),
            });
        }
        Ok(CancelResult { cancelled })
    }
}

impl Serve for PromptWait {
    async fn serve(caller: &Caller, p: PromptSelector) -> Result<Prompt, RpcError> {
        let corral = caller.corral();
        let prompt = resolve_prompt(corral, &p.prompt)?;
        Ok((&corral.wait_prompt(&prompt.id).await?).into())
    }
}
