//! The ledger: the only code that writes the store.
//!
//! Two actors make it up:
//!
//! - [`LedgerWriter`] runs on a `SyncArbiter` with one thread and owns the one writing
//!   `rusqlite::Connection`. Writes are serialized by construction: there is no other writer
//!   to lock against.
//! - [`Ledger`] is a small async actor in front of it that implements group commit. A
//!   `SyncContext` cannot look into its mailbox, so the front collects the writes that arrive
//!   while the previous batch is committing and hands them over as one [`Commit`]: under load
//!   a whole burst costs one transaction, when idle a write is committed at once.
//!
//! Every write is a value of a type implementing [`LedgerWrite`] (a typed message with a typed
//! reply). Inside a batch each write runs in its own savepoint, so one failing write is rolled
//! back alone and the others still commit. Replies are sent only after the commit: a caller that
//! got `Ok` knows its row is in the store.
//!
//! [`LedgerHandle`] is the cloneable handle. Readers never come here: they open their own
//! read-only connections (`crate::store::open_reader`).
//!
//! **A store another program locks** (a `sqlite3` shell in a transaction, a backup): a write
//! is never dropped for it. The writer takes the lock with `BEGIN IMMEDIATE`, so a busy
//! store shows up before any write of the batch has run; it then waits and retries (SQLite's
//! busy handler sleeps inside each attempt, the writer backs off between them), for as long
//! as `store.lock_timeout_ms` allows each write, counted from when the write was handed to
//! the ledger. A write whose limit passes is given up alone, with
//! [`StoreError::LockTimeout`], and handed back to its caller unapplied
//! ([`LedgerHandle::write_keeping`]), so that what it carried can be kept for later; the rest
//! of the batch goes on waiting, in order. A `COMMIT` that finds the store busy is retried
//! the same way (the transaction stays open). While the writer waits, new writes gather in
//! the front; callers wait for their replies, which is what holds a session's engine back
//! (the worker stops reading its pipes). The checkpointer's and the idle truncation's
//! checkpoints never wait for a lock: a busy one is postponed to the next.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use rusqlite::Connection;

use crate::store::location::Location;
use crate::store::postgres::BeginAsks;
use crate::store::sql::{Conn, DbError, Dialect};
use tokio::sync::watch;

use crate::store::exec::{self, ExecCompletion, NewExec};
use crate::store::{
    approvals, asks, claims, daemons, dependencies, drivers, events, listen, migrations,
    open_writer, pauses, processes, projects, prompts, runs, schedules, sessions, settings,
    StoreError,
};

/// Commits between two checkpoints of the WAL. SQLite's own autocheckpoint runs inside the
/// commit that crosses its limit, so that commit's callers wait for it (a copy and an fsync:
/// 0.5 to 5 ms here). The ledger's checkpointer runs them on a connection and thread of its
/// own instead, beside the commits (a passive checkpoint never blocks a writer), so they are
/// on nobody's path. A few dozen small commits make a WAL of a few hundred KiB.
const CHECKPOINT_EVERY: u64 = 32;

/// How long the ledger must have had no write before it truncates a WAL that grew long. The
/// truncation runs on the writer's thread (a write that arrives meanwhile waits in the front
/// for its few milliseconds, like behind a commit), and never waits for a reader.
const IDLE_CHECKPOINT: Duration = Duration::from_millis(50);

/// SQLite's autocheckpoint, turned back on in the writer if the checkpointer cannot run, so
/// that the WAL stays bounded anyway (SQLite's default).
const FALLBACK_AUTOCHECKPOINT_PAGES: u32 = 1000;

/// The longest one attempt of the writer waits in SQLite's busy handler for a lock another
/// connection holds (a corral process's own commit takes milliseconds). Past it, the writer's
/// own retries take over, bounded by `store.lock_timeout_ms`.
const LOCK_ATTEMPT: Duration = Duration::from_secs(1);

/// The writer's pause between two attempts at a locked store: it starts short and doubles up
/// to the longest (the busy handler already sleeps inside an attempt; this only keeps a
/// store that answers busy at once from being asked in a loop).
const LOCK_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(200));

/// The writer's busy timeout: one attempt's wait.
fn attempt_wait() -> Duration {
    crate::store::busy_timeout().min(LOCK_ATTEMPT)
}

/// The most writes one transaction takes. Bounds how long a single commit can hold the write
/// lock (readers in WAL mode are never blocked, but other processes' writers are).
const MAX_BATCH: usize = 4096;

/// Errors a ledger caller sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    #[error("{0}")]
    Store(Arc<StoreError>),
    /// The ledger's threads are gone (the system is shutting down).
    #[error("the ledger is not running")]
    Stopped,
}

impl From<StoreError> for LedgerError {
    fn from(error: StoreError) -> Self {
        LedgerError::Store(Arc::new(error))
    }
}

impl LedgerError {
    /// Whether the store could not take the write for now (locked by another program,
    /// unreachable, refusing writes) for as long as the write may wait: the same write may
    /// succeed later.
    pub fn is_transient(&self) -> bool {
        self.store_error().is_some_and(StoreError::is_transient)
    }

    /// The store error underneath, if any.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            LedgerError::Store(error) => Some(error),
            LedgerError::Stopped => None,
        }
    }
}

/// A write the ledger can apply: a typed message whose reply is `Output`.
pub trait LedgerWrite: Send + 'static {
    type Output: Send + 'static;
    /// Applies the write inside the ledger's current transaction.
    fn apply(&self, connection: &Conn) -> Result<Self::Output, StoreError>;
}

/// A write with its reply, type-erased so that writes of every type share one batch.
trait Op: Send {
    /// Applies the write; says how it went.
    fn apply(&mut self, connection: &Conn) -> Applied;
    /// Forgets the result of a run rolled back with its batch, which is made again.
    fn forget(&mut self);
    /// When the write was handed to the ledger: its wait for a locked store counts from here.
    fn enqueued(&self) -> Instant;
    /// Delivers the reply once the batch's fate is known (see [`BatchEnd`]).
    fn finish(self: Box<Self>, end: BatchEnd);
}

/// How one write of a batch went.
enum Applied {
    Ran,
    /// It failed: rolled back alone, its error is its reply.
    Failed,
    /// The store refused it for now ([`DbError::refuses_writes_for_now`]; why): the whole
    /// batch is rolled back and waits, as for a locked store, then is made again.
    Refused(String),
}

/// How a batch ended, as each of its writes is told.
#[derive(Clone)]
enum BatchEnd {
    /// Committed: each write's own result (a write that failed alone is consumed).
    Committed,
    /// Not committed (never begun, or rolled back): each write goes back to its caller with
    /// the error, to keep what it carries for a later write.
    Unwritten(LedgerError),
    /// A `COMMIT` was cut off and whether it committed could not be learnt: each caller is
    /// told it failed, and the writes are consumed (making one again could store it twice).
    InDoubt(LedgerError),
}

impl BatchEnd {
    /// The end of a batch that failed with `error`, in doubt when a `COMMIT` of it was cut.
    fn failed(error: StoreError, in_doubt: bool) -> BatchEnd {
        match in_doubt {
            true => BatchEnd::InDoubt(error.into()),
            false => BatchEnd::Unwritten(error.into()),
        }
    }
}

/// A reply: the write's output, or why it did not commit with the write itself when it
/// surely did not.
type Reply<W> = Result<<W as LedgerWrite>::Output, Unwritten<W>>;

struct Pending<W: LedgerWrite, D> {
    write: Option<W>,
    result: Option<Result<W::Output, LedgerError>>,
    enqueued: Instant,
    deliver: D,
}

