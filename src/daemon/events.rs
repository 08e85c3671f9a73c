//! The event stream every transport serves: one session's events or every session's, from a
//! cursor, in order, with no gap and no repeat, and the lag rule.
//!
//! [`EventStream`] (made by [`event_stream`]) first replays the stored events after the
//! cursor, then follows the supervisor's live broadcast. It listens before it reads the store,
//! so an event committed in between is seen twice at most and the cursor drops the repeat.
//! Events are published after their commit by whoever wrote them, so two writers may publish
//! out of their numbers' order (or one may never publish, its task gone): a live event whose
//! number is past the next expected one means the ones between are committed (numbers are
//! given in commit order without gaps), and they are read from the store first, a page at a
//! time, the live one held meanwhile. A consumer therefore sees every event exactly once, in
//! its cursor's order.
//!
//! The lag rule: the broadcast is a bounded buffer the sessions publish into without waiting
//! ([`EVENT_CHANNEL`](crate::actors::publisher::EVENT_CHANNEL) events). A consumer that falls
//! more than that behind gets [`StreamItem::Lagged`] with the cursor of the last event it
//! was given, and the stream ends; it resumes by asking again from there.
//!
//! Nothing here is tied to a thread: the stream is `Send` (the socket runs it on the daemon's
//! thread, the HTTP WebSocket on actix-web's). Store reads are short, paged, indexed reads on
//! the reader pool.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::actors::publisher::Published;
use crate::store::events::Event;
use crate::Corral;

/// Stored events read per page when the stream catches up.
pub const REPLAY_PAGE: usize = 512;

/// Which events a stream carries, and what its cursor counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One session's (its id, resolved): the cursor is the event's `seq`.
    Session(String),
    /// Every session's: the cursor is the daemon-wide `feed_seq`.
    All,
}

impl Scope {
    /// The event's position in this scope's order, if the event belongs to it.
    pub fn cursor(&self, event: &Event) -> Option<i64> {
        match self {
            Scope::Session(id) if *id == event.session_id => Some(event.seq),
            Scope::Session(_) => None,
            Scope::All => Some(event.feed_seq),
        }
    }

    /// The session it is limited to, if any.
    pub fn session(&self) -> Option<&str> {
        match self {
            Scope::Session(id) => Some(id),
            Scope::All => None,
        }
    }

    /// Stored events of this scope with a cursor in `(after, before)`, in order.
    fn read(&self, corral: &Corral, after: i64, before: i64) -> Option<Vec<Event>> {
        let read = match self {
            Scope::Session(id) => corral.events_between(id, after, before, REPLAY_PAGE),
            Scope::All => corral.feed_between(after, before, REPLAY_PAGE),
        };
        match read {
            Ok(page) => Some(page),
            Err(error) => {
                tracing::warn!(%error, "an event stream could not read the store; it ends");
                None
            }
        }
    }
}

/// What a stream yields.
#[derive(Debug, Clone)]
pub enum StreamItem {
    /// The next event (its JSON text is made once for every consumer: `Published::json`).
    Event(Arc<Published>),
    /// The consumer fell more than the broadcast's buffer behind: resume after this cursor.
    /// The stream ends after it.
    Lagged { resume_after: i64 },
}

/// The events of `scope` after cursor `after`. Subscribes to the live broadcast now (before
/// the first poll), so a caller can answer its client and then start reading.
pub fn event_stream(corral: Corral, scope: Scope, after: i64) -> EventStream {
    let live = corral.subscribe();
    EventStream {
        corral,
        scope,
        last: after.max(0),
        live,
        ready: VecDeque::new(),
        replaying: true,
        held: None,
        ended: false,
    }
}

