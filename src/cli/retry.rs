//! `corral retry PROMPT` and `corral prompt edit PROMPT TEXT` (#35): a failed or cancelled
//! prompt runs again in place — the same prompt, at the head of its session's queue, its runs'
//! history kept, optionally with a new text — and a queued prompt's text is changed before it
//! starts. Each is one daemon call (`prompt.retry`, `prompt.edit`); `--json` prints its
//! answer as it is.

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
use crate::protocol::{EditParams, PromptEdit, PromptRetry, RetryParams};

#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// The prompt: its id or a unique id prefix.
    pub prompt: String,
    /// A new text for it (default: the text it had).
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// Print the prompt as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PromptArgs {
    #[command(subcommand)]
    pub action: PromptAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum PromptAction {
    /// Change the text of a prompt that is still queued.
    Edit(EditArgs),
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// The prompt: its id or a unique id prefix.
    pub prompt: String,
    /// Its new text.
    pub text: String,
    /// Print the prompt as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn retry(context: &Context, args: &RetryArgs) -> Result<Exit, CliError> {
    let params = RetryParams {
        prompt: args.prompt.clone(),
        text: args.text.clone(),
    };
    let mut client = remote::connect(context).await?;
    let again = remote::ask_answered::<PromptRetry>(&mut client, &params).await?;
    if args.json {
        print_json(&again.said);
    } else {
        let prompt = &again.result;
        println!(
            "{} {} again, first in session {}",
            prompt.id,
            prompt.status.as_str(),
            prompt.session_id
        );
    }
    Ok(Exit::success())
}

pub async fn execute(context: &Context, args: &PromptArgs) -> Result<Exit, CliError> {
    match &args.action {
        PromptAction::Edit(edit) => {
            let params = EditParams {
                prompt: edit.prompt.clone(),
                text: edit.text.clone(),
            };
            let mut client = remote::connect(context).await?;
            let edited = remote::ask_answered::<PromptEdit>(&mut client, &params).await?;
            if edit.json {
                print_json(&edited.said);
            } else {
                println!("{} edited, still queued", edited.result.id);
            }
            Ok(Exit::success())
        }
    }
}
