//! One interface over both stores: the SQLite file and a PostgreSQL database.
//!
//! Every store function takes a [`Conn`] and runs its SQL through four methods — [`Conn::run`]
//! (a write), [`Conn::row`], [`Conn::opt_row`] and [`Conn::rows`] (reads) — with parameters
//! made by [`args!`] and columns read by [`Row::get`]. Nothing above this module names a
//! driver, so the ledger, the readers and the CLI work the same on either store.
//!
//! - **One SQL text for both.** Statements are written in SQLite's `?N` form; the PostgreSQL
//!   side rewrites `?N` (and a bare `?`) to `$N` once, outside quotes and comments
//!   ([`numbered_placeholders`]). The PostgreSQL schema keeps SQLite's types — `BIGINT` for
//!   every integer and boolean, `TEXT COLLATE "C"` for text, JSON as text — so a statement
//!   rarely needs a second text; where it does, [`Conn::dialect`] picks one.
//! - **Parameters adapt.** A [`Param`] is a plain value ([`Arg`]); PostgreSQL is told it in
//!   the type the server inferred for that parameter (an `i64` bound where the server wants
//!   `INT4` is sent as one, a `bool` where it wants `BIGINT` as 0 or 1), so call sites never
//!   cast for the driver's sake.
//! - **Columns decode alike.** A column is read into a [`Value`] first, then into the Rust
//!   type the caller asked for ([`Get`]): an `EXISTS (…)` is a boolean in PostgreSQL and an
//!   integer in SQLite, and both read as `bool`.
//! - **Statements are cached** per connection on both sides: parsing costs more than running
//!   the short statements the supervisor repeats.
//!
//! The PostgreSQL connection itself (its runtime, connecting, the statement cache) is
//! [`super::postgres`].

use std::fmt;

use rusqlite::types::{ToSqlOutput, ValueRef};

use super::postgres::{BeginAsks, PgConn, Touched};

/// Which SQL a connection speaks, for the few statements whose text differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// An error of a statement, on either store.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A damaged file says how to repair it.
    #[error("{0}{}", super::damaged_hint(.0))]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", postgres_message(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A statement that must return a row returned none.
    #[error("the statement returned no row")]
    NoRows,
    /// A column held a value the caller's type cannot take.
    #[error("column {column}: {message}")]
    Decode { column: usize, message: String },
    /// The database server cannot be reached (a new connection failed).
    #[error("{0}")]
    Unreachable(String),
    /// The store's contents are not what corral wrote (a value out of its domain).
    #[error("{0}")]
    Invalid(String),
}

/// What a person must read of a PostgreSQL error: `tokio_postgres::Error`'s own `Display` is
/// only `db error` for everything the server says.
pub fn postgres_message(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// [`DbError::refuses_writes_for_now`] for SQLite: its disk is full, its file or filesystem is
/// read-only, or the disk failed a read or write (an I/O error): faults of the machine, not of
/// the write, which the same write may outlast. (A damaged file is not one: it is refused.)
pub(crate) fn sqlite_refuses_writes_for_now(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(
            rusqlite::ErrorCode::DiskFull
                | rusqlite::ErrorCode::ReadOnly
                | rusqlite::ErrorCode::SystemIoFailure
        )
    )
}

impl DbError {
    /// The SQLSTATE code of a PostgreSQL error (`23505` a unique violation, …).
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            DbError::Postgres(error) => error.code().map(|code| code.code()),
            _ => None,
        }
    }

    /// Whether the database server went away: the connection was ended or a new one could
    /// not be made. What was not committed is lost; the same write may succeed later.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            DbError::Unreachable(_) => true,
            DbError::Postgres(error) => {
                let io = std::error::Error::source(error)
                    .is_some_and(|source| source.is::<std::io::Error>());
                // 57P01..03: the server shuts down, or ended this backend.
                let ended = matches!(
                    error.code().map(|code| code.code()),
                    Some("57P01" | "57P02" | "57P03")
                );
                error.is_closed() || io || ended
            }
            _ => false,
        }
    }

    /// Whether the server answers but cannot take writes for now, and the same write may
    /// succeed later: a read-only server (a standby not yet promoted, a database set
    /// `default_transaction_read_only` during a failover), a full disk, too few resources, or
    /// a conflict the server asks to retry. A write refused so is waited out like a locked
    /// store, never given up as failed: a prompt's end lost there would leave its prompt
    /// running in the store until the next boot ran it again.
    pub fn refuses_writes_for_now(&self) -> bool {
        match self {
            DbError::Sqlite(error) => sqlite_refuses_writes_for_now(error),
            DbError::Postgres(_) => self.sqlstate().is_some_and(|code| {
                // 25006 read-only transaction; class 53: disk full, out of memory, too many
                // connections; 40001, 40P01: serialization failure, deadlock.
                code == "25006" || code.starts_with("53") || code == "40001" || code == "40P01"
            }),
            _ => false,
        }
    }

    /// Whether a uniqueness constraint refused the statement, on either store.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(error, _)) => {
                error.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || error.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            }
            DbError::Postgres(_) => self.sqlstate() == Some("23505"),
            _ => false,
        }
    }
}

