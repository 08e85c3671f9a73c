//! Projects: the working directories sessions run in, with their settings (`projects`), and
//! the execution groups they are in (`execution_groups`).
//!
//! Written by the ledger actor (`CreateProject`, `ChangeProject`, `SetGroupLocking`); read by
//! the daemon's methods, the CLI and a session's worker (its project, the overlapping trees).

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::environment::Environment;

use super::{json_list, now_ms};
use crate::engine::{EngineKind, Policy};

/// A working directory with settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub path: String,
    /// The engine new sessions use unless told otherwise.
    pub engine: Option<EngineKind>,
    pub model: Option<String>,
    /// Run engines without sandbox or approvals: a person's grant, and then its policy is
    /// `full` (the two are kept together by every write).
    pub full_access: bool,
    /// Which sessions its agents may reach through the daemon: their own (the default), or
    /// every session of this project (`agents.scope = project`, a person's widening).
    #[serde(default)]
    pub agents_scope: AgentsScope,
    /// What its agents may do without asking: `read-only`, `workspace-write` (the default),
    /// `ask`, or `full` (with `full_access`). Sessions and prompts may name another.
    #[serde(default)]
    pub policy: Policy,
    /// `local` or `remote`; a remote project's engines are always read-only.
    pub kind: String,
    /// Execution groups this project is in: runs of projects sharing a locking group never
    /// overlap; a label-only group (`execution_groups.locking = 0`) only names them.
    pub groups: Vec<String>,
    /// House rules added to every prompt the project sends.
    pub instructions: Option<String>,
    pub created_at: i64,
    pub archived_at: Option<i64>,
    /// Processes its engines leave behind (a dev server started with `&`) outlive the run
    /// that started them. Off unless a person turns it on: by default a run ends with all of
    /// its processes.
    #[serde(default)]
    pub keep_background: bool,
    /// Whether its sessions share the project's working tree or each get a git worktree.
    #[serde(default)]
    pub isolation: Isolation,
    /// Where its sessions' worktrees go, instead of the `worktrees.dir` setting.
    #[serde(default)]
    pub worktrees_dir: Option<String>,
    /// A command run in each new worktree before its first prompt (`npm ci`).
    #[serde(default)]
    pub setup: Option<String>,
    /// The top level of the git repository holding `path`, when it is in one (read at add):
    /// a session's working directory is its worktree joined with `path`'s place below it.
    #[serde(default)]
    pub repo_root: Option<String>,
    /// When one of its prompts fails for good, the project is paused (`store::pauses`), so
    /// that its queue waits for a person instead of running into a broken build.
    #[serde(default)]
    pub pause_on_failure: bool,
    /// Which notifications its sessions send (`actors::notifier`): a comma list of kinds, or
    /// `none`; `None` for the `notify.events` setting.
    #[serde(default)]
    pub notify: Option<String>,
    /// Variables its engine children get (`store::environment`).
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
}

/// How a project's sessions share its working tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// One working tree for all its sessions: they run one at a time (the project's lock).
    #[default]
    Shared,
    /// Each session has its own git worktree and branch: sessions run in parallel.
    Worktree,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Shared => "shared",
            Isolation::Worktree => "worktree",
        }
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "shared" => Ok(Isolation::Shared),
            "worktree" => Ok(Isolation::Worktree),
            other => Err(format!("unknown isolation '{other}' (worktree or shared)")),
        }
    }
}

impl sql::Get for Isolation {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        let text = String::from_value(value)?;
        text.parse()
            .map_err(|_| format!("{text:?} is not a Isolation"))
    }
}

const PROJECT_COLUMNS: &str = "id, name, path, engine, model, full_access, kind, groups, \
                               instructions, created_at, archived_at, keep_background, \
                               isolation, worktrees_dir, setup, repo_root, policy, agents_scope, \
                               pause_on_failure, notify, env";

fn project_row(row: &Row<'_>) -> sql::Result<Project> {
    project_at(row, 0)
}

/// A project read from [`PROJECT_COLUMNS`] at column `first` on.
fn project_at(row: &Row<'_>, first: usize) -> sql::Result<Project> {
    let at = |column: usize| first + column;
    Ok(Project {
        id: row.get(at(0))?,
        name: row.get(at(1))?,
        path: row.get(at(2))?,
        engine: row.get(at(3))?,
        model: row.get(at(4))?,
        full_access: row.get(at(5))?,
        kind: row.get(at(6))?,
        groups: json_list(row.get(at(7))?),
        instructions: row.get(at(8))?,
        created_at: row.get(at(9))?,
        archived_at: row.get(at(10))?,
        keep_background: row.get(at(11))?,
        isolation: row.get(at(12))?,
        worktrees_dir: row.get(at(13))?,
        setup: row.get(at(14))?,
        repo_root: row.get(at(15))?,
        policy: row.get(at(16))?,
        agents_scope: row.get(at(17))?,
        pause_on_failure: row.get(at(18))?,
        notify: row.get(at(19))?,
        env: row.get(at(20))?,
    })
}

