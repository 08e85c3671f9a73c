//! `corral history SESSION`: a session's prompts, oldest first, each with its status, its
//! attempts, its answer or error, and the engine runs it took; a worktree session's branch,
//! base and worktree under the header. Through the daemon when one runs, else read from the
//! store directly; it never starts one.

use super::monitor::format_duration;
use super::remote::{self, cut, first_line, one_line, or_dash, print_json, time_of};
use super::{CliError, Context, Exit};
use crate::protocol::sessions::{HistoryResult, Run};
use crate::protocol::{History, SessionSelector};
use crate::store::prompts::PromptStatus;

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// Print `{session, prompts, runs}` as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &HistoryArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let history = source
        .ask_answered::<History>(&SessionSelector::new(&args.session))
        .await?;
    if args.json {
        print_json(&history.said);
        return Ok(Exit::success());
    }
    let HistoryResult {
        session,
        prompts,
        runs,
    } = history.result;
    println!(
        "session {}  {}  ({})",
        session.id,
        or_dash(session.title.as_deref()),
        session.engine
    );
    if let Some(line) = super::session::worktree::history_line(&session) {
        println!("{line}");
    }
    if prompts.is_empty() {
        println!(
            "(no prompts yet; send one with `corral send {} …`)",
            session.id
        );
    }
    for prompt in &prompts {
        println!();
        // A prompt done with refusals is not the whole job: it says so beside its status.
        let denied = match prompt.denied {
            0 => String::new(),
            denied => format!(" · denied: {denied}"),
        };
        println!(
            "prompt {}  {}{denied}  attempts {}  sent {} UTC",
            prompt.id,
            prompt.status.as_str(),
            prompt.attempts,
            time_of(Some(prompt.created_at)),
        );
        // What a queued one waits for besides its turn.
        if prompt.status == PromptStatus::Queued {
            if !prompt.after.is_empty() {
                let any = if prompt.after_any {
                    " (however they end)"
                } else {
                    ""
                };
                println!("  runs after {}{any}", prompt.after.join(", "));
            }
            if let Some(at) = prompt.due_at {
                println!("  due {}", crate::clock::utc_time(at));
            }
        }
        println!("  > {}", cut(&one_line(first_line(&prompt.text)), 100));
        if let Some(answer) = &prompt.answer {
            for line in answer.trim_end().lines() {
                println!("  {line}");
            }
        }
        if let Some(error) = &prompt.error {
            println!("  error: {}", one_line(error));
        }
        for run in runs.iter().filter(|run| run.prompt_id == prompt.id) {
            println!("  {}", run_line(run));
        }
    }
    Ok(Exit::success())
}

/// `run N  STATUS  exit E  1.2s  CLASS -> DECISION`.
fn run_line(run: &Run) -> String {
    let mut line = format!("run {}  {}", run.attempt, run.status.as_str());
    match (run.exit_code, &run.signal) {
        (_, Some(signal)) => line.push_str(&format!("  signal {signal}")),
        (Some(code), None) => line.push_str(&format!("  exit {code}")),
        (None, None) => {}
    }
    if let Some(end) = run.ended_at {
        line.push_str(&format!("  {}", format_duration(end - run.started_at)));
    }
    if let Some(class) = &run.failure_class {
        line.push_str(&format!("  {class}"));
        if let Some(decision) = &run.retry_decision {
            line.push_str(&format!(" -> {decision}"));
        }
    }
    if let Some(error) = &run.error {
        line.push_str(&format!("  ({})", cut(&one_line(error), 100)));
    }
    line
}
