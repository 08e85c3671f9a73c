//! Steer and compact, here or on the daemon that holds the session's thread (#14).
//!
//! Both talk to the codex app-server child of the session's project. On a shared store that
//! child is on the daemon that runs the session's turn (steer) or that ran it last, whose
//! host holds the thread's files (compact). Asked anywhere else, a daemon would start a child
//! of its own that knows neither, and a compact there would reset the thread. So the daemon
//! asked passes the request on to that one through the store (`store::asks`) and waits for
//! its answer:
//!
//! ```text
//!  steer/compact ─► served_by ─┬─ here ──────────────────────────► steer_here / compact_here
//!                              └─ node N ─► ask ─ PutAsk (notice a:N:id) ─► N: answer_asked
//!                                   ▲                                      │ (…_here, AnswerAsk)
//!                                   └──── TakeAsk ◄── notice A:me:id ◄─────┘
//! ```
//!
//! An ask waits [`ASK_PATIENCE`] at most: a daemon that died meanwhile does not answer, and
//! the person is told so in one line. Daemons never talk but through the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::app_server::AppServerHandle;
use super::ledger::{AnswerAsk, PutAsk, RecordCompaction, TakeAsk};
use super::shared::Shared;
use crate::engine::EngineKind;
use crate::protocol::{Compacted, CompactedCount, Steered};
use crate::store::sessions::Session;
use crate::store::{asks, daemons, projects, prompts, runs, sessions, sql};

/// Why a steer or a compact was not done, here or on the daemon asked: the library's
/// `CorralError` takes each variant as its own.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Store(String),
    /// The store could not take a write in time; the same call may succeed later.
    #[error("{0}")]
    Locked(String),
}

impl From<crate::actors::ledger::LedgerError> for AskError {
    fn from(error: crate::actors::ledger::LedgerError) -> Self {
        if error.is_transient() {
            return AskError::Locked(error.to_string());
        }
        AskError::Store(error.to_string())
    }
}

impl From<crate::store::StoreError> for AskError {
    fn from(error: crate::store::StoreError) -> Self {
        if error.is_transient() {
            return AskError::Locked(error.to_string());
        }
        AskError::Store(error.to_string())
    }
}

/// How long an ask waits for the asked daemon's answer.
pub const ASK_PATIENCE: Duration = Duration::from_secs(15);

/// What one daemon asks of another, as stored (`asks.request`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "snake_case")]
pub enum Ask {
    Steer { session_id: String, text: String },
    Compact { session_id: String },
}

/// The answer, as stored (`asks.answer`): what the call returned, or why it was refused in
/// the words the asked daemon would have said to the person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
enum Answer {
    Done { result: Value },
    NotFound { message: String },
    Invalid { message: String },
    Failed { message: String },
}

impl Answer {
    fn of(result: Result<Value, AskError>) -> Answer {
        match result {
            Ok(result) => Answer::Done { result },
            Err(AskError::NotFound(message)) => Answer::NotFound { message },
            Err(AskError::Invalid(message)) => Answer::Invalid { message },
            Err(error) => Answer::Failed {
                message: error.to_string(),
            },
        }
    }

    fn into_result(self) -> Result<Value, AskError> {
        match self {
            Answer::Done { result } => Ok(result),
            Answer::NotFound { message } => Err(AskError::NotFound(message)),
            Answer::Invalid { message } => Err(AskError::Invalid(message)),
            Answer::Failed { message } => Err(AskError::Store(message)),
        }
    }
}

/// The asks this daemon waits on, by id: the listener's answer notice wakes the asker.
#[derive(Default)]
pub struct Waiting(Mutex<HashMap<String, oneshot::Sender<()>>>);

