//! The PostgreSQL store's own tests, on the throwaway cluster of `.ci/run` (each test on a
//! database of its own, `src/testkit/store.rs`). They run in both passes, whatever
//! `CORRAL_TEST_STORE` says; without a cluster they print why they skip, except in CI.

use crate::common;

use serde_json::json;

use common::daemon::DaemonHome;
use common::store::{sql, with_database, HeldTransaction, TestDatabase};

#[test]
fn a_test_database_is_made_and_dropped() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let name = database.name().to_string();
    let admin = database.admin_url().to_string();
    assert!(name.starts_with("corral_t_"), "{name}");
    assert_eq!(
        sql(&database.url, "SELECT 1, current_database()::text"),
        vec![vec![json!(1), json!(name)]]
    );
    let exists = format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'");
    assert_eq!(sql(&admin, &exists), vec![vec![json!(1)]]);
    drop(database);
    assert_eq!(sql(&admin, &exists), vec![vec![json!(0)]]);
}

#[test]
fn a_home_on_postgres_names_its_database_in_its_config() {
    use std::os::unix::fs::PermissionsExt;
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home
        .store_url()
        .expect("a PostgreSQL home has a store URL")
        .to_string();
    let config = home.path().join("config");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        format!("store.url = {url}\n")
    );
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the URL carries the password");
    let name = sql(&url, "SELECT current_database()::text")[0][0]
        .as_str()
        .unwrap()
        .to_string();
    let admin = common::store::postgres_admin_url().unwrap();
    let exists = format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'");
    assert_eq!(sql(&admin, &exists), vec![vec![json!(1)]]);
    drop(home);
    assert_eq!(sql(&admin, &exists), vec![vec![json!(0)]]);
}

#[test]
fn a_home_of_the_pass_is_on_postgres_only_in_the_postgres_pass() {
    let home = DaemonHome::new();
    let config = home.path().join("config");
    if std::env::var("CORRAL_TEST_STORE").as_deref() == Ok("postgres") {
        let url = home
            .store_url()
            .expect("the second pass's homes are on PostgreSQL");
        assert_eq!(sql(url, "SELECT 1"), vec![vec![json!(1)]]);
        assert!(config.exists());
    } else {
        assert_eq!(home.store_url(), None);
        assert!(!config.exists(), "the SQLite pass writes no config");
    }
}

#[test]
fn the_rows_read_as_json() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let rows = sql(
        &database.url,
        "SELECT 7::int8, 8::int4, 'x'::text, true, 0.5::float8, NULL::int8 \
         UNION ALL SELECT -1, 0, '', false, -2, 3",
    );
    assert_eq!(
        json!(rows),
        json!([[7, 8, "x", true, 0.5, null], [-1, 0, "", false, -2.0, 3]])
    );
}

#[test]
fn a_databases_url_keeps_the_admin_urls_password_and_parameters() {
    assert_eq!(
        with_database(
            "postgres://corral:p%2Fw@127.0.0.1:5432/postgres",
            "corral_t_1"
        ),
        "postgres://corral:p%2Fw@127.0.0.1:5432/corral_t_1"
    );
    assert_eq!(
        with_database("postgresql://u:p@h:1?connect_timeout=5", "d"),
        "postgresql://u:p@h:1/d?connect_timeout=5"
    );
    assert_eq!(
        with_database("postgres://u:p@h/postgres?application_name=x#f", "d"),
        "postgres://u:p@h/d?application_name=x#f"
    );
    assert_eq!(
        with_database("host=h user=u", "d"),
        "host=h user=u dbname=d"
    );
}

// ---------------------------------------------------------------------------------------------
// One daemon on a PostgreSQL store.

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The only text of `rows` of one column.
fn texts(rows: Vec<Vec<serde_json::Value>>) -> Vec<String> {
    rows.into_iter()
        .map(|row| {
            row[0]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| row[0].to_string())
        })
        .collect()
}

/// Another session holding the store's write lock past `store.lock_timeout_ms` (a person's
/// `psql`, a stuck program): a send waits that long, then is refused in one line that names
/// the setting, and nothing of it is stored; once the lock is let go the session works on.
/// (Each `BEGIN` waited for the advisory lock without a bound: every write stalled for as
/// long as the lock was held, and `send` with it, where a locked SQLite file refuses it.)
#[test]
fn a_write_lock_held_past_the_limit_refuses_sends_clearly_and_stores_nothing_of_them() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "locked", &[("store.lock_timeout_ms", "1500")]);
    home.ok(&["send", &session, "before the lock", "--wait"]);
    let held = HeldTransaction::begin(
        &url,
        &format!(
            "SELECT pg_advisory_xact_lock({})",
            corral::store::postgres::WRITE_LOCK
        ),
    );
    let refused = home.run(&["send", &session, "refused by the lock"]);
    let line = String::from_utf8_lossy(&refused.stderr).to_string();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert_eq!(line.trim_end().lines().count(), 1, "one line: {line}");
    assert!(
        line.contains("locked by another writer") && line.contains("store.lock_timeout_ms"),
        "{line}"
    );
    held.end();
    let answer = home.ok(&["send", &session, "after the lock", "--wait"]);
    assert!(answer.contains("after the lock"), "{answer}");
    assert_eq!(
        texts(sql(
            &url,
            "SELECT status || ' ' || text FROM prompts ORDER BY created_at"
        )),
        vec!["done before the lock", "done after the lock"]
    );
}

