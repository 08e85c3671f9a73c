//! `corral compact SESSION`: asks the engine to compact a codex-app-server session's thread
//! context, and records what was compacted on the session. A thread whose rollout is missing
//! is reset instead (the next prompt starts a new thread), and the command says so.

use crate::protocol::{SessionCompact, SessionSelector};

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};

#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// The session (its id, title, or a unique id prefix).
    pub session: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &CompactArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let params = SessionSelector::new(&args.session);
    let answer = remote::ask_answered::<SessionCompact>(&mut client, &params).await?;
    if args.json {
        print_json(&answer.said);
        return Ok(Exit::success());
    }
    let compacted = answer.result;
    println!(
        "compacted {} exchange(s), {} character(s): {}",
        compacted.compacted.messages, compacted.compacted.characters, compacted.note
    );
    Ok(Exit::success())
}
