//! An event the supervisor records itself (`Corral::record_event`: a refused request) is never
//! dropped for a store another program locks: it waits past `store.lock_timeout_ms` for as
//! long as the lock is held, and is stored and published once it is released. Only the
//! shutdown ends the wait, and then the caller is told it was not stored.
//!
//! The lock is held by a connection of the test's own (`BEGIN IMMEDIATE` on a thread), as
//! another program's would be; SQLite locks connections of one process against each other.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::library::{actix_test, Library};
use corral::events::EventKind;
use corral::store::work::NewProject;
use corral::CorralError;
use serde_json::json;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The shortest limit the setting takes: each try of a write gives up after it.
const LIMIT: &str = "1000";

/// Holds the store's write lock from when it returns until `release` is sent (or the sender is
/// dropped); sets `released` just before it lets go.
fn hold_lock(
    db: std::path::PathBuf,
    released: Arc<AtomicBool>,
) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (taken_tx, taken_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(db).unwrap();
        connection.execute_batch("BEGIN IMMEDIATE").unwrap();
        taken_tx.send(()).unwrap();
        let _ = release_rx.recv();
        released.store(true, Ordering::SeqCst);
        connection.execute_batch("ROLLBACK").unwrap();
    });
    taken_rx.recv().expect("the lock is taken");
    (release_tx, holder)
}

async fn library() -> (Library, String) {
    let home = tempfile::tempdir().unwrap();
    let library = Library::start_in(
        home,
        &[
            ("engines.fake.path", FAKE),
            ("store.lock_timeout_ms", LIMIT),
        ],
    )
    .await;
    let project = library
        .add_project(NewProject {
            name: "p".into(),
            ..Default::default()
        })
        .await;
    let session = library.session(&project, "fake").await;
    (library, session.id)
}

#[test]
fn a_recorded_event_waits_out_a_lock_held_past_the_limit() {
    actix_test(|| async {
        let (library, session) = library().await;
        let mut published = library.corral.subscribe();
        let released = Arc::new(AtomicBool::new(false));
        let (release, holder) = hold_lock(library.home.path().join("corral.db"), released.clone());
        // Released after two and a half limits: the first tries are given up by the ledger.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2500));
            let _ = release.send(());
        });
        let stored = library
            .corral
            .record_event(
                &session,
                EventKind::RequestRefused,
                json!({ "what": "a test" }),
            )
            .await
            .expect("the event is stored once the lock is gone");
        assert!(
            released.load(Ordering::SeqCst),
            "stored while the lock was held"
        );
        releaser.join().unwrap();
        holder.join().unwrap();
        assert_eq!(stored.kind, EventKind::RequestRefused);
        let events = library.session_events(&session);
        assert!(
            events.contains(&stored),
            "{stored:?} is not in the store: {events:?}"
        );
        // And published, after its commit.
        loop {
            let event = published.recv().await.expect("the event is published");
            if event.session_id == session && event.seq == stored.seq {
                assert_eq!(event.kind, EventKind::RequestRefused);
                break;
            }
        }
    });
}

#[test]
fn the_shutdown_ends_the_wait_and_the_caller_is_told() {
    actix_test(|| async {
        let (library, session) = library().await;
        let released = Arc::new(AtomicBool::new(false));
        let (release, holder) = hold_lock(library.home.path().join("corral.db"), released.clone());
        let record = library.corral.record_event(
            &session,
            EventKind::RequestRefused,
            json!({ "what": "a test" }),
        );
        let (recorded, ()) = futures::join!(record, library.corral.shutdown(Duration::ZERO));
        assert!(
            matches!(recorded, Err(CorralError::Locked(_))),
            "{recorded:?}"
        );
        drop(release);
        holder.join().unwrap();
        let events = library.session_events(&session);
        assert!(
            !events
                .iter()
                .any(|event| event.kind == EventKind::RequestRefused),
            "{events:?}"
        );
    });
}
