//! One daemon alone on its store, or one of several on a shared (PostgreSQL) store: every
//! difference the actors see between the two lives behind [`Coordination`], chosen once when
//! the supervisor starts. The rest of the actors ask it; none of them branches on the store.
//!
//! ```text
//!                         Coordination
//!                 ┌────────────┴─────────────┐
//!               Alone                    AmongOthers
//!   (SQLite: the store's only      (a lease: prompts taken under its claim, writes
//!    daemon takes every prompt,     fenced by it, a guard that ends the children if it
//!    its runs are its own)          runs out; the claimer's wake-up; the asks it waits on)
//! ```
//!
//! The parts only several daemons have — the claimer (`actors::claims`), the asks to other
//! daemons (`actors::asks`), the lease's line in `status` — reach them through
//! [`Coordination::among_others`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::asks;
use crate::lease::holder::{GuardedRun, Lease};
use crate::store::daemons::Claim;
use crate::store::prompts::ClaimBy;

/// What differs between a daemon alone on its store and one among others on a shared store.
pub trait Coordination: Send + Sync {
    /// This daemon's node on a shared store (`None` alone: the store knows no nodes).
    fn node_id(&self) -> Option<&str>;

    /// Whether `node` is another daemon's (never, alone).
    fn is_elsewhere(&self, node: &str) -> bool {
        self.node_id().is_some_and(|here| here != node)
    }

    /// Whether other daemons may share the store (a PostgreSQL store), live now or not.
    fn shares_store(&self) -> bool;

    /// Whether other daemons held a live lease at the last look.
    fn with_others(&self) -> bool;

    /// Who takes the next prompt in a write that could start one: this daemon as the store's
    /// only daemon, or under its claim.
    fn claimer(&self) -> ClaimBy;

    /// Who takes a prompt sent here now, if its session is free: alone, this daemon; among
    /// others, this daemon only while its lease holds, it `serves` the project and (when
    /// others could take it) it `has_room`; else nobody here (it stays queued for a daemon
    /// that can). Both are asked only among others.
    fn claimer_for_send(&self, serves: &dyn Fn() -> bool, has_room: &dyn Fn() -> bool) -> ClaimBy;

    /// The claim a write is fenced by (`None`: no fence, alone).
    fn fence(&self) -> Option<Claim>;

    /// The mark every child of this daemon carries for the lease's guard (`None`: no guard).
    fn guard_mark(&self) -> Option<&str>;

    /// Guards a run's engine: if the lease runs out before the run ends, the guard ends its
    /// group. Dropped when the run ends.
    fn guard_run(&self, run_id: &str, pgid: i32, pid_start: Option<u64>) -> Option<GuardedRun>;

    /// A run left process `pid` (started at `start`) that its project keeps: the guard leaves
    /// it alone.
    fn keep(&self, pid: i32, start: u64);

    /// The stop signal of a worker running a prompt taken under `claim`: `shutdown`, and
    /// among others also the loss of that claim's lease (its epoch or older), which sets
    /// `fenced`: the worker then ends its engine as at a shutdown, but writes nothing more
    /// about its prompt (another daemon may run it now).
    fn stop_signal(
        &self,
        shutdown: watch::Receiver<bool>,
        claim: Option<&Claim>,
        fenced: &Arc<AtomicBool>,
    ) -> watch::Receiver<bool>;

    /// A write made under `claim` was refused by the fence: the workers of that claim stop.
    fn fenced(&self, claim: Option<&Claim>);

    /// A new `store.lease_ms`.
    fn set_lease_length(&self, length: Duration);

    /// Queued prompts may be claimable here now (a slot freed, a prompt queued elsewhere).
    fn wake_claimer(&self);

    /// A project was added or changed here: the projects this daemon serves are read anew
    /// at the next claim.
    fn projects_changed(&self);

    /// Gives the lease up at a clean stop (blocking: it connects to the store).
    fn release(&self);

    /// The parts only a daemon among others has.
    fn among_others(&self) -> Option<&AmongOthers>;
}

/// The store's only daemon (SQLite).
pub struct Alone;

impl Coordination for Alone {
    fn node_id(&self) -> Option<&str> {
        None
    }