impl<W, D> Op for Pending<W, D>
where
    W: LedgerWrite,
    D: FnOnce(Reply<W>) + Send,
{
    fn apply(&mut self, connection: &Conn) -> Applied {
        let Some(write) = &self.write else {
            return Applied::Failed;
        };
        let result = write.apply(connection);
        let applied = match &result {
            Ok(_) => Applied::Ran,
            // Not its reply: the batch is made again.
            Err(error) if error.refuses_writes_for_now() => {
                return Applied::Refused(error.to_string())
            }
            Err(_) => Applied::Failed,
        };
        self.result = Some(result.map_err(LedgerError::from));
        applied
    }

    fn forget(&mut self) {
        self.result = None;
    }

    fn enqueued(&self) -> Instant {
        self.enqueued
    }

    fn finish(self: Box<Self>, end: BatchEnd) {
        let this = *self;
        let reply = match (end, this.result) {
            (BatchEnd::Committed, Some(Ok(output))) => Ok(output),
            (BatchEnd::Committed, Some(Err(error))) => Err(Unwritten { error, write: None }),
            (BatchEnd::Committed, None) => Err(Unwritten {
                error: LedgerError::Stopped,
                write: this.write,
            }),
            (BatchEnd::Unwritten(error), _) => Err(Unwritten {
                error,
                write: this.write,
            }),
            (BatchEnd::InDoubt(error), _) => Err(Unwritten { error, write: None }),
        };
        (this.deliver)(reply);
    }
}

fn erase<W: LedgerWrite>(write: W, deliver: impl FnOnce(Reply<W>) + Send + 'static) -> Box<dyn Op> {
    Box::new(Pending {
        write: Some(write),
        result: None,
        enqueued: Instant::now(),
        deliver,
    })
}

/// A write that did not commit: why, and the write itself when it surely did not (the store
/// stayed locked or unreachable past `store.lock_timeout_ms`, the batch was rolled back, or
/// the ledger stopped), so that its caller can keep what it carries for a later write. A
/// write that ran and failed alone in a committed batch is consumed, and so is one whose
/// batch's `COMMIT` was cut off without the server saying afterwards whether it committed.
pub struct Unwritten<W> {
    pub error: LedgerError,
    pub write: Option<W>,
}

impl<W> std::fmt::Debug for Unwritten<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwritten")
            .field("error", &self.error)
            .field("kept", &self.write.is_some())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The writer thread.

/// Owns the writing connection. Private: talk to it through [`LedgerHandle`].
struct LedgerWriter {
    /// `store.lock_timeout_ms` as read when the store opened: the limit while a PostgreSQL
    /// server cannot be reached, when it cannot be read (a locked SQLite file is read anew).
    lock_timeout: Duration,
    /// Set while a batch waits for a PostgreSQL server that cannot be reached (cleared once it
    /// answers) or for a store that refuses writes (cleared by the next commit): `status`
    /// shows it ([`LedgerHandle::store`]).
    waiting: Arc<std::sync::Mutex<Option<Waiting>>>,
    /// Where the store is; `path` names it in errors (the SQLite file, or the URL without its
    /// password).
    location: Location,
    path: PathBuf,
    /// Set when the supervisor shuts down: a write that finds the store locked is given up
    /// at once rather than at its limit ([`LedgerHandle::stop_waiting`]).
    stop_waiting: Arc<AtomicBool>,
    /// See [`LedgerHandle::refuse_at_once`].
    refuse_at_once: Arc<AtomicBool>,
    /// Opened by [`Open`] on this actor's own thread, so even the pragmas that write the file
    /// header (`journal_mode=WAL`) come from the ledger.
    connection: Option<Conn>,
    /// See [`LedgerHandle::set_node`].
    node: Arc<std::sync::OnceLock<String>>,
    /// The store's schema version as opened: what a batch may ask as it begins.
    version: u32,
}

impl Actor for LedgerWriter {
    type Context = SyncContext<Self>;
}

/// Opens the writing connection and, when `migrate`, brings the schema up to date.
#[derive(Message)]
#[rtype(result = "Result<u32, StoreError>")]
struct Open {
    migrate: bool,
}

impl Handler<Open> for LedgerWriter {
    type Result = Result<u32, StoreError>;

    fn handle(&mut self, message: Open, _: &mut SyncContext<Self>) -> Self::Result {
        let (connection, version) = match &self.location {
            Location::Sqlite(path) => open_sqlite_writer(path, message.migrate)?,
            Location::Postgres(url) => open_postgres_writer(url, message.migrate)?,
        };
        if version >= 1 {
            // A short command's first write is its exec's: compiled now, beside its work.
            exec::prepare_writes(&connection)
                .map_err(|error| StoreError::from_db(&self.path, error))?;
        }
        if version >= 1 {
            self.lock_timeout = crate::store::settings::store_lock_timeout(&connection);
        }
        self.connection = Some(connection);
        self.version = version;
        Ok(version)
    }
}

/// The SQLite writer: checked, migrated when asked, with one attempt's wait for a lock.
fn open_sqlite_writer(path: &Path, migrate: bool) -> Result<(Conn, u32), StoreError> {
    // Early commands (no migration) never create the file either.
    let (mut connection, mut version) = open_writer(path, migrate)?;
    if migrate {
        version = migrations::migrate(&mut connection)
            .map_err(|error| StoreError::from_sqlite(path, error))?;
    }
    // The checkpointer checkpoints (see `CHECKPOINT_EVERY`), not the commits.
    connection.pragma_update(None, "wal_autocheckpoint", 0)?;
    // One attempt's wait: the writer retries a locked store itself (see `Commit`).
    connection.busy_timeout(attempt_wait())?;
    Ok((Conn::from(connection), version))
}

/// The PostgreSQL writer: nothing but `SELECT`s run before the database is known to be a
/// corral store (or empty); early commands never migrate, nor write to a store below step 1.
fn open_postgres_writer(
    url: &crate::store::location::PgUrl,
    migrate: bool,
) -> Result<(Conn, u32), StoreError> {
    use crate::store::postgres::{self, Found};
    // Driven on the writer's own thread: its round trips hold the store's write lock.
    let connection = Conn::from(postgres::PgConn::connect_driven_here(
        &url.config(),
        &url.to_string(),
    )?);
    let version = match postgres::inspect(&connection)? {
        Found::Store { version } => version,
        Found::Foreign(foreign) => return Err(StoreError::Incompatible(foreign)),
    };
    let version = if migrate {
        postgres::migrate(&connection, migrations::SCHEMA_VERSION)?
    } else {
        version
    };
    Ok((connection, version))
}

/// A batch of writes to commit in one transaction.
#[derive(Message)]
#[rtype(result = "()")]
struct Commit(Vec<Box<dyn Op>>);

impl Handler<Commit> for LedgerWriter {
    type Result = ();

    fn handle(&mut self, Commit(mut ops): Commit, _: &mut SyncContext<Self>) {
        // A handle exists only once `Open` succeeded, so there is always a connection; were
        // there none, dropping the writes makes each caller see `LedgerError::Stopped`.
        let Some(connection) = self.connection.as_ref() else {
            return;
        };
        let mut lock = LockWait::new(
            &self.path,
            &self.stop_waiting,
            &self.refuse_at_once,
            &self.waiting,
        );
        lock.fallback_limit = self.lock_timeout;
        let asks = BeginAsks {
            // The feed came with schema step 8 (an early command may write an older store).
            feed: self.version >= 8,
            node: self.node.get().map(String::as_str),
            // Asked by the connection itself (it keeps the sessions' numbers).
            touched_since: None,
        };
        let end = commit_batch(connection, &self.path, &mut lock, &mut ops, &asks);
        lock.done(connection);
        if let Some(end) = end {
            for op in ops {
                op.finish(end.clone());
            }
        }
    }
}

