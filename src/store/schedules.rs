//! Schedules (#35): a prompt sent on a cron schedule, to a session, or to a new session of a
//! project at each firing.
//!
//! A schedule is a row of `schedules` with its next firing's time (`next_at`); a firing is a
//! row of `schedule_firings`, which says what it sent or why it skipped. The daemon's timer
//! (`corral::schedules`) sleeps until the earliest `next_at` and takes what is due in one
//! write ([`take_due`]): under the store's write lock, so that of several daemons one fires
//! each time, and each schedule's next time is moved past now in the same write. What it
//! decides there is final for a skip; a firing to send is stored `sending`, and the timer
//! records what came of it ([`end_firing`]) once the prompt is queued (or refused).
//!
//! The catch-up policy (docs/decisions.md): a firing found more than [`LATE_MS`] past its
//! time — no daemon ran then, or the machine slept — is skipped and says so (with how many
//! times were missed), unless the schedule was made with `catch_up`: then it fires once, late.
//! Never more than once for all the times missed.

use serde::{Deserialize, Serialize};

use crate::clock::CronTimes;
use crate::store::pauses::{self, PauseSet};
use crate::store::select::{self, Unselected};
use crate::store::sql::{self, args, Conn, Row};

/// How late a firing may be and still count as on time (the timer's own delays, a busy
/// store); later, its time was missed.
pub const LATE_MS: i64 = 60_000;

/// How many missed times a skip counts before it says "at least".
const COUNTED: usize = 1_000;

/// A schedule, as stored and shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    /// The project it sends in (a session schedule's session's project).
    pub project_id: String,
    /// The session it sends to; `None`: a new session of the project at each firing.
    #[serde(default)]
    pub session_id: Option<String>,
    pub cron: String,
    pub text: String,
    /// A firing missed while no daemon ran is sent once, late (else skipped).
    #[serde(default)]
    pub catch_up: bool,
    #[serde(default)]
    pub paused: bool,
    /// The next firing's time (ms); `None` when it never fires again, or while paused.
    #[serde(default)]
    pub next_at: Option<i64>,
    pub created_at: i64,
    /// The project's name and the session's title, for a person.
    #[serde(default)]
    pub project_name: Option<String>,
    #[serde(default)]
    pub session_title: Option<String>,
    /// Its latest firing.
    #[serde(default)]
    pub last: Option<Firing>,
}

/// What came of one firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Being sent (the timer queues its prompt now).
    Sending,
    /// Its prompt was queued.
    Sent,
    /// Not sent, and `reason` says why: paused, the previous firing still running, missed.
    Skipped,
    /// Its prompt was refused (an archived session, an engine gone); `reason` says why.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sending => "sending",
            Outcome::Sent => "sent",
            Outcome::Skipped => "skipped",
            Outcome::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<Outcome> {
        [
            Outcome::Sending,
            Outcome::Sent,
            Outcome::Skipped,
            Outcome::Failed,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == text)
    }
}

/// One firing of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firing {
    pub schedule_id: String,
    /// The time it was due (ms): with the schedule, its key.
    pub due_at: i64,
    /// When the daemon took it.
    pub at: i64,
    pub outcome: Outcome,
    #[serde(default)]
    pub reason: Option<String>,
    /// Where its prompt went (a project schedule's new session).
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub prompt_id: Option<String>,
}

/// A schedule to store; its `next_at` is computed by the caller from its cron.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    pub id: String,
    pub project_id: String,
    pub session_id: Option<String>,
    pub cron: String,
    pub text: String,
    pub catch_up: bool,
    pub next_at: Option<i64>,
}

const COLUMNS: &str = "s.id, s.project_id, s.session_id, s.cron, s.text, s.catch_up, s.paused, \
                       s.next_at, s.created_at, \
                       (SELECT name FROM projects WHERE id = s.project_id), \
                       (SELECT title FROM sessions WHERE id = s.session_id)";

fn schedule_row(row: &Row<'_>) -> sql::Result<Schedule> {
    Ok(Schedule {
        id: row.get(0)?,
        project_id: row.get(1)?,
        session_id: row.get(2)?,
        cron: row.get(3)?,
        text: row.get(4)?,
        catch_up: row.get(5)?,
        paused: row.get(6)?,
        next_at: row.get(7)?,
        created_at: row.get(8)?,
        project_name: row.get(9)?,
        session_title: row.get(10)?,
        last: None,
    })
}

const FIRING_COLUMNS: &str = "schedule_id, due_at, at, outcome, reason, session_id, prompt_id";