/// The result of a statement.
pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// `NoRows` as `None`, for reads of a row that may be absent.
pub trait OptionalExt<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExt<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(DbError::NoRows) | Err(DbError::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters.

/// A text as both stores keep it: each NUL character becomes U+FFFD (�). PostgreSQL's text
/// cannot hold a NUL (the write is refused, and a refused prompt's end left its session
/// running for good), and no engine's argv can carry one; replaced the same way on SQLite, a
/// text reads back the same from either store, and a lookup by a name finds what was stored
/// under it. Applied where every statement's text parameters are bound, so no write path
/// can miss it.
pub(crate) fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A parameter's value as both drivers are given it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Null,
    Int(i64),
    Bool(bool),
    Real(f64),
    Text(&'a str),
}

/// A value a statement can be given: see [`args!`].
pub trait Param: Sync {
    fn arg(&self) -> Arg<'_>;
}

/// The parameters of a statement, in order: `args![id, name, now]`.
#[macro_export]
macro_rules! args {
    () => { &[] as &[&dyn $crate::store::sql::Param] };
    ($($value:expr),+ $(,)?) => { &[$(&$value as &dyn $crate::store::sql::Param),+] as &[&dyn $crate::store::sql::Param] };
}
pub use crate::args;

/// A list of columns (`"id, name, …"`) with each name taken from table alias `alias`
/// (`"p.id, p.name, …"`): a row's reader keeps its columns' order, and a join of two tables
/// reads both rows without naming a column twice.
pub(crate) fn qualified(columns: &str, alias: &str) -> String {
    columns
        .split(',')
        .map(|column| format!("{alias}.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

macro_rules! int_params {
    ($($ty:ty),*) => {$(
        impl Param for $ty {
            fn arg(&self) -> Arg<'_> {
                // Corral's integers (ms since the epoch, counts, pids) fit an i64.
                Arg::Int(*self as i64)
            }
        }
    )*};
}
int_params!(i64, i32, i16, u8, u16, u32, u64, usize);

impl Param for bool {
    fn arg(&self) -> Arg<'_> {
        Arg::Bool(*self)
    }
}

impl Param for f64 {
    fn arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

impl Param for str {
    fn arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl Param for String {
    fn arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl<T: Param + ?Sized> Param for &T {
    fn arg(&self) -> Arg<'_> {
        (**self).arg()
    }
}

impl<T: Param> Param for Option<T> {
    fn arg(&self) -> Arg<'_> {
        match self {
            Some(value) => value.arg(),
            None => Arg::Null,
        }
    }
}

impl Param for Value {
    fn arg(&self) -> Arg<'_> {
        match self {
            Value::Null => Arg::Null,
            Value::Int(value) => Arg::Int(*value),
            Value::Bool(value) => Arg::Bool(*value),
            Value::Real(value) => Arg::Real(*value),
            Value::Text(value) => Arg::Text(value),
        }
    }
}

impl From<Arg<'_>> for Value {
    fn from(arg: Arg<'_>) -> Self {
        match arg {
            Arg::Null => Value::Null,
            Arg::Int(value) => Value::Int(value),
            Arg::Bool(value) => Value::Bool(value),
            Arg::Real(value) => Value::Real(value),
            Arg::Text(value) => Value::Text(value.to_string()),
        }
    }
}

impl rusqlite::ToSql for dyn Param + '_ {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.arg() {
            Arg::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Arg::Int(value) => ToSqlOutput::Borrowed(ValueRef::Integer(value)),
            Arg::Bool(value) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(value))),
            Arg::Real(value) => ToSqlOutput::Borrowed(ValueRef::Real(value)),
            Arg::Text(value) => match storable(value) {
                std::borrow::Cow::Borrowed(value) => {
                    ToSqlOutput::Borrowed(ValueRef::Text(value.as_bytes()))
                }
                std::borrow::Cow::Owned(value) => {
                    ToSqlOutput::Owned(rusqlite::types::Value::Text(value))
                }
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Columns.

/// A column's value, owned, as either driver gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Bool(bool),
    Real(f64),
    Text(String),
}

