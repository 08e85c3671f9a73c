//! The PostgreSQL connection: the store runtime, connecting, the statement cache, and the
//! value conversions behind [`super::sql`].
//!
//! **Why a runtime of its own.** tokio-postgres is async; corral's store code is synchronous
//! (the ledger's writer runs on a `SyncArbiter` thread, readers on actix's threads and in the
//! CLI). Each connection's I/O task runs on the *store runtime*, one tokio worker thread made
//! with the first connection and kept for the process; callers block on a query's future with
//! `futures_executor::block_on`. A query's future only sends on a channel and waits for the
//! answer, so it needs no reactor of the caller's. (The synchronous `postgres` crate cannot
//! serve here: it starts a runtime of its own inside each call, which panics on any thread
//! that already runs one, as actix's do.) Blocking a thread on a read is what a SQLite read
//! does too.
//!
//! **The one rule**: never block on the store runtime from its own thread (it would wait on
//! itself). No store code runs there: only the connections' tasks.
//!
//! **The exception: the ledger's writer** ([`PgConn::connect_driven_here`]). Its connection's
//! task runs on a current-thread runtime of its own, driven by the writer's thread while it
//! waits for an answer: its round trips hold the store's write lock, which every daemon of a
//! shared store waits on, and each hop to the store thread and back was two more thread
//! wakeups on busy cores. Between batches nothing drives it: a connection the server ended
//! meanwhile fails the next `BEGIN`, which is tried again on a new one (`PgConn::batch`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::OnceLock;

use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::sql::{numbered_placeholders, Arg, DbError, Param, Result, Value};

/// How many prepared statements a connection keeps (the SQLite side keeps as many).
const STATEMENT_CACHE: usize = 256;

/// The thread name of the store runtime's worker, by which [`block`] tells it is not on it.
const STORE_THREAD: &str = "corral-store";

/// The store runtime (made on first use): also drives [`super::listen`]'s connection.
pub(crate) fn store_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(STORE_THREAD)
            .enable_all()
            .build()
            .expect("the store runtime's thread could not start")
    })
}

/// Waits for `future` on the calling thread.
fn block<F: std::future::Future>(future: F) -> F::Output {
    debug_assert!(
        std::thread::current().name() != Some(STORE_THREAD),
        "blocking on the store runtime from its own thread"
    );
    futures_executor::block_on(future)
}

/// Why a connection could not be made, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the PostgreSQL server at {target} refused the login: {message}")]
    Refused { target: String, message: String },
    #[error("the PostgreSQL server at {target} cannot be reached: {message}")]
    Unreachable { target: String, message: String },
}

/// One PostgreSQL connection, its statements and whether a transaction is open.
///
/// **Reconnecting.** When the server ends the connection (a restart, a network cut), the next
/// `BEGIN` through [`PgConn::batch`] (or [`PgConn::begin_write`]) makes a new one, never a
/// statement inside a transaction: a transaction cut off is lost whole. So the ledger's
/// writer, which opens each batch with `BEGIN`, comes back with the database; until then its
/// batches wait as for a locked SQLite file, and a batch cut off is made again (its
/// transaction id tells whether a `COMMIT` cut off had committed first).
pub struct PgConn {
    client: RefCell<Client>,
    /// How to connect again, and what names the server in errors (no password).
    config: Box<tokio_postgres::Config>,
    target: String,
    /// Prepared statements by their SQLite-form text; cleared when full (the texts are a few
    /// dozen constants, plus the dynamic filters of `monitor`) and with a new connection.
    statements: RefCell<HashMap<String, Statement>>,
    /// Set by `BEGIN`, cleared by `COMMIT`/`ROLLBACK` through [`PgConn::batch`].
    transaction: Cell<bool>,
    /// The id of the write transaction [`PgConn::begin_write`] opened last: after a `COMMIT`
    /// whose connection was cut, the server says by it whether the transaction committed.
    write_xact: Cell<Option<i64>>,
    /// Whether writes whose answer nobody reads may wait in `held` ([`PgConn::execute_later`]).
    hold: Cell<bool>,
    /// Those writes, in order, with their values: sent ahead of the next statement whose
    /// answer is read, in its round trip (tokio-postgres sends a request when its future is
    /// first polled, and runs requests in that order). Under the store's write lock each
    /// round trip saved is time the other daemons do not wait.
    held: RefCell<Vec<(Statement, Vec<Value>)>>,
    /// Set when a held write failed (the error then came back to a later statement).
    held_failed: Cell<bool>,
    /// Set when the server refused a statement inside the open transaction, which it then
    /// aborted (until a `ROLLBACK TO`): its `COMMIT` would be answered as a `ROLLBACK`,
    /// without an error, so [`PgConn::commit`] refuses it instead.
    aborted: Cell<bool>,
    /// How long the next `BEGIN` waits for the store's write lock (see [`LOCK_WRITES`]).
    /// Unbounded, a foreign session holding it (a person's `psql`, a paused process) stalled
    /// every write for as long as it held it, past `store.lock_timeout_ms`.
    lock_wait: Cell<std::time::Duration>,
    /// The runtime that drives this connection's I/O on the thread that uses it, for the
    /// ledger's writer ([`PgConn::connect_driven_here`]); `None`: the store runtime does.
    here: Option<tokio::runtime::Runtime>,
}

