//! `corral watch SESSION [--after N] [--follow]`: a session's stored events after N, one line
//! each (`#SEQ KIND summary`); with `--follow` it keeps printing new ones as they happen.
//!
//! The events come from `events.subscribe`, which replays what is stored and then streams;
//! when the daemon says this reader lagged, the stream subscribes again from where it stopped,
//! so no event is missed or printed twice. Watching never claims the session's driver.
//! `--json` prints each event as one JSON object per line.

use std::io::Write;

use super::remote::{self, EventStream};
use super::{CliError, Context, Exit};

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
    let mut client = remote::connect(context).await?;
    let session = remote::session(&mut client, &args.session).await?;
    drop(client);
    // Without --follow: what is stored now, and no more.
    let end = session.last_event_seq;
    if !args.follow && args.after >= end {
        return Ok(Exit::success());
    }
    let mut events = EventStream::open(context, &session.id, args.after).await?;
    loop {
        let event = events.next().await?;
        let line = if args.json {
            serde_json::to_string(&event).expect("events serialize")
        } else {
            remote::event_line(&event)
        };
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{line}")
            .and_then(|_| stdout.flush())
            .is_err()
        {
            // The reader went away (a closed pipe): nothing more to do.
            return Ok(Exit::success());
        }
        if !args.follow && event.seq >= end {
            return Ok(Exit::success());
        }
    }
}