impl From<String> for Value {
    fn from(text: String) -> Self {
        Value::Text(text)
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "an integer",
            Value::Bool(_) => "a boolean",
            Value::Real(_) => "a real",
            Value::Text(_) => "text",
        }
    }

    fn from_sqlite(value: ValueRef<'_>) -> std::result::Result<Value, String> {
        Ok(match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(value) => Value::Int(value),
            ValueRef::Real(value) => Value::Real(value),
            ValueRef::Text(text) => Value::Text(
                std::str::from_utf8(text)
                    .map_err(|_| "text that is not UTF-8".to_string())?
                    .to_string(),
            ),
            ValueRef::Blob(_) => return Err("a blob, where corral stores none".into()),
        })
    }
}

/// A Rust type a column can be read as: see [`Row::get`].
pub trait Get: Sized {
    fn from_value(value: Value) -> std::result::Result<Self, String>;
}

fn wrong(value: &Value, wanted: &str) -> String {
    format!("{} where {wanted} was expected", value.kind())
}

impl Get for i64 {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Int(value) => Ok(value),
            Value::Bool(value) => Ok(i64::from(value)),
            other => Err(wrong(&other, "an integer")),
        }
    }
}

macro_rules! int_gets {
    ($($ty:ty),*) => {$(
        impl Get for $ty {
            fn from_value(value: Value) -> std::result::Result<Self, String> {
                let wide = i64::from_value(value)?;
                <$ty>::try_from(wide).map_err(|_| format!("{wide} is out of range"))
            }
        }
    )*};
}
int_gets!(i32, i16, u8, u16, u32, u64, usize);

impl Get for bool {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Bool(value) => Ok(value),
            Value::Int(value) => Ok(value != 0),
            other => Err(wrong(&other, "a boolean")),
        }
    }
}

impl Get for f64 {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Real(value) => Ok(value),
            Value::Int(value) => Ok(value as f64),
            other => Err(wrong(&other, "a number")),
        }
    }
}

impl Get for String {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Text(text) => Ok(text),
            other => Err(wrong(&other, "text")),
        }
    }
}

impl Get for Value {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        Ok(value)
    }
}

impl<T: Get> Get for Option<T> {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// A row of a result, on either store.
pub struct Row<'r>(RowInner<'r>);

enum RowInner<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r tokio_postgres::Row),
}

impl<'r> Row<'r> {
    pub(crate) fn sqlite(row: &'r rusqlite::Row<'r>) -> Self {
        Row(RowInner::Sqlite(row))
    }

    pub(crate) fn postgres(row: &'r tokio_postgres::Row) -> Self {
        Row(RowInner::Postgres(row))
    }

