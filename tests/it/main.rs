//! corral's integration tests, as one test binary: each module was its own test crate once,
//! each linking the whole crate (about 45 binaries of 40 MB). They run the built `corral`
//! binary in a temporary `CORRAL_HOME` as a user would, or the supervisor in this process as an
//! embedder would (`common::library`).
//!
//! The modules share this process, so nothing here may change process-wide state another test
//! reads: no `std::env::set_var` of a variable corral reads (a setting or an option is passed
//! instead), no umask change outside a child's `pre_exec`, no signal disposition, no
//! `PR_SET_CHILD_SUBREAPER` (`tests/protocol.rs` reaps the daemons it detaches, so it is a
//! binary of its own).
//!
//! Select a former file's tests by its module: `cargo test --test it -- cli::` (a filter is a
//! substring of `module::test_name`).

mod common;

use corral::testkit::{mock_models, mock_responses};

mod app_server;
mod approvals;
mod background;
mod chaos;
mod cli;
mod cli_manners;
mod confinement;
mod connect;
mod crash_recovery;
mod dashboard;
mod demo;
mod dependencies;
mod due;
mod engine_input;
mod environment;
mod events_feed;
mod events_under_lock;
mod fake_engine;
mod fuzz;
mod groups;
mod home_safety;
mod http;
mod lease_guard;
mod live_restore;
mod monitor;
mod multi_daemon;
mod multi_daemon_streams;
mod notify;
mod params;
mod pause;
mod private_files;
mod privilege;
mod project_rules;
mod real_codex;
mod real_engines;
mod retry;
mod run;
mod run_beside_daemon;
mod schedules;
mod shim;
mod sockets;
mod status_line;
mod status_local;
mod status_many;
mod store;
mod store_listen;
mod store_location;
mod store_lock;
mod store_pg;
mod supervisor;
mod wait;
mod worktree_security;
mod worktree_setup;
mod worktrees;
