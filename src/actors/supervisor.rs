//! The supervisor: the registry of session actors, and what they all share.
//!
//! It starts a session's actor the first time the session has work and keeps it (an idle
//! actor is a few hundred bytes; keeping it avoids a stop/start race with the next send). At
//! boot it reconciles what a previous supervisor left: runs marked running are closed as
//! interrupted, their process groups (if still alive, checked by pid *and* start time) are
//! ended, and their sessions' work resumes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use actix::prelude::*;
use tokio::sync::{broadcast, watch};

use super::app_server::{AppServerActor, AppServerState};
use super::ledger::{AppendEvents, CurrentOrNext, LedgerHandle, Recover, SaveAppServer};
use super::session::{CancelPrompt, SessionActor, StartWork};
use super::slots::SlotsHandle;
use crate::process;
use crate::store::settings::Settings;
use crate::store::work::{Event, NewEvent, Project, Prompt, Recovered};
use crate::store::ReaderPool;

/// Every engine child carries its run's id in this variable, so that a child whose pid was
/// never recorded can still be found after a crash.
pub const RUN_ID_ENV: &str = "CORRAL_RUN_ID";

/// What the supervisor and every session actor share.
pub struct Shared {
    /// `CORRAL_HOME`, given to every engine child.
    pub home: PathBuf,
    pub ledger: LedgerHandle,
    pub slots: SlotsHandle,
    pub readers: ReaderPool,
    /// The current settings; replaced whole when one changes.
    settings: RwLock<Arc<Settings>>,
    /// Every stored event, published after its commit (subscribers filter by session).
    pub events: broadcast::Sender<Arc<Published>>,
    /// The exec hosting this supervisor: the default parent of the agents' own commands.
    pub exec_id: Option<String>,
    /// Set once when the daemon shuts down: workers requeue their prompt and stop.
    shutdown: watch::Sender<bool>,
    /// Set when a shutdown begins: running prompts may finish, but no new one starts.
    draining: std::sync::atomic::AtomicBool,
    /// The app-server child of each project that uses one, started on first use.
    app_servers: std::sync::Mutex<HashMap<String, Addr<AppServerActor>>>,
}

/// An event as published to subscribers: the stored event, and its JSON text made once for
/// all of them (ten watchers of a daemon would otherwise serialize every event ten times, on
/// the thread the sessions run on). Derefs to the [`Event`].
#[derive(Debug)]
pub struct Published {
    event: Event,
    json: std::sync::OnceLock<String>,
}

impl Published {
    pub fn new(event: Event) -> Self {
        Published {
            event,
            json: std::sync::OnceLock::new(),
        }
    }

    /// The event as JSON text, serialized on first use.
    pub fn json(&self) -> &str {
        self.json
            .get_or_init(|| serde_json::to_string(&self.event).expect("events serialize"))
    }
}

impl std::ops::Deref for Published {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.event
    }
}

/// How many events a slow subscriber may fall behind before it is told it lagged (it can
/// then read what it missed from the store).
pub const EVENT_CHANNEL: usize = 16_384;

impl Shared {
    pub fn new(
        home: PathBuf,
        ledger: LedgerHandle,
        slots: SlotsHandle,
        readers: ReaderPool,
        settings: Settings,
        exec_id: Option<String>,
    ) -> Self {
        Shared {
            home,
            ledger,
            slots,
            readers,
            settings: RwLock::new(Arc::new(settings)),
            events: broadcast::channel(EVENT_CHANNEL).0,
            exec_id,
            shutdown: watch::channel(false).0,
            draining: std::sync::atomic::AtomicBool::new(false),
            app_servers: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// A receiver that turns true when the supervisor shuts down.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The app-server actor of a project, started on first use. Its state changes are kept
    /// in the store.
    pub fn app_server(&self, project: &Project, program: &std::path::Path) -> Addr<AppServerActor> {
        let mut servers = self
            .app_servers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(addr) = servers.get(&project.id).filter(|addr| addr.connected()) {
            return addr.clone();
        }
        let ledger = self.ledger.clone();
        let project_id = project.id.clone();
        let addr = AppServerActor::new(
            project.id.clone(),
            program.to_path_buf(),
            project.path.clone(),
            self.home.clone(),
            project.full_access && project.kind != "remote",
        )
        .on_change(move |state: AppServerState| {
            let ledger = ledger.clone();
            let project_id = project_id.clone();
            actix::spawn(async move {
                let state = serde_json::to_value(&state).unwrap_or_default();
                let _ = ledger.write(SaveAppServer { project_id, state }).await;
            });
        })
        .start();
        servers.insert(project.id.clone(), addr.clone());
        addr
    }

    /// The live app-server actors (for `status`).
    pub fn app_server_actors(&self) -> Vec<Addr<AppServerActor>> {
        self.app_servers
            .lock()
            .map(|servers| servers.values().cloned().collect())
            .unwrap_or_default()
    }

    /// No new prompt starts from now on (running ones go on).
    pub fn begin_drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Tells every worker to stop: running children are ended and their prompts requeued.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// The settings in effect now.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .map(|settings| settings.clone())
            .unwrap_or_default()
    }

    pub fn replace_settings(&self, settings: Settings) {
        if let Ok(mut current) = self.settings.write() {
            *current = Arc::new(settings);
        }
    }

    /// Applies `write` with the events that describe it in one commit, then publishes them.
    pub async fn write_with_events<W: super::ledger::LedgerWrite>(
        &self,
        write: W,
        events: Vec<NewEvent>,
    ) -> Result<W::Output, super::ledger::LedgerError> {
        let (output, stored) = self
            .ledger
            .write(super::ledger::WithEvents { write, events })
            .await?;
        for event in stored {
            // No subscriber is not an error.
            let _ = self.events.send(Arc::new(Published::new(event)));
        }
        Ok(output)
    }

    /// Stores events and then publishes them. A store error is logged: losing the event
    /// stream must not stop the engine child that produces it.
    pub async fn append_events(&self, events: Vec<NewEvent>) {
        if events.is_empty() {
            return;
        }
        match self.ledger.write(AppendEvents { events }).await {
            Ok(stored) => {
                for event in stored {
                    // No subscriber is not an error.
                    let _ = self.events.send(Arc::new(Published::new(event)));
                }
            }
            Err(error) => tracing::error!(%error, "events not stored"),
        }
    }
}

/// The supervisor actor. Private: see `crate::Corral`.
pub struct Supervisor {
    shared: Arc<Shared>,
    sessions: HashMap<String, Addr<SessionActor>>,
}

impl Supervisor {
    pub fn new(shared: Arc<Shared>) -> Self {
        Supervisor {
            shared,
            sessions: HashMap::new(),
        }
    }

