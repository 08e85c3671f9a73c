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
//! ([`AppServers`]) are written again past `store.lock_timeout_ms`, until stored or shut
//! down.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, mpsc, oneshot};

use super::app_servers::AppServers;
use super::coordination::{Alone, AmongOthers, Coordination};
use super::ledger::{AppendEvents, LedgerError, LedgerHandle, Unwritten};
use super::life::Life;
use super::slots::{SlotLimits, SlotsHandle};
use crate::events::Payload;
use crate::store::events::{Event, NewEvent};
use crate::store::settings::{Settings, DEFAULT_SLOTS_PER_ENGINE};
use crate::store::ReaderPool;

/// What the supervisor and every session actor share: the handles of the ledger and the slot
/// manager, the readers, the settings, the event broadcast, and two parts with names of
/// their own: the life cycle ([`Life`]) and the coordination with other daemons
/// ([`Coordination`]).
pub struct Shared {
    /// `CORRAL_HOME`, given to every engine child.
    pub home: PathBuf,
    pub ledger: LedgerHandle,
    pub slots: SlotsHandle,
    pub readers: Arc<ReaderPool>,
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
    pub app_servers: AppServers,
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
        let readers = Arc::new(readers);
        let app_servers = AppServers::new(
            home.clone(),
            ledger.clone(),
            readers.clone(),
            coordination.node_id().map(str::to_string),
            coordination.guard_mark().map(str::to_string),
            life.shutdown_signal(),
        );
        Shared {
            app_servers,
            home,
            ledger,
            slots,
            readers,
            settings: RwLock::new(Arc::new(settings)),
            events: broadcast::channel(EVENT_CHANNEL).0,
            exec_id,
            life,
            coordination,
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
            let Some(waiting) = announcement.events.last_mut() else {
                continue;
            };
            if let Payload::SlotWaiting(mut told) = waiting.payload() {
                // In words too: the session's reason while it waits (`store::phases`).
                if let Some(blocker) = &blocker {
                    told.why = Some(blocker.describe(&told.project));
                }
                told.held_by = serde_json::to_value(blocker).unwrap_or_default();
                waiting.payload = Payload::SlotWaiting(told).to_value();
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
