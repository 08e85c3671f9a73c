//! The shared store's notifications (`corral::store::listen`) and the event relay
//! (`corral::actors::relay`), on the throwaway cluster of `.ci/run` (a database per test,
//! `src/testkit/store.rs`): a notification sent on another connection arrives parsed, the
//! listener comes back after the server ends its backend, and the relay publishes other
//! daemons' stored events into a broadcast, in feed order, and catches up after a reconnect.
//! Without a cluster these skip (except in CI), as every PostgreSQL test does.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use corral::actors::publisher::{Broadcast, Published};
use corral::actors::relay::{EventRelay, RELAY_PAGE};
use corral::store::listen::{self, Listener, Notice};
use corral::store::location::{Location, PgUrl};
use corral::store::postgres::PgConn;
use corral::store::sql::Conn;
use corral::store::ReaderPool;

use common::daemon::wait_until;
use common::store::{execute, sql, TestDatabase};

/// How long a notice may take before the test fails (they come in milliseconds).
const NOTICE_DEADLINE: Duration = Duration::from_secs(30);

/// The next notice, failing the test when none comes or the listener's channel closed.
async fn next(notices: &mut mpsc::UnboundedReceiver<Notice>) -> Notice {
    tokio::time::timeout(NOTICE_DEADLINE, notices.recv())
        .await
        .expect("a notice in time")
        .expect("the listener's channel is open")
}

fn url_of(database: &TestDatabase) -> PgUrl {
    PgUrl::parse(&database.url).expect("the test database's URL parses")
}

/// A connection of corral's own to the database (the ledger's kind).
fn connect(url: &PgUrl) -> Conn {
    Conn::from(PgConn::connect(&url.config(), &url.to_string()).expect("the database answers"))
}

/// The test database made a corral store of the current schema.
fn migrated(database: &TestDatabase) -> PgUrl {
    let url = url_of(database);
    let reached =
        corral::store::postgres::migrate(&connect(&url), corral::store::migrations::SCHEMA_VERSION)
            .expect("the store migrates");
    assert_eq!(reached, corral::store::migrations::SCHEMA_VERSION);
    url
}

/// Stores events numbered `first..=last` in the feed (session `s`, seq = feed number), the
/// way another daemon's ledger would have.
fn store_events(url: &str, first: i64, last: i64) {
    execute(
        url,
        &format!(
            "INSERT INTO events (session_id, seq, at, kind, payload, feed_seq) \
             SELECT 's', n, 0, 'message', '{{\"n\":' || n || '}}', n \
             FROM generate_series({first}, {last}) n"
        ),
    );
}

/// The feed numbers of what the broadcast holds now, in order.
fn drained(receiver: &mut broadcast::Receiver<Arc<Published>>) -> Vec<i64> {
    let mut got = Vec::new();
    loop {
        match receiver.try_recv() {
            Ok(event) => got.push(event.feed_seq),
            Err(broadcast::error::TryRecvError::Empty) => return got,
            Err(error) => panic!("the broadcast: {error}"),
        }
    }
}

/// How many backends of `database` are listening (their last statement was our LISTEN).
fn listening_backends(database: &TestDatabase) -> i64 {
    let query = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND query LIKE 'LISTEN%'",
        database.name()
    );
    sql(database.admin_url(), &query)[0][0]
        .as_i64()
        .expect("a count")
}

#[tokio::test]
async fn a_notification_sent_on_another_connection_arrives_parsed() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let url = url_of(&database);
    let (_listener, mut notices) = Listener::start(&url);
    assert_eq!(next(&mut notices).await, Notice::Reconnected, "listening");

    // One that does not parse is dropped; the next one comes through.
    execute(
        &database.url,
        "SELECT pg_notify('corral_events', 'not a payload')",
    );
    execute(
        &database.url,
        "SELECT pg_notify('corral_events', 'node-a:3:7')",
    );
    assert_eq!(
        next(&mut notices).await,
        Notice::Events {
            node_id: "node-a".into(),
            first: 3,
            last: 7
        }
    );

    // `notify` inside a transaction: nothing from one rolled back, the committed one at
    // its commit (coming next proves the rolled-back one never came).
    let conn = connect(&url);
    conn.batch("BEGIN").unwrap();
    listen::notify(&conn, listen::WORK, "q").unwrap();
    conn.batch("ROLLBACK").unwrap();
    conn.batch("BEGIN").unwrap();
    listen::notify(&conn, listen::DAEMONS, "node-b").unwrap();
    listen::notify(
        &conn,
        listen::EVENTS,
        &listen::events_payload("node-b", 8, 9),
    )
    .unwrap();
    conn.batch("COMMIT").unwrap();
    assert_eq!(next(&mut notices).await, Notice::Daemons("node-b".into()));
    assert_eq!(
        next(&mut notices).await,
        Notice::Events {
            node_id: "node-b".into(),
            first: 8,
            last: 9
        }
    );
    listen::notify(&conn, listen::WORK, "r").unwrap();
    assert_eq!(next(&mut notices).await, Notice::Work("r".into()));
}

