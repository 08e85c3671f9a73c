//! Schedules (#35): `schedule.add`, `schedule.list`, `schedule.show`, `schedule.pause`,
//! `schedule.resume`, `schedule.remove`. A schedule sends a prompt on a cron schedule to a
//! session, or to a new session of a project at each firing; each firing is recorded.

use serde::{Deserialize, Serialize};

use super::{method, NoParams};
use crate::store::schedules::{Firing, Schedule};

method! {
    /// Adds a schedule; its first firing is its cron's next time.
    ScheduleAdd = "schedule.add": ScheduleAddParams => Schedule,
    /// Every schedule, oldest first, each with its latest firing.
    ScheduleList = "schedule.list": NoParams => Vec<Schedule>,
    /// One schedule and its latest firings.
    ScheduleShow = "schedule.show": ScheduleShowParams => ScheduleShown,
    /// Pauses a schedule: it fires no more until resumed.
    SchedulePause = "schedule.pause": ScheduleSelector => Schedule,
    /// Resumes a schedule: it fires next at its cron's next time from now.
    ScheduleResume = "schedule.resume": ScheduleResumeParams => Schedule,
    /// Removes a schedule and its firings (the prompts it sent stay); answers what it was.
    ScheduleRemove = "schedule.remove": ScheduleSelector => Schedule,
}

/// `schedule.add`: exactly one of `session` and `project`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleAddParams {
    /// The session each firing sends to: its id, title, or a unique id prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Or the project in which each firing opens a new session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// A cron expression: five fields (`minute hour day month weekday`), or six with
    /// seconds first, in the daemon's local time zone; or `@hourly`, `@daily`, ….
    pub cron: String,
    /// The prompt each firing sends.
    pub text: String,
    /// A firing missed while no daemon ran is sent once, late (default: skipped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub catch_up: bool,
}

/// A schedule by its id or a unique id prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSelector {
    pub schedule: String,
}

/// `schedule.resume`: a schedule, as [`ScheduleSelector`] names it (a type of its own, for a
/// resume is a person's alone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleResumeParams {
    pub schedule: String,
}

/// `schedule.show`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleShowParams {
    pub schedule: String,
    /// How many of its latest firings (default 20, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `schedule.show`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleShown {
    pub schedule: Schedule,
    /// Its latest firings, newest first.
    pub firings: Vec<Firing>,
}
