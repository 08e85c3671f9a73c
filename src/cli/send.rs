//! `corral send SESSION PROMPT… [--image F]… [--wait] [--read-only] [--take-over]
//! [--after PROMPT]… [--after-any] [--at TIME | --in DURATION]`: queues a prompt on a session. A PROMPT of `-` alone reads the prompt from stdin, byte for byte (for
//! text that is long — one argv string holds at most 128 KiB — or that a shell would mangle).
//!
//! Without `--wait` it prints the prompt's id and whether it runs now or waits its turn.
//! With `--wait` this exec becomes the session's driver first (`driver.claim`, refused while
//! another live exec drives unless `--take-over`), sends with the claim's generation (so a
//! driver that was taken over in between is refused), follows the session's events until the
//! prompt ends, prints the answer, and releases the claim: exit 0 for `done`, 1 for `failed`
//! or `cancelled` with the error on stderr.

use std::ffi::OsString;
use std::path::PathBuf;

use serde_json::Value;

use super::invocation::Invocation;
use super::progress::StatusLine;
use super::remote::{self, absolute, or_dash, print_json, Answered, EventStream, Interrupts};
use super::{CliError, Context, Exit};
use crate::client::{Client, ClientError};
use crate::events::EventKind;
use crate::protocol::prompts::Prompt;
use crate::protocol::{
    ApprovalsAnswer, ClaimParams, DriverClaim, PromptSelector, PromptSend, PromptWait, SendParams,
};
use crate::store::prompts::PromptStatus;

/// What a send carries, read once: the prompt's text (its words joined by spaces, or with `-`
/// alone, all of stdin as it is) and its images as absolute paths. A text the protocol cannot
/// carry in one line is refused here, with its size.
#[derive(Debug, Clone)]
pub struct Prepared {
    text: String,
    images: Vec<String>,
}

fn prepare(args: &SendArgs) -> Result<Prepared, CliError> {
    let text = match args.prompt.as_slice() {
        [dash] if dash == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|error| {
                CliError::failure(format!("reading the prompt from stdin: {error}"))
            })?;
            text
        }
        words => words.join(" "),
    };
    crate::protocol::check_prompt_size(&text).map_err(CliError::failure)?;
    let mut images = Vec::with_capacity(args.images.len());
    for image in &args.images {
        images.push(absolute(image)?);
    }
    Ok(Prepared { text, images })
}

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The prompt; its words are joined by spaces (use `--` before words starting with `-`;
    /// `-` alone reads it from stdin).
    #[arg(required = true, value_name = "PROMPT")]
    pub prompt: Vec<String>,
    /// An image to attach (repeatable).
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// Wait for the prompt to end and print its answer (this exec drives the session).
    #[arg(long)]
    pub wait: bool,
    /// The engine may read but not write (the same as --policy read-only).
    #[arg(long)]
    pub read_only: bool,
    /// This prompt's policy over the session's: read-only, workspace-write, ask, full (only
    /// where the project grants it).
    #[arg(long, value_name = "POLICY", value_parser = super::project::parse_policy)]
    pub policy: Option<crate::engine::Policy>,
    /// Run after this prompt (its id or a unique prefix, in any session; repeatable, or
    /// several separated by commas): it waits queued until they have ended, and fails if
    /// one of them fails or is cancelled.
    #[arg(long, value_name = "PROMPT", value_delimiter = ',')]
    pub after: Vec<String>,
    /// With --after: run however they ended.
    #[arg(long, requires = "after")]
    pub after_any: bool,
    /// Start it no sooner than TIME: 2026-12-08T09:00:00Z, a local 2026-12-08 09:00, or 09:00
    /// (its next coming). It waits queued, with its due time, until then.
    #[arg(long, value_name = "TIME", value_parser = due_at, conflicts_with = "due_in")]
    pub at: Option<i64>,
    /// Start it no sooner than DURATION from now (90s, 5m, 2h).
    #[arg(long = "in", value_name = "DURATION", value_parser = due_in)]
    pub due_in: Option<i64>,
    /// With --wait: take the session over from a driver that is still live.
    #[arg(long, requires = "wait")]
    pub take_over: bool,
    /// Print the prompt as JSON (with --wait: the ended prompt).
    #[arg(long)]
    pub json: bool,
    /// What [`quick`] already read (stdin is read once), for the ordinary path it falls to.
    #[arg(skip)]
    pub prepared: Option<Result<Prepared, CliError>>,
}