impl PgConn {
    /// Connects with `config`; `target` names the server in errors (the URL without its
    /// password).
    pub fn connect(
        config: &tokio_postgres::Config,
        target: &str,
    ) -> std::result::Result<PgConn, ConnectError> {
        Self::connect_on(config, target, None)
    }

    /// [`PgConn::connect`], the connection's I/O driven by the thread that uses it, while it
    /// waits for an answer: no hop to the store runtime's thread and back at each round
    /// trip. For the ledger's writer, whose round trips under the store's write lock are what
    /// other daemons wait on; its thread must never be inside a tokio runtime.
    pub fn connect_driven_here(
        config: &tokio_postgres::Config,
        target: &str,
    ) -> std::result::Result<PgConn, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| ConnectError::Unreachable {
                target: target.to_string(),
                message: format!("a runtime for the connection: {error}"),
            })?;
        Self::connect_on(config, target, Some(runtime))
    }

    fn connect_on(
        config: &tokio_postgres::Config,
        target: &str,
        here: Option<tokio::runtime::Runtime>,
    ) -> std::result::Result<PgConn, ConnectError> {
        let connection = PgConn {
            client: RefCell::new(login(config, target, here.as_ref())?),
            config: Box::new(config.clone()),
            target: target.to_string(),
            statements: RefCell::new(HashMap::new()),
            transaction: Cell::new(false),
            write_xact: Cell::new(None),
            hold: Cell::new(false),
            held: RefCell::new(Vec::new()),
            held_failed: Cell::new(false),
            aborted: Cell::new(false),
            lock_wait: Cell::new(DEFAULT_LOCK_WAIT),
            here,
        };
        Ok(connection)
    }

    /// A new connection in place of one the server ended.
    fn reconnect(&self) -> std::result::Result<(), ConnectError> {
        let client = login(&self.config, &self.target, self.here.as_ref())?;
        *self.client.borrow_mut() = client;
        self.statements.borrow_mut().clear();
        self.transaction.set(false);
        self.held.borrow_mut().clear();
        tracing::info!(store = %self.target, "reconnected to the store");
        Ok(())
    }

    fn statement(&self, sql: &str) -> Result<Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let client = self.client.borrow();
        let statement = self.block(client.prepare(&numbered_placeholders(sql)))?;
        let mut statements = self.statements.borrow_mut();
        if statements.len() >= STATEMENT_CACHE {
            statements.clear();
        }
        statements.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }

    pub(crate) fn prepare(&self, sql: &str) -> Result<()> {
        self.statement(sql).map(|_| ())
    }

    pub(crate) fn execute(&self, sql: &str, args: &[&dyn Param]) -> Result<u64> {
        let statement = self.statement(sql)?;
        let args = Args::new(args);
        let client = self.client.borrow();
        self.after_held(&client, client.execute(&statement, &args.refs()))
    }

    pub(crate) fn query(&self, sql: &str, args: &[&dyn Param]) -> Result<Vec<tokio_postgres::Row>> {
        let statement = self.statement(sql)?;
        let args = Args::new(args);
        let client = self.client.borrow();
        self.after_held(&client, client.query(&statement, &args.refs()))
    }

    /// A write whose answer nobody reads: held back while [`PgConn::hold_writes`] is on and
    /// a transaction is open (see `held`), else run at once.
    pub(crate) fn execute_later(&self, sql: &str, args: &[&dyn Param]) -> Result<()> {
        if !self.holds_writes() {
            return self.execute(sql, args).map(|_| ());
        }
        let statement = self.statement(sql)?;
        let values = args.iter().map(|param| Value::from(param.arg())).collect();
        self.held.borrow_mut().push((statement, values));
        Ok(())
    }

    pub(crate) fn hold_writes(&self, hold: bool) {
        self.hold.set(hold);
    }

    /// Whether writes are held now: [`PgConn::hold_writes`] on, in a transaction.
    pub(crate) fn holds_writes(&self) -> bool {
        self.hold.get() && self.transaction.get()
    }

    pub(crate) fn held_write_failed(&self) -> bool {
        self.held_failed.get() || self.aborted.get()
    }

    /// Waits for `last` sent after the held writes, all in one round trip; the first error
    /// in that order is the answer (a held write that failed aborted the transaction, so
    /// what follows it fails too).
    fn after_held<T>(
        &self,
        client: &Client,
        last: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let answer = self.send_after_held(client, last);
        if let Err(DbError::Postgres(error)) = &answer {
            if error.code().is_some() && self.transaction.get() {
                self.aborted.set(true);
            }
        }
        answer
    }

    fn send_after_held<T>(
        &self,
        client: &Client,
        last: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        self.held_failed.set(false);
        let held = self.held.take();
        if held.is_empty() {
            return Ok(self.block(last)?);
        }
        let values: Vec<Vec<Arg<'_>>> = held
            .iter()
            .map(|(_, values)| values.iter().map(Param::arg).collect())
            .collect();
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = values
            .iter()
            .map(|args| args.iter().map(|arg| arg as &(dyn ToSql + Sync)).collect())
            .collect();
        // `join_all` polls its futures in order, so they are sent in order, before `last`.
        let writes = futures_util::future::join_all(
            held.iter()
                .zip(&refs)
                .map(|((statement, _), args)| client.execute(statement, args)),
        );
        let (written, last) = self.block(futures_util::future::join(writes, last));
        if let Some(Err(error)) = written.into_iter().find(|result| result.is_err()) {
            self.held_failed.set(true);
            return Err(error.into());
        }
        Ok(last?)
    }

    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        let word: String = sql
            .trim_start()
            .chars()
            .take(12)
            .collect::<String>()
            .to_ascii_uppercase();
        let begins = word.starts_with("BEGIN") || word.starts_with("START");
        if begins && self.is_closed() {
            self.reconnect()?;
        }
        let rolls_back = word.starts_with("ROLLBACK") && !word.contains(" TO");
        if begins || rolls_back {
            // Nothing held is wanted any more (a rolled-back batch, or a new one).
            self.held.borrow_mut().clear();
        }
        if begins || rolls_back {
            self.aborted.set(false);
        }
        let client = self.client.borrow();
        let result = self.after_held(&client, client.batch_execute(sql));
        drop(client);
        if result.is_ok() && word.starts_with("ROLLBACK TO") {
            self.aborted.set(false);
        }
        if begins {
            self.transaction.set(result.is_ok());
        } else if word.starts_with("COMMIT") || rolls_back {
            self.transaction.set(false);
        }
        if result.is_err() && self.is_closed() {
            self.transaction.set(false);
        }
        result
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.transaction.get()
    }

    /// How long the next `BEGIN` waits for the write lock; at least 1 ms (`lock_timeout` 0
    /// would mean no bound at all).
    pub(crate) fn set_lock_wait(&self, wait: std::time::Duration) {
        self.lock_wait
            .set(wait.max(std::time::Duration::from_millis(1)));
    }

    /// Opens a ledger batch's transaction with the store's write lock ([`LOCK_WRITES`]) and
    /// keeps its transaction id ([`PgConn::write_xact`]); reconnects first when the server
    /// ended the connection. In the same round trip, once the lock is held, it reads what
    /// `asks` names, all in one statement after the lock's: that statement's snapshot is
    /// taken once the lock is held, so it sees what committed before the lock came (a
    /// statement's snapshot is taken before its functions run, so not in the lock's own).
    pub(crate) fn begin_write(&self, asks: &BeginAsks<'_>) -> Result<BeginAnswers> {
        if self.is_closed() {
            self.reconnect()?;
        }
        self.held.borrow_mut().clear();
        self.aborted.set(false);
        self.write_xact.set(None);
        let wait = format!("{}ms", self.lock_wait.get().as_millis());
        // The questions, each a column of one statement whose text depends only on which are
        // asked: a few prepared statements, planned once each (a batch of statements in one
        // string would be parsed and planned at every `BEGIN`, under the lock).
        let mut columns: Vec<&str> = Vec::new();
        let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        // The feed's last number, read once (`f.feed`) for its own column and the touched
        // sessions' bounds.
        let mut from = "";
        if asks.feed {
            from = " FROM (SELECT coalesce(max(feed_seq), 0)::bigint AS feed FROM events) AS f";
            columns.push("f.feed");
        }
        if let Some(node) = asks.node {
            params.push(Box::new(node.to_string()));
            columns.push(
                "(SELECT epoch FROM daemons WHERE node_id = $1::text \
                   AND lease_until >= corral_now_ms())::bigint",
            );
            columns.push(
                "(SELECT count(*) FROM daemons WHERE node_id <> $1::text \
                   AND lease_until >= corral_now_ms())::bigint",
            );
        }
        let touched;
        if let Some(since) = asks.touched_since.filter(|_| asks.feed) {
            params.push(Box::new(since));
            let at = params.len();
            // NULL: none (the feed has not moved: nothing is read); 'many' past the bound;
            // else the sessions as a JSON array. The events are read between two known
            // numbers, so that even the plan made for a young store's statistics is an
            // index range (`feed_seq > $since ORDER BY … LIMIT` was planned as a scan and a
            // sort of every event once a prepared statement's generic plan came from an
            // almost empty table: 0.7 ms a batch under the lock at 6,000 events, growing).
            // The lower bound is a sub-select, which no plan can see into: a custom plan,
            // estimating the range from the number itself, came out cheaper than the
            // generic one, so the server planned the statement anew at nearly every
            // `BEGIN` (3,446 plans in 4,138 batches, 0.16 ms each, under the lock).
            touched = format!(
                "CASE WHEN f.feed <= ${at}::bigint THEN NULL \
                      WHEN f.feed - ${at}::bigint > {TOUCHED_AT_MOST} THEN 'many' \
                      ELSE (SELECT json_agg(DISTINCT session_id)::text FROM events \
                             WHERE feed_seq > (SELECT ${at}::bigint) AND feed_seq <= f.feed) END"
            );
            columns.push(&touched);
        }
        let lock = self.statement(LOCK_WRITES)?;
        let head = match columns.is_empty() {
            true => None,
            false => Some(self.statement(&format!("SELECT {}{from}", columns.join(", ")))?),
        };
        let client = self.client.borrow();
        let lock_args: [&(dyn ToSql + Sync); 2] = [&wait, &WRITE_LOCK];
        let head_args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|param| &**param).collect();
        // One round trip: the three are sent together and run in order, the questions'
        // statement taking its snapshot once the lock is held, so it sees what committed
        // before the lock came.
        let (begun, locked, asked) = self.block(futures_util::future::join3(
            client.batch_execute("BEGIN"),
            client.query_one(&lock, &lock_args),
            futures_util::future::OptionFuture::from(
                head.as_ref().map(|head| client.query_one(head, &head_args)),
            ),
        ));
        drop(client);
        // The first error is the one that counts: what follows it ran in an aborted
        // transaction.
        let row = match begun.and(locked) {
            Ok(row) => row,
            Err(error) => {
                self.transaction.set(!self.is_closed());
                return Err(error.into());
            }
        };
        self.transaction.set(true);
        self.write_xact.set(row.try_get::<_, i64>(2).ok());
        let Some(asked) = asked else {
            return Ok(BeginAnswers::default());
        };
        let asked = asked?;
        let mut column = 0;
        let mut answers = BeginAnswers::default();
        if asks.feed {
            answers.last_feed_seq = asked.try_get::<_, Option<i64>>(column)?;
            column += 1;
        }
        if asks.node.is_some() {
            answers.own_epoch = asked.try_get::<_, Option<i64>>(column)?;
            answers.others_live = asked.try_get::<_, Option<i64>>(column + 1)?;
            column += 2;
        }
        if asks.touched_since.is_some() && asks.feed {
            let text: Option<String> = asked.try_get(column)?;
            answers.touched = match text.as_deref() {
                None => Some(Touched::Sessions(Vec::new())),
                Some("many") => Some(Touched::TooMany),
                Some(json) => serde_json::from_str(json).ok().map(Touched::Sessions),
            };
        }
        Ok(answers)
    }

    /// Commits the open transaction, sending `notice` (channel, payload) inside it first: one
    /// round trip for both. A failed commit leaves the transaction to be rolled back (the
    /// notice may have failed before the `COMMIT` ran), unless the connection is gone.
    pub(crate) fn commit(&self, notice: Option<(&str, &str)>) -> Result<()> {
        let query = match notice {
            Some((channel, payload)) => format!(
                "SELECT pg_notify({}, {}); COMMIT",
                quote_literal(channel),
                quote_literal(payload)
            ),
            None => "COMMIT".to_string(),
        };
        if self.aborted.get() {
            return Err(DbError::Invalid(
                "the transaction was aborted by a statement the server refused".into(),
            ));
        }
        // The held writes go with it: one that fails leaves the `COMMIT` nothing to commit
        // (the transaction is aborted; the server answers it as a `ROLLBACK`), and the
        // failure is the answer ([`PgConn::held_write_failed`]).
        let client = self.client.borrow();
        let result = self.after_held(&client, client.batch_execute(&query));
        drop(client);
        if result.is_ok() || self.is_closed() {
            self.transaction.set(false);
        }
        result
    }

    /// The id of the write transaction opened last by [`PgConn::begin_write`].
    pub(crate) fn write_xact(&self) -> Option<i64> {
        self.write_xact.get()
    }

    /// Waits for `future` on the calling thread, driving the connection's I/O meanwhile when
    /// it is driven here.
    fn block<F: std::future::Future>(&self, future: F) -> F::Output {
        match &self.here {
            Some(runtime) => runtime.block_on(future),
            None => block(future),
        }
    }

    /// Whether the server ended the connection (or it broke): a pool drops such a one.
    pub fn is_closed(&self) -> bool {
        self.client.borrow().is_closed()
    }
}

