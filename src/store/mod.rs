//! The store: one SQLite file, `$CORRAL_HOME/corral.db`.
//!
//! Layout of this module:
//! - [`mod@self`]: opening the file, telling a corral store from anything else, the pragmas;
//! - [`migrations`]: the numbered schema steps, each applied in one transaction;
//! - one module per aggregate, each with its model (what the library hands out and `--json`
//!   prints) and its SQL: the writes, functions over a `&Connection` that the ledger actor
//!   applies inside its transaction (`crate::actors::ledger` wraps each in a typed message),
//!   and the reads, run on a caller's own read-only connection:
//!   [`projects`] (and execution groups), [`sessions`] (and waves), [`prompts`] (the
//!   one-worker rule), [`runs`] (and boot recovery), [`events`] (gap-free numbers),
//!   [`drivers`] (driver claims), [`processes`] (app-server children, kept processes),
//!   [`exec`] (the exec ledger: an [`Exec`](exec::Exec) row, a page of them), [`settings`];
//! - [`select`]: selectors (an id, a name, a unique id prefix) resolved against stored rows.
//!
//! Who touches the file: only the ledger actor (`crate::actors::ledger`) holds a writing
//! connection. Everything else opens [`open_reader`] connections, which SQLite itself refuses
//! to write through. Before any connection is opened, [`inspect`] reads the file's header with
//! plain file I/O, so a file the header rules out is never handed to SQLite at all, not even
//! to a reader, and stays byte-identical, with no `-wal`/`-shm` beside it. Every way in takes that
//! check: the CLI's `open` (before any command, the daemon's included, and before any reader
//! or auto-start), the early commands, and `Corral::start` (the library); what the header lets
//! through is confirmed by [`check_connection`] before anything is written. A refused store
//! is said in one line, [`refusal`].

pub mod approvals;
pub mod asks;
pub mod claims;
pub mod daemons;
pub mod dependencies;
pub mod drivers;
pub mod environment;
pub mod events;
pub mod exec;
pub mod listen;
pub mod location;
pub mod migrations;
pub mod migrations_postgres;
pub mod overview;
pub mod pauses;
pub mod phases;
pub mod postgres;
pub mod processes;
pub mod projects;
pub mod prompts;
pub mod runs;
pub mod schedules;
pub mod select;
pub mod sessions;
pub mod settings;
pub mod spill;
pub mod sql;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use sql::{Conn, DbError};

/// How many prepared statements a connection keeps: every write and read the supervisor runs
/// on a turn's path fits, so none is parsed twice (parsing costs more than running one).
const STATEMENT_CACHE: usize = 128;

/// corral's SQLite `application_id`: the bytes `"CRRL"`. A store whose header carries another
/// non-zero id belongs to another program and is never written.
pub const APPLICATION_ID: i32 = i32::from_be_bytes(*b"CRRL");

/// The file name of the store inside the home.
pub const STORE_FILE: &str = "corral.db";

/// How long one attempt of a connection waits for another writer's lock (SQLite's busy
/// handler, which sleeps between its tries). Long enough to ride over a daemon's group
/// commit. The ledger does not give a write up after one attempt: it retries, backing off,
/// until `store.lock_timeout_ms` ([`settings::DEFAULT_STORE_LOCK_TIMEOUT_MS`]) has passed.
/// `CORRAL_BUSY_TIMEOUT_MS` overrides it (tests use it to see the timeout without waiting).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a writer that opens the store waits to truncate a long WAL (the truncation waits
/// for other writers and for readers): a store locked by another program must not hold up
/// every `corral` command's start; the next opener tries again.
const OPEN_TRUNCATE_WAIT: Duration = Duration::from_millis(100);

/// How many WAL pages make the WAL worth truncating when a writer opens it (and SQLite's
/// autocheckpoint interval). Every `corral` process is usually the first to open the store,
/// and the first connection rebuilds the WAL index by reading the whole WAL, counting every
/// frame as unbackfilled again; left alone, the WAL would only grow, and every invocation
/// would read and checkpoint all of it. Truncating past this size bounds that work to a few
/// hundred KiB, and costs one checkpoint every few dozen commits.
pub const WAL_AUTOCHECKPOINT_PAGES: u32 = 64;