/// A stream of one scope's events; see the module doc. Read it with [`EventStream::next`]
/// (cancel-safe: a `tokio::select!` beside a WebSocket's reads loses nothing).
pub struct EventStream {
    corral: Corral,
    scope: Scope,
    /// The cursor of the last event handed out (or the one asked for).
    last: i64,
    live: broadcast::Receiver<Arc<Published>>,
    /// Events to hand out before anything else, in order.
    ready: VecDeque<Arc<Published>>,
    /// Whether the stored events after the cursor are still being read.
    replaying: bool,
    /// A live event whose number is past the next one: it waits while the stored events before
    /// it are read, a page at a time.
    held: Option<Arc<Published>>,
    ended: bool,
}

impl EventStream {
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The cursor of the last event handed out.
    #[cfg(any(test, feature = "testkit"))]
    pub fn last(&self) -> i64 {
        self.last
    }

    /// The next item; `None` once the stream has ended (after a lag, when the daemon stops, or
    /// when the store cannot be read).
    pub async fn next(&mut self) -> Option<StreamItem> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                if let Some(cursor) = self.scope.cursor(&event) {
                    self.last = cursor;
                }
                return Some(StreamItem::Event(event));
            }
            if self.ended {
                return None;
            }
            if let Some(held) = self.held.take() {
                // The stored events between the cursor and the held one: committed (an event
                // numbered after them was published), not yet published, or to nobody.
                let before = self.scope.cursor(&held).unwrap_or(self.last);
                let page = if before > self.last + 1 {
                    let Some(page) = self.scope.read(&self.corral, self.last, before) else {
                        self.ended = true;
                        continue;
                    };
                    page
                } else {
                    Vec::new()
                };
                let done = page.len() < REPLAY_PAGE;
                self.ready.extend(
                    page.into_iter()
                        .map(|event| Arc::new(Published::new(event))),
                );
                if done {
                    self.ready.push_back(held);
                } else {
                    self.held = Some(held);
                }
                continue;
            }
            if self.replaying {
                let Some(page) = self.scope.read(&self.corral, self.last, i64::MAX) else {
                    self.ended = true;
                    continue;
                };
                self.replaying = page.len() == REPLAY_PAGE;
                self.ready.extend(
                    page.into_iter()
                        .map(|event| Arc::new(Published::new(event))),
                );
                continue;
            }
            match self.live.recv().await {
                Ok(event) => {
                    let Some(cursor) = self.scope.cursor(&event) else {
                        continue;
                    };
                    if cursor <= self.last {
                        // Replayed or filled from the store already.
                        continue;
                    }
                    if cursor == self.last + 1 {
                        self.ready.push_back(event);
                    } else {
                        self.held = Some(event);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.ended = true;
                    self.ready.clear();
                    return Some(StreamItem::Lagged {
                        resume_after: self.last,
                    });
                }
                Err(broadcast::error::RecvError::Closed) => self.ended = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session: &str, seq: i64, feed_seq: i64) -> Event {
        Event {
            session_id: session.into(),
            seq,
            feed_seq,
            prompt_id: None,
            run_id: None,
            at: 1,
            kind: "message".into(),
            payload: serde_json::Value::Null,
        }
    }

    #[test]
    fn a_scope_counts_its_own_cursor() {
        let session = Scope::Session("a".into());
        assert_eq!(session.cursor(&event("a", 3, 10)), Some(3));
        assert_eq!(session.cursor(&event("b", 3, 11)), None);
        assert_eq!(Scope::All.cursor(&event("b", 3, 11)), Some(11));
        assert_eq!(Scope::All.session(), None);
        assert_eq!(session.session(), Some("a"));
    }

    /// Events stored but never published (their writer's task gone), then one published:
    /// the stream gives them all, in order, once; and a lag ends it with its cursor.
    #[test]
    fn what_was_stored_but_not_published_is_read_from_the_store_in_order() {
        use crate::actors::ledger::AppendEvents;
        use crate::events::EventKind;
        use crate::store::events::NewEvent;
        use crate::store::projects::NewProject;
        use crate::store::sessions::NewSession;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        actix::System::new().block_on(async {
            let corral = Corral::start(crate::CorralOptions::new(home.path()))
                .await
                .unwrap();
            let project = corral
                .add_project(NewProject {
                    name: "p".into(),
                    path: work.path().to_string_lossy().into_owned(),
                    engine: Some(crate::engine::EngineKind::Fake),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut sessions = Vec::new();
            for _ in 0..2 {
                let session = corral
                    .open_session(NewSession {
                        project_id: project.id.clone(),
                        engine: Some(crate::engine::EngineKind::Fake),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                sessions.push(session.id);
            }
            let note = |session: &str, text: &str| NewEvent {
                session_id: session.to_string(),
                prompt_id: None,
                run_id: None,
                kind: EventKind::Notice,
                payload: serde_json::json!({ "text": text }),
            };
            let mut all = event_stream(corral.clone(), Scope::All, 0);
            let mut second = event_stream(corral.clone(), Scope::Session(sessions[1].clone()), 0);
            // Stored in one write, published by nobody.
            corral
                .write(AppendEvents {
                    events: vec![
                        note(&sessions[0], "a"),
                        note(&sessions[1], "b"),
                        note(&sessions[0], "c"),
                        note(&sessions[1], "d"),
                    ],
                })
                .await
                .unwrap();
            // Then one published: its number is past what the streams were given.
            corral
                .record_event(
                    &sessions[1],
                    EventKind::Notice,
                    serde_json::json!({ "text": "e" }),
                )
                .await
                .unwrap();
            let mut seen = Vec::new();
            for _ in 0..5 {
                match all.next().await {
                    Some(StreamItem::Event(event)) => {
                        seen.push((event.feed_seq, event.payload["text"].clone()))
                    }
                    other => panic!("{other:?}"),
                }
            }
            let texts: Vec<_> = seen
                .iter()
                .map(|(_, text)| text.as_str().unwrap())
                .collect();
            assert_eq!(texts, ["a", "b", "c", "d", "e"]);
            let numbers: Vec<i64> = seen.iter().map(|(feed_seq, _)| *feed_seq).collect();
            assert_eq!(numbers, [1, 2, 3, 4, 5]);
            assert_eq!(all.last(), 5);
            let mut of_second = Vec::new();
            for _ in 0..3 {
                match second.next().await {
                    Some(StreamItem::Event(event)) => of_second.push(event.seq),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(of_second, [1, 2, 3]);

            // More unpublished events than a page: read a page at a time, all in order.
            let many: Vec<NewEvent> = (0..REPLAY_PAGE + 88)
                .map(|index| note(&sessions[0], &index.to_string()))
                .collect();
            corral.write(AppendEvents { events: many }).await.unwrap();
            corral
                .record_event(
                    &sessions[0],
                    EventKind::Notice,
                    serde_json::json!({ "text": "f" }),
                )
                .await
                .unwrap();
            for expected in 6..=(6 + REPLAY_PAGE as i64 + 88) {
                match all.next().await {
                    Some(StreamItem::Event(event)) => assert_eq!(event.feed_seq, expected),
                    other => panic!("{other:?}"),
                }
            }
            let last = all.last();
            assert_eq!(last, 6 + REPLAY_PAGE as i64 + 88);

            // A consumer that reads nothing while more than the buffer passes: one notice
            // with its cursor, then the end.
            let flood = (0..crate::actors::publisher::EVENT_CHANNEL + 10).map(|index| {
                corral.record_event(
                    &sessions[0],
                    EventKind::Notice,
                    serde_json::json!({ "text": index }),
                )
            });
            for recorded in futures::future::join_all(flood).await {
                recorded.unwrap();
            }
            match all.next().await {
                Some(StreamItem::Lagged { resume_after }) => assert_eq!(resume_after, last),
                other => panic!("{other:?}"),
            }
            assert!(all.next().await.is_none());
        });
    }

    fn assert_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    fn streams_are_send(stream: EventStream) {
        assert_send(&stream);
        let mut stream = stream;
        assert_send(&stream.next());
    }
}