    fn shares_store(&self) -> bool {
        false
    }

    fn with_others(&self) -> bool {
        false
    }

    fn claimer(&self) -> ClaimBy {
        ClaimBy::Alone
    }

    fn claimer_for_send(&self, _: &dyn Fn() -> bool, _: &dyn Fn() -> bool) -> ClaimBy {
        ClaimBy::Alone
    }

    fn fence(&self) -> Option<Claim> {
        None
    }

    fn guard_mark(&self) -> Option<&str> {
        None
    }

    fn guard_run(&self, _run_id: &str, _pgid: i32, _start: Option<u64>) -> Option<GuardedRun> {
        None
    }

    fn keep(&self, _pid: i32, _start: u64) {}

    fn stop_signal(
        &self,
        shutdown: watch::Receiver<bool>,
        _claim: Option<&Claim>,
        _fenced: &Arc<AtomicBool>,
    ) -> watch::Receiver<bool> {
        shutdown
    }

    fn fenced(&self, _claim: Option<&Claim>) {}

    fn set_lease_length(&self, _length: Duration) {}

    fn wake_claimer(&self) {}

    fn projects_changed(&self) {}

    fn release(&self) {}

    fn among_others(&self) -> Option<&AmongOthers> {
        None
    }
}

/// One of several daemons on a shared store, under its lease.
pub struct AmongOthers {
    pub lease: Arc<Lease>,
    /// Woken when queued prompts may be claimable here: a prompt queued elsewhere, a slot
    /// freed, a rescue; the claimer (`actors::claims`) takes what fits.
    pub claim_wanted: Notify,
    /// The asks of other daemons this one waits on (steer, compact: `actors::asks`).
    pub asks: asks::Waiting,
    /// The projects served here as the claimer last took them.
    served: Mutex<Served>,
}

/// The projects a daemon serves (their paths are directories on its host), kept between
/// claims: read from the store and the file system at every claim, they cost a shared-store
/// prompt a query and a `stat` per project each time. The heartbeat reads them at each
/// renewal anyway, and a project written here says so; only then is the list taken anew.
struct Served {
    /// The renewal's list this one was taken beside (a new renewal's is a new `Arc`).
    renewal: Arc<Vec<String>>,
    list: Arc<Vec<String>>,
    /// A project was written here since: read the list at the next claim.
    stale: bool,
}

impl Served {
    fn new(renewal: Arc<Vec<String>>) -> Self {
        Served {
            list: renewal.clone(),
            renewal,
            stale: true,
        }
    }

    /// The list for a claim, beside the lease's last `renewal`.
    fn take(
        &mut self,
        renewal: Arc<Vec<String>>,
        read: impl FnOnce() -> Option<Vec<String>>,
    ) -> Arc<Vec<String>> {
        if self.stale {
            self.list = read().map_or_else(|| renewal.clone(), Arc::new);
            self.stale = false;
            self.renewal = renewal;
        } else if !Arc::ptr_eq(&self.renewal, &renewal) {
            self.list = renewal.clone();
            self.renewal = renewal;
        }
        self.list.clone()
    }
}

impl AmongOthers {
    /// Under `lease`; `running` is this daemon's count of running prompts, told to the others
    /// at each renewal.
    pub fn new(lease: Arc<Lease>, running: watch::Receiver<usize>) -> Self {
        lease.count_running(running);
        AmongOthers {
            served: Mutex::new(Served::new(lease.serves())),
            lease,
            claim_wanted: Notify::new(),
            asks: asks::Waiting::default(),
        }
    }

    /// The projects served here, for a claim: the last renewal's list, unless a project was
    /// written here since it, when `read` reads them now (the last renewal's list if it
    /// cannot).
    pub fn served_projects(&self, read: impl FnOnce() -> Option<Vec<String>>) -> Arc<Vec<String>> {
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(self.lease.serves(), read)
    }
}

impl Coordination for AmongOthers {
    fn node_id(&self) -> Option<&str> {
        Some(&self.lease.node_id)
    }

    fn shares_store(&self) -> bool {
        true
    }