#[test]
fn a_daemon_on_postgres_runs_prompts_and_records_everything_there() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "on postgres", &[]);
    let answer = home.ok(&["send", &session, "say hello", "--wait"]);
    assert!(!answer.trim().is_empty(), "the fake engine answers");
    home.ok(&["send", &session, "and again", "--wait"]);
    // Everything is in the database, nothing in a SQLite file.
    assert!(
        !home.path().join("corral.db").exists(),
        "no SQLite store is made"
    );
    assert_eq!(
        texts(sql(&url, "SELECT status FROM prompts ORDER BY created_at")),
        vec!["done", "done"]
    );
    assert_eq!(
        texts(sql(&url, "SELECT status FROM runs ORDER BY started_at")),
        vec!["succeeded", "succeeded"]
    );
    let events = sql(
        &url,
        &format!("SELECT count(*) FROM events WHERE session_id = '{session}'"),
    );
    assert!(events[0][0].as_i64().unwrap() >= 4, "{events:?}");
    // The daemon-wide feed numbers every event once, without a gap.
    let feed = sql(
        &url,
        "SELECT count(*), min(feed_seq), max(feed_seq) FROM events",
    );
    assert_eq!(feed[0][0], feed[0][2], "{feed:?}");
    assert_eq!(feed[0][1], json!(1), "{feed:?}");
    // The exec ledger too: this test's own commands.
    let sends = sql(
        &url,
        "SELECT count(*) FROM execs WHERE search_text LIKE '% send %'",
    );
    assert_eq!(sends[0][0], json!(2), "{sends:?}");
    // Readers: the CLI's history and the daemon's session view read the same rows.
    let history = home.json(&["history", &session, "--json"]);
    assert_eq!(
        history["runs"].as_array().map(Vec::len),
        Some(2),
        "{history}"
    );
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(
        shown["prompts"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );
    let version = sql(
        &url,
        "SELECT value FROM corral_meta WHERE key = 'schema_version'",
    );
    assert_eq!(version[0][0], json!(store_schema_version()), "{version:?}");
    home.stop_daemon();
    // And after a restart the daemon finds it all again.
    let again = home.json(&["history", &session, "--json"]);
    assert_eq!(again["runs"], history["runs"]);
}

// A session's events arrive at the ledger in bursts (an engine prints many lines at once);
// on PostgreSQL a burst is numbered and stored in one statement, its events carried as JSON
// records (`store::events`). Each must come out in order, numbered without a gap, its text
// as the engine wrote it.
#[test]
fn a_burst_of_events_is_stored_in_order_with_its_text_as_written() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "bursts", &[]);
    let tricky = r#"quotes " ' \ \u0000 \n $1 ?2 %s {"a":[1]} été 🦀 '; DROP TABLE events; --"#;
    let prompt = format!("@fake deltas=20\n@fake answer={tricky}\nburst");
    let answer = home.ok(&["send", &session, &prompt, "--wait"]);
    assert_eq!(answer.trim_end_matches('\n'), tricky);
    let rows = sql(
        &url,
        &format!(
            "SELECT seq, feed_seq, payload FROM events WHERE session_id = '{session}' ORDER BY seq"
        ),
    );
    let seqs: Vec<i64> = rows.iter().map(|row| row[0].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "{rows:?}"
    );
    let feed: Vec<i64> = rows.iter().map(|row| row[1].as_i64().unwrap()).collect();
    assert!(
        feed.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "this session alone: its feed numbers follow each other, {feed:?}"
    );
    let payloads: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| serde_json::from_str(row[2].as_str().unwrap()).expect("JSON payloads"))
        .collect();
    // The progress items in the order printed, then the answer, its text whole.
    let text = |payload: &serde_json::Value| payload.to_string();
    let steps: Vec<usize> = (1..=20)
        .map(|step| {
            let needle = format!("\"step {step}\"");
            payloads
                .iter()
                .position(|payload| text(payload).contains(&needle))
                .unwrap_or_else(|| panic!("no event of step {step}: {payloads:?}"))
        })
        .collect();
    assert!(steps.windows(2).all(|pair| pair[0] < pair[1]), "{steps:?}");
    let carried = serde_json::to_string(tricky).unwrap();
    let answered = payloads
        .iter()
        .position(|payload| text(payload).contains(&carried))
        .unwrap_or_else(|| panic!("no event carries the answer as written: {payloads:?}"));
    assert!(answered > steps[19], "the answer after the last step");
}