impl Waiting {
    fn add(&self, id: &str) -> oneshot::Receiver<()> {
        let (tell, told) = oneshot::channel();
        self.lock().insert(id.to_string(), tell);
        told
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The answer of ask `id` is stored.
    pub fn answered(&self, id: &str) {
        if let Some(tell) = self.lock().remove(id) {
            let _ = tell.send(());
        }
    }

    /// Every waiting asker looks at its row (notices may have been missed).
    pub fn look_again(&self) {
        for (_, tell) in self.lock().drain() {
            let _ = tell.send(());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<()>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn read<T>(shared: &Shared, read: impl FnMut(&sql::Conn) -> sql::Result<T>) -> Result<T, AskError> {
    Ok(shared.readers.read(read)?)
}

/// `turn/steer` on the session's running turn, on the daemon that runs it.
pub async fn steer(shared: &Shared, session_id: &str, text: &str) -> Result<Steered, AskError> {
    if text.trim().is_empty() {
        return Err(AskError::Invalid("the steering text is empty".into()));
    }
    let elsewhere = if shared.coordination.shares_store() {
        read(shared, |c| prompts::busy_prompt(c, session_id))?
            .filter(|prompt| prompt.status == prompts::PromptStatus::Running)
            .and_then(|prompt| prompt.claim)
            .map(|claim| claim.node_id)
            .filter(|node| shared.coordination.is_elsewhere(node))
    } else {
        None
    };
    let ask = Ask::Steer {
        session_id: session_id.to_string(),
        text: text.to_string(),
    };
    match elsewhere {
        Some(node) => ask_of(shared, &node, &ask).await,
        None => steer_here(shared, session_id, text).await,
    }
}

/// Compacts the session's thread on the daemon that ran it last (its host holds the thread).
pub async fn compact(shared: &Shared, session_id: &str) -> Result<Compacted, AskError> {
    let ask = Ask::Compact {
        session_id: session_id.to_string(),
    };
    if !shared.coordination.shares_store() {
        return compact_here(shared, session_id).await;
    }
    let last = read(shared, |c| runs::runs_of_session(c, session_id))?
        .pop()
        .and_then(|run| run.node_id)
        .filter(|node| shared.coordination.is_elsewhere(node));
    let Some(node) = last else {
        return compact_here(shared, session_id).await;
    };
    let daemon = read(shared, daemons::daemons)?
        .into_iter()
        .find(|daemon| daemon.node_id == node);
    match daemon {
        Some(daemon) if daemon.is_live() => ask_of(shared, &node, &ask).await,
        Some(daemon) => Err(AskError::Invalid(format!(
            "the session's thread is on host {} (the daemon of {}), which is not running: \
             compact it once that daemon runs",
            daemon.host, daemon.home
        ))),
        None => Err(AskError::Invalid(format!(
            "the session's thread is with daemon node {node}, which this store does not know"
        ))),
    }
}

/// Asks daemon `node` and waits for its answer, [`ASK_PATIENCE`] at most: the answer of its
/// `steer_here` or `compact_here`, as `T`.
async fn ask_of<T: DeserializeOwned>(
    shared: &Shared,
    node: &str,
    ask: &Ask,
) -> Result<T, AskError> {
    let others = shared
        .coordination
        .among_others()
        .ok_or_else(|| AskError::Invalid("no other daemon to ask".into()))?;
    let id = uuid::Uuid::now_v7().to_string();
    let request = serde_json::to_string(ask).expect("an ask is JSON");
    let told = others.asks.add(&id);
    let put = shared
        .ledger
        .write(PutAsk {
            id: id.clone(),
            to_node: node.to_string(),
            from_node: others.lease.node_id.clone(),
            request,
        })
        .await;
    if let Err(error) = put {
        others.asks.remove(&id);
        return Err(error.into());
    }
    let deadline = tokio::time::Instant::now() + ASK_PATIENCE;
    let mut told = told;
    let answer = loop {
        let woken = tokio::time::timeout_at(deadline, &mut told).await;
        let row = read(shared, |c| asks::ask(c, &id))?;
        match (row.and_then(|row| row.answer), woken) {
            (Some(answer), _) => break Some(answer),
            (None, Err(_elapsed)) => break None,
            // Woken to look again (the listener reconnected), and nothing yet: wait on.
            (None, Ok(_)) => told = others.asks.add(&id),
        }
    };
    others.asks.remove(&id);
    // Taken whatever came of it: an answer given after this finds no row.
    let _ = shared.ledger.write(TakeAsk { id: id.clone() }).await;
    let unreadable =
        |error: serde_json::Error| AskError::Store(format!("the answer of daemon {node}: {error}"));
    match answer {
        Some(answer) => serde_json::from_value(
            serde_json::from_str::<Answer>(&answer)
                .map_err(unreadable)?
                .into_result()?,
        )
        .map_err(unreadable),
        None => Err(AskError::Store(format!(
            "the daemon that holds the session's thread (node {node}) did not answer within {} s",
            ASK_PATIENCE.as_secs()
        ))),
    }
}

/// The ask id of a notice's `<node>:<id>`, when the node is this daemon's.
pub fn addressed_here<'a>(shared: &Shared, payload: &'a str) -> Option<&'a str> {
    let (node, id) = payload.split_once(':')?;
    (shared.coordination.node_id()? == node).then_some(id)
}

/// An ask notice (`<node>:<id>`): answered if it is this daemon's.
pub fn answer_if_here(shared: &Arc<Shared>, payload: &str) {
    let Some(id) = addressed_here(shared, payload) else {
        return;
    };
    let shared = shared.clone();
    let id = id.to_string();
    actix::spawn(async move {
        match read(&shared, |c| asks::ask(c, &id)) {
            Ok(Some(row)) if row.answer.is_none() => answer(&shared, row).await,
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, ask = id, "an ask could not be read"),
        }
    });
}

/// Answers every ask of this daemon not answered yet (its listener reconnected: notices may
/// have been missed), and has its own asks look at their rows.
pub fn answer_unanswered(shared: &Arc<Shared>) {
    let Some(others) = shared.coordination.among_others() else {
        return;
    };
    others.asks.look_again();
    let node = others.lease.node_id.clone();
    let shared = shared.clone();
    actix::spawn(async move {
        match read(&shared, |c| asks::unanswered(c, &node)) {
            Ok(rows) => {
                for row in rows {
                    answer(&shared, row).await;
                }
            }
            Err(error) => tracing::warn!(%error, "the asks of this daemon could not be read"),
        }
    });
}

async fn answer(shared: &Shared, row: asks::AskRow) {
    let result = match serde_json::from_str::<Ask>(&row.request) {
        Ok(ask) => serve_here(shared, ask).await,
        Err(error) => Err(AskError::Invalid(format!(
            "an ask this daemon cannot read: {error}"
        ))),
    };
    let answer = serde_json::to_string(&Answer::of(result)).expect("an answer is JSON");
    let written = shared
        .ledger
        .write(AnswerAsk {
            id: row.id.clone(),
            answer,
        })
        .await;
    if let Err(error) = written {
        tracing::warn!(%error, ask = row.id, from = row.from_node, "an ask's answer was not stored");
    }
}

/// Serves another daemon's ask: its answer is stored as JSON (`asks.answer`).
async fn serve_here(shared: &Shared, ask: Ask) -> Result<Value, AskError> {
    let answer = match ask {
        Ask::Steer { session_id, text } => {
            serde_json::to_value(steer_here(shared, &session_id, &text).await?)
        }
        Ask::Compact { session_id } => {
            serde_json::to_value(compact_here(shared, &session_id).await?)
        }
    };
    Ok(answer.expect("answers are JSON"))
}

/// The app-server of a session's project here, running.
async fn session_app_server(
    shared: &Shared,
    session_id: &str,
) -> Result<(Session, AppServerHandle), AskError> {
    let session = read(shared, |c| sessions::session(c, session_id))?
        .ok_or_else(|| AskError::NotFound(format!("no session '{session_id}'")))?;
    if session.engine != EngineKind::CodexAppServer {
        return Err(AskError::Invalid(format!(
            "session '{session_id}' runs on {}; only codex-app-server sessions can do this",
            session.engine
        )));
    }
    let project_id = session.project_id.clone().unwrap_or_default();
    let project = read(shared, |c| projects::project(c, &project_id))?
        .ok_or_else(|| AskError::NotFound(format!("no project '{project_id}'")))?;
    let program =
        crate::engine::resolve_program(EngineKind::CodexAppServer, &shared.settings().engine_paths)
            .map_err(AskError::Invalid)?;
    let server = shared.app_servers.of(
        &project,
        &program,
        shared.settings().app_server_init_timeout,
    );
    server.ensure_running().await.map_err(AskError::Invalid)?;
    Ok((session, server))
}

async fn steer_here(shared: &Shared, session_id: &str, text: &str) -> Result<Steered, AskError> {
    let (session, server) = session_app_server(shared, session_id).await?;
    let thread = session
        .thread_id
        .ok_or_else(|| AskError::Invalid("the session has no thread yet".into()))?;
    let params = json!({ "threadId": thread, "input": [{ "type": "text", "text": text }] });
    let answer = server
        .call("turn/steer", params)
        .await
        .map_err(|error| AskError::Invalid(error.message))?;
    serde_json::from_value(answer).map_err(|error| {
        AskError::Invalid(format!("the app-server's answer to turn/steer: {error}"))
    })
}

async fn compact_here(shared: &Shared, session_id: &str) -> Result<Compacted, AskError> {
    let (session, server) = session_app_server(shared, session_id).await?;
    let prompts = read(shared, |c| prompts::prompts_of(c, &session.id))?;
    if prompts.iter().any(|p| !p.status.is_final()) {
        return Err(AskError::Invalid(
            "the session has a prompt running or queued; compact it when it is idle".into(),
        ));
    }
    let since = session.compacted_at.unwrap_or(0);
    let compacted: Vec<&prompts::Prompt> = prompts
        .iter()
        .filter(|p| p.status == prompts::PromptStatus::Done && p.finished_at.unwrap_or(0) > since)
        .collect();
    let messages = compacted.len() as i64;
    let characters: i64 = compacted
        .iter()
        .map(|p| {
            (p.text.chars().count() + p.answer.as_deref().unwrap_or("").chars().count()) as i64
        })
        .sum();
    let Some(thread) = session.thread_id.clone() else {
        return Err(AskError::Invalid(
            "the session has no thread to compact".into(),
        ));
    };
    let resumed = server
        .call("thread/resume", json!({ "threadId": thread }))
        .await;
    let answer = match resumed {
        Ok(_) => {
            server
                .call("thread/compact/start", json!({ "threadId": thread }))
                .await
        }
        Err(error) => Err(error),
    };
    let reset = match answer {
        Ok(_) => false,
        Err(error) if error.message.contains("no rollout found") => true,
        Err(error) => return Err(AskError::Invalid(error.message)),
    };
    let recorded = shared
        .ledger
        .write(RecordCompaction {
            session_id: session.id.clone(),
            messages,
            characters,
            reset_thread: reset,
        })
        .await?;
    let note = if reset {
        "the thread's rollout is missing: the thread was reset; the next prompt starts a new one"
    } else {
        "compaction started"
    };
    Ok(Compacted {
        session: recorded.as_ref().map(Into::into),
        compacted: CompactedCount {
            messages,
            characters,
        },
        thread_reset: reset,
        note: note.to_string(),
    })
}
