//! Prompts: `prompt.send`, `prompt.cancel`, `prompt.wait`.

use serde_json::json;

use super::{resolve_session, select, store_error, Caller, Serve};
use crate::protocol::*;
use crate::store::prompts;
use crate::store::prompts::NewPrompt;
use crate::{Corral, CorralError};

/// A prompt by its id or a unique id prefix.
pub(crate) fn resolve_prompt(corral: &Corral, selector: &str) -> Result<prompts::Prompt, RpcError> {
    let selector = selector.trim();
    // Eleven: enough to say a prefix is ambiguous and name ten candidates.
    let found = corral
        .read(|c| prompts::ids_starting(c, selector, 11))
        .map_err(store_error)?;
    let id = select("prompt", selector, found, |id| id.as_str(), |_| None)?;
    corral
        .prompt(&id)?
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, format!("No prompt matches '{selector}'")))
}

impl Serve for PromptSend {
    async fn serve(caller: &Caller, p: SendParams) -> Result<Prompt, RpcError> {
        let context = &caller.context;
        let corral = &context.corral;
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
        let mut after: Vec<String> = Vec::with_capacity(p.after.len());
        for selector in &p.after {
            let id = resolve_prompt(corral, selector)?.id;
            if !after.contains(&id) {
                after.push(id);
            }
        }
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
                    after,
                    after_any: p.after_any,
                    due_at: p.due_at,
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
                let prompts = corral.prompts_of(&session.id)?;
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

impl Serve for PromptRetry {
    async fn serve(caller: &Caller, p: RetryParams) -> Result<Prompt, RpcError> {
        let corral = caller.corral();
        let prompt = resolve_prompt(corral, &p.prompt)?;
        Ok((&corral.retry(&prompt.id, p.text).await?).into())
    }
}

impl Serve for PromptEdit {
    async fn serve(caller: &Caller, p: EditParams) -> Result<Prompt, RpcError> {
        let corral = caller.corral();
        let prompt = resolve_prompt(corral, &p.prompt)?;
        Ok((&corral.edit_prompt(&prompt.id, p.text).await?).into())
    }
}
