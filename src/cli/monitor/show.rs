//! `corral monitor show ID_PREFIX`: one exec, found by a unique prefix of its id.

use super::{format_duration, format_time, print_json};
use crate::cli::{CliError, Context, Exit};
use crate::store::exec;

/// How many candidates an ambiguity error names.
const CANDIDATES: usize = 10;

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The exec's id or a unique prefix of it.
    pub id_prefix: String,
    /// Print the exec as JSON (the same object as a `monitor list --json` entry).
    #[arg(long)]
    pub json: bool,
}

pub fn execute(context: &Context, args: &ShowArgs) -> Result<Exit, CliError> {
    let connection = context.reader()?;
    let prefix = args.id_prefix.trim();
    if prefix.is_empty() {
        return Err(CliError::usage("the exec id prefix is empty"));
    }
    let mut matches = exec::find_by_prefix(&connection, prefix, CANDIDATES + 1)?;
    let exec = match matches.len() {
        0 => return Err(CliError::failure(format!("No exec matches '{prefix}'"))),
        1 => matches.remove(0),
        _ => {
            let mut candidates: Vec<String> = matches
                .iter()
                .take(CANDIDATES)
                .map(|exec| format!("{} {}", exec.id, exec.command_line()))
                .collect();
            if matches.len() > CANDIDATES {
                candidates.push("…".into());
            }
            return Err(CliError::failure(format!(
                "Ambiguous exec prefix '{prefix}': {}",
                candidates.join("; ")
            )));
        }
    };
    if args.json {
        print_json(&exec);
        return Ok(Exit::success());
    }
    let optional = |value: Option<String>| value.unwrap_or_else(|| "-".into());
    println!("id:        {}", exec.id);
    println!("command:   {}", exec.command_line());
    println!(
        "outcome:   {}",
        exec.outcome.as_deref().unwrap_or("unknown")
    );
    println!(
        "exit code: {}",
        optional(exec.exit_code.map(|c| c.to_string()))
    );
    println!("signal:    {}", optional(exec.signal.clone()));
    println!("started:   {} UTC", format_time(exec.started_at));
    println!(
        "duration:  {}",
        optional(
            exec.completed_at
                .map(|end| format_duration(end - exec.started_at))
        )
    );
    println!("cwd:       {}", optional(exec.cwd.clone()));
    println!("repo:      {}", optional(exec.repo.clone()));
    println!(
        "host:      {}",
        optional(exec.host.as_deref().map(exec::escape_controls))
    );
    println!(
        "pid:       {}",
        optional(exec.pid.map(|pid| pid.to_string()))
    );
    println!("parent:    {}", optional(exec.parent_exec_id.clone()));
    println!("trace:     {}", exec.trace_id);
    println!("caller:    {}", optional(exec.caller_session_id.clone()));
    println!("via agent: {}", exec.via_agent.unwrap_or(false));
    Ok(Exit::success())
}
