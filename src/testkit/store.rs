//! A real PostgreSQL for the tests: the throwaway cluster `.ci/run` starts, one fresh database
//! per test home, and a reader for assertions on what a store holds.
//!
//! - [`postgres_admin_url`]: the cluster's admin URL (database `postgres`), from
//!   `CORRAL_TEST_POSTGRES_URL`. `.ci/run` says in `CORRAL_TEST_POSTGRES` how starting the
//!   cluster went (`installed` or `unavailable`). A test that needs PostgreSQL and finds none
//!   prints `skipped: PostgreSQL unavailable (CORRAL_TEST_POSTGRES=…)` and returns; with
//!   `installed`, or in CI (`CI` set) unless the install failed, a missing or unreachable
//!   server fails the test instead, so the PostgreSQL tests never pass without PostgreSQL
//!   (the rule `src/testkit/browser.rs` applies to the browser).
//! - [`TestDatabase`]: `CREATE DATABASE corral_t_<uuid>` on that cluster, dropped
//!   `WITH (FORCE)` (whoever is still connected) when the value is. A database each, not a
//!   schema each: advisory locks and `LISTEN` channels are per database, and the tests run in
//!   parallel against one cluster.
//! - [`for_home`]: the database of a test home under `CORRAL_TEST_STORE=postgres` (the second
//!   pass of `.ci/run`), written into the home's `config` as `store.url`.
//! - [`sql`]: the rows of a query as JSON values, for assertions.
//! - [`HomeStore`]: a test home's store on either backend (SQLite's file or the home's
//!   database), read and written with the same SQL text, so the second pass's test files
//!   assert the same things on both; [`skip_sqlite_only`] for the tests about SQLite itself.
//!
//! The helpers block: each runs its driver calls on a current-thread tokio runtime of its
//! own, on a thread of its own, so they also work inside an async test (a runtime cannot be
//! started on a thread that already runs one).

use std::error::Error as _;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, Config, NoTls};

/// How long connecting to the test cluster may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The test cluster's admin URL, or `None` when the test is to skip (having printed why). A
/// missing cluster fails the test (panics) when it has to be there: see the module doc.
pub fn postgres_admin_url() -> Option<String> {
    let said = std::env::var("CORRAL_TEST_POSTGRES").unwrap_or_default();
    match std::env::var("CORRAL_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() && said != "unavailable" => Some(url),
        Ok(url) if !url.is_empty() => unavailable("the cluster did not start"),
        _ => unavailable("CORRAL_TEST_POSTGRES_URL is not set"),
    }
}

/// Whether PostgreSQL must be there: `.ci/run` started it, or this is CI and nobody said the
/// install failed.
fn required() -> bool {
    let said = std::env::var("CORRAL_TEST_POSTGRES").unwrap_or_default();
    let in_ci = std::env::var_os("CI").is_some_and(|value| !value.is_empty());
    said == "installed" || (in_ci && said != "unavailable")
}

/// The skip (`None`, after the printed line) or, when PostgreSQL must be there, the failure.
fn unavailable<T>(why: &str) -> Option<T> {
    let said = std::env::var("CORRAL_TEST_POSTGRES").unwrap_or_else(|_| "unset".into());
    if required() {
        let in_ci = std::env::var("CI").unwrap_or_default();
        panic!(
            "PostgreSQL is unavailable ({why}), yet CORRAL_TEST_POSTGRES={said} (CI={in_ci:?}): \
             the PostgreSQL tests must not pass without it"
        );
    }
    eprintln!("skipped: PostgreSQL unavailable (CORRAL_TEST_POSTGRES={said}): {why}");
    None
}

/// A database of its own on the test cluster, dropped with this value.
pub struct TestDatabase {
    /// The admin URL with this database in place of `postgres` (password kept).
    pub url: String,
    name: String,
    admin: String,
}

