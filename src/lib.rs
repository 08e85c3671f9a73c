//! corral: a local supervisor for coding-agent CLIs.
//!
//! What an embedder uses is public: [`Corral`] and the types its calls take and give
//! (re-exported here), the socket [`protocol`] and its [`client`]. Everything else is the
//! crate's own (`pub(crate)`). Map of the crate, lowest layer first (a module names only the
//! ones above it in this list; `tidy::layers_point_one_way` keeps it so; ARCHITECTURE.md has
//! the whole picture):
//! - leaves: `clock`, `engine` (one adapter per engine CLI behind a small trait), `events`
//!   (the kinds of a session's events), `env` (every `CORRAL_*` variable), `process` (process
//!   groups, pid identity, the shim every engine runs under), `home` (where corral keeps its
//!   state, and its lock), `framing`, `socket`, `host`, `git`, `repo`;
//! - `store`: the SQLite or PostgreSQL store, its migrations, the ledger's model and SQL;
//! - `lease`: a daemon's lease on a shared store;
//! - [`protocol`]: the JSON-RPC methods and the types both sides share;
//! - `actors`: the actix actors (ledger, slots, supervisor, sessions, app-server) and the
//!   session's worktree;
//! - [`Corral`]: the library's front, what a program embedding corral calls;
//! - `daemon`: the socket server, its method handlers and the HTTP API and dashboard;
//! - [`client`]: the protocol's client; `cli`: the `corral` command line.
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

// The crate's own modules are `pub(crate)`, so that an embedder sees only the front door below.
// With the `testkit` feature (corral's own tests and benchmarks, never an embedder) they are
// `pub` and hidden from the docs, for the tests that check a store row or a process by its
// internals. (Written out: a module declared by a macro cannot export its own macros by path.)
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod actors;
#[cfg(not(feature = "testkit"))]
mod actors;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod cli;
#[cfg(not(feature = "testkit"))]
mod cli;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod clock;
#[cfg(not(feature = "testkit"))]
mod clock;
mod corral;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod daemon;
#[cfg(not(feature = "testkit"))]
mod daemon;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod engine;
#[cfg(not(feature = "testkit"))]
mod engine;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod env;
#[cfg(not(feature = "testkit"))]
mod env;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod events;
#[cfg(not(feature = "testkit"))]
mod events;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod framing;
#[cfg(not(feature = "testkit"))]
mod framing;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod git;
#[cfg(not(feature = "testkit"))]
mod git;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod home;
#[cfg(not(feature = "testkit"))]
mod home;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod host;
#[cfg(not(feature = "testkit"))]
mod host;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod lease;
#[cfg(not(feature = "testkit"))]
mod lease;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod process;
#[cfg(not(feature = "testkit"))]
mod process;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod repo;
#[cfg(not(feature = "testkit"))]
mod repo;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod socket;
#[cfg(not(feature = "testkit"))]
mod socket;
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub mod store;
#[cfg(not(feature = "testkit"))]
mod store;

pub mod client;
pub mod protocol;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use corral::{Cause, Corral, CorralError, CorralOptions, ScheduleRequest, ScheduleTarget};
pub use engine::EngineKind;
pub use events::EventKind;
pub use store::events::Event;
pub use store::projects::{NewProject, Project};
pub use store::prompts::{NewPrompt, Prompt, PromptStatus};
pub use store::schedules::{Firing, Outcome as FiringOutcome, Schedule};
pub use store::sessions::{NewSession, Session};

/// The `corral` command line, for the `corral` binary.
#[doc(hidden)]
pub fn cli_main() -> std::process::ExitCode {
    cli::main()
}

/// The process every engine child runs under, for the `corral-shim` binary.
#[doc(hidden)]
pub fn shim_main(args: Vec<std::ffi::OsString>) -> i32 {
    process::shim::main(args)
}

#[cfg(test)]
mod tidy;
