//! What the commands that drive the daemon share: connecting (starting a daemon when none
//! answers, unless `--no-spawn` or the setting `daemon.autostart` = false says not to),
//! inspecting (the daemon when one answers, else the store itself: never starting one),
//! turning the daemon's errors into exit codes, following a session's events, and printing
//! them as `#SEQ KIND summary` lines.

use std::path::Path;

use serde_json::Value;
use tokio::sync::mpsc;

use super::local::LocalStore;
use super::{CliError, Context};
use crate::client::{self, Client, ClientError};
use crate::events::{EventKind, Payload};
use crate::protocol::{
    code, DriverRelease, EventsSubscribe, Method, ReleaseParams, RpcError, SessionSelector,
    SessionShow, SubscribeParams,
};
use crate::store::events::Event;
use crate::store::select::{IdKind, ShortIds};

/// The setting that lets the CLI start a daemon.
const AUTOSTART: &str = "daemon.autostart";

/// Events buffered between the socket reader and the printing command. A reader that falls
/// further behind makes the daemon send `events.lagged`; the stream then re-subscribes.
const EVENT_BUFFER: usize = 1024;

/// How many characters of a summary a line shows.
const SUMMARY_CHARS: usize = 200;

/// The exit code of an inspection that could not do all it was asked because no daemon runs
/// (`status`, `watch --follow`): not a failure of corral, an answer scripts can test.
pub const NO_DAEMON: i32 = 3;

/// The line that says no daemon serves `context`'s home.
pub fn no_daemon_line(context: &Context) -> String {
    format!(
        "no daemon runs for {} (start one with `corral daemon start`)",
        context.home.display()
    )
}

/// Whether this command may start a daemon: not with `--no-spawn` (or from an inspection),
/// not when the store was refused, not when the store says `daemon.autostart = false`.
fn may_spawn(context: &Context) -> bool {
    if context.no_spawn {
        return false;
    }
    // Through the context: a store the check refused is never opened, not even to read.
    let Ok(connection) = context.reader() else {
        return false;
    };
    let stored = crate::store::settings::get(&connection, AUTOSTART);
    stored.as_deref().map(str::trim) != Some("false")
}

/// Where an inspection reads: the home's daemon when one answers, else the store itself.
pub enum Source {
    Daemon(Client),
    /// Boxed: a store connection is larger than a client, and this is made once a command.
    Store(Box<LocalStore>),
}

impl Source {
    /// Calls a read-only method on the daemon, or answers it from the store as the daemon
    /// would; the answer as JSON.
    pub async fn call_json<M: Method>(&mut self, params: &M::Params) -> Result<Value, ClientError> {
        match self {
            Source::Daemon(client) => client.call_json::<M>(params).await,
            Source::Store(store) => {
                let params = serde_json::to_value(params)
                    .map_err(|error| ClientError::Protocol(error.to_string()))?;
                store.call(M::NAME, &params)
            }
        }
    }

    /// [`Source::call_json`], decoded as `M`'s result; any error is a failure (exit 1).
    pub async fn ask<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, CliError> {
        read_answer::<M>(self.ask_json::<M>(params).await?)
    }

    /// [`Source::call_json`]; any error is a failure (exit 1).
    pub async fn ask_json<M: Method>(&mut self, params: &M::Params) -> Result<Value, CliError> {
        self.call_json::<M>(params).await.map_err(failure)
    }

    /// [`Source::call_json`], as said and as read (see [`Answered`]).
    pub async fn ask_answered<M: Method>(
        &mut self,
        params: &M::Params,
    ) -> Result<Answered<M::Result>, CliError> {
        Answered::read::<M>(self.ask_json::<M>(params).await?)
    }

    /// Resolves a session selector, as [`session`] does through the daemon.
    pub async fn session(&mut self, selector: &str) -> Result<SessionRef, CliError> {
        let shown = self
            .ask_json::<SessionShow>(&SessionSelector::new(selector))
            .await?;
        SessionRef::from_shown(shown)
    }
}