impl TestDatabase {
    /// A fresh, empty database; `None` when the test is to skip (see [`postgres_admin_url`]).
    pub fn create() -> Option<TestDatabase> {
        let admin = postgres_admin_url()?;
        let name = format!("corral_t_{}", uuid::Uuid::new_v4().simple());
        let url = with_database(&admin, &name);
        let created = format!("CREATE DATABASE {name}");
        match blocking(&admin, move |client| async move {
            client.batch_execute(&created).await
        }) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("{name} cannot be created: {}", detail(&error)),
            Err(error) => {
                return unavailable(&format!("{} does not answer: {error}", shown(&admin)))
            }
        }
        Some(TestDatabase { url, name, admin })
    }

    /// The database's name (`corral_t_…`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's admin URL this database was made through.
    pub fn admin_url(&self) -> &str {
        &self.admin
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // FORCE ends the sessions still connected (a daemon that did not stop, a reader of
        // a failed test). Never a panic here: a test that is already failing would abort.
        let dropped = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        match blocking(&self.admin, move |client| async move {
            client.batch_execute(&dropped).await
        }) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("note: {} was not dropped: {}", self.name, detail(&error)),
            Err(error) => eprintln!("note: {} was not dropped: {error}", self.name),
        }
    }
}

/// The database of a test home: under `CORRAL_TEST_STORE=postgres`, a fresh one whose URL is
/// written to `HOME/config` as `store.url` (mode 0600: the URL carries the password); else
/// none and nothing written, so the SQLite pass pays nothing. A second pass without a cluster
/// fails the test (it would silently be a SQLite pass).
pub fn for_home(home: &Path) -> Option<TestDatabase> {
    match std::env::var("CORRAL_TEST_STORE").as_deref() {
        Ok("postgres") => {}
        Ok("") | Ok("sqlite") | Err(_) => return None,
        Ok(other) => panic!("CORRAL_TEST_STORE={other:?}: the stores are sqlite and postgres"),
    }
    let Some(database) = TestDatabase::create() else {
        panic!("CORRAL_TEST_STORE=postgres needs the test cluster (CORRAL_TEST_POSTGRES_URL)");
    };
    write_config(home, &database.url);
    Some(database)
}

/// A test home on PostgreSQL whatever `CORRAL_TEST_STORE` says: its database, written to
/// `HOME/config`; `None` when the test is to skip.
pub fn on_postgres(home: &Path) -> Option<TestDatabase> {
    let database = TestDatabase::create()?;
    write_config(home, &database.url);
    Some(database)
}

/// `HOME/config` with the one line `store.url = URL`, owner-only.
fn write_config(home: &Path, url: &str) {
    let path = home.join("config");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|error| panic!("{} cannot be written: {error}", path.display()));
    writeln!(file, "store.url = {url}").unwrap();
}

/// The rows of `query` on the database at `url`, each column as JSON: integers, text, booleans
/// and floats as themselves, NULL as `null`. Another type fails the test (cast it in the query:
/// `sum(…)::int8`, `x::text`).
pub fn sql(url: &str, query: &str) -> Vec<Vec<Value>> {
    let text = query.to_string();
    let rows = blocking(url, move |client| async move {
        let rows = client.query(&text, &[]).await?;
        Ok::<_, tokio_postgres::Error>(
            rows.iter()
                .map(|row| {
                    (0..row.len())
                        .map(|index| row.get::<_, Json>(index).0)
                        .collect()
                })
                .collect(),
        )
    });
    match rows {
        Ok(Ok(rows)) => rows,
        Ok(Err(error)) => panic!("{query:?}: {}", detail(&error)),
        Err(error) => panic!("{query:?}: {} does not answer: {error}", shown(url)),
    }
}

/// Runs one statement (no parameters) on the database at `url`: the rows it changed. For the
/// tests that write a store directly to set up a situation (see [`HomeStore::execute`]).
pub fn execute(url: &str, statement: &str) -> u64 {
    let text = statement.to_string();
    match blocking(url, move |client| async move {
        client.execute(&text, &[]).await
    }) {
        Ok(Ok(changed)) => changed,
        Ok(Err(error)) => panic!("{statement:?}: {}", detail(&error)),
        Err(error) => panic!("{statement:?}: {} does not answer: {error}", shown(url)),
    }
}

/// Whether this is the PostgreSQL pass (`CORRAL_TEST_STORE=postgres`).
pub fn postgres_pass() -> bool {
    std::env::var("CORRAL_TEST_STORE").as_deref() == Ok("postgres")
}

