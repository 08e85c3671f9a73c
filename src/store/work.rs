//! The supervisor's records: projects, sessions, prompts, runs and events.
//!
//! The model types here are what the library hands out and what `--json` prints. Writes are
//! functions over a `&Connection` that the ledger actor applies inside its transaction (see
//! `crate::actors::ledger`, which wraps each in a typed message); reads run on a caller's own
//! read-only connection.
//!
//! Two rules live in this file and in the schema together:
//! - **one worker per session**: [`enqueue`] inserts a prompt as `running` only when the
//!   session has no running prompt, else as `queued`; a unique partial index on
//!   `prompts(session_id) WHERE status = 'running'` makes a second running prompt impossible;
//! - **gap-free event numbers**: [`append_events`] takes each session's next numbers from
//!   `sessions.last_event_seq` in the same transaction, so readers can resume from an offset.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use super::{now_ms, Cached};
use crate::events::EventKind;

/// A working directory with settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub path: String,
    /// The engine new sessions use unless told otherwise.
    pub engine: Option<String>,
    pub model: Option<String>,
    /// Run engines without sandbox or approvals. Off unless a person turns it on.
    pub full_access: bool,
    /// `local` or `remote`; a remote project's engines are always read-only.
    pub kind: String,
    /// Execution groups this project is in (locking or label-only, see [`ExecutionGroup`]).
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

/// Where a session's worktree is in its life (see docs/worktrees.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorktreeState {
    /// The row names its path and branch; `git worktree add` is not known to be done (a
    /// daemon killed meanwhile leaves this, and the session's worker finishes it).
    Creating,
    /// Made; the project's setup command has not succeeded yet.
    Setup,
    /// Made and set up.
    Ready,
    /// Removed when the session was archived (its branch is kept).
    Removed,
    /// Archived, and kept because it had changes.
    Kept,
}

impl WorktreeState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorktreeState::Creating => "creating",
            WorktreeState::Setup => "setup",
            WorktreeState::Ready => "ready",
            WorktreeState::Removed => "removed",
            WorktreeState::Kept => "kept",
        }
    }
}

impl std::fmt::Display for WorktreeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WorktreeState {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "creating" => Ok(WorktreeState::Creating),
            "setup" => Ok(WorktreeState::Setup),
            "ready" => Ok(WorktreeState::Ready),
            "removed" => Ok(WorktreeState::Removed),
            "kept" => Ok(WorktreeState::Kept),
            other => Err(format!("unknown worktree state '{other}'")),
        }
    }
}

impl rusqlite::types::FromSql for Isolation {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|_| rusqlite::types::FromSqlError::InvalidType)
    }
}

impl rusqlite::types::FromSql for WorktreeState {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|_| rusqlite::types::FromSqlError::InvalidType)
    }
}

/// A session's own worktree: where, on which branch, from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionWorktree {
    /// The worktree's root (absolute).
    pub path: String,
    pub branch: String,
    /// The ref it was made from, as given (`HEAD` by default).
    pub base: String,
    /// What `base` was when the worktree was made: diffs are against it.
    pub base_commit: String,
    pub state: WorktreeState,
}

/// A named group of projects; runs of projects sharing a locking group never overlap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionGroup {
    pub name: String,
    pub locking: bool,
}

/// One agent conversation in a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub project_id: Option<String>,
    pub engine: String,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// The engine's own thread/session id, once it has one.
    pub thread_id: Option<String>,
    /// Where in that thread its last successful turn ended, in the engine's own words (claude's
    /// last assistant message uuid): a retry continues from here, not after a failed turn.
    pub resume_point: Option<String>,
    pub title: Option<String>,
    /// `human` or `generated`; a human title is never replaced.
    pub title_source: Option<String>,
    pub status: String,
    pub task: Option<String>,
    pub wave_id: Option<String>,
    pub created_at: i64,
    pub archived_at: Option<i64>,
    pub last_event_seq: i64,
    /// Exchanges and characters compacted by the last `compact`, and when.
    pub compacted_message_count: Option<i64>,
    pub compacted_character_count: Option<i64>,
    pub compacted_at: Option<i64>,
    /// Its own git worktree (a worktree project's session); `None`: it runs in its project's
    /// path, under the project's lock.
    #[serde(default, flatten, with = "worktree_columns")]
    pub worktree: Option<SessionWorktree>,
}

/// A session's worktree as the flat keys `--json` has always printed a session with
/// (`worktree`, `branch`, `base`, `base_commit`, `worktree_state`), all null without one.
mod worktree_columns {
    use super::{SessionWorktree, WorktreeState};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, Default)]
    struct Flat {
        #[serde(default)]
        worktree: Option<String>,
        #[serde(default)]
        branch: Option<String>,
        #[serde(default)]
        base: Option<String>,
        #[serde(default)]
        base_commit: Option<String>,
        #[serde(default)]
        worktree_state: Option<WorktreeState>,
    }

    pub fn serialize<S: Serializer>(
        worktree: &Option<SessionWorktree>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let flat = match worktree {
            Some(w) => Flat {
                worktree: Some(w.path.clone()),
                branch: Some(w.branch.clone()),
                base: Some(w.base.clone()),
                base_commit: Some(w.base_commit.clone()),
                worktree_state: Some(w.state),
            },
            None => Flat::default(),
        };
        flat.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SessionWorktree>, D::Error> {
        let flat = Flat::deserialize(deserializer)?;
        Ok(match flat {
            Flat {
                worktree: Some(path),
                branch: Some(branch),
                base,
                base_commit: Some(base_commit),
                worktree_state: Some(state),
            } => Some(SessionWorktree {
                path,
                branch,
                base: base.unwrap_or_else(|| "HEAD".into()),
                base_commit,
                state,
            }),
            _ => None,
        })
    }
}

/// Where a prompt is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl PromptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptStatus::Queued => "queued",
            PromptStatus::Running => "running",
            PromptStatus::Done => "done",
            PromptStatus::Failed => "failed",
            PromptStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => PromptStatus::Queued,
            "running" => PromptStatus::Running,
            "done" => PromptStatus::Done,
            "failed" => PromptStatus::Failed,
            "cancelled" => PromptStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the prompt has ended for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            PromptStatus::Done | PromptStatus::Failed | PromptStatus::Cancelled
        )
    }
}

/// One user message queued on a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    pub id: String,
    pub session_id: String,
    pub text: String,
    pub images: Vec<String>,
    pub read_only: bool,
    pub status: PromptStatus,
    pub attempts: i64,
    pub error: Option<String>,
    /// The agent's final answer (title line removed).
    pub answer: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// One engine child started for a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub prompt_id: String,
    pub session_id: String,
    pub attempt: i64,
    pub engine: String,
    pub argv: Vec<String>,
    pub thread_id: Option<String>,
    pub exec_id: Option<String>,
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
    pub pgid: Option<i64>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// `running`, `succeeded`, `failed`, `cancelled`, `interrupted`.
    pub status: String,
    pub failure_class: Option<String>,
    pub retry_decision: Option<String>,
    pub error: Option<String>,
}

