//! `pause`, `resume` and `pause.list` (#35): one handler each. A target names exactly one
//! scope; it is resolved to the project's or session's id here, so a pause holds that one
//! even when another takes its name later.

use super::{read, resolve_project, resolve_session, Caller, Inspect, Serve, Store};
use crate::protocol::{
    code, NoParams, PauseList, PauseParams, PauseResult, PauseTarget, PauseWork, ResumeResult,
    ResumeWork, RpcError,
};
use crate::store::pauses::{self, Pause, PauseScope, PausedBy};
use crate::Corral;

impl Serve for PauseWork {
    async fn serve(caller: &Caller, p: PauseParams) -> Result<PauseResult, RpcError> {
        let corral = caller.corral();
        let scope = scope(corral, &p.target, false)?;
        // A run may pause only its own session (`confine`): then it says so.
        let from_a_run = match caller.peer_pid {
            Some(peer) => caller
                .origins
                .find(peer, &corral.live_runs().await)
                .is_some(),
            None => false,
        };
        let by = match from_a_run {
            true => PausedBy::Agent,
            false => PausedBy::Person,
        };
        let pauses = corral.pause(scope.clone(), by, p.now).await?;
        let pause = pauses
            .iter()
            .find(|pause| pause.scope == scope)
            .cloned()
            .ok_or_else(|| RpcError::new(code::INTERNAL, "the pause was not stored"))?;
        Ok(PauseResult { pause, pauses })
    }
}

impl Serve for ResumeWork {
    async fn serve(caller: &Caller, p: PauseTarget) -> Result<ResumeResult, RpcError> {
        let corral = caller.corral();
        // A group removed since it was paused is still resumed: its pause is lifted.
        let scope = scope(corral, &p, true)?;
        let (lifted, started, pauses) = corral.resume(scope).await?;
        Ok(ResumeResult {
            lifted,
            started: started.into_iter().map(|prompt| prompt.id).collect(),
            pauses,
        })
    }
}

impl Inspect for PauseList {
    fn inspect(c: &Store, _: NoParams) -> Result<Vec<Pause>, RpcError> {
        read(pauses::pauses(c))
    }
}

/// The one scope `target` names, by id; `any_group`: a group that no longer exists too.
fn scope(corral: &Corral, target: &PauseTarget, any_group: bool) -> Result<PauseScope, RpcError> {
    let named = usize::from(target.all)
        + usize::from(target.project.is_some())
        + usize::from(target.group.is_some())
        + usize::from(target.session.is_some());
    if named != 1 {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "name exactly one of all, project, group or session",
        ));
    }
    if let Some(project) = &target.project {
        return Ok(PauseScope::Project(resolve_project(corral, project)?.id));
    }
    if let Some(session) = &target.session {
        return Ok(PauseScope::Session(resolve_session(corral, session)?.id));
    }
    if let Some(group) = &target.group {
        if !any_group && !corral.groups()?.iter().any(|known| &known.name == group) {
            return Err(RpcError::new(
                code::NOT_FOUND,
                format!("no execution group is named '{group}'"),
            ));
        }
        return Ok(PauseScope::Group(group.clone()));
    }
    Ok(PauseScope::All)
}
