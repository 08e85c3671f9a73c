//! Sessions: one agent conversation in a project, with its engine thread, title, status,
//! compaction counts and its own worktree when it has one (`sessions`), and the waves that
//! batch them (`waves`).
//!
//! Written by the ledger actor (`CreateSession`, `ChangeSession`, `SetThread`, ...); read by
//! the daemon's methods, the CLI, the supervisor at boot and a session's worker.

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::environment::Environment;

use super::now_ms;
use crate::engine::{EngineKind, Policy};

/// What a session's row says it is doing (the overview's `SessionState` is read from its
/// prompts and runs as well). Kept by the ledger with its prompts: `running` when one is
/// claimed, else what its last prompt left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Nothing ran yet, or its last prompt was cancelled or left queued for another daemon.
    Idle,
    /// A prompt of it runs.
    Running,
    /// Its last prompt is done: it waits for the next.
    Waiting,
    /// Its last prompt failed.
    Failed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::Waiting => "waiting",
            SessionStatus::Failed => "failed",
        }
    }

    /// The status a row holds; anything else (no corral writes it) reads as idle.
    pub fn parse(text: &str) -> SessionStatus {
        match text {
            "running" => SessionStatus::Running,
            "waiting" => SessionStatus::Waiting,
            "failed" => SessionStatus::Failed,
            _ => SessionStatus::Idle,
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

impl sql::Get for WorktreeState {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        let text = String::from_value(value)?;
        text.parse()
            .map_err(|_| format!("{text:?} is not a WorktreeState"))
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

/// One agent conversation in a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub project_id: Option<String>,
    pub engine: EngineKind,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// What its agents may do without asking, over the project's (`None`: the project's).
    #[serde(default)]
    pub policy: Option<Policy>,
    /// The engine's own thread/session id, once it has one.
    pub thread_id: Option<String>,
    /// Where in that thread its last successful turn ended, in the engine's own words (claude's
    /// last assistant message uuid): a retry continues from here, not after a failed turn.
    pub resume_point: Option<String>,
    pub title: Option<String>,
    /// `human` or `generated`; a human title is never replaced.
    pub title_source: Option<String>,
    pub status: SessionStatus,
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
    /// Variables its engine children get, over its project's (`store::environment`).
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
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

const SESSION_COLUMNS: &str = "id, project_id, engine, model, reasoning_effort, thread_id, \
                               title, title_source, status, task, wave_id, created_at, \
                               archived_at, last_event_seq, compacted_message_count, \
                               compacted_character_count, compacted_at, resume_point, \
                               worktree, branch, base, base_commit, worktree_state, policy, \
                               env";

/// How many columns [`SESSION_COLUMNS`] names: where a join's next table begins.
fn session_column_count() -> usize {
    SESSION_COLUMNS.split(',').count()
}

fn session_row(row: &Row<'_>) -> sql::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        project_id: row.get(1)?,
        engine: row.get(2)?,
        model: row.get(3)?,
        reasoning_effort: row.get(4)?,
        thread_id: row.get(5)?,
        title: row.get(6)?,
        title_source: row.get(7)?,
        status: SessionStatus::parse(&row.get::<String>(8)?),
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
        policy: row.get(23)?,
        env: row.get(24)?,
    })
}

/// The worktree columns from `first` on (path, branch, base, base_commit, state).
fn worktree_row(row: &Row<'_>, first: usize) -> sql::Result<Option<SessionWorktree>> {
    let path: Option<String> = row.get(first)?;
    let Some(path) = path else { return Ok(None) };
    Ok(Some(SessionWorktree {
        path,
        branch: row.get::<Option<String>>(first + 1)?.unwrap_or_default(),
        base: row
            .get::<Option<String>>(first + 2)?
            .unwrap_or_else(|| "HEAD".into()),
        base_commit: row.get::<Option<String>>(first + 3)?.unwrap_or_default(),
        state: row
            .get::<Option<WorktreeState>>(first + 4)?
            .unwrap_or(WorktreeState::Creating),
    }))
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// A session to open.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub project_id: String,
    /// `None`: the project's engine.
    pub engine: Option<EngineKind>,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// See [`Session::policy`].
    pub policy: Option<Policy>,
    /// A title a person chose (never replaced by a generated one).
    pub title: Option<String>,
    pub task: Option<String>,
    pub wave_id: Option<String>,
    /// The id to give it (a worktree's path and branch are named after it before the row
    /// exists); `None`: a new one.
    pub id: Option<String>,
    /// Its worktree, recorded `creating` in the same insert (see `WorktreeState`).
    /// [`crate::Corral::open_session`] plans it for a worktree project's session.
    pub worktree: Option<SessionWorktree>,
    /// The branch asked for (`--branch`; a worktree project's session only): an existing one
    /// is checked out as it is, else made. Not stored as such: `worktree` says it.
    pub branch: Option<String>,
    /// What the new branch starts from (`--base`; default: the project's HEAD).
    pub base: Option<String>,
    /// On a shared store, the node of the daemon that makes the worktree: its directory is on
    /// that daemon's host, so only that daemon runs the session's prompts and touches it.
    pub worktree_node: Option<String>,
    /// See [`Session::env`].
    pub env: Environment,
}

pub(crate) fn insert_session(connection: &Conn, new: &NewSession) -> sql::Result<Session> {
    let session = Session {
        id: new
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        project_id: Some(new.project_id.clone()),
        // Resolved from the project by `Corral::open_session`.
        engine: new.engine.unwrap_or_default(),
        model: new.model.clone(),
        reasoning_effort: new.reasoning_effort.clone(),
        policy: new.policy,
        thread_id: None,
        resume_point: None,
        title: new.title.clone(),
        title_source: new.title.as_ref().map(|_| "human".to_string()),
        status: SessionStatus::Idle,
        task: new.task.clone(),
        wave_id: new.wave_id.clone(),
        created_at: now_ms(),
        archived_at: None,
        last_event_seq: 0,
        compacted_message_count: None,
        compacted_character_count: None,
        compacted_at: None,
        worktree: new.worktree.clone(),
        env: new.env.clone(),
    };
    let worktree = session.worktree.as_ref();
    connection.run(
        "INSERT INTO sessions (id, project_id, engine, model, reasoning_effort, thread_id, title, \
         title_source, status, task, wave_id, created_at, archived_at, last_event_seq, \
         worktree, branch, base, base_commit, worktree_state, worktree_node, policy, env) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
        args![
            session.id,
            session.project_id,
            session.engine,
            session.model,
            session.reasoning_effort,
            session.thread_id,
            session.title,
            session.title_source,
            session.status.as_str(),
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
            worktree.and(new.worktree_node.as_deref()),
            session.policy.map(Policy::as_str),
            session.env.to_json(),
        ],
    )?;
    Ok(session)
}

/// Moves a session's worktree to `state`; replies with the session.
pub(crate) fn set_worktree_state(
    connection: &Conn,
    session_id: &str,
    state: WorktreeState,
) -> sql::Result<Option<Session>> {
    connection.run(
        "UPDATE sessions SET worktree_state = ?2 WHERE id = ?1 AND worktree IS NOT NULL",
        args![session_id, state.as_str()],
    )?;
    session(connection, session_id)
}

/// Deletes a session opened a moment ago whose worktree could not be made, as if it had never
/// been opened: only while nothing refers to it (no prompt, no event, no driver claim).
/// Replies whether it was deleted.
pub(crate) fn forget_new_session(connection: &Conn, session_id: &str) -> sql::Result<bool> {
    let deleted = connection.run(
        "DELETE FROM sessions WHERE id = ?1 \
         AND NOT EXISTS (SELECT 1 FROM prompts WHERE session_id = ?1) \
         AND NOT EXISTS (SELECT 1 FROM events WHERE session_id = ?1) \
         AND NOT EXISTS (SELECT 1 FROM driver_claims WHERE session_id = ?1)",
        args![session_id],
    )?;
    Ok(deleted > 0)
}

/// Sets a session's engine thread and where in it a retry would continue (`None`: after its
/// last message).
pub(crate) fn set_thread(
    connection: &Conn,
    session_id: &str,
    thread_id: Option<&str>,
    resume_point: Option<&str>,
) -> sql::Result<()> {
    // Nothing of its answer is read: held for the next round trip (PostgreSQL).
    connection.run_later(
        "UPDATE sessions SET thread_id = ?2, resume_point = ?3 WHERE id = ?1",
        args![session_id, thread_id, resume_point],
    )
}

/// Sets a generated title unless a person set one. Returns whether it was set.
pub(crate) fn set_generated_title(
    connection: &Conn,
    session_id: &str,
    title: &str,
) -> sql::Result<bool> {
    let changed = connection.run(
        "UPDATE sessions SET title = ?2, title_source = 'generated' \
         WHERE id = ?1 AND (title_source IS NULL OR title_source <> 'human')",
        args![session_id, title],
    )?;
    Ok(changed == 1)
}

/// Renames or archives a session.
pub(crate) fn change_session(
    connection: &Conn,
    id: &str,
    title: Option<&str>,
    policy: Option<Option<Policy>>,
    archive: bool,
) -> sql::Result<Option<Session>> {
    if let Some(policy) = policy {
        connection.run(
            "UPDATE sessions SET policy = ?2 WHERE id = ?1",
            args![id, policy.map(Policy::as_str)],
        )?;
    }
    if let Some(title) = title {
        connection.run(
            "UPDATE sessions SET title = ?2, title_source = 'human' WHERE id = ?1",
            args![id, title],
        )?;
    }
    if archive {
        connection.run(
            "UPDATE sessions SET archived_at = COALESCE(archived_at, ?2) WHERE id = ?1",
            args![id, now_ms()],
        )?;
    }
    session(connection, id)
}

/// Creates a wave (a named batch of sessions) in `repo`, or finds the one of that name there.
pub(crate) fn wave_named(connection: &Conn, name: &str, repo: Option<&str>) -> sql::Result<String> {
    // `IS NOT DISTINCT FROM` (a NULL repo matches a NULL repo): the standard form, which
    // PostgreSQL and SQLite since 3.39 take; `IS ?2` is SQLite's alone.
    let found: Option<String> = connection
        .row(
            "SELECT id FROM waves WHERE name = ?1 AND repo IS NOT DISTINCT FROM ?2",
            args![name, repo],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    let id = uuid::Uuid::now_v7().to_string();
    connection.run(
        "INSERT INTO waves (id, name, repo, created_at) VALUES (?1, ?2, ?3, ?4)",
        args![id, name, repo, now_ms()],
    )?;
    Ok(id)
}

/// Records a compaction's counts on the session (and forgets the thread when it was reset).
pub(crate) fn record_compaction(
    connection: &Conn,
    session_id: &str,
    messages: i64,
    characters: i64,
    reset_thread: bool,
) -> sql::Result<Option<Session>> {
    connection.run(
        "UPDATE sessions SET compacted_message_count = ?2, compacted_character_count = ?3, \
         compacted_at = ?4, thread_id = CASE WHEN ?5 THEN NULL ELSE thread_id END WHERE id = ?1",
        args![session_id, messages, characters, now_ms(), reset_thread],
    )?;
    session(connection, session_id)
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The sessions (not archived) whose worktree is still `creating`: a supervisor was stopped
/// while it made them.
pub fn sessions_creating(connection: &Conn) -> sql::Result<Vec<Session>> {
    connection.rows(
        &format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE worktree IS NOT NULL \
         AND worktree_state = 'creating' AND archived_at IS NULL ORDER BY created_at, id"
        ),
        args![],
        session_row,
    )
}

/// The sessions whose worktree waits for its setup command: at boot, a dead supervisor may
/// have left what a setup started (marked with the session's id, `CORRAL_SETUP_SESSION`). The
/// partial index on `worktree` keeps this to the worktree sessions.
///
/// In id order on either store (PostgreSQL returns heap order); sorted here, since an
/// `ORDER BY id` would make SQLite walk every session by its primary key instead.
pub fn sessions_in_setup(connection: &Conn) -> sql::Result<Vec<String>> {
    let mut ids: Vec<String> = connection.rows(
        "SELECT id FROM sessions WHERE worktree IS NOT NULL AND worktree_state = 'setup'",
        args![],
        |row| row.get(0),
    )?;
    ids.sort_unstable();
    Ok(ids)
}

/// How many sessions the store has (archived ones too), without reading them.
pub fn session_count(connection: &Conn) -> sql::Result<usize> {
    connection.row("SELECT COUNT(*) FROM sessions", args![], |row| row.get(0))
}

/// Where a session's worktree is, on a shared store: the node of the daemon that made it and
/// that daemon's host (`None` when its daemon never registered), or `None` when it names none.
pub fn worktree_node(connection: &Conn, id: &str) -> sql::Result<Option<(String, Option<String>)>> {
    let found: Option<(Option<String>, Option<String>)> = connection
        .row(
            "SELECT s.worktree_node, d.host FROM sessions s \
               LEFT JOIN daemons d ON d.node_id = s.worktree_node WHERE s.id = ?1",
            args![id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    Ok(found.and_then(|(node, host)| node.map(|node| (node, host))))
}

pub fn session(connection: &Conn, id: &str) -> sql::Result<Option<Session>> {
    connection
        .row(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
            args![id],
            session_row,
        )
        .optional()
}

/// A session and its project (`None`: it has none, or none by that id), in one read.
pub fn session_and_project(
    connection: &Conn,
    id: &str,
) -> sql::Result<Option<(Session, Option<super::projects::Project>)>> {
    // Made once: it is asked at every send and every prompt's start.
    static QUERY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let query = QUERY.get_or_init(|| {
        format!(
            "SELECT {}, {} FROM sessions s LEFT JOIN projects p ON p.id = s.project_id \
             WHERE s.id = ?1",
            sql::qualified(SESSION_COLUMNS, "s"),
            super::projects::project_columns("p"),
        )
    });
    connection
        .row(query, args![id], |row| {
            Ok((
                session_row(row)?,
                super::projects::maybe_project_at(row, session_column_count())?,
            ))
        })
        .optional()
}

pub fn sessions(connection: &Conn) -> sql::Result<Vec<Session>> {
    connection.rows(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, id"),
        args![],
        session_row,
    )
}