/// One normalized thing that happened in a session, numbered per session (`seq`) and across
/// the daemon's sessions (`feed_seq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub session_id: String,
    pub seq: i64,
    /// Daemon-wide, strictly increasing, without gaps among stored events: the cursor of the
    /// stream of every session. 0 from a daemon older than the feed (migration 8).
    #[serde(default)]
    pub feed_seq: i64,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub at: i64,
    pub kind: EventKind,
    pub payload: serde_json::Value,
}

fn json_list(text: String) -> Vec<String> {
    serde_json::from_str(&text).unwrap_or_default()
}

const PROJECT_COLUMNS: &str = "id, name, path, engine, model, full_access, kind, groups, \
                               instructions, created_at, archived_at, keep_background, \
                               isolation, worktrees_dir, setup, repo_root";

fn project_row(row: &Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        id: row.get(0)?,
        name: row.get(1)?,
        path: row.get(2)?,
        engine: row.get(3)?,
        model: row.get(4)?,
        full_access: row.get(5)?,
        kind: row.get(6)?,
        groups: json_list(row.get(7)?),
        instructions: row.get(8)?,
        created_at: row.get(9)?,
        archived_at: row.get(10)?,
        keep_background: row.get(11)?,
        isolation: row.get(12)?,
        worktrees_dir: row.get(13)?,
        setup: row.get(14)?,
        repo_root: row.get(15)?,
    })
}

const SESSION_COLUMNS: &str = "id, project_id, engine, model, reasoning_effort, thread_id, \
                               title, title_source, status, task, wave_id, created_at, \
                               archived_at, last_event_seq, compacted_message_count, \
                               compacted_character_count, compacted_at, resume_point, \
                               worktree, branch, base, base_commit, worktree_state";

fn session_row(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        project_id: row.get(1)?,
        engine: row.get(2)?,
        model: row.get(3)?,
        reasoning_effort: row.get(4)?,
        thread_id: row.get(5)?,
        title: row.get(6)?,
        title_source: row.get(7)?,
        status: row.get(8)?,
        task: row.get(9)?,
        wave_id: row.get(10)?,
        created_at: row.get(11)?,
        archived_at: row.get(12)?,
        last_event_seq: row.get(13)?,
        compacted_message_count: row.get(14)?,
        compacted_character_count: row.get(15)?,
        compacted_at: row.get(16)?,
        resume_point: row.get(17)?,
        worktree: worktree_row(row, 18)?,
    })
}

/// The worktree columns from `first` on (path, branch, base, base_commit, state).
fn worktree_row(row: &Row<'_>, first: usize) -> rusqlite::Result<Option<SessionWorktree>> {
    let path: Option<String> = row.get(first)?;
    let Some(path) = path else { return Ok(None) };
    Ok(Some(SessionWorktree {
        path,
        branch: row.get::<_, Option<String>>(first + 1)?.unwrap_or_default(),
        base: row
            .get::<_, Option<String>>(first + 2)?
            .unwrap_or_else(|| "HEAD".into()),
        base_commit: row.get::<_, Option<String>>(first + 3)?.unwrap_or_default(),
        state: row
            .get::<_, Option<WorktreeState>>(first + 4)?
            .unwrap_or(WorktreeState::Creating),
    }))
}

const PROMPT_COLUMNS: &str = "id, session_id, text, images, read_only, status, attempts, \
                              error, answer, created_at, started_at, finished_at";

fn prompt_row(row: &Row<'_>) -> rusqlite::Result<Prompt> {
    let status: String = row.get(5)?;
    Ok(Prompt {
        id: row.get(0)?,
        session_id: row.get(1)?,
        text: row.get(2)?,
        images: json_list(row.get(3)?),
        read_only: row.get(4)?,
        status: PromptStatus::parse(&status).unwrap_or(PromptStatus::Failed),
        attempts: row.get(6)?,
        error: row.get(7)?,
        answer: row.get(8)?,
        created_at: row.get(9)?,
        started_at: row.get(10)?,
        finished_at: row.get(11)?,
    })
}

const RUN_COLUMNS: &str = "id, prompt_id, session_id, attempt, engine, argv, thread_id, exec_id, \
                           pid, pid_start, pgid, started_at, ended_at, exit_code, signal, status, \
                           failure_class, retry_decision, error";

fn run_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        prompt_id: row.get(1)?,
        session_id: row.get(2)?,
        attempt: row.get(3)?,
        engine: row.get(4)?,
        argv: json_list(row.get(5)?),
        thread_id: row.get(6)?,
        exec_id: row.get(7)?,
        pid: row.get(8)?,
        pid_start: row.get(9)?,
        pgid: row.get(10)?,
        started_at: row.get(11)?,
        ended_at: row.get(12)?,
        exit_code: row.get(13)?,
        signal: row.get(14)?,
        status: row.get(15)?,
        failure_class: row.get(16)?,
        retry_decision: row.get(17)?,
        error: row.get(18)?,
    })
}

fn event_row(row: &Row<'_>) -> rusqlite::Result<Event> {
    let payload: String = row.get(6)?;
    Ok(Event {
        session_id: row.get(0)?,
        seq: row.get(1)?,
        prompt_id: row.get(2)?,
        run_id: row.get(3)?,
        at: row.get(4)?,
        kind: EventKind::parse(&row.get::<_, String>(5)?),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload)),
        feed_seq: row.get::<_, Option<i64>>(7)?.unwrap_or(0),
    })
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// A project to create.
#[derive(Debug, Clone, Default)]
pub struct NewProject {
    pub name: String,
    pub path: String,
    pub engine: Option<String>,
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
}

pub(crate) fn insert_project(
    connection: &Connection,
    new: &NewProject,
) -> rusqlite::Result<Project> {
    let project = Project {
        id: uuid::Uuid::now_v7().to_string(),
        name: new.name.clone(),
        path: new.path.clone(),
        engine: new.engine.clone(),
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
    };
    connection.run(
        &format!("INSERT INTO projects ({PROJECT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"),
        params![
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
        ],
    )?;
    for group in &project.groups {
        connection.run(
            "INSERT OR IGNORE INTO execution_groups (name, locking, created_at) VALUES (?1, 1, ?2)",
            params![group, project.created_at],
        )?;
    }
    Ok(project)
}

