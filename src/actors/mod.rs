//! The actors. Each file holds one actor: its private state, the messages it takes and a
//! cloneable handle that is the only way the rest of the code talks to it.
//!
//! - [`ledger`]: the one writer of the SQLite store (a `SyncArbiter` thread) and the async
//!   front that gathers writes into group commits.
//! - [`slots`]: the slot manager, which decides who may start an engine child now (engine and
//!   total limits, project and group locks, FIFO waiters).
//! - [`app_server`]: one long-lived `codex app-server` child per project, multiplexed and
//!   supervised (restart backoff and intensity limit).
//! - [`session`]: one per session with work; owns its engine children and retry policy.
//! - [`supervisor`]: the registry of session actors, boot reconciliation.
//! - [`shared`]: what the supervisor and the actors it starts share (not an actor), with its
//!   parts [`life`] (running, draining, shut down; the working count) and [`coordination`]
//!   (alone on the store, or among other daemons under a lease).
//! - [`due`]: the timer that claims a prompt queued to start later (`send --at/--in`) when
//!   its time comes.
//! - [`notifier`]: notifications to a person (a command hook, a webhook, the desktop), each
//!   channel on a bounded queue of its own so that none delays the supervisor.
//! - [`worktree`]: a session's git worktree, made, merged and removed for its session actor
//!   (not an actor: the session's work, writing through the ledger).

pub mod app_server;
pub mod app_servers;
pub mod asks;
pub mod claims;
pub mod coordination;
pub mod due;
pub mod ledger;
pub mod life;
pub mod notifier;
pub mod publisher;
pub mod relay;
pub mod session;
pub mod shared;
pub mod slots;
pub mod supervisor;
pub mod worktree;