/// Which sessions a project's agents may reach through the daemon (`daemon/confine.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentsScope {
    /// Its own session only.
    #[default]
    Session,
    /// Every session of its project.
    Project,
}

impl AgentsScope {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentsScope::Session => "session",
            AgentsScope::Project => "project",
        }
    }
}

impl std::str::FromStr for AgentsScope {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "session" => Ok(AgentsScope::Session),
            "project" => Ok(AgentsScope::Project),
            other => Err(format!(
                "unknown agents scope '{other}' (one of: session, project)"
            )),
        }
    }
}

impl sql::Get for AgentsScope {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        String::from_value(value)?.parse()
    }
}

impl Project {
    /// The policy its prompts run under unless a session or prompt names another: `full`
    /// only where a person granted it.
    /// The policy a prompt of this project runs under: its own, else its session's, else the
    /// project's (see `Policy::effective`).
    pub fn policy_for(
        &self,
        session: Option<Policy>,
        prompt: Option<Policy>,
        read_only: bool,
    ) -> Policy {
        Policy::effective(
            self.default_policy(),
            self.full_access,
            session,
            prompt,
            read_only,
            self.kind == "remote",
        )
    }

    pub fn default_policy(&self) -> Policy {
        match (self.full_access, self.policy) {
            (true, _) => Policy::Full,
            (false, Policy::Full) => Policy::WorkspaceWrite,
            (false, policy) => policy,
        }
    }
}

impl sql::Get for EngineKind {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        String::from_value(value)?.parse()
    }
}

impl sql::Param for EngineKind {
    fn arg(&self) -> sql::Arg<'_> {
        sql::Arg::Text(self.as_str())
    }
}

impl sql::Get for Policy {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        let text = String::from_value(value)?;
        text.parse()
    }
}

/// [`project_at`] of an outer join's row: `None` where it found no project (a NULL id).
pub(crate) fn maybe_project_at(row: &Row<'_>, first: usize) -> sql::Result<Option<Project>> {
    match row.get::<Option<String>>(first)? {
        Some(_) => project_at(row, first).map(Some),
        None => Ok(None),
    }
}

