//! The daemon's phases, as one value shared by everyone who needs them: the accept loop
//! (stops accepting when draining), the methods (`prompt.send` is refused while draining,
//! `status` says so), and whatever asks for a stop — SIGTERM/SIGINT or the `shutdown`
//! method, which no longer signals its own process.
//!
//! ```text
//! Running ──(a signal, or `shutdown`)──► Draining ──(grace over, or a second ask)──► Stopping
//! ```

use std::rc::Rc;

use tokio::sync::watch;

/// Where the daemon is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Serving.
    Running,
    /// No new clients or prompts; running prompts have the grace period to finish.
    Draining,
    /// No more grace: running prompts are ended and requeued.
    Stopping,
}

/// A handle on the phase; clones share it (the daemon runs on one thread).
#[derive(Clone)]
pub struct Shutdown {
    phase: Rc<watch::Sender<Phase>>,
    /// The stop asked for is a hand-over (`corral daemon restart`, SIGHUP): runs are left to
    /// their shims for the next daemon, and there is no grace.
    handover: Rc<std::cell::Cell<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown {
            phase: Rc::new(watch::channel(Phase::Running).0),
            handover: Rc::default(),
        }
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Asks for a stop: the first ask drains, the next one stops at once.
    pub fn request(&self) {
        self.phase.send_modify(|phase| {
            *phase = match *phase {
                Phase::Running => Phase::Draining,
                Phase::Draining | Phase::Stopping => Phase::Stopping,
            }
        });
    }

    /// Asks for a hand-over: a stop at once that leaves runs to their shims.
    pub fn request_handover(&self) {
        self.handover.set(true);
        self.phase.send_replace(Phase::Stopping);
    }

    /// Whether the stop asked for is a hand-over.
    pub fn is_handover(&self) -> bool {
        self.handover.get()
    }

    /// Resolves once the phase is `phase` or later.
    pub async fn reached(&self, phase: Phase) {
        let mut watching = self.phase.subscribe();
        // The sender lives in `self`: `wait_for` cannot fail while we hold it.
        let _ = watching.wait_for(|now| *now >= phase).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_move_the_phase_on_and_wake_the_waiters() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let shutdown = Shutdown::new();
            assert_eq!(shutdown.phase(), Phase::Running);
            let waiter = shutdown.clone();
            let draining = tokio::task::LocalSet::new();
            let woke = draining
                .run_until(async move {
                    let wait = tokio::task::spawn_local(async move {
                        waiter.reached(Phase::Draining).await;
                        waiter.phase()
                    });
                    tokio::task::yield_now().await;
                    shutdown.request();
                    let woke = wait.await.unwrap();
                    shutdown.request();
                    shutdown.request();
                    (woke, shutdown.phase())
                })
                .await;
            assert_eq!(woke, (Phase::Draining, Phase::Stopping));
        });
    }
}
