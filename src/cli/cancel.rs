//! `corral cancel PROMPT|SESSION`: cancels a prompt, or everything running or queued on a
//! session. A queued prompt is removed at once; a running one has its engine's whole process
//! group ended.

use serde_json::Value;

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
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
    let result = remote::ask_json::<PromptCancel>(&mut client, &params).await?;
    if args.json {
        print_json(&result);
        return Ok(Exit::success());
    }
    let cancelled = result["cancelled"].as_array().cloned().unwrap_or_default();
    if cancelled.is_empty() {
        println!("nothing runs or waits there: no prompt was cancelled");
    }
    for item in &cancelled {
        let prompt = remote::text(item, "prompt");
        let found = &item["found"];
        match found.get("cancel").and_then(Value::as_str) {
            Some("dequeued") => println!("{prompt} cancelled (it was queued)"),
            Some("running") => println!("{prompt} cancelled (its run is being ended)"),
            Some("finished") => println!(
                "{prompt} had already ended ({})",
                remote::text(found, "status")
            ),
            _ => println!("{prompt} {found}"),
        }
    }
    Ok(Exit::success())
}