/// The message every command prints when the file at the store's path is not a store this
/// binary may write (see [`refusal`] for the whole line). `corral run` goes on without
/// recording; every command that needs the store stops there (exit 1).
pub const UNAVAILABLE: &str = "Exec history unavailable: no compatible process ledger";

/// Why the file at the store's path is not a store this binary may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Not a SQLite database (or shorter than its 100-byte header).
    NotSqlite,
    /// A SQLite file whose `application_id` is another program's.
    OtherProgram { application_id: i32 },
    /// A PostgreSQL database whose `corral_meta` names another application.
    OtherApplication,
    /// A corral store of a schema newer than this binary knows.
    Newer { version: u32 },
    /// A SQLite file without an id that already holds tables (another program's).
    Unidentified,
    /// A PostgreSQL database without `corral_meta` that already holds objects (someone's).
    UnidentifiedDatabase,
    /// A WAL-mode SQLite file without an id and without its `-wal`: opening it at all would
    /// make SQLite create files beside it.
    UnidentifiedWal,
    /// An empty file with no WAL in a home that held a store (`home::has_served`): the store
    /// was truncated or replaced, and opening it would begin a new, empty one in its place.
    Emptied,
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Foreign::NotSqlite => write!(f, "not a SQLite database"),
            Foreign::OtherApplication => write!(f, "a database another application owns"),
            Foreign::OtherProgram { application_id } => write!(
                f,
                "another program's SQLite file (application_id {application_id:#010x})"
            ),
            Foreign::Newer { version } => write!(
                f,
                "a corral store of schema {version}, newer than this corral's {}",
                migrations::SCHEMA_VERSION
            ),
            Foreign::Unidentified => write!(f, "a SQLite file with tables but no corral id"),
            Foreign::UnidentifiedDatabase => {
                write!(f, "a database that holds objects but no corral id")
            }
            Foreign::UnidentifiedWal => write!(f, "a WAL-mode SQLite file with no corral id"),
            Foreign::Emptied => write!(
                f,
                "empty (0 bytes, no WAL) although this home held a store: it was truncated or \
                 replaced; restore it from a backup, or move it away to begin a new store"
            ),
        }
    }
}

/// The one line that says the store at `path` is refused, and why: [`UNAVAILABLE`], the file
/// and the reason, and that it is left as it is.
pub fn refusal(path: &Path, foreign: Foreign) -> String {
    format!(
        "{UNAVAILABLE} — {} is {foreign}; it is left untouched",
        path.display()
    )
}

