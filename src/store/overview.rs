//! What `corral monitor` and the daemon's `overview` and `execs.list` read: one
//! implementation for the CLI on its own read-only connection and the daemon on its pool.
//!
//! - [`sessions`]: every session with its state, in one query (a few aggregates joined to
//!   the sessions, not a read per session: 1,000 sessions cost one statement).
//! - [`runs_now`]: the runs marked running, split into the ones whose engine lives and the
//!   gaps (engine gone: a daemon died; the next one closes them and requeues their prompts).
//! - [`open_execs`]: execs not completed, split into running and lost (process gone; judged
//!   on the exec's own host only).
//! - [`read`]: all of it for the daemon's `overview` ([`Overview`]; the slots are the slot
//!   manager's, and the daemon adds them).
//! - [`exec_page`]: the exec ledger page of `monitor list` and `execs.list` ([`ExecQuery`]:
//!   its filters, a wave by name or id, and the cursor).
//!
//! A session's line carries its branch when it has its own worktree (docs/worktrees.md).
//!
//! A session's state ([`SessionState`], computed here only): `needs-you` (an approval waits
//! for a person's answer), `working` (an engine runs), `waiting-for-slot` (reason: what holds
//! it), `backing-off` (a retry's delay; `until`), `queued`, `idle` (answered, cancelled, or
//! nothing sent yet), `failed` (reason: the error), `archived`. A running prompt's phase is
//! its row's (`store::phases`), so one statement still reads every session.

use crate::engine::EngineKind;
use std::fmt;
use std::path::Path;

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::exec::{self, Cursor, Exec, ExecFilter, ExecPage, OutcomeFilter};
use super::pauses::covers_sql;
use super::runs::Run;
use super::{events, runs};
use crate::process;

/// How many recent commands an overview carries.
pub const RECENT: usize = 10;

/// Where a session is, in one word: the one vocabulary of every surface (the CLI's tables,
/// `overview`, `session.show`, the HTTP API, the dashboard), computed here and nowhere else.
/// Declared in the order a person should look at them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// An engine waits for a person's answer (an approval).
    NeedsYou,
    /// An engine runs a prompt.
    Working,
    /// A prompt waits for a slot (the reason says what holds it).
    WaitingForSlot,
    /// A failed run waits before its retry (`until`).
    BackingOff,
    /// A pause covers it (`store::pauses`): no new run starts (the reason names the pause).
    Paused,
    /// Prompts wait their turn, none running.
    Queued,
    /// Answered (or nothing sent yet): it waits for a prompt.
    Idle,
    /// Its last prompt failed.
    Failed,
    Archived,
}

impl SessionState {
    pub const ALL: [SessionState; 9] = [
        SessionState::NeedsYou,
        SessionState::Working,
        SessionState::WaitingForSlot,
        SessionState::BackingOff,
        SessionState::Paused,
        SessionState::Queued,
        SessionState::Idle,
        SessionState::Failed,
        SessionState::Archived,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::NeedsYou => "needs-you",
            SessionState::Working => "working",
            SessionState::WaitingForSlot => "waiting-for-slot",
            SessionState::BackingOff => "backing-off",
            SessionState::Paused => "paused",
            SessionState::Queued => "queued",
            SessionState::Idle => "idle",
            SessionState::Failed => "failed",
            SessionState::Archived => "archived",
        }
    }

    /// Whether a prompt of it is under way (running, or waiting for a slot or a retry).
    pub fn is_busy(self) -> bool {
        matches!(
            self,
            SessionState::NeedsYou
                | SessionState::Working
                | SessionState::WaitingForSlot
                | SessionState::BackingOff
        )
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: a table's `{:<8}` lines it up.
        f.pad(self.as_str())
    }
}

/// A session as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionItem {
    pub id: String,
    pub title: Option<String>,
    /// Its project's name.
    pub project: Option<String>,
    pub engine: EngineKind,
    pub state: SessionState,
    /// Why it is in that state, in one line.
    pub reason: String,
    /// The command to run next about it.
    pub next_action: String,
    /// Its last event's time (else its creation's, or its archiving's if later).
    pub last_activity_at: i64,
    /// The prompt the state is about: the running one, else the next queued, else the last
    /// that ended; `None` before the first prompt.
    pub current_prompt_id: Option<String>,
    /// Prompts waiting behind the running one (or for a free session).
    pub queued: i64,
    /// Whether its project runs with full access (shown as a warning).
    pub full_access: bool,
    /// Its git branch, when it has its own worktree (a worktree project's session); absent
    /// from an older daemon's answer.
    #[serde(default)]
    pub branch: Option<String>,
    /// Requests of its agent waiting for a person's answer (approvals); absent from an older
    /// daemon's answer.
    #[serde(default)]
    pub approvals: i64,
    /// Until when it backs off (`backing-off`; the dashboard counts down), or when its
    /// app-server is tried again.
    #[serde(default)]
    pub until: Option<i64>,
    /// The pause that holds it (`paused`): the scope a resume names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<super::pauses::PauseScope>,
}

