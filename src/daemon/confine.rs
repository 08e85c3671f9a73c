//! An agent is confined to its own session.
//!
//! A request that comes from inside a supervised run ([`origin::find`]) may read and act on
//! its own session only: its history, its events, its title, its own prompts. Another
//! session's or another project's — a `history`, a `cancel`, a `rename`, an `archive`, a
//! `watch` — and the lists of every session (`session.list`, `status`, `overview`,
//! `execs.list`) are refused with `NOT_ALLOWED` (-32010) and recorded as a `request.refused`
//! event of the run's session, as a widening request is ([`super::methods`]). A request
//! that reaches nothing of anyone's (`exec.start`, `settings.get`, …) is never looked at.
//!
//! What each method reaches is one table ([`reach`]); a method it does not name reaches
//! everything, so a new method is refused to agents until it is placed.
//!
//! The peer is matched as for widening (ancestry, process group, `CORRAL_RUN_ID`), so the
//! same escape stays open, written down in `origin.rs`: a process that left the run's tree,
//! group and environment before it connected (`setsid -f env -i corral …`). A peer is looked
//! up only while some session works (with none there is no run to come from), and a socket
//! connection's look is kept while the live runs stay the same (`origin::OriginCache`): a
//! pass over `/proc` per request cost a send 1 ms of the daemon's time while a run lived.

use serde_json::Value;

use super::methods::{self, Caller};
use super::origin;
use crate::protocol::RpcError;
use crate::store::projects;
use crate::Corral;

/// What a request reaches, as its params name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Nothing of any session's (or a widening the widening rules judge).
    Nothing,
    /// The session a selector names.
    Session(String),
    /// The session of the prompt a selector names.
    Prompt(String),
    /// `prompt.cancel`'s target: a prompt, else a session.
    PromptOrSession(String),
    /// The project a selector names (its sessions, its settings).
    Project(String),
    /// Every session (a list, the daemon's status).
    Everything,
    /// The session of the schedule a selector names (a project's schedule is no one
    /// session's: beyond any agent).
    Schedule(String),
    /// Each of these (`prompt.send`'s session and the prompts it runs after).
    Several(Vec<Reach>),
}

/// What `method` with `params` reaches. A method not named here reaches everything.
pub fn reach(method: &str, params: &Value) -> Reach {
    let field = |name: &str| params.get(name).and_then(Value::as_str).map(str::to_string);
    let named = |name: &str, wrap: fn(String) -> Reach| field(name).map_or(Reach::Everything, wrap);
    match method {
        // What tells a person of their agents (a webhook's URL is its topic's secret, a hook
        // may carry a token) is theirs to read: not an agent's, nor the list holding it.
        "settings.get" => match field("name") {
            Some(name) if crate::store::settings::PERSONS_TO_READ.contains(&name.as_str()) => {
                Reach::Everything
            }
            _ => Reach::Nothing,
        },
        "settings.list" => Reach::Everything,
        "initialize" | "events.unsubscribe" | "exec.start" | "exec.end" | "settings.set"
        | "project.add" | "group.set" | "group.remove" | "shutdown" | "http.login_code" => {
            Reach::Nothing
        }
        "session.show" | "history" | "session.rename" | "session.archive" | "session.diff"
        | "session.merge" | "session.recreate" | "session.steer" | "session.compact"
        | "driver.claim" | "driver.release" | "driver.show" => named("session", Reach::Session),
        // The prompts it runs after are reached too: an agent chains its own session's.
        "prompt.send" => match params.get("after").and_then(Value::as_array) {
            Some(after) if !after.is_empty() => Reach::Several(
                std::iter::once(named("session", Reach::Session))
                    .chain(after.iter().map(|prompt| match prompt.as_str() {
                        Some(prompt) => Reach::Prompt(prompt.to_string()),
                        None => Reach::Everything,
                    }))
                    .collect(),
            ),
            _ => named("session", Reach::Session),
        },
        "prompt.wait" | "prompt.retry" | "prompt.edit" => named("prompt", Reach::Prompt),
        // An agent may pause its own session (`pause.list` and every wider scope reach
        // others'); a resume is a person's alone, refused by the widening rules.
        "pause" => match field("session") {
            Some(session)
                if params.get("all").is_none_or(|all| all == false)
                    && field("project").is_none()
                    && field("group").is_none() =>
            {
                Reach::Session(session)
            }
            _ => Reach::Everything,
        },
        "resume" => Reach::Nothing,
        // An agent may schedule prompts to its own session, and pause or remove such a
        // schedule; a project's schedule opens sessions (beyond any agent's), and a resume
        // is a person's alone, refused by the widening rules.
        "schedule.add" => match field("project") {
            Some(_) => Reach::Everything,
            None => named("session", Reach::Session),
        },
        "schedule.show" | "schedule.pause" | "schedule.remove" => {
            named("schedule", Reach::Schedule)
        }
        "schedule.resume" => Reach::Nothing,
        "schedule.list" => Reach::Everything,
        "pause.list" => Reach::Everything,
        // An answer is a person's alone: refused from any run by the widening rules.
        "approvals.answer" => Reach::Nothing,
        "approvals.list" => named("session", Reach::Session),
        "prompt.cancel" => named("target", Reach::PromptOrSession),
        "project.show" | "project.set" | "project.archive" | "session.new" => {
            named("project", Reach::Project)
        }
        "events.subscribe" => match params.get("session").and_then(Value::as_str) {
            Some(session) => Reach::Session(session.to_string()),
            None => Reach::Everything,
        },
        _ => Reach::Everything,
    }
}

