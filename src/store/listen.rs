//! Notifications from the shared store: what the other daemons on one PostgreSQL database
//! tell each other, through `LISTEN`/`NOTIFY` (the contract of issue 14).
//!
//! - [`Notice`]: one notification, parsed from its channel and payload ([`Notice::parse`]);
//!   the channel names ([`EVENTS`], [`WORK`], [`DAEMONS`]) and [`events_payload`], so the
//!   sender and this parser agree on one text.
//! - [`Listener`]: one dedicated connection that `LISTEN`s on the three channels and hands
//!   each notification to a channel of [`Notice`]s. It is driven on the store runtime
//!   ([`super::postgres`]), reading the connection's messages with
//!   `Connection::poll_message` (the only way tokio-postgres hands out notifications); it
//!   never blocks that thread. When the connection ends it connects again, backing off 50 ms
//!   doubling to 2 s, and says [`Notice::Reconnected`] once it listens again: what was
//!   committed meanwhile is read from the store by the consumer. Dropping the `Listener` ends
//!   its task and closes the connection.
//! - [`notify`]: `pg_notify` inside the caller's transaction, for the ledger: PostgreSQL
//!   delivers it at commit, in commit order, and never for a transaction rolled back.
//!
//! Consumers: `crate::actors::relay` publishes other daemons' events into this daemon's
//! broadcast; the claim code takes [`Notice::Work`] and [`Notice::Daemons`].

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use super::location::PgUrl;
use super::sql::{self, args, Conn};

/// A committed ledger batch stored events: payload `<node_id>:<first feed_seq>:<last>`.
pub const EVENTS: &str = "corral_events";
/// A prompt some daemon may claim was queued (`q`), or prompts were rescued (`r`).
pub const WORK: &str = "corral_work";
/// A daemon registered or stopped: payload its node id.
pub const DAEMONS: &str = "corral_daemons";

/// What the listener's connection runs each time it is made (one round trip).
const LISTEN: &str = "LISTEN corral_events; LISTEN corral_work; LISTEN corral_daemons";

/// The first wait before connecting again; doubled after each failure, up to [`MAX_BACKOFF`].
/// Short: a backend ended by an administrator or a failover is back in milliseconds, and the
/// streams of other daemons' sessions stall until then.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two tries: a server that is down is not hammered, and one that
/// comes back is listened to again within 2 s.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One notification from the shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Daemon `node_id` committed a batch whose events are exactly the feed numbers
    /// `first..=last` (batches are serialized by the write lock, so the range has no one
    /// else's event in it).
    Events {
        node_id: String,
        first: i64,
        last: i64,
    },
    /// `corral_work`'s payload, as sent (`q`: a prompt was queued; `r`: prompts were rescued
    /// from a dead daemon). Passed on whole: the claim code decides what a letter means.
    Work(String),
    /// `corral_daemons`: this daemon registered or stopped.
    Daemons(String),
    /// The listener listens (again) on a new connection. Sent after the first `LISTEN` too:
    /// whatever was committed before it took effect was never notified here, so the consumer
    /// reads the store for what it may have missed. Always sent before any notification the
    /// new connection brings.
    Reconnected,
}

impl Notice {
    /// The notice a notification on `channel` with `payload` says; `None` for a payload that
    /// does not parse (or a channel this listener does not know).
    pub fn parse(channel: &str, payload: &str) -> Option<Notice> {
        match channel {
            EVENTS => {
                // From the right: a node id is a UUID, but a colon in it would not move the
                // numbers.
                let mut parts = payload.rsplitn(3, ':');
                let last = parts.next()?.parse::<i64>().ok()?;
                let first = parts.next()?.parse::<i64>().ok()?;
                let node_id = parts.next()?;
                if node_id.is_empty() || first < 1 || first > last {
                    return None;
                }
                Some(Notice::Events {
                    node_id: node_id.to_string(),
                    first,
                    last,
                })
            }
            WORK if !payload.is_empty() => Some(Notice::Work(payload.to_string())),
            DAEMONS if !payload.is_empty() => Some(Notice::Daemons(payload.to_string())),
            _ => None,
        }
    }
}

/// The payload of [`EVENTS`] for a batch of `node_id` that stored feed numbers
/// `first..=last`.
pub fn events_payload(node_id: &str, first: i64, last: i64) -> String {
    format!("{node_id}:{first}:{last}")
}

/// Sends `payload` on `channel` through `conn` (PostgreSQL only: the caller checks
/// [`Conn::dialect`]). Inside a transaction it is delivered when that commits, and dropped if
/// it rolls back; listeners get notifications in commit order.
pub fn notify(conn: &Conn, channel: &str, payload: &str) -> sql::Result<()> {
    conn.run_later("SELECT pg_notify(?1, ?2)", args![channel, payload])
}

