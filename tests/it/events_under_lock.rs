//! An event the supervisor records itself (`Corral::record_event`: a refused request) is never
//! dropped for a store another program locks: it waits past `store.lock_timeout_ms` for as
//! long as the lock is held, and is stored and published once it is released. Only the
//! shutdown ends the wait, and then the caller is told it was not stored. An app-server
//! child's state (what `status` shows after a restart) is kept the same way.
//!
//! The lock is held by a connection of the test's own (`BEGIN IMMEDIATE` on a thread), as
//! another program's would be; SQLite locks connections of one process against each other.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::library::{actix_test, Library};
use corral::events::EventKind;
use corral::store::projects::NewProject;
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

/// A supervisor with a short lock limit and one session of `engine`.
async fn library_on(engine: &str) -> (Library, String) {
    let home = tempfile::tempdir().unwrap();
    let library = Library::start_in(
        home,
        &[
            ("engines.fake.path", FAKE),
            ("engines.codex-app-server.path", FAKE),
            ("store.lock_timeout_ms", LIMIT),
        ],
    )
    .await;
    let project = library
        .add_project(NewProject {
            name: "p".into(),
            engine: Some(engine.parse().expect("a known engine")),
            ..Default::default()
        })
        .await;
    let session = library.session(&project, engine).await;
    (library, session.id)
}

async fn library() -> (Library, String) {
    library_on("fake").await
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

#[test]
fn an_app_server_state_changed_under_a_lock_is_stored_after_it() {
    actix_test(|| async {
        let (library, session) = library_on("codex-app-server").await;
        let session = library
            .corral
            .read(|c| corral::store::sessions::session(c, &session))
            .unwrap()
            .unwrap();
        library.run(&session, "start the child").await;
        let live = library.corral.app_servers().await;
        let pid = live[0].pid.expect("a running child") as i32;
        let released = Arc::new(AtomicBool::new(false));
        let (release, holder) = hold_lock(library.home.path().join("corral.db"), released.clone());
        // The child dies while the store is locked: its state changes (stopped, its exit).
        common::daemon::kill(pid, libc::SIGKILL);
        common::daemon::wait_until("the actor sees the child's exit", || {
            !common::daemon::alive(pid)
        });
        loop {
            let live = library.corral.app_servers().await;
            if live[0]
                .last_exit
                .as_ref()
                .is_some_and(|exit| exit["pid"] == pid)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Past two limits: a write given up once would be lost.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let _ = release.send(());
        holder.join().unwrap();
        let stored = |library: &Library| {
            library
                .corral
                .read(corral::store::processes::app_servers)
                .unwrap()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !stored(&library)[0]
            .last_exit
            .as_ref()
            .is_some_and(|exit| exit["pid"] == pid)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child's exit was never stored: {:?}",
                stored(&library)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}