/// The source of an inspection: the home's daemon when one answers (as this exec), else the
/// store read directly. Never starts a daemon.
pub async fn inspect(context: &Context) -> Result<Source, CliError> {
    match Client::connect(&context.home, Some(&context.invocation.id)).await {
        Ok(client) => Ok(Source::Daemon(client)),
        Err(ClientError::NoDaemon(_)) => Ok(Source::Store(Box::new(LocalStore::open(context)?))),
        Err(error) => Err(failure(error)),
    }
}

/// How long a command waits for a daemon that is shutting down to end: its grace
/// (`daemon.shutdown_grace_ms`), the cancel grace of its runs, and time to spare.
const STOPPING_PATIENCE: std::time::Duration = std::time::Duration::from_secs(300);

/// Connects to the home's daemon as this exec, starting one when allowed. A daemon that is
/// shutting down is waited for (saying so in one line), and the next one is connected to.
pub async fn connect(context: &Context) -> Result<Client, CliError> {
    let client = connect_once(context).await?;
    if client.daemon["shutting_down"] != true {
        return Ok(client);
    }
    // A daemon that stops takes no new work: wait for its end, then go on with the next one
    // (started as usual), rather than be told that no daemon runs, or that one holds the home.
    let pid = client.daemon["daemon_pid"].as_i64().unwrap_or(0) as i32;
    drop(client);
    say!(
        "corral: the daemon (pid {pid}) is shutting down; waiting for it to end (its running \
         prompts have their grace)"
    );
    let gone =
        tokio::task::spawn_blocking(move || crate::process::wait_gone(pid, STOPPING_PATIENCE))
            .await
            .unwrap_or(false);
    if !gone {
        return Err(CliError::failure(format!(
            "the daemon (pid {pid}) is still shutting down after {} s; try again once it is gone",
            STOPPING_PATIENCE.as_secs()
        )));
    }
    connect_once(context).await
}

async fn connect_once(context: &Context) -> Result<Client, CliError> {
    let exec_id = Some(context.invocation.id.as_str());
    // Whether this command may start one is read only when none answers.
    let spawn = || {
        may_spawn(context).then(|| crate::daemon::Starter {
            exec_id: Some(context.invocation.id.clone()),
            trace_id: Some(context.invocation.trace_id.clone()),
        })
    };
    match client::connect_or_spawn(&context.home, exec_id, spawn).await {
        Ok(client) => Ok(client),
        // Two CLIs that start a daemon at the same moment: the one whose daemon lost the
        // home's lock finds the winner's.
        Err(ClientError::Spawn(reason)) => Client::connect(&context.home, exec_id)
            .await
            .map_err(|_| failure(ClientError::Spawn(reason))),
        Err(error) => Err(failure(error)),
    }
}

/// One line: newlines and tabs become spaces.
pub fn one_line(text: &str) -> String {
    let joined: Vec<&str> = text.split_whitespace().collect();
    joined.join(" ")
}