/// How [`quick`] ended.
pub enum Quick {
    /// Sent, and the exec recorded by the daemon: exit with this code.
    Done(i32),
    /// Not sent: no daemon answers (or it cannot be asked this way); the ordinary path runs.
    Ordinary(Invocation),
    /// Done with this exit, but the daemon did not record the exec: the process writes it.
    Record(Invocation, Exit),
}

/// A plain send (no `--wait`) through a daemon that records its exec (`prompt.send`'s
/// `exec`): this process opens no store at all, and `initialize` and `prompt.send` go in one
/// write. The store's header is still checked first (plain file I/O, `store::inspect`), so a
/// refused store stops it as before. When no daemon answers, the ordinary path runs (store,
/// auto-start), with what was read here.
pub async fn quick(
    home: Option<&std::path::Path>,
    argv: &[OsString],
    args: &mut SendArgs,
) -> Quick {
    let invocation = Invocation::capture(argv.to_vec());
    let prepared = prepare(args);
    let ready = match &prepared {
        Ok(prepared) => ready_home(home).map(|home| (home, prepared.clone())),
        Err(_) => None,
    };
    args.prepared = Some(prepared);
    let Some((home, prepared)) = ready else {
        return Quick::Ordinary(invocation);
    };
    let record = invocation.record();
    if record.check().is_err() {
        return Quick::Ordinary(invocation);
    }
    let params = SendParams {
        exec: Some(record),
        ..args.params(&args.session, prepared, None)
    };
    let exec_id = Some(invocation.id.as_str());
    let (client, answer) =
        match Client::connect_and_call::<PromptSend>(&home, exec_id, &params).await {
            Ok(answered) => answered,
            // Nothing was sent: the ordinary path connects (or starts a daemon) and says why.
            Err(ClientError::NoDaemon(_) | ClientError::Spawn(_) | ClientError::TooLong { .. }) => {
                return Quick::Ordinary(invocation)
            }
            Err(error) => {
                say!(
                    "corral: {}",
                    remote::failure(error).message.unwrap_or_default()
                );
                return Quick::Record(invocation, Exit::code(1));
            }
        };
    let recorded = client.records_execs();
    match answer {
        Ok(prompt) => {
            let code = match print_sent(args.json, &prompt) {
                Ok(()) => 0,
                Err(error) => {
                    say!("corral: {}", error.message.unwrap_or_default());
                    1
                }
            };
            match recorded {
                true => Quick::Done(code),
                false => Quick::Record(invocation, Exit::code(code)),
            }
        }
        // Refused unrecorded: the ordinary path waits for that daemon's end, then sends.
        Err(_) if client.daemon["shutting_down"] == true => Quick::Ordinary(invocation),
        Err(error) => {
            let by_daemon = recorded
                && remote::rpc_error(&error)
                    .and_then(|error| error.data.as_ref())
                    .and_then(|data| data.get("exec_recorded"))
                    .and_then(Value::as_bool)
                    == Some(true);
            say!(
                "corral: {}",
                remote::failure(error).message.unwrap_or_default()
            );
            match by_daemon {
                true => Quick::Done(1),
                false => Quick::Record(invocation, Exit::code(1)),
            }
        }
    }
}

