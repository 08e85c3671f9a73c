//! This daemon's lease on a shared store: registration, the heartbeat, and what the rest of
//! the supervisor asks of it (its claim, whether it still holds, which projects it serves).
//!
//! ```text
//!  boot ── register (new epoch) ──► heartbeat thread: every lease/3, on a connection of its own
//!                                     renew ─ ok ──► the guard's deadline moves (sent + lease − margin)
//!                                       │          another daemon's lease ran out? ──► Rescue wanted
//!                                       │          the projects served changed? ──► Claim wanted
//!                                       └ lost ──► `lost` told (workers of that epoch stop),
//!                                                  register again (new epoch) ──► Claim wanted
//! ```
//!
//! The heartbeat has its own thread and connection so that renewing never waits behind a
//! ledger batch or a slow reader: a live daemon keeps its prompts however slow the rest is.
//! Its timer is one of corral's few waits by the clock (ARCHITECTURE.md, "Invariants"): a
//! lease is renewed *because* time passes. It writes only its own `daemons` row.
//!
//! The deadline the guard enforces is measured on this host's monotonic clock from *before*
//! the renewal was sent, less a margin: the database stamped the lease's end after the request
//! left, so the holder always stops its engines before any other daemon may take its prompts
//! over, whatever the hosts' clocks say.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::guard::Guard;
use crate::store::daemons::{self, Claim, Registration};
use crate::store::listen;
use crate::store::location::PgUrl;
use crate::store::postgres::PgConn;
use crate::store::sql::{args, Conn};

/// What the heartbeat asks of the daemon's async side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Look for queued prompts to claim (registered again, projects served changed).
    Claim,
    /// Another daemon's lease ran out while it held prompts: take them back.
    Rescue,
}

/// Where the lease stands, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Held,
    /// The database could not be reached since then (ms since the epoch): claims wait; the
    /// engines run on until the deadline.
    Unreachable {
        since: i64,
    },
    /// The database answers but refuses writes since then (read-only, a full disk, too many
    /// connections: `DbError::refuses_writes_for_now`), so the renewal cannot be written:
    /// as [`Standing::Unreachable`] otherwise, but `status` says what is wrong.
    RefusingWrites {
        since: i64,
    },
    /// The lease ran out before it could be renewed; the daemon registers again.
    Lost,
}

/// A daemon's lease as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseStatus {
    pub node_id: String,
    /// Raised each time the daemon registers again: writes under an older one are fenced.
    pub epoch: i64,
    pub state: LeaseState,
    /// Since when the store could not be reached (ms since the epoch).
    pub unreachable_since: Option<i64>,
    /// Since when the store refuses writes (ms since the epoch).
    pub refusing_writes_since: Option<i64>,
    /// Writes refused because another daemon took this one's place (a fence).
    pub fenced_writes: u64,
    /// The lease's length now (`store.lease_ms`).
    pub lease_ms: i64,
}

/// [`Standing`] in `status`'s words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LeaseState {
    #[serde(rename = "held")]
    Held,
    #[serde(rename = "store unreachable")]
    StoreUnreachable,
    #[serde(rename = "store refuses writes")]
    StoreRefusesWrites,
    #[serde(rename = "lost")]
    Lost,
}

