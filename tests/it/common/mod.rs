//! What the integration tests share: a temporary home and the built `corral` binary in it
//! (`Home`), a home with a real daemon (`daemon::DaemonHome`), the real engine CLIs in
//! private environments (`engines`), a pseudo-terminal (`pty`), and a real PostgreSQL
//! (`store`: a database per test home, the skip rule when there is none).
#![allow(dead_code, unused_imports)]

pub mod agent;
pub mod cluster;
pub mod git;
pub mod library;
pub mod pty;
pub mod rpc;
pub mod tcp_proxy;

pub use corral::testkit::*;
