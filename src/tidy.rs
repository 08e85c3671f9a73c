//! Tidy tests: rules of the code's shape that no compiler checks, read from the source files
//! themselves (ARCHITECTURE.md, "Invariants").
//!
//! [`LAYERS`] is the order of the top-level modules: a module may name (`crate::…`) only the
//! modules before it. Leaves first (they name nothing of the crate, or only other leaves),
//! then the store, the lease, the protocol, the actors, the library's front (`corral`), the
//! daemon (the socket and HTTP), the protocol client, and the command line last. So the core
//! never reaches up into a front end, and no two modules need each other.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first.
const LAYERS: &[&str] = &[
    // Leaves.
    "env", "clock", "engine", "events", "process", "home", "framing", "socket", "host", "git",
    "repo", // The core.
    "store", "lease", "protocol", "actors",
    // The library's front, then the front ends.
    "corral", "daemon", "client", "cli",
    // What the tests and benchmarks share (the `testkit` feature): above everything it drives.
    "testkit",
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    files
}

/// The code of a file that the crate builds outside tests: comments and the test module
/// (`#[cfg(test)]` followed by `mod`, at the end of a file by this crate's habit) left out.
fn code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let line = match line.find("//") {
            // A `//` inside a string literal is rare in paths; cutting there loses no path.
            Some(at) => &line[..at],
            None => line,
        };
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The top-level modules `code` names: `crate::NAME`, and each name of a `crate::{…}` list.
fn named(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(list) = rest.strip_prefix('{') {
            let end = list.find('}').unwrap_or(list.len());
            for item in list[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.insert(name);
        }
    }
    found
}

/// The top-level module a file under `src/` belongs to (`None` for `lib.rs`, this file, and
/// the binaries, which may name anything).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "tidy.rs" | "bin" => None,
        name => Some(name.trim_end_matches(".rs").to_string()),
    }
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank = |name: &str| LAYERS.iter().position(|layer| *layer == name);
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for file in sources(&src) {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let Some(own) = rank(&module) else {
            unplaced.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a source file");
        for name in named(&code(&text)) {
            if let Some(theirs) = rank(&name) {
                if theirs > own {
                    upward.push(format!(
                        "{} names crate::{name} ({module} is below {name})",
                        file.strip_prefix(&src).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "top-level modules missing from LAYERS (place each in the order): {unplaced:?}"
    );
    upward.sort();
    assert!(
        upward.is_empty(),
        "imports that climb back up the layers:\n{}",
        upward.join("\n")
    );
}

/// The files that may hold a daemon's lease: the lease itself, the coordination seam, the
/// parts only several daemons have (the claimer, the asks), where the supervisor is started
/// with it, and `status`, which shows it.
const LEASE_HOLDERS: &[&str] = &[
    "lease/",
    "actors/coordination.rs",
    "actors/claims.rs",
    "actors/asks.rs",
    "actors/shared.rs",
    "corral.rs",
    "daemon/methods/status.rs",
    // This test, which names what it looks for.
    "tidy.rs",
];

/// One store or several daemons on a shared one: the difference lives behind
/// `actors::coordination` (ARCHITECTURE.md, "Invariants"). Anywhere else, code asks the seam
/// and never reaches for the lease (`.lease`, `holder::Lease`) to branch on the store.
#[test]
fn the_lease_is_reached_through_the_coordination_seam() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut reaching = Vec::new();
    for file in sources(&src) {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if LEASE_HOLDERS
            .iter()
            .any(|holder| relative.starts_with(holder))
        {
            continue;
        }
        let code = code(&std::fs::read_to_string(&file).expect("a source file"));
        for (number, line) in code.lines().enumerate() {
            let reaches = line.contains("holder::Lease")
                || line.match_indices(".lease").any(|(at, _)| {
                    !line[at + ".lease".len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
            if reaches {
                reaching.push(format!("{relative}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        reaching.is_empty(),
        "the lease reached outside the coordination seam (ask `shared.coordination`):\n{}",
        reaching.join("\n")
    );
}

/// What an embedder may use, besides the re-exports of `lib.rs` (ARCHITECTURE.md, "API
/// boundary").
const PUBLIC_MODULES: &[&str] = &["client", "protocol"];

#[test]
fn only_the_front_door_is_public() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    let lines: Vec<&str> = lib.lines().map(str::trim).collect();
    let mut open = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|rest| rest.strip_suffix(';'))
        else {
            continue;
        };
        // A module public only for the test kit: `#[cfg(feature = "testkit")]` and
        // `#[doc(hidden)]` above it.
        let for_tests = at >= 2
            && lines[at - 2] == "#[cfg(feature = \"testkit\")]"
            && lines[at - 1] == "#[doc(hidden)]";
        if !PUBLIC_MODULES.contains(&name) && !for_tests && name != "testkit" {
            open.push(name.to_string());
        }
    }
    assert!(
        open.is_empty(),
        "modules public to embedders beyond the front door {PUBLIC_MODULES:?}: {open:?} \
         (make them crate-private, public only with the testkit feature, as lib.rs does)"
    );
    for name in PUBLIC_MODULES {
        assert!(
            lines.contains(&format!("pub mod {name};").as_str()),
            "lib.rs no longer has `pub mod {name};`: update PUBLIC_MODULES"
        );
    }
}

#[test]
fn the_reader_finds_what_a_file_names() {
    let text = "use crate::store::prompts;\nuse crate::{events, home::private_file};\n\
                // crate::cli in a comment\nfn f() { crate::process::now(); }\n\
                #[cfg(test)]\nmod tests {\n    use crate::daemon;\n}\n";
    let names: Vec<String> = named(&code(text)).into_iter().collect();
    assert_eq!(names, ["events", "home", "process", "store"]);
}