    /// Column `index` (from 0) as a `T`.
    pub fn get<T: Get>(&self, index: usize) -> Result<T> {
        let value = match &self.0 {
            RowInner::Sqlite(row) => {
                let value = row.get_ref(index)?;
                Value::from_sqlite(value)
            }
            RowInner::Postgres(row) => row
                .try_get::<_, super::postgres::AnyValue>(index)
                .map(|any| any.0)
                .map_err(|error| postgres_message(&error)),
        };
        value
            .and_then(T::from_value)
            .map_err(|message| DbError::Decode {
                column: index,
                message,
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Connections.

/// A connection to the store: the ledger's writer or a reader, on either backend.
///
/// Used by one thread at a time (it is `Send`, not `Sync`): the ledger's writer owns one, the
/// reader pool hands each out to one read.
pub struct Conn(ConnInner, Box<TransactionMemo>);

enum ConnInner {
    Sqlite(rusqlite::Connection),
    // Boxed: a PostgreSQL connection carries its statement cache and held writes.
    Postgres(Box<PgConn>),
}

impl From<rusqlite::Connection> for Conn {
    fn from(connection: rusqlite::Connection) -> Self {
        Conn(ConnInner::Sqlite(connection), Box::default())
    }
}

impl From<PgConn> for Conn {
    fn from(connection: PgConn) -> Self {
        Conn(ConnInner::Postgres(Box::new(connection)), Box::default())
    }
}

/// What the open write transaction has learned and may reuse until it ends: on PostgreSQL
/// each question is a round trip to the server, made while the batch holds the store's write
/// lock, so every one saved is time the other daemons do not wait. Forgotten when the
/// transaction begins and ends ([`Conn::batch`]).
#[derive(Default)]
struct TransactionMemo {
    /// The last feed number stored, as of this transaction's last event (or its first look):
    /// the ledger is the only writer of events inside it. Forgotten when a savepoint is rolled
    /// back, since its numbers go back with its rows.
    last_feed_seq: std::cell::Cell<Option<i64>>,
    /// The claims (node, epoch) found holding in this transaction. A claim ends only by a
    /// rescue, which takes the write lock this transaction holds until its commit: one that
    /// held at its first write holds for the others (`daemons::fence_holds`), unless this
    /// transaction rescues (`claims::rescue` forgets them).
    fences_held: std::cell::RefCell<Vec<(String, i64)>>,
    /// How many daemons other than the writer's are live, as the transaction began. A
    /// daemon registering meanwhile claims under the write lock after this transaction, so it
    /// sees this one's claims, as it would had the count been read at the claim.
    others_live: std::cell::RefCell<Option<(String, i64)>>,
    /// Not the transaction's alone: see [`SessionSeqs`] (its staged part is).
    session_seqs: SessionSeqs,
}

impl TransactionMemo {
    /// A transaction's start or end: nothing known holds any more.
    fn forget(&self) {
        self.last_feed_seq.set(None);
        self.fences_held.borrow_mut().clear();
        self.others_live.borrow_mut().take();
    }
}

/// The sessions' last event numbers a PostgreSQL writer knows across its transactions, so
/// that a session's events are numbered without asking the server: their statements are
/// then held ([`Conn::run_later`]) instead of answered, one round trip fewer under the write
/// lock for each session a batch stores events of.
///
/// **Why it stays true.** Only a batch holding the write lock numbers events, and every
/// event has a feed number. A number is known from this writer's own committed batches; at
/// each `BEGIN` (under the lock) the server says which sessions got events after the feed
/// number this writer knew last (`through`), and those are forgotten. A number that is
/// wrong anyway (too low) makes the events' insert collide with the primary key: the batch
/// fails, is made again with savepoints, where numbers are asked, and what it learns
/// replaces the wrong one. None is ever too high: only committed numbers are kept.
#[derive(Default)]
struct SessionSeqs {
    /// Feed number up to which `known` has been told what others stored; `None`: nothing
    /// is known.
    through: std::cell::Cell<Option<i64>>,
    known: std::cell::RefCell<std::collections::HashMap<String, i64>>,
    /// This transaction's numbers, kept at its commit; `None` for a session numbered in a
    /// savepoint that was rolled back since (its number is not known).
    staged: std::cell::RefCell<std::collections::HashMap<String, Option<i64>>>,
}

/// The most sessions [`SessionSeqs`] keeps before it starts over (a daemon running a few
/// hundred sessions keeps them all).
const SESSION_SEQS_KEPT: usize = 10_000;

impl SessionSeqs {
    fn forget_all(&self) {
        self.through.set(None);
        self.known.borrow_mut().clear();
        self.staged.borrow_mut().clear();
    }

    /// A write transaction began, the server telling which sessions got events after
    /// `through` (`None`: it was not asked, or could not say).
    fn begin(&self, touched: Option<Touched>) {
        self.staged.borrow_mut().clear();
        match touched {
            Some(Touched::Sessions(touched)) => {
                let mut known = self.known.borrow_mut();
                for session in touched {
                    known.remove(&session);
                }
            }
            Some(Touched::TooMany) | None => self.forget_all(),
        }
    }

    /// The session's number: this transaction's, else the one known.
    fn get(&self, session_id: &str) -> Option<i64> {
        match self.staged.borrow().get(session_id) {
            Some(staged) => *staged,
            None => self.known.borrow().get(session_id).copied(),
        }
    }

    fn stage(&self, session_id: &str, seq: i64) {
        self.staged
            .borrow_mut()
            .insert(session_id.to_string(), Some(seq));
    }

    /// A savepoint was rolled back: the numbers this transaction gave may be undone.
    fn savepoint_rolled_back(&self) {
        for seq in self.staged.borrow_mut().values_mut() {
            *seq = None;
        }
    }

    /// The transaction ended: committed up to feed number `through` (its numbers are kept),
    /// or not (or in doubt: then nothing is known any more).
    fn ended(&self, committed_through: Option<i64>) {
        let staged = self.staged.take();
        let Some(through) = committed_through else {
            self.forget_all();
            return;
        };
        let mut known = self.known.borrow_mut();
        for (session, seq) in staged {
            match seq {
                Some(seq) => known.insert(session, seq),
                None => known.remove(&session),
            };
        }
        if known.len() > SESSION_SEQS_KEPT {
            known.clear();
        }
        self.through.set(Some(through));
    }
}

/// While it lives, writes may be held ([`Conn::holding_writes`]); dropped, none is.
pub(crate) struct HoldingWrites<'a>(&'a Conn);

impl Drop for HoldingWrites<'_> {
    fn drop(&mut self) {
        if let ConnInner::Postgres(connection) = &self.0 .0 {
            connection.hold_writes(false);
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Conn({:?})", self.dialect())
    }
}

impl Conn {
    pub fn dialect(&self) -> Dialect {
        match &self.0 {
            ConnInner::Sqlite(_) => Dialect::Sqlite,
            ConnInner::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, WAL checkpoints).
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.0 {
            ConnInner::Sqlite(connection) => Some(connection),
            ConnInner::Postgres(_) => None,
        }
    }

    /// The SQLite connection, mutably (migrations take rusqlite transactions).
    pub fn as_sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match &mut self.0 {
            ConnInner::Sqlite(connection) => Some(connection),
            ConnInner::Postgres(_) => None,
        }
    }

    pub fn as_postgres(&self) -> Option<&PgConn> {
        match &self.0 {
            ConnInner::Sqlite(_) => None,
            ConnInner::Postgres(connection) => Some(connection),
        }
    }

    /// Compiles a statement into the connection's cache ahead of its first use.
    pub fn prepare(&self, sql: &str) -> Result<()> {
        match &self.0 {
            ConnInner::Sqlite(connection) => connection.prepare_cached(sql).map(|_| ())?,
            ConnInner::Postgres(connection) => connection.prepare(sql)?,
        }
        Ok(())
    }

    /// Runs a statement that returns no rows (or whose rows are not wanted); the number of
    /// rows it changed.
    pub fn run(&self, sql: &str, args: &[&dyn Param]) -> Result<u64> {
        match &self.0 {
            ConnInner::Sqlite(connection) => {
                let changed = connection
                    .prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(args.iter()))?;
                Ok(changed as u64)
            }
            ConnInner::Postgres(connection) => connection.execute(sql, args),
        }
    }

    /// Runs a write whose answer (the rows it changed) nobody reads. Inside a ledger batch on
    /// PostgreSQL that holds its writes ([`Conn::hold_writes`]) it is sent with the next
    /// statement whose answer is read, in the same round trip, and a failure shows there:
    /// the batch's attempt fails, and is made again without holding anything back. Else (and
    /// always on SQLite, in process) it runs at once.
    pub fn run_later(&self, sql: &str, args: &[&dyn Param]) -> Result<()> {
        match &self.0 {
            ConnInner::Sqlite(_) => self.run(sql, args).map(|_| ()),
            ConnInner::Postgres(connection) => connection.execute_later(sql, args),
        }
    }

    /// Lets the writes of [`Conn::run_later`] be held back until the next statement that is
    /// answered, while the guard lives (PostgreSQL; the ledger holds them for a batch run
    /// without savepoints, where a failing write fails the whole attempt anyway).
    pub(crate) fn holding_writes(&self, hold: bool) -> HoldingWrites<'_> {
        if let ConnInner::Postgres(connection) = &self.0 {
            connection.hold_writes(hold);
        }
        HoldingWrites(self)
    }