/// What names the store at `location` in messages: the SQLite file, or the URL without its
/// password.
pub fn shown_path(location: &location::Location) -> PathBuf {
    match location {
        location::Location::Sqlite(path) => path.clone(),
        location::Location::Postgres(url) => PathBuf::from(url.to_string()),
    }
}

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a corral store this binary can use (see [`Compatibility`]).
    #[error("{UNAVAILABLE} — the store is {0}; it is left untouched")]
    Incompatible(Foreign),
    /// Another connection held the write lock for longer than the busy timeout.
    #[error("the store at {0} is locked by another writer")]
    Locked(PathBuf),
    /// Another program held the write lock for longer than `store.lock_timeout_ms`: the
    /// ledger waited that long for it (retrying), then gave the write up.
    #[error(
        "the store at {} is locked by another writer: a write waited {} for the lock \
         ({}) and was given up",
        path.display(),
        seconds(*waited),
        settings::STORE_LOCK_TIMEOUT_MS
    )]
    LockTimeout { path: PathBuf, waited: Duration },
    /// The PostgreSQL server could not be reached for `store.lock_timeout_ms`: the ledger
    /// tried again (reconnecting) that long, then gave the write up. Kept like a locked
    /// store's: the same write may succeed once the server is back.
    #[error(
        "the store at {} cannot be reached: a write waited {} for it ({}) and was given up",
        path.display(),
        seconds(*waited),
        settings::STORE_LOCK_TIMEOUT_MS
    )]
    Unreachable { path: PathBuf, waited: Duration },
    /// The store answered but refused writes (read-only, a full disk:
    /// [`DbError::refuses_writes_for_now`]): the ledger tried again for `store.lock_timeout_ms`
    /// (a daemon's) or not at all (a short command's), then gave the write up, unapplied. Kept
    /// like a locked store's.
    #[error("the store at {} refuses writes for now: {why}", path.display())]
    Refusing { path: PathBuf, why: String },
    /// A write about a prompt claimed under a lease that no longer holds (on a shared
    /// store): another daemon may run the prompt now, so nothing of it is written.
    #[error(
        "the lease of this daemon (node {node_id}, epoch {epoch}) no longer holds: the write \
         was refused"
    )]
    Fenced { node_id: String, epoch: i64 },
    /// A damaged file says how to repair it (the path is the caller's to name).
    #[error("store: {0}{}", damaged_hint(.0))]
    Sqlite(#[from] rusqlite::Error),
    #[error("store: {0}")]
    Db(DbError),
    /// The PostgreSQL server could not be reached or refused the login.
    #[error("{0}")]
    Connect(#[from] postgres::ConnectError),
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// Whether this says the file is not a store this binary may write.
    pub fn is_incompatible(&self) -> bool {
        matches!(self, StoreError::Incompatible(_))
    }

    /// Whether the store could not take the write for now, so that the same write may
    /// succeed later: another program held its write lock (past the busy timeout, or past
    /// `store.lock_timeout_ms`), its server could not be reached, or it refused writes.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Locked(_)
                | StoreError::LockTimeout { .. }
                | StoreError::Unreachable { .. }
                | StoreError::Refusing { .. }
        )
    }

    /// Whether the store refused the statement for now: [`DbError::refuses_writes_for_now`].
    pub fn refuses_writes_for_now(&self) -> bool {
        match self {
            StoreError::Sqlite(error) => sql::sqlite_refuses_writes_for_now(error),
            StoreError::Db(error) => error.refuses_writes_for_now(),
            _ => false,
        }
    }

    /// Whether this write was refused because its lease no longer holds.
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. })
    }

    /// Turns a SQLite busy/locked error into [`StoreError::Locked`] naming the file, so the user
    /// reads one clear line instead of `database is locked`.
    pub fn from_sqlite(path: &Path, error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Locked(path.to_path_buf())
            }
            _ => StoreError::Sqlite(error),
        }
    }

    /// [`StoreError::from_sqlite`] for an error of either store.
    pub fn from_db(path: &Path, error: DbError) -> Self {
        match error {
            DbError::Sqlite(error) => StoreError::from_sqlite(path, error),
            other => StoreError::Db(other),
        }
    }
}

impl From<DbError> for StoreError {
    fn from(error: DbError) -> Self {
        match error {
            DbError::Sqlite(error) => StoreError::Sqlite(error),
            other => StoreError::Db(other),
        }
    }
}

/// What [`inspect`] found at the store's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    /// No file yet: a normal command creates it, an early command leaves it absent.
    Missing,
    /// A file that may be a corral store: its header says so, or it is a SQLite file without
    /// an id yet (WAL mode keeps the newest header in the `-wal` until a checkpoint). The
    /// ledger's writing connection checks `application_id` and `user_version` when it opens,
    /// before writing anything ([`check_connection`]).
    Plausible,
    /// Not SQLite, another program's SQLite file, or a schema newer than this binary: never
    /// opened by SQLite at all.
    Incompatible(Foreign),
}

/// Where the store of `home` lives.
pub fn store_path(home: &Path) -> PathBuf {
    home.join(STORE_FILE)
}