/// The home named, when it is a directory whose store's header is plausibly ours; anything
/// else is the ordinary path's to handle and say.
fn ready_home(home: Option<&std::path::Path>) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let (home, _) = crate::home::locate(home)?;
    // A private directory of the user's; else the ordinary path tightens or refuses it.
    let private = |meta: std::fs::Metadata| {
        meta.is_dir() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o077 == 0
    };
    if !std::fs::metadata(&home).is_ok_and(private) {
        return None;
    }
    match crate::store::location::locate(&home).ok()? {
        crate::store::location::Location::Sqlite(path) => {
            let compatibility = crate::store::inspect(&path).ok()?;
            (compatibility == crate::store::Compatibility::Plausible).then_some(home)
        }
        // Checked by the daemon's ledger when it opened it.
        crate::store::location::Location::Postgres(_) => Some(home),
    }
}

/// What a plain send prints: the prompt's id and status, or with `--json` the prompt. A
/// reader that closed the pipe had what it wanted.
fn print_sent(json: bool, prompt: &Value) -> Result<(), CliError> {
    use std::io::Write;
    let text = if json {
        serde_json::to_string_pretty(prompt).expect("values serialize")
    } else {
        let prompt = remote::read_answer::<PromptSend>(prompt.clone())?;
        match prompt
            .due_at
            .filter(|_| prompt.status == PromptStatus::Queued)
        {
            Some(at) => format!(
                "{} {} (due {})",
                prompt.id,
                prompt.status.as_str(),
                crate::clock::utc_time(at)
            ),
            None => format!("{} {}", prompt.id, prompt.status.as_str()),
        }
    };
    match writeln!(std::io::stdout(), "{text}") {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(CliError::failure(format!("writing the answer: {error}"))),
        Ok(()) => Ok(()),
    }
}

impl SendArgs {
    /// What every send asks of the daemon (`prompt.send`): the one place its params are made
    /// from the arguments, whichever way the send goes (`quick`, plain, `--wait`).
    fn params(&self, session: &str, prepared: Prepared, generation: Option<i64>) -> SendParams {
        SendParams {
            session: session.to_string(),
            text: prepared.text,
            images: prepared.images,
            read_only: self.read_only,
            policy: self.policy,
            generation,
            after: self.after.clone(),
            after_any: self.after_any,
            due_at: self.at.or(self.due_in),
            exec: None,
        }
    }
}

/// `--at`'s time (ms), read now; a time that has passed is a usage error.
fn due_at(text: &str) -> Result<i64, String> {
    let now = crate::clock::now_ms();
    let at = crate::clock::parse_at(text, now)?;
    match at > now {
        true => Ok(at),
        false => Err(format!("{} is in the past", crate::clock::utc_time(at))),
    }
}

/// `--in`'s time (ms): now and the duration.
fn due_in(text: &str) -> Result<i64, String> {
    let wait = crate::clock::parse_duration(text)?;
    Ok(crate::clock::now_ms().saturating_add(wait.as_millis().min(i64::MAX as u128) as i64))
}

