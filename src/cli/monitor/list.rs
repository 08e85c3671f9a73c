//! `corral monitor list`: the exec history, newest first, filtered and paged by keyset.

use std::path::PathBuf;

use super::{print_json, print_table, repo_scope};
use crate::cli::{CliError, Context, Exit};
use crate::store::exec::{Cursor, Outcome, OutcomeFilter};
use crate::store::overview::{self, ExecQuery, PageError};
use crate::store::select::{IdKind, ShortIds};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutcomeArg {
    Succeeded,
    Failed,
    Interrupted,
    Lost,
    /// Not recorded: still running, or never completed.
    Unknown,
}

impl From<OutcomeArg> for OutcomeFilter {
    fn from(arg: OutcomeArg) -> Self {
        match arg {
            OutcomeArg::Succeeded => OutcomeFilter::Is(Outcome::Succeeded),
            OutcomeArg::Failed => OutcomeFilter::Is(Outcome::Failed),
            OutcomeArg::Interrupted => OutcomeFilter::Is(Outcome::Interrupted),
            OutcomeArg::Lost => OutcomeFilter::Is(Outcome::Lost),
            OutcomeArg::Unknown => OutcomeFilter::Unknown,
        }
    }
}

fn parse_cursor(text: &str) -> Result<Cursor, String> {
    Cursor::decode(text)
        .ok_or_else(|| "not a cursor printed as `next` by `corral monitor list --json`".into())
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only children of this exec (full id).
    #[arg(long, value_name = "EXEC")]
    pub parent: Option<String>,
    /// Only execs made for this session (its agent's own commands).
    #[arg(long, value_name = "SESSION")]
    pub caller: Option<String>,
    #[arg(long, value_enum)]
    pub outcome: Option<OutcomeArg>,
    /// Case-insensitive text in the command line; `%` and `_` match themselves.
    #[arg(long, value_name = "TEXT")]
    pub search: Option<String>,
    /// Only execs made in this repository.
    #[arg(long, value_name = "PATH", conflicts_with = "all")]
    pub repo: Option<PathBuf>,
    /// Every repository (default: the current one, or none when outside one).
    #[arg(long)]
    pub all: bool,
    /// Only execs of sessions working on this task key.
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// Only execs of sessions in this wave (a name, or an id when names clash).
    #[arg(long, value_name = "WAVE")]
    pub wave: Option<String>,
    /// Entries per page.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// Continue after this cursor (the `next` of the previous page).
    #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
    pub after: Option<Cursor>,
    /// Print the page as JSON: {"entries":[…],"next":CURSOR|null}.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(context: &Context, args: &ListArgs) -> Result<Exit, CliError> {
    let connection = context.reader()?;
    let query = ExecQuery {
        parent: args.parent.clone(),
        caller: args.caller.clone(),
        outcome: args.outcome.map(OutcomeFilter::from),
        search: args.search.clone(),
        repo: repo_scope(args.all, args.repo.as_deref())?,
        task: args.task.clone(),
        wave: args.wave.clone(),
        after: args.after.clone(),
        limit: args.limit as usize,
    };
    // The same read as the daemon's `execs.list` (`store::overview`).
    let page = overview::exec_page(&connection, &query).map_err(|error| match error {
        PageError::Store(error) => CliError::from(error),
        refused => CliError::failure(refused.to_string()),
    })?;
    if args.json {
        print_json(&page);
    } else {
        let ids = page.entries.iter().map(|exec| exec.id.as_str());
        print_table(
            &page.entries,
            &ShortIds::of(Some(&connection), IdKind::Exec, ids)?,
        );
        if let Some(next) = &page.next {
            println!("(more: --after {next})");
        }
    }
    Ok(Exit::success())
}