/// Logs in, on the store runtime, and sets what every corral connection has.
fn login(
    config: &tokio_postgres::Config,
    target: &str,
    here: Option<&tokio::runtime::Runtime>,
) -> std::result::Result<Client, ConnectError> {
    let config = config.clone();
    let login = async move {
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %super::sql::postgres_message(&error), "a store connection ended");
            }
        });
        // A transaction left open by a stuck client would hold its locks forever: above all
        // the ledgers' write lock (`WRITE_LOCK`), which every daemon of a shared store waits
        // for. A batch never idles between its statements; a daemon paused (SIGSTOP) or cut
        // off inside one has its session ended by the server after this, and its lock freed.
        //
        // And plans for a store that is in memory, as a corral store is once used: at the
        // default `random_page_cost` (4, a disk's seeks) a seq scan of a few pages looked
        // cheaper than a lookup by key, and the statements under the write lock walked every
        // session and project at each question (a claim's read of the queue took 0.78-0.95
        // ms on a store of 200 sessions, 0.28-0.40 ms at 1.1). A value the server, the
        // database, the role or the URL's options set is left as it is.
        client
            .batch_execute(
                "SET idle_in_transaction_session_timeout = '3s'; \
                 SELECT set_config('random_page_cost', '1.1', false) \
                  WHERE (SELECT source FROM pg_settings WHERE name = 'random_page_cost') = 'default'",
            )
            .await?;
        Ok::<_, tokio_postgres::Error>(client)
    };
    // Its connection task is spawned where it logs in: on the runtime that drives it.
    let connected = match here {
        Some(runtime) => Ok(runtime.block_on(login)),
        None => block(store_runtime().spawn(login)),
    };
    let unreachable = |message: String| ConnectError::Unreachable {
        target: target.to_string(),
        message,
    };
    match connected {
        Ok(Ok(client)) => Ok(client),
        // Refused: a login or a database the server will not accept (28xxx, 3D000). Anything
        // else it says at login — starting up or shutting down (57P0x), too many connections
        // (53300) — passes, and is waited out like a server that cannot be reached.
        Ok(Err(error))
            if error
                .code()
                .is_some_and(|code| code.code().starts_with("28") || code.code() == "3D000") =>
        {
            Err(ConnectError::Refused {
                target: target.to_string(),
                message: super::sql::postgres_message(&error),
            })
        }
        Ok(Err(error)) => Err(unreachable(super::sql::postgres_message(&error))),
        Err(join) => Err(unreachable(join.to_string())),
    }
}

