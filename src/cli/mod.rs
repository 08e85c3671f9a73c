//! The `corral` command line.
//!
//! Layout: this file defines the arguments (clap derive) and the path every invocation takes
//! ([`main`]); [`invocation`] turns the process into an exec row and completes it on every way
//! out; one file per command below it ([`run`], [`monitor`], and the daemon's clients:
//! [`project`], [`session`], [`send`], [`cancel`], [`watch`], [`history`], [`attach`],
//! [`status`], [`config`], [`completions`]; what those share is in [`remote`], and [`local`]
//! answers the inspections from the store itself when no daemon runs).
//!
//! The path of an invocation:
//! 1. parse; a parse that ends the process (`--help`, `--version`, a usage error) is an *early
//!    command*: it never creates or migrates the store, but records its exec into a store that
//!    already exists and is compatible;
//! 2. locate and check the home and the store (`store::inspect`, before SQLite sees the
//!    file); a file that is not a corral store this binary may use is never opened: the
//!    command says so in one line ([`store::refusal`]) and — unless it needs no store
//!    ([`Command::needs_store`]: `run` runs unrecorded) — exits 1 before it connects to a
//!    daemon, starts one, or opens a reader;
//! 3. record the exec's start through the ledger, run the command, record its end: exit code,
//!    outcome, and the signal only when a signal really ended a process.
//!
//! Commands that only look ([`Command::inspects`]) never start a daemon: they ask the one
//! that answers, or read the store directly ([`remote::inspect`]). The others start one when
//! none answers, unless `--no-spawn` or `daemon.autostart = false` says not to.

pub mod attach;
pub mod cancel;
pub mod compact;
pub mod completions;
pub mod config;
pub mod connect;
pub mod daemon;
pub mod demo;
pub mod history;
pub mod invocation;
pub mod local;
pub mod monitor;
pub mod progress;
pub mod project;
pub mod remote;
pub mod run;
pub mod send;
pub mod session;
pub mod status;
pub mod steer;
pub mod watch;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::actors::ledger::{LedgerError, LedgerHandle};
use crate::home;
use crate::store::exec::Outcome;
use crate::store::{self, Compatibility, StoreError};
use invocation::Invocation;

/// corral: a local supervisor for coding-agent CLIs, with a searchable ledger of every command.
#[derive(Debug, Parser)]
#[command(name = "corral", version, propagate_version = true)]
pub struct Cli {
    /// The home directory (store, socket); default $XDG_STATE_HOME/corral.
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Never start a daemon: when none answers, say so and exit 1 (commands that only look
    /// never start one anyway: they read the store directly).
    #[arg(long, global = true)]
    pub no_spawn: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the supervisor as a service on HOME/corral.sock (one per home).
    Daemon(daemon::DaemonArgs),
    /// Show the supervisor at work for a few seconds, on the bundled fake engine.
    Demo(demo::DemoArgs),
    /// Run a command in its own process group and record it in the exec ledger.
    Run(run::RunArgs),
    /// The exec history and what runs now (also: ps, top, mon).
    #[command(visible_aliases = ["ps", "top", "mon"])]
    Monitor(monitor::MonitorArgs),
    /// Projects: named working directories with their engine and rules.
    Project(project::ProjectArgs),
    /// Sessions: agent conversations in a project.
    Session(session::SessionArgs),
    /// Queue a prompt on a session (--wait: drive it, wait, print the answer).
    Send(send::SendArgs),
    /// Cancel a prompt, or everything running or queued on a session.
    Cancel(cancel::CancelArgs),
    /// Add text to the turn running on a codex-app-server session.
    Steer(steer::SteerArgs),
    /// Compact a codex-app-server session's thread context.
    Compact(compact::CompactArgs),
    /// A session's events (--follow: live).
    Watch(watch::WatchArgs),
    /// A session's prompts with their answers, errors and runs.
    History(history::HistoryArgs),
    /// Drive a session: its events live, prompts from stdin.
    Attach(attach::AttachArgs),
    /// Serve codex's app-server protocol on a Unix socket, attached to a session's thread.
    Connect(connect::ConnectArgs),
    /// The daemon: pid, version, home, sessions, slots.
    Status(status::StatusArgs),
    /// Settings: get, set, unset, list.
    Config(config::ConfigArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
    /// Panics on purpose: lets the tests see that a panic still completes the exec.
    #[command(name = "__panic", hide = true)]
    Panic,
}

impl Command {
    /// Whether the command needs the home's store (directly, or through the daemon, which
    /// refuses a store it cannot use). Only these go on without it, unrecorded: `run` (the
    /// command is the point), `demo` (a home of its own), `completions`.
    pub fn needs_store(&self) -> bool {
        !matches!(
            self,
            Command::Run(_) | Command::Demo(_) | Command::Completions(_) | Command::Panic
        )
    }

    /// Whether the command only looks: it reads through the daemon when one answers and
    /// reads the store directly when none does, never starting one (see [`remote::inspect`]).
    pub fn inspects(&self) -> bool {
        match self {
            Command::Monitor(_) | Command::Watch(_) | Command::History(_) | Command::Status(_) => {
                true
            }
            Command::Session(args) => args.action.inspects(),
            Command::Project(args) => args.action.inspects(),
            Command::Config(args) => args.action.inspects(),
            _ => false,
        }
    }
}

/// How a command ended, as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub outcome: Outcome,
    /// Only the name of a signal that really ended a process.
    pub signal: Option<String>,
}

impl Exit {
    pub fn success() -> Self {
        Exit::code(0)
    }

