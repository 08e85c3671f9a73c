//! The `corral` command line.
//!
//! Layout: this file defines the arguments (clap derive) and the path every invocation takes
//! ([`main`]); [`invocation`] turns the process into an exec row and completes it on every way
//! out; one file per command below it ([`run`], [`monitor`], and the daemon's clients:
//! [`project`], [`session`], [`send`], [`cancel`], [`watch`], [`history`], [`attach`],
//! [`status`], [`config`], [`completions`]; what those share is in [`remote`], and [`local`]
//! answers the inspections from the store itself when no daemon runs).
//!
//! The path of an invocation (`corral __lease-guard`, a daemon's lease guard, leaves it
//! before the first step: `crate::lease::guard::main`):
//! 1. parse; a parse that ends the process (`--help`, `--version`, a usage error) is an *early
//!    command*: it never creates or migrates the store, but records its exec into a store that
//!    already exists and is compatible. Meanwhile the store the arguments most likely name (by
//!    `--home` found without clap, or the environment) is opening on the ledger's thread,
//!    without creating or migrating ([`EarlyStore`]): the open and clap's parse are the two
//!    largest parts of a short command's own cost, and they overlap;
//! 2. locate and check the home and the store (`store::inspect`, before SQLite sees the
//!    file); a file that is not a corral store this binary may use is never opened: the
//!    command says so in one line ([`store::refusal`]) and — unless it needs no store
//!    ([`Command::needs_store`]: `run` runs unrecorded) — exits 1 before it connects to a
//!    daemon, starts one, or opens a reader;
//! 3. record the exec's start through the ledger, run the command, record its end: exit code,
//!    outcome, and the signal only when a signal really ended a process. Three commands take
//!    a shorter way: a plain `send` that a daemon answers opens no store at all — it checks
//!    the store's header, and the daemon records its exec with the prompt ([`send::quick`]);
//!    a plain `send` that must open the store connects and queues its prompt while its start
//!    is written (the daemon needs no exec row for that); `run` spawns its command before the
//!    store is open, and writes the start while it runs, or start and end at once when the
//!    command was quicker ([`run_first`]);
//! 4. exit without tearing the runtime down (every write is committed by then; closing the
//!    store's connection on the ledger's thread would only delay the exit), except for the
//!    commands that run a supervisor in this process (`daemon`, `demo`).
//!
//! Commands that only look ([`Command::inspects`]) never start a daemon: they ask the one
//! that answers, or read the store directly ([`remote::inspect`]). The others start one when
//! none answers, unless `--no-spawn` or `daemon.autostart = false` says not to.

pub mod approvals;
pub mod attach;
pub mod cancel;
pub mod compact;
pub mod completions;
pub mod config;
pub mod connect;
pub mod daemon;
pub mod demo;
pub mod group;
pub mod history;
pub mod invocation;
pub mod local;
pub mod monitor;
pub mod pause;
pub mod progress;
pub mod project;
pub mod remote;
pub mod retry;
pub mod run;
pub mod schedule;
pub mod send;
pub mod session;
pub mod status;
pub mod steer;
pub mod wait;
pub mod watch;
pub mod web;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::actors::ledger::{LedgerError, LedgerHandle};
use crate::home;
use crate::store::approvals::Decision;
use crate::store::exec::Outcome;
use crate::store::location::Location;
use crate::store::sql::{self, Conn};
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
    /// Execution groups: projects that take turns (locking) or are only named together.
    Group(group::GroupArgs),
    /// Queue a prompt on a session (--wait: drive it, wait, print the answer).
    Send(send::SendArgs),
    /// Cancel a prompt, or everything running or queued on a session.
    Cancel(cancel::CancelArgs),
    /// Wait until a prompt, a session's prompts or every prompt (--all) has ended; the exit
    /// code says how (0 done, 1 failed, 4 cancelled, 124 timed out).
    Wait(wait::WaitArgs),
    /// Pause a session, a project (--project), a group (--group) or everything (--all): no
    /// new run starts there until `resume` (--now: interrupt what runs too). Alone: list
    /// the pauses.
    Pause(pause::PauseArgs),
    /// Let a paused scope's prompts run again.
    Resume(pause::ResumeArgs),
    /// Prompts sent on a cron schedule, to a session or to a new session of a project at
    /// each firing; each firing is recorded (what it sent, or why it skipped).
    Schedule(schedule::ScheduleArgs),
    /// Run a failed or cancelled prompt again in place, first in its session (--text: with
    /// a new text).
    Retry(retry::RetryArgs),
    /// Queued prompts: edit one's text before it starts.
    Prompt(retry::PromptArgs),
    /// What engines asked a person under the policy `ask` and wait for (--all: answered too).
    Approvals(approvals::ApprovalsArgs),
    /// Let an engine do what it asked (--for-session: its like from now on).
    Approve(approvals::AnswerArgs),
    /// Refuse what an engine asked; the engine is told why (--reason).
    Deny(approvals::AnswerArgs),
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
    /// The dashboard's login URL (starts the daemon if none runs; --open: in a browser).
    Web(web::WebArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
    /// Panics on purpose: lets the tests see that a panic still completes the exec.
    #[command(name = "__panic", hide = true)]
    Panic,
}