/// At most `chars` characters, with `…` when cut.
pub fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut short: String = text.chars().take(chars.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// A client error as a failure: its message on one line, exit 1.
pub fn failure(error: ClientError) -> CliError {
    match error {
        ClientError::Rpc(error) => CliError::failure(one_line(&error.message)),
        other => CliError::failure(one_line(&other.to_string())),
    }
}

/// The daemon's error object, when that is what ended a call.
pub fn rpc_error(error: &ClientError) -> Option<&RpcError> {
    match error {
        ClientError::Rpc(error) => Some(error),
        _ => None,
    }
}

/// Calls method `M`; any error is a failure (exit 1).
pub async fn ask<M: Method>(
    client: &mut Client,
    params: &M::Params,
) -> Result<M::Result, CliError> {
    client.call::<M>(params).await.map_err(failure)
}

/// Calls method `M`, its answer as JSON; any error is a failure (exit 1).
pub async fn ask_json<M: Method>(
    client: &mut Client,
    params: &M::Params,
) -> Result<Value, CliError> {
    client.call_json::<M>(params).await.map_err(failure)
}

/// Calls method `M`: its answer as said and as read (see [`Answered`]).
pub async fn ask_answered<M: Method>(
    client: &mut Client,
    params: &M::Params,
) -> Result<Answered<M::Result>, CliError> {
    Answered::read::<M>(ask_json::<M>(client, params).await?)
}

/// A method's answer twice: as the daemon said it (what `--json` prints: a newer daemon's
/// fields too, in its order) and read as the method's typed result (what a command's words
/// are made from, so that no command reads an answer by key).
pub struct Answered<T> {
    pub said: Value,
    pub result: T,
}

impl<T: serde::de::DeserializeOwned> Answered<T> {
    pub fn read<M: Method<Result = T>>(said: Value) -> Result<Self, CliError> {
        let result = read_answer::<M>(said.clone())?;
        Ok(Answered { said, result })
    }
}

/// An answer read as its method's result; one that does not read is a failure (exit 1).
pub fn read_answer<M: Method>(said: Value) -> Result<M::Result, CliError> {
    crate::client::decode(M::NAME, said).map_err(failure)
}

/// An optional text as a table shows it: `-` when there is none.
pub fn or_dash(text: Option<&str>) -> &str {
    text.unwrap_or("-")
}

/// An optional time as a table shows it (UTC), `-` when there is none.
pub fn time_of(at: Option<i64>) -> String {
    at.map(super::monitor::format_time)
        .unwrap_or_else(|| "-".into())
}

/// Prints a method's result as pretty JSON.
pub fn print_json(value: &Value) {
    super::monitor::print_json(value);
}

/// A path as the daemon must see it: absolute (the daemon's working directory is not ours).
pub fn absolute(path: &Path) -> Result<String, CliError> {
    let path = std::path::absolute(path)
        .map_err(|error| CliError::failure(format!("{}: {error}", path.display())))?;
    Ok(path.to_string_lossy().into_owned())
}

/// A string field of a JSON object, or `-`.
pub fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    value.get(name).and_then(Value::as_str).unwrap_or("-")
}

/// The short forms of these ids (of `kind`): each the shortest prefix no other id of its kind
/// shares, in the store when it can be read (it can, beside a daemon: readers never disturb
/// it), else among these.
pub fn short_ids_of<'a>(
    context: &Context,
    kind: IdKind,
    ids: impl Iterator<Item = &'a str> + Clone,
) -> ShortIds {
    let ids = || ids.clone();
    let connection = context.reader().ok();
    ShortIds::of(connection.as_ref(), kind, ids())
        .or_else(|_| ShortIds::of(None, kind, ids()))
        .unwrap_or_default()
}

/// The first non-blank line of a text.
pub fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("")
}

/// An event as one line: `#SEQ KIND summary`.
pub fn event_line(event: &Event) -> String {
    let summary = cut(&one_line(&summary(event)), SUMMARY_CHARS);
    if summary.is_empty() {
        format!("#{} {}", event.seq, event.kind)
    } else {
        format!("#{} {} {summary}", event.seq, event.kind)
    }
}