#[tokio::test]
async fn the_listener_comes_back_after_the_server_ends_its_backend_and_stops_on_drop() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let url = url_of(&database);
    let (listener, mut notices) = Listener::start(&url);
    assert_eq!(next(&mut notices).await, Notice::Reconnected, "listening");
    assert_eq!(listening_backends(&database), 1);

    let ended = sql(
        database.admin_url(),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND query LIKE 'LISTEN%'",
            database.name()
        ),
    );
    assert_eq!(
        ended,
        vec![vec![json!(true)]],
        "the listener's backend ended"
    );
    assert_eq!(
        next(&mut notices).await,
        Notice::Reconnected,
        "listening again"
    );
    execute(&database.url, "SELECT pg_notify('corral_work', 'q')");
    assert_eq!(next(&mut notices).await, Notice::Work("q".into()));

    // Dropped: its channel closes and its connection goes.
    drop(listener);
    let closed = tokio::time::timeout(NOTICE_DEADLINE, notices.recv()).await;
    assert_eq!(closed.expect("the channel closes in time"), None);
    wait_until("the listener's backend is gone", || {
        listening_backends(&database) == 0
    });
}

#[test]
fn the_relay_publishes_other_daemons_events_in_order_and_catches_up() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let url = migrated(&database);
    let sender = Broadcast::with_capacity(4 * RELAY_PAGE);
    let mut receiver = sender.subscribe();
    let readers = ReaderPool::at(&Location::Postgres(url.clone()));
    let mut relay = EventRelay::new("node-b".into(), readers, sender, 0);

    store_events(&database.url, 1, 3);
    relay.on_events("node-a", 1, 3);
    assert_eq!(drained(&mut receiver), vec![1, 2, 3]);
    assert_eq!(relay.published(), 3);
    // A repeat of a batch relayed already is not read again.
    relay.on_events("node-a", 2, 3);
    assert_eq!(drained(&mut receiver), Vec::<i64>::new());

    // Its own node's batch: already published by whoever stored it.
    store_events(&database.url, 4, 5);
    relay.on_events("node-b", 4, 5);
    assert_eq!(drained(&mut receiver), Vec::<i64>::new());
    assert_eq!(relay.published(), 3);

    // A catch-up publishes everything after the last relayed, its own node's included.
    relay.on_reconnected();
    assert_eq!(drained(&mut receiver), vec![4, 5]);
    assert_eq!(relay.published(), 5);

    // A batch longer than a page comes whole, in order.
    let last = 5 + 2 * RELAY_PAGE as i64 + 17;
    store_events(&database.url, 6, last);
    relay.on_events("node-a", 6, last);
    assert_eq!(drained(&mut receiver), (6..=last).collect::<Vec<_>>());

    // Events whose notice never came (the listener was away) come with the catch-up; a
    // second one finds nothing more.
    store_events(&database.url, last + 1, last + 3);
    relay.on_reconnected();
    assert_eq!(drained(&mut receiver), vec![last + 1, last + 2, last + 3]);
    relay.on_reconnected();
    assert_eq!(drained(&mut receiver), Vec::<i64>::new());
    assert_eq!(relay.published(), last + 3);
}

#[tokio::test]
async fn a_committed_batch_of_another_daemon_reaches_the_broadcast_through_the_listener() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let url = migrated(&database);
    let sender = Broadcast::with_capacity(64);
    let mut receiver = sender.subscribe();
    let readers = ReaderPool::at(&Location::Postgres(url.clone()));
    let relay = EventRelay::new("node-b".into(), readers, sender, 0);
    let (listener, notices) = Listener::start(&url);
    let (work_sender, mut work) = mpsc::unbounded_channel();
    let running = tokio::spawn(relay.run(notices, move |notice| {
        let _ = work_sender.send(notice);
    }));
    assert_eq!(next(&mut work).await, Notice::Reconnected, "listening");

    // Another daemon's ledger batch: its events and its notice in one transaction.
    let conn = connect(&url);
    conn.batch("BEGIN").unwrap();
    conn.batch(
        "INSERT INTO events (session_id, seq, at, kind, payload, feed_seq) \
         VALUES ('s', 1, 0, 'message', '{}', 1), ('s', 2, 0, 'message', '{}', 2)",
    )
    .unwrap();
    listen::notify(
        &conn,
        listen::EVENTS,
        &listen::events_payload("node-a", 1, 2),
    )
    .unwrap();
    listen::notify(&conn, listen::WORK, "q").unwrap();
    conn.batch("COMMIT").unwrap();

    for expected in [1, 2] {
        let event = tokio::time::timeout(NOTICE_DEADLINE, receiver.recv())
            .await
            .expect("a relayed event in time")
            .expect("the broadcast is open");
        assert_eq!((event.session_id.as_str(), event.feed_seq), ("s", expected));
    }
    assert_eq!(next(&mut work).await, Notice::Work("q".into()));

    // The listener gone, the relay's loop ends.
    drop(listener);
    tokio::time::timeout(NOTICE_DEADLINE, running)
        .await
        .expect("the relay ends in time")
        .expect("the relay did not panic");
}
