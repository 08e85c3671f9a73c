//! `corral status`: the daemon (pid, version, home), how many sessions it knows, how many
//! work now, its slots (limits, what runs, how many wait, and the first few waiters with what
//! they wait for: `--waiters N`), the app-server children (their state
//! as it truly is, restarts kept across daemon restarts) and the background processes that
//! projects with `keep_background` kept after their runs. With no daemon running it says
//! so in one line (`--json`: `{"daemon": null, "home", "sessions"}` from the store) and exits
//! [`remote::NO_DAEMON`]; it never starts one.

use serde_json::Value;

use super::remote::{self, print_json, text, Source};
use super::{CliError, Context, Exit};
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
                print_json(&store.status()?);
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
    let daemon = &status["daemon"];
    let stopping = if daemon["shutting_down"].as_bool() == Some(true) {
        " (shutting down)"
    } else {
        ""
    };
    println!(
        "daemon:   pid {}, corral {}{stopping}",
        daemon["pid"].as_u64().unwrap_or(0),
        text(daemon, "version")
    );
    println!("home:     {}", text(daemon, "home"));
    if let Some(store) = store_line(&status) {
        println!("store:    {store}");
    }
    for line in daemon_lines(&status) {
        println!("{line}");
    }
    if let Some(http) = http_line(&status) {
        println!("http:     {http}");
    }
    println!("sessions: {}", status["sessions"].as_u64().unwrap_or(0));
    println!("working:  {}", status["working"].as_u64().unwrap_or(0));
    println!("slots:    {}", slots(&status["slots"]));
    let slots = &status["slots"];
    let shown = slots["waiting"].as_array().cloned().unwrap_or_default();
    for waiter in &shown {
        println!("waiting:  {}", waiter_line(waiter));
    }
    let count = waiting_count(slots);
    if count > shown.len() {
        println!(
            "          … and {} more waiting (status --json --waiters N lists more)",
            count - shown.len()
        );
    }
    for server in status["app_servers"].as_array().into_iter().flatten() {
        println!("app-server: {}", app_server(server));
    }
    for kept in status["kept"].as_array().into_iter().flatten() {
        println!(
            "kept:     pid {} (run {}, session {}): {}",
            kept["pid"].as_i64().unwrap_or(0),
            short(text(kept, "run_id")),
            short(text(kept, "session_id")),
            text(kept, "command")
        );
    }
    Ok(Exit::success())
}

/// An id as tables show it: its first 13 characters (the time part of a UUIDv7).
fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

/// `project 0193…: running, pid 123, generation 4, 2 restarts in the last minute`.
fn app_server(server: &Value) -> String {
    let status = match &server["status"] {
        Value::String(status) => status.clone(),
        Value::Object(failed) if failed.contains_key("failed") => format!(
            "failed ({})",
            failed["failed"]["reason"].as_str().unwrap_or("?")
        ),
        other => other.to_string(),
    };
    let pid = match server["pid"].as_u64() {
        Some(pid) => format!(", pid {pid}"),
        None => String::new(),
    };
    let restarts = server["restarts"].as_array().map(Vec::len).unwrap_or(0);
    format!(
        "project {}: {status}{pid}, generation {}, {restarts} restarts in the last minute",
        short(text(server, "project_id")),
        server["generation"].as_u64().unwrap_or(0)
    )
}

