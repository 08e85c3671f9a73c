//! `corral pause` and `corral resume` (#35): stop new work in a scope — a session, a project
//! (`--project`), an execution group (`--group`) or everything (`--all`) — and let it go on.
//!
//! A paused scope starts no new run: its queued prompts wait, and a prompt of it waiting for a
//! slot or a retry goes back to the head of its queue. A run under way goes on to its end
//! unless `--now`, which interrupts it (its prompt goes back to the head too). Pauses are
//! stored: they outlast a daemon's restart. `pause` with nothing named lists the pauses in
//! force (it only looks: with no daemon running it reads the store and starts none).

use super::remote::{self, print_json, time_of};
use super::{CliError, Context, Exit};
use crate::protocol::{NoParams, PauseList, PauseParams, PauseTarget, PauseWork, ResumeWork};
use crate::store::pauses::Pause;

/// What to pause or resume: one of these.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// A session: its id, title, or a unique id prefix.
    #[arg(conflicts_with_all = ["project", "group", "all"])]
    pub session: Option<String>,
    /// A project: its id, name, or a unique id prefix.
    #[arg(long, value_name = "PROJECT", conflicts_with_all = ["group", "all"])]
    pub project: Option<String>,
    /// An execution group.
    #[arg(long, value_name = "GROUP", conflicts_with = "all")]
    pub group: Option<String>,
    /// Everything.
    #[arg(long)]
    pub all: bool,
}

impl TargetArgs {
    fn named(&self) -> bool {
        self.session.is_some() || self.project.is_some() || self.group.is_some() || self.all
    }

    fn params(&self) -> PauseTarget {
        PauseTarget {
            all: self.all,
            project: self.project.clone(),
            group: self.group.clone(),
            session: self.session.clone(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Interrupt what runs in the scope too; each prompt goes back to the head of its queue.
    #[arg(long)]
    pub now: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["session", "project", "group", "all"])))]
pub struct ResumeArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl PauseArgs {
    /// Whether it only looks (see `Command::inspects`): the list, with nothing named.
    pub fn inspects(&self) -> bool {
        !self.target.named()
    }
}

pub async fn pause(context: &Context, args: &PauseArgs) -> Result<Exit, CliError> {
    if !args.target.named() {
        if args.now {
            return Err(CliError::usage(
                "--now needs what to pause: SESSION, --project, --group or --all",
            ));
        }
        let mut source = remote::inspect(context).await?;
        let pauses = source.ask_answered::<PauseList>(&NoParams {}).await?;
        if args.json {
            print_json(&pauses.said);
        } else if pauses.result.is_empty() {
            println!("nothing is paused (corral pause SESSION|--project P|--group G|--all)");
        } else {
            print_pauses(&pauses.result);
        }
        return Ok(Exit::success());
    }
    let params = PauseParams {
        target: args.target.params(),
        now: args.now,
    };
    let mut client = remote::connect(context).await?;
    let paused = remote::ask_answered::<PauseWork>(&mut client, &params).await?;
    if args.json {
        print_json(&paused.said);
    } else {
        let pause = &paused.result.pause;
        let now = if pause.hard {
            "; what ran in it was interrupted and goes back to its queue"
        } else {
            "; what runs goes on to its end"
        };
        println!("paused {}{now}", pause.describe());
    }
    Ok(Exit::success())
}

pub async fn resume(context: &Context, args: &ResumeArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let resumed = remote::ask_answered::<ResumeWork>(&mut client, &args.target.params()).await?;
    if args.json {
        print_json(&resumed.said);
        return Ok(Exit::success());
    }
    let result = &resumed.result;
    if result.lifted {
        println!("resumed; {} prompt(s) started", result.started.len());
    } else {
        println!("that was not paused");
    }
    if !result.pauses.is_empty() {
        println!("still paused:");
        print_pauses(&result.pauses);
    }
    Ok(Exit::success())
}

fn print_pauses(pauses: &[Pause]) {
    for pause in pauses {
        let now = if pause.hard { "  --now" } else { "" };
        println!(
            "{}  since {}{now}",
            pause.describe(),
            time_of(Some(pause.paused_at))
        );
    }
}