/// For a test about SQLite itself (the file, its header, WAL, `sqlite3`'s locks): `true`,
/// after printing why, when the test is to skip because this is the PostgreSQL pass (its
/// homes have no SQLite file); the first pass runs it.
pub fn skip_sqlite_only(what: &str) -> bool {
    if postgres_pass() {
        eprintln!("skipped: about the SQLite file ({what}); CORRAL_TEST_STORE=postgres");
        return true;
    }
    false
}

/// A SQL string literal of `text` (quotes doubled), the same on both stores (PostgreSQL's
/// `standard_conforming_strings` keeps backslashes as they are, as SQLite does).
pub fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A SQL literal of an optional integer: the number, or `NULL`.
pub fn number_or_null(value: Option<i64>) -> String {
    value.map_or_else(|| "NULL".to_string(), |value| value.to_string())
}

/// A test home's store as the tests read and write it beside corral, on either store: the
/// SQLite file `HOME/corral.db`, or the home's PostgreSQL database. The SQL text must run on
/// both: cast what PostgreSQL types differently (`count(*)` is bigint, which reads as an
/// integer; `sum()` of bigint is numeric: `sum(x)::int8`; a comparison or `EXISTS` is a
/// boolean there and 0/1 in SQLite: `CASE WHEN … THEN 1 ELSE 0 END`), and use no `rowid`,
/// `sqlite_master` or PRAGMA (the schema's questions have methods here).
pub enum HomeStore<'a> {
    Sqlite { home: &'a Path },
    Postgres { home: &'a Path, url: &'a str },
}

impl<'a> HomeStore<'a> {
    /// The store of `home`: its database's `url` when it has one (its `HOME/config`), else
    /// SQLite.
    pub fn of(home: &'a Path, url: Option<&'a str>) -> Self {
        match url {
            Some(url) => HomeStore::Postgres { home, url },
            None => HomeStore::Sqlite { home },
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, HomeStore::Postgres { .. })
    }

    /// The rows of `query`, each column as JSON (integers, text and floats as themselves,
    /// NULL as `null`; see [`sql`]). SQLite is opened read-only, as a reader beside the daemon.
    pub fn sql(&self, query: &str) -> Vec<Vec<Value>> {
        match self {
            HomeStore::Sqlite { home } => sqlite_rows(&home.join("corral.db"), query),
            HomeStore::Postgres { home, url } => {
                not_on_sqlite(home);
                sql(url, query)
            }
        }
    }

    /// The one row of `query` (fails the test when there are none or several).
    pub fn row(&self, query: &str) -> Vec<Value> {
        let mut rows = self.sql(query);
        assert_eq!(rows.len(), 1, "{query:?}: one row expected, got {rows:?}");
        rows.remove(0)
    }

    /// The one value of `query`'s one row.
    pub fn value(&self, query: &str) -> Value {
        let mut row = self.row(query);
        assert_eq!(row.len(), 1, "{query:?}: one column expected, got {row:?}");
        row.remove(0)
    }

    /// Runs one statement (no parameters; values as literals, [`quoted`]): the rows it
    /// changed. For setting up a situation the daemon then meets.
    pub fn execute(&self, statement: &str) -> u64 {
        match self {
            HomeStore::Sqlite { home } => {
                let db = rusqlite::Connection::open(home.join("corral.db"))
                    .unwrap_or_else(|error| panic!("the store does not open: {error}"));
                db.busy_timeout(Duration::from_secs(5)).unwrap();
                db.execute(statement, [])
                    .unwrap_or_else(|error| panic!("{statement:?}: {error}")) as u64
            }
            HomeStore::Postgres { home, url } => {
                not_on_sqlite(home);
                execute(url, statement)
            }
        }
    }

    /// The store's schema version: SQLite's `user_version`, PostgreSQL's
    /// `corral_meta.schema_version` (0 before the first step).
    pub fn schema_version(&self) -> u32 {
        match self {
            HomeStore::Sqlite { home } => {
                let db = sqlite_reader(&home.join("corral.db"));
                db.query_row("PRAGMA user_version", [], |row| row.get(0))
                    .unwrap_or_else(|error| panic!("PRAGMA user_version: {error}"))
            }
            HomeStore::Postgres { .. } => {
                let known = self
                    .value("SELECT CASE WHEN to_regclass('corral_meta') IS NULL THEN 0 ELSE 1 END");
                if known == 0 {
                    return 0;
                }
                let rows = self.sql("SELECT value FROM corral_meta WHERE key = 'schema_version'");
                match rows.first().and_then(|row| row.first()) {
                    None => 0,
                    Some(Value::String(text)) => text
                        .parse()
                        .unwrap_or_else(|_| panic!("corral_meta.schema_version is {text:?}")),
                    Some(other) => panic!("corral_meta.schema_version is {other}"),
                }
            }
        }
    }

