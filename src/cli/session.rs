//! `corral session new|list|show|rename|archive|diff|merge|recreate`: agent conversations in
//! a project.
//!
//! Every subcommand is one daemon call (`session.*`, plus `project.list` to name projects in
//! the listing); `--json` prints the method's result as it is. `list` and `show` only look:
//! with no daemon running they read the store directly (same output) and start none. What is
//! about a session's git worktree (archive's report, diff, merge, recreate, the worktree's
//! lines in `show`) is in [`worktree`] (docs/worktrees.md).

pub mod worktree;

use std::collections::HashMap;

use super::remote::{self, cut, first_line, one_line, or_dash, print_json, short_ids_of, time_of};
use super::{CliError, Context, Exit};
use crate::protocol::projects::Project;
use crate::protocol::sessions::{Session, SessionShowResult};
use crate::protocol::{
    ProjectList, ProjectListParams, SessionList, SessionListParams, SessionNew, SessionNewParams,
    SessionRename, SessionRenameParams, SessionSelector, SessionShow,
};
use crate::store::select::IdKind;

#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    pub action: SessionAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum SessionAction {
    /// Open a session in a project; prints its id.
    New(Box<NewArgs>),
    /// The sessions (archived ones with --all).
    List(ListArgs),
    /// One session: its record, its prompts and its driver.
    Show(ShowArgs),
    /// Give a session a title (a title you set is never replaced by a generated one).
    Rename(RenameArgs),
    /// Archive a session; its worktree is removed when clean (its branch is kept).
    Archive(worktree::ArchiveArgs),
    /// A worktree session's changes against its base: commits and uncommitted files.
    Diff(worktree::DiffArgs),
    /// Merge a worktree session's branch (in corral's own scratch worktree, never in your
    /// checkout; refused when either side has uncommitted changes or the merge conflicts).
    Merge(worktree::MergeArgs),
    /// Make a worktree removed by hand again, on its branch.
    Recreate(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project: its id, name, or a unique id prefix.
    pub project: String,
    /// The engine (default: the project's, else codex).
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The reasoning effort passed to the engine.
    #[arg(long, value_name = "EFFORT")]
    pub effort: Option<String>,
    /// Its policy over the project's: read-only, workspace-write, ask, full (only where the
    /// project grants it).
    #[arg(long, value_name = "POLICY", value_parser = super::project::parse_policy)]
    pub policy: Option<crate::engine::Policy>,
    /// A title (else the agent proposes one with its first answer).
    #[arg(long, value_name = "TITLE")]
    pub title: Option<String>,
    /// The task this session works on.
    #[arg(long, value_name = "KEY")]
    pub task: Option<String>,
    /// The wave (a named batch of sessions) it belongs to.
    #[arg(long, value_name = "WAVE")]
    pub wave: Option<String>,
    /// A worktree project's session: its branch (default `corral/<title slug>-<short id>`;
    /// a branch that exists is checked out as it is).
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// A worktree project's session: the ref its branch starts from (default: the project's
    /// HEAD).
    #[arg(long, value_name = "REF")]
    pub base: Option<String>,
    /// Environment variables its engines get, over the project's.
    #[command(flatten)]
    pub env: super::project::EnvArgs,
    /// Print the new session as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this project's sessions.
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
    /// Archived sessions too.
    #[arg(long)]
    pub all: bool,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RenameArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The new title.
    pub title: String,
    /// Print the renamed session as JSON.
    #[arg(long)]
    pub json: bool,
}

impl SessionAction {
    /// Whether the subcommand only looks (and so never starts a daemon).
    pub fn inspects(&self) -> bool {
        matches!(self, SessionAction::List(_) | SessionAction::Show(_))
    }
}

pub async fn execute(context: &Context, args: &SessionArgs) -> Result<Exit, CliError> {
    match &args.action {
        SessionAction::List(list) => self::list(context, list).await,
        SessionAction::Show(show) => self::show(context, show).await,
        SessionAction::New(new) => self::new(context, new).await,
        SessionAction::Rename(rename) => self::rename(context, rename).await,
        SessionAction::Archive(archive) => worktree::archive(context, archive).await,
        SessionAction::Diff(diff) => worktree::diff(context, diff).await,
        SessionAction::Merge(merge) => worktree::merge(context, merge).await,
        SessionAction::Recreate(recreate) => worktree::recreate(context, recreate).await,
    }
}

