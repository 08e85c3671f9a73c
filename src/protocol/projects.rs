//! Projects and lock groups: `project.add`, `project.list`, `project.show`, `project.set`,
//! `project.archive`, `group.set`, `group.list`, `group.remove`.

use serde::{Deserialize, Serialize};

use super::{method, named_params, NoParams};
use crate::engine::{EngineKind, Policy};
use crate::store::environment::Environment;
use crate::store::projects;

method! {
    ProjectAdd = "project.add": ProjectAddParams => Project,
    ProjectList = "project.list": ProjectListParams => Vec<Project>,
    ProjectShow = "project.show": ProjectSelector => Project,
    /// Only the fields given change.
    ProjectSet = "project.set": ProjectSetParams => Project,
    /// The project is archived; nothing else changes (its selector is its only param).
    ProjectArchive = "project.archive": ProjectArchiveParams => Project,
    GroupSet = "group.set": GroupSetParams => GroupSetResult,
    /// Every execution group, by name, with the projects in it.
    GroupList = "group.list": NoParams => Vec<projects::Group>,
    /// A group no project is in is removed; one with projects is refused, naming them.
    GroupRemove = "group.remove": GroupSelector => GroupSelector,
}

/// A project on the wire (`projects::Project`'s keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub path: String,
    /// The engine new sessions use unless told otherwise.
    pub engine: Option<EngineKind>,
    pub model: Option<String>,
    /// Engines run without sandbox or approvals (the policy `full`, a person's grant).
    pub full_access: bool,
    /// What its sessions' agents may do without asking, unless a session or prompt names
    /// another: `read-only`, `workspace-write`, `ask` or `full`.
    #[serde(default)]
    pub policy: Policy,
    /// Which sessions its agents may reach: `session` (their own) or `project`.
    #[serde(default)]
    pub agents_scope: projects::AgentsScope,
    /// `local` or `remote`.
    pub kind: String,
    pub groups: Vec<String>,
    pub instructions: Option<String>,
    pub created_at: i64,
    pub archived_at: Option<i64>,
    #[serde(default)]
    pub keep_background: bool,
    /// `shared` (one working tree, sessions one at a time) or `worktree` (a git worktree and
    /// branch per session, sessions in parallel).
    #[serde(default = "shared")]
    pub isolation: String,
    /// Where its sessions' worktrees go, instead of the `worktrees.dir` setting.
    #[serde(default)]
    pub worktrees_dir: Option<String>,
    /// Run in each new worktree before its first prompt.
    #[serde(default)]
    pub setup: Option<String>,
    /// The git repository's top level holding `path` (null: not in one).
    #[serde(default)]
    pub repo_root: Option<String>,
    /// A prompt of it failing for good pauses it (`resume` lets its queue go on).
    #[serde(default)]
    pub pause_on_failure: bool,
    /// Which notifications its sessions send (a comma list, or `none`); null: the
    /// `notify.events` setting.
    #[serde(default)]
    pub notify: Option<String>,
    /// Environment variables its engines get; the values of names that look like secrets
    /// masked.
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
}

fn shared() -> String {
    projects::Isolation::Shared.as_str().to_string()
}

impl From<&projects::Project> for Project {
    fn from(p: &projects::Project) -> Self {
        Project {
            id: p.id.clone(),
            name: p.name.clone(),
            path: p.path.clone(),
            engine: p.engine,
            model: p.model.clone(),
            full_access: p.full_access,
            policy: p.policy,
            agents_scope: p.agents_scope,
            kind: p.kind.clone(),
            groups: p.groups.clone(),
            instructions: p.instructions.clone(),
            created_at: p.created_at,
            archived_at: p.archived_at,
            keep_background: p.keep_background,
            isolation: p.isolation.as_str().to_string(),
            worktrees_dir: p.worktrees_dir.clone(),
            setup: p.setup.clone(),
            repo_root: p.repo_root.clone(),
            pause_on_failure: p.pause_on_failure,
            notify: p.notify.clone(),
            env: p.env.masked(),
        }
    }
}

/// `project.add`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectAddParams {
    pub name: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub full_access: bool,
    /// `full` is `full_access` (a widening); `ask` only for an engine that can ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    #[serde(default)]
    pub remote: bool,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Background processes its engines leave outlive their runs (a widening).
    #[serde(default)]
    pub keep_background: bool,
    /// `worktree` or `shared`; by default `worktree` for a path in a git repository with a
    /// commit (and git 2.17 or newer on PATH), else `shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// Where its sessions' worktrees go (a widening: a place corral writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktrees_dir: Option<String>,
    /// A command run in each new worktree before its first prompt (a widening: corral runs
    /// it unsandboxed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// A prompt failing for good pauses the project.
    #[serde(default)]
    pub pause_on_failure: bool,
    /// Environment variables its engines get (a widening from a run).
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
}

/// `project.set`: only the fields given change.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectSetParams {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_access: Option<bool>,
    /// `full` is `full_access: true`, any other `full_access: false` with that policy; a
    /// wider one than the project has is a widening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// `project` lets its agents reach every session of the project (a widening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_scope: Option<projects::AgentsScope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Turning it on is a widening; off is always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_background: Option<bool>,
    /// For the project's new sessions; its sessions made before keep their directories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// `""` clears it (back to the `worktrees.dir` setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktrees_dir: Option<String>,
    /// `""` clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Turning it off is a widening (a failing project would run on); on is always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_on_failure: Option<bool>,
    /// Which notifications its sessions send: a comma list of kinds, `none`, or `default`
    /// (the `notify.events` setting). A change is a widening (what a person is told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<String>,
    /// Variables to set (over those it has); a widening from a run.
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
    /// Variables to remove; a widening from a run too (its engines' environment is the
    /// person's to shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset_env: Vec<String>,
}

/// `project.list {all}`: archived projects too when `all`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProjectListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
}
named_params!(ProjectListParams { all: optional });

/// A project by its selector (an id, a unique id prefix, its name).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProjectSelector {
    pub project: String,
}
named_params!(ProjectSelector { project: string });

impl ProjectSelector {
    pub fn new(project: impl Into<String>) -> Self {
        ProjectSelector {
            project: project.into(),
        }
    }
}

/// `project.archive {project}`: the selector and nothing else — a member that would change
/// the project is refused (-32602), not ignored: archiving is never a way to change one.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProjectArchiveParams {
    pub project: String,
}

impl<'de> Deserialize<'de> for ProjectArchiveParams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let named = super::Named::read(deserializer)?;
        if let Some(other) = named.0.keys().find(|key| key.as_str() != "project") {
            return Err(serde::de::Error::custom(format!(
                "project.archive takes only project, not {other} (change a project with project.set)"
            )));
        }
        Ok(ProjectArchiveParams {
            project: named.string("project")?,
        })
    }
}

impl ProjectArchiveParams {
    pub fn new(project: impl Into<String>) -> Self {
        ProjectArchiveParams {
            project: project.into(),
        }
    }
}

/// `group.set {name, locking}` (`locking` defaults to true).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupSetParams {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locking: Option<bool>,
}
named_params!(GroupSetParams {
    name: string,
    locking: optional
});

/// `group.remove {name}`: a group by its name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupSelector {
    pub name: String,
}
named_params!(GroupSelector { name: string });

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupSetResult {
    pub name: String,
    pub locking: bool,
}