/// The lease, shared by the supervisor's parts (`actors::coordination::AmongOthers`).
pub struct Lease {
    pub node_id: String,
    epoch: AtomicI64,
    standing: Mutex<Standing>,
    /// The ids of the projects whose paths are directories here, as of the last renewal.
    serves: Mutex<Arc<Vec<String>>>,
    /// Writes refused by the fence since the daemon started.
    fenced_writes: AtomicU64,
    /// How many other daemons held a live lease at the last renewal: alone, this daemon
    /// takes every prompt it serves as a SQLite store's daemon does (its slot manager queues
    /// what has no room yet); with others, only what it has room for, leaving the rest to
    /// them.
    others: AtomicUsize,
    /// The highest epoch of this node known lost: the workers running prompts claimed under it
    /// (or an older one) stop, writing nothing more about them.
    lost: watch::Sender<i64>,
    /// How many prompts this daemon runs now (the supervisor's count), told at each renewal.
    running: std::sync::OnceLock<tokio::sync::watch::Receiver<usize>>,
    guard: Option<Guard>,
    lease_ms: AtomicI64,
    wanted: mpsc::UnboundedSender<Wanted>,
    /// Where the store is: the release at a clean stop connects anew.
    url: PgUrl,
    stop: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Reads `HOME/node.id`, or makes it (a new UUID, 0600): the daemon's identity across its
/// restarts.
pub fn node_id(home: &Path) -> std::io::Result<String> {
    let path = home.join("node.id");
    match std::fs::read_to_string(&path) {
        Ok(text) if uuid::Uuid::parse_str(text.trim()).is_ok() => Ok(text.trim().to_string()),
        Ok(_) => Err(std::io::Error::other(format!(
            "{} does not hold a node id; remove it to make a new one",
            path.display()
        ))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            crate::home::write_private(&path, &format!("{id}\n"))?;
            Ok(id)
        }
        Err(error) => Err(error),
    }
}

/// `HOME/node.id` if a daemon made it already (read only: for what looks at the store
/// without a daemon).
pub fn known_node_id(home: &Path) -> Option<String> {
    let text = std::fs::read_to_string(home.join("node.id")).ok()?;
    uuid::Uuid::parse_str(text.trim())
        .is_ok()
        .then(|| text.trim().to_string())
}

/// The margin the guard's deadline keeps before the lease's end: a tenth of it, at least a
/// quarter of a second, so the engines are gone before anyone may take their prompts.
fn margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(250))
}