/// The projects' columns, each taken from table alias `alias` (a join's).
pub(crate) fn project_columns(alias: &str) -> String {
    sql::qualified(PROJECT_COLUMNS, alias)
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// A project to create.
#[derive(Debug, Clone, Default)]
pub struct NewProject {
    pub name: String,
    pub path: String,
    pub engine: Option<EngineKind>,
    pub model: Option<String>,
    pub full_access: bool,
    pub remote: bool,
    pub groups: Vec<String>,
    pub instructions: Option<String>,
    /// See [`Project::keep_background`].
    pub keep_background: bool,
    /// `None`: the default, decided by [`crate::Corral::add_project`] (`worktree` for a path
    /// in a git repository with a commit when git is found, else `shared`); stored as
    /// `shared` by the store alone.
    pub isolation: Option<Isolation>,
    pub worktrees_dir: Option<String>,
    pub setup: Option<String>,
    pub repo_root: Option<String>,
    /// See [`Project::policy`] (`full` only with `full_access`, which makes it `full`).
    pub policy: Policy,
    /// See [`Project::pause_on_failure`].
    pub pause_on_failure: bool,
    /// See [`Project::env`].
    pub env: Environment,
}

/// [`insert_project`], unless a project of that name exists: then `None` (read in the
/// write's transaction, so two adds of one name at once are told so).
pub(crate) fn insert_project_unless_named(
    connection: &Conn,
    project: &NewProject,
) -> sql::Result<Option<Project>> {
    let taken = connection.opt_row(
        "SELECT 1 FROM projects WHERE name = ?1",
        args![project.name],
        |_| Ok(()),
    )?;
    match taken {
        Some(()) => Ok(None),
        None => insert_project(connection, project).map(Some),
    }
}

pub(crate) fn insert_project(connection: &Conn, new: &NewProject) -> sql::Result<Project> {
    let project = Project {
        id: uuid::Uuid::now_v7().to_string(),
        name: new.name.clone(),
        path: new.path.clone(),
        engine: new.engine,
        model: new.model.clone(),
        full_access: new.full_access,
        kind: if new.remote { "remote" } else { "local" }.to_string(),
        groups: new.groups.clone(),
        instructions: new.instructions.clone(),
        created_at: now_ms(),
        archived_at: None,
        keep_background: new.keep_background,
        isolation: new.isolation.unwrap_or_default(),
        worktrees_dir: new.worktrees_dir.clone(),
        setup: new.setup.clone(),
        repo_root: new.repo_root.clone(),
        agents_scope: AgentsScope::Session,
        pause_on_failure: new.pause_on_failure,
        notify: None,
        env: new.env.clone(),
        policy: match (new.full_access, new.policy) {
            (true, _) => Policy::Full,
            (false, Policy::Full) => Policy::WorkspaceWrite,
            (false, policy) => policy,
        },
    };
    connection.run(
        &format!("INSERT INTO projects ({PROJECT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"),
        args![
            project.id,
            project.name,
            project.path,
            project.engine,
            project.model,
            project.full_access,
            project.kind,
            serde_json::to_string(&project.groups).expect("strings serialize"),
            project.instructions,
            project.created_at,
            project.archived_at,
            project.keep_background,
            project.isolation.as_str(),
            project.worktrees_dir,
            project.setup,
            project.repo_root,
            project.policy.as_str(),
            project.agents_scope.as_str(),
            project.pause_on_failure,
            project.notify,
            project.env.to_json(),
        ],
    )?;
    for group in &project.groups {
        // `ON CONFLICT (name) DO NOTHING`, the form both stores take (SQLite's `OR IGNORE` is
        // not PostgreSQL's): a group that exists keeps its locking and its `created_at`.
        connection.run(
            "INSERT INTO execution_groups (name, locking, created_at) VALUES (?1, 1, ?2) \
             ON CONFLICT (name) DO NOTHING",
            args![group, project.created_at],
        )?;
    }
    Ok(project)
}

pub(crate) fn set_group_locking(connection: &Conn, name: &str, locking: bool) -> sql::Result<()> {
    connection.run(
        "INSERT INTO execution_groups (name, locking, created_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (name) DO UPDATE SET locking = excluded.locking",
        args![name, locking, now_ms()],
    )?;
    Ok(())
}

/// Variables to set and to remove in a project's environment (`project set --env`,
/// `--unset-env`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvChange {
    pub set: Environment,
    pub unset: Vec<String>,
}

impl EnvChange {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty()
    }

    /// `env` with the removals, then the settings, made.
    fn applied_to(&self, env: &Environment) -> Environment {
        let mut env = env.clone();
        for name in &self.unset {
            env.0.remove(name);
        }
        env.0.extend(
            self.set
                .0
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        env
    }
}

/// Updates a project's settings; `None` fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct ProjectChange {
    pub engine: Option<EngineKind>,
    pub model: Option<String>,
    pub full_access: Option<bool>,
    pub remote: Option<bool>,
    pub groups: Option<Vec<String>>,
    pub instructions: Option<String>,
    pub keep_background: Option<bool>,
    pub isolation: Option<Isolation>,
    /// `Some(None)` clears it (back to the `worktrees.dir` setting).
    pub worktrees_dir: Option<Option<String>>,
    /// `Some(None)` clears it.
    pub setup: Option<Option<String>>,
    /// The repository's top level, found again when the project turns to worktree isolation.
    pub repo_root: Option<String>,
    /// See [`Project::policy`]: `full` goes with `full_access: Some(true)`; taking the grant
    /// back leaves `workspace-write` unless another policy is given.
    pub policy: Option<Policy>,
    /// See [`Project::agents_scope`].
    pub agents_scope: Option<AgentsScope>,
    /// See [`Project::pause_on_failure`].
    pub pause_on_failure: Option<bool>,
    /// See [`Project::notify`]: `Some(None)` goes back to the setting.
    pub notify: Option<Option<String>>,
    /// See [`Project::env`]: the variables set and removed, merged with the project's in
    /// the write's own transaction (two changes at once both hold).
    pub env: EnvChange,
    pub archive: bool,
}

