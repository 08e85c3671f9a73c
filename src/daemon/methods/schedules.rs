//! `schedule.*` (#35): one handler each. A schedule's session or project is resolved to its
//! id here, so the schedule holds that one even when another takes its name later.

use super::{read, resolve_project, resolve_session, store_error, Caller, Inspect, Serve, Store};
use crate::protocol::{
    code, NoParams, RpcError, ScheduleAdd, ScheduleAddParams, ScheduleList, SchedulePause,
    ScheduleRemove, ScheduleResume, ScheduleResumeParams, ScheduleSelector, ScheduleShow,
    ScheduleShowParams, ScheduleShown,
};
use crate::store::schedules::{self, Schedule};
use crate::{ScheduleRequest, ScheduleTarget};

impl Serve for ScheduleAdd {
    async fn serve(caller: &Caller, p: ScheduleAddParams) -> Result<Schedule, RpcError> {
        let corral = caller.corral();
        let target = match (&p.session, &p.project) {
            (Some(session), None) => ScheduleTarget::Session(resolve_session(corral, session)?.id),
            (None, Some(project)) => ScheduleTarget::Project(resolve_project(corral, project)?.id),
            _ => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    "name exactly one of session or project",
                ))
            }
        };
        let request = ScheduleRequest {
            target,
            cron: p.cron,
            text: p.text,
            catch_up: p.catch_up,
        };
        corral.add_schedule(request).await.map_err(store_error)
    }
}

impl Inspect for ScheduleList {
    fn inspect(c: &Store, _: NoParams) -> Result<Vec<Schedule>, RpcError> {
        read(schedules::schedules(c))
    }
}

impl Serve for ScheduleShow {
    async fn serve(caller: &Caller, p: ScheduleShowParams) -> Result<ScheduleShown, RpcError> {
        let limit = p.limit.unwrap_or(20).min(1_000);
        let (schedule, firings) = caller
            .corral()
            .schedule(&p.schedule, limit)
            .map_err(store_error)?;
        Ok(ScheduleShown { schedule, firings })
    }
}

impl Serve for SchedulePause {
    async fn serve(caller: &Caller, p: ScheduleSelector) -> Result<Schedule, RpcError> {
        let corral = caller.corral();
        corral
            .pause_schedule(&p.schedule, true)
            .await
            .map_err(store_error)
    }
}

impl Serve for ScheduleResume {
    async fn serve(caller: &Caller, p: ScheduleResumeParams) -> Result<Schedule, RpcError> {
        let corral = caller.corral();
        corral
            .pause_schedule(&p.schedule, false)
            .await
            .map_err(store_error)
    }
}

impl Serve for ScheduleRemove {
    async fn serve(caller: &Caller, p: ScheduleSelector) -> Result<Schedule, RpcError> {
        let corral = caller.corral();
        corral
            .remove_schedule(&p.schedule)
            .await
            .map_err(store_error)
    }
}