/// Refuses a request from inside a run that reaches beyond the run's own session, and
/// records the attempt on that session.
pub async fn confine(caller: &Caller, method: &str, params: &Value) -> Result<(), RpcError> {
    confined(
        caller.corral(),
        caller.peer_pid,
        method,
        params,
        &caller.origins,
    )
    .await
}

/// [`confine`] for a request whose peer is `peer` (the HTTP WebSocket's, on its worker).
pub async fn confine_peer(
    corral: &Corral,
    peer: Option<i32>,
    method: &str,
    params: &Value,
) -> Result<(), RpcError> {
    confined(
        corral,
        peer,
        method,
        params,
        &origin::OriginCache::default(),
    )
    .await
}

async fn confined(
    corral: &Corral,
    peer: Option<i32>,
    method: &str,
    params: &Value,
    origins: &origin::OriginCache,
) -> Result<(), RpcError> {
    let reach = reach(method, params);
    if reach == Reach::Nothing {
        return Ok(());
    }
    let Some(peer) = peer else {
        return Ok(());
    };
    let runs = corral.live_runs().await;
    if runs.is_empty() {
        return Ok(());
    }
    let Some(origin) = origins.find(peer, &runs) else {
        return Ok(());
    };
    let Some(why) = beyond(corral, &reach, origin.session_id.as_deref()) else {
        return Ok(());
    };
    tracing::warn!(method, why, peer, run = %origin.run_id, "refused a request beyond its run's session");
    Err(origin::refuse(corral, &origin, peer, method, &why).await)
}