/// Waits (15 s at most) for a connection of the database at `url` other than the test's to
/// wait for a row lock (not the store's write lock, which the batch that waits holds from
/// others, a `corral` command's own included), and ends it as a server restart or a network cut would; returns what it
/// was running.
fn end_the_waiting_writer(url: &str) -> String {
    let admin = common::store::postgres_admin_url().unwrap();
    let waiting =
        "SELECT pid, query::text FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND wait_event <> 'advisory' AND pid <> pg_backend_pid()";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        // Nothing tells a test that a server backend began to wait: it is looked at.
        if let Some(row) = sql(url, waiting).into_iter().next() {
            let pid = row[0].as_i64().unwrap();
            let ended = sql(&admin, &format!("SELECT pg_terminate_backend({pid})"));
            assert_eq!(ended[0][0], json!(true), "the writer {pid} was ended");
            return row[1].as_str().unwrap_or_default().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no write of the daemon waited for the test's lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The session's events: each once, numbered without a gap, the answer among them; one
/// start and one end of each of its `prompts` prompts.
fn assert_stored_once(url: &str, session: &str, prompts: usize, answer: &str) {
    let rows = sql(
        url,
        &format!(
            "SELECT seq, kind, payload FROM events WHERE session_id = '{session}' ORDER BY seq"
        ),
    );
    let seqs: Vec<i64> = rows.iter().map(|row| row[0].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "{rows:?}"
    );
    let answered = rows
        .iter()
        .filter(|row| row[2].as_str().unwrap().contains(answer))
        .count();
    assert!(answered >= 1, "the answer is stored: {rows:?}");
    let kinds: Vec<&str> = rows.iter().map(|row| row[1].as_str().unwrap()).collect();
    for once in ["run.started", "turn.completed", "run.exited", "prompt.done"] {
        let times = kinds.iter().filter(|kind| **kind == once).count();
        assert_eq!(times, prompts, "{once} for {prompts} prompts: {kinds:?}");
    }
}

/// Sends a prompt to the session (its second) while `held` keeps a lock that one of the
/// daemon's batches will wait for, ends that batch's connection there, frees the lock, and
/// checks that the prompt came through whole, stored once. Returns the statement cut.
fn send_through_a_cut(home: &DaemonHome, session: &str, held: HeldTransaction) -> String {
    let url = home.store_url().unwrap();
    let send = home
        .corral(&["send", session, "@fake answer=said once\ngo", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let cut = end_the_waiting_writer(url);
    held.end();
    let out = send.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the cut at {cut:?} cost the prompt: {stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "said once");
    assert_eq!(
        texts(sql(url, "SELECT status FROM runs ORDER BY started_at")),
        vec!["succeeded", "succeeded"]
    );
    assert_stored_once(url, session, 2, "said once");
    cut
}

// The database going away in the middle of a ledger batch (a server restart, a network cut,
// the server ending the connection): the batch is made again on a new connection, and the
// run it was about carries on (issue 14: "keeps its running engines ... resumes when the
// database is back"). Here the test holds the session's row, so the batch that stores the
// engine's answer waits for it after its first statements, and the server ends it there.
#[test]
fn a_batch_cut_off_before_its_commit_is_made_again() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "cut mid-batch", &[]);
    home.ok(&["send", &session, "warm up", "--wait"]);
    let held = HeldTransaction::begin(
        &url,
        &format!("SELECT 1 FROM sessions WHERE id = '{session}' FOR UPDATE"),
    );
    send_through_a_cut(&home, &session, held);
}

// The same cut during the batch's COMMIT: whether it committed is not known on the client.
// The next transaction asks the server by the cut one's id, and makes the batch again only if
// it did not commit. The test's trigger makes the COMMIT of a batch that stores events wait
// for a row the test holds (a deferred constraint trigger runs at COMMIT), and the server
// ends the connection there: that transaction never committed.
#[test]
fn a_batch_cut_off_during_its_commit_is_made_again_if_it_did_not_commit() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "cut at commit", &[]);
    home.ok(&["send", &session, "warm up", "--wait"]);
    common::store::execute(&url, "CREATE TABLE test_gate (id int PRIMARY KEY)");
    common::store::execute(&url, "INSERT INTO test_gate VALUES (1)");
    common::store::execute(
        &url,
        "CREATE FUNCTION test_gate_wait() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM 1 FROM test_gate WHERE id = 1 FOR SHARE; RETURN NULL; END $$",
    );
    common::store::execute(
        &url,
        "CREATE CONSTRAINT TRIGGER test_gate AFTER INSERT ON events DEFERRABLE INITIALLY \
         DEFERRED FOR EACH ROW EXECUTE FUNCTION test_gate_wait()",
    );
    let held = HeldTransaction::begin(&url, "SELECT 1 FROM test_gate WHERE id = 1 FOR UPDATE");
    let cut = send_through_a_cut(&home, &session, held);
    // The batch's events notice goes in the COMMIT's round trip: the statement ends with it.
    assert!(
        cut.trim_end().ends_with("COMMIT"),
        "cut at its COMMIT: {cut:?}"
    );
}