/// A run whose engine lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunNow {
    pub id: String,
    pub session_id: String,
    pub prompt_id: String,
    pub engine: EngineKind,
    pub started_at: i64,
    pub pid: Option<i64>,
}

impl From<&Run> for RunNow {
    fn from(run: &Run) -> Self {
        RunNow {
            id: run.id.clone(),
            session_id: run.session_id.clone(),
            prompt_id: run.prompt_id.clone(),
            engine: run.engine,
            started_at: run.started_at,
            pid: run.pid,
        }
    }
}

/// What the daemon's `overview` reads from the store (the slots it adds are the slot
/// manager's: `protocol::OverviewResult`).
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    pub sessions: Vec<SessionItem>,
    pub runs: Vec<RunNow>,
    /// Runs marked running whose engine is gone.
    pub gaps: Vec<Run>,
    /// The last [`RECENT`] commands, newest first.
    pub recent: Vec<Exec>,
    /// The daemon-wide number of the last stored event: a stream of every session's events
    /// from here (`events.subscribe` without `session`) misses nothing after this overview.
    pub feed_seq: i64,
}

/// The overview as the store has it. `daemon`: read by a live daemon (a run whose pid is
/// not recorded yet is being spawned, not a gap).
pub fn read(connection: &Conn, daemon: bool) -> sql::Result<Overview> {
    // The feed number first: an event stored while the rest is read is after it, so a
    // stream from it repeats at most what the overview already shows.
    let feed_seq = events::last_feed_seq(connection)?;
    let (runs, gaps) = runs_now(connection, daemon)?;
    let all = ExecFilter::default();
    Ok(Overview {
        sessions: sessions(connection)?,
        runs: runs.iter().map(RunNow::from).collect(),
        gaps,
        recent: exec::list(connection, &all, None, RECENT)?.entries,
        feed_seq,
    })
}

/// The most characters of a text a reason repeats: one line a table or a page shows, not a
/// whole answer (1,000 sessions' overview stays a few hundred KiB).
pub const REASON_CHARS: usize = 240;