    /// Whether the statement that failed last was one held back by [`Conn::run_later`]
    /// (sent with a later one, or with the `COMMIT`): the write that failed is not the one
    /// the error came back to. Also when a statement the server refused earlier in the
    /// transaction aborted it (its `COMMIT` is then refused rather than answered as a
    /// `ROLLBACK`).
    pub(crate) fn held_write_failed(&self) -> bool {
        self.as_postgres()
            .is_some_and(|connection| connection.held_write_failed())
    }

    /// The first row of a statement, which must return one.
    pub fn row<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        read: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.opt_row(sql, args, read)?.ok_or(DbError::NoRows)
    }

    /// The first row of a statement, if it returns any.
    pub fn opt_row<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        read: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match &self.0 {
            ConnInner::Sqlite(connection) => {
                let mut statement = connection.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(args.iter()))?;
                match rows.next()? {
                    Some(row) => read(&Row::sqlite(row)).map(Some),
                    None => Ok(None),
                }
            }
            ConnInner::Postgres(connection) => match connection.query(sql, args)?.first() {
                Some(row) => read(&Row::postgres(row)).map(Some),
                None => Ok(None),
            },
        }
    }

    /// Every row of a statement, each read by `read`.
    pub fn rows<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        mut read: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        match &self.0 {
            ConnInner::Sqlite(connection) => {
                let mut statement = connection.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(args.iter()))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(read(&Row::sqlite(row))?);
                }
                Ok(out)
            }
            ConnInner::Postgres(connection) => connection
                .query(sql, args)?
                .iter()
                .map(|row| read(&Row::postgres(row)))
                .collect(),
        }
    }

    /// Runs several statements separated by `;`, without parameters (schema steps,
    /// transaction control).
    pub fn batch(&self, sql: &str) -> Result<()> {
        // What the memo forgets: a savepoint rolled back gives its feed numbers back; a
        // transaction's start or end ends all it knew ("COMMIT" is shorter than 11).
        let word: String = sql.trim_start().chars().take(11).collect();
        let word = word.to_ascii_uppercase();
        if word.starts_with("ROLLBACK TO") {
            self.1.last_feed_seq.set(None);
            self.1.session_seqs.savepoint_rolled_back();
        } else if ["BEGIN", "START", "COMMIT", "END", "ROLLBACK"]
            .iter()
            .any(|verb| word.starts_with(verb))
        {
            self.1.forget();
        }
        match &self.0 {
            ConnInner::Sqlite(connection) => Ok(connection.execute_batch(sql)?),
            ConnInner::Postgres(connection) => connection.batch(sql),
        }
    }

    /// The last feed number this write transaction knows of ([`TransactionMemo`]); `None`
    /// outside one or before its first look.
    pub(crate) fn known_last_feed_seq(&self) -> Option<i64> {
        self.in_transaction()
            .then(|| self.1.last_feed_seq.get())
            .flatten()
    }

    /// Notes the last feed number stored in this write transaction.
    pub(crate) fn note_last_feed_seq(&self, seq: i64) {
        if self.in_transaction() {
            self.1.last_feed_seq.set(Some(seq));
        }
    }

    /// Whether the claim (node, epoch) was found holding in this write transaction.
    pub(crate) fn fence_known_held(&self, node_id: &str, epoch: i64) -> bool {
        self.in_transaction()
            && self
                .1
                .fences_held
                .borrow()
                .iter()
                .any(|(node, held)| node == node_id && *held == epoch)
    }

    /// How many daemons other than `node_id` were live as this write transaction began, if it
    /// asked ([`BeginAsks::node`]).
    pub(crate) fn known_others_live(&self, node_id: &str) -> Option<i64> {
        let known = self.1.others_live.borrow();
        match &*known {
            Some((node, count)) if self.in_transaction() && node == node_id => Some(*count),
            _ => None,
        }
    }

    /// Forgets the claims found holding: a rescue in this transaction may have ended some.
    pub(crate) fn forget_fences_held(&self) {
        self.1.fences_held.borrow_mut().clear();
    }

    /// Notes that the claim (node, epoch) holds, for the rest of this write transaction.
    pub(crate) fn note_fence_held(&self, node_id: &str, epoch: i64) {
        if self.in_transaction() {
            self.1
                .fences_held
                .borrow_mut()
                .push((node_id.to_string(), epoch));
        }
    }

    /// Opens the ledger's write transaction, holding the store's write lock: SQLite's
    /// `IMMEDIATE` takes it up front, so another process's writer shows up here, before any
    /// write ran. On PostgreSQL the lock is an advisory one every daemon's ledger takes first
    /// ([`crate::store::postgres::WRITE_LOCK`]): the daemons sharing a store write in turns,
    /// as one SQLite writer does, so that a session's numbers and the feed's are given in
    /// commit order without gaps, and a claim, a rescue and a fence check never race.
    pub fn begin_write(&self) -> Result<()> {
        self.begin_write_asking(&BeginAsks::default())
    }

    /// How long the next write transaction's `BEGIN` waits for the store's write lock before
    /// it is refused as busy: SQLite's busy timeout, PostgreSQL's `lock_timeout` for the
    /// advisory lock alone.
    pub fn set_lock_wait(&self, wait: std::time::Duration) {
        match &self.0 {
            ConnInner::Sqlite(connection) => {
                let _ = connection.busy_timeout(wait);
            }
            ConnInner::Postgres(connection) => connection.set_lock_wait(wait),
        }
    }

    /// [`Conn::begin_write`], and on PostgreSQL, in the same round trip, what `asks` names:
    /// the answers go to the transaction's memo, as if asked by the first write that needs
    /// them (SQLite's questions cost no round trip, so it asks nothing ahead).
    pub fn begin_write_asking(&self, asks: &BeginAsks<'_>) -> Result<()> {
        match &self.0 {
            ConnInner::Sqlite(_) => self.batch("BEGIN IMMEDIATE"),
            ConnInner::Postgres(connection) => {
                self.1.forget();
                let seqs = &self.1.session_seqs;
                let asks = BeginAsks {
                    // Only a store with the feed numbers its events across sessions.
                    touched_since: seqs.through.get().filter(|_| asks.feed),
                    ..*asks
                };
                let mut answers = match connection.begin_write(&asks) {
                    Ok(answers) => answers,
                    Err(error) => {
                        // The BEGIN may have run and the lock not (a timeout, a cancel): the
                        // next attempt must not find an aborted transaction.
                        let _ = self.batch("ROLLBACK");
                        return Err(error);
                    }
                };
                seqs.begin(answers.touched.take());
                if let Some(seq) = answers.last_feed_seq {
                    self.note_last_feed_seq(seq);
                }
                if let (Some(node), Some(epoch)) = (asks.node, answers.own_epoch) {
                    self.note_fence_held(node, epoch);
                }
                if let (Some(node), Some(count)) = (asks.node, answers.others_live) {
                    *self.1.others_live.borrow_mut() = Some((node.to_string(), count));
                }
                Ok(())
            }
        }
    }

    /// Commits the write transaction; on PostgreSQL with `notice` (channel, payload) sent in
    /// it, in the `COMMIT`'s round trip (SQLite has no notices: it is ignored there).
    pub fn commit_notifying(&self, notice: Option<(&str, &str)>) -> Result<()> {
        match &self.0 {
            ConnInner::Sqlite(_) => self.batch("COMMIT"),
            ConnInner::Postgres(connection) => {
                let last_feed_seq = self.1.last_feed_seq.get();
                self.1.forget();
                let committed = connection.commit(notice);
                self.1
                    .session_seqs
                    .ended(last_feed_seq.filter(|_| committed.is_ok()));
                committed
            }
        }
    }

    /// The session's last event number as this writer knows it, in a write transaction
    /// that holds its writes (see [`SessionSeqs`]); `None`: to be asked.
    pub(crate) fn known_event_seq(&self, session_id: &str) -> Option<i64> {
        let holding = self
            .as_postgres()
            .is_some_and(|connection| connection.holds_writes());
        if !holding {
            return None;
        }
        self.1.session_seqs.get(session_id)
    }

    /// Notes the session's last event number after this transaction's events of it
    /// (PostgreSQL; kept if the transaction commits).
    pub(crate) fn note_event_seq(&self, session_id: &str, seq: i64) {
        if self.as_postgres().is_some() {
            self.1.session_seqs.stage(session_id, seq);
        }
    }

    /// The id of the write transaction [`Conn::begin_write`] opened last (PostgreSQL).
    pub fn write_xact(&self) -> Option<i64> {
        match &self.0 {
            ConnInner::Sqlite(_) => None,
            ConnInner::Postgres(connection) => connection.write_xact(),
        }
    }

    /// Whether the write transaction `xact` committed, asked after its `COMMIT` was cut off
    /// from inside the next write transaction: that one holds the write lock, which the cut
    /// one held until it ended, so it has ended. `None` when the server cannot say.
    pub fn committed(&self, xact: i64) -> Result<Option<bool>> {
        let status: Option<String> =
            self.row("SELECT txid_status(?1)", args![xact], |row| row.get(0))?;
        Ok(match status.as_deref() {
            Some("committed") => Some(true),
            Some("aborted") => Some(false),
            _ => None,
        })
    }

    /// Whether a transaction is open on this connection.
    pub fn in_transaction(&self) -> bool {
        match &self.0 {
            ConnInner::Sqlite(connection) => !connection.is_autocommit(),
            ConnInner::Postgres(connection) => connection.in_transaction(),
        }
    }
}

