//! What the supervisor, the session actors, the claimer and the ask waiter share
//! ([`Shared`]): the ledger's and the slot manager's handles, the readers, the settings, the
//! event broadcast and the app-server children, with the life cycle ([`Life`]) and the
//! coordination with other daemons ([`Coordination`]) as parts of their own. Kept apart from
//! the supervisor so that the actors it starts depend on what they share, not on the
//! supervisor.
//!
//! What it writes for others never drops for a store another program locks: the events no
//! session's worker tells ([`Shared::append_events`]), the slot waits announced together
//! ([`Shared::announce_waiting`]) and the app-server children's states
//! (`keep_app_server_state`) are written again past `store.lock_timeout_ms`, until stored or
//! shut down.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::app_server::{AppServerActor, AppServerHandle, AppServerState};
use super::coordination::{Alone, AmongOthers, Coordination};
use super::ledger::{AppendEvents, LedgerError, LedgerHandle, SaveAppServer, Unwritten};
use super::life::Life;
use super::slots::{SlotLimits, SlotsHandle};
use crate::store::events::{Event, NewEvent};
use crate::store::projects::Project;
use crate::store::settings::{Settings, DEFAULT_SLOTS_PER_ENGINE};
use crate::store::{processes, ReaderPool};

/// What the supervisor and every session actor share: the handles of the ledger and the slot
/// manager, the readers, the settings, the event broadcast, and two parts with names of
/// their own: the life cycle ([`Life`]) and the coordination with other daemons
/// ([`Coordination`]).
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
    /// Running, draining, shut down; and how many workers run.
    pub life: Life,
    /// Alone on the store, or among other daemons under a lease.
    pub coordination: Box<dyn Coordination>,
    /// The app-server child of each project that uses one, started on first use.
    app_servers: std::sync::Mutex<HashMap<String, AppServerHandle>>,
    /// The announcer of slot waits ([`Shared::announce_waiting`]), started on first use.
    announcer: std::sync::OnceLock<mpsc::UnboundedSender<Announcement>>,
    /// The `git` worktree isolation uses ([`Shared::git`]): found once, looked for again
    /// after a failure (git installed while the daemon runs).
    git: tokio::sync::Mutex<Option<crate::git::Git>>,
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
    /// `lease`: this daemon's on a shared store (`None`: the store's only daemon).
    pub fn new(
        home: PathBuf,
        ledger: LedgerHandle,
        slots: SlotsHandle,
        readers: ReaderPool,
        settings: Settings,
        exec_id: Option<String>,
        lease: Option<Arc<crate::lease::holder::Lease>>,
    ) -> Self {
        let life = Life::default();
        let coordination: Box<dyn Coordination> = match lease {
            Some(lease) => Box::new(AmongOthers::new(lease, life.watch_working())),
            None => Box::new(Alone),
        };
        Shared {
            home,
            ledger,
            slots,
            readers,
            settings: RwLock::new(Arc::new(settings)),
            events: broadcast::channel(EVENT_CHANNEL).0,
            exec_id,
            life,
            coordination,
            app_servers: std::sync::Mutex::new(HashMap::new()),
            announcer: std::sync::OnceLock::new(),
            git: tokio::sync::Mutex::new(None),
        }
    }

    /// The `git` on PATH (at least 2.17), found on first use and kept; a failure is not kept,
    /// so the next call looks again.
    pub(crate) async fn git(&self) -> Result<crate::git::Git, crate::git::GitError> {
        let mut found = self.git.lock().await;
        if let Some(git) = found.as_ref() {
            return Ok(git.clone());
        }
        let git = crate::git::Git::detect().await?;
        *found = Some(git.clone());
        Ok(git)
    }

    /// The app-server actor of a project, started on first use. Its state changes are kept
    /// in the store.
    pub fn app_server(&self, project: &Project, program: &std::path::Path) -> AppServerHandle {
        let mut servers = self
            .app_servers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(server) = servers.get(&project.id).filter(|server| server.connected()) {
            // The path in the settings now: a change reaches the next child.
            server.use_program(program.to_path_buf());
            return server.clone();
        }
        let ledger = self.ledger.clone();
        let project_id = project.id.clone();
        // Its history goes on from what the last daemon stored (restarts, recent events).
        let stored = self
            .readers
            .read(processes::app_servers)
            .unwrap_or_default()
            .into_iter()
            .find(|state| state["project_id"].as_str() == Some(project.id.as_str()));
        let actor = AppServerActor::new(
            project.id.clone(),
            program.to_path_buf(),
            project.path.clone(),
            self.home.clone(),
            project.full_access && project.kind != "remote",
        )
        .init_timeout(self.settings().app_server_init_timeout)
        .guarded_by(self.coordination.guard_mark());
        let actor = match &stored {
            Some(stored) => actor.resume_from(stored),
            None => actor,
        };
        let (latest, states) = watch::channel(None);
        actix::spawn(keep_app_server_state(
            ledger,
            project_id,
            self.coordination.node_id().map(str::to_string),
            states,
            self.life.shutdown_signal(),
        ));
        let server = AppServerHandle::start(actor.on_change(move |state: AppServerState| {
            latest.send_replace(Some(state));
        }));
        servers.insert(project.id.clone(), server.clone());
        server
    }

    /// The live app-server actors (for `status`).
    pub fn app_server_actors(&self) -> Vec<AppServerHandle> {
        self.app_servers
            .lock()
            .map(|servers| servers.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The settings in effect now.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .map(|settings| settings.clone())
            .unwrap_or_default()
    }

    /// Reads the settings from the store and puts them in effect, slot limits included: after
    /// a change here, or told by another daemon of a shared store that one changed there.
    pub async fn reload_settings(&self) -> Result<(), String> {
        let settings = self
            .readers
            .read(Settings::load)
            .map_err(|error| error.to_string())?;
        let limits = slot_limits(&settings);
        self.replace_settings(settings);
        self.slots
            .set_limits(limits)
            .await
            .map_err(|error| error.to_string())
    }

    pub fn replace_settings(&self, settings: Settings) {
        self.coordination.set_lease_length(settings.store_lease);
        if let Ok(mut current) = self.settings.write() {
            *current = Arc::new(settings);
        }
    }

    /// Stores a worker's `slot.waiting` announcement: `events` are its deferred events with
    /// the `slot.waiting` event last, whose `held_by` is filled in here. Announcements made
    /// at once are stored together: their blockers asked of the slot manager in one message
    /// and their events written in one ledger write, published after it (a boot resuming
    /// 2,000 waiting sessions has them all announce 20 ms in; one by one they would hold up
    /// the daemon's first answers). Returns once they are stored; an error hands back the
    /// events not stored (a store locked past `store.lock_timeout_ms`), for the worker to
    /// keep deferred, in order.
    pub async fn announce_waiting(&self, events: Vec<NewEvent>) -> Result<(), Vec<NewEvent>> {
        let Some(session_id) = events.last().map(|event| event.session_id.clone()) else {
            return Ok(());
        };
        let announcer = self.announcer.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            actix::spawn(announce(
                self.ledger.clone(),
                self.slots.clone(),
                self.events.clone(),
                receiver,
            ));
            sender
        });
        let (reply, answer) = oneshot::channel();
        let announcement = Announcement {
            session_id,
            events,
            reply,
        };
        if let Err(mpsc::error::SendError(announcement)) = announcer.send(announcement) {
            return Err(announcement.events);
        }
        // No answer: the announcer stopped with the system; nothing is left to keep them.
        answer.await.unwrap_or(Ok(()))
    }

    /// Stores events that no session's worker tells (a worker keeps its own, in order with
    /// its run: `session::try_store_events`) and publishes them. Nothing is dropped for a
    /// store another program locks: the ledger waits up to `store.lock_timeout_ms`, and a
    /// write it gave up unapplied is made again (each try waits that long, so this does not
    /// spin), until it commits or the supervisor shuts down. An error means the events are
    /// not stored: the shutdown came first, the ledger stopped, or the write failed (an
    /// unknown session).
    pub async fn append_events(&self, events: Vec<NewEvent>) -> Result<Vec<Event>, LedgerError> {
        let mut write = AppendEvents { events };
        loop {
            match self.ledger.write_keeping(write).await {
                Ok(stored) => {
                    for event in &stored {
                        // No subscriber is not an error.
                        let _ = self.events.send(Arc::new(Published::new(event.clone())));
                    }
                    return Ok(stored);
                }
                Err(Unwritten {
                    error,
                    write: Some(kept),
                }) if error.is_transient() && !self.life.is_shut_down() => {
                    tracing::warn!(%error, "events kept: trying their write again");
                    write = kept;
                }
                Err(unwritten) => return Err(unwritten.error),
            }
        }
    }
}