/// A duration as a person reads it in an error: `5 s`, `1.5 s`, `250 ms`.
fn seconds(duration: Duration) -> String {
    let ms = duration.as_millis();
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// The busy timeout in effect (see [`DEFAULT_BUSY_TIMEOUT`]).
pub fn busy_timeout() -> Duration {
    std::env::var(crate::env::BUSY_TIMEOUT_MS)
        .ok()
        .and_then(|value| value.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_BUSY_TIMEOUT)
}

/// Tells whether `path` may hold a store this binary may open, from its header alone.
///
/// The header is read with plain file I/O: the 16-byte magic, `user_version` at offset 60 and
/// `application_id` at offset 68 (both big-endian, see the SQLite file format). A file this
/// rules out is never given to SQLite, so it stays byte-identical with nothing created beside
/// it. What it lets through is confirmed by [`check_connection`].
pub fn inspect(path: &Path) -> Result<Compatibility, StoreError> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Compatibility::Missing)
        }
        Err(error) => return Err(error.into()),
    };
    let mut header = [0u8; 100];
    let mut filled = 0;
    while filled < header.len() {
        match file.read(&mut header[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    if filled == 0 {
        // SQLite creates the file empty and, in WAL mode, writes the first pages to the WAL
        // only: an empty file is one corral made, or nobody's yet. Unless nothing holds those
        // pages (no WAL, or one with no frame: only its 32-byte header) where a supervisor ran
        // (it created and migrated the store): then the store was emptied.
        let wal_frames = std::fs::metadata(wal_path(path)).is_ok_and(|wal| wal.len() > 32);
        let home = path.parent().unwrap_or(Path::new("."));
        if !wal_frames && crate::home::has_served(home) {
            return Ok(Compatibility::Incompatible(Foreign::Emptied));
        }
        return Ok(Compatibility::Plausible);
    }
    if filled < header.len() || &header[..16] != b"SQLite format 3\0" {
        return Ok(Compatibility::Incompatible(Foreign::NotSqlite));
    }
    let user_version = u32::from_be_bytes(header[60..64].try_into().expect("4 bytes"));
    let application_id = i32::from_be_bytes(header[68..72].try_into().expect("4 bytes"));
    let wal_mode = header[18] == 2;
    Ok(match application_id {
        APPLICATION_ID if user_version <= migrations::SCHEMA_VERSION => Compatibility::Plausible,
        APPLICATION_ID => Compatibility::Incompatible(Foreign::Newer {
            version: user_version,
        }),
        // No id in the main file: ours if the id is still in the WAL, or if it is a store
        // created but never migrated. A WAL-mode file without its `-wal` would make SQLite
        // create files beside it, so it must carry our id in the main file already.
        0 if !wal_mode || wal_path(path).exists() => Compatibility::Plausible,
        0 => Compatibility::Incompatible(Foreign::UnidentifiedWal),
        application_id => Compatibility::Incompatible(Foreign::OtherProgram { application_id }),
    })
}

fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Checks through `connection`, before anything is written, that the file is a corral store
/// this binary can use (or an empty SQLite file it may make one of). Returns the schema
/// version. On `Incompatible` the caller drops the connection; checkpoint-on-close is turned
/// off first, so that even closing writes nothing.
pub fn check_connection(connection: &Connection) -> Result<u32, StoreError> {
    let application_id: i32 =
        connection.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    let version: u32 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let tables: i64 =
        connection.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))?;
    let refused = match application_id {
        APPLICATION_ID if version <= migrations::SCHEMA_VERSION => None,
        APPLICATION_ID => Some(Foreign::Newer { version }),
        0 if version == 0 && tables == 0 => None,
        0 => Some(Foreign::Unidentified),
        application_id => Some(Foreign::OtherProgram { application_id }),
    };
    if let Some(foreign) = refused {
        connection.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        Err(StoreError::Incompatible(foreign))
    } else {
        Ok(version)
    }
}

