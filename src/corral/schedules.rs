//! Schedules (#35) on the library's front: `Corral::add_schedule` and its siblings, and the
//! firer that sends what a schedule fires.
//!
//! The timer is the due prompts' (`actors::due`): it sleeps until the earliest firing and
//! tells the [`Firer`]. The firer takes what is due in one ledger write (`TakeFirings`: the
//! skips are decided and recorded there, and each schedule moved to its next time), then
//! sends each firing as a person's `send` would — through [`Corral::open_session`] (a
//! project's schedule: a new session per firing, in its own worktree when the project makes
//! worktrees) and [`Corral::send_to`], with every check they make — and records what came of
//! it (`EndFiring`). It lives here, above the actors, because it sends through the library's
//! front; it holds a [`WeakCorral`], so that it keeps nothing alive that the library's
//! handles let go.

use std::sync::{Arc, Weak};

use actix::prelude::*;

use super::{Corral, CorralError};
use crate::actors::due::{FireSchedules, WeakDueHandle};
use crate::actors::ledger::{
    AbandonFirings, AddSchedule, EndFiring, Fenced, PauseSchedule, RemoveSchedule, TakeFirings,
};
use crate::actors::notifier::{Named, Notification};
use crate::actors::shared::Shared;
use crate::actors::supervisor::WeakSupervisorHandle;
use crate::clock::{schedule_now, CronTimes};
use crate::store::schedules::{self, Firing, NewSchedule, Outcome, Schedule, Taken};
use crate::store::settings::NotifyKind;
use crate::store::{prompts::NewPrompt, sessions::NewSession};

/// What a schedule sends to: a session, or a new session of a project at each firing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleTarget {
    Session(String),
    Project(String),
}

/// A schedule to add.
#[derive(Debug, Clone)]
pub struct ScheduleRequest {
    /// The session's or project's id.
    pub target: ScheduleTarget,
    /// When: a cron expression (see `clock::CronTimes`).
    pub cron: String,
    /// What each firing sends.
    pub text: String,
    /// A firing missed while no daemon ran is sent once, late, instead of skipped.
    pub catch_up: bool,
}

impl Corral {
    /// Adds a schedule. Refused when the cron expression is not one or never fires, when the
    /// text is empty or too long, or when its session or project is archived or unknown.
    pub async fn add_schedule(&self, request: ScheduleRequest) -> Result<Schedule, CorralError> {
        let now = schedule_now();
        let times = CronTimes::parse(&request.cron, now).map_err(CorralError::Invalid)?;
        if request.text.trim().is_empty() {
            return Err(CorralError::Invalid("the prompt is empty".into()));
        }
        crate::protocol::check_prompt_size(&request.text).map_err(CorralError::Invalid)?;
        let (project_id, session_id) = match &request.target {
            ScheduleTarget::Session(id) => {
                let (session, _) = self
                    .read(|c| crate::store::sessions::session_and_project(c, id))?
                    .ok_or_else(|| CorralError::NotFound(format!("no session '{id}'")))?;
                if session.archived_at.is_some() {
                    return Err(CorralError::Invalid(format!("session '{id}' is archived")));
                }
                let project_id = session.project_id.ok_or_else(|| {
                    CorralError::Invalid(format!("session '{id}' has no project"))
                })?;
                (project_id, Some(id.clone()))
            }
            ScheduleTarget::Project(id) => (id.clone(), None),
        };
        let project = self
            .read(|c| crate::store::projects::project(c, &project_id))?
            .ok_or_else(|| CorralError::NotFound(format!("no project '{project_id}'")))?;
        super::refuse_archived_project(&project)?;
        let next_at = times.next_after(now);
        let schedule = NewSchedule {
            id: uuid::Uuid::now_v7().to_string(),
            project_id,
            session_id,
            cron: request.cron.trim().to_string(),
            text: request.text,
            catch_up: request.catch_up,
            next_at,
        };
        let added = self
            .shared
            .ledger
            .write(AddSchedule { schedule, now })
            .await?;
        if let Some(at) = added.next_at {
            self.due.scheduled(at);
        }
        Ok(added)
    }

    /// Every schedule, oldest first, each with its latest firing.
    pub fn schedules(&self) -> Result<Vec<Schedule>, CorralError> {
        self.read(schedules::schedules)
    }