pub(crate) fn set_group_locking(
    connection: &Connection,
    name: &str,
    locking: bool,
) -> rusqlite::Result<()> {
    connection.run(
        "INSERT INTO execution_groups (name, locking, created_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (name) DO UPDATE SET locking = excluded.locking",
        params![name, locking, now_ms()],
    )?;
    Ok(())
}

/// A session to open.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub project_id: String,
    pub engine: String,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// A title a person chose (never replaced by a generated one).
    pub title: Option<String>,
    pub task: Option<String>,
    pub wave_id: Option<String>,
    /// The id to give it (a worktree's path and branch are named after it before the row
    /// exists); `None`: a new one.
    pub id: Option<String>,
    /// Its worktree, recorded `creating` in the same insert (see [`WorktreeState`]).
    /// [`crate::Corral::open_session`] plans it for a worktree project's session.
    pub worktree: Option<SessionWorktree>,
    /// The branch asked for (`--branch`; a worktree project's session only): an existing one
    /// is checked out as it is, else made. Not stored as such: `worktree` says it.
    pub branch: Option<String>,
    /// What the new branch starts from (`--base`; default: the project's HEAD).
    pub base: Option<String>,
}

pub(crate) fn insert_session(
    connection: &Connection,
    new: &NewSession,
) -> rusqlite::Result<Session> {
    let session = Session {
        id: new
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        project_id: Some(new.project_id.clone()),
        engine: new.engine.clone(),
        model: new.model.clone(),
        reasoning_effort: new.reasoning_effort.clone(),
        thread_id: None,
        resume_point: None,
        title: new.title.clone(),
        title_source: new.title.as_ref().map(|_| "human".to_string()),
        status: "idle".into(),
        task: new.task.clone(),
        wave_id: new.wave_id.clone(),
        created_at: now_ms(),
        archived_at: None,
        last_event_seq: 0,
        compacted_message_count: None,
        compacted_character_count: None,
        compacted_at: None,
        worktree: new.worktree.clone(),
    };
    let worktree = session.worktree.as_ref();
    connection.run(
        "INSERT INTO sessions (id, project_id, engine, model, reasoning_effort, thread_id, title, \
         title_source, status, task, wave_id, created_at, archived_at, last_event_seq, \
         worktree, branch, base, base_commit, worktree_state) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
        params![
            session.id,
            session.project_id,
            session.engine,
            session.model,
            session.reasoning_effort,
            session.thread_id,
            session.title,
            session.title_source,
            session.status,
            session.task,
            session.wave_id,
            session.created_at,
            session.archived_at,
            session.last_event_seq,
            worktree.map(|w| &w.path),
            worktree.map(|w| &w.branch),
            worktree.map(|w| &w.base),
            worktree.map(|w| &w.base_commit),
            worktree.map(|w| w.state.as_str()),
        ],
    )?;
    Ok(session)
}

/// Moves a session's worktree to `state`; replies with the session.
pub(crate) fn set_worktree_state(
    connection: &Connection,
    session_id: &str,
    state: WorktreeState,
) -> rusqlite::Result<Option<Session>> {
    connection.run(
        "UPDATE sessions SET worktree_state = ?2 WHERE id = ?1 AND worktree IS NOT NULL",
        params![session_id, state.as_str()],
    )?;
    session(connection, session_id)
}

/// Deletes a session opened a moment ago whose worktree could not be made, as if it had never
/// been opened: only while nothing refers to it (no prompt, no event, no driver claim).
/// Replies whether it was deleted.
pub(crate) fn forget_new_session(
    connection: &Connection,
    session_id: &str,
) -> rusqlite::Result<bool> {
    let deleted = connection.run(
        "DELETE FROM sessions WHERE id = ?1 \
         AND NOT EXISTS (SELECT 1 FROM prompts WHERE session_id = ?1) \
         AND NOT EXISTS (SELECT 1 FROM events WHERE session_id = ?1) \
         AND NOT EXISTS (SELECT 1 FROM driver_claims WHERE session_id = ?1)",
        [session_id],
    )?;
    Ok(deleted > 0)
}

/// The session's prompt that runs now, else its oldest queued one: work that would use its
/// worktree.
pub fn busy_prompt(connection: &Connection, session_id: &str) -> rusqlite::Result<Option<Prompt>> {
    let id: Option<String> = connection
        .row(
            "SELECT id FROM prompts WHERE session_id = ?1 AND status IN ('running', 'queued') \
             ORDER BY status = 'running' DESC, created_at LIMIT 1",
            [session_id],
            |row| row.get(0),
        )
        .optional()?;
    match id {
        Some(id) => prompt(connection, &id),
        None => Ok(None),
    }
}

/// A prompt to queue.
#[derive(Debug, Clone, Default)]
pub struct NewPrompt {
    pub session_id: String,
    pub text: String,
    pub images: Vec<String>,
    pub read_only: bool,
    pub sender_exec_id: Option<String>,
    /// The sender's driver claim generation: the prompt is refused if the claim moved on.
    pub driver_generation: Option<i64>,
}

/// What [`enqueue`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new prompt, `running` or `queued`.
    pub prompt: Prompt,
    /// The prompt that became `running` in this transaction (the new one, or an older one a
    /// dead worker left queued): the caller must start the session's worker on it.
    pub started: Option<Prompt>,
}

/// Queues a prompt in one transaction: it becomes `running` when nothing else runs or waits
/// on the session (the caller then starts the worker), else it is `queued` (the session's
/// worker takes it in order).
pub(crate) fn enqueue(
    connection: &Connection,
    new: &NewPrompt,
) -> rusqlite::Result<Result<Enqueued, DriverClaim>> {
    if let Some(generation) = new.driver_generation {
        if let Some(claim) = driver_claim(connection, &new.session_id)? {
            if claim.generation != generation {
                return Ok(Err(claim));
            }
        }
    }
    let id = uuid::Uuid::now_v7().to_string();
    connection.run(
        "INSERT INTO prompts (id, session_id, text, images, read_only, status, sender_exec_id, \
         created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7)",
        params![
            id,
            new.session_id,
            new.text,
            serde_json::to_string(&new.images).expect("strings serialize"),
            new.read_only,
            new.sender_exec_id,
            now_ms(),
        ],
    )?;
    let started = claim_next(connection, &new.session_id, None)?;
    let prompt = prompt(connection, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Ok(Enqueued { prompt, started }))
}

fn set_session_status(
    connection: &Connection,
    session_id: &str,
    status: &str,
) -> rusqlite::Result<()> {
    connection.run(
        "UPDATE sessions SET status = ?2 WHERE id = ?1",
        params![session_id, status],
    )?;
    Ok(())
}