/// Rewrites SQLite's placeholders (`?1`, or a bare `?` counted from 1) into PostgreSQL's
/// (`$1`), leaving quoted text, quoted names and comments as they are.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut next_bare = 1;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // To the closing quote; a doubled quote is an escaped one and stays inside.
                while let Some(inner) = chars.next() {
                    out.push(inner);
                    if inner == c {
                        if chars.peek() == Some(&c) {
                            out.push(chars.next().unwrap_or(c));
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    while let Some(digit) = chars.next_if(char::is_ascii_digit) {
                        out.push(digit);
                    }
                } else {
                    out.push_str(&next_bare.to_string());
                    next_bare += 1;
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writers_session_numbers_are_only_what_it_committed_and_nobody_touched_since() {
        let seqs = SessionSeqs::default();
        let sessions = |names: &[&str]| {
            Some(Touched::Sessions(
                names.iter().map(|n| n.to_string()).collect(),
            ))
        };
        // Nothing is known before a commit; what a transaction numbered is its own at once.
        seqs.begin(None);
        seqs.stage("a", 3);
        seqs.stage("b", 7);
        assert_eq!(seqs.get("a"), Some(3));
        seqs.ended(Some(100));
        assert_eq!((seqs.get("a"), seqs.get("b")), (Some(3), Some(7)));
        assert_eq!(seqs.through.get(), Some(100));
        // Another writer stored events of b since: b is asked again, a is still known.
        seqs.begin(sessions(&["b", "c"]));
        assert_eq!((seqs.get("a"), seqs.get("b")), (Some(3), None));
        // A savepoint rolled back: what this transaction gave is unknown, and stays so.
        seqs.stage("a", 4);
        seqs.savepoint_rolled_back();
        assert_eq!(seqs.get("a"), None);
        seqs.stage("d", 1);
        seqs.ended(Some(120));
        assert_eq!((seqs.get("a"), seqs.get("d")), (None, Some(1)));
        // A transaction that did not commit (or whose commit is in doubt) keeps nothing, and
        // what was known is forgotten.
        seqs.begin(sessions(&[]));
        seqs.stage("e", 5);
        seqs.ended(None);
        assert_eq!((seqs.get("d"), seqs.get("e")), (None, None));
        assert_eq!(seqs.through.get(), None);
        // Too many events since to list their sessions: nothing is known.
        seqs.begin(None);
        seqs.stage("f", 2);
        seqs.ended(Some(130));
        seqs.begin(Some(Touched::TooMany));
        assert_eq!(seqs.get("f"), None);
    }

    #[test]
    fn a_transactions_memo_lasts_as_long_as_the_transaction() {
        let conn = Conn::from(rusqlite::Connection::open_in_memory().unwrap());
        conn.batch("SAVEPOINT x; RELEASE x").unwrap();
        conn.note_last_feed_seq(3);
        assert_eq!(conn.known_last_feed_seq(), None, "outside a transaction");
        conn.batch("BEGIN").unwrap();
        conn.note_last_feed_seq(5);
        conn.note_fence_held("node", 2);
        assert_eq!(conn.known_last_feed_seq(), Some(5));
        assert!(conn.fence_known_held("node", 2));
        assert!(!conn.fence_known_held("node", 3), "another epoch");
        conn.batch("SAVEPOINT op").unwrap();
        conn.batch("ROLLBACK TO op; RELEASE op").unwrap();
        assert_eq!(conn.known_last_feed_seq(), None, "numbers rolled back");
        assert!(
            conn.fence_known_held("node", 2),
            "a rollback to a savepoint ends no claim"
        );
        conn.note_last_feed_seq(6);
        conn.batch("COMMIT").unwrap();
        conn.batch("BEGIN").unwrap();
        assert_eq!(
            conn.known_last_feed_seq(),
            None,
            "the next transaction asks again"
        );
        assert!(!conn.fence_known_held("node", 2));
        conn.note_fence_held("node", 2);
        conn.forget_fences_held();
        assert!(
            !conn.fence_known_held("node", 2),
            "forgotten after a rescue"
        );
        conn.batch("ROLLBACK").unwrap();
    }

    #[test]
    fn placeholders_are_numbered_outside_quotes_and_comments() {
        assert_eq!(
            numbered_placeholders("SELECT a FROM t WHERE b = ?1 AND c = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = $12"
        );
        assert_eq!(numbered_placeholders("VALUES (?, ?)"), "VALUES ($1, $2)");
        assert_eq!(
            numbered_placeholders("SELECT '?1', \"a?\" -- ?3\n, ?2"),
            "SELECT '?1', \"a?\" -- ?3\n, $2"
        );
        assert_eq!(
            numbered_placeholders("SELECT 'it''s ?' || ?1"),
            "SELECT 'it''s ?' || $1"
        );
    }

    #[test]
    fn sqlite_runs_reads_and_decodes() {
        let conn = Conn::from(rusqlite::Connection::open_in_memory().unwrap());
        conn.batch("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, flag INTEGER)")
            .unwrap();
        let changed = conn
            .run("INSERT INTO t VALUES (?1, ?2, ?3)", args!["a", 7_i64, true])
            .unwrap();
        assert_eq!(changed, 1);
        conn.run(
            "INSERT INTO t VALUES (?1, ?2, ?3)",
            args!["b", None::<i64>, false],
        )
        .unwrap();
        let rows = conn
            .rows("SELECT id, n, flag FROM t ORDER BY id", args![], |row| {
                Ok((
                    row.get::<String>(0)?,
                    row.get::<Option<u32>>(1)?,
                    row.get::<bool>(2)?,
                ))
            })
            .unwrap();
        assert_eq!(
            rows,
            vec![("a".into(), Some(7), true), ("b".into(), None, false)]
        );
        let missing = conn
            .opt_row("SELECT n FROM t WHERE id = ?1", args!["z"], |row| {
                row.get::<i64>(0)
            })
            .unwrap();
        assert_eq!(missing, None);
        let error = conn
            .row("SELECT id FROM t WHERE id = ?1", args!["a"], |row| {
                row.get::<i64>(0)
            })
            .unwrap_err();
        assert!(
            matches!(error, DbError::Decode { column: 0, .. }),
            "{error}"
        );
        let duplicate = conn
            .run("INSERT INTO t VALUES (?1, 1, 1)", args!["a"])
            .unwrap_err();
        assert!(duplicate.is_unique_violation(), "{duplicate}");
    }
}