pub async fn execute(context: &Context, args: &SendArgs) -> Result<Exit, CliError> {
    let prepared = match &args.prepared {
        Some(prepared) => prepared.clone()?,
        None => prepare(args)?,
    };
    let mut interrupts = Interrupts::watch();
    let mut client = tokio::select! {
        client = remote::connect(context) => client?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    if !args.wait {
        let params = args.params(&args.session, prepared, None);
        let prompt = tokio::select! {
            prompt = remote::ask_json::<PromptSend>(&mut client, &params) => prompt?,
            signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
        };
        print_sent(args.json, &prompt)?;
        return Ok(Exit::success());
    }

    let (session, generation) = tokio::select! {
        claimed = claim(&mut client, &args.session, args.take_over) => claimed?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    let params = args.params(&session.id, prepared, Some(generation));
    let outcome = tokio::select! {
        outcome = send_and_follow(context, &mut client, &session, params) => outcome,
        signal = interrupts.recv() => {
            // The call or the stream was dropped mid-way: release on a fresh connection.
            if let Ok(mut fresh) = Client::connect(&context.home, Some(&context.invocation.id)).await {
                remote::release(&mut fresh, &session.id, generation).await;
            }
            return Ok(Exit::interrupted(signal));
        }
    };
    remote::release(&mut client, &session.id, generation).await;
    let ended = outcome?;
    if args.json {
        print_json(&ended.said);
    }
    let prompt = ended.result;
    match prompt.status {
        PromptStatus::Done => {
            if !args.json {
                println!("{}", or_dash(prompt.answer.as_deref()).trim_end());
                // Done, but the engine refused some of what the agent tried: said apart from
                // the answer, so that a green result is never read as the whole job.
                if prompt.denied > 0 {
                    let denied = prompt.denied;
                    say!(
                        "corral: denied: {denied} — the engine refused {} the agent tried \
                         (`corral watch {}` lists them; `corral project set` widens what it may do)",
                        if denied == 1 { "one tool use" } else { "tool uses" },
                        session.id
                    );
                }
            }
            Ok(Exit::success())
        }
        status => {
            let status = status.as_str();
            let error = prompt
                .error
                .as_deref()
                .map(remote::one_line)
                .unwrap_or_else(|| status.to_string());
            Err(CliError::failure(format!(
                "prompt {} {status}: {error}",
                prompt.id
            )))
        }
    }
}

/// Resolves the session and claims its driver for this exec: the session and the claim's
/// generation.
pub async fn claim(
    client: &mut Client,
    selector: &str,
    take_over: bool,
) -> Result<(remote::SessionRef, i64), CliError> {
    let session = remote::session(client, selector).await?;
    let params = ClaimParams {
        session: session.id.clone(),
        take_over,
    };
    let claim = remote::ask::<DriverClaim>(client, &params).await?;
    Ok((session, claim.generation))
}

/// Subscribes from the session's current end, sends, and follows the events until the prompt
/// ends; returns the ended prompt. Meanwhile, on a terminal, a status line on stderr says what
/// the prompt waits for (a slot, a retry, its app-server), see [`super::progress`].
async fn send_and_follow(
    context: &Context,
    client: &mut Client,
    session: &remote::SessionRef,
    params: SendParams,
) -> Result<Answered<Prompt>, CliError> {
    // Listening starts before the prompt exists, from the session's last event: nothing of
    // this prompt can be missed.
    let mut events = EventStream::open(context, &session.id, session.last_event_seq).await?;
    let prompt_id = remote::ask::<PromptSend>(client, &params).await?.id;
    // Dropped on every way out (an error, an interrupt), which clears it.
    let mut status = StatusLine::stderr();
    // What the engine asks a person is asked here too (on a terminal).
    let mut asker = super::approvals::TerminalAsker::new();
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = status.tick() => continue,
            line = asker.line(), if asker.asks() => {
                if let Some(answer) = asker.answer(&line) {
                    // A refusal (answered elsewhere first, say) is said; the prompt goes on.
                    if let Err(error) = remote::ask::<ApprovalsAnswer>(client, &answer).await {
                        say!("corral: {}", error.message.unwrap_or_default());
                    }
                }
                continue;
            }
        };
        let event = event.map_err(|error| {
            let reason = error.message.unwrap_or_default();
            CliError::failure(format!(
                "{reason} before prompt {prompt_id} ended (see `corral history {}`)",
                session.id
            ))
        })?;
        if event.prompt_id.as_deref() != Some(prompt_id.as_str()) {
            continue;
        }
        status.observe(&event);
        match &event.kind {
            kind if kind.ends_prompt() => break,
            EventKind::ApprovalRequested | EventKind::ApprovalAnswered => {
                status.clear();
                asker.take(&event);
            }
            EventKind::PromptRequeued => {
                return Err(CliError::failure(format!(
                    "the daemon is stopping; prompt {prompt_id} is queued again and runs when a \
                     daemon starts (see `corral history {}`)",
                    session.id
                )))
            }
            _ => {}
        }
    }
    status.clear();
    // The prompt's end is committed before its event: this answers at once.
    let params = PromptSelector { prompt: prompt_id };
    remote::ask_answered::<PromptWait>(client, &params).await
}