    /// The schedule `selector` names (its id or a unique prefix), with its latest `limit`
    /// firings, newest first.
    pub fn schedule(
        &self,
        selector: &str,
        limit: usize,
    ) -> Result<(Schedule, Vec<Firing>), CorralError> {
        let schedule = self
            .read(|c| schedules::find(c, selector))?
            .map_err(|unselected| CorralError::NotFound(unselected.to_string()))?;
        let firings = self.read(|c| schedules::firings(c, &schedule.id, limit))?;
        Ok((schedule, firings))
    }

    /// Pauses a schedule (it fires no more), or resumes it: it fires next at its cron's
    /// next time from now, not for the times it was paused.
    pub async fn pause_schedule(&self, id: &str, paused: bool) -> Result<Schedule, CorralError> {
        let (schedule, _) = self.schedule(id, 0)?;
        let next_at = match paused {
            true => None,
            false => CronTimes::parse(&schedule.cron, schedule_now())
                .ok()
                .and_then(|times| times.next_after(schedule_now())),
        };
        let changed = self
            .shared
            .ledger
            .write(PauseSchedule {
                id: schedule.id.clone(),
                paused,
                next_at,
            })
            .await?
            .ok_or_else(|| CorralError::NotFound(format!("no schedule '{id}'")))?;
        if let Some(at) = changed.next_at {
            self.due.scheduled(at);
        }
        Ok(changed)
    }

    /// Removes a schedule and its firings (the prompts it sent stay); it was `schedule`.
    pub async fn remove_schedule(&self, id: &str) -> Result<Schedule, CorralError> {
        let (schedule, _) = self.schedule(id, 0)?;
        let id = schedule.id.clone();
        match self.shared.ledger.write(RemoveSchedule { id }).await? {
            true => Ok(schedule),
            false => Err(CorralError::NotFound(format!(
                "no schedule '{}'",
                schedule.id
            ))),
        }
    }

    /// Starts the firer of this library's schedules (at its opening).
    pub(super) fn start_firing(&self) {
        if !self.shared.coordination.shares_store() {
            // A firing left `sending` was this store's only daemon's, which has stopped.
            let ledger = self.shared.ledger.clone();
            actix::spawn(async move {
                if let Err(error) = ledger.write(AbandonFirings {}).await {
                    tracing::warn!(%error, "firings left unsent were not closed");
                }
            });
        }
        let firer = Firer {
            corral: self.downgrade(),
        }
        .start();
        self.due.start_firing(firer.recipient());
    }

    /// Sends one firing: to its session, or to a new session of its project.
    async fn send_firing(&self, schedule: &Schedule, mut firing: Firing) -> Firing {
        let sent = async {
            let session = match &schedule.session_id {
                Some(id) => self
                    .read(|c| crate::store::sessions::session_and_project(c, id))?
                    .map(|(session, _)| session)
                    .ok_or_else(|| CorralError::NotFound(format!("no session '{id}'")))?,
                None => {
                    let title = format!(
                        "{} ({})",
                        first_words(&schedule.text),
                        crate::clock::utc_time(firing.due_at)
                    );
                    self.open_session(NewSession {
                        project_id: schedule.project_id.clone(),
                        title: Some(title),
                        ..NewSession::default()
                    })
                    .await?
                }
            };
            let prompt = NewPrompt {
                text: schedule.text.clone(),
                ..NewPrompt::default()
            };
            let session_id = session.id.clone();
            let enqueued = self.send_to(session, None, prompt).await?;
            Ok::<_, CorralError>((session_id, enqueued.prompt.id))
        };
        match sent.await {
            Ok((session_id, prompt_id)) => {
                firing.outcome = Outcome::Sent;
                firing.session_id = Some(session_id);
                firing.prompt_id = Some(prompt_id);
            }
            Err(error) => {
                firing.outcome = Outcome::Failed;
                firing.reason = Some(error.to_string());
            }
        }
        firing
    }