pub(crate) fn change_project(
    connection: &Conn,
    id: &str,
    change: &ProjectChange,
) -> sql::Result<Option<Project>> {
    let now = now_ms();
    let env = match change.env.is_empty() {
        true => None,
        false => {
            let Some(now) = connection
                .row("SELECT env FROM projects WHERE id = ?1", args![id], |row| {
                    row.get::<Environment>(0)
                })
                .optional()?
            else {
                return Ok(None);
            };
            Some(change.env.applied_to(&now))
        }
    };
    // `CASE WHEN ?5 = 1`, not `CASE ?5 WHEN 1`: PostgreSQL types a bare `CASE $5` operand as
    // text before it reads the `WHEN`s, and text = integer does not exist.
    connection.run(
        "UPDATE projects SET engine = COALESCE(?2, engine), model = COALESCE(?3, model), \
         full_access = COALESCE(?4, full_access), \
         kind = COALESCE(CASE WHEN ?5 = 1 THEN 'remote' WHEN ?5 = 0 THEN 'local' END, kind), \
         groups = COALESCE(?6, groups), instructions = COALESCE(?7, instructions), \
         archived_at = CASE WHEN ?8 THEN COALESCE(archived_at, ?9) ELSE archived_at END, \
         keep_background = COALESCE(?10, keep_background), \
         isolation = COALESCE(?11, isolation), \
         worktrees_dir = CASE WHEN ?12 THEN ?13 ELSE worktrees_dir END, \
         setup = CASE WHEN ?14 THEN ?15 ELSE setup END, \
         repo_root = COALESCE(?16, repo_root), \
         policy = CASE WHEN ?4 = 1 THEN 'full' \
                       WHEN ?4 = 0 AND COALESCE(?17, policy) = 'full' THEN 'workspace-write' \
                       ELSE COALESCE(?17, policy) END, \
         agents_scope = COALESCE(?18, agents_scope), \
         pause_on_failure = COALESCE(?19, pause_on_failure), \
         notify = CASE WHEN ?20 THEN ?21 ELSE notify END, \
         env = COALESCE(?22, env) \
         WHERE id = ?1",
        args![
            id,
            change.engine,
            change.model,
            change.full_access,
            change.remote,
            change
                .groups
                .as_ref()
                .map(|groups| serde_json::to_string(groups).expect("strings serialize")),
            change.instructions,
            change.archive,
            now,
            change.keep_background,
            change.isolation.map(Isolation::as_str),
            change.worktrees_dir.is_some(),
            change.worktrees_dir.clone().flatten(),
            change.setup.is_some(),
            change.setup.clone().flatten(),
            change.repo_root,
            change.policy.map(Policy::as_str),
            change.agents_scope.map(AgentsScope::as_str),
            change.pause_on_failure,
            change.notify.is_some(),
            change.notify.clone().flatten(),
            env.as_ref().map(Environment::to_json),
        ],
    )?;
    if let Some(groups) = &change.groups {
        for group in groups {
            // As in `insert_project`.
            connection.run(
                "INSERT INTO execution_groups (name, locking, created_at) VALUES (?1, 1, ?2) \
                 ON CONFLICT (name) DO NOTHING",
                args![group, now],
            )?;
        }
    }
    project(connection, id)
}

// ---------------------------------------------------------------------------------------------
// Reads.

pub fn project(connection: &Conn, id: &str) -> sql::Result<Option<Project>> {
    connection
        .row(
            &format!("SELECT {PROJECT_COLUMNS} FROM projects WHERE id = ?1"),
            args![id],
            project_row,
        )
        .optional()
}

/// What a run of `project` locks beside its own directory, in one read:
///
/// - the project's groups that lock: a label-only group (`locking = 0`) holds nothing, a
///   group without a row locks;
/// - when the run shares the project's directory (`shares_tree`), the other projects whose
///   working trees overlap it: on the same directory, on one above it or on one inside it,
///   archived ones included (an archived project's run may still be ending). A run takes
///   their locks beside its own (`SlotRequest::overlapping`), so two projects on one working
///   tree never run at once, whichever was added or archived while the other ran. Paths are
///   stored canonical (`Corral::add_project`), so comparing them is comparing directories.
pub fn locks_beside(
    connection: &Conn,
    project: &Project,
    shares_tree: bool,
) -> sql::Result<(Vec<String>, Vec<String>)> {
    // Labels (groups that lock nothing) and candidate trees, told apart by the first column;
    // a string prefix either way is necessary for an overlap, components decide.
    let rows: Vec<(bool, String)> = connection.rows(
        "SELECT 1 = 1, name FROM execution_groups WHERE locking = 0 \
         UNION ALL \
         SELECT 1 = 0, path FROM projects WHERE ?3 AND id != ?1 \
            AND (instr(?2, path) = 1 OR instr(path, ?2) = 1)",
        args![project.id, project.path, shares_tree],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let labels: Vec<&str> = rows
        .iter()
        .filter(|(label, _)| *label)
        .map(|(_, name)| name.as_str())
        .collect();
    let locking = project
        .groups
        .iter()
        .filter(|name| !labels.contains(&name.as_str()))
        .cloned()
        .collect();
    let own = std::path::Path::new(&project.path);
    let mut overlapping: Vec<String> = rows
        .iter()
        .filter(|(label, _)| !*label)
        .map(|(_, path)| path)
        .filter(|path| {
            let other = std::path::Path::new(path);
            own.starts_with(other) || other.starts_with(own)
        })
        .cloned()
        .collect();
    overlapping.sort();
    Ok((locking, overlapping))
}

pub fn projects(connection: &Conn) -> sql::Result<Vec<Project>> {
    connection.rows(
        &format!("SELECT {PROJECT_COLUMNS} FROM projects ORDER BY created_at, id"),
        args![],
        project_row,
    )
}

/// An execution group, as `group list` shows it: whether it locks, and the projects in it
/// (their names; archived ones left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub locking: bool,
    pub created_at: i64,
    pub projects: Vec<String>,
}