/// `corral run …` and `corral send …` parsed without building every other subcommand: clap
/// builds a parser's whole tree before it parses (a quarter of a millisecond here, a tenth of
/// a short command's cost). Tried only when the first word names one of them, and only its
/// success counts: anything else is parsed again by [`Cli`], so help and errors are its.
#[derive(Debug, Parser)]
#[command(name = "corral", version, propagate_version = true)]
struct QuickCli {
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    #[arg(long, global = true)]
    no_spawn: bool,
    #[command(subcommand)]
    command: QuickCommand,
}

#[derive(Debug, Subcommand)]
enum QuickCommand {
    Run(run::RunArgs),
    Send(send::SendArgs),
}

impl Cli {
    /// Parses `argv`, through [`QuickCli`] when it can.
    fn parse_argv(argv: &[OsString]) -> Result<Cli, clap::Error> {
        // `corral run -- CMD…`: after `--` every word is the command's, so clap would find
        // nothing else to parse (and the command starts sooner without it).
        if let [_, run, dashes, command @ ..] = argv {
            if run == "run" && dashes == "--" && !command.is_empty() {
                return Ok(Cli {
                    home: None,
                    no_spawn: false,
                    command: Command::Run(run::RunArgs {
                        command: command.to_vec(),
                    }),
                });
            }
        }
        let quick = matches!(
            subcommand_word(argv).and_then(|word| word.to_str()),
            Some("run" | "send")
        );
        if quick {
            if let Ok(parsed) = QuickCli::try_parse_from(argv) {
                return Ok(Cli {
                    home: parsed.home,
                    no_spawn: parsed.no_spawn,
                    command: match parsed.command {
                        QuickCommand::Run(args) => Command::Run(args),
                        QuickCommand::Send(args) => Command::Send(args),
                    },
                });
            }
        }
        Cli::try_parse_from(argv)
    }
}

/// The word the subcommand was named by (`top`, `ps`, `run`…): the first word of `argv`
/// after the program that is not a global option or its value (`--home DIR`, `--no-spawn`).
pub fn subcommand_word(argv: &[OsString]) -> Option<&std::ffi::OsStr> {
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        if word == "--home" {
            words.next();
        } else if word != "--no-spawn" && !word.as_encoded_bytes().starts_with(b"--home=") {
            return Some(word);
        }
    }
    None
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
            Command::Monitor(_)
            | Command::Watch(_)
            | Command::History(_)
            | Command::Status(_)
            | Command::Approvals(_) => true,
            Command::Session(args) => args.action.inspects(),
            Command::Project(args) => args.action.inspects(),
            Command::Group(args) => args.action.inspects(),
            Command::Pause(args) => args.inspects(),
            Command::Schedule(args) => args.action.inspects(),
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
        CliError::failure(StoreError::from(error).to_string())
    }
}

