//! `corral steer SESSION TEXT…`: adds text to the turn running on a codex-app-server session
//! (`turn/steer`), without waiting for the turn to end.

use crate::protocol::{SessionSteer, SteerParams};

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};

#[derive(Debug, clap::Args)]
pub struct SteerArgs {
    /// The session (its id, title, or a unique id prefix).
    pub session: String,
    /// The text to add (words are joined by spaces).
    #[arg(required = true, trailing_var_arg = true)]
    pub text: Vec<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &SteerArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let params = SteerParams {
        session: args.session.clone(),
        text: args.text.join(" "),
    };
    let answer = remote::ask_answered::<SessionSteer>(&mut client, &params).await?;
    if args.json {
        print_json(&answer.said);
    } else {
        println!("steered the running turn of {}", args.session);
    }
    Ok(Exit::success())
}
