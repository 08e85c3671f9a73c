//! The daemon's events on their way to whoever follows them ([`Publisher`]): every stored
//! event is published once, after its commit, to the subscribers (watchers, the dashboard,
//! `connect`, the relay of other daemons' events), serialized once for all of them
//! ([`Published`]). Events that no session's worker tells are stored here too
//! ([`Publisher::append_events`]), and the slot waits announced at once are stored together
//! ([`Publisher::announce_waiting`]). What it writes never drops for a store another program
//! locks: a write given up past `store.lock_timeout_ms` is made again, until stored or shut
//! down.

use std::sync::{Arc, OnceLock};

use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::ledger::{AppendEvents, LedgerError, LedgerHandle, Unwritten};
use super::slots::SlotsHandle;
use crate::events::Payload;
use crate::store::events::{Event, NewEvent};

/// Every stored event, published after its commit to whoever follows (subscribers filter by
/// session). What the relay of other daemons' events is given.
#[derive(Clone)]
pub struct Broadcast(broadcast::Sender<Arc<Published>>);

impl Broadcast {
    /// A broadcast on which a subscriber may fall `capacity` events behind before it is told
    /// it lagged ([`EVENT_CHANNEL`] for the daemon's).
    pub fn with_capacity(capacity: usize) -> Self {
        Broadcast(broadcast::channel(capacity).0)
    }

    /// Every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.0.subscribe()
    }

    /// Whether anyone follows the events now.
    pub fn has_subscribers(&self) -> bool {
        self.0.receiver_count() > 0
    }

    /// Publishes stored events (no subscriber is not an error).
    pub fn publish(&self, stored: Vec<Event>) {
        for event in stored {
            let _ = self.0.send(Arc::new(Published::new(event)));
        }
    }
}

/// Stores and publishes the daemon's events; cloned into every part that tells one.
#[derive(Clone)]
pub struct Publisher {
    ledger: LedgerHandle,
    slots: SlotsHandle,
    sender: Broadcast,
    /// The announcer of slot waits ([`Publisher::announce_waiting`]), started on first use.
    announcer: Arc<OnceLock<mpsc::UnboundedSender<Announcement>>>,
    /// Turns true when the supervisor shuts down: a kept write is not made again after it.
    shutdown: watch::Receiver<bool>,
}

impl Publisher {
    pub fn new(ledger: LedgerHandle, slots: SlotsHandle, shutdown: watch::Receiver<bool>) -> Self {
        Publisher {
            ledger,
            slots,
            sender: Broadcast::with_capacity(EVENT_CHANNEL),
            announcer: Arc::new(OnceLock::new()),
            shutdown,
        }
    }

    /// Every event stored from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.sender.subscribe()
    }

    /// The broadcast the events are published on.
    pub fn broadcast(&self) -> &Broadcast {
        &self.sender
    }

    /// Publishes stored events to the daemon's subscribers.
    pub fn publish(&self, stored: Vec<Event>) {
        self.sender.publish(stored);
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
                self.sender.clone(),
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
                    self.sender.publish(stored.clone());
                    return Ok(stored);
                }
                Err(Unwritten {
                    error,
                    write: Some(kept),
                }) if error.is_transient() && !*self.shutdown.borrow() => {
                    tracing::warn!(%error, "events kept: trying their write again");
                    write = kept;
                }
                Err(unwritten) => return Err(unwritten.error),
            }
        }
    }
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

/// One worker's `slot.waiting` announcement ([`Publisher::announce_waiting`]).
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
    published: Broadcast,
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
                    published.publish(stored);
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
                    published.publish(stored);
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