/// Creates the store's file, empty and 0600, if there is none: SQLite would create it 0644
/// less the umask, and it gives the `-wal` and `-shm` it creates beside it the main file's
/// mode, so the whole store is private from its first byte. An empty file is a new store to
/// SQLite, as the one it would have created.
fn create_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let cannot = |error: std::io::Error| {
        StoreError::Io(std::io::Error::new(
            error.kind(),
            format!("cannot create {}: {error}", path.display()),
        ))
    };
    match crate::home::private_file()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => file
            .set_permissions(std::fs::Permissions::from_mode(crate::home::PRIVATE_FILE))
            .map_err(cannot),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(cannot(error)),
    }
}

/// Tightens a store found looser than 0600 (a store made before corral kept its files
/// private, under umask 022): the file, its `-wal` and `-shm`, each only if it is the user's
/// own. For a store already found to be ours ([`inspect`]): another program's file is never
/// touched. Returns a line for each change, for the caller to say.
pub fn make_private(path: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        crate::home::tighten(
            Path::new(&file),
            crate::home::PRIVATE_FILE,
            "store file",
            &mut notes,
        );
    }
    notes
}

/// How long a daemon's boot gives `PRAGMA quick_check` ([`check_integrity`]): a store of
/// 100 MB takes about 0.1 s on a warm cache; one too large to check in this time is served
/// unchecked, and `status` says so.
pub const INTEGRITY_CHECK_TIME: Duration = Duration::from_secs(2);

/// What `PRAGMA quick_check` found in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// Nothing wrong, found in this long.
    Sound(Duration),
    /// What is wrong, in SQLite's words (its first lines).
    Damaged(String),
    /// The check did not end within the time it was given.
    Unfinished(Duration),
}

impl std::fmt::Display for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Integrity::Sound(took) => write!(f, "sound (quick_check in {} ms)", took.as_millis()),
            Integrity::Damaged(found) => write!(f, "damaged: {found}"),
            Integrity::Unfinished(within) => {
                write!(
                    f,
                    "unchecked (quick_check did not end within {})",
                    seconds(*within)
                )
            }
        }
    }
}

/// Runs `PRAGMA quick_check` on the SQLite store at `path` (read-only), for `within` at most:
/// a page that does not read, an index out of step with its table. Reads only.
pub fn check_integrity(path: &Path, within: Duration) -> Result<Integrity, StoreError> {
    let connection = open_reader(path)?;
    let began = std::time::Instant::now();
    // Interrupted from a thread of its own once the time is up; told when the check ended.
    let interrupt = connection.get_interrupt_handle();
    let (ended, ends) = std::sync::mpsc::channel::<()>();
    let watch = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ends.recv_timeout(within) {
            interrupt.interrupt();
        }
    });
    let found: Result<Vec<String>, rusqlite::Error> = connection
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect()
        });
    drop(ended);
    let _ = watch.join();
    match found {
        Ok(lines) if lines == ["ok"] => Ok(Integrity::Sound(began.elapsed())),
        Ok(lines) => Ok(Integrity::Damaged(lines.join("; "))),
        Err(rusqlite::Error::SqliteFailure(failure, _))
            if failure.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            Ok(Integrity::Unfinished(within))
        }
        // A page so damaged that the check itself cannot read it.
        Err(rusqlite::Error::SqliteFailure(failure, message))
            if failure.code == rusqlite::ErrorCode::DatabaseCorrupt =>
        {
            Ok(Integrity::Damaged(
                message.unwrap_or_else(|| failure.to_string()),
            ))
        }
        Err(error) => Err(error.into()),
    }
}

/// What follows SQLite's own words for a damaged file: how to repair it. Said by every error
/// that carries SQLite's words (`StoreError::Sqlite`, `sql::DbError::Sqlite`), so that each
/// way an error reaches a person names the repair.
pub(crate) fn damaged_hint(error: &rusqlite::Error) -> &'static str {
    match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
            "; the store is damaged: stop what uses it and repair it with sqlite3's .recover \
             (see docs/store.md)"
        }
        _ => "",
    }
}