impl Shared {
    /// Publishes stored events to the daemon's subscribers.
    pub fn publish(&self, stored: Vec<Event>) {
        publish(&self.events, stored);
    }
}

/// The slot manager's limits under these settings.
pub(crate) fn slot_limits(settings: &Settings) -> SlotLimits {
    SlotLimits {
        per_engine: settings.slots.clone(),
        default_per_engine: DEFAULT_SLOTS_PER_ENGINE,
        total: settings.slots_total,
    }
}

/// One worker's `slot.waiting` announcement ([`Shared::announce_waiting`]).
struct Announcement {
    session_id: String,
    /// Its deferred events, then the `slot.waiting` event.
    events: Vec<NewEvent>,
    /// `Err`: the events that were not stored, handed back.
    reply: oneshot::Sender<Result<(), Vec<NewEvent>>>,
}

/// The most announcements stored in one write.
const ANNOUNCE_BATCH: usize = 4_096;

/// The announcer: takes every announcement waiting now, asks the slot manager what blocks
/// each (in one message), stores all their events in one write and answers each worker. A
/// write that fails for another reason than a lock (a session gone meanwhile) is made again
/// one announcement at a time, so that one session's failure costs no other its events.
async fn announce(
    ledger: LedgerHandle,
    slots: SlotsHandle,
    published: broadcast::Sender<Arc<Published>>,
    mut announcements: mpsc::UnboundedReceiver<Announcement>,
) {
    let mut batch = Vec::new();
    while announcements.recv_many(&mut batch, ANNOUNCE_BATCH).await > 0 {
        let sessions = batch.iter().map(|a| a.session_id.clone()).collect();
        let blockers = slots.blockers(sessions).await.unwrap_or_default();
        for (announcement, blocker) in batch.iter_mut().zip(blockers) {
            if let Some(waiting) = announcement.events.last_mut() {
                // In words too: the session's reason while it waits (`store::phases`).
                if let Some(blocker) = &blocker {
                    let project = waiting.payload["project"]
                        .as_str()
                        .unwrap_or("?")
                        .to_string();
                    waiting.payload["why"] = blocker.describe(&project).into();
                }
                waiting.payload["held_by"] = serde_json::to_value(blocker).unwrap_or_default();
            }
        }
        if batch.len() > 1 {
            let events = batch.iter().flat_map(|a| a.events.clone()).collect();
            match ledger.write_keeping(AppendEvents { events }).await {
                Ok(stored) => {
                    publish(&published, stored);
                    for announcement in batch.drain(..) {
                        let _ = announcement.reply.send(Ok(()));
                    }
                    continue;
                }
                Err(Unwritten {
                    error,
                    write: Some(_),
                }) if error.is_transient() => {
                    // Never ran: every worker keeps its own, in order.
                    for announcement in batch.drain(..) {
                        let _ = announcement.reply.send(Err(announcement.events));
                    }
                    continue;
                }
                Err(unwritten) => {
                    tracing::warn!(error = %unwritten.error, "slot announcements stored one by one");
                }
            }
        }
        for announcement in batch.drain(..) {
            let Announcement { events, reply, .. } = announcement;
            let answer = match ledger.write_keeping(AppendEvents { events }).await {
                Ok(stored) => {
                    publish(&published, stored);
                    Ok(())
                }
                Err(Unwritten {
                    write: Some(AppendEvents { events }),
                    ..
                }) => Err(events),
                Err(Unwritten { error, write: None }) => {
                    tracing::error!(%error, "events not stored");
                    Ok(())
                }
            };
            let _ = reply.send(answer);
        }
    }
}

