//! A real PostgreSQL for the tests: the throwaway cluster `.ci/run` starts, one fresh database
//! per test home, and a reader for assertions on what a store holds.
//!
//! - [`postgres_admin_url`]: the cluster's admin URL (database `postgres`), from
//!   `CORRAL_TEST_POSTGRES_URL`. `.ci/run` says in `CORRAL_TEST_POSTGRES` how starting the
//!   cluster went (`installed` or `unavailable`). A test that needs PostgreSQL and finds none
//!   prints `skipped: PostgreSQL unavailable (CORRAL_TEST_POSTGRES=…)` and returns; with
//!   `installed`, or in CI (`CI` set) unless the install failed, a missing or unreachable
//!   server fails the test instead, so the PostgreSQL tests never pass without PostgreSQL
//!   (the rule `tests/common/browser.rs` applies to the browser).
//! - [`TestDatabase`]: `CREATE DATABASE corral_t_<uuid>` on that cluster, dropped
//!   `WITH (FORCE)` (whoever is still connected) when the value is. A database each, not a
//!   schema each: advisory locks and `LISTEN` channels are per database, and the tests run in
//!   parallel against one cluster.
//! - [`for_home`]: the database of a test home under `CORRAL_TEST_STORE=postgres` (the second
//!   pass of `.ci/run`), written into the home's `config` as `store.url`.
//! - [`sql`]: the rows of a query as JSON values, for assertions.
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
