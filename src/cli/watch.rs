//! `corral watch SESSION [--after N] [--follow]`: a session's stored events after N, one line
//! each (`#SEQ KIND summary`); with `--follow` it keeps printing new ones as they happen.
//!
//! The events come from `events.subscribe`, which replays what is stored and then streams;
//! when the daemon says this reader lagged, the stream subscribes again from where it stopped,
//! so no event is missed or printed twice. Watching never claims the session's driver.
//! `--json` prints each event as one JSON object per line.
//!
//! With no daemon running, the stored events are read from the store directly; nothing new
//! can happen then, so `--follow` says no daemon runs and exits [`remote::NO_DAEMON`] after
//! them. Watching never starts a daemon.

use std::io::Write;

use super::local::LocalStore;
use super::remote::{self, EventStream, Source};
use super::{CliError, Context, Exit};
use crate::store::events::Event;

/// How many stored events one read of the store takes.
const PAGE: usize = 512;

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// Only events after this sequence number.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub after: i64,
    /// Keep printing new events until interrupted.
    #[arg(long)]
    pub follow: bool,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &WatchArgs) -> Result<Exit, CliError> {
    if args.after < 0 {
        return Err(CliError::usage(
            "--after takes a sequence number of 0 or more",
        ));
    }
    let mut source = remote::inspect(context).await?;
    let session = source.session(&args.session).await?;
    // Without --follow: what is stored now, and no more.
    let end = session.last_event_seq;
    if let Source::Store(store) = &source {
        return stored(context, store, &session.id, args, end);
    }
    // The stream reads on a connection of its own.
    drop(source);
    if !args.follow && args.after >= end {
        return Ok(Exit::success());
    }
    let mut events = EventStream::open(context, &session.id, args.after).await?;
    loop {
        let event = events.next().await?;
        if !print(&event, args.json) {
            // The reader went away (a closed pipe): nothing more to do.
            return Ok(Exit::success());
        }
        if !args.follow && event.seq >= end {
            return Ok(Exit::success());
        }
    }
}

/// With no daemon: the stored events after `--after`, up to `end`, read from the store.
fn stored(
    context: &Context,
    store: &LocalStore,
    session_id: &str,
    args: &WatchArgs,
    end: i64,
) -> Result<Exit, CliError> {
    let mut after = args.after;
    while after < end {
        let page = store.events_after(session_id, after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for event in page.iter().filter(|event| event.seq <= end) {
            if !print(event, args.json) {
                return Ok(Exit::success());
            }
        }
    }
    if args.follow {
        return Err(CliError {
            code: remote::NO_DAEMON,
            message: Some(format!(
                "{}; nothing new can happen until one does",
                remote::no_daemon_line(context)
            )),
        });
    }
    Ok(Exit::success())
}

/// Prints one event; false when stdout is closed.
fn print(event: &Event, json: bool) -> bool {
    let line = if json {
        serde_json::to_string(event).expect("events serialize")
    } else {
        remote::event_line(event)
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|_| stdout.flush())
        .is_ok()
}
