//! corral: a local supervisor for coding-agent CLIs.
//!
//! Map of the crate, lowest layer first (a module names only the ones above it in this list;
//! `tidy::layers_point_one_way` keeps it so; ARCHITECTURE.md has the whole picture):
//! - leaves: [`clock`], [`engine`] (one adapter per engine CLI behind a small trait),
//!   [`events`] (the kinds of a session's events), [`env`] (every `CORRAL_*` variable),
//!   [`process`] (process groups, pid identity, the shim every engine runs under), [`home`]
//!   (where corral keeps its state, and its lock), [`framing`], [`socket`], [`host`], [`git`],
//!   [`repo`];
//! - [`store`]: the SQLite or PostgreSQL store, its migrations, the ledger's model and SQL;
//! - [`lease`]: a daemon's lease on a shared store;
//! - [`protocol`]: the JSON-RPC methods and the types both sides share;
//! - [`actors`]: the actix actors (ledger, slots, supervisor, sessions, app-server) and the
//!   session's worktree;
//! - [`Corral`]: the library's front, what a program embedding corral calls;
//! - [`daemon`]: the socket server, its method handlers and the HTTP API and dashboard;
//! - [`client`]: the protocol's client; [`cli`]: the `corral` command line.
//! - `testkit` (only with the `testkit` feature, for corral's own tests and benchmarks):
//!   temporary homes, a daemon, PostgreSQL, the browser, mock model servers, the fuzzer.
//!
//! # Embedding
//!
//! [`Corral`] is the supervisor as a library: it starts the actors inside the caller's actix
//! system and offers typed calls — add a project, open a session, send a prompt, wait for it,
//! follow the events, change a setting. The types those calls take and give are re-exported
//! here. A prompt on the `command` engine (any program; by default `sh -c PROMPT`):
//!
//! ```
//! use corral::{Corral, CorralOptions, EngineKind, NewProject, NewPrompt, NewSession, PromptStatus};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let work = tempfile::tempdir()?;
//! actix::System::new().block_on(async {
//!     let corral = Corral::start(CorralOptions::new(home.path())).await?;
//!     let project = corral
//!         .add_project(NewProject {
//!             name: "demo".into(),
//!             path: work.path().to_string_lossy().into_owned(),
//!             engine: Some(EngineKind::Command),
//!             ..Default::default()
//!         })
//!         .await?;
//!     let session = corral
//!         .open_session(NewSession {
//!             project_id: project.id,
//!             ..Default::default() // the project's engine
//!         })
//!         .await?;
//!     let sent = corral
//!         .send(NewPrompt {
//!             session_id: session.id,
//!             text: "echo hello".into(),
//!             ..Default::default()
//!         })
//!         .await?;
//!     let done = corral.wait_prompt(&sent.prompt.id).await?;
//!     assert_eq!(done.status, PromptStatus::Done);
//!     assert_eq!(done.answer.as_deref(), Some("hello"));
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```

/// `eprintln!` that never panics: a line corral cannot write to its stderr (a full disk, a
/// closed pipe) is dropped rather than a crash. Every module below uses it (textual scope).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod actors;
pub mod cli;
pub mod client;
pub mod clock;
mod corral;
pub mod daemon;
pub mod engine;
pub mod env;
pub mod events;
pub mod framing;
pub mod git;
pub mod home;
pub mod host;
pub mod lease;
pub mod process;
pub mod protocol;
pub mod repo;
pub mod socket;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use corral::{Cause, Corral, CorralError, CorralOptions};
pub use engine::EngineKind;
pub use events::EventKind;
pub use store::events::Event;
pub use store::projects::{NewProject, Project};
pub use store::prompts::{NewPrompt, Prompt, PromptStatus};
pub use store::sessions::{NewSession, Session};

#[cfg(test)]
mod tidy;
