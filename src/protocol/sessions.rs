//! Sessions: `session.new`, `session.list`, `session.show`, `session.rename`,
//! `session.archive`, `session.steer`, `session.compact`, and `history` (a session's prompts
//! and runs).

use serde::{Deserialize, Serialize};

use crate::store::environment::Environment;

use super::{method, named_params, Claim, Prompt};
use crate::engine::EngineKind;
use crate::store::prompts::PromptStatus;
use crate::store::{prompts, runs, sessions};

method! {
    SessionNew = "session.new": SessionNewParams => Session,
    SessionList = "session.list": SessionListParams => Vec<Session>,
    /// A session with its prompts and driver claim.
    SessionShow = "session.show": SessionSelector => SessionShowResult,
    SessionRename = "session.rename": SessionRenameParams => Session,
    /// A clean worktree is removed (its branch kept); one with changes is kept unless
    /// `discard_changes` (the answer's `worktree_state` says which).
    SessionArchive = "session.archive": SessionArchiveParams => Session,
    /// The session's changes against its base: commits and uncommitted files alike.
    SessionDiff = "session.diff": SessionDiffParams => SessionDiffResult,
    /// Merges the session's branch inside corral's own worktree, never half-done.
    SessionMerge = "session.merge": SessionMergeParams => SessionMerged,
    /// Makes a worktree removed by hand again, on its branch.
    SessionRecreate = "session.recreate": SessionSelector => Session,
    /// Text for the turn that runs now (engines that can take it: the codex app-server).
    SessionSteer = "session.steer": SteerParams => Steered,
    /// Compacts the engine's thread (engines that can).
    SessionCompact = "session.compact": SessionSelector => Compacted,
    /// A session with its prompts and runs.
    History = "history": SessionSelector => HistoryResult,
}

/// `session.steer`'s answer: the engine's own, naming the turn the text went to (codex's
/// `{"turnId": …}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Steered {
    /// The running turn that took the text, in the engine's words.
    #[serde(rename = "turnId", default)]
    pub turn_id: Option<String>,
}

/// `session.compact`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Compacted {
    /// The session as recorded after the compaction (null: it is gone meanwhile).
    pub session: Option<Session>,
    /// What was compacted: the exchanges since the last compaction.
    pub compacted: CompactedCount,
    /// The thread's rollout was missing, so the thread was reset instead: the next prompt
    /// starts a new one.
    pub thread_reset: bool,
    /// What happened, in words.
    pub note: String,
}

/// How much a compaction took in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedCount {
    /// Exchanges (a prompt and its answer).
    pub messages: i64,
    pub characters: i64,
}

/// A session on the wire (`sessions::Session`'s keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub project_id: Option<String>,
    pub engine: EngineKind,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// The engine's own thread/session id, once it has one.
    pub thread_id: Option<String>,
    /// Where in that thread its last successful turn ended, in the engine's own words.
    pub resume_point: Option<String>,
    pub title: Option<String>,
    /// `human` or `generated`.
    pub title_source: Option<String>,
    pub status: sessions::SessionStatus,
    pub task: Option<String>,
    pub wave_id: Option<String>,
    pub created_at: i64,
    pub archived_at: Option<i64>,
    pub last_event_seq: i64,
    pub compacted_message_count: Option<i64>,
    pub compacted_character_count: Option<i64>,
    pub compacted_at: Option<i64>,
    /// Its own git worktree (null: it runs in its project's path).
    #[serde(default)]
    pub worktree: Option<String>,
    #[serde(default)]
    pub branch: Option<String>,
    /// The ref the worktree was made from, as given.
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub base_commit: Option<String>,
    /// `creating`, `setup`, `ready`, `removed`, `kept`, or `missing` (made, and its
    /// directory gone since: removed by hand).
    #[serde(default)]
    pub worktree_state: Option<String>,
    /// In `session.archive`'s answer only: why the worktree was kept ("it has uncommitted
    /// changes", "it has submodules, …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_kept_because: Option<String>,
    /// Its own policy (null: the project's).
    #[serde(default)]
    pub policy: Option<crate::engine::Policy>,
    /// Its own environment variables, over its project's; the values of names that look
    /// like secrets masked.
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
}

impl From<&sessions::Session> for Session {
    fn from(s: &sessions::Session) -> Self {
        Session {
            id: s.id.clone(),
            project_id: s.project_id.clone(),
            engine: s.engine,
            model: s.model.clone(),
            reasoning_effort: s.reasoning_effort.clone(),
            thread_id: s.thread_id.clone(),
            resume_point: s.resume_point.clone(),
            title: s.title.clone(),
            title_source: s.title_source.clone(),
            status: s.status,
            task: s.task.clone(),
            wave_id: s.wave_id.clone(),
            created_at: s.created_at,
            archived_at: s.archived_at,
            last_event_seq: s.last_event_seq,
            compacted_message_count: s.compacted_message_count,
            compacted_character_count: s.compacted_character_count,
            compacted_at: s.compacted_at,
            worktree: s.worktree.as_ref().map(|w| w.path.clone()),
            branch: s.worktree.as_ref().map(|w| w.branch.clone()),
            base: s.worktree.as_ref().map(|w| w.base.clone()),
            base_commit: s.worktree.as_ref().map(|w| w.base_commit.clone()),
            worktree_state: s.worktree.as_ref().map(worktree_state),
            worktree_kept_because: None,
            policy: s.policy,
            env: s.env.masked(),
        }
    }
}