/// How many times in a row a batch is made again after its connection was cut while the
/// server could be reached at once again: more means the batch itself ends its connections.
const CUTS_AT_MOST: usize = 3;

/// Begins, applies and commits a batch. A batch whose connection is cut (the PostgreSQL
/// server restarted, the network or the server ended it) is made again whole once the server
/// answers, within the writes' `store.lock_timeout_ms`: before its `COMMIT` nothing of it was
/// stored; after it, the next transaction asks the server whether the cut one committed (by
/// its transaction id, under the write lock the cut one held until it ended). So a database
/// going away mid-batch costs the writes a wait, not a failure. `None`: every write waited
/// its limit and was told so.
fn commit_batch(
    connection: &Conn,
    path: &Path,
    lock: &mut LockWait<'_>,
    ops: &mut Vec<Box<dyn Op>>,
    asks: &BeginAsks<'_>,
) -> Option<BatchEnd> {
    // The transaction id of a batch whose `COMMIT` was cut, while whether it committed is
    // unknown.
    let mut in_doubt: Option<i64> = None;
    let mut cuts = 0;
    // On PostgreSQL a batch first runs without savepoints (two round trips a write, under
    // the lock); a write that fails there rolls the batch back, made again with them. SQLite's
    // savepoints cost no round trip: it always has them.
    let mut savepoints = connection.dialect() == Dialect::Sqlite;
    loop {
        // IMMEDIATE takes the write lock up front, so another process's writer shows up
        // here, before any write ran, rather than midway through one.
        let begun = lock.retry(connection, ops, |connection| {
            connection.begin_write_asking(asks)
        });
        match begun {
            Ok(true) => {}
            Ok(false) => return None,
            Err(error) if error.refuses_writes_for_now() && in_doubt.is_none() => {
                match lock.wait_out_refusal(connection, ops, error.to_string()) {
                    Ok(true) => continue,
                    Ok(false) => return None,
                    Err(error) => return Some(BatchEnd::failed(error, false)),
                }
            }
            Err(error) => return Some(BatchEnd::failed(error, in_doubt.is_some())),
        }
        if let Some(xact) = in_doubt.take() {
            if let Some(end) = settle_cut_commit(connection, path, xact) {
                return Some(end);
            }
            tracing::info!("a batch whose COMMIT was cut off had not committed: made again");
            for op in ops.iter_mut() {
                op.forget();
            }
        }
        let failure = match apply_and_commit(connection, path, lock, ops, asks.node, savepoints) {
            Ok(()) => {
                lock.committed();
                return Some(BatchEnd::Committed);
            }
            Err(Failure::Store(error)) => return Some(BatchEnd::failed(error, false)),
            Err(Failure::OneFailed) => {
                savepoints = true;
                for op in ops.iter_mut() {
                    op.forget();
                }
                continue;
            }
            Err(Failure::Refused(why)) => {
                for op in ops.iter_mut() {
                    op.forget();
                }
                match lock.wait_out_refusal(connection, ops, why) {
                    Ok(true) => continue,
                    Ok(false) => return None,
                    Err(error) => return Some(BatchEnd::failed(error, false)),
                }
            }
            Err(failure) => failure,
        };
        cuts += 1;
        let doubt = matches!(failure, Failure::CommitCut(_));
        if cuts > CUTS_AT_MOST {
            let error = StoreError::Db(DbError::Unreachable(format!(
                "the connection to the store was cut {CUTS_AT_MOST} times in a row during one \
                 batch"
            )));
            return Some(BatchEnd::failed(error, doubt));
        }
        tracing::warn!(
            store = %path.display(),
            at_commit = doubt,
            "a batch's connection to the store was cut: it is made again when the store answers"
        );
        match failure {
            Failure::CommitCut(Some(xact)) => in_doubt = Some(xact),
            Failure::CommitCut(None) => return Some(BatchEnd::failed(cannot_say(), true)),
            _ => {
                for op in ops.iter_mut() {
                    op.forget();
                }
            }
        }
        // In doubt the writes wait as one: none may go back to its caller alone.
        lock.cut(doubt);
    }
}

/// After a cut `COMMIT`, inside the next write transaction: `None` when the cut one did not
/// commit (the batch is made again in this transaction), else how the batch ended (this
/// transaction rolled back).
fn settle_cut_commit(connection: &Conn, path: &Path, xact: i64) -> Option<BatchEnd> {
    let end = match connection.committed(xact) {
        Ok(Some(false)) => return None,
        Ok(Some(true)) => BatchEnd::Committed,
        Ok(None) => BatchEnd::failed(cannot_say(), true),
        Err(error) => BatchEnd::failed(StoreError::from_db(path, error), true),
    };
    if let Err(error) = connection.batch("ROLLBACK") {
        tracing::warn!(%error, "the check of a cut-off batch could not be rolled back");
    }
    Some(end)
}

/// Why a batch whose `COMMIT` was cut failed: whether it committed is unknown.
fn cannot_say() -> StoreError {
    StoreError::Db(DbError::Unreachable(
        "a COMMIT was cut off and the server cannot say whether it committed".into(),
    ))
}

/// What running a batch's writes came to (before its `COMMIT`).
enum Ran {
    /// Every write ran (or failed alone in its savepoint); the events' notice to send, if any.
    All(Option<String>),
    /// A write failed in a batch run without savepoints.
    OneFailed,
    /// The store refused a write for now (why).
    Refused(String),
}

/// Why an attempt at a batch did not commit.
enum Failure {
    /// The connection was cut before the `COMMIT`: nothing of the batch is stored.
    Cut,
    /// The connection was cut during the `COMMIT` of this transaction (its id, if known).
    CommitCut(Option<i64>),
    /// Anything else: the batch was rolled back and fails.
    Store(StoreError),
    /// A write failed in a batch run without savepoints: the batch was rolled back, to be made
    /// again with them so that the write fails alone.
    OneFailed,
    /// The store refused a write or the `COMMIT` for now (why): the batch was rolled back, to
    /// be made again once the store takes writes, within each write's limit.
    Refused(String),
}