fn firing_row(row: &Row<'_>) -> sql::Result<Firing> {
    let outcome: String = row.get(3)?;
    Ok(Firing {
        schedule_id: row.get(0)?,
        due_at: row.get(1)?,
        at: row.get(2)?,
        outcome: Outcome::parse(&outcome)
            .ok_or_else(|| sql::DbError::Invalid(format!("{outcome:?} is not a firing's")))?,
        reason: row.get(4)?,
        session_id: row.get(5)?,
        prompt_id: row.get(6)?,
    })
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// Every schedule, oldest first, each with its latest firing.
pub fn schedules(connection: &Conn) -> sql::Result<Vec<Schedule>> {
    let mut all = connection.rows(
        &format!("SELECT {COLUMNS} FROM schedules s ORDER BY s.created_at, s.id"),
        args![],
        schedule_row,
    )?;
    for schedule in &mut all {
        schedule.last = firings(connection, &schedule.id, 1)?.pop();
    }
    Ok(all)
}

/// The schedule `selector` names: its id or a unique id prefix.
pub fn find(connection: &Conn, selector: &str) -> sql::Result<Result<Schedule, Unselected>> {
    let all = schedules(connection)?;
    Ok(select::select(
        "schedule",
        selector,
        all,
        |schedule| &schedule.id,
        |_| None,
    ))
}

/// A schedule's latest `limit` firings, newest first.
pub fn firings(connection: &Conn, schedule_id: &str, limit: usize) -> sql::Result<Vec<Firing>> {
    connection.rows(
        &format!(
            "SELECT {FIRING_COLUMNS} FROM schedule_firings WHERE schedule_id = ?1 \
              ORDER BY due_at DESC LIMIT ?2"
        ),
        args![schedule_id, limit as i64],
        firing_row,
    )
}

/// The earliest time a schedule not paused fires next: one seek of `schedules_next`.
pub fn next_firing(connection: &Conn) -> sql::Result<Option<i64>> {
    connection.row(
        "SELECT MIN(next_at) FROM schedules WHERE paused = 0 AND next_at IS NOT NULL",
        args![],
        |row| row.get(0),
    )
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// Stores a new schedule.
pub(crate) fn insert(connection: &Conn, new: &NewSchedule, now: i64) -> sql::Result<Schedule> {
    connection.run(
        "INSERT INTO schedules (id, project_id, session_id, cron, text, catch_up, paused, \
                                next_at, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)",
        args![
            new.id,
            new.project_id,
            new.session_id,
            new.cron,
            new.text,
            new.catch_up,
            new.next_at,
            now
        ],
    )?;
    one(connection, &new.id)
}

/// Pauses a schedule, or resumes it with its next time from now (`next_at`): a schedule
/// resumed does not fire for the times it was paused. `None` if there is none of that id.
pub(crate) fn set_paused(
    connection: &Conn,
    id: &str,
    paused: bool,
    next_at: Option<i64>,
) -> sql::Result<Option<Schedule>> {
    let changed = match paused {
        true => connection.run(
            "UPDATE schedules SET paused = 1, next_at = NULL WHERE id = ?1",
            args![id],
        )?,
        false => connection.run(
            "UPDATE schedules SET paused = 0, next_at = ?2 WHERE id = ?1 AND paused = 1",
            args![id, next_at],
        )?,
    };
    if changed == 0
        && connection
            .opt_row("SELECT 1 FROM schedules WHERE id = ?1", args![id], |row| {
                row.get::<i64>(0)
            })?
            .is_none()
    {
        return Ok(None);
    }
    one(connection, id).map(Some)
}

/// Removes a schedule and its firings (the prompts it sent stay). Whether there was one.
pub(crate) fn remove(connection: &Conn, id: &str) -> sql::Result<bool> {
    connection.run(
        "DELETE FROM schedule_firings WHERE schedule_id = ?1",
        args![id],
    )?;
    Ok(connection.run("DELETE FROM schedules WHERE id = ?1", args![id])? > 0)
}

fn one(connection: &Conn, id: &str) -> sql::Result<Schedule> {
    let mut schedule = connection.row(
        &format!("SELECT {COLUMNS} FROM schedules s WHERE s.id = ?1"),
        args![id],
        schedule_row,
    )?;
    schedule.last = firings(connection, id, 1)?.pop();
    Ok(schedule)
}

/// A firing taken by [`take_due`], with its schedule.
#[derive(Debug, Clone)]
pub struct Taken {
    pub schedule: Schedule,
    pub firing: Firing,
}

/// Takes every firing due at `now`: each due schedule gets its firing row — `sending`, or
/// `skipped` with why (missed, unless `catch_up`; a pause over its scope; its previous
/// firing's prompt not ended yet) — and its next time after `now`.
pub(crate) fn take_due(connection: &Conn, now: i64) -> sql::Result<Vec<Taken>> {
    let due = connection.rows(
        &format!(
            "SELECT {COLUMNS} FROM schedules s \
              WHERE s.paused = 0 AND s.next_at IS NOT NULL AND s.next_at <= ?1 \
              ORDER BY s.next_at, s.id"
        ),
        args![now],
        schedule_row,
    )?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let pauses = PauseSet(pauses::pauses(connection)?);
    let mut taken = Vec::with_capacity(due.len());
    for mut schedule in due {
        let due_at = schedule.next_at.expect("selected with a next time");
        let times = CronTimes::parse(&schedule.cron, due_at).ok();
        let late = now - due_at > LATE_MS;
        let skipped = if late && !schedule.catch_up {
            Some(missed(times.as_ref(), due_at, now))
        } else if let Some(pause) = covering_pause(connection, &pauses, &schedule)? {
            Some(format!("paused: {}", pause.describe()))
        } else {
            still_running(connection, &schedule.id)?
        };
        let (outcome, reason) = match skipped {
            Some(why) => (Outcome::Skipped, Some(why)),
            None if late => (
                Outcome::Sending,
                Some(format!(
                    "late: it was due at {}",
                    crate::clock::utc_time(due_at)
                )),
            ),
            None => (Outcome::Sending, None),
        };
        let firing = Firing {
            schedule_id: schedule.id.clone(),
            due_at,
            at: now,
            outcome,
            reason,
            session_id: schedule.session_id.clone(),
            prompt_id: None,
        };
        connection.run(
            "INSERT INTO schedule_firings (schedule_id, due_at, at, outcome, reason, session_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            args![
                firing.schedule_id,
                firing.due_at,
                firing.at,
                firing.outcome.as_str(),
                firing.reason,
                firing.session_id
            ],
        )?;
        let next_at = times.and_then(|times| times.next_after(now));
        connection.run(
            "UPDATE schedules SET next_at = ?2 WHERE id = ?1",
            args![schedule.id, next_at],
        )?;
        schedule.next_at = next_at;
        schedule.last = Some(firing.clone());
        taken.push(Taken { schedule, firing });
    }
    Ok(taken)
}

/// Records what came of a firing `take_due` left `sending`.
pub(crate) fn end_firing(connection: &Conn, ended: &Firing) -> sql::Result<()> {
    connection.run(
        "UPDATE schedule_firings SET outcome = ?3, reason = ?4, session_id = ?5, prompt_id = ?6 \
          WHERE schedule_id = ?1 AND due_at = ?2",
        args![
            ended.schedule_id,
            ended.due_at,
            ended.outcome.as_str(),
            ended.reason,
            ended.session_id,
            ended.prompt_id
        ],
    )?;
    Ok(())
}

/// Firings a daemon left `sending` when it stopped: failed, saying so. Run by a store's only
/// daemon at its start (on a shared store another daemon may be sending one now).
pub(crate) fn abandon_sending(connection: &Conn) -> sql::Result<u64> {
    connection.run(
        "UPDATE schedule_firings SET outcome = 'failed', \
                reason = 'the daemon stopped while it was sending the prompt' \
          WHERE outcome = 'sending'",
        args![],
    )
}

/// Why a firing found late is skipped: the times missed, counted.
fn missed(times: Option<&CronTimes>, due_at: i64, now: i64) -> String {
    let mut count = 1;
    let mut at = due_at;
    while let Some(next) = times.and_then(|times| times.next_after(at)) {
        if next > now || count > COUNTED {
            break;
        }
        count += 1;
        at = next;
    }
    let counted = match count {
        1 => "it".to_string(),
        _ if count > COUNTED => format!("at least {COUNTED} times"),
        _ => format!("{count} times"),
    };
    format!(
        "missed: no daemon ran at {} ({counted} until {}; catch-up is off)",
        crate::clock::utc_time(due_at),
        crate::clock::utc_time(now)
    )
}

/// The pause that holds a schedule's scope: its session's (for a session schedule), its
/// project's, a group of its project's, or everything's.
fn covering_pause<'p>(
    connection: &Conn,
    pauses: &'p PauseSet,
    schedule: &Schedule,
) -> sql::Result<Option<&'p pauses::Pause>> {
    if pauses.0.is_empty() {
        return Ok(None);
    }
    let groups = crate::store::projects::project(connection, &schedule.project_id)?
        .map(|project| project.groups)
        .unwrap_or_default();
    let session = schedule.session_id.as_deref().unwrap_or("");
    Ok(pauses.covers(session, &schedule.project_id, &groups, false))
}

/// Why a schedule's previous firing holds this one: its prompt is queued or running still.
fn still_running(connection: &Conn, schedule_id: &str) -> sql::Result<Option<String>> {
    let previous: Option<(Option<String>, String, Option<String>)> = connection.opt_row(
        "SELECT f.prompt_id, f.outcome, p.status FROM schedule_firings f \
           LEFT JOIN prompts p ON p.id = f.prompt_id \
          WHERE f.schedule_id = ?1 AND f.outcome IN ('sending', 'sent') \
          ORDER BY f.due_at DESC LIMIT 1",
        args![schedule_id],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    Ok(match previous {
        Some((_, outcome, _)) if outcome == "sending" => {
            Some("the previous firing is still being sent".to_string())
        }
        Some((Some(prompt), _, Some(status))) if status == "queued" || status == "running" => Some(
            format!("the previous firing's prompt {prompt} is still {status}"),
        ),
        _ => None,
    })
}