    /// The names of `table`'s columns, in their order.
    pub fn columns(&self, table: &str) -> Vec<String> {
        let query = match self {
            HomeStore::Sqlite { .. } => {
                format!(
                    "SELECT name FROM pragma_table_info({}) ORDER BY cid",
                    quoted(table)
                )
            }
            HomeStore::Postgres { .. } => format!(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = {} \
                 ORDER BY ordinal_position",
                quoted(table)
            ),
        };
        self.sql(&query)
            .into_iter()
            .map(|row| row[0].as_str().expect("a column name").to_string())
            .collect()
    }

    /// Makes the store as a corral of schema `version` left it: the steps up to `version`
    /// (SQLite in WAL mode, as corral makes it), nothing else.
    pub fn migrate_to(&self, version: u32) {
        match self {
            HomeStore::Sqlite { home } => {
                let mut db = rusqlite::Connection::open(home.join("corral.db")).unwrap();
                db.pragma_update(None, "journal_mode", "WAL").unwrap();
                let reached = crate::store::migrations::migrate_to(&mut db, version)
                    .unwrap_or_else(|error| panic!("migrating to {version}: {error}"));
                assert_eq!(reached, version);
            }
            HomeStore::Postgres { home, url } => {
                not_on_sqlite(home);
                let parsed = crate::store::location::PgUrl::parse(url)
                    .unwrap_or_else(|error| panic!("{}: {error}", shown(url)));
                let connection =
                    crate::store::postgres::PgConn::connect(&parsed.config(), &shown(url))
                        .unwrap_or_else(|error| panic!("{}: {error}", shown(url)));
                let conn = crate::store::sql::Conn::from(connection);
                let reached = crate::store::postgres::migrate(&conn, version)
                    .unwrap_or_else(|error| panic!("migrating to {version}: {error}"));
                assert_eq!(reached, version);
            }
        }
    }
}

/// A home whose `config` names PostgreSQL must have no SQLite file: one means corral did not
/// use the store it was given, and the test would check the wrong store.
fn not_on_sqlite(home: &Path) {
    let file = home.join("corral.db");
    assert!(
        !file.exists(),
        "{} exists although HOME/config names PostgreSQL: corral made a SQLite store",
        file.display()
    );
}

/// A read-only connection to a SQLite store (waiting out a writer's lock for a while).
fn sqlite_reader(path: &Path) -> rusqlite::Connection {
    let db = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap_or_else(|error| panic!("{} does not open read-only: {error}", path.display()));
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db
}

/// The rows of `query` on the SQLite store at `path`, as [`sql`] gives PostgreSQL's.
fn sqlite_rows(path: &Path, query: &str) -> Vec<Vec<Value>> {
    use rusqlite::types::ValueRef;
    let db = sqlite_reader(path);
    let mut statement = db
        .prepare(query)
        .unwrap_or_else(|error| panic!("{query:?}: {error}"));
    let width = statement.column_count();
    let rows = statement
        .query_map([], |row| {
            (0..width)
                .map(|index| {
                    Ok(match row.get_ref(index)? {
                        ValueRef::Null => Value::Null,
                        ValueRef::Integer(number) => number.into(),
                        ValueRef::Real(number) => number.into(),
                        ValueRef::Text(text) => String::from_utf8_lossy(text).into_owned().into(),
                        ValueRef::Blob(_) => panic!("{query:?}: a blob column (cast it)"),
                    })
                })
                .collect::<rusqlite::Result<Vec<Value>>>()
        })
        .unwrap_or_else(|error| panic!("{query:?}: {error}"));
    rows.map(|row| row.unwrap_or_else(|error| panic!("{query:?}: {error}")))
        .collect()
}

