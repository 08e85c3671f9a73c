//! `corral project add|list|show|set|archive`: the working directories sessions run in.
//!
//! Every subcommand is one daemon call (`project.*`); `--json` prints its result as it is.
//! `list` and `show` only look: with no daemon running they read the store directly (same
//! output) and start none.
//!
//! A project's isolation (`--isolation worktree|shared`, docs/worktrees.md) is the daemon's
//! to decide by default; `add` only explains, in one note on stderr, a path in a git
//! repository that got `shared` (no usable git, or no commit yet).

use std::path::{Path, PathBuf};

use super::remote::{self, absolute, or_dash, print_json, time_of, Answered};
use super::{CliError, Context, Exit};
use crate::engine::Policy;
use crate::protocol::projects::Project;
use crate::protocol::{
    ProjectAdd, ProjectAddParams, ProjectArchive, ProjectArchiveParams, ProjectList,
    ProjectListParams, ProjectSelector, ProjectSet, ProjectSetParams, ProjectShow,
};
use crate::store::environment::Environment;
use crate::store::projects::AgentsScope;
use crate::store::select::IdKind;
use clap::ArgAction;

#[derive(Debug, clap::Args)]
pub struct ProjectArgs {
    #[command(subcommand)]
    pub action: ProjectAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ProjectAction {
    /// Add a project: a name for a working directory, with its engine and rules.
    Add(AddArgs),
    /// The projects (archived ones with --all).
    List(ListArgs),
    /// One project.
    Show(ShowArgs),
    /// Change a project's settings; only the options given change.
    Set(SetArgs),
    /// Archive a project (its sessions stay readable).
    Archive(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The project's name (a selector for it).
    pub name: String,
    /// Its working directory.
    pub path: PathBuf,
    /// The engine its sessions use unless told otherwise (codex, claude, opencode, command,
    /// fake).
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    /// The engine's model.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Run its engines without sandbox or approvals (the same as --policy full).
    #[arg(long)]
    pub full_access: bool,
    /// What its agents may do without asking: read-only, workspace-write (the default), ask
    /// (anything beyond workspace-write waits for `corral approve`), full.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// A remote project: its engines always run read-only.
    #[arg(long)]
    pub remote: bool,
    /// An execution group it belongs to (repeatable); projects sharing a locking group never
    /// run at once.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// House rules put before every prompt it sends.
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// Let background processes its engines start (a dev server) outlive their runs; by
    /// default a run ends with all of its processes. `corral status` lists what is kept.
    #[arg(long)]
    pub keep_background: bool,
    /// `worktree`: each session gets its own git worktree and branch, and sessions run in
    /// parallel; `shared`: one working tree, one session at a time. Default: worktree for a
    /// path in a git repository with a commit (git 2.17 or newer), else shared.
    #[arg(long, value_name = "worktree|shared", value_parser = ISOLATIONS)]
    pub isolation: Option<String>,
    /// Where its sessions' worktrees go (default: the `worktrees.dir` setting).
    #[arg(long, value_name = "DIR")]
    pub worktrees_dir: Option<PathBuf>,
    /// A command (`sh -c`) run in each new worktree before its first prompt (`npm ci`).
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,
    /// Pause the project when one of its prompts fails for good (`corral resume --project`
    /// lets its queue go on).
    #[arg(long)]
    pub pause_on_failure: bool,
    #[command(flatten)]
    pub env: EnvArgs,
    /// Print the new project as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Archived projects too.
    #[arg(long)]
    pub all: bool,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The project: its id, name, or a unique id prefix.
    pub project: String,
    /// Print the project as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The project: its id, name, or a unique id prefix.
    pub project: String,
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Run its engines without sandbox or approvals (the same as --policy full).
    #[arg(long, value_name = "true|false", action = ArgAction::Set)]
    pub full_access: Option<bool>,
    /// What its agents may do without asking: read-only, workspace-write, ask, full.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Which sessions its agents may reach through the daemon: `session` (their own, the
    /// default) or `project` (every session of this project).
    #[arg(long, value_name = "session|project", value_parser = ["session", "project"])]
    pub agents_scope: Option<String>,
    /// Remote: its engines always run read-only.
    #[arg(long, value_name = "true|false", action = ArgAction::Set)]
    pub remote: Option<bool>,
    /// Its execution groups (repeatable); replaces the list.
    #[arg(long = "group", value_name = "GROUP", conflicts_with = "no_groups")]
    pub groups: Vec<String>,
    /// Take it out of every execution group.
    #[arg(long)]
    pub no_groups: bool,
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// Let background processes its engines start outlive their runs.
    #[arg(long, value_name = "true|false", action = ArgAction::Set)]
    pub keep_background: Option<bool>,
    /// For its new sessions (sessions made before keep their directories).
    #[arg(long, value_name = "worktree|shared", value_parser = ISOLATIONS)]
    pub isolation: Option<String>,
    /// Where its new sessions' worktrees go; '' goes back to the `worktrees.dir` setting.
    #[arg(long, value_name = "DIR")]
    pub worktrees_dir: Option<String>,
    /// The command run in each new worktree before its first prompt; '' removes it.
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,
    /// Pause the project when one of its prompts fails for good.
    #[arg(long, value_name = "true|false", action = ArgAction::Set)]
    pub pause_on_failure: Option<bool>,
    /// Which notifications its sessions send: a comma list (prompt.done, prompt.failed,
    /// prompt.cancelled, needs-you, paused), none, or default (the notify.events setting).
    #[arg(long, value_name = "LIST|none|default")]
    pub notify: Option<String>,
    #[command(flatten)]
    pub env: EnvArgs,
    /// Remove a variable its engines get (repeatable).
    #[arg(long = "unset-env", value_name = "NAME")]
    pub unset_env: Vec<String>,
    /// Print the changed project as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The values `--isolation` takes (`projects::Isolation`'s words).
const ISOLATIONS: [&str; 2] = ["worktree", "shared"];

/// A policy's name, as clap takes it (an unknown one is a usage error naming the four).
pub(crate) fn parse_policy(text: &str) -> Result<Policy, String> {
    text.parse()
}

impl ProjectAction {
    /// Whether the subcommand only looks (and so never starts a daemon).
    pub fn inspects(&self) -> bool {
        matches!(self, ProjectAction::List(_) | ProjectAction::Show(_))
    }
}

pub async fn execute(context: &Context, args: &ProjectArgs) -> Result<Exit, CliError> {
    match &args.action {
        ProjectAction::Add(add) => self::add(context, add).await,
        ProjectAction::List(list) => self::list(context, list).await,
        ProjectAction::Show(show) => {
            let mut source = remote::inspect(context).await?;
            let project = source
                .ask_answered::<ProjectShow>(&ProjectSelector::new(&show.project))
                .await?;
            print(&project, show.json);
            Ok(Exit::success())
        }
        ProjectAction::Set(set) => self::set(context, set).await,
        ProjectAction::Archive(archive) => {
            let mut client = remote::connect(context).await?;
            let params = ProjectArchiveParams::new(&archive.project);
            let project = remote::ask_answered::<ProjectArchive>(&mut client, &params).await?;
            if archive.json {
                print_json(&project.said);
            } else {
                let project = &project.result;
                println!("archived project {} ({})", project.name, project.id);
            }
            Ok(Exit::success())
        }
    }
}

async fn add(context: &Context, args: &AddArgs) -> Result<Exit, CliError> {
    let params = ProjectAddParams {
        name: args.name.clone(),
        path: absolute(&args.path)?,
        engine: args.engine.clone(),
        model: args.model.clone(),
        full_access: args.full_access,
        policy: args.policy,
        remote: args.remote,
        groups: args.groups.clone(),
        instructions: args.instructions.clone(),
        keep_background: args.keep_background,
        isolation: args.isolation.clone(),
        worktrees_dir: args.worktrees_dir.as_deref().map(absolute).transpose()?,
        setup: args.setup.clone(),
        pause_on_failure: args.pause_on_failure,
        env: args.env.environment()?,
    };
    let mut client = remote::connect(context).await?;
    let answered = remote::ask_answered::<ProjectAdd>(&mut client, &params).await?;
    let project = &answered.result;
    if args.isolation.is_none() {
        if let Some(note) = shared_note(project, crate::repo::toplevel(&args.path).is_some()) {
            say!("{note}");
        }
    }
    if args.json {
        print_json(&answered.said);
    } else {
        println!(
            "added project {} ({}) at {}, isolation {}",
            project.name, project.id, project.path, project.isolation
        );
    }
    Ok(Exit::success())
}

async fn list(context: &Context, args: &ListArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let answered = source
        .ask_answered::<ProjectList>(&ProjectListParams {
            all: Some(args.all),
        })
        .await?;
    if args.json {
        print_json(&answered.said);
        return Ok(Exit::success());
    }
    let projects = answered.result;
    if projects.is_empty() {
        println!("(no projects; add one with `corral project add NAME PATH`)");
        return Ok(Exit::success());
    }
    // Unique prefixes, as every table's ids (`store::select::ShortIds`).
    let ids = projects.iter().map(|project| project.id.as_str());
    let short = remote::short_ids_of(context, IdKind::Project, ids.clone());
    let width = short.width(ids);
    println!(
        "{:<width$}  {:<16}  {:<8}  {:<6}  {:<9}  {:<16}  PATH",
        "ID", "NAME", "ENGINE", "KIND", "ISOLATION", "GROUPS"
    );
    for project in &projects {
        let mut name = project.name.clone();
        if project.archived_at.is_some() {
            name.push_str(" (archived)");
        }
        println!(
            "{:<width$}  {:<16}  {:<8}  {:<6}  {:<9}  {:<16}  {}",
            short.get(&project.id),
            name,
            engine(project),
            project.kind,
            project.isolation,
            groups(project),
            project.path,
        );
    }
    Ok(Exit::success())
}

async fn set(context: &Context, args: &SetArgs) -> Result<Exit, CliError> {
    let groups = if args.no_groups {
        Some(Vec::new())
    } else if args.groups.is_empty() {
        None
    } else {
        Some(args.groups.clone())
    };
    if args.engine.is_none()
        && args.model.is_none()
        && args.full_access.is_none()
        && args.policy.is_none()
        && args.agents_scope.is_none()
        && args.remote.is_none()
        && groups.is_none()
        && args.instructions.is_none()
        && args.keep_background.is_none()
        && args.isolation.is_none()
        && args.worktrees_dir.is_none()
        && args.setup.is_none()
        && args.pause_on_failure.is_none()
        && args.notify.is_none()
        && args.env.env.is_empty()
        && args.env.env_file.is_none()
        && args.unset_env.is_empty()
    {
        return Err(CliError::usage(
            "nothing to change: give --engine, --model, --policy, --agents-scope, --full-access, --remote, --group, \
             --no-groups, --instructions, --keep-background, --isolation, --worktrees-dir, \
             --setup, --pause-on-failure, --notify, --env, --env-file or --unset-env",
        ));
    }
    // '' clears the directory: it goes as it is, not made absolute.
    let worktrees_dir = match args.worktrees_dir.as_deref() {
        Some("") => Some(String::new()),
        Some(dir) => Some(absolute(Path::new(dir))?),
        None => None,
    };
    let params = ProjectSetParams {
        project: args.project.clone(),
        engine: args.engine.clone(),
        model: args.model.clone(),
        full_access: args.full_access,
        policy: args.policy,
        agents_scope: args
            .agents_scope
            .as_deref()
            .and_then(|scope| scope.parse().ok()),
        remote: args.remote,
        groups,
        instructions: args.instructions.clone(),
        keep_background: args.keep_background,
        isolation: args.isolation.clone(),
        worktrees_dir,
        setup: args.setup.clone(),
        pause_on_failure: args.pause_on_failure,
        notify: args.notify.clone(),
        env: args.env.environment()?,
        unset_env: args.unset_env.clone(),
    };
    let mut client = remote::connect(context).await?;
    let project = remote::ask_answered::<ProjectSet>(&mut client, &params).await?;
    print(&project, args.json);
    Ok(Exit::success())
}

fn groups(project: &Project) -> String {
    if project.groups.is_empty() {
        "-".into()
    } else {
        project.groups.join(",")
    }
}

/// Its engine's name, `-` when it names none.
fn engine(project: &Project) -> &str {
    or_dash(project.engine.as_ref().map(|engine| engine.as_str()))
}

/// The note `project add` prints when it chose `shared` (no `--isolation`) for a path in a
/// git repository: worktrees were not possible there, and the person should know why.
fn shared_note(project: &Project, in_repository: bool) -> Option<String> {
    (in_repository && project.isolation == "shared").then(|| {
        format!(
            "corral: note: project {} shares one working tree (isolation shared): worktree isolation \
             needs git 2.17+ and a commit",
            project.name
        )
    })
}

/// One project, as text or JSON.
fn print(answered: &Answered<Project>, json: bool) {
    if json {
        print_json(&answered.said);
        return;
    }
    let project = &answered.result;
    let access = match project.policy {
        Policy::Full => "full (no sandbox, no approvals)",
        Policy::ReadOnly => "read-only (no writes)",
        Policy::Ask => "ask (workspace-write; anything beyond waits for `corral approve`)",
        _ => "workspace-write (edits and commands inside its tree)",
    };
    println!("name:         {}", project.name);
    println!("id:           {}", project.id);
    println!("path:         {}", project.path);
    println!("engine:       {}", engine(project));
    println!("model:        {}", or_dash(project.model.as_deref()));
    println!("policy:       {access}");
    println!("kind:         {}", project.kind);
    println!("groups:       {}", groups(project));
    let isolation = match project.isolation.as_str() {
        "worktree" => "worktree (a git worktree and branch per session; sessions in parallel)",
        "shared" => "shared (one working tree; sessions one at a time)",
        other => other,
    };
    println!("isolation:    {isolation}");
    if let Some(dir) = &project.worktrees_dir {
        println!("worktrees:    {dir}");
    }
    if let Some(setup) = &project.setup {
        println!("setup:        {setup}");
    }
    println!("instructions: {}", or_dash(project.instructions.as_deref()));
    let background = if project.keep_background {
        "kept after their runs (corral status lists them)"
    } else {
        "ended with their runs"
    };
    println!("background:   {background}");
    if !project.env.is_empty() {
        println!("env:          {}", project.env.describe());
    }
    if let Some(notify) = &project.notify {
        println!("notify:       {notify}");
    }
    if project.pause_on_failure {
        println!(
            "on failure:   the project pauses (corral resume --project {})",
            project.name
        );
    }
    let agents = match project.agents_scope {
        AgentsScope::Project => "reach every session of this project",
        _ => "reach their own session only",
    };
    println!("agents:       {agents}");
    println!("created:      {} UTC", time_of(Some(project.created_at)));
    println!("archived:     {}", time_of(project.archived_at));
}

/// `--env NAME=VALUE` (repeatable) and `--env-file FILE`: environment variables for the
/// engines (`store::environment`); a variable of `--env` goes over the file's.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EnvArgs {
    /// A variable its engines get (repeatable): NAME=VALUE. Not one of corral's own CORRAL_*.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A file of NAME=VALUE lines (# comments, `export` and quotes allowed), as --env each.
    #[arg(long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
}

/// A `--env` value: `NAME=VALUE`, the name checked (a bad one is a usage error, exit 2).
pub fn parse_env(text: &str) -> Result<(String, String), String> {
    crate::store::environment::parse_assignment(text)
}

impl EnvArgs {
    /// The variables given: the file's, then `--env`'s over them. A file that cannot be read
    /// is exit 1; a line of it that is not NAME=VALUE, exit 2.
    pub fn environment(&self) -> Result<Environment, CliError> {
        let mut env = Environment::default();
        if let Some(file) = &self.env_file {
            let text = std::fs::read_to_string(file).map_err(|error| {
                CliError::failure(format!("cannot read {}: {error}", file.display()))
            })?;
            let read = crate::store::environment::parse_file(&text)
                .map_err(|error| CliError::usage(format!("{}: {error}", file.display())))?;
            env.0.extend(read);
        }
        env.0.extend(self.env.iter().cloned());
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::cli::{Cli, Command};

    fn action(words: &[&str]) -> Result<ProjectAction, clap::Error> {
        let argv = ["corral", "project"].iter().chain(words);
        match Cli::try_parse_from(argv)?.command {
            Command::Project(args) => Ok(args.action),
            other => panic!("not a project command: {other:?}"),
        }
    }

    #[test]
    fn add_takes_isolation_worktrees_dir_and_setup() {
        let ProjectAction::Add(add) = action(&[
            "add",
            "p",
            "/r",
            "--isolation",
            "worktree",
            "--worktrees-dir",
            "/wt",
            "--setup",
            "npm ci",
        ])
        .unwrap() else {
            panic!("not add");
        };
        assert_eq!(add.isolation.as_deref(), Some("worktree"));
        assert_eq!(add.worktrees_dir.as_deref(), Some(Path::new("/wt")));
        assert_eq!(add.setup.as_deref(), Some("npm ci"));
        let ProjectAction::Add(plain) = action(&["add", "p", "/r"]).unwrap() else {
            panic!("not add");
        };
        assert!(plain.isolation.is_none() && plain.setup.is_none());
        // Another word is a usage error, before any daemon is asked.
        let wrong = action(&["add", "p", "/r", "--isolation", "branch"]).unwrap_err();
        assert_eq!(wrong.kind(), clap::error::ErrorKind::InvalidValue);
    }

    #[test]
    fn set_takes_empty_values_to_clear() {
        let ProjectAction::Set(set) = action(&[
            "set",
            "p",
            "--isolation",
            "shared",
            "--worktrees-dir",
            "",
            "--setup",
            "",
        ])
        .unwrap() else {
            panic!("not set");
        };
        assert_eq!(set.isolation.as_deref(), Some("shared"));
        assert_eq!(set.worktrees_dir.as_deref(), Some(""));
        assert_eq!(set.setup.as_deref(), Some(""));
    }

    /// A project as the daemon answers it, with `fields` over a plain one's.
    fn project(fields: serde_json::Value) -> Project {
        let mut project = json!({
            "id": "p", "name": "p", "path": "/p", "engine": null, "model": null,
            "full_access": false, "kind": "local", "groups": [], "instructions": null,
            "created_at": 0, "archived_at": null,
        });
        for (key, value) in fields.as_object().unwrap() {
            project[key] = value.clone();
        }
        serde_json::from_value(project).unwrap()
    }

    #[test]
    fn the_shared_note_is_for_a_repository_path_only() {
        let shared = project(json!({ "name": "web", "isolation": "shared" }));
        let note = shared_note(&shared, true).unwrap();
        assert!(
            note.contains("project web") && note.contains("git 2.17"),
            "{note}"
        );
        assert!(shared_note(&shared, false).is_none());
        let worktree = project(json!({ "name": "w", "isolation": "worktree" }));
        assert!(shared_note(&worktree, true).is_none());
        // An older daemon's project has no isolation: it is shared.
        assert_eq!(project(json!({ "name": "old" })).isolation, "shared");
    }
}