/// Ends a prompt and, in the same transaction, claims the session's next queued prompt (now
/// `running`), so that the one-worker rule never has a gap to slip through.
pub(crate) fn finish_and_claim_next(
    connection: &Connection,
    prompt_id: &str,
    status: PromptStatus,
    error: Option<&str>,
    answer: Option<&str>,
) -> rusqlite::Result<Option<Prompt>> {
    let now = now_ms();
    let session_id: Option<String> = connection
        .row(
            "SELECT session_id FROM prompts WHERE id = ?1",
            [prompt_id],
            |row| row.get(0),
        )
        .optional()?;
    let Some(session_id) = session_id else {
        return Ok(None);
    };
    connection.run(
        "UPDATE prompts SET status = ?2, error = ?3, answer = ?4, finished_at = ?5 \
         WHERE id = ?1 AND status IN ('running', 'queued')",
        params![prompt_id, status.as_str(), error, answer, now],
    )?;
    claim_next(connection, &session_id, Some(status))
}

/// Claims the session's oldest queued prompt if nothing runs on it. `last` is the status of
/// the prompt just finished, which becomes the session's status when nothing is left.
pub(crate) fn claim_next(
    connection: &Connection,
    session_id: &str,
    last: Option<PromptStatus>,
) -> rusqlite::Result<Option<Prompt>> {
    let running: bool = connection.row(
        "SELECT EXISTS (SELECT 1 FROM prompts WHERE session_id = ?1 AND status = 'running')",
        [session_id],
        |row| row.get(0),
    )?;
    if running {
        return Ok(None);
    }
    let next: Option<String> = connection
        .row(
            "SELECT id FROM prompts WHERE session_id = ?1 AND status = 'queued' \
             ORDER BY created_at, id LIMIT 1",
            [session_id],
            |row| row.get(0),
        )
        .optional()?;
    match next {
        Some(id) => {
            connection.run(
                "UPDATE prompts SET status = 'running', started_at = ?2 WHERE id = ?1",
                params![id, now_ms()],
            )?;
            set_session_status(connection, session_id, "running")?;
            prompt(connection, &id)
        }
        None => {
            let idle = match last {
                Some(PromptStatus::Failed) => "failed",
                Some(PromptStatus::Done) => "waiting",
                _ => "idle",
            };
            set_session_status(connection, session_id, idle)?;
            Ok(None)
        }
    }
}

/// What cancelling a prompt found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cancel", rename_all = "snake_case")]
pub enum CancelFound {
    /// It was queued: it is now cancelled and will never run.
    Dequeued,
    /// It is running: its session's worker must end it.
    Running { session_id: String },
    /// It had already ended.
    Finished { status: PromptStatus },
}

pub(crate) fn cancel_prompt(
    connection: &Connection,
    prompt_id: &str,
) -> rusqlite::Result<Option<CancelFound>> {
    let Some(found) = prompt(connection, prompt_id)? else {
        return Ok(None);
    };
    Ok(Some(match found.status {
        PromptStatus::Queued => {
            connection.run(
                "UPDATE prompts SET status = 'cancelled', finished_at = ?2 WHERE id = ?1",
                params![prompt_id, now_ms()],
            )?;
            CancelFound::Dequeued
        }
        PromptStatus::Running => CancelFound::Running {
            session_id: found.session_id,
        },
        status => CancelFound::Finished { status },
    }))
}

/// A run about to start (its row is written before the child is spawned).
#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    pub prompt_id: String,
    pub session_id: String,
    pub attempt: i64,
    pub engine: String,
    pub argv: Vec<String>,
    pub thread_id: Option<String>,
    pub exec_id: Option<String>,
    /// The child serving the run when it is known before the run starts (an app-server
    /// turn's long-lived child): its pid and start time, written with the row in one commit.
    /// An engine child spawned for the run is recorded by [`run_spawned`] instead.
    pub child: Option<(u32, Option<u64>)>,
}

/// Writes a run's row. The exec recorded as its parent is the session's current driver, else
/// `run.exec_id`; the provider generation is bumped (a new engine child). Returns that exec.
/// The exec a run's agent works under: the session's driver (or the exec hosting the
/// supervisor), and the trace that exec belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDriver {
    pub exec_id: String,
    /// `None` when the exec is not in the store (a library caller's own id).
    pub trace_id: Option<String>,
}

pub(crate) fn insert_run(
    connection: &Connection,
    run: &NewRun,
) -> rusqlite::Result<Option<RunDriver>> {
    let exec_id = engine_started(connection, &run.session_id)?.or_else(|| run.exec_id.clone());
    connection.run(
        "INSERT INTO runs (id, prompt_id, session_id, attempt, engine, argv, thread_id, exec_id, \
         started_at, pid, pid_start, pgid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?10)",
        params![
            run.id,
            run.prompt_id,
            run.session_id,
            run.attempt,
            run.engine,
            serde_json::to_string(&run.argv).expect("strings serialize"),
            run.thread_id,
            exec_id,
            now_ms(),
            run.child.map(|(pid, _)| pid),
            run.child.and_then(|(_, start)| start).map(|start| start as i64),
        ],
    )?;
    connection.run(
        "UPDATE prompts SET attempts = attempts + 1 WHERE id = ?1",
        [&run.prompt_id],
    )?;
    let Some(exec_id) = exec_id else {
        return Ok(None);
    };
    let trace_id = connection
        .row(
            "SELECT trace_id FROM execs WHERE id = ?1",
            [&exec_id],
            |row| row.get(0),
        )
        .optional()?;
    Ok(Some(RunDriver { exec_id, trace_id }))
}

/// The child of a run was spawned: its identity, to end it (or find it after a crash).
pub(crate) fn run_spawned(
    connection: &Connection,
    run_id: &str,
    pid: u32,
    pid_start: Option<u64>,
) -> rusqlite::Result<()> {
    connection.run(
        "UPDATE runs SET pid = ?2, pid_start = ?3, pgid = ?2 WHERE id = ?1",
        params![run_id, pid, pid_start.map(|start| start as i64)],
    )?;
    Ok(())
}

/// How a run ended.
#[derive(Debug, Clone, Default)]
pub struct RunEnd {
    pub run_id: String,
    /// When the child was gone (taken before its slot is released, so that the runs of a
    /// slot never seem to overlap); `None`: now.
    pub ended_at: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// `succeeded`, `failed`, `cancelled`, `interrupted`.
    pub status: String,
    pub failure_class: Option<String>,
    pub retry_decision: Option<String>,
    pub error: Option<String>,
}

pub(crate) fn end_run(connection: &Connection, end: &RunEnd) -> rusqlite::Result<()> {
    connection.run(
        "UPDATE runs SET ended_at = ?2, exit_code = ?3, signal = ?4, status = ?5, \
         failure_class = ?6, retry_decision = ?7, error = ?8 WHERE id = ?1",
        params![
            end.run_id,
            end.ended_at.unwrap_or_else(now_ms),
            end.exit_code,
            end.signal,
            end.status,
            end.failure_class,
            end.retry_decision,
            end.error,
        ],
    )?;
    Ok(())
}