/// Opens the session (and, in a worktree project, its worktree's row: the worktree itself is
/// made before the first prompt) and prints its id.
async fn new(context: &Context, new: &NewArgs) -> Result<Exit, CliError> {
    let params = SessionNewParams {
        project: new.project.clone(),
        engine: new.engine.clone(),
        model: new.model.clone(),
        reasoning_effort: new.effort.clone(),
        policy: new.policy,
        title: new.title.clone(),
        task: new.task.clone(),
        wave: new.wave.clone(),
        branch: new.branch.clone(),
        base: new.base.clone(),
        env: new.env.environment()?,
    };
    // A change: through the daemon, which is started when none runs.
    let mut client = remote::connect(context).await?;
    let session = remote::ask_answered::<SessionNew>(&mut client, &params).await?;
    if new.json {
        print_json(&session.said);
    } else {
        println!("{}", session.result.id);
    }
    Ok(Exit::success())
}

async fn rename(context: &Context, rename: &RenameArgs) -> Result<Exit, CliError> {
    let params = SessionRenameParams {
        session: rename.session.clone(),
        title: rename.title.clone(),
    };
    let mut client = remote::connect(context).await?;
    let session = remote::ask_answered::<SessionRename>(&mut client, &params).await?;
    if rename.json {
        print_json(&session.said);
    } else {
        println!(
            "session {} is now titled '{}'",
            session.result.id,
            or_dash(session.result.title.as_deref())
        );
    }
    Ok(Exit::success())
}

async fn list(context: &Context, list: &ListArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let params = SessionListParams {
        all: Some(list.all),
        project: list.project.clone(),
    };
    let sessions = source.ask_answered::<SessionList>(&params).await?;
    if list.json {
        print_json(&sessions.said);
        return Ok(Exit::success());
    }
    let projects = source
        .ask::<ProjectList>(&ProjectListParams { all: Some(true) })
        .await?;
    print_list(context, &sessions.result, &projects);
    Ok(Exit::success())
}

async fn show(context: &Context, show: &ShowArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let shown = source
        .ask_answered::<SessionShow>(&SessionSelector::new(&show.session))
        .await?;
    if show.json {
        print_json(&shown.said);
    } else {
        print_shown(context, &shown.result);
    }
    Ok(Exit::success())
}

fn print_list(context: &Context, sessions: &[Session], projects: &[Project]) {
    if sessions.is_empty() {
        println!("(no sessions; open one with `corral session new PROJECT`)");
        return;
    }
    let ids = sessions.iter().map(|session| session.id.as_str());
    let short = short_ids_of(context, IdKind::Session, ids.clone());
    let width = short.width(ids);
    let names: HashMap<&str, &str> = projects
        .iter()
        .map(|project| (project.id.as_str(), project.name.as_str()))
        .collect();
    // A BRANCH column only when a listed session has one (a worktree project's).
    let branches =
        worktree::BranchColumn::of(sessions.iter().map(|session| session.branch.as_deref()));
    println!(
        "{:<width$}  {:<16}  {:<8}  {:<19}  {}TITLE",
        "ID",
        "PROJECT",
        "ENGINE",
        "CREATED (UTC)",
        branches.header()
    );
    for session in sessions {
        let project = session
            .project_id
            .as_deref()
            .and_then(|id| names.get(id))
            .copied()
            .unwrap_or("-");
        let mut title = cut(&one_line(or_dash(session.title.as_deref())), 60);
        if session.archived_at.is_some() {
            title.push_str(" (archived)");
        }
        println!(
            "{:<width$}  {:<16}  {:<8}  {:<19}  {}{}",
            short.get(&session.id),
            project,
            session.engine.as_str(),
            time_of(Some(session.created_at)),
            branches.cell(session.branch.as_deref()),
            title
        );
    }
}