/// What an event says, in a few words.
fn summary(event: &Event) -> String {
    let compact = |value: &Value| match value {
        Value::Null => String::new(),
        Value::Object(map) if map.is_empty() => String::new(),
        other => other.to_string(),
    };
    // A field an old or odd event left empty.
    let known = |text: &str| if text.is_empty() { "?" } else { text }.to_string();
    let short = |sha: &str| known(sha.get(..7).unwrap_or(sha));
    match event.payload() {
        Payload::PromptStarted(started) => first_line(&started.text).to_string(),
        Payload::PromptDone(done) => {
            let answer = first_line(done.answer.as_deref().unwrap_or(""));
            match done.denied.filter(|denied| *denied > 0) {
                Some(denied) => format!("denied: {denied} · {answer}"),
                None => answer.to_string(),
            }
        }
        Payload::ToolDenied(denied) => {
            let mut line = known(&denied.tool);
            if let Some(target) = &denied.target {
                line.push(' ');
                line.push_str(target);
            }
            if let Some(reason) = denied.reason.filter(|reason| !reason.is_empty()) {
                line.push_str(&format!(" ({reason})"));
            }
            line
        }
        // `approval.requested Write /src/x (why: …) · corral approve ID` and
        // `approval.answered approved Write /src/x by person (reason)`.
        Payload::ApprovalRequested(told) | Payload::ApprovalAnswered(told) => {
            let approval = &told.approval;
            let text = |name: &str| approval.get(name).and_then(Value::as_str);
            let mut what = text("tool").unwrap_or("?").to_string();
            if let Some(target) = text("target") {
                what.push(' ');
                what.push_str(target);
            }
            if event.kind == EventKind::ApprovalRequested {
                let why = text("reason")
                    .map(|why| format!(" (why: {why})"))
                    .unwrap_or_default();
                format!(
                    "{what}{why} · corral approve|deny {}",
                    text("id").unwrap_or("?")
                )
            } else {
                let mut line = format!(
                    "{} {what} by {}",
                    text("status").unwrap_or("?"),
                    text("answered_by").unwrap_or("?")
                );
                if let Some(reason) = text("answer_reason") {
                    line.push_str(&format!(" ({reason})"));
                }
                line
            }
        }
        Payload::PromptFailed(ended) | Payload::PromptCancelled(ended) => {
            ended.error.unwrap_or_default()
        }
        Payload::PromptRequeued(requeued) => requeued.reason,
        Payload::RunStarted(started) => format!("pid {} ({})", started.pid, known(&started.engine)),
        Payload::RunExited(exited) => {
            if let Some(by) = exited.ended_by {
                format!("ended: {by}")
            } else {
                let (code, signal) = (exited.exit_code.flatten(), exited.signal.flatten());
                let status = match (code, signal, exited.status) {
                    (_, Some(signal), _) => format!("signal {signal}"),
                    (Some(code), None, _) => format!("exit {code}"),
                    // An app-server turn has no process of its own: its status says.
                    (None, None, Some(status)) => format!("turn {status}"),
                    (None, None, None) => "exit ?".into(),
                };
                format!("{}, {status}", exited.verdict.as_deref().unwrap_or("?"))
            }
        }
        Payload::RetryScheduled(retry) => {
            let delay = retry.delay_ms as f64 / 1000.0;
            let mut line = format!(
                "{}: attempt {} in {delay}s",
                known(&retry.reason),
                retry.next_attempt,
            );
            if !retry.message.is_empty() {
                line.push_str(" (");
                line.push_str(&retry.message);
                line.push(')');
            }
            line
        }
        Payload::SlotWaiting(waiting) => {
            let project = known(&waiting.project);
            let mut line = format!("for a {} slot (project {project})", known(&waiting.engine));
            // What holds it, in the words of the status line (a holder this build cannot
            // read is left out).
            if let Ok(blocker) = serde_json::from_value(waiting.held_by) {
                line.push_str(": ");
                line.push_str(&super::progress::why(&blocker, &project));
            }
            line
        }
        Payload::SlotGranted(granted) => format!("after {} ms", granted.waited_ms),
        Payload::TitleGenerated(titled) => titled.title,
        Payload::ThreadStarted(thread) => thread.thread_id,
        Payload::Message(message) | Payload::MessageDelta(message) => message.text,
        Payload::Tool(tool) => format!("{} {}", known(&tool.name), compact(&tool.detail)),
        Payload::Notice(notice) => notice.message.unwrap_or_default(),
        Payload::TurnFailed(failed) => failed.message,
        Payload::Raw(raw) => raw.line,
        Payload::Usage(usage) => compact(&usage.usage),
        Payload::WorktreeCreated(created) => format!(
            "{} on {} from {}",
            known(&created.path),
            known(&created.branch),
            short(&created.base_commit)
        ),
        Payload::WorktreeRemoved(removed) => format!(
            "{} (branch {} kept)",
            known(&removed.path),
            known(&removed.kept_branch)
        ),
        Payload::SetupStarted(started) => started.command,
        Payload::SetupOutput(output) => output.line,
        Payload::SetupExited(exited) => match (exited.code, exited.signal) {
            (_, Some(signal)) => format!("signal {signal}"),
            (Some(code), _) => format!("exit {code}"),
            _ => exited.error.or(exited.ended_by).unwrap_or_default(),
        },
        Payload::SessionMerged(merged) => format!(
            "into {} (commit {}{})",
            known(&merged.into),
            short(&merged.commit),
            if merged.squash { ", squashed" } else { "" }
        ),
        _ => compact(&event.payload),
    }
}