// A corral connection plans for a store in memory (`random_page_cost` 1.1: lookups by key
// over seq scans of small tables), unless someone set the value: here the URL's options.
#[test]
fn connections_plan_for_a_store_in_memory_unless_told_otherwise() {
    use corral::store::postgres::PgConn;
    use corral::store::sql::{args, Conn};
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let cost_on = |url: &str| -> String {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let conn = Conn::from(PgConn::connect(&config, "the test database").unwrap());
        conn.row(
            "SELECT current_setting('random_page_cost')",
            args![],
            |row| row.get::<String>(0),
        )
        .unwrap()
    };
    assert_eq!(cost_on(&database.url), "1.1");
    let separator = if database.url.contains('?') { '&' } else { '?' };
    let told = format!(
        "{}{separator}options=-c%20random_page_cost%3D2",
        database.url
    );
    assert_eq!(cost_on(&told), "2");
}

// What the ledger asks after a cut COMMIT: a write transaction's id, kept when it begins,
// and the server's word afterwards, from another connection, on whether it committed.
#[test]
fn the_server_says_whether_a_write_transaction_committed() {
    use corral::store::postgres::PgConn;
    use corral::store::sql::Conn;
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let config: tokio_postgres::Config = database.url.parse().unwrap();
    let connect = || Conn::from(PgConn::connect(&config, "the test database").unwrap());
    let (writer, asker) = (connect(), connect());
    writer.begin_write().unwrap();
    let committed = writer.write_xact().expect("the transaction's id");
    writer.batch("CREATE TABLE kept (id int)").unwrap();
    writer.batch("COMMIT").unwrap();
    writer.begin_write().unwrap();
    let rolled_back = writer.write_xact().expect("the transaction's id");
    assert_ne!(committed, rolled_back);
    writer.batch("CREATE TABLE dropped (id int)").unwrap();
    writer.batch("ROLLBACK").unwrap();
    assert_eq!(asker.committed(committed).unwrap(), Some(true));
    assert_eq!(asker.committed(rolled_back).unwrap(), Some(false));
}

/// The schema version this binary writes, as `corral_meta` holds it.
fn store_schema_version() -> String {
    corral::store::migrations::SCHEMA_VERSION.to_string()
}

/// A fresh home with no store yet (at `h` inside the returned directory).
fn home_at() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().join("h");
    std::fs::create_dir(&home_dir).unwrap();
    // Its user's alone, as corral makes a home (a looser one is tightened, and said so).
    std::fs::set_permissions(
        &home_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    home
}

/// `corral ARGS` in `home/h` with `CORRAL_STORE_URL=url`.
fn corral_at(home: &tempfile::TempDir, url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .env("CORRAL_HOME", home.path().join("h"))
        .env("CORRAL_STORE_URL", url)
        .env_remove("CORRAL_TEST_STORE")
        .output()
        .unwrap()
}

/// Fails with exactly one line on stderr, exit 1, no daemon started, no SQLite file made.
fn refused(home: &tempfile::TempDir, url: &str, args: &[&str]) -> String {
    let out = corral_at(home, url, args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let h = home.path().join("h");
    assert!(!h.join("corral.db").exists(), "{stderr}");
    assert!(!h.join("daemon.pid").exists(), "{stderr}");
    stderr
}

#[test]
fn a_store_url_that_cannot_serve_is_refused_in_one_line() {
    let Some(admin) = common::store::postgres_admin_url() else {
        return;
    };
    let home = home_at();
    // Malformed.
    let said = refused(
        &home,
        "postgres://corral@127.0.0.1:notaport/x",
        &["project", "list"],
    );
    assert!(said.contains("CORRAL_STORE_URL"), "{said}");
    // Unreachable: nothing listens on port 1.
    let said = refused(
        &home,
        "postgres://corral:pw@127.0.0.1:1/corral",
        &["project", "list"],
    );
    assert!(said.contains("cannot be reached"), "{said}");
    assert!(
        !said.contains(":pw@"),
        "the password is never shown: {said}"
    );
    // A wrong password.
    let wrong = {
        let mut config: tokio_postgres::Config = admin.parse().unwrap();
        config.password("not-the-password");
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            other => panic!("{other:?}"),
        };
        let port = config.get_ports()[0];
        let user = config.get_user().unwrap().to_string();
        format!("postgres://{user}:not-the-password@{host}:{port}/postgres")
    };
    let said = refused(&home, &wrong, &["daemon"]);
    assert!(said.contains("refused the login"), "{said}");
    assert!(!said.contains("not-the-password"), "{said}");
}

/// Several commands started at once on an empty database: one makes the store, the others
/// find it being made or made, and none takes it for someone else's database. (Its identity
/// and its emptiness were asked in two statements: a first schema step that committed between
/// them made a new store look like a foreign database with tables and no id, and `corral run
/// -- sh -c 'corral …'` on a new store failed one of the two, about one time in two.)
#[test]
fn commands_started_at_once_on_an_empty_database_all_use_the_one_store_made() {
    for _round in 0..5 {
        let Some(database) = TestDatabase::create() else {
            return;
        };
        let home = home_at();
        let children: Vec<(Vec<&str>, std::process::Child)> = [
            vec!["run", "--", "true"],
            vec!["monitor", "list", "--all", "--json"],
            vec!["run", "--", "true"],
            vec!["project", "list"],
            vec!["run", "--", "true"],
            vec!["monitor", "list", "--all", "--json"],
        ]
        .into_iter()
        .map(|args| {
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
                .args(&args)
                .env("CORRAL_HOME", home.path().join("h"))
                .env("CORRAL_STORE_URL", &database.url)
                .env_remove("CORRAL_TEST_STORE")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (args, child)
        })
        .collect();
        for (args, child) in children {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{args:?}: {stderr}");
        }
        assert_eq!(
            sql(
                &database.url,
                "SELECT value FROM corral_meta WHERE key = 'schema_version'"
            ),
            vec![vec![json!(store_schema_version())]]
        );
        assert_eq!(
            sql(
                &database.url,
                "SELECT count(*) FROM execs WHERE command LIKE '%\"true\"%'"
            ),
            vec![vec![json!(3)]],
            "each run recorded its exec"
        );
    }
}