/// Sets a session's engine thread and where in it a retry would continue (`None`: after its
/// last message).
pub(crate) fn set_thread(
    connection: &Connection,
    session_id: &str,
    thread_id: Option<&str>,
    resume_point: Option<&str>,
) -> rusqlite::Result<()> {
    connection.run(
        "UPDATE sessions SET thread_id = ?2, resume_point = ?3 WHERE id = ?1",
        params![session_id, thread_id, resume_point],
    )?;
    Ok(())
}

/// Sets a generated title unless a person set one. Returns whether it was set.
pub(crate) fn set_generated_title(
    connection: &Connection,
    session_id: &str,
    title: &str,
) -> rusqlite::Result<bool> {
    let changed = connection.run(
        "UPDATE sessions SET title = ?2, title_source = 'generated' \
         WHERE id = ?1 AND (title_source IS NULL OR title_source <> 'human')",
        params![session_id, title],
    )?;
    Ok(changed == 1)
}

/// An event to append; its number is given by [`append_events`].
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub session_id: String,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub kind: EventKind,
    pub payload: serde_json::Value,
}

/// Appends events, numbering each session's from its `last_event_seq`. Returns them numbered.
pub(crate) fn append_events(
    connection: &Connection,
    events: Vec<NewEvent>,
) -> rusqlite::Result<Vec<Event>> {
    let at = now_ms();
    append_events_at(connection, events.into_iter().map(|event| (event, at)))
}

/// Appends events as [`append_events`] does, each with the time given beside it (a spill
/// journal's events keep the time they were spilled, `store::spill`).
pub(crate) fn append_events_at(
    connection: &Connection,
    events: impl ExactSizeIterator<Item = (NewEvent, i64)>,
) -> rusqlite::Result<Vec<Event>> {
    let mut numbered = Vec::with_capacity(events.len());
    // The session's last event's time goes with its number (the overview reads it there, not
    // from the event, whose payload may be long).
    let mut next = connection.prepare_cached(
        "UPDATE sessions SET last_event_seq = last_event_seq + 1, last_event_at = ?2 \
         WHERE id = ?1 RETURNING last_event_seq",
    )?;
    let mut insert = connection.prepare_cached(
        "INSERT INTO events (session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    if events.len() == 0 {
        return Ok(numbered);
    }
    // The daemon-wide number: the ledger is the only writer, so the last stored one plus one
    // (an index seek) is free inside this transaction; a write rolled back gives its numbers
    // back with its rows, so the stored numbers have no gaps.
    let mut feed_seq = last_feed_seq(connection)?;
    for (event, at) in events {
        let seq: i64 = next.query_row(params![&event.session_id, at], |row| row.get(0))?;
        feed_seq += 1;
        insert.execute(params![
            event.session_id,
            seq,
            event.prompt_id,
            event.run_id,
            at,
            event.kind.as_str(),
            event.payload.to_string(),
            feed_seq,
        ])?;
        numbered.push(Event {
            session_id: event.session_id,
            seq,
            feed_seq,
            prompt_id: event.prompt_id,
            run_id: event.run_id,
            at,
            kind: event.kind,
            payload: event.payload,
        });
    }
    Ok(numbered)
}

/// What the spill journal stored at boot already tells (`store::spill`): the runs whose
/// `run.exited` and the prompts whose `prompt.requeued` it held, which recovery then does not
/// tell a second time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Told {
    pub runs: std::collections::HashSet<String>,
    pub requeued: std::collections::HashSet<String>,
}

impl Told {
    /// Notes what `event`, stored from a spill, tells.
    pub fn note(&mut self, event: &NewEvent) {
        match event.kind {
            EventKind::RunExited => {
                if let Some(run) = &event.run_id {
                    self.runs.insert(run.clone());
                }
            }
            EventKind::PromptRequeued => {
                if let Some(prompt) = &event.prompt_id {
                    self.requeued.insert(prompt.clone());
                }
            }
            _ => {}
        }
    }
}

/// Whether the session's event `seq` is `event` (same kind, prompt, run and payload): how a
/// boot finds a spill file it stored before it was killed, before it could remove the file.
pub(crate) fn event_is(
    connection: &Connection,
    seq: i64,
    event: &NewEvent,
) -> rusqlite::Result<bool> {
    let found = connection
        .query_row(
            "SELECT kind, prompt_id, run_id, payload FROM events WHERE session_id = ?1 AND seq = ?2",
            params![event.session_id, seq],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, String>(3)?,
                ))
            },
        )
        .optional()?;
    Ok(found.is_some_and(|(kind, prompt_id, run_id, payload)| {
        kind == event.kind.as_str()
            && prompt_id == event.prompt_id
            && run_id == event.run_id
            && serde_json::from_str::<serde_json::Value>(&payload)
                .ok()
                .as_ref()
                == Some(&event.payload)
    }))
}

/// What a previous supervisor left behind, and what was done about it at boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// Runs that were marked running: (run id, pid, pid start), now closed as interrupted.
    pub interrupted_runs: Vec<(String, Option<i64>, Option<i64>)>,
    /// Sessions with a prompt to run now (their running prompt, requeued, or the next one).
    pub sessions: Vec<String>,
}

/// A run a dead supervisor left marked running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftoverRun {
    pub id: String,
    pub session_id: String,
    pub prompt_id: String,
    /// The status of its prompt (`running` unless it was cancelled or ended meanwhile).
    pub prompt_status: String,
    /// Its engine's pid (which leads its group), once recorded; its start time.
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
}

/// The runs marked running: at boot, the ones a dead supervisor left (only the ledger of
/// this supervisor writes, and no worker has started yet).
pub fn leftover_runs(connection: &Connection) -> rusqlite::Result<Vec<LeftoverRun>> {
    let mut statement = connection.prepare_cached(
        "SELECT runs.id, runs.session_id, runs.prompt_id, prompts.status, runs.pid, runs.pid_start \
         FROM runs JOIN prompts ON prompts.id = runs.prompt_id WHERE runs.status = 'running' \
         ORDER BY runs.started_at",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(LeftoverRun {
            id: row.get(0)?,
            session_id: row.get(1)?,
            prompt_id: row.get(2)?,
            prompt_status: row.get(3)?,
            pid: row.get(4)?,
            pid_start: row.get(5)?,
        })
    })?;
    rows.collect()
}