/// The line a damaged store is refused with: what is wrong, and how to repair it.
pub fn damaged(path: &Path, found: &str) -> String {
    format!(
        "the store {} is damaged ({found}); it is left untouched. Stop what uses it, then \
         repair it with sqlite3's .recover (its id and version come along): `sqlite3 {0} \
         .recover > recovered.sql && sqlite3 {0}.recovered < recovered.sql`, and put \
         {0}.recovered in its place (see docs/store.md)",
        path.display()
    )
}

/// Opens a connection SQLite will not write through. Readers never go through the ledger.
pub fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(busy_timeout())?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(connection)
}

/// Opens the connection of the ledger's WAL checkpointer: read-write, because a checkpoint
/// writes the database file, but it runs nothing but checkpoints (no pragma, no statement).
/// The ledger's writer has opened and checked the store before.
pub fn open_checkpointer(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // Passive checkpoints never wait; nothing else runs here.
    connection.busy_timeout(Duration::ZERO)?;
    // Closing must not checkpoint either: the checkpointer's checkpoints are its messages.
    connection.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    Ok(connection)
}

/// Opens the one writing connection (for the ledger actor): checks that the file is ours
/// ([`check_connection`]), then applies the pragmas every writer needs — except to a store
/// created but never migrated that an early command (`create` false) must leave as it is.
/// It does not migrate: see [`migrations::migrate`]. Returns the connection and the schema
/// version.
///
/// `synchronous=NORMAL` in WAL mode: a commit is durable against a process crash at once and
/// against power loss at the next checkpoint, which is the trade every local job queue makes.
pub fn open_writer(path: &Path, create: bool) -> Result<(Connection, u32), StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
        create_private(path)?;
    }
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(busy_timeout())?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let version = check_connection(&connection).map_err(|error| match error {
        StoreError::Sqlite(error) => StoreError::from_sqlite(path, error),
        other => other,
    })?;
    if create && version == 0 {
        // Our id goes into the main file before it turns to WAL mode: a WAL-mode file with
        // no id and no `-wal` is refused as not ours (`inspect`), and another `corral` that
        // looked between the switch and the first migration's commit (a command started by
        // the one creating the store) was refused so.
        let id: i32 = connection
            .query_row("PRAGMA application_id", [], |row| row.get(0))
            .map_err(|error| StoreError::from_sqlite(path, error))?;
        if id == 0 {
            connection
                .pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(|error| StoreError::from_sqlite(path, error))?;
        }
    }
    if create || version > 0 {
        let mode: String = connection
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(|error| StoreError::from_sqlite(path, error))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(mode, "store is not in WAL mode");
        }
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        connection.busy_timeout(OPEN_TRUNCATE_WAIT)?;
        truncate_long_wal(&connection, path);
        connection.busy_timeout(busy_timeout())?;
        // The last connection to close would checkpoint the whole WAL and fsync: every short
        // `corral` process would pay for it on exit. The WAL is kept short otherwise (the
        // autocheckpoint above, or the ledger's own checkpoints, which replace it), and it
        // stays (it is part of the store, durable as it is).
        connection.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
    }
    Ok((connection, version))
}

/// Checkpoints and truncates the WAL when it has grown past [`WAL_AUTOCHECKPOINT_PAGES`]; a
/// short one is left as it is. Run when a writer opens the store and when the ledger is idle.
/// Best effort: a busy reader only postpones it.
pub(crate) fn truncate_long_wal(connection: &Connection, path: &Path) {
    let page_size: u64 = connection
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap_or(4096);
    let long = u64::from(WAL_AUTOCHECKPOINT_PAGES) * (page_size + 24);
    let size = std::fs::metadata(wal_path(path))
        .map(|meta| meta.len())
        .unwrap_or(0);
    if size > long {
        let result = connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        if let Err(error) = result {
            tracing::debug!(%error, "WAL not truncated");
        }
    }
}

/// One reader of the store at `location` (a command's reads; the daemon pools them).
pub fn open_read(location: &location::Location) -> Result<Conn, StoreError> {
    match location {
        location::Location::Sqlite(path) => Ok(Conn::from(open_reader(path)?)),
        location::Location::Postgres(url) => open_postgres_reader(&url.config(), &url.to_string()),
    }
}