    fn actor(&mut self, session_id: &str) -> Addr<SessionActor> {
        if let Some(addr) = self
            .sessions
            .get(session_id)
            .filter(|addr| addr.connected())
        {
            return addr.clone();
        }
        let addr = SessionActor::new(session_id.to_string(), self.shared.clone()).start();
        self.sessions.insert(session_id.to_string(), addr.clone());
        addr
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

/// Starts (or hands to) the session's worker a prompt that is `running` in the store.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Dispatch(pub Prompt);

impl Handler<Dispatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, Dispatch(prompt): Dispatch, _: &mut Context<Self>) {
        let actor = self.actor(&prompt.session_id);
        actor.do_send(StartWork(prompt));
    }
}

/// Ends a running prompt of a session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRunning {
    pub session_id: String,
    pub prompt_id: String,
}

impl Handler<CancelRunning> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CancelRunning, _: &mut Context<Self>) {
        if let Some(actor) = self.sessions.get(&message.session_id) {
            actor.do_send(CancelPrompt(message.prompt_id));
        }
    }
}

/// How many session actors exist (for status and tests).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountSessions;

impl Handler<CountSessions> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: CountSessions, _: &mut Context<Self>) -> usize {
        self.sessions.len()
    }
}

/// How many session actors have a worker running now.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountWorking;

impl Handler<CountWorking> for Supervisor {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, _: CountWorking, _: &mut Context<Self>) -> Self::Result {
        let asks: Vec<_> = self
            .sessions
            .values()
            .map(|actor| actor.send(super::session::IsWorking))
            .collect();
        Box::pin(async move {
            let mut working = 0;
            for ask in asks {
                if matches!(ask.await, Ok(true)) {
                    working += 1;
                }
            }
            working
        })
    }
}

/// Boot reconciliation; replies with what was found.
#[derive(Message)]
#[rtype(result = "Result<Recovered, String>")]
pub struct Boot;

impl Handler<Boot> for Supervisor {
    type Result = ResponseActFuture<Self, Result<Recovered, String>>;

    fn handle(&mut self, _: Boot, _: &mut Context<Self>) -> Self::Result {
        let shared = self.shared.clone();
        Box::pin(
            async move {
                let recovered = shared
                    .ledger
                    .write(Recover {})
                    .await
                    .map_err(|error| error.to_string())?;
                let grace = shared.settings().cancel_grace;
                for (run_id, pid, start) in &recovered.interrupted_runs {
                    match (*pid, start.map(|start| start as u64)) {
                        // A child of a supervisor that died: end its group (never a recycled
                        // pid: the start time matched) before its prompt runs again, so that
                        // one thread is never driven by two children at once.
                        (Some(pid), start) if process::is_alive(pid as u32, start) => {
                            process::end_orphan_group(pid as i32, grace).await;
                        }
                        (Some(_), _) => {}
                        // Killed between spawn and recording the pid: find it by its run id.
                        (None, _) => {
                            for pid in process::find_by_env(RUN_ID_ENV, run_id) {
                                process::end_orphan_group(pid, grace).await;
                            }
                        }
                    }
                }
                // App-server children of a daemon that died.
                let stored = shared
                    .readers
                    .read(crate::store::work::app_servers)
                    .unwrap_or_default();
                for state in stored {
                    let (Some(pid), start) = (state["pid"].as_u64(), state["pid_start"].as_u64())
                    else {
                        continue;
                    };
                    if process::is_alive(pid as u32, start) {
                        process::end_orphan_group(pid as i32, grace).await;
                    }
                }
                let mut prompts = Vec::new();
                for session_id in &recovered.sessions {
                    let next = shared
                        .ledger
                        .write(CurrentOrNext {
                            session_id: session_id.clone(),
                        })
                        .await
                        .map_err(|error| error.to_string())?;
                    prompts.extend(next);
                }
                Ok::<_, String>((recovered, prompts))
            }
            .into_actor(self)
            .map(|result, supervisor, _| {
                let (recovered, prompts) = result?;
                for prompt in prompts {
                    let actor = supervisor.actor(&prompt.session_id);
                    actor.do_send(StartWork(prompt));
                }
                Ok(recovered)
            }),
        )
    }
}