/// The sessions whose worktree waits for its setup command: at boot, a dead supervisor may
/// have left what a setup started (marked with the session's id, `CORRAL_SETUP_SESSION`). The
/// partial index on `worktree` keeps this to the worktree sessions.
/// The sessions (not archived) whose worktree is still `creating`: a supervisor was stopped
/// while it made them.
pub fn sessions_creating(connection: &Connection) -> rusqlite::Result<Vec<Session>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE worktree IS NOT NULL \
         AND worktree_state = 'creating' AND archived_at IS NULL ORDER BY created_at, id"
    ))?;
    let rows = statement.query_map([], session_row)?.collect();
    rows
}

pub fn sessions_in_setup(connection: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = connection.prepare_cached(
        "SELECT id FROM sessions WHERE worktree IS NOT NULL AND worktree_state = 'setup'",
    )?;
    let rows = statement.query_map([], |row| row.get(0))?;
    rows.collect()
}

/// Boot reconciliation, once the leftover runs' processes are gone: closes each run in
/// `ended` (its id and when its last process was seen gone) as `interrupted`, tells it in its
/// session's events (`run.exited` ended by recovery, `prompt.requeued`), and lists the
/// sessions whose work must resume (a prompt left `running` stays running: the new worker
/// takes it again).
pub(crate) fn recover(
    connection: &Connection,
    ended: &[(String, i64)],
    told: &Told,
) -> rusqlite::Result<Recovered> {
    let leftovers = leftover_runs(connection)?;
    let mut telling = Vec::new();
    let mut interrupted_runs = Vec::new();
    for (run_id, ended_at) in ended {
        // A run closed since it was read is not closed twice.
        let Some(run) = leftovers.iter().find(|run| &run.id == run_id) else {
            continue;
        };
        connection.run(
            "UPDATE runs SET status = 'interrupted', ended_at = ?2, retry_decision = 'requeued' \
             WHERE id = ?1 AND status = 'running'",
            params![run_id, ended_at],
        )?;
        // What happened is told in the sessions' events, as after a SIGTERM: the run ended
        // by recovery, its prompt queued again (it runs again once the worker takes it);
        // unless the spill journal stored at this boot told it already (`store::spill`).
        if !told.runs.contains(&run.id) {
            telling.push(NewEvent {
                session_id: run.session_id.clone(),
                prompt_id: Some(run.prompt_id.clone()),
                run_id: Some(run.id.clone()),
                kind: EventKind::RunExited,
                payload: serde_json::json!({
                    "ended_by": "recovery",
                    "reason": "the daemon that ran it died; a new one ended its processes and closed the run",
                }),
            });
        }
        if run.prompt_status == "running" && !told.requeued.contains(&run.prompt_id) {
            telling.push(NewEvent {
                session_id: run.session_id.clone(),
                prompt_id: Some(run.prompt_id.clone()),
                run_id: None,
                kind: EventKind::PromptRequeued,
                payload: serde_json::json!({ "reason": "recovery after the daemon died" }),
            });
        }
        interrupted_runs.push((run.id.clone(), run.pid, run.pid_start));
    }
    append_events(connection, telling)?;
    let mut statement = connection.prepare_cached(
        "SELECT DISTINCT session_id FROM prompts WHERE status IN ('running', 'queued') ORDER BY session_id",
    )?;
    let sessions = statement
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(Recovered {
        interrupted_runs,
        sessions,
    })
}

/// The prompt a session's worker should run now: the running one, or the next queued one
/// (claimed in this transaction).
/// For each session, the prompt its worker runs now: its running prompt, else its next queued
/// one, claimed (now running). The running ones are read in one query (the partial index of
/// running prompts), not one per session: a boot with thousands of sessions waiting.
pub(crate) fn current_or_next(
    connection: &Connection,
    session_ids: &[String],
) -> rusqlite::Result<Vec<Prompt>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE status = 'running'"
    ))?;
    let mut running: std::collections::HashMap<String, Prompt> = statement
        .query_map([], prompt_row)?
        .map(|prompt| prompt.map(|prompt| (prompt.session_id.clone(), prompt)))
        .collect::<rusqlite::Result<_>>()?;
    let mut prompts = Vec::with_capacity(session_ids.len());
    for session_id in session_ids {
        match running.remove(session_id) {
            Some(prompt) => prompts.push(prompt),
            None => prompts.extend(claim_next(connection, session_id, None)?),
        }
    }
    Ok(prompts)
}

pub(crate) fn set_setting(
    connection: &Connection,
    name: &str,
    value: Option<&str>,
) -> rusqlite::Result<()> {
    match value {
        Some(value) => connection.run(
            "INSERT INTO settings (name, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![name, value, now_ms()],
        )?,
        None => connection.run("DELETE FROM settings WHERE name = ?1", [name])?,
    };
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads.

pub fn project(connection: &Connection, id: &str) -> rusqlite::Result<Option<Project>> {
    connection
        .row(
            &format!("SELECT {PROJECT_COLUMNS} FROM projects WHERE id = ?1"),
            [id],
            project_row,
        )
        .optional()
}

/// The other projects whose working trees overlap `project`'s: on the same directory, on
/// one above it or on one inside it, archived ones included (an archived project's run may
/// still be ending). A run takes their locks beside its own (`SlotRequest::overlapping`), so
/// two projects on one working tree never run at once, whichever was added or archived
/// while the other ran. Paths are stored canonical (`Corral::add_project`), so comparing them
/// is comparing directories.
pub fn overlapping_trees(
    connection: &Connection,
    project: &Project,
) -> rusqlite::Result<Vec<String>> {
    let own = std::path::Path::new(&project.path);
    // A string prefix either way is necessary for an overlap; components decide.
    let mut statement = connection.prepare_cached(
        "SELECT path FROM projects WHERE id != ?1 AND (instr(?2, path) = 1 OR instr(path, ?2) = 1)",
    )?;
    let paths = statement.query_map(params![project.id, project.path], |row| {
        row.get::<_, String>(0)
    })?;
    let mut overlapping = Vec::new();
    for path in paths {
        let path = path?;
        let other = std::path::Path::new(&path);
        if own.starts_with(other) || other.starts_with(own) {
            overlapping.push(path);
        }
    }
    Ok(overlapping)
}

pub fn projects(connection: &Connection) -> rusqlite::Result<Vec<Project>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {PROJECT_COLUMNS} FROM projects ORDER BY created_at, id"
    ))?;
    let rows = statement.query_map([], project_row)?.collect();
    rows
}

pub fn execution_groups(connection: &Connection) -> rusqlite::Result<Vec<ExecutionGroup>> {
    let mut statement =
        connection.prepare_cached("SELECT name, locking FROM execution_groups ORDER BY name")?;
    let rows = statement
        .query_map([], |row| {
            Ok(ExecutionGroup {
                name: row.get(0)?,
                locking: row.get(1)?,
            })
        })?
        .collect();
    rows
}

