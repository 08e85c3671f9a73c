//! The PostgreSQL store's own tests, on the throwaway cluster of `.ci/run` (each test on a
//! database of its own, `tests/common/store.rs`). They run in both passes, whatever
//! `CORRAL_TEST_STORE` says; without a cluster they print why they skip, except in CI.

mod common;

use serde_json::json;

use common::daemon::DaemonHome;
use common::store::{sql, with_database, TestDatabase};

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
