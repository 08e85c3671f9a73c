//! The actors. Each file holds one actor: its private state, the messages it takes and a
//! cloneable handle that is the only way the rest of the code talks to it.
//!
//! - [`ledger`]: the one writer of the SQLite store (a `SyncArbiter` thread) and the async
//!   front that gathers writes into group commits.

pub mod ledger;