/// How many sessions the store has (archived ones too), without reading them.
pub fn session_count(connection: &Connection) -> rusqlite::Result<usize> {
    connection.row("SELECT COUNT(*) FROM sessions", [], |row| row.get(0))
}

pub fn session(connection: &Connection, id: &str) -> rusqlite::Result<Option<Session>> {
    connection
        .row(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
            [id],
            session_row,
        )
        .optional()
}

pub fn sessions(connection: &Connection) -> rusqlite::Result<Vec<Session>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, id"
    ))?;
    let rows = statement.query_map([], session_row)?.collect();
    rows
}

pub fn prompt(connection: &Connection, id: &str) -> rusqlite::Result<Option<Prompt>> {
    connection
        .row(
            &format!("SELECT {PROMPT_COLUMNS} FROM prompts WHERE id = ?1"),
            [id],
            prompt_row,
        )
        .optional()
}

pub fn prompts_of(connection: &Connection, session_id: &str) -> rusqlite::Result<Vec<Prompt>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {PROMPT_COLUMNS} FROM prompts WHERE session_id = ?1 ORDER BY created_at, id"
    ))?;
    let rows = statement.query_map([session_id], prompt_row)?.collect();
    rows
}

pub fn runs_of(connection: &Connection, prompt_id: &str) -> rusqlite::Result<Vec<Run>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE prompt_id = ?1 ORDER BY attempt, started_at"
    ))?;
    let rows = statement.query_map([prompt_id], run_row)?.collect();
    rows
}

pub fn runs_of_session(connection: &Connection, session_id: &str) -> rusqlite::Result<Vec<Run>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 ORDER BY started_at, id"
    ))?;
    let rows = statement.query_map([session_id], run_row)?.collect();
    rows
}

/// Every run marked running.
pub fn running_runs(connection: &Connection) -> rusqlite::Result<Vec<Run>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running' ORDER BY started_at, id"
    ))?;
    let rows = statement.query_map([], run_row)?.collect();
    rows
}

const EVENT_COLUMNS: &str = "session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq";

/// A session's events with a number above `after`, oldest first, at most `limit`.
pub fn events_after(
    connection: &Connection,
    session_id: &str,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    events_between(connection, session_id, after, i64::MAX, limit)
}

/// A session's events numbered above `after` and below `before`, oldest first, at most
/// `limit`.
pub fn events_between(
    connection: &Connection,
    session_id: &str,
    after: i64,
    before: i64,
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events \
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq LIMIT ?4"
    ))?;
    let rows = statement
        .query_map(params![session_id, after, before, limit as i64], event_row)?
        .collect();
    rows
}

/// Every session's events with a daemon-wide number above `after` and below `before`, in
/// that number's order, at most `limit`.
pub fn feed_between(
    connection: &Connection,
    after: i64,
    before: i64,
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events \
         WHERE feed_seq > ?1 AND feed_seq < ?2 ORDER BY feed_seq LIMIT ?3"
    ))?;
    let rows = statement
        .query_map(params![after, before, limit as i64], event_row)?
        .collect();
    rows
}

/// The daemon-wide number of the last stored event (0: none yet).
pub fn last_feed_seq(connection: &Connection) -> rusqlite::Result<i64> {
    connection.row("SELECT coalesce(max(feed_seq), 0) FROM events", [], |row| {
        row.get(0)
    })
}

// ---------------------------------------------------------------------------------------------
// Driver claims (fencing): at most one driver per session, a generation bumped by each claim.

/// A session's driver claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverClaim {
    pub session_id: String,
    /// The exec driving the session now; `None`: vacant.
    pub exec_id: Option<String>,
    /// The last exec that claimed it (kept when it releases, to name who superseded whom).
    pub last_exec_id: Option<String>,
    pub generation: i64,
    pub provider_generation: i64,
    pub claimed_at: Option<i64>,
    pub released_at: Option<i64>,
}

fn claim_row(row: &Row<'_>) -> rusqlite::Result<DriverClaim> {
    Ok(DriverClaim {
        session_id: row.get(0)?,
        exec_id: row.get(1)?,
        generation: row.get(2)?,
        provider_generation: row.get(3)?,
        claimed_at: row.get(4)?,
        released_at: row.get(5)?,
        last_exec_id: row.get(6)?,
    })
}

pub fn driver_claim(
    connection: &Connection,
    session_id: &str,
) -> rusqlite::Result<Option<DriverClaim>> {
    connection
        .row(
            "SELECT session_id, exec_id, generation, provider_generation, claimed_at, released_at, \
             last_exec_id FROM driver_claims WHERE session_id = ?1",
            [session_id],
            claim_row,
        )
        .optional()
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimRefused {
    /// Another live exec drives the session; `take_over` was not asked.
    Held { exec_id: String },
}

/// Claims the session for `exec_id`. A live driver (its exec still open and its process
/// alive, decided by `is_live`) is only replaced with `take_over`.
pub(crate) fn claim_driver(
    connection: &Connection,
    session_id: &str,
    exec_id: &str,
    take_over: bool,
    is_live: &dyn Fn(&str) -> bool,
) -> rusqlite::Result<Result<DriverClaim, ClaimRefused>> {
    let current = driver_claim(connection, session_id)?;
    if let Some(holder) = current.as_ref().and_then(|claim| claim.exec_id.clone()) {
        if holder != exec_id && !take_over && is_live(&holder) {
            return Ok(Err(ClaimRefused::Held { exec_id: holder }));
        }
    }
    connection.run(
        "INSERT INTO driver_claims (session_id, exec_id, last_exec_id, generation, claimed_at) \
         VALUES (?1, ?2, ?2, 1, ?3) \
         ON CONFLICT (session_id) DO UPDATE SET exec_id = excluded.exec_id, \
         last_exec_id = excluded.exec_id, generation = generation + 1, \
         claimed_at = excluded.claimed_at, released_at = NULL",
        params![session_id, exec_id, now_ms()],
    )?;
    Ok(Ok(
        driver_claim(connection, session_id)?.expect("just written")
    ))
}

/// Releases the claim of `generation`; a stale generation changes nothing. Returns the claim.
pub(crate) fn release_driver(
    connection: &Connection,
    session_id: &str,
    generation: i64,
) -> rusqlite::Result<Option<DriverClaim>> {
    connection.run(
        "UPDATE driver_claims SET exec_id = NULL, released_at = ?3 \
         WHERE session_id = ?1 AND generation = ?2",
        params![session_id, generation, now_ms()],
    )?;
    driver_claim(connection, session_id)
}

/// Bumps the provider generation (an engine child was started for the session) and returns
/// the current driver's exec id, which the child gets as its `CORRAL_PARENT_EXEC`.
pub(crate) fn engine_started(
    connection: &Connection,
    session_id: &str,
) -> rusqlite::Result<Option<String>> {
    connection.run(
        "INSERT INTO driver_claims (session_id, provider_generation) VALUES (?1, 1) \
         ON CONFLICT (session_id) DO UPDATE SET provider_generation = provider_generation + 1",
        [session_id],
    )?;
    Ok(driver_claim(connection, session_id)?.and_then(|claim| claim.exec_id))
}

/// Puts a running prompt back in the queue (daemon shutdown): it runs again, first, later.
pub(crate) fn requeue(connection: &Connection, prompt_id: &str) -> rusqlite::Result<()> {
    connection.run(
        "UPDATE prompts SET status = 'queued' WHERE id = ?1 AND status = 'running'",
        [prompt_id],
    )?;
    Ok(())
}

/// Updates a project's settings; `None` fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct ProjectChange {
    pub engine: Option<String>,
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
    pub archive: bool,
}

