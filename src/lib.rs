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

pub use corral::{Corral, CorralError, CorralOptions};

#[cfg(test)]
mod tidy;