fn open_postgres_reader(config: &tokio_postgres::Config, target: &str) -> Result<Conn, StoreError> {
    // Readers never write, as SQLite's read-only connections cannot: set at login (a startup
    // option, so a connection made again keeps it), after the URL's own options.
    let mut config = config.clone();
    let options = match config.get_options() {
        Some(given) => format!("{given} -c default_transaction_read_only=on"),
        None => "-c default_transaction_read_only=on".to_string(),
    };
    config.options(&options);
    Ok(Conn::from(postgres::PgConn::connect(&config, target)?))
}

/// A few read-only connections kept open for reuse, so that a busy supervisor does not open
/// one per query (an open costs a file open, a header read and a WAL-index attach; on
/// PostgreSQL a login).
pub struct ReaderPool {
    source: ReaderSource,
    idle: std::sync::Mutex<Vec<Conn>>,
}

/// Where a [`ReaderPool`] opens its connections.
enum ReaderSource {
    Sqlite(PathBuf),
    /// A login per connection; `target` names the server in errors (no password).
    Postgres {
        config: Box<tokio_postgres::Config>,
        target: String,
    },
}

/// How many idle readers the pool keeps; more are opened under load and closed after.
const IDLE_READERS: usize = 4;

impl ReaderPool {
    pub fn new(path: &Path) -> Self {
        ReaderPool {
            source: ReaderSource::Sqlite(path.to_path_buf()),
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Readers of a PostgreSQL store. They read through the same transactions' snapshots as
    /// SQLite's readers do (each statement sees what was committed before it began).
    pub fn postgres(config: tokio_postgres::Config, target: String) -> Self {
        ReaderPool {
            source: ReaderSource::Postgres {
                config: Box::new(config),
                target,
            },
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Readers of the store at `location`.
    pub fn at(location: &location::Location) -> Self {
        match location {
            location::Location::Sqlite(path) => Self::new(path),
            location::Location::Postgres(url) => Self::postgres(url.config(), url.to_string()),
        }
    }

    fn open(&self) -> Result<Conn, StoreError> {
        match &self.source {
            ReaderSource::Sqlite(path) => Ok(Conn::from(open_reader(path)?)),
            ReaderSource::Postgres { config, target } => open_postgres_reader(config, target),
        }
    }

    /// Runs `read` on a pooled read-only connection. A pooled PostgreSQL connection the
    /// server ended meanwhile is replaced, and the read made once more on a new one.
    pub fn read<T>(&self, mut read: impl FnMut(&Conn) -> sql::Result<T>) -> Result<T, StoreError> {
        // Connections the server ended while idle are dropped unused (a read whose closure
        // turns its errors into answers could not be made again).
        let pooled = self.idle.lock().ok().and_then(|mut idle| {
            idle.retain(|connection| !connection.as_postgres().is_some_and(|pg| pg.is_closed()));
            idle.pop()
        });
        let (connection, result) = match pooled {
            Some(connection) => {
                let result = read(&connection);
                match result {
                    Err(error) if error.is_connection_lost() => {
                        let connection = self.open()?;
                        let again = read(&connection);
                        (connection, again)
                    }
                    result => (connection, result),
                }
            }
            None => {
                let connection = self.open()?;
                let result = read(&connection);
                (connection, result)
            }
        };
        let result = result.map_err(|error| match &self.source {
            ReaderSource::Sqlite(path) => StoreError::from_db(path, error),
            ReaderSource::Postgres { .. } => StoreError::Db(error),
        });
        // A connection the server ended is not kept.
        let broken = connection.as_postgres().is_some_and(|pg| pg.is_closed());
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < IDLE_READERS && !broken {
                idle.push(connection);
            }
        }
        result
    }
}

/// A JSON list of strings stored in a TEXT column (a project's groups, a prompt's images, a
/// run's argv); anything else reads as empty.
fn json_list(text: String) -> Vec<String> {
    serde_json::from_str(&text).unwrap_or_default()
}

pub use crate::clock::now_ms;
