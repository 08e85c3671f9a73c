//! `corral session new|list|show|rename|archive`: agent conversations in a project.
//!
//! Every subcommand is one daemon call (`session.*`, plus `project.list` to name projects in
//! the listing); `--json` prints the method's result as it is. `list` and `show` only look:
//! with no daemon running they read the store directly (same output) and start none.

use std::collections::HashMap;

use serde_json::Value;

use super::remote::{self, cut, first_line, one_line, print_json, short_ids, text, time};
use super::{CliError, Context, Exit};
use crate::protocol::{
    ProjectList, ProjectListParams, SessionArchive, SessionArchiveParams, SessionList,
    SessionListParams, SessionNew, SessionNewParams, SessionRename, SessionRenameParams,
    SessionSelector, SessionShow,
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
    New(NewArgs),
    /// The sessions (archived ones with --all).
    List(ListArgs),
    /// One session: its record, its prompts and its driver.
    Show(ShowArgs),
    /// Give a session a title (a title you set is never replaced by a generated one).
    Rename(RenameArgs),
    /// Archive a session.
    Archive(ShowArgs),
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
    /// A title (else the agent proposes one with its first answer).
    #[arg(long, value_name = "TITLE")]
    pub title: Option<String>,
    /// The task this session works on.
    #[arg(long, value_name = "KEY")]
    pub task: Option<String>,
    /// The wave (a named batch of sessions) it belongs to.
    #[arg(long, value_name = "WAVE")]
    pub wave: Option<String>,
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
    // A change: through the daemon, which is started when none runs.
    let (session, as_json) = match &args.action {
        SessionAction::List(list) => return self::list(context, list).await,
        SessionAction::Show(show) => return self::show(context, show).await,
        SessionAction::New(new) => {
            let params = SessionNewParams {
                project: new.project.clone(),
                engine: new.engine.clone(),
                model: new.model.clone(),
                reasoning_effort: new.effort.clone(),
                title: new.title.clone(),
                task: new.task.clone(),
                wave: new.wave.clone(),
                ..SessionNewParams::default()
            };
            let mut client = remote::connect(context).await?;
            let session = remote::ask_json::<SessionNew>(&mut client, &params).await?;
            (session, new.json)
        }
        SessionAction::Rename(rename) => {
            let params = SessionRenameParams {
                session: rename.session.clone(),
                title: rename.title.clone(),
            };
            let mut client = remote::connect(context).await?;
            let session = remote::ask_json::<SessionRename>(&mut client, &params).await?;
            (session, rename.json)
        }
        SessionAction::Archive(archive) => {
            let params = SessionArchiveParams {
                session: archive.session.clone(),
                discard_changes: None,
            };
            let mut client = remote::connect(context).await?;
            let session = remote::ask_json::<SessionArchive>(&mut client, &params).await?;
            (session, archive.json)
        }
    };
    if as_json {
        print_json(&session);
        return Ok(Exit::success());
    }
    match &args.action {
        SessionAction::New(_) => println!("{}", text(&session, "id")),
        SessionAction::Rename(_) => println!(
            "session {} is now titled '{}'",
            text(&session, "id"),
            text(&session, "title")
        ),
        _ => println!("archived session {}", text(&session, "id")),
    }
    Ok(Exit::success())
}

async fn list(context: &Context, list: &ListArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let params = SessionListParams {
        all: Some(list.all),
        project: list.project.clone(),
    };
    let sessions = source.ask_json::<SessionList>(&params).await?;
    if list.json {
        print_json(&sessions);
        return Ok(Exit::success());
    }
    let projects = source
        .ask_json::<ProjectList>(&ProjectListParams { all: Some(true) })
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default();
    print_list(
        context,
        sessions.as_array().map(Vec::as_slice).unwrap_or(&[]),
        &projects,
    );
    Ok(Exit::success())
}

async fn show(context: &Context, show: &ShowArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let shown = source
        .ask_json::<SessionShow>(&SessionSelector::new(&show.session))
        .await?;
    if show.json {
        print_json(&shown);
    } else {
        print_shown(context, &shown);
    }
    Ok(Exit::success())
}

fn print_list(context: &Context, sessions: &[Value], projects: &[Value]) {
    if sessions.is_empty() {
        println!("(no sessions; open one with `corral session new PROJECT`)");
        return;
    }
    let short = short_ids(context, IdKind::Session, sessions, "id");
    let width = short.width(sessions.iter().map(|session| text(session, "id")));
    let names: HashMap<&str, &str> = projects
        .iter()
        .map(|project| (text(project, "id"), text(project, "name")))
        .collect();
    println!(
        "{:<width$}  {:<16}  {:<8}  {:<19}  TITLE",
        "ID", "PROJECT", "ENGINE", "CREATED (UTC)"
    );
    for session in sessions {
        let project = names
            .get(text(session, "project_id"))
            .copied()
            .unwrap_or("-");
        let mut title = cut(&one_line(text(session, "title")), 60);
        if session.get("archived_at").is_some_and(|at| !at.is_null()) {
            title.push_str(" (archived)");
        }
        println!(
            "{:<width$}  {:<16}  {:<8}  {:<19}  {}",
            short.get(text(session, "id")),
            project,
            text(session, "engine"),
            time(session, "created_at"),
            title
        );
    }
}

fn print_shown(context: &Context, shown: &Value) {
    let session = &shown["session"];
    let title = match session.get("title_source").and_then(Value::as_str) {
        Some(source) => format!("{} ({source})", text(session, "title")),
        None => text(session, "title").to_string(),
    };
    println!("id:        {}", text(session, "id"));
    println!("title:     {title}");
    println!("project:   {}", text(session, "project_id"));
    println!("engine:    {}", text(session, "engine"));
    println!("model:     {}", text(session, "model"));
    println!("effort:    {}", text(session, "reasoning_effort"));
    println!("thread:    {}", text(session, "thread_id"));
    println!("task:      {}", text(session, "task"));
    println!("wave:      {}", text(session, "wave_id"));
    println!("created:   {} UTC", time(session, "created_at"));
    println!("archived:  {}", time(session, "archived_at"));
    println!(
        "events:    {}",
        session["last_event_seq"].as_i64().unwrap_or(0)
    );
    let driver = &shown["driver"];
    match driver.get("exec_id").and_then(Value::as_str) {
        Some(exec) => println!(
            "driver:    exec {exec} (generation {})",
            driver["generation"].as_i64().unwrap_or(0)
        ),
        None => println!("driver:    none"),
    }
    let prompts = shown["prompts"].as_array().cloned().unwrap_or_default();
    println!("prompts:   {}", prompts.len());
    let short = short_ids(context, IdKind::Prompt, &prompts, "id");
    let width = short.width(prompts.iter().map(|prompt| text(prompt, "id")));
    for prompt in &prompts {
        println!(
            "  {:<width$}  {:<9}  {}",
            short.get(text(prompt, "id")),
            text(prompt, "status"),
            cut(first_line(text(prompt, "text")), 70)
        );
    }
}