/// Runs the batch's writes, each in its own savepoint when `savepoints`, and commits; rolls
/// the whole transaction back when a savepoint statement or the commit fails, or a write
/// fails without a savepoint to roll back to ([`Failure::OneFailed`]).
fn apply_and_commit(
    connection: &Conn,
    path: &Path,
    lock: &mut LockWait<'_>,
    ops: &mut Vec<Box<dyn Op>>,
    node: Option<&str>,
    savepoints: bool,
) -> Result<(), Failure> {
    // Without savepoints a failing write fails the attempt whichever statement it shows in,
    // so the writes whose answer nobody reads go with the next statement's round trip.
    let _holding = connection.holding_writes(!savepoints);
    let applied = (|| -> crate::store::sql::Result<Ran> {
        // On PostgreSQL the batch holds the store's write lock, so the feed numbers it gives
        // are exactly those after the last one now: the range its notice names.
        let shared = connection.dialect() == Dialect::Postgres;
        let feed_before = if shared {
            events::feed_seq_in_transaction(connection)?
        } else {
            0
        };
        // One round trip between two writes: the end of one's savepoint and the start of the
        // next's go together (on PostgreSQL each is a trip to the server under the lock). The
        // commit releases the last one.
        let mut last_failed = None;
        for op in ops.iter_mut() {
            if savepoints {
                connection.batch(match last_failed {
                    None => "SAVEPOINT op",
                    Some(false) => "RELEASE op; SAVEPOINT op",
                    Some(true) => "ROLLBACK TO op; RELEASE op; SAVEPOINT op",
                })?;
            }
            let failed = match op.apply(connection) {
                Applied::Ran => false,
                Applied::Failed if !savepoints => return Ok(Ran::OneFailed),
                Applied::Failed => true,
                Applied::Refused(why) => return Ok(Ran::Refused(why)),
            };
            last_failed = Some(failed);
        }
        if last_failed == Some(true) {
            connection.batch("ROLLBACK TO op; RELEASE op")?;
        }
        let mut notice = None;
        if shared {
            let feed_after = events::feed_seq_in_transaction(connection)?;
            if feed_after > feed_before {
                notice = Some(listen::events_payload(
                    node.unwrap_or(""),
                    feed_before + 1,
                    feed_after,
                ));
            }
        }
        Ok(Ran::All(notice))
    })();
    let committed = match applied {
        Ok(Ran::OneFailed) => Err(Failure::OneFailed),
        Ok(Ran::Refused(why)) => Err(Failure::Refused(why)),
        Ok(Ran::All(notice)) if connection.dialect() == Dialect::Postgres => {
            // No lock to wait for at a PostgreSQL COMMIT; a cut one cannot be made again on
            // another connection as it is (see `commit_batch`). The events' notice goes with
            // it, delivered as it commits.
            let notice = notice.as_deref().map(|payload| (listen::EVENTS, payload));
            connection
                .commit_notifying(notice)
                .map_err(|error| match error.is_connection_lost() {
                    true => Failure::CommitCut(connection.write_xact()),
                    // Refused at the commit (a deferred check, a full disk): nothing committed.
                    false if error.refuses_writes_for_now() => Failure::Refused(error.to_string()),
                    // A held write of the last op failed: nothing committed.
                    false if connection.held_write_failed() => Failure::OneFailed,
                    false => Failure::Store(StoreError::from_db(path, error)),
                })
        }
        Ok(Ran::All(_)) => {
            // A busy COMMIT leaves the transaction open: it is retried as it is (in WAL mode
            // the write lock is held already, so this is for the odd case only). Its writes
            // have run: none is given up here.
            lock.committing();
            match lock.retry(connection, ops, |connection| connection.batch("COMMIT")) {
                Ok(_) => Ok(()),
                // The transaction is rolled back below: the batch is made again whole.
                Err(error) if error.refuses_writes_for_now() => {
                    Err(Failure::Refused(error.to_string()))
                }
                Err(error) => Err(Failure::Store(error)),
            }
        }
        Err(error) if error.is_connection_lost() => Err(Failure::Cut),
        Err(error) => Err(Failure::Store(StoreError::from_db(path, error))),
    };
    if committed.is_err() && connection.in_transaction() {
        if let Err(error) = connection.batch("ROLLBACK") {
            tracing::error!(%error, "the failed batch could not be rolled back");
        }
    }
    committed
}

/// Why the writer's writes wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Another connection holds the store's write lock.
    Locked,
    /// The PostgreSQL server cannot be reached (each attempt connects again).
    Unreachable,
    /// The store answers but refuses writes for now (why): read-only, a full disk, ….
    Refused(String),
}

/// Whether an attempt is worth making again at once, as it is: SQLite said another connection
/// holds a lock it needs; PostgreSQL's `BEGIN` waited its attempt's time for the write lock
/// (55P03: another session holds it); the server went away (the next `BEGIN` reconnects). A
/// store that refuses writes is not ([`LockWait::wait_out_refusal`]): its batch is rolled back
/// and made again whole.
fn waiting_for(error: &DbError) -> Option<Waiting> {
    let locked = match error {
        DbError::Sqlite(error) => matches!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        ),
        DbError::Postgres(error) => {
            error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
        }
        _ => false,
    };
    if locked {
        Some(Waiting::Locked)
    } else if error.is_connection_lost() {
        Some(Waiting::Unreachable)
    } else {
        None
    }
}

/// The writer's wait for a store that cannot take its writes for now ([`Waiting`]): attempts
/// bounded by each write's `store.lock_timeout_ms`, with a backoff between them. Set up for
/// free: it reads the limit only when the store is found locked.
struct LockWait<'a> {
    path: &'a Path,
    /// Told while the writes wait (the handle's `store()` shows an unreachable server and a
    /// store refusing writes); cleared when an attempt goes through.
    told: &'a std::sync::Mutex<Option<Waiting>>,
    /// The limit when the server cannot be reached, so the setting cannot be read.
    fallback_limit: Duration,
    /// The supervisor shuts down: no write waits for the lock any more.
    stop_waiting: &'a AtomicBool,
    /// A store that refuses writes gives them up at once ([`LedgerHandle::refuse_at_once`]).
    refuse_at_once: &'a AtomicBool,
    /// The limit and when the wait began, once the store was found locked.
    waiting: Option<(Duration, Instant)>,
    backoff: Duration,
    /// The batch's writes have run: none may be given up alone any more.
    committing: bool,
    /// The busy timeout was set to none for a shutdown ([`LedgerHandle::stop_waiting`]).
    answer_at_once: bool,
    /// Why the last attempt did not go through.
    why: Waiting,
}

impl<'a> LockWait<'a> {
    fn new(
        path: &'a Path,
        stop_waiting: &'a AtomicBool,
        refuse_at_once: &'a AtomicBool,
        told: &'a std::sync::Mutex<Option<Waiting>>,
    ) -> Self {
        LockWait {
            path,
            told,
            refuse_at_once,
            fallback_limit: Duration::from_millis(
                crate::store::settings::DEFAULT_STORE_LOCK_TIMEOUT_MS,
            ),
            stop_waiting,
            waiting: None,
            backoff: LOCK_BACKOFF.0,
            committing: false,
            answer_at_once: false,
            why: Waiting::Locked,
        }
    }

    /// The writes have run: from now on the batch waits as one, a full limit from the first
    /// busy `COMMIT`.
    fn committing(&mut self) {
        self.committing = true;
        self.waiting = self.waiting.map(|(limit, _)| (limit, Instant::now()));
    }

    /// The batch's connection was cut: it is made again, its writes given up one by one at
    /// their limits as before their first run, or (`in_doubt`: its `COMMIT` was cut) as one.
    fn cut(&mut self, in_doubt: bool) {
        self.committing = in_doubt;
    }

    fn tell(&self, why: Option<Waiting>) {
        if let Ok(mut told) = self.told.lock() {
            *told = why;
        }
    }

    /// A commit went through: the store takes writes.
    fn committed(&self) {
        self.tell(None);
    }

    /// Runs `attempt` until it goes through or fails for a reason not worth waiting out
    /// ([`waiting_for`]). Meanwhile each write whose limit passed is given up (its reply says
    /// why, and hands the write back) and the others wait on, in order. `Ok(false)`: no write
    /// is left.
    fn retry(
        &mut self,
        connection: &Conn,
        ops: &mut Vec<Box<dyn Op>>,
        attempt: impl Fn(&Conn) -> crate::store::sql::Result<()>,
    ) -> Result<bool, StoreError> {
        if !self.committing && self.stop_waiting.load(Ordering::SeqCst) {
            // At shutdown a locked store answers at once (`done` sets the wait back).
            connection.set_lock_wait(Duration::ZERO);
            self.answer_at_once = true;
        }
        loop {
            let why = match attempt(connection) {
                Ok(()) => {
                    // The server answers (whether it takes writes, the commit tells).
                    if let Ok(mut told) = self.told.lock() {
                        if *told == Some(Waiting::Unreachable) {
                            *told = None;
                        }
                    }
                    return Ok(true);
                }
                Err(error) => match waiting_for(&error) {
                    Some(why) => why,
                    None => return Err(StoreError::from_db(self.path, error)),
                },
            };
            if !self.wait_out(connection, ops, why)? {
                return Ok(false);
            }
        }
    }