/// One column's value read as JSON (see [`sql`]).
struct Json(Value);

impl<'a> FromSql<'a> for Json {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let value = match *ty {
            Type::INT8 => i64::from_sql(ty, raw)?.into(),
            Type::INT4 => i32::from_sql(ty, raw)?.into(),
            Type::INT2 => i16::from_sql(ty, raw)?.into(),
            Type::OID => u32::from_sql(ty, raw)?.into(),
            Type::BOOL => bool::from_sql(ty, raw)?.into(),
            Type::FLOAT8 => f64::from_sql(ty, raw)?.into(),
            Type::FLOAT4 => f32::from_sql(ty, raw)?.into(),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                <&str>::from_sql(ty, raw)?.into()
            }
            _ => return Err(format!("a column of type {ty}: cast it to int8 or text").into()),
        };
        Ok(Json(value))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Json(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Connects to `url` and runs `work` with the client, on a current-thread runtime on a thread
/// of its own (the connection task spawned beside it on that runtime). `Err` when the server
/// cannot be reached; `work`'s own result otherwise.
fn blocking<T, F, W>(url: &str, work: W) -> Result<T, String>
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
    W: FnOnce(Client) -> F + Send + 'static,
{
    let mut config: Config = url
        .parse()
        .map_err(|error| format!("a malformed URL ({error})"))?;
    config.connect_timeout(CONNECT_TIMEOUT);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async move {
            let (client, connection) = config
                .connect(NoTls)
                .await
                .map_err(|error| detail(&error))?;
            let driver = tokio::spawn(connection);
            let result = work(client).await;
            // The client is gone with `work`: the connection ends (Terminate) and the task too.
            let _ = driver.await;
            Ok(result)
        })
    })
    .join()
    .expect("the PostgreSQL helper thread")
}

/// `url` with its database (the path) replaced by `name`; user, password, host, port and
/// parameters kept. Key-value connection strings get a `dbname` at the end (the last wins).
pub fn with_database(url: &str, name: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return format!("{url} dbname={name}");
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    // The authority ends at the first `/`, `?` or `#` (a password holding one is
    // percent-encoded); the path at the first `?` or `#`.
    let authority_end = authority_start + rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let after = &url[authority_end..];
    let path_end = authority_end + after.find(['?', '#']).unwrap_or(after.len());
    format!("{}/{name}{}", &url[..authority_end], &url[path_end..])
}

/// `url` without its password, for messages.
fn shown(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "the test cluster".into();
    };
    let rest = &url[scheme_end + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => url.replacen(
                authority,
                &format!("{}{}", &authority[..colon], &authority[at..]),
                1,
            ),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// The driver's error with its cause (the server's message, the refused connection): the
/// error's own text is often only "db error".
fn detail(error: &tokio_postgres::Error) -> String {
    match error.source() {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// A transaction held open on a connection (and thread) of its own until
/// [`HeldTransaction::end`]: how a test holds a row lock that the daemon's writes wait for.
pub struct HeldTransaction {
    end: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldTransaction {
    /// Opens a transaction on the database at `url` and runs `statements` in it; returns once
    /// they ran (so what they lock is held).
    pub fn begin(url: &str, statements: &str) -> HeldTransaction {
        let config: Config = url.parse().expect("a well-formed URL");
        let shown = statements.to_string();
        let statements = format!("BEGIN; {statements}");
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        let (begun, started) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let (client, connection) = config.connect(NoTls).await.expect("a connection");
                let driver = tokio::spawn(connection);
                let held = client.batch_execute(&statements).await;
                let failed = held.as_ref().err().map(detail);
                let _ = begun.send(failed);
                if held.is_ok() {
                    let _ = ended.await;
                    let _ = client.batch_execute("ROLLBACK").await;
                }
                drop(client);
                let _ = driver.await;
            })
        });
        if let Ok(Some(failed)) = started.recv() {
            panic!("{shown:?}: {failed}");
        }
        HeldTransaction {
            end: Some(end),
            thread: Some(thread),
        }
    }

    /// Rolls the transaction back (its locks are free) and closes its connection.
    pub fn end(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(end) = self.end.take() {
            let _ = end.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for HeldTransaction {
    fn drop(&mut self) {
        self.finish();
    }
}
