//! The supervisor's life cycle, as its workers see it: running, then draining (no new prompt
//! starts; running ones may finish), then shut down (workers end their children and requeue
//! their prompts); and how many session workers run now.
//!
//! ```text
//!  running ──begin_drain──► draining ──begin_shutdown──► shut down
//!     working: +1 per worker (Work guard), −1 when it ends; the shutdown waits for 0
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// The life cycle and the working count; one per supervisor.
pub struct Life {
    /// Set once when the supervisor shuts down: workers requeue their prompt and stop.
    shutdown: watch::Sender<bool>,
    /// Set when a shutdown begins: running prompts may finish, but no new one starts.
    draining: AtomicBool,
    /// Set for a hand-over (`corral daemon restart`): a run under a spooling shim is left to
    /// its shim, running, for the next daemon to adopt, instead of being ended.
    handing_over: AtomicBool,
    /// How many session actors have a worker running now, kept by the workers themselves
    /// ([`Life::begin_work`]): `status` and the shutdown read it without asking every session
    /// actor (2,000 of them at a large boot), and the shutdown is woken when it changes (a
    /// worker that ends by spilling its events stores no event to wake it).
    working: Arc<watch::Sender<usize>>,
}

/// A session's worker counted in [`Life::working`] for as long as this lives: dropped when
/// the worker future ends, or with its actor.
#[derive(Debug)]
pub struct Working(Arc<watch::Sender<usize>>);

impl Drop for Working {
    fn drop(&mut self) {
        self.0.send_modify(|working| *working -= 1);
    }
}

impl Default for Life {
    fn default() -> Self {
        Life {
            shutdown: watch::channel(false).0,
            draining: AtomicBool::new(false),
            handing_over: AtomicBool::new(false),
            working: Arc::new(watch::channel(0).0),
        }
    }
}

impl Life {
    /// Counts a session's worker as working until the returned guard is dropped.
    pub fn begin_work(&self) -> Working {
        self.working.send_modify(|working| *working += 1);
        Working(self.working.clone())
    }

    /// How many session actors have a worker running now.
    pub fn working(&self) -> usize {
        *self.working.borrow()
    }

    /// [`Life::working`], seen as it changes.
    pub fn watch_working(&self) -> watch::Receiver<usize> {
        self.working.subscribe()
    }

    /// The shutdown to come hands the runs over to their shims (see [`Life::handing_over`]).
    pub fn begin_handover(&self) {
        self.handing_over.store(true, Ordering::SeqCst);
    }

    pub fn is_handing_over(&self) -> bool {
        self.handing_over.load(Ordering::SeqCst)
    }

    /// No new prompt starts from now on (running ones go on).
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Tells every worker to stop: running children are ended and their prompts requeued.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    #[cfg(test)]
    pub fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// A receiver that turns true when the supervisor shuts down.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_counts_while_its_guard_lives() {
        let life = Life::default();
        let mut watched = life.watch_working();
        let first = life.begin_work();
        let second = life.begin_work();
        assert_eq!(life.working(), 2);
        drop(first);
        assert_eq!(life.working(), 1);
        assert!(watched.has_changed().unwrap());
        assert_eq!(*watched.borrow_and_update(), 1);
        drop(second);
        assert_eq!(life.working(), 0);
    }

    #[test]
    fn the_shutdown_is_seen_by_every_receiver() {
        let life = Life::default();
        let signal = life.shutdown_signal();
        assert!(!life.is_draining() && !life.is_shut_down());
        life.begin_drain();
        assert!(life.is_draining() && !*signal.borrow());
        life.begin_shutdown();
        assert!(life.is_shut_down() && *signal.borrow());
    }
}