    /// The pause after a batch the store refused (`why`), rolled back: its writes are made
    /// again from the start, each given up at its limit; with [`LedgerHandle::refuse_at_once`]
    /// they are all given up now.
    fn wait_out_refusal(
        &mut self,
        connection: &Conn,
        ops: &mut Vec<Box<dyn Op>>,
        why: String,
    ) -> Result<bool, StoreError> {
        self.committing = false;
        if self.refuse_at_once.load(Ordering::SeqCst) {
            self.why = Waiting::Refused(why);
            for op in std::mem::take(ops) {
                op.finish(BatchEnd::Unwritten(self.timeout(Duration::ZERO).into()));
            }
            return Ok(false);
        }
        self.wait_out(connection, ops, Waiting::Refused(why))
    }

    /// One pause after an attempt that did not go through for `why`: gives up the writes
    /// whose limit passed, then sleeps the backoff. `Ok(true)`: try again; `Ok(false)`: no
    /// write is left; `Err`: the batch, waiting as one, passed its limit.
    fn wait_out(
        &mut self,
        connection: &Conn,
        ops: &mut Vec<Box<dyn Op>>,
        why: Waiting,
    ) -> Result<bool, StoreError> {
        if matches!(why, Waiting::Unreachable | Waiting::Refused(_)) {
            self.tell(Some(why.clone()));
        }
        let unreachable = why == Waiting::Unreachable;
        if self.waiting.is_none() || self.why != why {
            match &why {
                Waiting::Unreachable => tracing::warn!(
                    store = %self.path.display(),
                    "the store cannot be reached: writes wait for it"
                ),
                Waiting::Locked => tracing::warn!(
                    store = %self.path.display(),
                    "the store is locked by another writer: writes wait for it"
                ),
                Waiting::Refused(reason) => tracing::warn!(
                    store = %self.path.display(),
                    %reason,
                    "the store refuses writes for now: writes wait for it"
                ),
            }
        }
        self.why = why;
        let fallback = self.fallback_limit;
        let (limit, since) = *self.waiting.get_or_insert_with(|| {
            let limit = if unreachable {
                fallback
            } else {
                crate::store::settings::store_lock_timeout(connection)
            };
            (limit, Instant::now())
        });
        let now = Instant::now();
        // At shutdown the writes that never ran go back to their callers now (a worker
        // keeps its events in the spill journal, `store::spill`): the daemon's own wait for
        // its workers is shorter than the limit.
        if !self.committing && self.stop_waiting.load(Ordering::SeqCst) {
            for op in std::mem::take(ops) {
                op.finish(BatchEnd::Unwritten(self.timeout(since.elapsed()).into()));
            }
            return Ok(false);
        }
        let deadline = if self.committing {
            // The writes have run: the batch waits as one, from the first busy COMMIT.
            if now >= since + limit {
                return Err(self.timeout(limit));
            }
            since + limit
        } else {
            let (expired, waiting): (Vec<_>, Vec<_>) = std::mem::take(ops)
                .into_iter()
                .partition(|op| now >= op.enqueued() + limit);
            *ops = waiting;
            for op in expired {
                op.finish(BatchEnd::Unwritten(self.timeout(limit).into()));
            }
            match ops.iter().map(|op| op.enqueued() + limit).min() {
                Some(deadline) => deadline,
                None => return Ok(false),
            }
        };
        std::thread::sleep(self.backoff.min(deadline.saturating_duration_since(now)));
        self.backoff = (self.backoff * 2).min(LOCK_BACKOFF.1);
        // The next attempt waits no longer than the earliest write may.
        let left = deadline.saturating_duration_since(Instant::now());
        connection.set_lock_wait(attempt_wait().min(left).max(Duration::from_millis(1)));
        Ok(true)
    }

    fn timeout(&self, limit: Duration) -> StoreError {
        let path = self.path.to_path_buf();
        match &self.why {
            Waiting::Locked => StoreError::LockTimeout {
                path,
                waited: limit,
            },
            Waiting::Unreachable => StoreError::Unreachable {
                path,
                waited: limit,
            },
            Waiting::Refused(why) => StoreError::Refusing {
                path,
                why: why.clone(),
            },
        }
    }

    /// Ends the wait: the busy timeout back to one attempt's, and a word when the lock came.
    fn done(self, connection: &Conn) {
        if self.answer_at_once && self.waiting.is_none() {
            connection.set_lock_wait(attempt_wait());
        }
        if let Some((_, since)) = self.waiting {
            connection.set_lock_wait(attempt_wait());
            tracing::warn!(
                store = %self.path.display(),
                waited_ms = since.elapsed().as_millis() as u64,
                "the store's wait ended"
            );
        }
    }
}

/// Truncates a WAL that grew long (see `store::truncate_long_wal`), sent by the front when
/// the ledger is idle. Without waiting for readers: the busy timeout is 0 for the call, so a
/// reader in the middle of a transaction only postpones it.
#[derive(Message)]
#[rtype(result = "()")]
struct TruncateLong;

impl Handler<TruncateLong> for LedgerWriter {
    type Result = ();

    fn handle(&mut self, _: TruncateLong, _: &mut SyncContext<Self>) {
        // A SQLite WAL only; PostgreSQL keeps its own log.
        let Some(connection) = self.connection.as_ref().and_then(Conn::as_sqlite) else {
            return;
        };
        if connection.busy_timeout(Duration::ZERO).is_ok() {
            crate::store::truncate_long_wal(connection, &self.path);
        }
        if let Err(error) = connection.busy_timeout(attempt_wait()) {
            tracing::warn!(%error, "the writer's busy timeout could not be restored");
        }
    }
}

/// Turns SQLite's autocheckpoint back on in the writer: the checkpointer cannot run.
#[derive(Message)]
#[rtype(result = "()")]
struct AutoCheckpoint;

impl Handler<AutoCheckpoint> for LedgerWriter {
    type Result = ();

