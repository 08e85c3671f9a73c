//! `corral history SESSION`: a session's prompts, oldest first, each with its status, its
//! attempts, its answer or error, and the engine runs it took; a worktree session's branch,
//! base and worktree under the header. Through the daemon when one runs, else read from the
//! store directly; it never starts one.

use serde_json::Value;

use super::monitor::format_duration;
use super::remote::{self, cut, first_line, one_line, print_json, text, time};
use super::{CliError, Context, Exit};
use crate::protocol::{History, SessionSelector};

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
        .ask_json::<History>(&SessionSelector::new(&args.session))
        .await?;
    if args.json {
        print_json(&history);
        return Ok(Exit::success());
    }
    let session = &history["session"];
    println!(
        "session {}  {}  ({})",
        text(session, "id"),
        text(session, "title"),
        text(session, "engine")
    );
    if let Some(line) = super::session::worktree::history_line(session) {
        println!("{line}");
    }
    let prompts = history["prompts"].as_array().cloned().unwrap_or_default();
    let runs = history["runs"].as_array().cloned().unwrap_or_default();
    if prompts.is_empty() {
        println!(
            "(no prompts yet; send one with `corral send {} …`)",
            text(session, "id")
        );
    }
    for prompt in &prompts {
        println!();
        // A prompt done with refusals is not the whole job: it says so beside its status.
        let denied = match prompt["denied"].as_i64().unwrap_or(0) {
            0 => String::new(),
            denied => format!(" · denied: {denied}"),
        };
        println!(
            "prompt {}  {}{denied}  attempts {}  sent {} UTC",
            text(prompt, "id"),
            text(prompt, "status"),
            prompt["attempts"].as_i64().unwrap_or(0),
            time(prompt, "created_at"),
        );
        println!(
            "  > {}",
            cut(&one_line(first_line(text(prompt, "text"))), 100)
        );
        if let Some(answer) = prompt.get("answer").and_then(Value::as_str) {
            for line in answer.trim_end().lines() {
                println!("  {line}");
            }
        }
        if let Some(error) = prompt.get("error").and_then(Value::as_str) {
            println!("  error: {}", one_line(error));
        }
        let id = text(prompt, "id");
        for run in runs.iter().filter(|run| text(run, "prompt_id") == id) {
            println!("  {}", run_line(run));
        }
    }
    Ok(Exit::success())
}

/// `run N  STATUS  exit E  1.2s  CLASS -> DECISION`.
fn run_line(run: &Value) -> String {
    let mut line = format!(
        "run {}  {}",
        run["attempt"].as_i64().unwrap_or(0),
        text(run, "status")
    );
    match (
        run["exit_code"].as_i64(),
        run.get("signal").and_then(Value::as_str),
    ) {
        (_, Some(signal)) => line.push_str(&format!("  signal {signal}")),
        (Some(code), None) => line.push_str(&format!("  exit {code}")),
        (None, None) => {}
    }
    if let (Some(start), Some(end)) = (run["started_at"].as_i64(), run["ended_at"].as_i64()) {
        line.push_str(&format!("  {}", format_duration(end - start)));
    }
    if let Some(class) = run.get("failure_class").and_then(Value::as_str) {
        line.push_str(&format!("  {class}"));
        if let Some(decision) = run.get("retry_decision").and_then(Value::as_str) {
            line.push_str(&format!(" -> {decision}"));
        }
    }
    if let Some(error) = run.get("error").and_then(Value::as_str) {
        line.push_str(&format!("  ({})", cut(&one_line(error), 100)));
    }
    line
}