/// A worktree's state as shown: a made one whose directory is gone reads `missing`.
fn worktree_state(worktree: &sessions::SessionWorktree) -> String {
    use sessions::WorktreeState::{Ready, Setup};
    let made = matches!(worktree.state, Setup | Ready);
    if made && !std::path::Path::new(&worktree.path).exists() {
        "missing".to_string()
    } else {
        worktree.state.as_str().to_string()
    }
}

/// `session.show`'s session: the row, and where its prompts are (made from the prompts
/// `session.show` reads anyway; a compatible addition to version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDetail {
    #[serde(flatten)]
    pub session: Session,
    /// The prompt that runs now, else the next queued one; null when none is pending.
    #[serde(default)]
    pub current_prompt_id: Option<String>,
    /// The status of the session's last prompt; null before its first.
    #[serde(default)]
    pub last_status: Option<PromptStatus>,
}

impl SessionDetail {
    /// `prompts` oldest first, as `prompts::prompts_of` reads them.
    pub fn new(session: &sessions::Session, prompts: &[prompts::Prompt]) -> Self {
        let current = prompts
            .iter()
            .find(|p| p.status == PromptStatus::Running)
            .or_else(|| prompts.iter().find(|p| p.status == PromptStatus::Queued));
        SessionDetail {
            session: session.into(),
            current_prompt_id: current.map(|p| p.id.clone()),
            last_status: prompts.last().map(|p| p.status),
        }
    }
}

/// One engine child (or app-server turn) started for a prompt (`runs::Run`'s keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub prompt_id: String,
    pub session_id: String,
    pub attempt: i64,
    pub engine: EngineKind,
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
    pub status: runs::RunStatus,
    pub failure_class: Option<String>,
    pub retry_decision: Option<String>,
    pub error: Option<String>,
}

impl From<&runs::Run> for Run {
    fn from(r: &runs::Run) -> Self {
        Run {
            id: r.id.clone(),
            prompt_id: r.prompt_id.clone(),
            session_id: r.session_id.clone(),
            attempt: r.attempt,
            engine: r.engine,
            argv: r.argv.clone(),
            thread_id: r.thread_id.clone(),
            exec_id: r.exec_id.clone(),
            pid: r.pid,
            pid_start: r.pid_start,
            pgid: r.pgid,
            started_at: r.started_at,
            ended_at: r.ended_at,
            exit_code: r.exit_code,
            signal: r.signal.clone(),
            status: r.status,
            failure_class: r.failure_class.map(|class| class.as_str().to_string()),
            retry_decision: r.retry_decision.clone(),
            error: r.error.clone(),
        }
    }
}

/// `session.new`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionNewParams {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Its policy over the project's (a wider one is a widening; `full` only where the
    /// project grants it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::engine::Policy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
    /// A worktree project's session: its branch (default `corral/<slug>-<short id>`; one
    /// that exists is checked out as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A worktree project's session: the ref its branch starts from (default: the project's
    /// HEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Environment variables its engines get, over the project's (a widening from a run: an
    /// agent may not add variables to a session).
    #[serde(default, skip_serializing_if = "Environment::is_empty")]
    pub env: Environment,
}

/// `session.archive {session, discard_changes}`: `discard_changes` removes a worktree that
/// has changes (a widening: the changes are lost); an archived session may be archived again
/// with it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionArchiveParams {
    pub session: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard_changes: Option<bool>,
}
named_params!(SessionArchiveParams {
    session: string,
    discard_changes: optional
});

/// `session.diff {session, stat}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionDiffParams {
    pub session: String,
    /// `git diff --stat`'s summary instead of the patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat: Option<bool>,
}
named_params!(SessionDiffParams {
    session: string,
    stat: optional
});

/// The session's changes against its base commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDiffResult {
    pub session_id: String,
    pub branch: String,
    pub base_commit: String,
    /// The patch, or the `--stat` summary.
    pub text: String,
    pub files_changed: u32,
    pub insertions: u32,
    pub deletions: u32,
}

/// `session.merge {session, into, squash}` (a widening: it writes the person's branch).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionMergeParams {
    pub session: String,
    /// Default: the session's base, when that is a branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub squash: Option<bool>,
}
named_params!(SessionMergeParams {
    session: string,
    into: optional,
    squash: optional
});

/// A merge made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMerged {
    pub session_id: String,
    pub branch: String,
    pub into: String,
    /// The commit `into` now points at.
    pub commit: String,
    pub squash: bool,
    /// The checkout of `into` that was fast-forwarded to it, if it is checked out.
    pub checkout_updated: Option<String>,
}

/// `session.list {all, project}`: archived sessions too when `all`; one project's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}
named_params!(SessionListParams {
    all: optional,
    project: optional
});

/// A session by its selector (an id, a unique id prefix, its title).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionSelector {
    pub session: String,
}
named_params!(SessionSelector { session: string });

impl SessionSelector {
    pub fn new(session: impl Into<String>) -> Self {
        SessionSelector {
            session: session.into(),
        }
    }
}

/// `session.rename {session, title}`: a person's title, at most 500 characters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionRenameParams {
    pub session: String,
    pub title: String,
}
named_params!(SessionRenameParams {
    session: string,
    title: string
});

/// `session.steer {session, text}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SteerParams {
    pub session: String,
    pub text: String,
}
named_params!(SteerParams {
    session: string,
    text: string
});

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionShowResult {
    pub session: SessionDetail,
    pub prompts: Vec<Prompt>,
    pub driver: Option<Claim>,
    /// Its state, reason and `until` as the overview computes them (the one vocabulary);
    /// absent from an older daemon's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::store::overview::SessionItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryResult {
    pub session: Session,
    pub prompts: Vec<Prompt>,
    pub runs: Vec<Run>,
}
