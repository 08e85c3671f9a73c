//! The store: one SQLite file, `$CORRAL_HOME/corral.db`.
//!
//! Layout of this module:
//! - [`mod@self`]: opening the file, telling a corral store from anything else, the pragmas;
//! - [`migrations`]: the numbered schema steps, each applied in one transaction;
//! - [`exec`]: the exec ledger's model (an [`Exec`](exec::Exec) row, a page of them) and its
//!   SQL, both the writes the ledger actor applies and the reads the CLI runs.
//!
//! Who touches the file: only the ledger actor (`crate::actors::ledger`) holds a writing
//! connection. Everything else opens [`open_reader`] connections, which SQLite itself refuses
//! to write through. Before any connection is opened, [`inspect`] reads the file's header with
//! plain file I/O, so a file that is not ours is never handed to SQLite in write mode and stays
//! byte-identical, with no `-wal`/`-shm` beside it.

pub mod exec;
pub mod migrations;
pub mod settings;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// corral's SQLite `application_id`: the bytes `"CRRL"`. A store whose header carries another
/// non-zero id belongs to another program and is never written.
pub const APPLICATION_ID: i32 = i32::from_be_bytes(*b"CRRL");

/// The file name of the store inside the home.
pub const STORE_FILE: &str = "corral.db";

/// How long a connection waits for another writer's lock before giving up. Long enough to ride
/// over a daemon's group commit, short enough that a stuck writer is reported within seconds.
/// `CORRAL_BUSY_TIMEOUT_MS` overrides it (tests use it to see the timeout without waiting).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The message every command prints when the file at the store's path is not a store this
/// binary may write. The command goes on without recording.
pub const UNAVAILABLE: &str = "Exec history unavailable: no compatible process ledger";

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a corral store this binary can use (see [`Compatibility`]).
    #[error("{UNAVAILABLE}")]
    Incompatible,
    /// Another connection held the write lock for longer than the busy timeout.
    #[error("the store at {0} is locked by another writer")]
    Locked(PathBuf),
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
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
}

/// What [`inspect`] found at the store's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    /// No file yet: a normal command creates it, an early command leaves it absent.
    Missing,
    /// A corral store (or an empty file SQLite will initialise) at `version` (0 = not yet
    /// migrated), no newer than this binary knows.
    Compatible { version: u32 },
    /// Not SQLite, another program's SQLite file, or a schema newer than this binary.
    Incompatible,
}

/// Where the store of `home` lives.
pub fn store_path(home: &Path) -> PathBuf {
    home.join(STORE_FILE)
}

/// The busy timeout in effect (see [`DEFAULT_BUSY_TIMEOUT`]).
pub fn busy_timeout() -> Duration {
    std::env::var("CORRAL_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|value| value.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_BUSY_TIMEOUT)
}

/// Tells whether `path` holds a store this binary may open, without giving the file to SQLite
/// when its header already says no.
///
/// The header is read with plain file I/O: the 16-byte magic, `user_version` at offset 60 and
/// `application_id` at offset 68 (both big-endian, see the SQLite file format). In WAL mode the
/// newest header may still sit in the `-wal` file, so a header that looks like a fresh SQLite
/// file (id 0) is confirmed through a read-only connection.
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
    let wal = wal_path(path);
    if filled == 0 {
        // SQLite creates the file empty and, in WAL mode, writes the first pages to the WAL
        // only; an empty file is one corral made (or nobody's yet), never another program's.
        return if wal.exists() {
            confirm_with_sqlite(path)
        } else {
            Ok(Compatibility::Compatible { version: 0 })
        };
    }
    if filled < header.len() || &header[..16] != b"SQLite format 3\0" {
        return Ok(Compatibility::Incompatible);
    }
    let user_version = u32::from_be_bytes(header[60..64].try_into().expect("4 bytes"));
    let application_id = i32::from_be_bytes(header[68..72].try_into().expect("4 bytes"));
    match application_id {
        APPLICATION_ID => Ok(classify(user_version)),
        0 if wal.exists() => confirm_with_sqlite(path),
        // A WAL-mode file (format bytes 18/19 = 2) without its `-wal` would make even a
        // read-only connection create a `-shm` beside it: not ours to touch.
        0 if user_version == 0 && header[18] != 2 => {
            // A SQLite file with no id and no schema version: only corral's own store can be
            // like this (created, never migrated) if it has no tables at all.
            confirm_with_sqlite(path)
        }
        _ => Ok(Compatibility::Incompatible),
    }
}

fn classify(version: u32) -> Compatibility {
    if version > migrations::SCHEMA_VERSION {
        Compatibility::Incompatible
    } else {
        Compatibility::Compatible { version }
    }
}

fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Reads `application_id`, `user_version` and the table count through a read-only connection.
fn confirm_with_sqlite(path: &Path) -> Result<Compatibility, StoreError> {
    let connection = open_reader(path)?;
    let read = |pragma: &str| -> Result<i64, rusqlite::Error> {
        connection.query_row(&format!("PRAGMA {pragma}"), [], |row| row.get(0))
    };
    let (application_id, version) = match (read("application_id"), read("user_version")) {
        (Ok(id), Ok(version)) => (id as i32, version as u32),
        _ => return Ok(Compatibility::Incompatible),
    };
    let tables: i64 = connection
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .unwrap_or(1);
    Ok(match application_id {
        APPLICATION_ID => classify(version),
        0 if version == 0 && tables == 0 => Compatibility::Compatible { version: 0 },
        _ => Compatibility::Incompatible,
    })
}

/// Opens a connection SQLite will not write through. Readers never go through the ledger.
pub fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(busy_timeout())?;
    Ok(connection)
}

/// Opens the one writing connection (for the ledger actor) and applies the pragmas every
/// writer needs. It does not migrate: see [`migrations::migrate`].
///
/// `synchronous=NORMAL` in WAL mode: a commit is durable against a process crash at once and
/// against power loss at the next checkpoint, which is the trade every local job queue makes.
pub fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(busy_timeout())?;
    let mode: String = connection
        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
        .map_err(|error| StoreError::from_sqlite(path, error))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(mode, "store is not in WAL mode");
    }
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(connection)
}

/// Milliseconds since the Unix epoch: the unit of every time column.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