impl Lease {
    /// Registers this daemon on the store at `url` and starts its heartbeat and its guard
    /// (`guard_program`: the corral binary). Blocks (call it off the async threads). Refused in
    /// one line when the node holds a live lease from another host or home.
    pub fn start(
        url: &PgUrl,
        home: &Path,
        guard_program: Option<PathBuf>,
        lease: Duration,
    ) -> Result<(Arc<Lease>, mpsc::UnboundedReceiver<Wanted>), String> {
        let node_id = node_id(home).map_err(|error| format!("the node id: {error}"))?;
        let conn = connect(url)?;
        let lease_ms = lease.as_millis() as i64;
        let registration = Registration {
            node_id: node_id.clone(),
            host: crate::host::name().to_string(),
            home: home.display().to_string(),
            pid: std::process::id(),
            lease_ms,
        };
        let sent = Instant::now();
        let epoch = daemons::register(&conn, &registration)
            .map_err(|error| format!("registering this daemon on the store: {error}"))?
            .ok_or_else(|| {
                format!(
                    "this daemon's node ({node_id}, HOME/node.id) holds a live lease from \
                     another host or home: a home is served by one daemon at a time"
                )
            })?;
        let guard = match guard_program {
            Some(program) => Some(Guard::start(&program).map_err(|error| {
                format!("starting the lease guard ({}): {error}", program.display())
            })?),
            None => None,
        };
        if let Some(guard) = &guard {
            guard.set_deadline(sent + lease - margin(lease));
        }
        let (wanted, wanted_rx) = mpsc::unbounded_channel();
        let lease = Arc::new(Lease {
            node_id,
            epoch: AtomicI64::new(epoch),
            standing: Mutex::new(Standing::Held),
            serves: Mutex::new(Arc::new(Vec::new())),
            fenced_writes: AtomicU64::new(0),
            others: AtomicUsize::new(usize::MAX),
            lost: watch::channel(0).0,
            running: std::sync::OnceLock::new(),
            guard,
            lease_ms: AtomicI64::new(lease_ms),
            wanted,
            url: url.clone(),
            stop: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let serves = served_projects(&conn).unwrap_or_default();
        let others = daemons::others_live(&conn, &lease.node_id).unwrap_or(1);
        lease.others.store(others.max(0) as usize, Ordering::SeqCst);
        // The others learn of this one at once (they stop taking work as if alone).
        let _ = listen::notify(&conn, listen::DAEMONS, &lease.node_id);
        *lock(&lease.serves) = Arc::new(serves);
        let (stop, stopped) = std::sync::mpsc::channel();
        *lock(&lease.stop) = Some(stop);
        let heartbeat = Heartbeat {
            lease: lease.clone(),
            url: url.clone(),
            registration,
            conn: Some(conn),
            stopped,
        };
        let thread = std::thread::Builder::new()
            .name("corral-heartbeat".into())
            .spawn(move || heartbeat.run())
            .map_err(|error| format!("starting the heartbeat: {error}"))?;
        *lock(&lease.thread) = Some(thread);
        Ok((lease, wanted_rx))
    }

    /// A new `store.lease_ms`: the next renewal takes a lease this long.
    pub fn set_length(&self, lease: Duration) {
        self.lease_ms
            .store(lease.as_millis() as i64, Ordering::SeqCst);
    }

    /// The claim prompts are taken under now.
    pub fn claim(&self) -> Claim {
        Claim {
            node_id: self.node_id.clone(),
            epoch: self.epoch.load(Ordering::SeqCst),
        }
    }

    pub fn standing(&self) -> Standing {
        lock(&self.standing).clone()
    }

    /// Whether claims may be made now.
    pub fn holds(&self) -> bool {
        self.standing() == Standing::Held
    }

    /// The projects served here (ids), as of the last renewal.
    pub fn serves(&self) -> Arc<Vec<String>> {
        lock(&self.serves).clone()
    }

    /// A write was refused by the fence: the lease of `epoch` is gone; the workers of that
    /// epoch stop (see [`Lease::lost`]).
    pub fn fenced(&self, epoch: i64) {
        self.fenced_writes.fetch_add(1, Ordering::SeqCst);
        self.mark_lost(epoch);
    }

    /// Tells the workers of `epoch` (and older) that its lease is gone: they stop.
    fn mark_lost(&self, epoch: i64) {
        self.lost.send_if_modified(|lost| {
            let newer = epoch > *lost;
            if newer {
                *lost = epoch;
            }
            newer
        });
    }

    /// Whether no other daemon held a live lease at the last renewal.
    pub fn alone(&self) -> bool {
        self.others.load(Ordering::SeqCst) == 0
    }

    /// Another daemon registered (its `corral_daemons` notice): this one is not alone from
    /// now on, without waiting for the next renewal to count it.
    pub fn other_registered(&self, node_id: &str) {
        if node_id != self.node_id {
            self.others.fetch_max(1, Ordering::SeqCst);
        }
    }

    pub fn fenced_writes(&self) -> u64 {
        self.fenced_writes.load(Ordering::SeqCst)
    }

    /// The highest epoch known lost (0: none), watched by the workers.
    pub fn lost(&self) -> watch::Receiver<i64> {
        self.lost.subscribe()
    }

    /// The count of prompts this daemon runs (`Life::working`), told to the others at
    /// each renewal.
    pub fn count_running(&self, running: tokio::sync::watch::Receiver<usize>) {
        let _ = self.running.set(running);
    }

    fn running(&self) -> usize {
        self.running.get().map_or(0, |running| *running.borrow())
    }

    /// A run's engine started: the guard ends its group if the lease runs out.
    pub fn run_started(&self, run_id: &str, pgid: i32, pid_start: Option<u64>) {
        if let Some(guard) = &self.guard {
            guard.run_started(run_id, pgid, pid_start);
        }
    }

    /// The value of [`crate::env::LEASE_GUARD`] for every child this daemon starts (its
    /// guard ends what carries it); `None` without a guard.
    pub fn child_mark(&self) -> Option<&str> {
        self.guard.as_ref().map(Guard::mark)
    }

    /// A run left process `pid` (started at `start`) that its project keeps: the guard
    /// leaves it when it ends the daemon's children.
    pub fn kept(&self, pid: i32, start: u64) {
        if let Some(guard) = &self.guard {
            guard.kept(pid, start);
        }
    }

    /// A run's engine ended.
    pub fn run_ended(&self, run_id: &str) {
        if let Some(guard) = &self.guard {
            guard.run_ended(run_id);
        }
    }

    /// What `status` says of it.
    pub fn describe(&self) -> LeaseStatus {
        let standing = self.standing();
        let state = match standing {
            Standing::Held => LeaseState::Held,
            Standing::Unreachable { .. } => LeaseState::StoreUnreachable,
            Standing::RefusingWrites { .. } => LeaseState::StoreRefusesWrites,
            Standing::Lost => LeaseState::Lost,
        };
        let (unreachable_since, refusing_writes_since) = match standing {
            Standing::Unreachable { since } => (Some(since), None),
            Standing::RefusingWrites { since } => (None, Some(since)),
            Standing::Held | Standing::Lost => (None, None),
        };
        LeaseStatus {
            node_id: self.node_id.clone(),
            epoch: self.epoch.load(Ordering::SeqCst),
            state,
            unreachable_since,
            refusing_writes_since,
            fenced_writes: self.fenced_writes(),
            lease_ms: self.lease_ms.load(Ordering::SeqCst),
        }
    }

    /// A clean stop: the heartbeat ends and the lease is given up (the prompts were requeued
    /// first), so nobody waits for it to run out. The guard is left as it is: each run struck
    /// itself off as it ended, and what is still listed is ended when this process exits.
    pub fn release(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
        match connect(&self.url) {
            Ok(conn) => {
                if let Err(error) = daemons::release(&conn, &self.claim()) {
                    tracing::warn!(%error, "the lease was not given up; it runs out by itself");
                }
                let _ = listen::notify(&conn, listen::DAEMONS, &self.node_id);
            }
            Err(error) => {
                tracing::warn!(error, "the lease was not given up; it runs out by itself")
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn connect(url: &PgUrl) -> Result<Conn, String> {
    PgConn::connect(&url.config(), &url.to_string())
        .map(Conn::from)
        .map_err(|error| error.to_string())
}

/// The ids of the projects this host can serve: those whose path is a directory here.
pub fn served_projects(conn: &Conn) -> crate::store::sql::Result<Vec<String>> {
    let projects: Vec<(String, String)> = conn.rows(
        "SELECT id, path FROM projects WHERE archived_at IS NULL ORDER BY id",
        args![],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(projects
        .into_iter()
        .filter(|(_, path)| Path::new(path).is_dir())
        .map(|(id, _)| id)
        .collect())
}

/// The heartbeat thread's state.
struct Heartbeat {
    lease: Arc<Lease>,
    url: PgUrl,
    registration: Registration,
    /// Its own connection; `None` after it broke, made again at the next beat.
    conn: Option<Conn>,
    stopped: std::sync::mpsc::Receiver<()>,
}

/// How soon a beat that could not reach the database is tried again.
const UNREACHABLE_RETRY: Duration = Duration::from_millis(250);

impl Heartbeat {
    fn run(mut self) {
        loop {
            let wait = self.beat();
            match self.stopped.recv_timeout(wait) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                // Stopped, or the lease dropped.
                _ => return,
            }
        }
    }

    fn lease_length(&self) -> Duration {
        Duration::from_millis(self.lease.lease_ms.load(Ordering::SeqCst).max(500) as u64)
    }

    /// One renewal; returns how long to wait for the next.
    fn beat(&mut self) -> Duration {
        let lease = self.lease_length();
        let period = lease / 3;
        let sent = Instant::now();
        let conn = match self.conn.take().filter(|conn| !is_closed(conn)) {
            Some(conn) => conn,
            None => match connect(&self.url) {
                Ok(conn) => conn,
                Err(error) => return self.unreachable(&error),
            },
        };
        let result = self.renew(&conn, lease, sent);
        self.conn = Some(conn);
        match result {
            Ok(wait) => wait.min(period),
            Err(error) if error.refuses_writes_for_now() => self.refusing_writes(&error),
            Err(error) => self.unreachable(&error.to_string()),
        }
    }

    fn renew(
        &mut self,
        conn: &Conn,
        lease: Duration,
        sent: Instant,
    ) -> crate::store::sql::Result<Duration> {
        let serves = served_projects(conn)?;
        let claim = self.lease.claim();
        let status = serde_json::json!({
            "running": self.lease.running(),
            "fenced_writes": self.lease.fenced_writes(),
        });
        let renewed = daemons::renew(conn, &claim, lease.as_millis() as i64, &serves, &status)?;
        match renewed {
            Some(_) => {
                if let Some(guard) = &self.lease.guard {
                    guard.set_deadline(sent + lease - margin(lease));
                }
                let was = std::mem::replace(&mut *lock(&self.lease.standing), Standing::Held);
                if was != Standing::Held {
                    // Back: what was queued or lost meanwhile is looked for now.
                    let _ = self.lease.wanted.send(Wanted::Rescue);
                    let _ = self.lease.wanted.send(Wanted::Claim);
                }
            }
            None => {
                // Ran out (a pause, a partition past the deadline): its workers stop, writing
                // nothing more; the node registers again under a new epoch.
                tracing::warn!(
                    node = self.lease.node_id,
                    epoch = claim.epoch,
                    "the lease ran out before it was renewed; registering again"
                );
                *lock(&self.lease.standing) = Standing::Lost;
                self.lease.mark_lost(claim.epoch);
                let sent = Instant::now();
                // The lease as long as it is now (`store.lease_ms` may have changed).
                self.registration.lease_ms = lease.as_millis() as i64;
                match daemons::register(conn, &self.registration)? {
                    Some(epoch) => {
                        self.lease.epoch.store(epoch, Ordering::SeqCst);
                        if let Some(guard) = &self.lease.guard {
                            guard.set_deadline(sent + lease - margin(lease));
                        }
                        *lock(&self.lease.standing) = Standing::Held;
                        let _ = listen::notify(conn, listen::DAEMONS, &self.lease.node_id);
                        let _ = self.lease.wanted.send(Wanted::Rescue);
                        let _ = self.lease.wanted.send(Wanted::Claim);
                    }
                    None => {
                        tracing::error!(
                            node = self.lease.node_id,
                            "this node holds a live lease elsewhere: this daemon claims nothing"
                        );
                    }
                }
            }
        }
        let changed = {
            let mut current = lock(&self.lease.serves);
            let changed = **current != serves;
            if changed {
                *current = Arc::new(serves);
            }
            changed
        };
        if changed {
            let _ = self.lease.wanted.send(Wanted::Claim);
        }
        let others = daemons::others_live(conn, &self.lease.node_id)?;
        self.lease
            .others
            .store(others.max(0) as usize, Ordering::SeqCst);
        let expiry = daemons::next_expiry(conn, &self.lease.node_id)?;
        Ok(match expiry {
            Some(0) => {
                let _ = self.lease.wanted.send(Wanted::Rescue);
                lease / 3
            }
            // Just past the other lease's end, so the rescue finds it run out.
            Some(left) => Duration::from_millis(left as u64 + 20),
            None => lease / 3,
        })
    }

    fn unreachable(&mut self, error: &str) -> Duration {
        let mut standing = lock(&self.lease.standing);
        if matches!(*standing, Standing::Held | Standing::RefusingWrites { .. }) {
            tracing::warn!(
                error,
                "the store cannot be reached: no claims; the engines run on until the lease's deadline"
            );
            *standing = Standing::Unreachable {
                since: crate::store::now_ms(),
            };
        }
        UNREACHABLE_RETRY
    }

    /// The renewal was refused as a write the store takes none of for now: retried as for a
    /// store out of reach, and said so.
    fn refusing_writes(&mut self, error: &crate::store::sql::DbError) -> Duration {
        let mut standing = lock(&self.lease.standing);
        if matches!(*standing, Standing::Held | Standing::Unreachable { .. }) {
            tracing::warn!(
                %error,
                "the store refuses writes: no claims; the engines run on until the lease's deadline"
            );
            *standing = Standing::RefusingWrites {
                since: crate::store::now_ms(),
            };
        }
        UNREACHABLE_RETRY
    }
}

fn is_closed(conn: &Conn) -> bool {
    conn.as_postgres().is_none_or(PgConn::is_closed)
}

/// A run's engine listed with the guard for as long as this lives (a worker holds it while
/// it runs the child): dropped, the run is struck off, whichever way it ended.
pub struct GuardedRun {
    lease: Arc<Lease>,
    run_id: String,
}

impl GuardedRun {
    pub fn new(lease: Arc<Lease>, run_id: &str, pgid: i32, pid_start: Option<u64>) -> Self {
        lease.run_started(run_id, pgid, pid_start);
        GuardedRun {
            lease,
            run_id: run_id.to_string(),
        }
    }
}

impl Drop for GuardedRun {
    fn drop(&mut self) {
        self.lease.run_ended(&self.run_id);
    }
}
