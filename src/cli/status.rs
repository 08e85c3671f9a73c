//! `corral status`: the daemon (pid, version, home), how many sessions it knows, how many
//! work now, its slots (limits, what runs, how many wait, and the first few waiters with what
//! they wait for: `--waiters N`), the app-server children (their state
//! as it truly is, restarts kept across daemon restarts) and the background processes that
//! projects with `keep_background` kept after their runs. With no daemon running it says
//! so in one line (`--json`: `{"daemon": null, "home", "sessions"}` from the store) and exits
//! [`remote::NO_DAEMON`]; it never starts one.

use super::remote::{self, print_json, Source};
use super::{CliError, Context, Exit};
use crate::protocol::slots::{Blocker, SlotOwner, SlotSummary, WaitingEntry};
use crate::protocol::status::{
    AppServerState, DaemonStatus, HttpServing, ServerStatus, StatusResult, StoreStatus,
};
use crate::protocol::{Status, StatusParams};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print the daemon's status as JSON.
    #[arg(long)]
    pub json: bool,
    /// How many slot waiters to list, the first served first (all are counted).
    #[arg(long, value_name = "N", default_value_t = crate::daemon::methods::STATUS_WAITERS)]
    pub waiters: usize,
}

pub async fn execute(context: &Context, args: &StatusArgs) -> Result<Exit, CliError> {
    let status = match remote::inspect(context).await? {
        Source::Daemon(mut client) => {
            let params = StatusParams {
                waiters: Some(args.waiters),
            };
            remote::ask_json::<Status>(&mut client, &params).await?
        }
        Source::Store(store) => {
            if args.json {
                print_json(&serde_json::to_value(store.status()?).expect("status is JSON"));
            } else {
                println!("{}", remote::no_daemon_line(context));
            }
            return Ok(Exit::code(remote::NO_DAEMON));
        }
    };
    if args.json {
        print_json(&status);
        return Ok(Exit::success());
    }
    // `--json` printed what the daemon said; the words below read what it means.
    let status: StatusResult = serde_json::from_value(status)
        .map_err(|error| CliError::failure(format!("the daemon's status reads wrong: {error}")))?;
    if let Some(daemon) = &status.daemon {
        let stopping = if daemon.shutting_down {
            " (shutting down)"
        } else {
            ""
        };
        println!(
            "daemon:   pid {}, corral {}{stopping}",
            daemon.pid, daemon.version
        );
        println!("home:     {}", daemon.home);
    }
    if let Some(store) = status.store.as_ref().map(store_line) {
        println!("store:    {store}");
    }
    for line in daemon_lines(&status.daemons) {
        println!("{line}");
    }
    println!("http:     {}", http_line(status.http.as_ref()));
    println!("sessions: {}", status.sessions);
    println!("working:  {}", status.working);
    match &status.slots {
        Some(slots) => {
            println!("slots:    {}", slots_line(slots));
            for waiter in &slots.waiting {
                println!("waiting:  {}", waiter_line(waiter));
            }
            if slots.waiting_count > slots.waiting.len() {
                println!(
                    "          … and {} more waiting (status --json --waiters N lists more)",
                    slots.waiting_count - slots.waiting.len()
                );
            }
        }
        None => println!("slots:    unknown"),
    }
    for channel in &status.notify {
        let fares = match (&channel.error, channel.failing) {
            (Some(error), failing) if failing > 0 => {
                format!("failing ({failing} in a row): {error}")
            }
            _ => "ok".to_string(),
        };
        let dropped = match channel.dropped {
            0 => String::new(),
            n => format!(", {n} dropped (queue full)"),
        };
        println!(
            "notify:   {} {fares}, {} sent{dropped}",
            channel.channel, channel.sent
        );
    }
    for pause in &status.pauses {
        println!("paused:   {} (corral resume …)", pause.describe());
    }
    for server in &status.app_servers {
        println!("app-server: {}", app_server(server));
    }
    for run in &status.taken_over {
        let shim = run
            .shim_pid
            .map_or(String::new(), |pid| format!(", shim pid {pid}"));
        println!(
            "taken over: run {} (session {}{shim}), left running by the daemon before",
            short(&run.run_id),
            short(&run.session_id),
        );
    }
    for kept in &status.kept {
        println!(
            "kept:     pid {} (run {}, session {}): {}",
            kept.pid,
            short(&kept.run_id),
            short(&kept.session_id),
            kept.command
        );
    }
    Ok(Exit::success())
}

/// An id as tables show it: its first 13 characters (the time part of a UUIDv7).
fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

/// `project 0193…: running, pid 123, generation 4, 2 restarts in the last minute`.
fn app_server(server: &AppServerState) -> String {
    let status = match &server.status {
        ServerStatus::Stopped => "stopped".to_string(),
        ServerStatus::Starting => "starting".to_string(),
        ServerStatus::Running => "running".to_string(),
        ServerStatus::Failed { reason } => format!("failed ({reason})"),
    };
    let pid = match server.pid {
        Some(pid) => format!(", pid {pid}"),
        None => String::new(),
    };
    format!(
        "project {}: {status}{pid}, generation {}, {} restarts in the last minute",
        short(&server.project_id),
        server.generation,
        server.restarts.len()
    )
}

