//! Daemons' leases on a shared PostgreSQL store (#14): [`guard`], the process that ends a
//! daemon's engine runs once its lease is gone or the daemon is.

pub mod guard;
pub mod holder;
