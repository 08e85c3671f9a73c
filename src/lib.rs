//! corral: a local supervisor for coding-agent CLIs.
//!
//! Map of the crate (see ARCHITECTURE.md for the whole picture):
//! - [`store`]: the SQLite file, its migrations, and the exec ledger's model and SQL;
//! - [`actors`]: the actix actors; today the [`actors::ledger`], the only writer of the store;
//! - [`cli`]: the `corral` command line, one file per command;
//! - [`events`]: the kinds of a session's events, shared by their emitters and readers;
//! - [`http`]: the daemon's HTTP API, WebSocket and dashboard;
//! - [`process`]: process groups and pid identity; [`repo`]: git top-level discovery;
//!   [`home`]: where corral keeps its state.

pub mod actors;
pub mod cli;
pub mod client;
mod corral;
pub mod daemon;
pub mod engine;
pub mod env;
pub mod events;
pub mod framing;
pub mod git;
pub mod home;
pub mod host;
pub mod http;
pub mod lease;
pub mod process;
pub mod protocol;
pub mod repo;
pub mod socket;
pub mod store;
pub mod worktree;

pub use corral::{Corral, CorralError, CorralOptions};