/// Why `reach` is beyond the run's session `own` (`None`: a run of no one session, an
/// app-server child's), if it is. A selector that names nothing is left to the method (it
/// answers "not found", which says nothing of anyone's).
fn beyond(corral: &Corral, reach: &Reach, own: Option<&str>) -> Option<String> {
    let reached = match reach {
        Reach::Nothing => return None,
        Reach::Several(reaches) => {
            return reaches.iter().find_map(|reach| beyond(corral, reach, own))
        }
        Reach::Everything => {
            return Some("reading every session (an agent may reach its own session only)".into())
        }
        Reach::Session(selector) => methods::resolve_session(corral, selector).ok()?,
        Reach::Prompt(selector) => prompt_session(corral, selector)?,
        Reach::Schedule(selector) => {
            let (schedule, _) = corral.schedule(selector, 0).ok()?;
            match &schedule.session_id {
                Some(session) => methods::resolve_session(corral, session).ok()?,
                None => {
                    return Some(format!(
                        "reaching schedule {} of project {} (an agent may reach its own \
                         session only)",
                        schedule.id,
                        schedule
                            .project_name
                            .as_deref()
                            .unwrap_or(&schedule.project_id)
                    ))
                }
            }
        }
        Reach::PromptOrSession(selector) => prompt_session(corral, selector)
            .or_else(|| methods::resolve_session(corral, selector).ok())?,
        Reach::Project(selector) => {
            let project = methods::resolve_project(corral, selector).ok()?;
            let own_project = own
                .and_then(|own| methods::resolve_session(corral, own).ok())
                .and_then(|session| session.project_id);
            if own_project.as_deref() == Some(project.id.as_str()) {
                return None;
            }
            return Some(format!(
                "reaching project {} (an agent may reach its own session only)",
                project.name
            ));
        }
    };
    if own == Some(reached.id.as_str()) {
        return None;
    }
    // A person may let a project's agents reach each other's sessions (`agents.scope`).
    if let (Some(own), Some(project_id)) = (own, reached.project_id.as_deref()) {
        let own_project = methods::resolve_session(corral, own)
            .ok()
            .and_then(|session| session.project_id);
        let shared = own_project.as_deref() == Some(project_id)
            && methods::resolve_project(corral, project_id)
                .is_ok_and(|project| project.agents_scope == projects::AgentsScope::Project);
        if shared {
            return None;
        }
    }
    Some(format!(
        "reaching session {} (an agent may reach its own session only)",
        reached.id
    ))
}

/// The session of the prompt `selector` names, if it names one.
fn prompt_session(corral: &Corral, selector: &str) -> Option<crate::store::sessions::Session> {
    let prompt = methods::resolve_prompt(corral, selector).ok()?;
    methods::resolve_session(corral, &prompt.session_id).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every method the daemon answers is placed in the table on purpose: a new method
    /// reaches everything (refused to agents) until it is.
    #[test]
    fn every_method_is_placed_and_an_unknown_one_reaches_everything() {
        let placed_everything = [
            "project.list",
            "group.list",
            "session.list",
            "execs.list",
            "status",
            "overview",
            "pause.list",
            "schedule.list",
            "settings.list",
            // With these params, which name a project beside the session.
            "pause",
            "schedule.add",
        ];
        for method in crate::protocol::METHODS {
            let reach = reach(
                method,
                &json!({ "session": "s", "prompt": "p", "project": "q", "target": "t",
                         "schedule": "c" }),
            );
            if placed_everything.contains(method) {
                assert_eq!(reach, Reach::Everything, "{method}");
            } else {
                assert_ne!(reach, Reach::Everything, "{method} is not placed");
            }
        }
        assert_eq!(reach("some.new_method", &json!({})), Reach::Everything);
        assert_eq!(
            reach("history", &json!({ "session": "s1" })),
            Reach::Session("s1".into())
        );
        assert_eq!(reach("history", &json!({})), Reach::Everything);
        // A send reaches the prompts it runs after as well as its session.
        assert_eq!(
            reach(
                "prompt.send",
                &json!({ "session": "s1", "after": ["p1", 7] })
            ),
            Reach::Several(vec![
                Reach::Session("s1".into()),
                Reach::Prompt("p1".into()),
                Reach::Everything,
            ])
        );
        assert_eq!(reach("events.subscribe", &json!({})), Reach::Everything);
        // A pause reaches its own session only when it names nothing else.
        assert_eq!(
            reach("pause", &json!({ "session": "s1", "now": true })),
            Reach::Session("s1".into())
        );
        for wider in [
            json!({ "session": "s1", "all": true }),
            json!({ "session": "s1", "group": "g" }),
            json!({ "all": true }),
            json!({ "project": "q" }),
        ] {
            assert_eq!(reach("pause", &wider), Reach::Everything, "{wider}");
        }
    }
}