    pub fn code(code: i32) -> Self {
        Exit {
            code,
            outcome: Outcome::of_exit_code(code),
            signal: None,
        }
    }

    /// corral itself was told to stop by `signal` (SIGINT → 130, SIGTERM → 143). The signal
    /// column stays empty: the process exited; it was not killed by a signal.
    pub fn interrupted(signal: i32) -> Self {
        Exit {
            code: 128 + signal,
            outcome: Outcome::Interrupted,
            signal: None,
        }
    }
}

/// A command's failure: one line for stderr and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: i32,
    /// `None` when the line was already printed.
    pub message: Option<String>,
}

impl CliError {
    /// A failure the user can act on: exit 1.
    pub fn failure(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: Some(message.into()),
        }
    }

    /// A usage error that clap could not see (a malformed value): exit 2.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: Some(message.into()),
        }
    }

    /// Exit `code` with nothing more to say.
    pub fn silent(code: i32) -> Self {
        CliError {
            code,
            message: None,
        }
    }
}

impl From<rusqlite::Error> for CliError {
    fn from(error: rusqlite::Error) -> Self {
        CliError::failure(format!("store: {error}"))
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        CliError::failure(error.to_string())
    }
}

impl From<LedgerError> for CliError {
    fn from(error: LedgerError) -> Self {
        CliError::failure(error.to_string())
    }
}

/// What every command gets: where the home and store are, and the ledger when recording.
pub struct Context {
    pub home: PathBuf,
    pub store_path: PathBuf,
    /// `None` when the store is not ours: the command runs without recording.
    pub ledger: Option<LedgerHandle>,
    pub invocation: Invocation,
    /// A command that needs the daemon never starts one: `--no-spawn`, or an inspection
    /// ([`Command::inspects`]).
    pub no_spawn: bool,
}

impl Context {
    /// A read-only connection to the store, or the reason there is none.
    pub fn reader(&self) -> Result<rusqlite::Connection, CliError> {
        if self.ledger.is_none() {
            // The unavailability line was printed when the store was checked.
            return Err(CliError::silent(1));
        }
        Ok(store::open_reader(&self.store_path)?)
    }
}

