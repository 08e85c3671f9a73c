//! Projects and lock groups: `project.list`, `project.show`, `project.add`, `project.set`,
//! `project.archive`, `group.set`, `group.list`, `group.remove`.

use super::{engine, project_of, read, resolve_project, Caller, Inspect, Serve};
use crate::protocol::*;
use crate::store::projects;
use crate::store::projects::NewProject;
use crate::store::sql::Conn as Store;

impl Inspect for ProjectList {
    fn inspect(c: &Store, p: ProjectListParams) -> Result<Vec<Project>, RpcError> {
        let all = p.all.unwrap_or(false);
        Ok(read(projects::projects(c))?
            .iter()
            .filter(|p| all || p.archived_at.is_none())
            .map(Project::from)
            .collect())
    }
}

impl Inspect for ProjectShow {
    fn inspect(c: &Store, p: ProjectSelector) -> Result<Project, RpcError> {
        Ok((&project_of(c, &p.project)?).into())
    }
}

/// A wire `isolation` (`worktree` or `shared`); anything else is invalid params.
fn isolation(word: Option<&str>) -> Result<Option<projects::Isolation>, RpcError> {
    word.map(|word| {
        word.parse::<projects::Isolation>()
            .map_err(|error| RpcError::new(code::INVALID_PARAMS, error))
    })
    .transpose()
}

/// A project's grant and policy from `full_access` and `policy` as asked: `full` is the
/// grant; any other policy takes it back. Both given and at odds is refused.
fn grant(
    full_access: Option<bool>,
    policy: Option<crate::engine::Policy>,
) -> Result<(Option<bool>, Option<crate::engine::Policy>), RpcError> {
    use crate::engine::Policy;
    match (full_access, policy) {
        (Some(false), Some(Policy::Full))
        | (Some(true), Some(Policy::ReadOnly | Policy::WorkspaceWrite | Policy::Ask)) => {
            Err(RpcError::new(
                code::INVALID_PARAMS,
                "full_access and policy disagree: give one of them",
            ))
        }
        (_, Some(Policy::Full)) => Ok((Some(true), None)),
        (_, Some(policy)) => Ok((Some(false), Some(policy))),
        (full_access, None) => Ok((full_access, None)),
    }
}

/// A `project.set` value where `""` clears: `Some(None)`.
fn clearing(value: Option<String>) -> Option<Option<String>> {
    value.map(|value| Some(value).filter(|value| !value.is_empty()))
}

impl Serve for ProjectAdd {
    async fn serve(caller: &Caller, p: ProjectAddParams) -> Result<Project, RpcError> {
        let isolation = isolation(p.isolation.as_deref())?;
        let (full_access, policy) = grant(Some(p.full_access), p.policy)?;
        let project = caller
            .corral()
            .add_project(NewProject {
                name: p.name,
                path: p.path,
                engine: engine(p.engine.as_deref())?,
                model: p.model,
                full_access: full_access.unwrap_or(false),
                policy: policy.unwrap_or_default(),
                remote: p.remote,
                groups: p.groups,
                instructions: p.instructions,
                keep_background: p.keep_background,
                isolation,
                worktrees_dir: p.worktrees_dir,
                setup: p.setup,
                repo_root: None,
                pause_on_failure: p.pause_on_failure,
                env: super::sessions::checked_env(p.env)?,
            })
            .await?;
        Ok((&project).into())
    }
}

impl Serve for ProjectSet {
    async fn serve(caller: &Caller, p: ProjectSetParams) -> Result<Project, RpcError> {
        change(caller, p, false).await
    }
}

impl Serve for ProjectArchive {
    async fn serve(caller: &Caller, p: ProjectArchiveParams) -> Result<Project, RpcError> {
        let unchanged = ProjectSetParams {
            project: p.project,
            ..ProjectSetParams::default()
        };
        change(caller, unchanged, true).await
    }
}

/// `project.set`, and `project.archive` (`archive`: no change but that the project goes).
async fn change(caller: &Caller, p: ProjectSetParams, archive: bool) -> Result<Project, RpcError> {
    let corral = caller.corral();
    let project = resolve_project(corral, &p.project)?;
    let (full_access, policy) = grant(p.full_access, p.policy)?;
    let change = projects::ProjectChange {
        engine: engine(p.engine.as_deref())?,
        model: p.model,
        full_access,
        policy,
        agents_scope: p.agents_scope,
        remote: p.remote,
        groups: p.groups,
        instructions: p.instructions,
        keep_background: p.keep_background,
        isolation: isolation(p.isolation.as_deref())?,
        worktrees_dir: clearing(p.worktrees_dir),
        setup: clearing(p.setup),
        repo_root: None,
        pause_on_failure: p.pause_on_failure,
        env: projects::EnvChange {
            set: super::sessions::checked_env(p.env)?,
            unset: p.unset_env,
        },
        notify: match p.notify.as_deref().map(str::trim) {
            None => None,
            Some("default") => Some(None),
            Some(list) => {
                crate::store::settings::parse_notify_kinds(list).map_err(|error| {
                    RpcError::new(code::INVALID_PARAMS, format!("notify: {error}"))
                })?;
                Some(Some(list.to_string()))
            }
        },
        archive,
    };
    let changed = corral.change_project(&project.id, change).await?;
    Ok((&changed).into())
}

impl Serve for GroupSet {
    async fn serve(caller: &Caller, p: GroupSetParams) -> Result<GroupSetResult, RpcError> {
        let locking = p.locking.unwrap_or(true);
        caller.corral().set_group_locking(&p.name, locking).await?;
        Ok(GroupSetResult {
            name: p.name,
            locking,
        })
    }
}

impl Inspect for GroupList {
    fn inspect(c: &Store, _: NoParams) -> Result<Vec<projects::Group>, RpcError> {
        read(projects::groups(c))
    }
}

impl Serve for GroupRemove {
    async fn serve(caller: &Caller, p: GroupSelector) -> Result<GroupSelector, RpcError> {
        caller.corral().remove_group(&p.name).await?;
        Ok(p)
    }
}
