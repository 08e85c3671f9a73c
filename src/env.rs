//! Every `CORRAL_*` environment variable, by name, in one place: what a person sets, what
//! corral gives the processes it starts (and reads back from them: how a request's origin is
//! found, how a run's processes are recognised), and the knobs tests and benchmarks turn.
//!
//! A leaf: it imports nothing of the crate, so that every layer may name a variable without
//! reaching into the module that happens to set it.

// ---------------------------------------------------------------------------------------------
// What a person sets.

/// The home: the store, the socket, the daemon's files (`home.rs`).
pub const HOME: &str = "CORRAL_HOME";
/// A PostgreSQL store shared by several daemons, instead of the home's SQLite file.
pub const STORE_URL: &str = "CORRAL_STORE_URL";
/// The name this host goes by on a shared store.
pub const HOST: &str = "CORRAL_HOST";
/// The daemon's log filter (`info` by default).
pub const LOG: &str = "CORRAL_LOG";
/// The `corral-shim` binary, for a program that embeds corral (`process::shim`).
pub const SHIM: &str = "CORRAL_SHIM";
/// The `corral` binary the lease guard runs as, for a program that embeds corral.
pub const GUARD_PROGRAM: &str = "CORRAL_GUARD_PROGRAM";

// ---------------------------------------------------------------------------------------------
// What corral gives the processes it starts.

/// A run's id, in its engine's environment and inherited by what the engine starts: how a
/// run's processes are recognised and a request is traced to its run.
pub const RUN_ID: &str = "CORRAL_RUN_ID";
/// The session of a worktree's setup command, held to a run's rules.
pub const SETUP_SESSION: &str = "CORRAL_SETUP_SESSION";
/// The project a codex app-server child serves.
pub const APP_SERVER_PROJECT: &str = "CORRAL_APP_SERVER_PROJECT";
/// The mark of a lease guard, which ends whatever carries it (`lease/guard.rs`).
pub const LEASE_GUARD: &str = "CORRAL_LEASE_GUARD";
/// The session an engine runs for: the agent's own `corral` commands default to it.
pub const SESSION_ID: &str = "CORRAL_SESSION_ID";
/// The exec that asked for a run: the agent's own commands are recorded under it.
pub const PARENT_EXEC: &str = "CORRAL_PARENT_EXEC";
/// The trace that links execs end to end.
pub const TRACE_ID: &str = "CORRAL_TRACE_ID";
/// Which attempt of its prompt a run is (the fake engine scripts by it).
pub const RUN_ATTEMPT: &str = "CORRAL_RUN_ATTEMPT";
/// An app-server thread's driver file: who drives the session.
pub const DRIVER_FILE: &str = "CORRAL_DRIVER_FILE";
/// The pipe a detached daemon says it is ready on (removed from every child).
pub const DAEMON_NOTIFY: &str = "CORRAL_DAEMON_NOTIFY";

/// systemd's readiness socket (`Type=notify`): the daemon says `READY=1` and `STOPPING=1`
/// there, and no child of it inherits it.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The kind of notification a `notify.command` hook is told of (`prompt.done`, …).
pub const NOTIFY_EVENT: &str = "CORRAL_NOTIFY_EVENT";

/// Variables of the daemon's own environment that are the daemon's business: removed from
/// every process it starts (a child that kept `CORRAL_DAEMON_NOTIFY` and started a daemon
/// would write the readiness notice meant for the one that started ours).
pub const DAEMON_ONLY: &[&str] = &[DAEMON_NOTIFY, NOTIFY_SOCKET, TEST_KILL_AT, TEST_CLOCK];

// ---------------------------------------------------------------------------------------------
// Knobs for tests and benchmarks.

/// A named moment at which the process kills itself with SIGKILL (`process::kill_point`).
pub const TEST_KILL_AT: &str = "CORRAL_TEST_KILL_AT";
/// The time (RFC 3339) the schedules' clock reads at its first reading (`clock::schedule_now`).
pub const TEST_CLOCK: &str = "CORRAL_TEST_CLOCK";
/// How long a socket client may take to say `initialize`.
pub const HANDSHAKE_TIMEOUT_MS: &str = "CORRAL_HANDSHAKE_TIMEOUT_MS";
/// How many socket connections the daemon serves at once.
pub const MAX_CONNECTIONS: &str = "CORRAL_MAX_CONNECTIONS";
/// How long an HTTP request's body may take to arrive.
pub const HTTP_BODY_TIMEOUT_MS: &str = "CORRAL_HTTP_BODY_TIMEOUT_MS";
/// SQLite's busy timeout of a reader.
pub const BUSY_TIMEOUT_MS: &str = "CORRAL_BUSY_TIMEOUT_MS";