#[test]
fn a_foreign_database_is_refused_and_nothing_is_written_to_it() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    sql(&database.url, "CREATE TABLE theirs (x bigint)");
    let tables = "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables \
                  WHERE schemaname = 'public'";
    let before = sql(&database.url, tables);
    let home = home_at();
    let said = refused(&home, &database.url, &["project", "list"]);
    assert!(said.contains("left untouched"), "{said}");
    assert_eq!(sql(&database.url, tables), before);

    // Nor a database whose data is in another schema, with only a view in `public`.
    let Some(other) = TestDatabase::create() else {
        return;
    };
    sql(&other.url, "CREATE SCHEMA app");
    sql(&other.url, "CREATE TABLE app.orders (id bigint)");
    sql(&other.url, "CREATE VIEW public.v AS SELECT 1 AS one");
    let all = "SELECT string_agg(schemaname || '.' || tablename, ',' ORDER BY tablename) \
               FROM pg_tables WHERE schemaname IN ('public', 'app')";
    let before = sql(&other.url, all);
    let said = refused(&home, &other.url, &["ps"]);
    assert!(said.contains("left untouched"), "{said}");
    assert_eq!(sql(&other.url, all), before);
}

#[test]
fn a_newer_schema_is_refused_and_left_as_it_is() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    home.ok(&["project", "list"]);
    sql(
        &url,
        "UPDATE corral_meta SET value = '999' WHERE key = 'schema_version'",
    );
    let count = "SELECT count(*) FROM execs";
    let before = sql(&url, count);
    let out = home.run(&["project", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("newer"), "{stderr}");
    assert_eq!(sql(&url, count), before, "not even the exec is recorded");
}

/// What a server restart or a network cut does to a daemon: every connection it has to the
/// database at `url` (the ledger's writer, the pooled readers, the listener) is ended by the
/// server. Returns how many were ended.
fn end_every_connection(url: &str) -> i64 {
    let admin = common::store::postgres_admin_url().unwrap();
    let database = texts(sql(url, "SELECT current_database()::text")).remove(0);
    let ended = sql(
        &admin,
        &format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{database}' AND pid <> pg_backend_pid()) ended"
        ),
    );
    ended[0][0].as_i64().unwrap()
}

#[test]
fn the_daemon_carries_on_after_the_database_ended_its_connections() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "reconnects", &[]);
    home.ok(&["send", &session, "before", "--wait"]);
    let ended = end_every_connection(&url);
    assert!(ended >= 1, "the daemon held connections: {ended}");
    // The next prompt runs and is stored: the writer and the readers connect again.
    home.ok(&["send", &session, "after", "--wait"]);
    assert_eq!(
        texts(sql(&url, "SELECT status FROM prompts ORDER BY created_at")),
        vec!["done", "done"]
    );
    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(
        shown["prompts"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );
}

