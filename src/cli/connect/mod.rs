//! `corral connect SESSION --socket PATH`: serve codex's app-server protocol on a Unix socket,
//! so that a person's own Codex client can attach to a supervised session's thread.
//!
//! The socket speaks what `codex app-server` speaks on stdio (codex
//! 0.171.0): one JSON object per line, no `"jsonrpc"` field, `{"id":N,"result":…}` answers,
//! `{"error":{…},"id":N}` refusals and notifications with `"emittedAtMs"`. Behind it is the
//! daemon: each native connection is an exec of its own (a row in the ledger whose parent is
//! this process's exec, completed when the connection closes), with its own daemon client
//! initialized as that exec, so each connection is a driver identity of its own.
//!
//! - Every connection, once initialized, receives the thread's notifications: the session's
//!   events (`events.subscribe` from the session's end; after `events.lagged` the stream
//!   resubscribes, nothing lost) translated by [`Translator`]. The turn id is the corral
//!   prompt id, the thread id the session's thread (the session id until it has one).
//! - Writes (`turn/start`, `turn/steer`, `turn/interrupt`) need the session's driver claim:
//!   a connection claims it (never taking it over) before its first write. While another live
//!   exec drives, the write is refused naming that exec; once the claim was taken over
//!   (`superseded`), every later write is refused naming the new driver, and the connection
//!   goes on receiving notifications.
//! - SIGINT/SIGTERM: stop accepting, close every connection (releasing its claim, completing
//!   its exec), remove the socket, exit 130/143.
//!
//! Here: the socket, its connections and their execs. [`native`]: what a connection's Codex
//! client asks, answered through the daemon. [`translate`]: the session's events as the
//! app-server's notifications.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

use super::remote::{self, Interrupts};
use super::{CliError, Context, Exit};
use crate::actors::ledger::{CompleteExec, RecordExec};
use crate::client::Client;
use crate::protocol::{DriverShow, SessionSelector, MAX_LINE};
use crate::store::exec::{ExecCompletion, NewExec, Outcome};
use crate::store::now_ms;

mod native;
mod translate;

use native::{Claim, Native, ThreadInfo};
use translate::Translator;

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The Unix socket to serve the app-server protocol on (created with mode 0600).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
}

/// Lines read from a native client and not yet handled.
const INCOMING: usize = 16;

/// How long a connection may take to close (release, complete its exec) at shutdown.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

pub async fn execute(context: &Context, args: &ConnectArgs) -> Result<Exit, CliError> {
    check_path(&args.socket)?;
    let mut interrupts = Interrupts::watch();
    let mut client = tokio::select! {
        client = remote::connect(context) => client?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    let session = tokio::select! {
        session = remote::session(&mut client, &args.session) => session?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    drop(client);
    let listener = bind(&args.socket)?;
    // Only the socket file this process made is removed at the end.
    let identity = std::fs::symlink_metadata(&args.socket)
        .map(|meta| (meta.dev(), meta.ino()))
        .ok();
    let shown = std::path::absolute(&args.socket).unwrap_or_else(|_| args.socket.clone());
    println!(
        "corral: serving session {} on {} (codex app-server protocol; Ctrl-C to stop)",
        session.id,
        shown.display()
    );
    let cwd = std::env::current_dir().ok();
    let shared = Rc::new(ServedSession {
        context: copy_context(context, &context.invocation.id),
        selector: args.session.clone(),
        session_id: session.id.clone(),
        cwd: cwd.as_ref().map(|dir| dir.to_string_lossy().into_owned()),
        repo: cwd.as_deref().and_then(crate::repo::toplevel_text),
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut number = 0u64;
    let signal = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if !same_user(&stream) {
                        continue;
                    }
                    number += 1;
                    connections.retain(|task| !task.is_finished());
                    connections.push(tokio::task::spawn_local(connection(
                        shared.clone(),
                        number,
                        stream,
                        stopped.clone(),
                    )));
                }
                Err(error) => {
                    say!("corral: accepting on {}: {error}", shown.display());
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            signal = interrupts.recv() => break signal,
        }
    };
    drop(listener);
    let _ = stop.send(true);
    let closing = async {
        for task in connections {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(CLOSE_GRACE, closing).await.is_err() {
        say!("corral: some native connections did not close in time");
    }
    let still_ours = std::fs::symlink_metadata(&args.socket)
        .map(|meta| Some((meta.dev(), meta.ino())) == identity)
        .unwrap_or(false);
    if still_ours {
        let _ = std::fs::remove_file(&args.socket);
    }
    Ok(Exit::interrupted(signal))
}

/// Refuses a path that does not fit in `sun_path`.
fn check_path(path: &Path) -> Result<(), CliError> {
    crate::socket::check_path(path)
        .map_err(|error| CliError::failure(format!("{error} (choose a shorter path)")))?;
    if path.as_os_str().is_empty() {
        return Err(CliError::usage("the socket path is empty"));
    }
    Ok(())
}

/// Binds the socket (mode 0600). A socket file nobody listens on is replaced; a live one, or
/// a file that is not a socket, is never touched.
fn bind(path: &Path) -> Result<UnixListener, CliError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(CliError::failure(format!(
                "{} exists and is not a socket; not replacing it",
                path.display()
            )));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(CliError::failure(format!(
                    "another process listens on {}; not taking it over",
                    path.display()
                )))
            }
            Err(_) => std::fs::remove_file(path).map_err(|error| {
                CliError::failure(format!(
                    "cannot remove the stale socket {}: {error}",
                    path.display()
                ))
            })?,
        }
    }
    // Mode 0600 from the moment the path exists, without touching the umask (src/socket.rs).
    crate::socket::bind_private(path).map_err(|error| CliError::failure(error.to_string()))
}

