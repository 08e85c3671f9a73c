//! `corral wait [PROMPT|SESSION|--all] [--timeout D]`: blocks until what it names has ended —
//! a prompt; every prompt a session has queued or running now; with `--all`, every prompt of
//! the home queued or running now — and says how in its exit code:
//!
//! | exit | what ended |
//! |---|---|
//! | 0 | every prompt done |
//! | 1 | a prompt failed (or the daemon could not be asked) |
//! | 2 | usage |
//! | 4 | a prompt was cancelled, none failed |
//! | 124 | `--timeout` ran out first (as `timeout(1)` says it); the rest still runs |
//!
//! Prompts sent after it started are not waited for. It waits through the daemon
//! (`prompt.wait`), one prompt after another: the slowest decides.

use std::time::Duration;

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
use crate::client::ClientError;
use crate::protocol::prompts::Prompt;
use crate::protocol::{
    code, History, PromptSelector, PromptWait, SessionList, SessionListParams, SessionSelector,
};
use crate::store::prompts::PromptStatus;

/// The exit code of a wait some of whose prompts were cancelled (and none failed).
pub const CANCELLED: i32 = 4;

/// The exit code of a wait whose `--timeout` ran out.
pub const TIMED_OUT: i32 = 124;

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// A prompt (its id or a unique id prefix), or a session (its id, title, or a unique id
    /// prefix): every prompt it has queued or running now.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub target: Option<String>,
    /// Every prompt of the home queued or running now.
    #[arg(long)]
    pub all: bool,
    /// Give up after this long: `90`, `90s`, `500ms`, `5m`, `2h` (exit 124).
    #[arg(long, value_parser = crate::clock::parse_duration)]
    pub timeout: Option<Duration>,
    /// Print the prompts as they ended, as JSON (one array).
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &WaitArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let waiting = async {
        let mut ended: Vec<Prompt> = Vec::new();
        let pending = match &args.target {
            // A session first: a short id prefix may name a session and a prompt of it.
            Some(target) => match pending_of(&mut client, target).await? {
                Some(pending) => pending,
                None => match wait_prompt(&mut client, target).await? {
                    Some(prompt) => {
                        ended.push(prompt);
                        Vec::new()
                    }
                    None => {
                        return Err(CliError::failure(format!(
                            "no session or prompt is named '{target}'"
                        )))
                    }
                },
            },
            None => {
                let sessions =
                    remote::ask::<SessionList>(&mut client, &SessionListParams::default()).await?;
                let mut pending = Vec::new();
                for session in sessions {
                    pending.extend(
                        pending_of(&mut client, &session.id)
                            .await?
                            .unwrap_or_default(),
                    );
                }
                pending
            }
        };
        for id in pending {
            if let Some(prompt) = wait_prompt(&mut client, &id).await? {
                ended.push(prompt);
            }
        }
        Ok::<_, CliError>(ended)
    };
    let ended = match args.timeout {
        Some(limit) => match tokio::time::timeout(limit, waiting).await {
            Ok(ended) => ended?,
            Err(_) => {
                return Err(CliError {
                    code: TIMED_OUT,
                    message: Some(format!(
                        "timed out after {}: what it waits for still runs",
                        said(limit)
                    )),
                })
            }
        },
        None => waiting.await?,
    };
    if args.json {
        print_json(&serde_json::to_value(&ended).unwrap_or_default());
    } else {
        for prompt in &ended {
            println!("{} {}", prompt.id, prompt.status.as_str());
        }
    }
    let failed = ended.iter().any(|p| p.status == PromptStatus::Failed);
    let cancelled = ended.iter().any(|p| p.status == PromptStatus::Cancelled);
    Ok(match (failed, cancelled) {
        (true, _) => Exit::code(1),
        (false, true) => Exit::code(CANCELLED),
        _ => Exit::success(),
    })
}

/// Waits for prompt `selector` to end: `None` when no prompt is named so.
async fn wait_prompt(
    client: &mut crate::client::Client,
    selector: &str,
) -> Result<Option<Prompt>, CliError> {
    let params = PromptSelector {
        prompt: selector.to_string(),
    };
    match client.call::<PromptWait>(&params).await {
        Ok(prompt) => Ok(Some(prompt)),
        Err(ClientError::Rpc(error)) if error.code == code::NOT_FOUND => Ok(None),
        Err(error) => Err(remote::failure(error)),
    }
}

/// The prompts session `selector` has queued or running now, oldest first: `None` when no
/// session is named so.
async fn pending_of(
    client: &mut crate::client::Client,
    selector: &str,
) -> Result<Option<Vec<String>>, CliError> {
    let history = match client
        .call::<History>(&SessionSelector::new(selector))
        .await
    {
        Ok(history) => history,
        Err(ClientError::Rpc(error)) if error.code == code::NOT_FOUND => return Ok(None),
        Err(error) => return Err(remote::failure(error)),
    };
    Ok(Some(
        history
            .prompts
            .into_iter()
            .filter(|prompt| matches!(prompt.status, PromptStatus::Queued | PromptStatus::Running))
            .map(|prompt| prompt.id)
            .collect(),
    ))
}

/// A duration as a person reads it (`1.5 s`).
fn said(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}