    fn handle(&mut self, _: AutoCheckpoint, _: &mut SyncContext<Self>) {
        if let Some(connection) = self.connection.as_ref().and_then(Conn::as_sqlite) {
            let set =
                connection.pragma_update(None, "wal_autocheckpoint", FALLBACK_AUTOCHECKPOINT_PAGES);
            if let Err(error) = set {
                tracing::warn!(%error, "the writer's autocheckpoint could not be turned on");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checkpointer.

/// Moves committed pages from the WAL into the database file, on a thread and connection of
/// its own so that no commit waits for it. It changes no row: the ledger's writer is still
/// the only writer of the store's content. Started by the front at the first checkpoint, so a
/// short `corral` process never starts it (the next writer to open the store truncates a long
/// WAL then).
struct LedgerCheckpointer {
    path: PathBuf,
    /// Opened at the first checkpoint.
    connection: Option<Connection>,
}

impl Actor for LedgerCheckpointer {
    type Context = SyncContext<Self>;
}

/// A passive checkpoint: as many WAL frames as no reader still needs are copied into the
/// database file, without blocking the writer. Replies `false` when the checkpointer cannot
/// open the store.
#[derive(Message)]
#[rtype(result = "bool")]
struct Checkpoint;

impl Handler<Checkpoint> for LedgerCheckpointer {
    type Result = bool;

    fn handle(&mut self, _: Checkpoint, _: &mut SyncContext<Self>) -> bool {
        if self.connection.is_none() {
            match crate::store::open_checkpointer(&self.path) {
                Ok(connection) => self.connection = Some(connection),
                Err(error) => {
                    tracing::warn!(%error, "the WAL checkpointer could not open the store");
                    return false;
                }
            }
        }
        let Some(connection) = &self.connection else {
            return false;
        };
        let result = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        if let Err(error) = result {
            tracing::debug!(%error, "WAL checkpoint postponed");
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// The group-commit front.

/// Gathers writes while a batch is committing. Private: see [`LedgerHandle`].
struct Ledger {
    writer: Addr<LedgerWriter>,
    /// The store, for the checkpointer.
    path: PathBuf,
    /// Writes waiting for the next transaction.
    pending: Vec<Box<dyn Op>>,
    /// Whether a [`Commit`] is with the writer now; while it is, writes only accumulate.
    committing: bool,
    /// The checkpointer, once the first checkpoint is due.
    checkpointer: Option<Addr<LedgerCheckpointer>>,
    /// Set when the checkpointer could not run: SQLite's autocheckpoint does its work.
    checkpointer_failed: bool,
    /// Whether a checkpoint is with the checkpointer now (one at a time).
    checkpointing: bool,
    /// Commits since the last checkpoint was asked for.
    uncheckpointed: u64,
    /// The idle truncation's timer, armed when a commit leaves nothing pending.
    idle: Option<SpawnHandle>,
    /// How many checkpoints have finished: a notification for whoever waits for one.
    checkpointed: watch::Sender<u64>,
    stats: LedgerStats,
}

/// Counters of the group commit, for tests and benchmarks: `writes / commits` is the mean
/// batch size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, MessageResponse)]
pub struct LedgerStats {
    /// Transactions handed to the writer.
    pub commits: u64,
    /// Writes in those transactions.
    pub writes: u64,
    /// Checkpoints asked for: passive ones of the checkpointer, idle truncations of the
    /// writer.
    pub checkpoints: u64,
}

#[derive(Message)]
#[rtype(result = "LedgerStats")]
struct GetStats;

impl Handler<GetStats> for Ledger {
    type Result = LedgerStats;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> LedgerStats {
        self.stats
    }
}

impl Actor for Ledger {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Enqueue(Box<dyn Op>);

impl Handler<Enqueue> for Ledger {
    type Result = ();

    fn handle(&mut self, Enqueue(op): Enqueue, ctx: &mut Context<Self>) {
        self.pending.push(op);
        self.flush(ctx);
    }
}

impl Ledger {
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.committing || self.pending.is_empty() {
            return;
        }
        if let Some(idle) = self.idle.take() {
            ctx.cancel_future(idle);
        }
        let take = self.pending.len().min(MAX_BATCH);
        let batch: Vec<Box<dyn Op>> = self.pending.drain(..take).collect();
        self.committing = true;
        self.stats.commits += 1;
        self.stats.writes += batch.len() as u64;
        ctx.spawn(
            self.writer
                .send(Commit(batch))
                .into_actor(self)
                .map(|_, ledger, ctx| {
                    ledger.committing = false;
                    ledger.uncheckpointed += 1;
                    ledger.flush(ctx);
                    if ledger.uncheckpointed >= CHECKPOINT_EVERY {
                        ledger.checkpoint(ctx);
                    }
                    if !ledger.committing {
                        ledger.arm_idle_checkpoint(ctx);
                    }
                }),
        );
    }

    /// Hands a passive checkpoint to the checkpointer, unless one is running (the next
    /// commit asks again).
    fn checkpoint(&mut self, ctx: &mut Context<Self>) {
        if self.checkpointing || self.checkpointer_failed {
            return;
        }
        self.checkpointing = true;
        self.uncheckpointed = 0;
        self.stats.checkpoints += 1;
        let path = self.path.clone();
        let checkpointer = self.checkpointer.get_or_insert_with(|| {
            SyncArbiter::start(1, move || LedgerCheckpointer {
                path: path.clone(),
                connection: None,
            })
        });
        ctx.spawn(
            checkpointer
                .send(Checkpoint)
                .into_actor(self)
                .map(|ran, ledger, ctx| {
                    ledger.checkpointing = false;
                    if matches!(ran, Ok(true)) {
                        ledger.checkpointed.send_modify(|done| *done += 1);
                    } else {
                        ledger.checkpointer_failed = true;
                        ledger.writer.do_send(AutoCheckpoint);
                    }
                    // An idle truncation put off while this checkpoint ran is due again.
                    if !ledger.committing && ledger.pending.is_empty() {
                        ledger.arm_idle_checkpoint(ctx);
                    }
                }),
        );
    }

    /// Truncates a long WAL after [`IDLE_CHECKPOINT`] without a write (a write cancels the
    /// timer).
    fn arm_idle_checkpoint(&mut self, ctx: &mut Context<Self>) {
        if let Some(idle) = self.idle.take() {
            ctx.cancel_future(idle);
        }
        self.idle =
            Some(ctx.run_later(IDLE_CHECKPOINT, |ledger, ctx| {
                ledger.idle = None;
                // A commit in flight arms the timer again when it ends, and so does a passive
                // checkpoint (the truncation, which never waits, would find the checkpoint lock
                // taken and leave the WAL long). A short process (fewer commits than one
                // checkpoint's worth) leaves the WAL to the next opener.
                if ledger.committing
                    || ledger.checkpointing
                    || ledger.stats.commits < CHECKPOINT_EVERY
                {
                    return;
                }
                ledger.committing = true;
                ledger.stats.checkpoints += 1;
                ctx.spawn(ledger.writer.send(TruncateLong).into_actor(ledger).map(
                    |_, ledger, ctx| {
                        ledger.committing = false;
                        ledger.checkpointed.send_modify(|done| *done += 1);
                        ledger.flush(ctx);
                    },
                ));
            }));
    }
}

// ---------------------------------------------------------------------------------------------
// The handle.

/// What names the store in `status`.
struct StoreInfo {
    kind: &'static str,
    at: String,
}

/// The cloneable way to write the store. Needs a running actix system.
#[derive(Clone)]
pub struct LedgerHandle {
    front: Addr<Ledger>,
    /// What the store is, for `status`.
    store: Arc<StoreInfo>,
    waiting: Arc<std::sync::Mutex<Option<Waiting>>>,
    #[cfg_attr(not(any(test, feature = "testkit")), allow(dead_code))]
    checkpointed: watch::Receiver<u64>,
    stop_waiting: Arc<AtomicBool>,
    refuse_at_once: Arc<AtomicBool>,
    /// This daemon's node on a shared store, named in the `corral_events` notice of each
    /// batch that stored events ([`LedgerHandle::set_node`]).
    node: Arc<std::sync::OnceLock<String>>,
}

impl LedgerHandle {
    /// Starts the ledger on the SQLite store at `path`, creating the file if needed. With
    /// `migrate` the schema is brought up to date first; without it (early commands) the store
    /// is used as it is. Returns the handle and the schema version.
    #[cfg(any(test, feature = "testkit"))]
    pub async fn start(path: &Path, migrate: bool) -> Result<(LedgerHandle, u32), LedgerError> {
        Self::start_at(&Location::Sqlite(path.to_path_buf()), migrate).await
    }

    /// [`start`](Self::start) on the store at `location`, SQLite or PostgreSQL.
    pub async fn start_at(
        location: &Location,
        migrate: bool,
    ) -> Result<(LedgerHandle, u32), LedgerError> {
        // What names the store in errors and log lines.
        let path = match location {
            Location::Sqlite(path) => path.clone(),
            Location::Postgres(url) => PathBuf::from(url.to_string()),
        };
        let owned = path.clone();
        let at = location.clone();
        let stop_waiting = Arc::new(AtomicBool::new(false));
        let flag = stop_waiting.clone();
        let refuse_at_once = Arc::new(AtomicBool::new(false));
        let refusing = refuse_at_once.clone();
        let waiting: Arc<std::sync::Mutex<Option<Waiting>>> = Arc::default();
        let told = waiting.clone();
        let node: Arc<std::sync::OnceLock<String>> = Arc::default();
        let writer_node = node.clone();
        let store = Arc::new(StoreInfo {
            kind: if location.is_postgres() {
                "postgres"
            } else {
                "sqlite"
            },
            at: path.display().to_string(),
        });
        let writer = SyncArbiter::start(1, move || LedgerWriter {
            lock_timeout: Duration::from_millis(
                crate::store::settings::DEFAULT_STORE_LOCK_TIMEOUT_MS,
            ),
            waiting: told.clone(),
            location: at.clone(),
            path: owned.clone(),
            stop_waiting: flag.clone(),
            refuse_at_once: refusing.clone(),
            connection: None,
            node: writer_node.clone(),
            version: 0,
        });
        let version = writer
            .send(Open { migrate })
            .await
            .map_err(|_| LedgerError::Stopped)??;
        let (checkpointed, checkpointed_rx) = watch::channel(0);
        let front = Ledger {
            writer,
            path,
            pending: Vec::new(),
            committing: false,
            checkpointer: None,
            // PostgreSQL has no WAL of ours to checkpoint.
            checkpointer_failed: location.is_postgres(),
            checkpointing: false,
            uncheckpointed: 0,
            idle: None,
            checkpointed,
            stats: LedgerStats::default(),
        }
        .start();
        Ok((
            LedgerHandle {
                front,
                store,
                waiting,
                checkpointed: checkpointed_rx,
                stop_waiting,
                refuse_at_once,
                node,
            },
            version,
        ))
    }

    /// Applies `write` in the next group commit and answers once it is durable. While
    /// another program locks the store, the answer waits (at most `store.lock_timeout_ms`).
    pub async fn write<W: LedgerWrite>(&self, write: W) -> Result<W::Output, LedgerError> {
        self.write_keeping(write)
            .await
            .map_err(|unwritten| unwritten.error)
    }

    /// [`write`](Self::write), but a write that never ran comes back with the error: what
    /// it carries (a session's events, a prompt's end) can be kept for the next write.
    pub async fn write_keeping<W: LedgerWrite>(&self, write: W) -> Reply<W> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let op = erase(write, move |result| {
            let _ = sender.send(result);
        });
        self.front.do_send(Enqueue(op));
        receiver.await.unwrap_or(Err(Unwritten {
            error: LedgerError::Stopped,
            write: None,
        }))
    }

    /// [`write`](Self::write) for what must not be lost to a locked store: a write given up
    /// at `store.lock_timeout_ms` is made again, until it is stored, `stop` turns true (the
    /// daemon's shutdown), or it fails for another reason.
    pub async fn write_until_stored<W: LedgerWrite>(
        &self,
        mut write: W,
        stop: &watch::Receiver<bool>,
    ) -> Result<W::Output, LedgerError> {
        loop {
            match self.write_keeping(write).await {
                Ok(output) => return Ok(output),
                Err(Unwritten {
                    error,
                    write: Some(kept),
                }) if error.is_transient() && !*stop.borrow() => {
                    tracing::warn!(%error, "a write kept: trying it again");
                    write = kept;
                }
                Err(unwritten) => return Err(unwritten.error),
            }
        }
    }

    /// From now on a write that finds the store locked by another program is given up at
    /// once, unapplied (`StoreError::LockTimeout`), instead of at `store.lock_timeout_ms`;
    /// a write that waits now is given up within one attempt (at most a second). Called when
    /// the supervisor shuts down: its workers keep what they could not store in the spill
    /// journal before the daemon exits.
    pub fn stop_waiting(&self) {
        self.stop_waiting.store(true, Ordering::SeqCst);
    }

    /// From now on a store that refuses writes (read-only, a full disk) has them given up at
    /// once, unapplied ([`StoreError::Refusing`]), instead of waited out. For a short command:
    /// a lock is a matter of another writer's commit, but a store that refuses writes stays so
    /// until someone acts, and the person who typed the command is told now. The daemon waits
    /// it out: its runs' ends must not be lost.
    pub fn refuse_at_once(&self) {
        self.refuse_at_once.store(true, Ordering::SeqCst);
    }

    /// Names this daemon's node (shared store, once registered): every batch that stores
    /// events then tells the other daemons, inside its transaction (`NOTIFY corral_events,
    /// '<node>:<first>:<last>'`, delivered at the commit), so they publish them live.
    pub fn set_node(&self, node_id: &str) {
        let _ = self.node.set(node_id.to_string());
    }

    /// What the store is (`kind`: `sqlite` or `postgres`; `at`: the file, or the URL without
    /// its password), whether writes are waiting for a server that cannot be reached
    /// (`reachable`), and why the store refuses writes while they wait for it to take them
    /// (`refusing_writes`, else null).
    pub fn store(&self) -> crate::protocol::status::StoreStatus {
        let waiting = self
            .waiting
            .lock()
            .map(|waiting| waiting.clone())
            .ok()
            .flatten();
        let refusing = match &waiting {
            Some(Waiting::Refused(why)) => Some(why.clone()),
            _ => None,
        };
        crate::protocol::status::StoreStatus {
            kind: self.store.kind.to_string(),
            at: self.store.at.clone(),
            reachable: waiting != Some(Waiting::Unreachable),
            refusing_writes: refusing,
            checked: None,
        }
    }

    /// The number of WAL checkpoints finished so far; it changes when one finishes.
    #[cfg(any(test, feature = "testkit"))]
    pub fn checkpoints(&self) -> watch::Receiver<u64> {
        self.checkpointed.clone()
    }

    /// How many transactions and writes the ledger has committed so far.
    #[cfg(any(test, feature = "testkit"))]
    pub async fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.front
            .send(GetStats)
            .await
            .map_err(|_| LedgerError::Stopped)
    }
}

// ---------------------------------------------------------------------------------------------
// The writes: one type each, in `writes.rs`.

mod writes;
pub use writes::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::exec::ExecCompletion;
    use crate::store::exec::Outcome;
    use futures::future::join_all;

    fn exec(id: &str) -> NewExec {
        NewExec {
            id: id.into(),
            trace_id: id.into(),
            parent_exec_id: None,
            caller_session_id: None,
            via_agent: false,
            argv: vec!["corral".into(), "test".into()],
            cwd: None,
            repo: None,
            pid: 1,
            pid_start: None,
            started_at: 1,
            completion: None,
        }
    }

    fn count(path: &Path) -> i64 {
        crate::store::open_reader(path)
            .unwrap()
            .query_row("SELECT count(*) FROM execs", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn writes_that_arrive_together_share_a_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            let (ledger, version) = LedgerHandle::start(&path, true).await.unwrap();
            assert_eq!(version, migrations::SCHEMA_VERSION);
            let writes = (0..500).map(|index| ledger.write(RecordExec(exec(&format!("e{index}")))));
            for result in join_all(writes).await {
                result.unwrap();
            }
            let stats = ledger.stats().await.unwrap();
            assert_eq!(stats.writes, 500);
            assert!(stats.commits < 50, "{stats:?}: writes were not grouped");
            // Every reply came after its commit: a reader sees all rows now.
            assert_eq!(count(&path), 500);
        });
    }

    #[test]
    fn a_failing_write_is_rolled_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            ledger.write(RecordExec(exec("dup"))).await.unwrap();
            let results = join_all([
                ledger.write(RecordExec(exec("a"))),
                ledger.write(RecordExec(exec("dup"))),
                ledger.write(RecordExec(exec("b"))),
            ])
            .await;
            assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
            assert!(results[1].is_err(), "a duplicate id must fail");
            assert_eq!(count(&path), 3);
            let completed = ledger
                .write(CompleteExec {
                    id: "a".into(),
                    completion: ExecCompletion {
                        completed_at: 2,
                        exit_code: 0,
                        outcome: Outcome::Succeeded,
                        signal: None,
                    },
                })
                .await
                .unwrap();
            assert!(completed);
        });
    }