/// SO_PEERCRED: only our own user may drive our agents.
fn same_user(stream: &UnixStream) -> bool {
    match crate::socket::check_peer(stream) {
        Ok(_) => true,
        Err(refusal) => {
            say!("corral: refused native {refusal}");
            false
        }
    }
}

/// What every connection shares.
struct ServedSession {
    /// This process's context (its exec id is the parent of the connections' execs).
    context: Context,
    /// The session as the user named it (the connections' recorded argv).
    selector: String,
    session_id: String,
    cwd: Option<String>,
    repo: Option<String>,
}

/// A context like `context`, with `exec_id` as the invocation's id: what `remote::connect`
/// and `EventStream::open` initialize their daemon clients with.
fn copy_context(context: &Context, exec_id: &str) -> Context {
    let mut invocation = context.invocation.clone();
    invocation.id = exec_id.to_string();
    Context {
        home: context.home.clone(),
        location: context.location.clone(),
        store_path: context.store_path.clone(),
        ledger: context.ledger.clone(),
        invocation,
        no_spawn: context.no_spawn,
    }
}

/// One native connection, from accept to close: its exec row, its daemon client, the
/// protocol, and on every way out the claim released and the exec completed.
async fn connection(
    shared: Rc<ServedSession>,
    number: u64,
    stream: UnixStream,
    mut stopped: watch::Receiver<bool>,
) {
    let exec_id = uuid::Uuid::now_v7().to_string();
    let recorded = match &shared.context.ledger {
        Some(ledger) => match ledger
            .write(RecordExec(connection_exec(&shared, &exec_id, number)))
            .await
        {
            Ok(()) => true,
            Err(error) => {
                say!("corral: native connection {number}: cannot record its exec: {error}");
                return;
            }
        },
        None => false,
    };
    let context = copy_context(&shared.context, &exec_id);
    let (read, writer) = stream.into_split();
    let (sender, mut incoming) = mpsc::channel(INCOMING);
    let reader = tokio::task::spawn_local(read_lines(read, sender));
    let mut exit_code = 0;
    match remote::connect(&context).await {
        Ok(client) => {
            let mut native = Native {
                shared: shared.clone(),
                context,
                exec_id: exec_id.clone(),
                client,
                writer,
                initialized: false,
                events: None,
                claim: Claim::Unclaimed,
                info: ThreadInfo::default(),
                translator: Translator::new(&shared.session_id),
                broken: false,
            };
            tokio::select! {
                _ = native.serve(&mut incoming) => {}
                _ = stopped.wait_for(|stop| *stop) => {}
            }
            // Dropping the connection's halves closes it for the native client.
            drop(native);
        }
        Err(error) => {
            say!(
                "corral: native connection {number}: {}",
                error.message.unwrap_or_default()
            );
            exit_code = 1;
        }
    }
    reader.abort();
    release(&shared, &exec_id).await;
    if recorded {
        if let Some(ledger) = &shared.context.ledger {
            let completion = ExecCompletion {
                completed_at: now_ms(),
                exit_code,
                outcome: Outcome::of_exit_code(exit_code),
                signal: None,
            };
            if let Err(error) = ledger
                .write(CompleteExec {
                    id: exec_id,
                    completion,
                })
                .await
            {
                say!("corral: native connection {number}: cannot complete its exec: {error}");
            }
        }
    }
}

/// The exec row of native connection `number`.
fn connection_exec(shared: &ServedSession, exec_id: &str, number: u64) -> NewExec {
    let pid = std::process::id();
    NewExec {
        id: exec_id.to_string(),
        trace_id: shared.context.invocation.trace_id.clone(),
        parent_exec_id: Some(shared.context.invocation.id.clone()),
        caller_session_id: None,
        via_agent: false,
        argv: vec![
            "corral".into(),
            "connect".into(),
            shared.selector.clone(),
            "--native-connection".into(),
            number.to_string(),
        ],
        cwd: shared.cwd.clone(),
        repo: shared.repo.clone(),
        pid,
        pid_start: crate::process::start_time(pid),
        started_at: now_ms(),
        completion: None,
    }
}

/// Releases whatever claim `exec_id` holds on the session, on a fresh daemon connection (the
/// connection's own client may have been cut mid-call).
async fn release(shared: &ServedSession, exec_id: &str) {
    let Ok(mut client) = Client::connect(&shared.context.home, Some(exec_id)).await else {
        return;
    };
    let Ok(claim) = client
        .call_json::<DriverShow>(&SessionSelector::new(&shared.session_id))
        .await
    else {
        return;
    };
    if claim.get("exec_id").and_then(Value::as_str) == Some(exec_id) {
        if let Some(generation) = claim.get("generation").and_then(Value::as_i64) {
            remote::release(&mut client, &shared.session_id, generation).await;
        }
    }
}

/// What the reader of a native connection hands over.
enum Incoming {
    Line(Vec<u8>),
    TooLong,
}

/// Reads a native client's lines (at most [`MAX_LINE`] bytes each; a final line without a
/// newline counts) until it closes.
async fn read_lines(read: OwnedReadHalf, sender: mpsc::Sender<Incoming>) {
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = MAX_LINE as u64 + 1;
        let Ok(count) = (&mut reader).take(limit).read_until(b'\n', &mut line).await else {
            return;
        };
        if count == 0 {
            return;
        }
        let item = if line.last() == Some(&b'\n') || line.len() <= MAX_LINE {
            Incoming::Line(std::mem::take(&mut line))
        } else {
            // Skip the rest of the line.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut reader)
                    .take(1 << 16)
                    .read_until(b'\n', &mut rest)
                    .await
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            Incoming::TooLong
        };
        if sender.send(item).await.is_err() {
            return;
        }
    }
}