/// What the daemon's `session.show` says about a session, resolved from the user's selector:
/// its id and its last event number (where a fresh subscription starts).
pub struct SessionRef {
    pub id: String,
    pub last_event_seq: i64,
}

impl SessionRef {
    /// From a `session.show` answer.
    fn from_shown(shown: Value) -> Result<SessionRef, CliError> {
        let shown = read_answer::<SessionShow>(shown)?;
        let session = shown.session.session;
        Ok(SessionRef {
            id: session.id,
            last_event_seq: session.last_event_seq,
        })
    }
}

/// Resolves a session selector through the daemon.
pub async fn session(client: &mut Client, selector: &str) -> Result<SessionRef, CliError> {
    let shown = ask_json::<SessionShow>(client, &SessionSelector::new(selector)).await?;
    SessionRef::from_shown(shown)
}

/// A session's events after a sequence number, in order, each once: stored ones first, then
/// live ones. It reads on a connection of its own (so that the command's calls on its main
/// connection never interleave with the stream), and when the daemon says the reader lagged
/// it subscribes again from where it stopped.
pub struct EventStream {
    events: mpsc::Receiver<Result<Event, CliError>>,
    task: tokio::task::JoinHandle<()>,
}

impl EventStream {
    /// Subscribes to session `session_id` (an id, not a selector) after `after`.
    pub async fn open(
        context: &Context,
        session_id: &str,
        after: i64,
    ) -> Result<EventStream, CliError> {
        let mut client = Client::connect(&context.home, Some(&context.invocation.id))
            .await
            .map_err(failure)?;
        let subscription = subscribe(&mut client, session_id, after).await?;
        let (sender, events) = mpsc::channel(EVENT_BUFFER);
        let task = tokio::task::spawn_local(pump(
            client,
            session_id.to_string(),
            subscription,
            after,
            sender,
        ));
        Ok(EventStream { events, task })
    }

