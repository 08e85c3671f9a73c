//! Where the store is, from the command line: `corral config get|set|unset store.url` write
//! and read `HOME/config` only (no store, no daemon), show the URL without its password, and
//! refuse a malformed URL (usage error, exit 2), an unsafe file and a served home (exit 1).

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use common::{corral_in, stderr, stdout};

const SECRET: &str = "pw-Zq81x";

fn url() -> String {
    format!("postgres://corral:{SECRET}@127.0.0.1:54329/corral")
}

const SHOWN: &str = "postgres://corral@127.0.0.1:54329/corral";

fn run(home: &Path, args: &[&str]) -> Output {
    let output = corral_in(home, args).output().expect("corral runs");
    for text in [stdout(&output), stderr(&output)] {
        assert!(
            !text.contains(SECRET),
            "{args:?} showed the password: {text}"
        );
    }
    output
}

fn ok(home: &Path, args: &[&str]) -> String {
    let output = run(home, args);
    assert!(output.status.success(), "{args:?}: {output:?}");
    stdout(&output)
}

/// The names in the home.
fn names(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn set_get_unset_round_trip_shows_no_password_and_writes_only_the_config() {
    let home = common::private_dir();
    let home = home.path();
    let config = home.join("config");

    // Before anything: the default, the SQLite file (which is not created for saying so).
    let default = format!("sqlite {}", home.join("corral.db").display());
    assert_eq!(ok(home, &["config", "get", "store.url"]).trim(), default);

    assert_eq!(
        ok(home, &["config", "set", "store.url", &url()]).trim(),
        format!("store.url = {SHOWN}")
    );
    assert_eq!(mode(&config), 0o600);
    // The file holds the password (the driver needs it); nothing shows it.
    let text = std::fs::read_to_string(&config).unwrap();
    assert_eq!(text, format!("store.url = {}\n", url()));

    assert_eq!(ok(home, &["config", "get", "store.url"]).trim(), SHOWN);
    let json: serde_json::Value =
        serde_json::from_str(&ok(home, &["config", "get", "store.url", "--json"])).unwrap();
    assert_eq!(json["value"], SHOWN);
    assert_eq!(json["source"], "file");
    assert_eq!(json["kind"], "postgres");
    assert_eq!(json["password"], true);

    // Comments a person wrote are kept by the next set.
    std::fs::write(
        &config,
        format!("# the shared store\nstore.url = {}\n", url()),
    )
    .unwrap();
    let other = format!("postgresql://ci:{SECRET}@127.0.0.1:5432/other");
    assert_eq!(
        ok(home, &["config", "set", "store.url", &other]).trim(),
        "store.url = postgresql://ci@127.0.0.1:5432/other"
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        format!("# the shared store\nstore.url = {other}\n")
    );

    assert_eq!(
        ok(home, &["config", "unset", "store.url"]).trim(),
        format!("store.url unset (default: {default})")
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# the shared store\n"
    );
    assert_eq!(ok(home, &["config", "get", "store.url"]).trim(), default);

    // No store, no lock, no socket: only the configuration.
    assert_eq!(names(home), vec!["config".to_string()]);
}

#[test]
fn the_variable_wins_over_the_file() {
    let home = common::private_dir();
    let home = home.path();
    ok(home, &["config", "set", "store.url", &url()]);
    let output = corral_in(home, &["config", "get", "store.url", "--json"])
        .env(
            "CORRAL_STORE_URL",
            format!("postgres://env:{SECRET}@10.0.0.1/x"),
        )
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["value"], "postgres://env@10.0.0.1/x");
    assert_eq!(json["source"], "env");
    assert!(stderr(&output).contains("CORRAL_STORE_URL is set and wins over store.url"));
    assert!(!stderr(&output).contains(SECRET) && !stdout(&output).contains(SECRET));
    // A bad variable is a failure, in one line naming it.
    let output = corral_in(home, &["config", "get", "store.url"])
        .env("CORRAL_STORE_URL", format!("mysql://root:{SECRET}@db/x"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let line = stderr(&output);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("CORRAL_STORE_URL: not a postgres:// URL: mysql://root@db/x"),
        "{line}"
    );
    assert!(!line.contains(SECRET));
}

#[test]
fn a_malformed_url_is_a_usage_error_in_one_line() {
    let home = common::private_dir();
    let home = home.path();
    for bad in [
        format!("mysql://root:{SECRET}@db/x"),
        format!("postgres://corral:{SECRET}@127.0.0.1:port/x"),
        format!("postgres://corral:{SECRET}@/x"),
        "not a url".to_string(),
    ] {
        let output = run(home, &["config", "set", "store.url", &bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {output:?}");
        let line = stderr(&output);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.starts_with("corral: store.url: not "), "{line}");
    }
    assert!(names(home).is_empty(), "{:?}", names(home));
}

#[test]
fn an_unsafe_config_is_refused() {
    let home = common::private_dir();
    let home = home.path();
    let config = home.join("config");
    std::fs::write(&config, "store.url = postgres://corral@127.0.0.1/x\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o664)).unwrap();
    for args in [
        &["config", "get", "store.url"][..],
        &["config", "set", "store.url", "postgres://a@h/x"],
        &["config", "unset", "store.url"],
    ] {
        let output = run(home, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let line = stderr(&output);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains(&format!("{} is refused: its mode 0664", config.display())),
            "{line}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "store.url = postgres://corral@127.0.0.1/x\n"
    );
    // A password in a file others may read.
    std::fs::write(&config, format!("store.url = {}\n", url())).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = run(home, &["config", "get", "store.url"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("carries a password, so its mode must be 0600, not 0644"));
    // An unknown key, named with its line.
    std::fs::write(&config, "# x\nstore.uri = postgres://h/x\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let output = run(home, &["config", "get", "store.url"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("config line 2: unknown key 'store.uri' (known: store.url)"),
        "{output:?}"
    );
}

#[test]
fn a_served_home_keeps_its_store() {
    let home = common::private_dir();
    let home = home.path();
    // A supervisor holds the home's lock (the daemon writes its pid there).
    let lock = home.join("daemon.lock");
    std::fs::write(&lock, "4242\n").unwrap();
    // Private, as a daemon makes it (a looser one would be tightened, and said so).
    std::fs::set_permissions(&lock, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let file = std::fs::File::open(&lock).unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| errno)
        .unwrap();
    for args in [
        &["config", "set", "store.url", &url()][..],
        &["config", "unset", "store.url"],
    ] {
        let output = run(home, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let line = stderr(&output);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains("the store a daemon serves cannot change under it: pid 4242"),
            "{line}"
        );
    }
    assert!(!home.join("config").exists());
    // Looking is fine.
    ok(home, &["config", "get", "store.url"]);
    drop(held);
    ok(home, &["config", "set", "store.url", &url()]);
}