// A store that answers but takes no writes for a while: a failover whose address points at a
// standby not yet promoted, a database made read-only, a full disk. The ledger's batches wait
// it out as for a locked store (and `status` says why), and the run that ended meanwhile is
// stored once when writes are taken again: its prompt's end was given up as failed before,
// which left the prompt running in the store until the next boot ran it a second time.
#[test]
fn writes_refused_for_a_while_are_waited_out_and_the_prompt_ends_once() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let url = home.store_url().unwrap().to_string();
    let session = home.fake_session(FAKE, "read-only for a while", &[]);
    home.ok(&["send", &session, "warm up", "--wait"]);
    let database = texts(sql(&url, "SELECT current_database()::text")).remove(0);
    let admin = common::store::postgres_admin_url().unwrap();
    let read_only = |on: bool| {
        let setting = match on {
            true => "SET default_transaction_read_only = on",
            false => "RESET default_transaction_read_only",
        };
        sql(&admin, &format!("ALTER DATABASE \"{database}\" {setting}"));
        // The setting reaches a session when it connects.
        end_every_connection(&url);
    };
    let sent = home.ok(&[
        "send",
        &session,
        "@fake delay=1500\n@fake answer=stored once\ngo",
    ]);
    let prompt = sent.split_whitespace().next().unwrap().to_string();
    common::daemon::wait_until("the run started", || {
        !sql(
            &url,
            &format!("SELECT 1 FROM runs WHERE prompt_id = '{prompt}'"),
        )
        .is_empty()
    });
    read_only(true);
    // The run ends while the store refuses writes: its end waits, and the daemon says why
    // (asked on its socket: a command records its exec first, which the store refuses).
    let mut socket = common::rpc::Rpc::connect(home.path());
    // The lease's renewal is refused too: said as such, not as a store out of reach.
    let mut refusing = || {
        let status = socket.call("status", json!({})).unwrap();
        let why = status["store"]["refusing_writes"]
            .as_str()
            .map(str::to_string);
        (why, status["lease"]["state"].clone())
    };
    common::daemon::wait_until("status says the store refuses writes", || {
        let (why, lease) = refusing();
        why.is_some_and(|why| why.contains("read-only")) && lease == "store refuses writes"
    });
    // A command that changes something is told at once, in one line, that the store refuses
    // writes; one that only looks looks, saying in one line that it is not recorded.
    let out = home.run(&["cancel", "no-such-prompt"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("refuses writes for now") && said.lines().count() == 1,
        "{said}"
    );
    let out = home.run(&["status"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("this command is not recorded")
            && said.contains("refuses writes for now")
            && said.lines().count() == 1,
        "{said}"
    );
    read_only(false);
    common::daemon::wait_until("the prompt is done", || {
        texts(sql(
            &url,
            &format!("SELECT status FROM prompts WHERE id = '{prompt}'"),
        )) == ["done"]
    });
    assert_eq!(
        texts(sql(
            &url,
            &format!("SELECT status FROM runs WHERE prompt_id = '{prompt}'")
        )),
        vec!["succeeded"],
        "one run, its end stored once"
    );
    assert_stored_once(&url, &session, 2, "stored once");
    common::daemon::wait_until("status says the store takes writes", || {
        let status = home.json(&["status", "--json"]);
        status["store"]["refusing_writes"].is_null() && status["lease"]["state"] == "held"
    });
    let line = home.ok(&["status"]);
    assert!(!line.contains("refuses writes"), "{line}");
}

#[test]
fn a_home_serves_one_store() {
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    let Some(other) = TestDatabase::create() else {
        return;
    };
    home.start_daemon();
    home.stop_daemon();
    let bound = std::fs::read_to_string(home.path().join("store.id")).unwrap();
    let url = home.store_url().unwrap().to_string();
    let id = texts(sql(
        &url,
        "SELECT value FROM corral_meta WHERE key = 'store_id'",
    ))
    .remove(0);
    assert_eq!(bound.trim(), id);
    // The same home's daemon pointed at another database is refused, in one line.
    let out = home
        .corral(&["daemon"])
        .env("CORRAL_STORE_URL", &other.url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("serves store"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        !stderr.contains("corral-ci") && !stderr.contains(":leadpw"),
        "{stderr}"
    );
    // Nothing ran there: no project, no session, no prompt.
    let sessions = sql(&other.url, "SELECT count(*) FROM sessions");
    assert_eq!(sessions[0][0], json!(0), "{sessions:?}");
    // Moving the home deliberately (`config set store.url`) binds it to the new store.
    home.ok(&["config", "set", "store.url", &other.url]);
    assert!(!home.path().join("store.id").exists());
    home.start_daemon();
    home.stop_daemon();
    let other_id = texts(sql(
        &other.url,
        "SELECT value FROM corral_meta WHERE key = 'store_id'",
    ))
    .remove(0);
    let bound = std::fs::read_to_string(home.path().join("store.id")).unwrap();
    assert_eq!(bound.trim(), other_id);
}

/// An exec of `id` for the ledger tests below: a row whose primary key a test can repeat.
fn exec(id: &str) -> corral::store::exec::NewExec {
    corral::store::exec::NewExec {
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

/// `count` notices for the session `s`, their payloads `"LABEL.0"`, `"LABEL.1"`, …
fn notices(label: &str, count: usize) -> corral::actors::ledger::AppendEvents {
    corral::actors::ledger::AppendEvents {
        events: (0..count)
            .map(|index| corral::store::events::NewEvent {
                session_id: "s".into(),
                prompt_id: None,
                run_id: None,
                kind: corral::events::EventKind::Notice,
                payload: json!(format!("{label}.{index}")),
            })
            .collect(),
    }
}

/// Runs `test` with a ledger on a database of its own (its URL beside it), in an actix system
/// that has ended, and so closed the ledger's connection, when this returns; the database,
/// for reading what was stored. `None` when the test is to skip.
fn with_a_ledger<F: std::future::Future<Output = ()>>(
    test: impl FnOnce(corral::actors::ledger::LedgerHandle, String) -> F,
) -> Option<TestDatabase> {
    use corral::store::location::{Location, PgUrl};
    let database = TestDatabase::create()?;
    let location = Location::Postgres(PgUrl::parse(&database.url).unwrap());
    let url = database.url.clone();
    actix::System::new().block_on(async {
        let (ledger, _) = corral::actors::ledger::LedgerHandle::start_at(&location, true)
            .await
            .unwrap();
        test(ledger, url).await;
    });
    Some(database)
}

// On PostgreSQL a batch first runs without savepoints (each is a round trip under the write
// lock); a write that fails there rolls the batch back, which is made again with savepoints,
// so that the failing write fails alone and the others of its batch commit, as on SQLite.
#[test]
fn a_failing_write_is_rolled_back_alone_on_postgres() {
    use corral::actors::ledger::RecordExec;
    let Some(database) = with_a_ledger(|ledger, _| async move {
        ledger.write(RecordExec(exec("dup"))).await.unwrap();
        // Handed over together, the three share a batch.
        let results = futures::future::join_all([
            ledger.write(RecordExec(exec("a"))),
            ledger.write(RecordExec(exec("dup"))),
            ledger.write(RecordExec(exec("b"))),
        ])
        .await;
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert!(results[1].is_err(), "a duplicate id must fail");
        // And the ledger goes on writing.
        ledger.write(RecordExec(exec("c"))).await.unwrap();
    }) else {
        return;
    };
    assert_eq!(
        texts(sql(&database.url, "SELECT id FROM execs ORDER BY id")),
        vec!["a", "b", "c", "dup"]
    );
}

// Writes whose answer nobody reads are held back and sent with the next statement that is
// answered (one round trip under the write lock): they still run in their order, and one
// that fails shows in a later write's statement, or at the COMMIT; either way it fails
// alone, as above.
#[test]
fn held_writes_run_in_order_and_one_that_fails_fails_alone() {
    use corral::actors::ledger::{CompleteExec, RecordExec, SetSetting};
    use corral::store::exec::{ExecCompletion, Outcome};
    let Some(database) = with_a_ledger(|ledger, _| async move {
        ledger.write(RecordExec(exec("dup"))).await.unwrap();
        // The duplicate's insert is held and fails in the completion's round trip.
        let complete = |id: &str| CompleteExec {
            id: id.into(),
            completion: ExecCompletion {
                completed_at: 2,
                exit_code: 0,
                outcome: Outcome::Succeeded,
                signal: None,
            },
        };
        let (a, dup, completed, b) = futures::join!(
            ledger.write(RecordExec(exec("a"))),
            ledger.write(RecordExec(exec("dup"))),
            ledger.write(complete("a")),
            ledger.write(RecordExec(exec("b"))),
        );
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        assert!(dup.is_err(), "a duplicate id must fail");
        assert!(
            completed.unwrap(),
            "a's row was stored before its completion"
        );
        // Held to the end, the duplicate fails at the COMMIT (which then commits nothing).
        let (c, dup) = futures::join!(
            ledger.write(RecordExec(exec("c"))),
            ledger.write(RecordExec(exec("dup"))),
        );
        assert!(c.is_ok() && dup.is_err(), "{c:?} {dup:?}");
        // Three values of one setting in one batch: the last is stored.
        let set = |value: &str| SetSetting {
            name: "cancel.grace_ms".into(),
            value: Some(value.into()),
        };
        let (first, second, third) = futures::join!(
            ledger.write(set("1")),
            ledger.write(set("2")),
            ledger.write(set("3"))
        );
        assert!(first.is_ok() && second.is_ok() && third.is_ok());
    }) else {
        return;
    };
    assert_eq!(
        texts(sql(
            &database.url,
            "SELECT id || ':' || coalesce(outcome, '-') FROM execs ORDER BY id"
        )),
        vec!["a:succeeded", "b:-", "c:-", "dup:-"]
    );
    assert_eq!(
        texts(sql(
            &database.url,
            "SELECT value FROM settings WHERE name = 'cancel.grace_ms'"
        )),
        vec!["3"]
    );
}

/// A writer that knows a session's last number stores the next events without asking, in
/// its first try: the server rolled no batch back. (A statement of that path the server could
/// not even prepare once made every such batch fail and be made again with savepoints, by the
/// asking path: the events were right, and each cost a rollback and twice the statements.) A
/// backend reports its counts when it exits, so they are read once the ledger's connection is
/// gone.
#[test]
fn a_writer_that_knows_a_sessions_number_stores_events_in_its_first_try() {
    let Some(database) = with_a_ledger(|ledger, url| async move {
        sql(
            &url,
            "INSERT INTO sessions (id, engine, created_at) VALUES ('s', 'fake', 1) RETURNING id",
        );
        for count in [2, 3, 1] {
            let stored = ledger.write(notices("n", count)).await.unwrap();
            assert_eq!(stored.len(), count);
        }
    }) else {
        return;
    };
    let others = "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND pid <> pg_backend_pid()";
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Nothing tells another process that a backend exited: a bounded poll.
    while sql(&database.url, others) != vec![vec![json!(0)]] {
        assert!(
            std::time::Instant::now() < until,
            "the ledger's connection stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        sql(
            &database.url,
            "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ),
        vec![vec![json!(0)]],
        "a batch was rolled back"
    );
    assert_eq!(
        sql(
            &database.url,
            "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM events WHERE session_id = 's'"
        ),
        vec![vec![json!("1,2,3,4,5,6")]]
    );
}

// A writer numbers the events of a session it knows without asking the server, and is told
// at each BEGIN which sessions another writer stored events of since: two ledgers taking
// turns on one session, alone and at once, and a batch made again with savepoints, still
// number its events from 1 without a gap, each number the one its writer was told.
#[test]
fn two_writers_taking_turns_number_a_sessions_events_without_a_gap() {
    use corral::actors::ledger::{LedgerHandle, RecordExec};
    use corral::store::location::{Location, PgUrl};
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let location = Location::Postgres(PgUrl::parse(&database.url).unwrap());
    let told: Vec<(i64, String)> = actix::System::new().block_on(async {
        let (a, _) = LedgerHandle::start_at(&location, true).await.unwrap();
        let (b, _) = LedgerHandle::start_at(&location, true).await.unwrap();
        sql(
            &database.url,
            "INSERT INTO sessions (id, engine, created_at) VALUES ('s', 'fake', 1) RETURNING id",
        );
        let events = notices;
        let mut told = Vec::new();
        let mut keep = |stored: Vec<corral::store::events::Event>| {
            told.extend(
                stored
                    .into_iter()
                    .map(|event| (event.seq, event.payload.as_str().unwrap().to_string())),
            )
        };
        for round in 0..12 {
            // a twice in a row (its number known), then b (a's known number now stale).
            keep(
                a.write(events(&format!("a{round}"), 1 + round % 3))
                    .await
                    .unwrap(),
            );
            keep(a.write(events(&format!("a{round}x"), 2)).await.unwrap());
            keep(b.write(events(&format!("b{round}"), 1)).await.unwrap());
            // Both at once: their batches take turns on the write lock.
            let (from_a, from_b) = futures::join!(
                a.write(events(&format!("A{round}"), 2)),
                b.write(events(&format!("B{round}"), 2)),
            );
            keep(from_a.unwrap());
            keep(from_b.unwrap());
        }
        // A batch made again with savepoints (a duplicate exec in it) numbers as well.
        a.write(RecordExec(exec("dup"))).await.unwrap();
        keep(a.write(events("before", 1)).await.unwrap());
        let (stored, dup, after) = futures::join!(
            a.write(events("redone", 2)),
            a.write(RecordExec(exec("dup"))),
            a.write(events("after", 1)),
        );
        assert!(dup.is_err());
        keep(stored.unwrap());
        keep(after.unwrap());
        keep(a.write(events("last", 1)).await.unwrap());
        told
    });
    let rows = sql(
        &database.url,
        "SELECT seq, payload FROM events WHERE session_id = 's' ORDER BY seq",
    );
    let stored: Vec<(i64, String)> = rows
        .iter()
        .map(|row| {
            let payload: serde_json::Value =
                serde_json::from_str(row[1].as_str().unwrap()).unwrap();
            (
                row[0].as_i64().unwrap(),
                payload.as_str().unwrap().to_string(),
            )
        })
        .collect();
    let seqs: Vec<i64> = stored.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=stored.len() as i64).collect::<Vec<_>>());
    let mut told = told;
    told.sort();
    assert_eq!(
        told, stored,
        "each event has the number its writer was told"
    );
    let last = sql(
        &database.url,
        "SELECT last_event_seq FROM sessions WHERE id = 's'",
    );
    assert_eq!(last, vec![vec![json!(stored.len())]]);
}

#[test]
fn a_store_migrated_with_prompts_queued_has_their_heads() {
    // The twin of tests/it/store.rs's: step 13 fills `queue_heads` from the prompts queued.
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let url = corral::store::location::PgUrl::parse(&database.url).expect("the URL parses");
    let migrate_to = |target: u32| {
        let connection = corral::store::sql::Conn::from(
            corral::store::postgres::PgConn::connect(&url.config(), &url.to_string())
                .expect("the database answers"),
        );
        corral::store::postgres::migrate(&connection, target).expect("the store migrates")
    };
    assert_eq!(migrate_to(12), 12);
    for statement in [
        "INSERT INTO projects(id, name, path, created_at) VALUES ('p', 'p', '/tmp', 1)",
        "INSERT INTO sessions(id, project_id, engine, created_at) VALUES \
           ('a', 'p', 'fake', 1), ('b', 'p', 'fake', 1), ('c', 'p', 'fake', 1)",
        "INSERT INTO prompts(id, session_id, text, status, created_at) VALUES \
           ('a1', 'a', 'x', 'done', 1), ('a2', 'a', 'x', 'queued', 5), \
           ('a3', 'a', 'x', 'queued', 4), ('b2', 'b', 'x', 'queued', 3), \
           ('b1', 'b', 'x', 'queued', 3), ('c1', 'c', 'x', 'running', 2)",
    ] {
        common::store::execute(&database.url, statement);
    }
    assert_eq!(
        migrate_to(corral::store::migrations::SCHEMA_VERSION),
        corral::store::migrations::SCHEMA_VERSION
    );
    assert_eq!(
        sql(
            &database.url,
            "SELECT session_id, prompt_id FROM queue_heads ORDER BY session_id"
        ),
        vec![vec![json!("a"), json!("a3")], vec![json!("b"), json!("b1")]]
    );
}