    /// Tells a person of a firing (`schedule.fired`, `schedule.skipped`).
    fn tell_firing(&self, schedule: &Schedule, firing: &Firing) {
        let (event, said) = match firing.outcome {
            Outcome::Sent | Outcome::Sending => (NotifyKind::ScheduleFired, "fired"),
            Outcome::Skipped => (NotifyKind::ScheduleSkipped, "skipped"),
            Outcome::Failed => (NotifyKind::ScheduleSkipped, "failed"),
        };
        let project_kinds = self
            .read(|c| crate::store::projects::project(c, &schedule.project_id))
            .ok()
            .flatten()
            .and_then(|project| project.notify);
        let mut notification = Notification::schedule(
            event,
            format!(
                "schedule {}: {said}",
                schedule.id.chars().take(8).collect::<String>()
            ),
            firing
                .reason
                .clone()
                .unwrap_or_else(|| first_words(&schedule.text)),
            project_kinds,
        );
        notification.project = Some(Named {
            id: schedule.project_id.clone(),
            name: schedule.project_name.clone(),
        });
        notification.session = firing.session_id.as_ref().map(|id| Named {
            id: id.clone(),
            name: schedule.session_title.clone(),
        });
        self.shared.notifier.notify(notification);
    }

    /// A handle that keeps nothing alive (see [`WeakCorral`]).
    fn downgrade(&self) -> WeakCorral {
        WeakCorral {
            shared: Arc::downgrade(&self.shared),
            supervisor: self.supervisor.downgrade(),
            due: self.due.downgrade(),
            recovered: Arc::downgrade(&self.recovered),
            checked: self.checked.clone(),
            lock: Arc::downgrade(&self._lock),
            listener: Arc::downgrade(&self._listener),
        }
    }
}

/// A [`Corral`] that does not keep it open: what the firer holds, so that the library's
/// handles alone decide how long it lives (the timer keeps the firer).
struct WeakCorral {
    shared: Weak<Shared>,
    supervisor: WeakSupervisorHandle,
    due: WeakDueHandle,
    recovered: Weak<crate::store::runs::Recovered>,
    checked: Option<Arc<str>>,
    lock: Weak<crate::home::DaemonLock>,
    listener: Weak<Option<crate::store::listen::Listener>>,
}

impl WeakCorral {
    fn upgrade(&self) -> Option<Corral> {
        Some(Corral {
            shared: self.shared.upgrade()?,
            supervisor: self.supervisor.upgrade()?,
            due: self.due.upgrade()?,
            recovered: self.recovered.upgrade()?,
            checked: self.checked.clone(),
            _lock: self.lock.upgrade()?,
            _listener: self.listener.upgrade()?,
        })
    }
}

/// The actor that sends the firings the timer tells it of, one batch at a time.
struct Firer {
    corral: WeakCorral,
}

impl Actor for Firer {
    type Context = Context<Self>;
}

impl Handler<FireSchedules> for Firer {
    type Result = ();

    fn handle(&mut self, _: FireSchedules, ctx: &mut Context<Self>) {
        let Some(corral) = self.corral.upgrade() else {
            ctx.stop();
            return;
        };
        // One batch at a time: a project's firing may make a worktree first.
        ctx.wait(fire(corral).into_actor(self));
    }
}

/// Takes the firings due now and sends those not skipped.
async fn fire(corral: Corral) {
    let take = Fenced {
        claim: corral.shared.coordination.fence(),
        write: TakeFirings {
            now: schedule_now(),
        },
    };
    let taken = corral.shared.ledger.write(take).await;
    corral.due.schedules_taken();
    let taken = match taken {
        Ok(taken) => taken,
        Err(error) => {
            tracing::error!(%error, "the schedules due were not taken");
            return;
        }
    };
    for Taken { schedule, firing } in taken {
        let firing = match firing.outcome {
            Outcome::Sending => {
                let ended = corral.send_firing(&schedule, firing).await;
                let write = EndFiring {
                    firing: ended.clone(),
                };
                if let Err(error) = corral.shared.ledger.write(write).await {
                    tracing::error!(%error, schedule = %schedule.id, "a firing was not recorded");
                }
                ended
            }
            _ => firing,
        };
        tracing::info!(
            schedule = %schedule.id,
            outcome = firing.outcome.as_str(),
            reason = firing.reason.as_deref().unwrap_or(""),
            "schedule fired"
        );
        corral.tell_firing(&schedule, &firing);
    }
}

/// A text's first words, for a title: at most 40 characters of its first line.
fn first_words(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    match line.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}
