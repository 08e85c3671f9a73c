//! The event relay: other daemons' events, published live into this daemon's broadcast.
//!
//! With several daemons on one PostgreSQL store, a session runs on one daemon but may be
//! watched through any: `watch --follow`, `attach`, the socket's `events.subscribe` and the
//! dashboard all follow the daemon's [`Broadcast`](crate::actors::publisher::Broadcast),
//! which only carries what this daemon stored itself. Each daemon's ledger says, at the commit of a
//! batch that stored events, which feed numbers they took ([`Notice::Events`], from
//! [`crate::store::listen`]); the relay reads those events from the store and publishes them
//! here, in feed order, so the streams (`crate::daemon::events`) see them as soon as the
//! other daemon's own do.
//!
//! - [`EventRelay::on_events`]: one batch of another daemon's (this node's own are already
//!   published by whoever stored them, and ignored; with nobody subscribed, nothing is read).
//! - [`EventRelay::on_reconnected`]: the listener was away (or just started): every event
//!   after the last one relayed, up to the store's last, this node's own included. A stream
//!   drops what it was given before by its cursor, so a repeat costs only its sending, and a
//!   missed notification never leaves a stream waiting.
//! - [`EventRelay::run`]: the loop over a [`Listener`](crate::store::listen::Listener)'s
//!   notices; work and daemon notices are handed to the claim code.
//!
//! Reads are synchronous, short, paged reads on the reader pool, like every reader of the
//! daemon; [`EventRelay::run`] must therefore not run on the store runtime's own thread. A
//! read that fails is logged and skipped: the streams read the store for any gap they meet,
//! so a lost page delays nothing past the next event.

use tokio::sync::mpsc;

use crate::actors::publisher::Broadcast;
use crate::store::events;
use crate::store::listen::Notice;
use crate::store::ReaderPool;

/// Events read per page: small, so that a reader connection is held briefly and a catch-up
/// after a long absence interleaves with the daemon's other reads.
pub const RELAY_PAGE: usize = 256;

/// Publishes other daemons' stored events into this daemon's broadcast.
pub struct EventRelay {
    /// This daemon's node: its own batches' notices are ignored (published at their commit).
    node_id: String,
    /// The highest feed number relayed (or known not to need relaying): notifications arrive
    /// in commit order, so a batch at or below it was published already.
    published: i64,
    /// The daemon's readers (its own pool: reads here never wait for a session's).
    readers: ReaderPool,
    /// What the streams follow.
    events: Broadcast,
}

impl EventRelay {
    /// A relay for daemon `node_id`, publishing into `events`. `start_at`: the feed number up
    /// to which nothing needs relaying (the store's `last_feed_seq` when the daemon starts:
    /// a stream replays older events from the store).
    pub fn new(node_id: String, readers: ReaderPool, events: Broadcast, start_at: i64) -> Self {
        EventRelay {
            node_id,
            published: start_at,
            readers,
            events,
        }
    }

    /// The highest feed number relayed so far.
    #[cfg(any(test, feature = "testkit"))]
    pub fn published(&self) -> i64 {
        self.published
    }

    /// Daemon `node_id` stored the events `first..=last`: unless they are this daemon's own,
    /// they are read and published in feed order (what was published already, up to
    /// [`EventRelay::published`], is not read again).
    pub fn on_events(&mut self, node_id: &str, first: i64, last: i64) {
        if node_id == self.node_id || last <= self.published {
            return;
        }
        if !self.events.has_subscribers() {
            // Nobody follows the broadcast: nothing to read. Whoever subscribes later reads
            // the store after subscribing (a stream from its cursor, a prompt's waiter its
            // row), so what is skipped here is never missed.
            self.published = last;
            return;
        }
        self.relay((first - 1).max(self.published), last);
    }

    /// The notifications were interrupted (or just began): everything stored after the last
    /// event relayed, up to the store's last now, is published, this node's own events too
    /// (a stream drops a repeat by its cursor; telling them apart would need a column the
    /// events do not have).
    pub fn on_reconnected(&mut self) {
        let last = match self.readers.read(events::last_feed_seq) {
            Ok(last) => last,
            Err(error) => {
                tracing::warn!(%error, "the event relay could not read the store's last event");
                return;
            }
        };
        if last > self.published {
            self.relay(self.published, last);
        }
    }

    /// Publishes the stored events numbered in `(after, last]`, a page at a time, and moves
    /// [`EventRelay::published`] to the last one published.
    fn relay(&mut self, mut after: i64, last: i64) {
        while after < last {
            let read = self
                .readers
                .read(|connection| events::feed_between(connection, after, last + 1, RELAY_PAGE));
            let page = match read {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, after, last, "the event relay could not read events; the streams will read them");
                    return;
                }
            };
            let full = page.len() == RELAY_PAGE;
            if let Some(event) = page.last() {
                after = event.feed_seq;
            }
            self.events.publish(page);
            self.published = self.published.max(after);
            if !full {
                // Fewer than asked: nothing more is stored up to `last` (a batch rolled back
                // after all, or numbers a notice promised that are not there).
                break;
            }
        }
        self.published = self.published.max(last);
    }

    /// Follows the listener's notices until its channel closes: events are relayed;
    /// [`Notice::Reconnected`] is caught up on, then handed to `work` too; [`Notice::Work`]
    /// and [`Notice::Daemons`] are handed to `work` (the claim code).
    pub async fn run(
        mut self,
        mut notices: mpsc::UnboundedReceiver<Notice>,
        work: impl Fn(Notice),
    ) {
        while let Some(notice) = notices.recv().await {
            match notice {
                Notice::Events {
                    node_id,
                    first,
                    last,
                } => self.on_events(&node_id, first, last),
                Notice::Reconnected => {
                    self.on_reconnected();
                    work(Notice::Reconnected);
                }
                other => work(other),
            }
        }
    }
}
