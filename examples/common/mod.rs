//! What the benchmarks that drive the built binaries share (each example includes it with
//! `mod common;`; a directory without `main.rs` is not an example of its own). Each uses a
//! part of it, hence `dead_code` allowed here.

#![allow(dead_code)]

pub mod daemon;

use std::path::PathBuf;

/// `corral` and `corral-fake-engine` of the profile this example was built with (the
/// directory above `target/<profile>/examples/`). Exits 2 with one line when one is missing:
/// a benchmark needs `cargo build --release` (or the profile's build) first.
pub fn binaries() -> (PathBuf, PathBuf) {
    let built = |name| {
        corral::testkit::built(name).unwrap_or_else(|missing| {
            eprintln!("{missing}");
            std::process::exit(2);
        })
    };
    (built("corral"), built("corral-fake-engine"))
}

/// Runs `statement` (no parameters) on the PostgreSQL database at `url`, on a runtime of its
/// own: for the benchmarks that make and drop their databases on a server they are given.
pub fn postgres_execute(url: &str, statement: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("a runtime: {error}"))?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|error| format!("the PostgreSQL server: {error}"))?;
        let driver = tokio::spawn(connection);
        let done = client
            .batch_execute(statement)
            .await
            .map_err(|error| format!("{statement}: {error}"));
        drop(client);
        let _ = driver.await;
        done
    })
}

/// The library opened on `home` with `fake` as the fake engine's program: what the benchmarks
/// that embed corral start from.
pub async fn library_with_fake(home: &std::path::Path, fake: &std::path::Path) -> corral::Corral {
    let corral = corral::Corral::start(corral::CorralOptions::new(home))
        .await
        .unwrap();
    corral
        .set_setting("engines.fake.path", Some(&fake.to_string_lossy()))
        .await
        .unwrap();
    corral
}