/// The whole `corral` process: parse, record, run, record, exit.
pub fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let code = match Cli::try_parse_from(&argv) {
        Ok(cli) => actix::System::new().block_on(run_parsed(cli, argv)),
        Err(error) => early(error, argv),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `--help`, `--version` or a usage error: print what clap says, and record the exec only
/// into a store that already exists and is compatible (never creating or migrating one).
fn early(error: clap::Error, argv: Vec<OsString>) -> i32 {
    let code = error.exit_code();
    let _ = error.print();
    let Some((home, _)) = home::locate(home::scan_flag(&argv).as_deref()) else {
        return code;
    };
    let path = store::store_path(&home);
    match store::inspect(&path) {
        Ok(Compatibility::Plausible) => {
            let invocation = Invocation::capture(argv);
            actix::System::new().block_on(async move {
                match LedgerHandle::start(&path, false).await {
                    // Version 0: created but never migrated; there is no execs table yet.
                    Ok((ledger, version)) if version >= 1 => {
                        let _ = invocation.record_whole(&ledger, &Exit::code(code)).await;
                    }
                    Err(error) => {
                        if let Some(StoreError::Incompatible(foreign)) = error.store_error() {
                            eprintln!("{}", store::refusal(&path, *foreign));
                        }
                    }
                    _ => {}
                }
            });
        }
        Ok(Compatibility::Incompatible(foreign)) => eprintln!("{}", store::refusal(&path, foreign)),
        _ => {}
    }
    code
}

async fn run_parsed(cli: Cli, argv: Vec<OsString>) -> i32 {
    let context = match open(&cli, argv).await {
        Ok(context) => context,
        Err(error) => return report(error),
    };
    let started = match context
        .invocation
        .record_start(context.ledger.as_ref())
        .await
    {
        Ok(started) => started,
        Err(error) => return report(error),
    };
    invocation::install_panic_hook();
    // The command runs as a task of its own so that a panic in it is contained: the hook
    // prints one line and ends the child group, and the exec is still completed below.
    let context = std::rc::Rc::new(context);
    let task = tokio::task::spawn_local({
        let context = context.clone();
        async move { dispatch(&context, &cli.command).await }
    });
    let result = match task.await {
        Ok(result) => result,
        // Output to a closed pipe ended the command: its reader had what it wanted.
        Err(error) if error.is_panic() => match error.try_into_panic() {
            Ok(payload) if invocation::is_closed_pipe(&*payload) => Ok(Exit::success()),
            _ => Ok(panicked()),
        },
        Err(_) => Ok(panicked()),
    };
    let exit = match result {
        Ok(exit) => exit,
        Err(error) => {
            let code = report(error);
            Exit::code(code)
        }
    };
    if started {
        if let Err(error) = context
            .invocation
            .record_end(context.ledger.as_ref(), &exit)
            .await
        {
            let reason = error.message.unwrap_or_default();
            eprintln!("corral: could not record the end of this command: {reason}");
        }
    }
    exit.code
}

/// How a command that panicked ended.
fn panicked() -> Exit {
    Exit {
        code: invocation::PANIC_EXIT,
        outcome: Outcome::Failed,
        signal: None,
    }
}

async fn dispatch(context: &Context, command: &Command) -> Result<Exit, CliError> {
    if context.ledger.is_none() && command.needs_store() {
        // The refusal was said when the store was checked: one line, and nothing opened.
        return Err(CliError::silent(1));
    }
    match command {
        // `run` owns a child: it handles SIGINT/SIGTERM itself, ending the child's group first.
        Command::Run(args) => run::execute(context, args).await,
        Command::Monitor(args) => interruptible(monitor::execute(context, args)).await,
        Command::Demo(args) => interruptible(demo::execute(context, args)).await,
        // The daemon handles its own signals (graceful shutdown, then a second one at once).
        Command::Daemon(args) => daemon::execute(context, args).await,
        Command::Project(args) => interruptible(project::execute(context, args)).await,
        Command::Session(args) => interruptible(session::execute(context, args)).await,
        // `send --wait` and `attach` hold a driver claim: they release it on SIGINT/SIGTERM.
        Command::Send(args) => send::execute(context, args).await,
        Command::Attach(args) => attach::execute(context, args).await,
        // `connect` holds claims per native connection: it closes them on SIGINT/SIGTERM.
        Command::Connect(args) => connect::execute(context, args).await,
        Command::Cancel(args) => interruptible(cancel::execute(context, args)).await,
        Command::Steer(args) => interruptible(steer::execute(context, args)).await,
        Command::Compact(args) => interruptible(compact::execute(context, args)).await,
        Command::Watch(args) => interruptible(watch::execute(context, args)).await,
        Command::History(args) => interruptible(history::execute(context, args)).await,
        Command::Status(args) => interruptible(status::execute(context, args)).await,
        Command::Config(args) => interruptible(config::execute(context, args)).await,
        Command::Completions(args) => completions::execute(context, args),
        Command::Panic => panic!("panic requested with `corral __panic`"),
    }
}

/// Runs a command that owns no child; SIGINT/SIGTERM end it as `interrupted`.
async fn interruptible(
    command: impl std::future::Future<Output = Result<Exit, CliError>>,
) -> Result<Exit, CliError> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return command.await;
    };
    tokio::select! {
        result = command => result,
        _ = interrupt.recv() => Ok(Exit::interrupted(libc::SIGINT)),
        _ = terminate.recv() => Ok(Exit::interrupted(libc::SIGTERM)),
    }
}

/// Prints a failure's line and gives its exit code.
fn report(error: CliError) -> i32 {
    if let Some(message) = error.message {
        eprintln!("corral: {message}");
    }
    error.code
}

/// Locates the home, checks the store, starts the ledger (creating and migrating the store).
async fn open(cli: &Cli, argv: Vec<OsString>) -> Result<Context, CliError> {
    let (home, source) = home::locate(cli.home.as_deref()).ok_or_else(|| {
        CliError::failure("no home directory: set CORRAL_HOME, XDG_STATE_HOME or HOME")
    })?;
    home::prepare(&home, &source).map_err(CliError::failure)?;
    let store_path = store::store_path(&home);
    let ledger = match store::inspect(&store_path)? {
        Compatibility::Incompatible(foreign) => Err(foreign),
        Compatibility::Missing | Compatibility::Plausible => {
            match LedgerHandle::start(&store_path, true).await {
                Ok((ledger, _)) => Ok(ledger),
                Err(error) => match error.store_error() {
                    Some(StoreError::Incompatible(foreign)) => Err(*foreign),
                    _ => return Err(describe_open_error(&store_path, error)),
                },
            }
        }
    };
    let ledger = ledger
        .map_err(|foreign| eprintln!("{}", store::refusal(&store_path, foreign)))
        .ok();
    Ok(Context {
        home,
        store_path,
        ledger,
        invocation: Invocation::capture(argv),
        // An inspection never starts a daemon, whatever it calls.
        no_spawn: cli.no_spawn || cli.command.inspects(),
    })
}

fn describe_open_error(path: &std::path::Path, error: LedgerError) -> CliError {
    match error.store_error() {
        Some(StoreError::Locked(_)) => CliError::failure(format!(
            "the store {} is locked by another writer; try again",
            path.display()
        )),
        Some(other) => {
            CliError::failure(format!("cannot open the store {}: {other}", path.display()))
        }
        None => CliError::failure(error.to_string()),
    }
}