fn print_shown(context: &Context, shown: &SessionShowResult) {
    let detail = &shown.session;
    let session = &detail.session;
    let title = or_dash(session.title.as_deref());
    let title = match &session.title_source {
        Some(source) => format!("{title} ({source})"),
        None => title.to_string(),
    };
    println!("id:        {}", session.id);
    println!("title:     {title}");
    // The daemon's word for where it stands, as every surface shows it.
    if let Some(state) = &shown.state {
        println!(
            "state:     {} · {}",
            state.state.as_str(),
            one_line(&state.reason)
        );
    }
    if let Some(policy) = session.policy {
        println!("policy:    {}", policy.as_str());
    }
    println!("project:   {}", or_dash(session.project_id.as_deref()));
    println!("engine:    {}", session.engine.as_str());
    println!("model:     {}", or_dash(session.model.as_deref()));
    println!(
        "effort:    {}",
        or_dash(session.reasoning_effort.as_deref())
    );
    println!("thread:    {}", or_dash(session.thread_id.as_deref()));
    println!("task:      {}", or_dash(session.task.as_deref()));
    if !session.env.is_empty() {
        println!("env:       {}", session.env.describe());
    }
    println!("wave:      {}", or_dash(session.wave_id.as_deref()));
    for line in worktree::shown_lines(session) {
        println!("{line}");
    }
    println!("created:   {} UTC", time_of(Some(session.created_at)));
    println!("archived:  {}", time_of(session.archived_at));
    println!("events:    {}", session.last_event_seq);
    let driver = shown.driver.as_ref().and_then(|driver| {
        let exec = driver.exec_id.as_deref()?;
        Some((exec, driver.generation))
    });
    match driver {
        Some((exec, generation)) => {
            println!("driver:    exec {exec} (generation {generation})")
        }
        None => println!("driver:    none"),
    }
    let prompts = &shown.prompts;
    println!("prompts:   {}", prompts.len());
    let ids = prompts.iter().map(|prompt| prompt.id.as_str());
    let short = short_ids_of(context, IdKind::Prompt, ids.clone());
    let width = short.width(ids);
    for prompt in prompts {
        println!(
            "  {:<width$}  {:<9}  {}",
            short.get(&prompt.id),
            prompt.status.as_str(),
            cut(first_line(&prompt.text), 70)
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::worktree::{ArchiveArgs, DiffArgs, MergeArgs};
    use super::*;
    use crate::cli::{Cli, Command};

    fn action(words: &[&str]) -> SessionAction {
        let argv = ["corral", "session"].iter().chain(words);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Session(args) => args.action,
            other => panic!("not a session command: {other:?}"),
        }
    }

    fn refused(words: &[&str]) -> clap::error::ErrorKind {
        let argv = ["corral", "session"].iter().chain(words);
        Cli::try_parse_from(argv).unwrap_err().kind()
    }

    #[test]
    fn new_takes_a_branch_and_a_base() {
        let SessionAction::New(new) = action(&["new", "p", "--branch", "fix/x", "--base", "v1"])
        else {
            panic!("not new");
        };
        assert_eq!(
            (new.branch.as_deref(), new.base.as_deref()),
            (Some("fix/x"), Some("v1"))
        );
        let SessionAction::New(plain) = action(&["new", "p"]) else {
            panic!("not new");
        };
        assert!(plain.branch.is_none() && plain.base.is_none());
    }

    #[test]
    fn archive_discards_changes_only_when_told() {
        let SessionAction::Archive(ArchiveArgs {
            session,
            discard_changes,
            json,
        }) = action(&["archive", "s"])
        else {
            panic!("not archive");
        };
        assert_eq!(
            (session.as_str(), discard_changes, json),
            ("s", false, false)
        );
        let SessionAction::Archive(archive) = action(&["archive", "s", "--discard-changes"]) else {
            panic!("not archive");
        };
        assert!(archive.discard_changes);
        assert!(!action(&["archive", "s"]).inspects());
    }

    #[test]
    fn diff_merge_and_recreate_parse() {
        let SessionAction::Diff(DiffArgs { session, stat, .. }) = action(&["diff", "s", "--stat"])
        else {
            panic!("not diff");
        };
        assert_eq!((session.as_str(), stat), ("s", true));
        let SessionAction::Merge(MergeArgs {
            into, squash, json, ..
        }) = action(&["merge", "s", "--into", "main", "--squash", "--json"])
        else {
            panic!("not merge");
        };
        assert_eq!((into.as_deref(), squash, json), (Some("main"), true, true));
        let SessionAction::Merge(merge) = action(&["merge", "s"]) else {
            panic!("not merge");
        };
        assert!(merge.into.is_none() && !merge.squash);
        assert!(matches!(
            action(&["recreate", "s"]),
            SessionAction::Recreate(ShowArgs { .. })
        ));
        // None of them only looks: each needs the daemon (git runs there).
        for words in [&["diff", "s"][..], &["merge", "s"], &["recreate", "s"]] {
            assert!(!action(words).inspects(), "{words:?}");
        }
        assert_eq!(
            refused(&["merge", "s", "--into"]),
            clap::error::ErrorKind::InvalidValue
        );
        assert_eq!(
            refused(&["diff"]),
            clap::error::ErrorKind::MissingRequiredArgument
        );
    }
}