    fn with_others(&self) -> bool {
        !self.lease.alone()
    }

    fn claimer(&self) -> ClaimBy {
        ClaimBy::Daemon(self.lease.claim())
    }

    fn claimer_for_send(&self, serves: &dyn Fn() -> bool, has_room: &dyn Fn() -> bool) -> ClaimBy {
        // Alone on the store, it takes what it serves as a SQLite store's daemon does.
        if self.lease.holds() && serves() && (self.lease.alone() || has_room()) {
            ClaimBy::Daemon(self.lease.claim())
        } else {
            ClaimBy::Nobody
        }
    }

    fn fence(&self) -> Option<Claim> {
        Some(self.lease.claim())
    }

    fn guard_mark(&self) -> Option<&str> {
        self.lease.child_mark()
    }

    fn guard_run(&self, run_id: &str, pgid: i32, pid_start: Option<u64>) -> Option<GuardedRun> {
        Some(GuardedRun::new(self.lease.clone(), run_id, pgid, pid_start))
    }

    fn keep(&self, pid: i32, start: u64) {
        self.lease.kept(pid, start);
    }

    fn stop_signal(
        &self,
        mut shutdown: watch::Receiver<bool>,
        claim: Option<&Claim>,
        fenced: &Arc<AtomicBool>,
    ) -> watch::Receiver<bool> {
        let Some(epoch) = claim.map(|claim| claim.epoch) else {
            return shutdown;
        };
        let (stop, stopped) = watch::channel(false);
        let mut lost = self.lease.lost();
        let fenced = fenced.clone();
        actix::spawn(async move {
            loop {
                if *shutdown.borrow_and_update() {
                    stop.send_replace(true);
                    return;
                }
                if *lost.borrow_and_update() >= epoch {
                    fenced.store(true, Ordering::SeqCst);
                    stop.send_replace(true);
                    return;
                }
                tokio::select! {
                    changed = shutdown.changed() => if changed.is_err() { return },
                    changed = lost.changed() => if changed.is_err() { return },
                    // The worker is gone: nobody listens any more.
                    _ = stop.closed() => return,
                }
            }
        });
        stopped
    }

    fn fenced(&self, claim: Option<&Claim>) {
        if let Some(claim) = claim {
            self.lease.fenced(claim.epoch);
        }
    }

    fn set_lease_length(&self, length: Duration) {
        self.lease.set_length(length);
    }

    fn wake_claimer(&self) {
        self.claim_wanted.notify_one();
    }

    fn projects_changed(&self) {
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stale = true;
    }

    fn release(&self) {
        self.lease.release();
    }

    fn among_others(&self) -> Option<&AmongOthers> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[&str]) -> Arc<Vec<String>> {
        Arc::new(ids.iter().map(|id| id.to_string()).collect())
    }

    #[test]
    fn the_served_projects_are_read_only_after_a_write_here_and_follow_each_renewal() {
        let first = list(&["a"]);
        let mut served = Served::new(first.clone());
        let mut reads = 0;
        let mut read = |ids: &[&str]| {
            reads += 1;
            Some(ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
        };
        // The first claim reads them: nothing was taken yet.
        assert_eq!(
            *served.take(first.clone(), || read(&["a", "b"])),
            ["a", "b"]
        );
        // Then the same renewal: kept, not read.
        assert_eq!(*served.take(first.clone(), || read(&["x"])), ["a", "b"]);
        // A new renewal's list is taken as it is.
        let second = list(&["a", "b", "c"]);
        assert_eq!(
            *served.take(second.clone(), || read(&["x"])),
            ["a", "b", "c"]
        );
        // A project written here: read again at the next claim, and once only.
        served.stale = true;
        assert_eq!(
            *served.take(second.clone(), || read(&["a", "b", "c", "d"])),
            ["a", "b", "c", "d"]
        );
        assert_eq!(
            *served.take(second.clone(), || read(&["x"])),
            ["a", "b", "c", "d"]
        );
        // A read that fails falls back to the renewal's list.
        served.stale = true;
        assert_eq!(*served.take(second, || None), ["a", "b", "c"]);
        assert_eq!(reads, 2);
    }
}