/// Publishes stored events (no subscriber is not an error).
fn publish(published: &broadcast::Sender<Arc<Published>>, stored: Vec<Event>) {
    for event in stored {
        let _ = published.send(Arc::new(Published::new(event)));
    }
}

/// Stores an app-server child's state after each change, in order, and never drops one for a
/// locked store: one write at a time per project, the newest state replacing any not yet
/// stored (each is whole, so the last one stored is the truth), and a write the ledger gave
/// up past `store.lock_timeout_ms` made again with the newest state, until the shutdown.
/// Ends with the actor (its sender).
async fn keep_app_server_state(
    ledger: LedgerHandle,
    project_id: String,
    node_id: Option<String>,
    mut states: watch::Receiver<Option<AppServerState>>,
    shutdown: watch::Receiver<bool>,
) {
    while states.changed().await.is_ok() {
        loop {
            let Some(state) = states.borrow_and_update().clone() else {
                break;
            };
            let state = state.to_json(node_id.as_deref());
            let project_id = project_id.clone();
            match ledger.write(SaveAppServer { project_id, state }).await {
                Ok(()) => break,
                Err(error) if error.is_transient() && !*shutdown.borrow() => {
                    tracing::warn!(%error, "app-server state kept: trying its write again");
                }
                Err(error) => {
                    tracing::error!(%error, "app-server state not stored");
                    break;
                }
            }
        }
    }
}
