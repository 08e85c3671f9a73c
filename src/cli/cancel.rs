//! `corral cancel PROMPT|SESSION`: cancels a prompt, or everything running or queued on a
//! session. A queued prompt is removed at once; a running one has its engine's whole process
//! group ended.

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
use crate::protocol::prompts::{CancelFound, Cancelled};
use crate::protocol::{CancelParams, PromptCancel};

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// A prompt (its id or a unique id prefix), or a session (its id, title, or a unique id
    /// prefix).
    pub target: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &CancelArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let params = CancelParams {
        target: args.target.clone(),
    };
    let result = remote::ask_answered::<PromptCancel>(&mut client, &params).await?;
    if args.json {
        print_json(&result.said);
        return Ok(Exit::success());
    }
    let cancelled = &result.result.cancelled;
    if cancelled.is_empty() {
        println!("nothing runs or waits there: no prompt was cancelled");
    }
    for Cancelled { prompt, found } in cancelled {
        match found {
            CancelFound::Dequeued { .. } => println!("{prompt} cancelled (it was queued)"),
            CancelFound::Running { .. } => println!("{prompt} cancelled (its run is being ended)"),
            CancelFound::Finished { status } => {
                println!("{prompt} had already ended ({})", status.as_str())
            }
        }
    }
    Ok(Exit::success())
}