/// Every execution group, by name.
pub fn groups(connection: &Conn) -> sql::Result<Vec<Group>> {
    let projects = projects(connection)?;
    let members = |name: &str| -> Vec<String> {
        projects
            .iter()
            .filter(|project| project.archived_at.is_none())
            .filter(|project| project.groups.iter().any(|group| group == name))
            .map(|project| project.name.clone())
            .collect()
    };
    let rows: Vec<(String, bool, i64)> = connection.rows(
        "SELECT name, locking, created_at FROM execution_groups ORDER BY name",
        args![],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    Ok(rows
        .into_iter()
        .map(|(name, locking, created_at)| Group {
            projects: members(&name),
            name,
            locking,
            created_at,
        })
        .collect())
}

/// What `group remove` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRemoved {
    Removed,
    /// No group of that name.
    Missing,
    /// Projects are in it (their names): it stays.
    InUse(Vec<String>),
}

/// Removes group `name` unless a project (not archived) is in it.
pub(crate) fn remove_group(connection: &Conn, name: &str) -> sql::Result<GroupRemoved> {
    let Some(group) = groups(connection)?
        .into_iter()
        .find(|group| group.name == name)
    else {
        return Ok(GroupRemoved::Missing);
    };
    if !group.projects.is_empty() {
        return Ok(GroupRemoved::InUse(group.projects));
    }
    connection.run("DELETE FROM execution_groups WHERE name = ?1", args![name])?;
    Ok(GroupRemoved::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project of `path` in `groups`, as stored.
    fn project(id: &str, path: &str, groups: &[&str]) -> Project {
        Project {
            id: id.into(),
            name: id.into(),
            path: path.into(),
            groups: groups.iter().map(|group| group.to_string()).collect(),
            engine: None,
            model: None,
            full_access: false,
            kind: "local".into(),
            instructions: None,
            created_at: 1,
            archived_at: None,
            keep_background: false,
            pause_on_failure: false,
            notify: None,
            env: Environment::default(),
            isolation: Isolation::default(),
            worktrees_dir: None,
            setup: None,
            repo_root: None,
            policy: Default::default(),
            agents_scope: Default::default(),
        }
    }

    #[test]
    fn a_run_locks_its_locking_groups_and_the_trees_that_overlap_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = rusqlite::Connection::open(dir.path().join("corral.db")).unwrap();
        super::super::migrations::migrate(&mut db).unwrap();
        db.execute_batch(
            "INSERT INTO projects (id, name, path, created_at) VALUES
               ('me', 'me', '/w/app', 1), ('up', 'up', '/w', 2), ('in', 'in', '/w/app/lib', 3),
               ('twin', 'twin', '/w/app', 4), ('sibling', 'sibling', '/w/application', 5),
               ('far', 'far', '/x', 6);
             UPDATE projects SET archived_at = 9 WHERE id = 'twin';
             INSERT INTO execution_groups (name, locking, created_at) VALUES
               ('tv', 1, 1), ('label', 0, 1);",
        )
        .unwrap();
        let conn = Conn::from(db);
        let me = project("me", "/w/app", &["tv", "label", "unlisted"]);
        let (locking, overlapping) = locks_beside(&conn, &me, true).unwrap();
        // A group without a row locks; a label does not.
        assert_eq!(locking, ["tv", "unlisted"]);
        // Above, inside and on it (archived too); not a sibling sharing a prefix, not itself.
        assert_eq!(overlapping, ["/w", "/w/app", "/w/app/lib"]);
        // A run in a worktree of its own shares no tree: only the groups.
        let (locking, overlapping) = locks_beside(&conn, &me, false).unwrap();
        assert_eq!(locking, ["tv", "unlisted"]);
        assert!(overlapping.is_empty());
    }
}