impl From<sql::DbError> for CliError {
    fn from(error: sql::DbError) -> Self {
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
    /// Where the store is (`HOME/config`'s `store.url`, `CORRAL_STORE_URL`, else the file).
    pub location: Location,
    /// What names the store in messages: the SQLite file, or the URL without its password.
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
    pub fn reader(&self) -> Result<Conn, CliError> {
        if self.ledger.is_none() {
            // The unavailability line was printed when the store was checked.
            return Err(CliError::silent(1));
        }
        Ok(store::open_read(&self.location)?)
    }
}

/// The whole `corral` process: parse, record, run, record, exit.
pub fn main() -> ExitCode {
    // A daemon's lease guard (`crate::lease::guard`): no parse, runtime, store or exec row.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(crate::lease::guard::ARG))
    {
        std::process::exit(crate::lease::guard::main());
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    let system = actix::System::new();
    let (code, supervises) = system.block_on(async move {
        // The store the arguments will most likely name starts opening on the ledger's thread
        // while clap parses them (the two are the largest parts of corral's own cost).
        // Not for a plain `send`: one that a daemon answers opens no store (`send::quick`).
        let plain_send = subcommand_word(&argv).is_some_and(|word| word == "send")
            && !argv.iter().any(|word| word == "--wait");
        // Nor for a `run` beside a daemon, which records its exec (`run_beside_daemon`).
        let beside_daemon =
            subcommand_word(&argv).is_some_and(|word| word == "run") && daemon_listens(&argv);
        let store = (!plain_send && !beside_daemon)
            .then(|| EarlyStore::open(&argv))
            .flatten();
        tokio::task::yield_now().await;
        match Cli::parse_argv(&argv) {
            Ok(mut cli) => {
                // `config get|set|unset store.url` need the home only: no store is opened.
                if let Command::Config(args) = &cli.command {
                    if args.action.is_location() {
                        return (
                            config::run_location(cli.home.as_deref(), &args.action),
                            false,
                        );
                    }
                }
                // The commands that run a supervisor here stop it the orderly way.
                let supervises = matches!(cli.command, Command::Daemon(_) | Command::Demo(_));
                let invocation = match &mut cli.command {
                    Command::Send(args) if !args.wait => {
                        match send::quick(cli.home.as_deref(), &argv, args).await {
                            send::Quick::Done(code) => return (code, false),
                            send::Quick::Record(invocation, exit) => {
                                return (record_whole(&cli, invocation, exit).await, false)
                            }
                            send::Quick::Ordinary(invocation) => invocation,
                        }
                    }
                    _ => Invocation::capture(argv),
                };
                if let Command::Run(_) = &cli.command {
                    return (run_first(cli, invocation, store).await, false);
                }
                (run_parsed(cli, invocation, store).await, supervises)
            }
            Err(error) => (early(error, argv, store).await, false),
        }
    });
    let code = code.clamp(0, 255);
    if supervises {
        drop(system);
        return ExitCode::from(code as u8);
    }
    // Everything this process wrote is committed (a write answers after its commit), so the
    // runtime and the ledger's thread are left to the exit rather than torn down: closing the
    // store's connection on that thread while the process exits only delays the exit.
    std::process::exit(code)
}

/// Whether the home the arguments most likely name has a daemon's socket (a stale one is
/// found out when connecting).
fn daemon_listens(argv: &[OsString]) -> bool {
    home::locate(home::scan_flag(argv).as_deref())
        .is_some_and(|(home, _)| crate::daemon::socket_path(&home).exists())
}

/// The store as found before the arguments are parsed, in the home that `--home` (found
/// without clap) or the environment names; a SQLite file's header is read once, here, before
/// SQLite sees the file. A store that is there and plausible has its ledger starting at once,
/// without creating or migrating anything (a parse that fails must leave the store as it
/// is); the commands use it when they name the same home and the store needs no migration.
/// (A PostgreSQL database is always plausible here: the ledger's first connection checks it
/// with reads only.)
struct EarlyStore {
    location: Location,
    compatibility: Compatibility,
    ledger: Option<tokio::task::JoinHandle<Result<(LedgerHandle, u32), LedgerError>>>,
}

impl EarlyStore {
    fn open(argv: &[OsString]) -> Option<EarlyStore> {
        let (home, _) = home::locate(home::scan_flag(argv).as_deref())?;
        // A config that cannot be read is said by the command's own open, in its one line.
        let location = store::location::locate(&home).ok()?;
        let compatibility = match &location {
            Location::Sqlite(path) => store::inspect(path).ok()?,
            Location::Postgres(_) => Compatibility::Plausible,
        };
        let ledger = (compatibility == Compatibility::Plausible).then(|| {
            let location = location.clone();
            tokio::task::spawn_local(async move { LedgerHandle::start_at(&location, false).await })
        });
        Some(EarlyStore {
            location,
            compatibility,
            ledger,
        })
    }

    /// Its ledger, once started: the handle and the store's schema version.
    async fn ledger(self) -> Option<Result<(LedgerHandle, u32), LedgerError>> {
        self.ledger?.await.ok()
    }
}

/// `--help`, `--version` or a usage error: print what clap says, and record the exec only
/// into a store that already exists and is compatible (never creating or migrating one).
async fn early(error: clap::Error, argv: Vec<OsString>, store: Option<EarlyStore>) -> i32 {
    let code = error.exit_code();
    let _ = error.print();
    let Some(store) = store else {
        return code;
    };
    let path = store::shown_path(&store.location);
    if let Compatibility::Incompatible(foreign) = store.compatibility {
        say!("{}", store::refusal(&path, foreign));
        return code;
    }
    let invocation = Invocation::capture(argv);
    match store.ledger().await {
        // Version 0: created but never migrated; there is no execs table yet.
        Some(Ok((ledger, version))) if version >= 1 => {
            let _ = invocation.record_whole(&ledger, &Exit::code(code)).await;
        }
        Some(Err(error)) => {
            if let Some(StoreError::Incompatible(foreign)) = error.store_error() {
                say!("{}", store::refusal(&path, *foreign));
            }
        }
        _ => {}
    }
    code
}

/// A command that ended without its exec recorded (a plain send the daemon answered without
/// recording it): start and end written at once, into the store opened as usual. A command
/// that failed has said why in its one line: a store that cannot take its record then (the
/// lock its failure was about, say) is not a second line, and its exit stays the command's.
async fn record_whole(cli: &Cli, invocation: Invocation, exit: Exit) -> i32 {
    let recorded = match open(cli, invocation, None).await {
        Ok(context) => match &context.ledger {
            Some(ledger) => context.invocation.record_whole(ledger, &exit).await,
            None => Ok(()),
        },
        Err(error) => Err(error),
    };
    match recorded {
        Ok(()) => exit.code,
        Err(error) if exit.code != 0 => {
            tracing::debug!(?error, "the failed command's exec was not recorded");
            exit.code
        }
        Err(error) => report(error),
    }
}

async fn run_parsed(cli: Cli, invocation: Invocation, store: Option<EarlyStore>) -> i32 {
    let context = match open(&cli, invocation, store).await {
        Ok(context) => context,
        Err(error) => return report(error),
    };
    invocation::install_panic_hook();
    let context = std::rc::Rc::new(context);
    // The exec's start is written before the command acts, except for a plain `send`: its
    // connection and its request go while the row is written, the two awaited before it
    // exits (the daemon needs no exec row to queue a prompt, only a driver's claim does).
    let overlaps = matches!(&cli.command, Command::Send(send) if !send.wait);
    let record_start = || context.invocation.record_start(context.ledger.as_ref());
    let mut started = false;
    if !overlaps {
        match record_start().await {
            Ok(recorded) => started = recorded,
            // A looking command still looks at a store that cannot take its record now (a
            // read-only or full disk): it only reads.
            Err(error)
                if cli.command.inspects()
                    && error.store_error().is_some_and(|error| {
                        matches!(error, StoreError::Refusing { .. })
                            || error.refuses_writes_for_now()
                    }) =>
            {
                say!("corral: this command is not recorded: {error}");
            }
            Err(error) => return report(error.into()),
        }
    }
    // The command runs as a task of its own so that a panic in it is contained: the hook
    // prints one line and ends the child group, and the exec is still completed below.
    let task = tokio::task::spawn_local({
        let context = context.clone();
        async move { dispatch(&context, &cli.command).await }
    });
    let mut unrecorded = None;
    if overlaps {
        match record_start().await {
            Ok(recorded) => started = recorded,
            Err(error) => unrecorded = Some(CliError::from(error)),
        }
    }
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
    if let Some(error) = unrecorded {
        // The command ran, but corral could not record it: that is corral's failure.
        return report(error);
    }
    if started {
        if let Err(error) = context
            .invocation
            .record_end(context.ledger.as_ref(), &exit)
            .await
        {
            let reason = error.message.unwrap_or_default();
            say!("corral: could not record the end of this command: {reason}");
        }
    }
    exit.code
}

/// `corral run`: the command is spawned at once (its exec's start time was taken before),
/// and the store opens and the exec's start is written while it runs; a command that ends
/// before the store is open is recorded in one write, start and end. A store that is refused
/// leaves the command unrecorded (the refusal said once); one that cannot be opened or
/// written is said when the command has ended, and corral then exits 1 (the command ran,
/// unrecorded: corral's failure), as when the start cannot be written.
async fn run_first(cli: Cli, invocation: Invocation, store: Option<EarlyStore>) -> i32 {
    let Command::Run(args) = &cli.command else {
        unreachable!("run_first runs `run`");
    };
    let home = match home::locate(cli.home.as_deref()) {
        Some((home, source)) => match home::prepare(&home, &source) {
            Ok(()) => home,
            Err(error) => return report(CliError::failure(error)),
        },
        None => return report(no_home()),
    };
    invocation::install_panic_hook();
    // Its own task, so that a panic in it is contained (the hook ends the child's group) and
    // the exec is still completed.
    let mut task = match run::spawn(&home, &invocation, args) {
        Ok(running) => tokio::task::spawn_local(running.wait()),
        Err(error) => tokio::task::spawn_local(async { run::Ended::Exited(Err(error)) }),
    };
    let mut ended = None;
    if store.is_none() && crate::daemon::socket_path(&home).exists() {
        match run_beside_daemon(&home, &invocation, &mut task).await {
            BesideDaemon::Done(code) => return code,
            BesideDaemon::EndUnrecorded(exit) => return record_whole(&cli, invocation, exit).await,
            BesideDaemon::StartUnrecorded(result) => ended = result,
        }
    }
    tokio::pin!(task);
    let opening = open(&cli, invocation, store);
    tokio::pin!(opening);
    let context = tokio::select! {
        biased;
        result = &mut task, if ended.is_none() => {
            ended = Some(result);
            opening.await
        }
        context = &mut opening => context,
    };
    let context = match context {
        Ok(context) => Some(context),
        Err(error) => {
            let result = match ended {
                Some(result) => result,
                None => task.await,
            };
            let _ = conclude_run(result, None).await;
            return report(error);
        }
    };
    let context = context.as_ref();
    let ledger = context.and_then(|context| context.ledger.as_ref());
    let mut started = false;
    if let (None, Some(context)) = (&ended, context) {
        if ledger.is_some() {
            let start = context.invocation.record_start(ledger);
            tokio::pin!(start);
            let written = tokio::select! {
                written = &mut start => written,
                result = &mut task => {
                    ended = Some(result);
                    start.await
                }
            };
            match written {
                Ok(written) => started = written,
                Err(error) => {
                    let result = match ended {
                        Some(result) => result,
                        None => task.await,
                    };
                    let _ = conclude_run(result, context.into()).await;
                    return report(error.into());
                }
            }
        }
    }
    let result = match ended {
        Some(result) => result,
        None => task.await,
    };
    let exit = conclude_run(result, context).await;
    if let (Some(context), Some(ledger)) = (context, ledger) {
        if !started {
            // Nothing of it is stored yet: not storing it is corral's failure, as a start that
            // cannot be written is.
            if let Err(error) = context.invocation.record_whole(ledger, &exit).await {
                return report(error);
            }
        } else if let Err(error) = context.invocation.record_end(Some(ledger), &exit).await {
            let reason = error.message.unwrap_or_default();
            say!("corral: could not record the end of this command: {reason}");
        }
    }
    exit.code
}

/// How `run` went beside a daemon (`run_beside_daemon`).
enum BesideDaemon {
    /// The daemon recorded the exec, start and end: corral exits with this code.
    Done(i32),
    /// The daemon recorded the start, and went away before the end of the command, which
    /// ended so: the store records the exec whole.
    EndUnrecorded(Exit),
    /// No daemon recorded the start: the store records the exec. The command's end, when it
    /// came meanwhile.
    StartUnrecorded(Option<Result<run::Ended, tokio::task::JoinError>>),
}

/// `run` with its exec recorded by the daemon that answers on the home's socket: the
/// connection and `exec.start` while the command runs, `exec.end` once it ended. No store
/// is opened (docs/cli_cost.md: the open, the schema's parse and the first write are most of
/// `run`'s own cost).
async fn run_beside_daemon(
    home: &std::path::Path,
    invocation: &Invocation,
    task: &mut tokio::task::JoinHandle<run::Ended>,
) -> BesideDaemon {
    let start = run::DaemonExec::start(home, invocation);
    tokio::pin!(start);
    let mut ended = None;
    let started = tokio::select! {
        biased;
        result = &mut *task => {
            ended = Some(result);
            start.await
        }
        started = &mut start => started,
    };
    let Some(daemon) = started else {
        return BesideDaemon::StartUnrecorded(ended);
    };
    let result = match ended {
        Some(result) => result,
        None => task.await,
    };
    let exit = match result {
        Ok(ended) => match run::conclude_in(ended, home).await {
            Ok(exit) => exit,
            Err(error) => Exit::code(report(error)),
        },
        Err(error) => conclude_panic(error),
    };
    match daemon.end(invocation, &exit).await {
        Ok(()) => BesideDaemon::Done(exit.code),
        Err(_) => BesideDaemon::EndUnrecorded(exit),
    }
}

/// The exit of `run`'s task: the command's, or a panic's.
async fn conclude_run(
    result: Result<run::Ended, tokio::task::JoinError>,
    context: Option<&Context>,
) -> Exit {
    let ended = match result {
        Ok(ended) => ended,
        Err(error) => return conclude_panic(error),
    };
    match run::conclude(ended, context).await {
        Ok(exit) => exit,
        Err(error) => Exit::code(report(error)),
    }
}

/// The exit of a `run` whose task did not end on its own: a closed pipe is success, a panic
/// is the panic's exit.
fn conclude_panic(error: tokio::task::JoinError) -> Exit {
    if error.is_panic() {
        if let Ok(payload) = error.try_into_panic() {
            if invocation::is_closed_pipe(&*payload) {
                return Exit::success();
            }
        }
    }
    panicked()
}

fn no_home() -> CliError {
    CliError::failure("no home directory: set CORRAL_HOME, XDG_STATE_HOME or HOME")
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
        Command::Wait(args) => interruptible(wait::execute(context, args)).await,
        Command::Group(args) => interruptible(group::execute(context, args)).await,
        Command::Pause(args) => interruptible(pause::pause(context, args)).await,
        Command::Resume(args) => interruptible(pause::resume(context, args)).await,
        Command::Schedule(args) => interruptible(schedule::execute(context, args)).await,
        Command::Retry(args) => interruptible(retry::retry(context, args)).await,
        Command::Prompt(args) => interruptible(retry::execute(context, args)).await,
        Command::Approvals(args) => interruptible(approvals::list(context, args)).await,
        Command::Approve(args) => {
            interruptible(approvals::answer(context, args, Decision::Approve)).await
        }
        Command::Deny(args) => {
            interruptible(approvals::answer(context, args, Decision::Deny)).await
        }
        Command::Steer(args) => interruptible(steer::execute(context, args)).await,
        Command::Compact(args) => interruptible(compact::execute(context, args)).await,
        Command::Watch(args) => interruptible(watch::execute(context, args)).await,
        Command::History(args) => interruptible(history::execute(context, args)).await,
        Command::Status(args) => interruptible(status::execute(context, args)).await,
        Command::Config(args) => interruptible(config::execute(context, args)).await,
        Command::Web(args) => interruptible(web::execute(context, args)).await,
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
        say!("corral: {message}");
    }
    error.code
}

/// Locates the home, checks the store, starts the ledger (creating and migrating the store),
/// or takes the one [`EarlyStore`] started for the same store when it needs no migration.
async fn open(
    cli: &Cli,
    invocation: Invocation,
    early: Option<EarlyStore>,
) -> Result<Context, CliError> {
    let (home, source) = home::locate(cli.home.as_deref()).ok_or_else(no_home)?;
    home::prepare(&home, &source).map_err(CliError::failure)?;
    let location =
        store::location::locate(&home).map_err(|error| CliError::failure(error.to_string()))?;
    let store_path = store::shown_path(&location);
    let early = early.filter(|early| early.location == location);
    // The header is read once, before any connection (see `store::inspect`).
    let compatibility = match (&early, &location) {
        (Some(early), _) => early.compatibility,
        (None, Location::Sqlite(path)) => store::inspect(path)?,
        (None, Location::Postgres(_)) => Compatibility::Plausible,
    };
    // Taken when it opened a store that needs no migration; else dropped here, before the
    // ledger that migrates starts.
    let ready = match early {
        Some(early) => match early.ledger().await {
            Some(Ok((ledger, version))) if version == store::migrations::SCHEMA_VERSION => {
                Some(ledger)
            }
            _ => None,
        },
        None => None,
    };
    let ledger = match (compatibility, ready) {
        (Compatibility::Incompatible(foreign), _) => Err(foreign),
        (_, Some(ledger)) => Ok(ledger),
        // No store yet, one to migrate, or one the early start could not open: started now,
        // as a writer that creates and migrates (and says why it cannot).
        _ => match LedgerHandle::start_at(&location, true).await {
            Ok((ledger, _)) => Ok(ledger),
            Err(error) => match error.store_error() {
                Some(StoreError::Incompatible(foreign)) => Err(*foreign),
                _ => return Err(describe_open_error(&store_path, error)),
            },
        },
    };
    let ledger = ledger
        .map_err(|foreign| say!("{}", store::refusal(&store_path, foreign)))
        .ok();
    if let Some(ledger) = &ledger {
        // A store that refuses writes is told now, not after `store.lock_timeout_ms`.
        ledger.refuse_at_once();
        // Only now is the file known to be ours (the writer checked its id and version): a
        // store left loose by an older corral is made private.
        if let Location::Sqlite(path) = &location {
            for note in store::make_private(path) {
                say!("corral: {note}");
            }
        }
    }
    Ok(Context {
        home,
        location,
        store_path,
        ledger,
        invocation,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_subcommand_word_skips_global_options() {
        let word = |words: &[&str]| {
            subcommand_word(&argv(words)).map(|word| word.to_string_lossy().into_owned())
        };
        assert_eq!(word(&["corral", "top"]).as_deref(), Some("top"));
        assert_eq!(
            word(&["corral", "--home", "/h", "--no-spawn", "top"]).as_deref(),
            Some("top")
        );
        assert_eq!(word(&["corral", "--home=/h", "ps"]).as_deref(), Some("ps"));
        assert_eq!(word(&["corral", "--home"]), None);
    }

    #[test]
    fn the_quick_parse_reads_run_and_send_as_the_whole_parser_does() {
        for words in [
            &["corral", "run", "--", "true", "-x", "--home", "y"][..],
            &["corral", "run", "--", "--help"],
            &["corral", "run", "--", "--", "x"],
            &["corral", "run", "--", "sh", "-c", "exit 3", "--no-spawn"],
            &["corral", "--home", "/h", "run", "ls", "-la"],
            &["corral", "run", "--no-spawn", "--", "sh", "-c", "exit 3"],
            &["corral", "send", "s", "hello", "world"],
            &[
                "corral",
                "--no-spawn",
                "send",
                "--wait",
                "--json",
                "s",
                "--",
                "-v",
                "x",
            ],
            &[
                "corral",
                "send",
                "s",
                "--image",
                "a.png",
                "--read-only",
                "-",
            ],
            &["corral", "send", "s", "hi", "--home=/h"],
        ] {
            let whole = format!("{:?}", Cli::try_parse_from(argv(words)).unwrap());
            let quick = QuickCli::try_parse_from(argv(words)).unwrap();
            assert!(
                matches!(quick.command, QuickCommand::Run(_) | QuickCommand::Send(_)),
                "{words:?}"
            );
            assert_eq!(
                format!("{:?}", Cli::parse_argv(&argv(words)).unwrap()),
                whole
            );
        }
        // What the quick parser refuses is the whole parser's to say.
        for words in [
            &["corral", "send", "s"][..],
            &["corral", "run", "--help"],
            &["corral", "send", "--version"],
            &["corral", "run"],
        ] {
            let whole = Cli::try_parse_from(argv(words)).unwrap_err();
            let quick = Cli::parse_argv(&argv(words)).unwrap_err();
            assert_eq!(quick.kind(), whole.kind(), "{words:?}");
            assert_eq!(quick.to_string(), whole.to_string(), "{words:?}");
        }
    }
}