/// A statement's parameters as tokio-postgres takes them.
struct Args<'a>(Vec<Arg<'a>>);

impl<'a> Args<'a> {
    fn new(args: &'a [&'a dyn Param]) -> Self {
        Args(args.iter().map(|param| param.arg()).collect())
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0
            .iter()
            .map(|arg| arg as &(dyn ToSql + Sync))
            .collect()
    }
}

type BoxError = Box<dyn StdError + Sync + Send>;

impl ToSql for Arg<'_> {
    /// In the type the server inferred for the parameter: integers narrow or widen, a boolean
    /// becomes 0/1 for an integer column (corral's booleans are `BIGINT`), an integer becomes a
    /// boolean where the server wants one.
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match *self {
            Arg::Null => Ok(IsNull::Yes),
            Arg::Int(value) => int_to_sql(value, ty, out),
            Arg::Bool(value) => {
                if *ty == Type::BOOL {
                    value.to_sql(ty, out)
                } else {
                    int_to_sql(i64::from(value), ty, out)
                }
            }
            Arg::Real(value) => match *ty {
                Type::FLOAT4 => (value as f32).to_sql(ty, out),
                Type::FLOAT8 => value.to_sql(ty, out),
                _ => Err(format!("a real given for a parameter of type {ty}").into()),
            },
            Arg::Text(value) => match *ty {
                Type::INT8 | Type::INT4 | Type::INT2 => {
                    Err(format!("text given for a parameter of type {ty}").into())
                }
                // The stores' one rule for text (`sql::storable`): no NUL reaches the server.
                _ => super::sql::storable(value)
                    .as_ref()
                    .to_sql(&Type::TEXT, out),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

fn int_to_sql(value: i64, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
    match *ty {
        Type::INT8 => value.to_sql(ty, out),
        Type::INT4 => i32::try_from(value)?.to_sql(ty, out),
        Type::INT2 => i16::try_from(value)?.to_sql(ty, out),
        Type::BOOL => (value != 0).to_sql(ty, out),
        Type::FLOAT8 => (value as f64).to_sql(ty, out),
        Type::TEXT | Type::VARCHAR => value.to_string().to_sql(ty, out),
        _ => Err(format!("an integer given for a parameter of type {ty}").into()),
    }
}

/// Any column, read into a [`Value`].
pub(crate) struct AnyValue(pub Value);

impl<'a> FromSql<'a> for AnyValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        Ok(AnyValue(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT2 => Value::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::OID => Value::Int(i64::from(u32::from_sql(ty, raw)?)),
            Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            _ if <&str as FromSql>::accepts(ty) => {
                Value::Text(<&str>::from_sql(ty, raw)?.to_string())
            }
            _ => return Err(format!("a column of type {ty}, which corral does not store").into()),
        }))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, BoxError> {
        Ok(AnyValue(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

impl From<ConnectError> for DbError {
    fn from(error: ConnectError) -> Self {
        match error {
            ConnectError::Unreachable { .. } => DbError::Unreachable(error.to_string()),
            ConnectError::Refused { .. } => DbError::Invalid(error.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Telling a corral store from anything else, and its schema steps.

/// The advisory lock key a schema step holds (`"CRRL"` and step lock 1): two daemons that
/// start at once never both migrate; the second finds the version moved and does nothing.
const MIGRATION_LOCK: i64 = ((super::APPLICATION_ID as i64) << 32) | 1;

/// The advisory lock key of the ledgers' writes (`"CRRL"` and lock 2), held by each batch
/// from its `BEGIN` to its end (see [`super::sql::Conn::begin_write`]).
pub const WRITE_LOCK: i64 = ((super::APPLICATION_ID as i64) << 32) | 2;

/// A ledger batch's statement after its `BEGIN`: the write lock ([`WRITE_LOCK`], `$2`),
/// waited for at most [`PgConn::set_lock_wait`]'s wait (`$1`, as `lock_timeout`, set for the
/// lock alone: the target list runs in order), and the transaction's id (column 2).
pub const LOCK_WRITES: &str = "SELECT set_config('lock_timeout', $1, true), \
     pg_advisory_xact_lock($2), txid_current(), set_config('lock_timeout', '0', true)";

/// How long a `BEGIN` waits for the write lock before the ledger is told the store is locked
/// (SQLSTATE 55P03) and waits on as for a locked SQLite file, bounded by
/// `store.lock_timeout_ms`: the ledger sets it per attempt ([`PgConn::set_lock_wait`]).
const DEFAULT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What a write transaction reads as it begins ([`PgConn::begin_write`]): questions nearly
/// every batch asks, answered in the `BEGIN`'s round trip instead of one each under the lock.
#[derive(Debug, Default, Clone, Copy)]
pub struct BeginAsks<'a> {
    /// The feed's last number (the schema has the feed: step 8 on).
    pub feed: bool,
    /// This daemon's node: its epoch, if its lease holds (its own claims' fence), and how
    /// many other daemons are live (`daemons::others_live`).
    pub node: Option<&'a str>,
    /// The sessions that got events after this feed number (the writer's session numbers
    /// are kept up to it: `sql::SessionSeqs`).
    pub touched_since: Option<i64>,
}

/// The answers to [`BeginAsks`].
#[derive(Debug, Default, Clone)]
pub struct BeginAnswers {
    pub last_feed_seq: Option<i64>,
    pub own_epoch: Option<i64>,
    pub others_live: Option<i64>,
    pub touched: Option<Touched>,
}

/// The sessions that got events since a feed number.
#[derive(Debug, Clone)]
pub enum Touched {
    Sessions(Vec<String>),
    /// More events than [`TOUCHED_AT_MOST`]: not listed.
    TooMany,
}

/// The most events after a writer's last feed number whose sessions a `BEGIN` lists; past
/// it the writer forgets every session's number (a daemon idle while others worked).
const TOUCHED_AT_MOST: i64 = 500;

/// `text` as an SQL string literal, for the statements of a batch (which take no
/// parameters): quotes doubled, and `E''` never needed as backslashes are plain with
/// `standard_conforming_strings` (on since PostgreSQL 9.1).
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// What [`inspect`] found in the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A corral store at this schema version (0: an empty database, which may be made one).
    Store { version: u32 },
    /// Not a store this binary may write.
    Foreign(super::Foreign),
}

/// Checks, with nothing but `SELECT`s, that the database is a corral store this binary can
/// use, or an empty one it may make a store of: the twin of SQLite's `check_connection`.
pub fn inspect(conn: &super::sql::Conn) -> Result<Found> {
    use super::sql::args;
    use super::Foreign;
    // Whether it is identified, and whether it is empty, in ONE statement: one snapshot. Asked
    // in two, another process's first schema step (corral_meta and the tables, one
    // transaction) could commit between them, and its new store would look like someone
    // else's database with tables and no id. Empty means no object of anyone's: no relation
    // (table, view, sequence, index), no function and no type in any schema but the
    // catalogs, and no schema but `public`. A database whose data sits in another schema is
    // someone's.
    let (identified, objects): (bool, i64) = conn.row(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
                         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                         WHERE c.relname = 'corral_meta' AND n.nspname = current_schema()), \
                (SELECT count(*) FROM pg_catalog.pg_class c \
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
                    AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%') \
              + (SELECT count(*) FROM pg_catalog.pg_proc p \
                  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')) \
              + (SELECT count(*) FROM pg_catalog.pg_type t \
                  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace \
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
                    AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%') \
              + (SELECT count(*) FROM pg_catalog.pg_namespace \
                  WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'public') \
                    AND nspname NOT LIKE 'pg\\_toast%' AND nspname NOT LIKE 'pg\\_temp%')",
        args![],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if !identified {
        return Ok(if objects == 0 {
            Found::Store { version: 0 }
        } else {
            Found::Foreign(Foreign::UnidentifiedDatabase)
        });
    }
    let meta = |key: &str| {
        conn.opt_row(
            "SELECT value FROM corral_meta WHERE key = ?1",
            args![key],
            |row| row.get::<String>(0),
        )
    };
    if meta("application")?.as_deref() != Some("corral") {
        return Ok(Found::Foreign(Foreign::OtherApplication));
    }
    let version = match meta("schema_version")? {
        None => 0,
        Some(text) => text
            .parse::<u32>()
            .map_err(|_| DbError::Invalid(format!("corral_meta.schema_version is {text:?}")))?,
    };
    if version > super::migrations::SCHEMA_VERSION {
        return Ok(Found::Foreign(Foreign::Newer { version }));
    }
    Ok(Found::Store { version })
}

/// Applies the PostgreSQL text of each step after the store's version up to `target`, each in
/// one transaction with its version (DDL is transactional here: a kill mid-step leaves N-1).
pub fn migrate(conn: &super::sql::Conn, target: u32) -> Result<u32> {
    use super::migrations_postgres::STEPS;
    use super::sql::args;
    let target = target.min(STEPS.len() as u32);
    let mut version = match inspect(conn)? {
        Found::Store { version } => version,
        Found::Foreign(foreign) => return Err(DbError::Invalid(foreign.to_string())),
    };
    while version < target {
        conn.batch("BEGIN")?;
        let step = (|| -> Result<u32> {
            conn.row(
                "SELECT pg_advisory_xact_lock(?1)::text",
                args![MIGRATION_LOCK],
                |_| Ok(()),
            )?;
            let current = match inspect(conn)? {
                Found::Store { version } => version,
                Found::Foreign(foreign) => return Err(DbError::Invalid(foreign.to_string())),
            };
            if current > version {
                return Ok(current);
            }
            conn.batch(STEPS[version as usize])?;
            conn.run(
                "INSERT INTO corral_meta (key, value) VALUES ('schema_version', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                args![(version + 1).to_string()],
            )?;
            crate::process::kill_point("migration");
            Ok(version + 1)
        })();
        match step {
            Ok(reached) => {
                conn.batch("COMMIT")?;
                if reached == version + 1 {
                    tracing::debug!(version = reached, "store migrated (PostgreSQL)");
                }
                version = reached;
            }
            Err(error) => {
                let _ = conn.batch("ROLLBACK");
                return Err(error);
            }
        }
    }
    Ok(version)
}
