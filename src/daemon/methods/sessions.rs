//! Sessions: `session.list`, `session.show`, `history`, `session.new`, `session.rename`,
//! `session.archive`, `session.steer`, `session.compact`, and a worktree session's
//! `session.diff`, `session.merge`, `session.recreate` (served by [`crate::Corral`]'s calls).

use super::{
    check_title, project_of, read, resolve_project, resolve_session, session_of, Caller, Inspect,
    Serve,
};
use crate::protocol::*;
use crate::store::sessions::NewSession;
use crate::store::sql::Conn as Store;
use crate::store::{drivers, prompts, runs, sessions};

impl Inspect for SessionList {
    fn inspect(c: &Store, p: SessionListParams) -> Result<Vec<Session>, RpcError> {
        let all = p.all.unwrap_or(false);
        let project = match p.project {
            Some(selector) => Some(project_of(c, &selector)?.id),
            None => None,
        };
        Ok(read(sessions::sessions(c))?
            .iter()
            .filter(|s| all || s.archived_at.is_none())
            .filter(|s| project.is_none() || s.project_id == project)
            .map(Session::from)
            .collect())
    }
}

impl Inspect for SessionShow {
    fn inspect(c: &Store, p: SessionSelector) -> Result<SessionShowResult, RpcError> {
        let session = session_of(c, &p.session)?;
        let prompts = read(prompts::prompts_of(c, &session.id))?;
        let driver = read(drivers::driver_claim(c, &session.id))?;
        let state = read(crate::store::overview::session(c, &session.id))?;
        Ok(SessionShowResult {
            session: SessionDetail::new(&session, &prompts),
            prompts: prompts.iter().map(Prompt::from).collect(),
            driver: driver.as_ref().map(Claim::from),
            state,
        })
    }
}

impl Inspect for History {
    fn inspect(c: &Store, p: SessionSelector) -> Result<HistoryResult, RpcError> {
        let session = session_of(c, &p.session)?;
        let prompts = read(prompts::prompts_of(c, &session.id))?;
        let runs = read(runs::runs_of_session(c, &session.id))?;
        Ok(HistoryResult {
            session: (&session).into(),
            prompts: prompts.iter().map(Prompt::from).collect(),
            runs: runs.iter().map(Run::from).collect(),
        })
    }
}

impl Serve for SessionNew {
    async fn serve(caller: &Caller, p: SessionNewParams) -> Result<Session, RpcError> {
        let corral = caller.corral();
        if let Some(title) = &p.title {
            check_title(title.trim())?;
        }
        let project = resolve_project(corral, &p.project)?;
        let wave_id = match &p.wave {
            Some(name) => {
                let repo = crate::repo::toplevel_text(std::path::Path::new(&project.path));
                Some(corral.name_wave(name, repo).await?)
            }
            None => None,
        };
        let session = corral
            .open_session(NewSession {
                project_id: project.id,
                engine: super::engine(p.engine.as_deref())?,
                model: p.model,
                reasoning_effort: p.reasoning_effort,
                policy: p.policy,
                title: p.title,
                task: p.task,
                wave_id,
                branch: p.branch,
                base: p.base,
                env: checked_env(p.env)?,
                ..NewSession::default()
            })
            .await?;
        Ok((&session).into())
    }
}

impl Serve for SessionRename {
    async fn serve(caller: &Caller, p: SessionRenameParams) -> Result<Session, RpcError> {
        let session = resolve_session(caller.corral(), &p.session)?;
        let title = p.title.trim();
        check_title(title)?;
        rename(caller, session, title.to_string()).await
    }
}

impl Serve for SessionArchive {
    async fn serve(caller: &Caller, p: SessionArchiveParams) -> Result<Session, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        let discard = p.discard_changes.unwrap_or(false);
        let (archived, kept_because) = corral.archive_session(&session.id, discard).await?;
        let mut archived = Session::from(&archived);
        archived.worktree_kept_because = kept_because;
        Ok(archived)
    }
}

impl Serve for SessionDiff {
    async fn serve(caller: &Caller, p: SessionDiffParams) -> Result<SessionDiffResult, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        let (worktree, diff) = corral
            .session_diff(&session.id, p.stat.unwrap_or(false))
            .await?;
        Ok(SessionDiffResult {
            session_id: session.id,
            branch: worktree.branch,
            base_commit: worktree.base_commit,
            text: diff.text,
            files_changed: diff.files_changed,
            insertions: diff.insertions,
            deletions: diff.deletions,
        })
    }
}

impl Serve for SessionMerge {
    async fn serve(caller: &Caller, p: SessionMergeParams) -> Result<SessionMerged, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        let squash = p.squash.unwrap_or(false);
        let (worktree, merged) = corral
            .merge_session(&session.id, p.into.as_deref(), squash)
            .await?;
        Ok(SessionMerged {
            session_id: session.id,
            branch: worktree.branch,
            into: merged.into,
            commit: merged.commit,
            squash,
            checkout_updated: merged
                .checkout_updated
                .map(|path| path.to_string_lossy().into_owned()),
        })
    }
}

impl Serve for SessionRecreate {
    async fn serve(caller: &Caller, p: SessionSelector) -> Result<Session, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        Ok((&corral.recreate_worktree(&session.id).await?).into())
    }
}

async fn rename(
    caller: &Caller,
    session: sessions::Session,
    title: String,
) -> Result<Session, RpcError> {
    let changed = caller
        .corral()
        .rename_session(&session.id, &title)
        .await?
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, "the session is gone"))?;
    Ok((&changed).into())
}

impl Serve for SessionSteer {
    async fn serve(caller: &Caller, p: SteerParams) -> Result<Steered, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        Ok(corral.steer(&session.id, &p.text).await?)
    }
}

impl Serve for SessionCompact {
    async fn serve(caller: &Caller, p: SessionSelector) -> Result<Compacted, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        Ok(corral.compact(&session.id).await?)
    }
}

/// An environment a client sent, its names and values checked (`store::environment`).
pub(super) fn checked_env(
    env: crate::store::environment::Environment,
) -> Result<crate::store::environment::Environment, RpcError> {
    crate::store::environment::check(&env).map_err(|error| {
        RpcError::new(
            crate::protocol::code::INVALID_PARAMS,
            format!("env: {error}"),
        )
    })?;
    Ok(env)
}