pub(crate) fn change_project(
    connection: &Connection,
    id: &str,
    change: &ProjectChange,
) -> rusqlite::Result<Option<Project>> {
    let now = now_ms();
    connection.run(
        "UPDATE projects SET engine = COALESCE(?2, engine), model = COALESCE(?3, model), \
         full_access = COALESCE(?4, full_access), \
         kind = COALESCE(CASE ?5 WHEN 1 THEN 'remote' WHEN 0 THEN 'local' END, kind), \
         groups = COALESCE(?6, groups), instructions = COALESCE(?7, instructions), \
         archived_at = CASE WHEN ?8 THEN COALESCE(archived_at, ?9) ELSE archived_at END, \
         keep_background = COALESCE(?10, keep_background), \
         isolation = COALESCE(?11, isolation), \
         worktrees_dir = CASE WHEN ?12 THEN ?13 ELSE worktrees_dir END, \
         setup = CASE WHEN ?14 THEN ?15 ELSE setup END, \
         repo_root = COALESCE(?16, repo_root) \
         WHERE id = ?1",
        params![
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
        ],
    )?;
    if let Some(groups) = &change.groups {
        for group in groups {
            connection.run(
                "INSERT OR IGNORE INTO execution_groups (name, locking, created_at) VALUES (?1, 1, ?2)",
                params![group, now],
            )?;
        }
    }
    project(connection, id)
}

/// Renames or archives a session.
pub(crate) fn change_session(
    connection: &Connection,
    id: &str,
    title: Option<&str>,
    archive: bool,
) -> rusqlite::Result<Option<Session>> {
    if let Some(title) = title {
        connection.run(
            "UPDATE sessions SET title = ?2, title_source = 'human' WHERE id = ?1",
            params![id, title],
        )?;
    }
    if archive {
        connection.run(
            "UPDATE sessions SET archived_at = COALESCE(archived_at, ?2) WHERE id = ?1",
            params![id, now_ms()],
        )?;
    }
    session(connection, id)
}

/// Creates a wave (a named batch of sessions) in `repo`, or finds the one of that name there.
pub(crate) fn wave_named(
    connection: &Connection,
    name: &str,
    repo: Option<&str>,
) -> rusqlite::Result<String> {
    let found: Option<String> = connection
        .row(
            "SELECT id FROM waves WHERE name = ?1 AND repo IS ?2",
            params![name, repo],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    let id = uuid::Uuid::now_v7().to_string();
    connection.run(
        "INSERT INTO waves (id, name, repo, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, name, repo, now_ms()],
    )?;
    Ok(id)
}

// ---------------------------------------------------------------------------------------------
// App-server children (state kept for `status` across daemon restarts).

pub(crate) fn save_app_server(
    connection: &Connection,
    project_id: &str,
    state: &serde_json::Value,
) -> rusqlite::Result<()> {
    connection.run(
        "INSERT INTO app_servers (project_id, state, updated_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (project_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        params![project_id, state.to_string(), now_ms()],
    )?;
    Ok(())
}

/// The last known state of every app-server child, by project.
pub fn app_servers(connection: &Connection) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut statement =
        connection.prepare_cached("SELECT state FROM app_servers ORDER BY project_id")?;
    let rows = statement
        .query_map([], |row| row.get::<_, String>(0))?
        .map(|row| row.map(|text| serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)))
        .collect();
    rows
}

// ---------------------------------------------------------------------------------------------
// Processes runs left behind that their project keeps (`keep_background`).

/// A process a run left behind and its project kept; `status` lists the ones still alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProcess {
    pub pid: i64,
    /// Its start time: with the pid, it names the process for good.
    pub pid_start: i64,
    pub run_id: String,
    pub session_id: String,
    pub project_id: Option<String>,
    pub command: String,
    pub kept_at: i64,
}

/// Records processes kept after a run, and forgets the ones seen gone (pid, start).
pub(crate) fn keep_processes(
    connection: &Connection,
    kept: &[KeptProcess],
    forget: &[(i64, i64)],
) -> rusqlite::Result<()> {
    for (pid, start) in forget {
        connection.run(
            "DELETE FROM kept_processes WHERE pid = ?1 AND pid_start = ?2",
            params![pid, start],
        )?;
    }
    for process in kept {
        connection.run(
            "INSERT OR REPLACE INTO kept_processes \
             (pid, pid_start, run_id, session_id, project_id, command, kept_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                process.pid,
                process.pid_start,
                process.run_id,
                process.session_id,
                process.project_id,
                process.command,
                process.kept_at,
            ],
        )?;
    }
    Ok(())
}

/// Every kept process recorded, alive or not (the caller checks), oldest first.
pub fn kept_processes(connection: &Connection) -> rusqlite::Result<Vec<KeptProcess>> {
    let mut statement = connection.prepare_cached(
        "SELECT pid, pid_start, run_id, session_id, project_id, command, kept_at \
         FROM kept_processes ORDER BY kept_at, pid",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(KeptProcess {
            pid: row.get(0)?,
            pid_start: row.get(1)?,
            run_id: row.get(2)?,
            session_id: row.get(3)?,
            project_id: row.get(4)?,
            command: row.get(5)?,
            kept_at: row.get(6)?,
        })
    })?;
    rows.collect()
}

/// Records a compaction's counts on the session (and forgets the thread when it was reset).
pub(crate) fn record_compaction(
    connection: &Connection,
    session_id: &str,
    messages: i64,
    characters: i64,
    reset_thread: bool,
) -> rusqlite::Result<Option<Session>> {
    connection.run(
        "UPDATE sessions SET compacted_message_count = ?2, compacted_character_count = ?3, \
         compacted_at = ?4, thread_id = CASE WHEN ?5 THEN NULL ELSE thread_id END WHERE id = ?1",
        params![session_id, messages, characters, now_ms(), reset_thread],
    )?;
    session(connection, session_id)
}