/// The listening connection's task, on the store runtime; ended when this is dropped.
pub struct Listener {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Aborting drops the task's future, with its client and connection: the socket
        // closes and the server ends the backend (and its LISTENs).
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening on the database at `url` (the URL's own configuration: timeouts,
    /// keepalives, application name). Returns at once; the first notice is
    /// [`Notice::Reconnected`], once `LISTEN` took effect. The task also ends when the
    /// receiver is dropped.
    pub fn start(url: &PgUrl) -> (Listener, mpsc::UnboundedReceiver<Notice>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let config = url.config();
        let target = url.to_string();
        let task = super::postgres::store_runtime().spawn(listen(config, target, sender));
        (Listener { task }, receiver)
    }
}

/// How one connection of the listener ended.
enum Ended {
    /// Nobody takes notices any more: the task ends.
    ReceiverGone,
    /// The connection could not be made, or ended; `listened`: it had listened (the backoff
    /// starts again from its first step).
    Lost { listened: bool, why: String },
}

/// The listener's task: a connection at a time, each made again after a backoff.
async fn listen(
    config: tokio_postgres::Config,
    target: String,
    sender: mpsc::UnboundedSender<Notice>,
) {
    let mut backoff = FIRST_BACKOFF;
    // Whether the last try failed too: a server that stays away is said once, not every 2 s.
    let mut failing = false;
    loop {
        match connection(&config, &sender).await {
            Ended::ReceiverGone => return,
            Ended::Lost { listened, why } => {
                if listened {
                    backoff = FIRST_BACKOFF;
                    failing = false;
                }
                if failing {
                    tracing::debug!(store = %target, %why, "the store's notifications: still no connection");
                } else {
                    tracing::warn!(store = %target, %why, "the store's notifications stopped; connecting again");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = sender.closed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: connect, `LISTEN`, then pass each notification on until it ends.
async fn connection(
    config: &tokio_postgres::Config,
    sender: &mpsc::UnboundedSender<Notice>,
) -> Ended {
    let lost = |listened: bool, why: String| Ended::Lost { listened, why };
    let (client, mut connection) = tokio::select! {
        connected = config.connect(NoTls) => match connected {
            Ok(pair) => pair,
            Err(error) => return lost(false, sql::postgres_message(&error)),
        },
        () = sender.closed() => return Ended::ReceiverGone,
    };
    // The client's query only moves while the connection is polled: both in one loop.
    let listen = client.batch_execute(LISTEN);
    tokio::pin!(listen);
    let mut listening = false;
    // Notifications read in the same poll as LISTEN's answer, before its future is seen
    // done: held, so that `Reconnected` comes first (a consumer catches up from there).
    let mut early = Vec::new();
    loop {
        tokio::select! {
            biased;
            listened = &mut listen, if !listening => match listened {
                Ok(()) => {
                    listening = true;
                    for notice in std::iter::once(Notice::Reconnected).chain(early.drain(..)) {
                        if sender.send(notice).is_err() {
                            return Ended::ReceiverGone;
                        }
                    }
                }
                Err(error) => return lost(false, sql::postgres_message(&error)),
            },
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    let (channel, payload) = (notification.channel(), notification.payload());
                    match Notice::parse(channel, payload) {
                        Some(notice) if listening => {
                            if sender.send(notice).is_err() {
                                return Ended::ReceiverGone;
                            }
                        }
                        Some(notice) => early.push(notice),
                        None => tracing::warn!(channel, payload, "a store notification that does not parse; dropped"),
                    }
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    tracing::debug!(message = notice.message(), "the store's notification connection: a notice");
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return lost(listening, sql::postgres_message(&error)),
                None => return lost(listening, "the server closed the connection".into()),
            },
            () = sender.closed() => return Ended::ReceiverGone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_or_are_refused() {
        let events = |node: &str, first, last| Notice::Events {
            node_id: node.into(),
            first,
            last,
        };
        assert_eq!(Notice::parse(EVENTS, "n-1:3:7"), Some(events("n-1", 3, 7)));
        assert_eq!(Notice::parse(EVENTS, "a:b:5:5"), Some(events("a:b", 5, 5)));
        assert_eq!(
            Notice::parse(EVENTS, &events_payload("node", 1, 2)),
            Some(events("node", 1, 2))
        );
        for bad in ["", "n", "n:3", ":3:7", "n:7:3", "n:0:2", "n:x:2", "n:1:2 "] {
            assert_eq!(Notice::parse(EVENTS, bad), None, "{bad:?}");
        }
        assert_eq!(Notice::parse(WORK, "q"), Some(Notice::Work("q".into())));
        assert_eq!(Notice::parse(WORK, ""), None);
        assert_eq!(
            Notice::parse(DAEMONS, "node"),
            Some(Notice::Daemons("node".into()))
        );
        assert_eq!(Notice::parse(DAEMONS, ""), None);
        assert_eq!(Notice::parse("elsewhere", "q"), None);
    }
}