/// A reason from a text: its first non-blank line, trimmed, cut at [`REASON_CHARS`] (with
/// `…`). SQL has dropped the blanks before it already.
fn reason(text: sql::Result<Option<String>>) -> sql::Result<String> {
    Ok(first_line(text?.as_deref().unwrap_or("")))
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

/// The start of a text column, blanks at its beginning dropped: its first line is in it (a
/// reason is one line; 4,096 characters of it are read). The blanks (space, tab, LF, CR) are
/// literal characters in the SQL text: SQLite's `char(9, 10, 13)` cannot be written for
/// PostgreSQL, where `char(…)` is the type, and no escape is involved that either parser
/// would read differently.
macro_rules! head {
    ($column:literal) => {
        concat!("substr(ltrim(", $column, ", ' \t\n\r'), 1, 4096)")
    };
}

/// Every session with its state, in creation order: one statement whatever their number.
/// Per session it costs index seeks only: its project, its running prompt and its queued ones
/// (`prompts_by_session`), its last ended one (`prompt_ends`, small rows kept apart from the
/// prompts' for this: the reason is in them). No long column (a prompt's text, an answer, an
/// event's payload) is read, nor any row that holds one, but the running prompt's.
pub fn sessions(connection: &Conn) -> sql::Result<Vec<SessionItem>> {
    let mut items = connection.rows(SESSIONS, args![], |row| {
        Ok((row.get::<i64>(4)?, session_item(row)?))
    })?;
    // Sorted here, not by SQL: no index orders sessions by creation, and a sorter would carry
    // every row's text.
    items.sort_unstable_by(|(a_at, a), (b_at, b)| (a_at, &a.id).cmp(&(b_at, &b.id)));
    Ok(items.into_iter().map(|(_, item)| item).collect())
}

/// One session with its state, as [`sessions`] reads each (`session.show`'s `state`).
pub fn session(connection: &Conn, id: &str) -> sql::Result<Option<SessionItem>> {
    connection
        .row(
            &format!("{SESSIONS} WHERE s.id = ?1"),
            args![id],
            session_item,
        )
        .optional()
}

/// The statement of [`sessions`]: every session's line, its state's facts joined in.
const SESSIONS: &str = concat!(
    "SELECT s.id, s.title, p.name, s.engine, s.created_at, s.archived_at, \
                coalesce(p.full_access, 0), s.last_event_at, running.id, ",
    head!("running.text"),
    ", (SELECT count(*) FROM prompts q WHERE q.session_id = s.id AND q.status = 'queued'), \
           (SELECT q.id FROM prompts q WHERE q.session_id = s.id AND q.status = 'queued' \
            ORDER BY q.created_at, q.id LIMIT 1), \
           ended.prompt_id, ended.status, ended.head, s.branch, \
           (SELECT count(*) FROM approvals a WHERE a.session_id = s.id AND a.status = 'pending'), \
           running.phase, running.phase_reason, running.phase_until, \
           (SELECT pz.scope || ':' || pz.reason FROM pauses pz WHERE ",
    covers_sql!("s"),
    " ORDER BY pz.paused_at, pz.scope, pz.target LIMIT 1), \
           (SELECT pz.target FROM pauses pz WHERE ",
    covers_sql!("s"),
    " ORDER BY pz.paused_at, pz.scope, pz.target LIMIT 1), \
           (SELECT d.after_id FROM queue_heads h JOIN prompt_after d ON d.prompt_id = h.prompt_id \
              JOIN prompts a ON a.id = d.after_id \
             WHERE h.session_id = s.id AND a.status IN ('queued', 'running') \
             ORDER BY a.created_at, a.id LIMIT 1), \
           (SELECT p.due_at FROM queue_heads h JOIN prompts p ON p.id = h.prompt_id \
             WHERE h.session_id = s.id) \
         FROM sessions s \
         LEFT JOIN projects p ON p.id = s.project_id \
         LEFT JOIN prompts running ON running.session_id = s.id AND running.status = 'running' \
         LEFT JOIN prompt_ends ended ON ended.prompt_id = \
           (SELECT f.prompt_id FROM prompt_ends f WHERE f.session_id = s.id \
            ORDER BY f.finished_at DESC NULLS LAST, f.created_at DESC, f.prompt_id DESC LIMIT 1)"
);

fn session_item(row: &Row<'_>) -> sql::Result<SessionItem> {
    let id: String = row.get(0)?;
    let created_at: i64 = row.get(4)?;
    let archived_at: Option<i64> = row.get(5)?;
    let last_event_at: Option<i64> = row.get(7)?;
    let running: Option<String> = row.get(8)?;
    let queued: i64 = row.get(10)?;
    let next_queued: Option<String> = row.get(11)?;
    let ended: Option<String> = row.get(12)?;
    let ended_status: Option<String> = row.get(13)?;
    let head = || reason(row.get::<Option<String>>(14));
    let approvals: i64 = row.get(16)?;
    let phase = row
        .get::<Option<String>>(17)?
        .and_then(|phase| super::phases::Phase::parse(&phase));
    let phase_reason: Option<String> = row.get(18)?;
    let mut until: Option<i64> = None;
    // The first pause that covers it: `scope:reason`, and its target.
    let paused: Option<String> = row.get(20)?;
    let mut resume: Option<String> = None;
    let mut paused_by: Option<super::pauses::PauseScope> = None;
    let engine_runs = running.is_some()
        && !matches!(
            phase,
            Some(super::phases::Phase::WaitingForSlot | super::phases::Phase::BackingOff)
        );
    let (state, reason) = if archived_at.is_some() {
        (SessionState::Archived, "archived".to_string())
    } else if approvals > 0 {
        (
            SessionState::NeedsYou,
            format!(
                "{approvals} request(s) of its agent wait for your answer: corral approvals \
                 --session {id}"
            ),
        )
    } else if let (Some(paused), false) = (&paused, engine_runs) {
        let (scope, why) = paused.split_once(':').unwrap_or(("all", paused));
        let target: Option<String> = row.get(21)?;
        paused_by =
            super::pauses::PauseScope::from_parts(scope, target.clone().unwrap_or_default());
        let what = match scope {
            "project" => format!(
                "its project {}",
                row.get::<Option<String>>(2)?.unwrap_or_default()
            ),
            "group" => format!("group {}", target.unwrap_or_default()),
            "session" => "this session".to_string(),
            _ => "everything".to_string(),
        };
        let queued = match queued {
            0 => String::new(),
            n => format!("; {n} prompt(s) wait"),
        };
        resume = Some(match scope {
            "project" => format!(
                "corral resume --project {what_id}",
                what_id = row.get::<Option<String>>(2)?.unwrap_or_default()
            ),
            "group" => format!(
                "corral resume --group {}",
                row.get::<Option<String>>(21)?.unwrap_or_default()
            ),
            "session" => format!("corral resume {id}"),
            _ => "corral resume --all".to_string(),
        });
        (
            SessionState::Paused,
            format!("paused: {what} ({why}){queued}"),
        )
    } else if running.is_some() {
        use super::phases::Phase;
        match phase {
            Some(phase @ (Phase::WaitingForSlot | Phase::BackingOff)) => {
                until = row.get(19)?;
                let state = if phase == Phase::BackingOff {
                    SessionState::BackingOff
                } else {
                    SessionState::WaitingForSlot
                };
                (state, phase_reason.unwrap_or_default())
            }
            _ => (
                SessionState::Working,
                format!("running: {}", reason(row.get(9))?),
            ),
        }
    } else if queued > 0 {
        // Its next prompt runs after one that has not ended (`store::dependencies`), or is
        // not due yet (`send --at/--in`: `until` is its due time).
        let due = row
            .get::<Option<i64>>(23)?
            .filter(|at| *at > super::now_ms());
        let after = match (row.get::<Option<String>>(22)?, due) {
            (Some(after), _) => format!("; the next runs after prompt {after}"),
            (None, Some(at)) => {
                until = Some(at);
                format!("; the next is due at {}", crate::clock::utc_time(at))
            }
            (None, None) => String::new(),
        };
        (
            SessionState::Queued,
            format!("{queued} prompt(s) queued{after}"),
        )
    } else {
        match ended_status.as_deref() {
            Some("failed") => (
                SessionState::Failed,
                Some(head()?)
                    .filter(|error| !error.is_empty())
                    .unwrap_or_else(|| "failed".into()),
            ),
            // The person stopped it: the session waits for what they do next.
            Some("cancelled") => (SessionState::Idle, format!("cancelled: {}", head()?)),
            Some(_) => (SessionState::Idle, format!("answered: {}", head()?)),
            None => (SessionState::Idle, "no prompt yet".to_string()),
        }
    };
    let next_action = match state {
        SessionState::NeedsYou => format!("corral approvals --session {id}"),
        SessionState::Paused => resume.unwrap_or_else(|| "corral pause".to_string()),
        SessionState::Working
        | SessionState::WaitingForSlot
        | SessionState::BackingOff
        | SessionState::Queued => format!("corral watch {id}"),
        SessionState::Idle => format!("corral attach {id}"),
        SessionState::Failed | SessionState::Archived => format!("corral history {id}"),
    };
    let last_activity_at = [Some(created_at), archived_at, last_event_at]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(created_at);
    Ok(SessionItem {
        title: row.get(1)?,
        project: row.get(2)?,
        engine: row.get(3)?,
        state,
        reason,
        next_action,
        last_activity_at,
        current_prompt_id: running.or(next_queued).or(ended),
        queued,
        full_access: row.get(6)?,
        branch: row.get(15)?,
        approvals,
        until,
        paused_by,
        id,
    })
}

/// The runs marked running: those whose engine lives, and the gaps. `daemon`: a run
/// without a recorded pid counts as live (its engine is being spawned); read without a
/// daemon it is a gap (nothing will record it). On a shared store a run of a daemon whose
/// lease holds counts as live: its pid is another host's, or another home's, and that
/// daemon judges it.
pub fn runs_now(connection: &Conn, daemon: bool) -> sql::Result<(Vec<Run>, Vec<Run>)> {
    let live_nodes: Vec<String> = super::daemons::daemons(connection)?
        .into_iter()
        .filter(super::daemons::Daemon::is_live)
        .map(|daemon| daemon.node_id)
        .collect();
    Ok(runs::running_runs(connection)?
        .into_iter()
        .partition(|run| {
            if run
                .node_id
                .as_ref()
                .is_some_and(|node| live_nodes.contains(node))
            {
                return true;
            }
            match run.pid {
                Some(pid) => process::is_alive(pid as u32, run.pid_start.map(|start| start as u64)),
                None => daemon,
            }
        }))
}

/// The execs not completed (within `repo`, see [`ExecFilter::repo`]): those whose process
/// lives, and the lost ones. Another host's exec counts as running: its pid says nothing
/// here, and its own host prunes it.
pub fn open_execs(
    connection: &Conn,
    repo: Option<&Option<String>>,
) -> sql::Result<(Vec<Exec>, Vec<Exec>)> {
    let (mut running, mut lost) = (Vec::new(), Vec::new());
    for open in exec::open_execs(connection)? {
        if repo.is_some_and(|repo| *repo != open.exec.repo) {
            continue;
        }
        let alive = !open
            .exec
            .is_here(connection.dialect() == super::sql::Dialect::Postgres)
            || open
                .exec
                .pid
                .is_some_and(|pid| process::is_alive(pid as u32, open.pid_start));
        if alive {
            running.push(open.exec);
        } else {
            lost.push(open.exec);
        }
    }
    Ok((running, lost))
}

/// The repository a path is in (its git top level, else the directory itself), as execs
/// record it; `None` when the path does not exist.
pub fn repo_of(path: &Path) -> Option<String> {
    crate::repo::toplevel(path)
        .or_else(|| path.canonicalize().ok())
        .map(|top| top.to_string_lossy().into_owned())
}

/// A page of the exec ledger: `monitor list`'s filters and cursor.
#[derive(Debug, Clone, Default)]
pub struct ExecQuery {
    pub parent: Option<String>,
    pub caller: Option<String>,
    pub outcome: Option<OutcomeFilter>,
    pub search: Option<String>,
    /// `None`: every repository; `Some(None)`: execs outside any; `Some(Some(top))`: that one.
    pub repo: Option<Option<String>>,
    pub task: Option<String>,
    /// A wave's name (within `repo` when given) or id.
    pub wave: Option<String>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("No wave matches '{0}'")]
    NoWave(String),
    #[error("Ambiguous Work selector '{selector}': give one of the wave ids {}", candidates.join(", "))]
    AmbiguousWave {
        selector: String,
        /// `ID (REPO)` of each wave of that name.
        candidates: Vec<String>,
    },
    #[error(transparent)]
    Store(#[from] sql::DbError),
}

/// One page of the exec ledger, newest first (`{"entries":[…],"next":CURSOR|null}`).
pub fn exec_page(connection: &Conn, query: &ExecQuery) -> Result<ExecPage, PageError> {
    let wave_ids = match &query.wave {
        None => None,
        Some(selector) => {
            let within = query.repo.as_ref().map(|repo| repo.as_deref());
            let waves = exec::waves_matching(connection, selector, within)?;
            match waves.len() {
                0 => return Err(PageError::NoWave(selector.clone())),
                1 => Some(waves.into_iter().map(|(id, _)| id).collect()),
                _ => {
                    return Err(PageError::AmbiguousWave {
                        selector: selector.clone(),
                        candidates: waves
                            .iter()
                            .map(|(id, repo)| format!("{id} ({})", repo.as_deref().unwrap_or("-")))
                            .collect(),
                    })
                }
            }
        }
    };
    let filter = ExecFilter {
        parent: query.parent.clone(),
        caller: query.caller.clone(),
        outcome: query.outcome,
        search: query.search.clone(),
        repo: query.repo.clone(),
        task: query.task.clone(),
        wave_ids,
    };
    Ok(exec::list(
        connection,
        &filter,
        query.after.as_ref(),
        query.limit,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn a_first_line_skips_blank_lines_and_trims() {
        assert_eq!(first_line("\n  \n  hello there  \nmore"), "hello there");
        assert_eq!(first_line(""), "");
        let long = first_line(&"é".repeat(REASON_CHARS + 10));
        assert_eq!(long.chars().count(), REASON_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn states_pad_in_tables() {
        assert_eq!(format!("{:<8}|", SessionState::Idle), "idle    |");
        for state in SessionState::ALL {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
        assert_eq!(SessionState::WaitingForSlot.as_str(), "waiting-for-slot");
    }

    /// A store with sessions in every state, read by the one query.
    #[test]
    fn every_state_from_one_query() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        let mut db = Connection::open(&path).unwrap();
        super::super::migrations::migrate(&mut db).unwrap();
        db.execute_batch(
            "INSERT INTO projects (id, name, path, full_access, created_at) VALUES ('p', 'proj', '/', 1, 1);
             INSERT INTO sessions (id, project_id, engine, created_at) VALUES
               ('s1', 'p', 'fake', 1), ('s2', NULL, 'fake', 2), ('s3', 'p', 'fake', 3),
               ('s4', 'p', 'fake', 4), ('s5', 'p', 'fake', 5), ('s6', 'p', 'fake', 6),
               ('s7', 'p', 'fake', 7), ('s8', 'p', 'fake', 8), ('s9', 'p', 'fake', 9),
               ('s10', 'p', 'fake', 10);
             UPDATE sessions SET archived_at = 60 WHERE id = 's6';
             UPDATE sessions SET worktree = '/w/s3', branch = 'corral/s3-00000003', base = 'HEAD',
               base_commit = 'abc', worktree_state = 'ready' WHERE id = 's3';
             INSERT INTO prompts (id, session_id, text, status, created_at, finished_at, answer, error) VALUES
               ('a1', 's1', '\n first\nsecond', 'running', 10, NULL, NULL, NULL),
               ('a2', 's1', 'later', 'queued', 11, NULL, NULL, NULL),
               ('b1', 's2', 'x', 'queued', 12, NULL, NULL, NULL),
               ('b2', 's2', 'y', 'queued', 13, NULL, NULL, NULL),
               ('c1', 's3', 'x', 'done', 14, 20, 'old answer', NULL),
               ('c2', 's3', 'x', 'done', 15, 21, '  \n new answer \n', NULL),
               ('d1', 's4', 'x', 'failed', 16, 22, NULL, 'it broke'),
               ('e1', 's5', 'stop me', 'cancelled', 17, 23, NULL, NULL),
               ('f1', 's7', 'locked out', 'running', 18, NULL, NULL, NULL),
               ('g1', 's8', 'limited', 'running', 19, NULL, NULL, NULL),
               ('h1', 's9', 'asks', 'running', 20, NULL, NULL, NULL);
             UPDATE prompts SET phase = 'waiting-for-slot',
               phase_reason = 'waits for a fake slot: project proj locked by session a' WHERE id = 'f1';
             UPDATE prompts SET phase = 'backing-off', phase_reason = 'rate limit: retry 1/3',
               phase_until = 5000 WHERE id = 'g1';
             INSERT INTO approvals (id, session_id, engine, tool, input, asked_at) VALUES
               ('ap', 's9', 'claude', 'Write', '{}', 30);
             UPDATE sessions SET last_event_seq = 1, last_event_at = 99 WHERE id = 's3';
             INSERT INTO events (session_id, seq, at, kind, payload) VALUES ('s3', 1, 99, 'message', '{}');",
        )
        .unwrap();
        let db = Conn::from(db);
        let items = sessions(&db).unwrap();
        let states: Vec<(&str, SessionState, &str, Option<&str>, i64)> = items
            .iter()
            .map(|item| {
                (
                    item.id.as_str(),
                    item.state,
                    item.reason.as_str(),
                    item.current_prompt_id.as_deref(),
                    item.queued,
                )
            })
            .collect();
        use SessionState::*;
        assert_eq!(
            states,
            [
                ("s1", Working, "running: first", Some("a1"), 1),
                ("s2", Queued, "2 prompt(s) queued", Some("b1"), 2),
                ("s3", Idle, "answered: new answer", Some("c2"), 0),
                ("s4", Failed, "it broke", Some("d1"), 0),
                ("s5", Idle, "cancelled: stop me", Some("e1"), 0),
                ("s6", Archived, "archived", None, 0),
                (
                    "s7",
                    WaitingForSlot,
                    "waits for a fake slot: project proj locked by session a",
                    Some("f1"),
                    0
                ),
                ("s8", BackingOff, "rate limit: retry 1/3", Some("g1"), 0),
                (
                    "s9",
                    NeedsYou,
                    "1 request(s) of its agent wait for your answer: corral approvals --session s9",
                    Some("h1"),
                    0
                ),
                ("s10", Idle, "no prompt yet", None, 0),
            ]
        );
        assert_eq!(items[7].until, Some(5000));
        assert_eq!(items[8].approvals, 1);
        assert_eq!(items[2].last_activity_at, 99);
        assert_eq!(items[5].last_activity_at, 60);
        assert!(items[0].full_access && !items[1].full_access);
        assert_eq!(items[0].project.as_deref(), Some("proj"));
        assert_eq!(items[2].branch.as_deref(), Some("corral/s3-00000003"));
        assert!(items[0].branch.is_none());
        assert_eq!(items[1].next_action, "corral watch s2");
        assert_eq!(items[2].next_action, "corral attach s3");
        assert_eq!(items[3].next_action, "corral history s4");
    }
}