/// `fake 1/3, codex 0/3 (others 3 each), total 4, 2 waiting`.
fn slots(slots: &Value) -> String {
    if slots.is_null() {
        return "unknown".into();
    }
    let limits = &slots["limits"];
    let default = limits["default_per_engine"].as_u64().unwrap_or(0);
    let running = slots["running_per_engine"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let per_engine = limits["per_engine"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut engines: Vec<&String> = running.keys().chain(per_engine.keys()).collect();
    engines.sort();
    engines.dedup();
    let mut parts: Vec<String> = engines
        .iter()
        .map(|engine| {
            let limit = per_engine
                .get(*engine)
                .and_then(Value::as_u64)
                .unwrap_or(default);
            let busy = running.get(*engine).and_then(Value::as_u64).unwrap_or(0);
            format!("{engine} {busy}/{limit}")
        })
        .collect();
    parts.push(format!("others {default} each"));
    let mut line = parts.join(", ");
    match limits["total"].as_u64() {
        Some(total) => line.push_str(&format!("; total {total}")),
        None => line.push_str("; no total limit"),
    }
    line.push_str(&format!("; {} waiting", waiting_count(slots)));
    line
}

/// How many wait: `waiting_count`, or the list's length from a daemon older than it.
fn waiting_count(slots: &Value) -> usize {
    slots["waiting_count"].as_u64().map_or_else(
        || slots["waiting"].as_array().map_or(0, Vec::len),
        |count| count as usize,
    )
}

/// `session 0193… "Fix the client" (fake, project /src/api): project lock held by session
/// 0192… "Refactor"`.
fn waiter_line(waiter: &Value) -> String {
    let owner = &waiter["owner"];
    let who = match owner["label"].as_str() {
        Some(label) => format!("session {} \"{label}\"", short(text(owner, "session"))),
        None => format!("session {}", short(text(owner, "session"))),
    };
    let request = &waiter["request"];
    // A session in a worktree of its own locks `worktree:<its id>`, not its project's tree.
    let project = text(request, "project");
    let tree = match project.strip_prefix("worktree:") {
        Some(session) => format!("worktree of session {}", short(session)),
        None => format!("project {project}"),
    };
    format!(
        "{who} ({}, {tree}): {}",
        text(request, "engine"),
        blocker(&waiter["blocker"])
    )
}

/// What a waiter waits for, in words (the `Blocker` of `src/actors/slots/table.rs`).
fn blocker(blocker: &Value) -> String {
    let holder = |holder: &Value| match holder["session"].as_str() {
        Some(session) => format!(" held by session {}", short(session)),
        None => String::new(),
    };
    let count = |key: &str| blocker[key].as_u64().unwrap_or(0);
    match blocker["reason"].as_str() {
        Some("project_lock") => format!("project lock{}", holder(&blocker["holder"])),
        Some("group_lock") => format!(
            "group {} lock{}",
            text(blocker, "group"),
            holder(&blocker["holder"])
        ),
        Some("engine_limit") => format!(
            "{} limit, {}/{} running",
            text(blocker, "engine"),
            count("running"),
            count("limit")
        ),
        Some("total_limit") => format!(
            "total limit, {}/{} running",
            count("running"),
            count("limit")
        ),
        Some("queue") => format!("an earlier waiter{}", holder(&blocker["holder"])),
        _ => "granted just now".into(),
    }
}

/// The store's line: what and where, and when writes wait for a server gone away or for a
/// store that refuses them.
fn store_line(status: &serde_json::Value) -> Option<String> {
    let store = status.get("store").filter(|store| store.is_object())?;
    let mut line = format!("{} {}", text(store, "kind"), text(store, "at"));
    if store["reachable"].as_bool() == Some(false) {
        line.push_str(" (cannot be reached: writes wait for it)");
    } else if let Some(why) = store["refusing_writes"].as_str() {
        line.push_str(&format!(
            " (refuses writes for now, {why}: writes wait for it)"
        ));
    }
    Some(line)
}

/// On a shared store, a line per daemon: where it runs, its lease, what it serves.
fn daemon_lines(status: &serde_json::Value) -> Vec<String> {
    let Some(daemons) = status["daemons"].as_array() else {
        return Vec::new();
    };
    daemons
        .iter()
        .map(|daemon| {
            let lease = match (daemon["live"].as_bool(), daemon["lease_left_ms"].as_i64()) {
                (Some(true), Some(left)) => format!("lease {:.1} s left", left as f64 / 1000.0),
                (_, None) => "stopped".to_string(),
                _ => "lease run out".to_string(),
            };
            let serves: Vec<&str> = daemon["serves"]
                .as_array()
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "daemon{} {} pid {} ({}), {lease}, {} running, serves: {}",
                if daemon["this"].as_bool() == Some(true) {
                    "*"
                } else {
                    " "
                },
                text(daemon, "host"),
                daemon["pid"].as_i64().unwrap_or(0),
                text(daemon, "home"),
                daemon["running"].as_i64().unwrap_or(0),
                if serves.is_empty() {
                    "nothing".to_string()
                } else {
                    serves.join(", ")
                },
            )
        })
        .collect()
}

/// The HTTP API's line: its URL, why it does not serve, or off (`None`: a daemon that does not
/// say, older than the HTTP API).
fn http_line(status: &serde_json::Value) -> Option<String> {
    let http = status.get("http")?;
    Some(if http.is_null() {
        "off (http.listen)".to_string()
    } else if let Some(error) = http["error"].as_str() {
        format!("not serving: {error}")
    } else {
        format!("{} (corral web prints the login URL)", text(http, "url"))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::waiter_line;

    #[test]
    fn a_waiter_names_its_project_or_its_own_worktree() {
        let waiter = |project: &str| {
            json!({
                "owner": { "session": "0193aaaa-bbbb-7ccc", "label": "Fix" },
                "request": { "engine": "claude", "project": project },
                "blocker": { "reason": "group_lock", "group": "db" },
            })
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