    /// The next event; an error when the connection ended or broke. Cancel-safe.
    pub async fn next(&mut self) -> Result<Event, CliError> {
        match self.events.recv().await {
            Some(item) => item,
            None => Err(CliError::failure("the daemon closed the connection")),
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn subscribe(client: &mut Client, session_id: &str, after: i64) -> Result<u64, CliError> {
    let params = SubscribeParams {
        session: Some(session_id.to_string()),
        after,
    };
    Ok(ask::<EventsSubscribe>(client, &params).await?.subscription)
}

/// Reads notifications and forwards the subscription's events, re-subscribing after a lag.
async fn pump(
    mut client: Client,
    session_id: String,
    mut subscription: u64,
    after: i64,
    sender: mpsc::Sender<Result<Event, CliError>>,
) {
    let mut last = after;
    loop {
        let notification = match client.next_notification().await {
            Ok(Some(notification)) => notification,
            Ok(None) => {
                let _ = sender
                    .send(Err(CliError::failure("the daemon closed the connection")))
                    .await;
                return;
            }
            Err(error) => {
                let _ = sender.send(Err(failure(error))).await;
                return;
            }
        };
        let params = &notification.params;
        // Notices of an earlier subscription (ended by a lag) are left out.
        if params.get("subscription").and_then(Value::as_u64) != Some(subscription) {
            continue;
        }
        match notification.method.as_str() {
            "events.event" => {
                let Ok(event) = serde_json::from_value::<Event>(params["event"].clone()) else {
                    continue;
                };
                if event.seq <= last {
                    continue;
                }
                last = event.seq;
                if sender.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            "events.lagged" => {
                // The daemon ended that subscription; the next starts where this one stopped.
                let resume = params
                    .get("resume_after")
                    .and_then(Value::as_i64)
                    .unwrap_or(last)
                    .min(last);
                match subscribe(&mut client, &session_id, resume).await {
                    Ok(id) => subscription = id,
                    Err(error) => {
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                }
            }
            _ => {}
        }
    }
}

/// SIGINT and SIGTERM, for the commands that hold a driver claim and release it before they
/// go. Commands that hold nothing are made interruptible by the dispatcher instead.
pub struct Interrupts {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    pub fn watch() -> Interrupts {
        use tokio::signal::unix::{signal, SignalKind};
        Interrupts {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves with the signal's number when one arrives. Cancel-safe.
    pub async fn recv(&mut self) -> i32 {
        async fn on(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = on(&mut self.interrupt) => libc::SIGINT,
            _ = on(&mut self.terminate) => libc::SIGTERM,
        }
    }
}

/// Releases a driver claim; a failure is only said, never the command's result.
pub async fn release(client: &mut Client, session_id: &str, generation: i64) {
    let params = ReleaseParams {
        session: session_id.to_string(),
        generation,
    };
    if let Err(error) = client.call::<DriverRelease>(&params).await {
        say!(
            "corral: could not release the driver claim: {}",
            one_line(&error.to_string())
        );
    }
}

/// Whether an error is the daemon's refusal of a superseded driver.
pub fn is_superseded(error: &ClientError) -> bool {
    rpc_error(error).is_some_and(|error| error.code == code::SUPERSEDED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(kind: EventKind, payload: Value) -> String {
        event_line(&Event {
            session_id: "s".into(),
            seq: 4,
            feed_seq: 0,
            prompt_id: None,
            run_id: None,
            at: 0,
            kind,
            payload,
        })
    }

    /// A worktree's life reads as words in `watch`, not as its JSON.
    #[test]
    fn worktree_and_setup_events_read_as_words() {
        let sha = "0123456789abcdef";
        assert_eq!(
            line(
                EventKind::WorktreeCreated,
                json!({"path": "/w/x", "branch": "corral/x", "base_commit": sha})
            ),
            "#4 worktree.created /w/x on corral/x from 0123456"
        );
        assert_eq!(
            line(
                EventKind::WorktreeRemoved,
                json!({"path": "/w/x", "kept_branch": "corral/x"})
            ),
            "#4 worktree.removed /w/x (branch corral/x kept)"
        );
        assert_eq!(
            line(
                EventKind::SetupStarted,
                json!({"command": "npm ci", "cwd": "/w/x"})
            ),
            "#4 setup.started npm ci"
        );
        assert_eq!(
            line(
                EventKind::SetupOutput,
                json!({"line": "added 3 packages", "stream": "stdout"})
            ),
            "#4 setup.output added 3 packages"
        );
        assert_eq!(
            line(EventKind::SetupExited, json!({"code": 1, "signal": null})),
            "#4 setup.exited exit 1"
        );
        assert_eq!(
            line(
                EventKind::SetupExited,
                json!({"code": null, "signal": "SIGKILL"})
            ),
            "#4 setup.exited signal SIGKILL"
        );
        assert_eq!(
            line(
                EventKind::SessionMerged,
                json!({"into": "main", "commit": sha, "squash": true})
            ),
            "#4 session.merged into main (commit 0123456, squashed)"
        );
    }
}