/// `fake 1/3, codex 0/3, others 3 each; total 4; 2 waiting`.
fn slots_line(slots: &SlotSummary) -> String {
    let limits = &slots.limits;
    let mut engines: Vec<&String> = slots
        .running_per_engine
        .keys()
        .chain(limits.per_engine.keys())
        .collect();
    engines.sort();
    engines.dedup();
    let mut parts: Vec<String> = engines
        .iter()
        .map(|engine| {
            let limit = limits
                .per_engine
                .get(*engine)
                .copied()
                .unwrap_or(limits.default_per_engine);
            let busy = slots.running_per_engine.get(*engine).copied().unwrap_or(0);
            format!("{engine} {busy}/{limit}")
        })
        .collect();
    parts.push(format!("others {} each", limits.default_per_engine));
    let mut line = parts.join(", ");
    match limits.total {
        Some(total) => line.push_str(&format!("; total {total}")),
        None => line.push_str("; no total limit"),
    }
    line.push_str(&format!("; {} waiting", slots.waiting_count));
    line
}

/// `session 0193… "Fix the client" (fake, project /src/api): project lock held by session
/// 0192… "Refactor"`.
fn waiter_line(waiter: &WaitingEntry) -> String {
    let entry = &waiter.entry;
    let who = match &entry.owner {
        Some(SlotOwner {
            session,
            label: Some(label),
        }) => format!("session {} \"{label}\"", short(session)),
        Some(SlotOwner { session, .. }) => format!("session {}", short(session)),
        None => "session -".to_string(),
    };
    // A session in a worktree of its own locks `worktree:<its id>`, not its project's tree.
    let project = &entry.request.project;
    let tree = match project.strip_prefix("worktree:") {
        Some(session) => format!("worktree of session {}", short(session)),
        None => format!("project {project}"),
    };
    format!(
        "{who} ({}, {tree}): {}",
        entry.request.engine,
        blocker(waiter.blocker.as_ref())
    )
}

/// What a waiter waits for, in words.
fn blocker(blocker: Option<&Blocker>) -> String {
    let held = |holder: &Option<SlotOwner>| match holder {
        Some(holder) => format!(" held by session {}", short(&holder.session)),
        None => String::new(),
    };
    match blocker {
        Some(Blocker::ProjectLock { holder, .. }) => format!("project lock{}", held(holder)),
        Some(Blocker::GroupLock { group, holder }) => {
            format!("group {group} lock{}", held(holder))
        }
        Some(Blocker::EngineLimit {
            engine,
            limit,
            running,
            ..
        }) => format!("{engine} limit, {running}/{limit} running"),
        Some(Blocker::TotalLimit { limit, running, .. }) => {
            format!("total limit, {running}/{limit} running")
        }
        Some(Blocker::Queue { holder, .. }) => format!("an earlier waiter{}", held(holder)),
        None => "granted just now".into(),
    }
}

/// The store's line: what and where, and when writes wait for a server gone away or for a
/// store that refuses them.
fn store_line(store: &StoreStatus) -> String {
    let mut line = format!("{} {}", store.kind, store.at);
    if !store.reachable {
        line.push_str(" (cannot be reached: writes wait for it)");
    } else if let Some(why) = &store.refusing_writes {
        line.push_str(&format!(
            " (refuses writes for now, {why}: writes wait for it)"
        ));
    }
    if let Some(checked) = &store.checked {
        line.push_str(&format!(", {checked} at the daemon's start"));
    }
    line
}

/// On a shared store, a line per daemon: where it runs, its lease, what it serves.
fn daemon_lines(daemons: &[DaemonStatus]) -> Vec<String> {
    daemons
        .iter()
        .map(|daemon| {
            let lease = match (daemon.live, daemon.lease_left_ms) {
                (true, Some(left)) => format!("lease {:.1} s left", left as f64 / 1000.0),
                (_, None) => "stopped".to_string(),
                _ => "lease run out".to_string(),
            };
            format!(
                "daemon{} {} pid {} ({}), {lease}, {} running, serves: {}",
                if daemon.this { "*" } else { " " },
                daemon.host,
                daemon.pid,
                daemon.home,
                daemon.running,
                if daemon.serves.is_empty() {
                    "nothing".to_string()
                } else {
                    daemon.serves.join(", ")
                },
            )
        })
        .collect()
}

/// The HTTP API's line: its URL, why it does not serve, or off.
fn http_line(http: Option<&HttpServing>) -> String {
    match http {
        None => "off (http.listen)".to_string(),
        Some(HttpServing::Failed { error }) => format!("not serving: {error}"),
        Some(HttpServing::Serving { url, .. }) => {
            format!("{url} (corral web prints the login URL)")
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::waiter_line;

    #[test]
    fn a_waiter_names_its_project_or_its_own_worktree() {
        // As the daemon sends one (`status`'s `slots.waiting`).
        let waiter = |project: &str| {
            serde_json::from_value(json!({
                "ticket": 7,
                "owner": { "session": "0193aaaa-bbbb-7ccc", "label": "Fix" },
                "request": { "engine": "claude", "project": project, "groups": ["db"] },
                "blocker": { "reason": "group_lock", "group": "db" },
            }))
            .unwrap()
        };
        assert_eq!(
            waiter_line(&waiter("/src/api")),
            "session 0193aaaa-bbbb \"Fix\" (claude, project /src/api): group db lock"
        );
        assert_eq!(
            waiter_line(&waiter("worktree:0193aaaa-bbbb-7ccc")),
            "session 0193aaaa-bbbb \"Fix\" (claude, worktree of session 0193aaaa-bbbb): group db lock"
        );
    }
}