    #[test]
    fn a_whole_exec_completes_its_row_when_its_start_is_stored_already() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            let whole = |id: &str, exit_code: i32| {
                let mut exec = exec(id);
                exec.completion = Some(ExecCompletion {
                    completed_at: 2,
                    exit_code,
                    outcome: Outcome::Failed,
                    signal: None,
                });
                exec
            };
            // Its start was stored (by a daemon that died before answering), then the
            // client records it whole: one row, completed.
            ledger.write(RecordExec(exec("started"))).await.unwrap();
            ledger
                .write(RecordWholeExec(whole("started", 1)))
                .await
                .unwrap();
            ledger
                .write(RecordWholeExec(whole("new", 1)))
                .await
                .unwrap();
            assert_eq!(count(&path), 2);
            let connection = rusqlite::Connection::open(&path).unwrap();
            let exit: Option<i64> = connection
                .query_row(
                    "SELECT exit_code FROM execs WHERE id = 'started'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(exit, Some(1));
        });
    }

    #[test]
    fn the_wal_is_checkpointed_beside_the_commits_and_truncated_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        let wal = dir.path().join("corral.db-wal");
        actix::System::new().block_on(async {
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            let checkpoints = ledger.checkpoints();
            // One commit each, with rows big enough to make the WAL long (past 64 pages).
            let commits = CHECKPOINT_EVERY as usize + 8;
            for index in 0..commits {
                let mut big = exec(&format!("e{index}"));
                big.argv.push("x".repeat(16 * 1024));
                ledger.write(RecordExec(big)).await.unwrap();
            }
            // (No await since the last write: the idle timer cannot have run yet.)
            assert!(std::fs::metadata(&wal).unwrap().len() > 64 * 4096);
            let wait = |at_least: u64| {
                let mut checkpoints = checkpoints.clone();
                async move {
                    tokio::time::timeout(
                        Duration::from_secs(30),
                        checkpoints.wait_for(|done| *done >= at_least),
                    )
                    .await
                    .expect("a checkpoint")
                    .map(|done| *done)
                    .unwrap()
                }
            };
            // The passive checkpoint after CHECKPOINT_EVERY commits, beside the commits. (It
            // copies what no reader still needs, maybe not all: the file alone is read below,
            // after the truncating one.)
            wait(1).await;
            // Then no write for IDLE_CHECKPOINT: the long WAL is truncated, and every row is in
            // the database file itself, as a copy without the WAL shows.
            wait(2).await;
            assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
            let copy = dir.path().join("copy.db");
            std::fs::copy(&path, &copy).unwrap();
            assert_eq!(count(&copy), commits as i64);
            assert_eq!(count(&path), commits as i64);
            assert_eq!(ledger.stats().await.unwrap().commits, commits as u64);
        });
    }

    /// Holds the store's write lock from another connection, as another program would,
    /// until the returned sender is dropped or sent to.
    fn hold_lock(path: &Path) -> std::sync::mpsc::Sender<()> {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (taken, is_taken) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let holder = Connection::open(&path).unwrap();
            holder.execute_batch("BEGIN IMMEDIATE").unwrap();
            taken.send(()).unwrap();
            let _ = released.recv();
            holder.execute_batch("COMMIT").unwrap();
        });
        is_taken.recv().unwrap();
        release
    }

    #[test]
    fn a_write_waits_out_a_lock_longer_than_the_busy_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            let release = hold_lock(&path);
            let held = Duration::from_millis(2500);
            let started = Instant::now();
            let write = tokio::spawn({
                let ledger = ledger.clone();
                async move { ledger.write(RecordExec(exec("waits"))).await }
            });
            tokio::time::sleep(held).await;
            assert!(!write.is_finished(), "the write did not wait for the lock");
            drop(release);
            write
                .await
                .unwrap()
                .expect("the write commits once the lock is gone");
            // Longer than one attempt's busy wait: the writer retried.
            assert!(started.elapsed() >= held.max(LOCK_ATTEMPT));
            assert_eq!(count(&path), 1);
        });
    }

    #[test]
    fn a_write_past_the_lock_limit_comes_back_unapplied_and_the_others_wait_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            ledger
                .write(SetSetting {
                    name: crate::store::settings::STORE_LOCK_TIMEOUT_MS.into(),
                    value: Some("1000".into()),
                })
                .await
                .unwrap();
            let release = hold_lock(&path);
            let first = ledger.write_keeping(RecordExec(exec("first")));
            // Handed over later: its own limit ends later, so it is still waiting when the
            // lock goes.
            let later = tokio::spawn({
                let ledger = ledger.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    ledger.write(RecordExec(exec("later"))).await
                }
            });
            let unwritten = first
                .await
                .expect_err("past the limit the write is given up");
            assert!(unwritten.error.is_transient(), "{:?}", unwritten.error);
            let message = unwritten.error.to_string();
            assert!(
                message.contains("locked by another writer")
                    && message.contains("waited 1 s")
                    && message.contains("store.lock_timeout_ms"),
                "{message}"
            );
            drop(release);
            later.await.unwrap().expect("the later write commits");
            assert_eq!(count(&path), 1, "the given-up write is not in the store");
            // The write came back whole: it can be written again.
            let kept = unwritten.write.expect("the write is handed back");
            ledger.write(kept).await.unwrap();
            assert_eq!(count(&path), 2);
        });
    }
    #[test]
    fn a_shutdown_gives_locked_writes_up_at_once_unapplied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral.db");
        actix::System::new().block_on(async {
            // The default limit, 60 s: a shutdown must not wait for it.
            let (ledger, _) = LedgerHandle::start(&path, true).await.unwrap();
            let release = hold_lock(&path);
            let started = Instant::now();
            let waiting = tokio::spawn({
                let ledger = ledger.clone();
                async move { ledger.write_keeping(RecordExec(exec("waiting"))).await }
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            ledger.stop_waiting();
            let unwritten = waiting
                .await
                .unwrap()
                .expect_err("a shutdown gives the waiting write up");
            assert!(unwritten.error.is_transient(), "{:?}", unwritten.error);
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "given up long before its limit"
            );
            // A write made after the shutdown began is given up at once too, whole.
            let later = ledger
                .write_keeping(RecordExec(exec("later")))
                .await
                .expect_err("given up");
            assert!(later.error.is_transient());
            assert!(
                unwritten.write.is_some() && later.write.is_some(),
                "handed back whole"
            );
            drop(release);
            assert_eq!(count(&path), 0, "nothing of them was applied");
        });
    }
}
