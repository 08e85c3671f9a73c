//! The supervisor: the registry of session actors.
//!
//! It starts a session's actor the first time the session has work and keeps it (an idle
//! actor is a few hundred bytes; keeping it avoids a stop/start race with the next send). At
//! boot it reconciles what a previous supervisor left ([`Boot`]): every process of the runs
//! marked running (their groups, checked by pid *and* start time, and whatever carries a
//! run's id in its environment) and of the app-server children is ended first; then the runs
//! are closed as interrupted, at the moment their processes were gone, and their sessions'
//! work resumes. Before all that it stores what the last daemon's workers spilled at a
//! shutdown during a store lock (`store::spill`, [`ingest_spills`]). What the actors it
//! starts share is [`super::shared::Shared`].

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;

use super::ledger::{CurrentOrNext, Fenced, IngestSpill, Recover};
use super::session::{AnswerRun, CancelPrompt, SessionActor, StartElsewhere, StartWork};
use super::shared::Shared;
use crate::process;
use crate::store::prompts::Prompt;
use crate::store::runs::Recovered;
use crate::store::{processes, projects, runs, sessions};

/// The supervisor actor, reached through its [`SupervisorHandle`].
struct Supervisor {
    shared: Arc<Shared>,
    sessions: HashMap<String, Addr<SessionActor>>,
}

impl Supervisor {
    fn new(shared: Arc<Shared>) -> Self {
        Supervisor {
            shared,
            sessions: HashMap::new(),
        }
    }

    fn actor(&mut self, session_id: &str, ctx: &Context<Self>) -> Addr<SessionActor> {
        if let Some(addr) = self
            .sessions
            .get(session_id)
            .filter(|addr| addr.connected())
        {
            return addr.clone();
        }
        let elsewhere = ctx.address().recipient();
        let addr =
            SessionActor::new(session_id.to_string(), self.shared.clone(), elsewhere).start();
        self.sessions.insert(session_id.to_string(), addr.clone());
        addr
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

/// The cloneable way to reach the supervisor. Needs a running actix system.
#[derive(Clone)]
pub struct SupervisorHandle(Addr<Supervisor>);

/// A [`SupervisorHandle`] that does not keep the supervisor.
#[derive(Clone)]
pub struct WeakSupervisorHandle(actix::WeakAddr<Supervisor>);

impl WeakSupervisorHandle {
    pub fn upgrade(&self) -> Option<SupervisorHandle> {
        self.0.upgrade().map(SupervisorHandle)
    }
}

impl SupervisorHandle {
    /// A weak handle, which keeps the supervisor no longer than its other handles do.
    pub fn downgrade(&self) -> WeakSupervisorHandle {
        WeakSupervisorHandle(self.0.downgrade())
    }

    /// Starts the supervisor of the actors that share `shared`; nothing runs before
    /// [`boot`](Self::boot).
    pub fn start(shared: Arc<Shared>) -> SupervisorHandle {
        SupervisorHandle(Supervisor::new(shared).start())
    }

    /// Reconciles what a previous supervisor left, then resumes its sessions' work (see
    /// [`Boot`]).
    pub async fn boot(&self) -> Result<Recovered, String> {
        self.0.send(Boot).await.map_err(|error| error.to_string())?
    }

    /// Hands `prompt`, `running` in the store, to its session's worker.
    pub fn dispatch(&self, prompt: Prompt) {
        self.0.do_send(Dispatch(prompt));
    }

    /// Hands many prompts to their sessions' workers, a step at a time (see [`resume`]):
    /// what a lifted pause let start.
    pub fn dispatch_all(&self, prompts: Vec<Prompt>) {
        actix::spawn(resume(self.clone(), prompts));
    }

    /// Ends prompt `prompt_id` if session `session_id` runs it here now.
    pub fn cancel_running(&self, session_id: String, prompt_id: String) {
        self.0.do_send(CancelRunning {
            session_id,
            prompt_id,
        });
    }

    /// Hands an approval a person answered to the run that waits for it, if it runs here.
    pub fn approval_answered(&self, approval: crate::store::approvals::Approval) {
        self.0.do_send(ApprovalAnswered(approval));
    }

    /// How many session actors have a worker running now (0 once the supervisor is gone).
    pub async fn count_working(&self) -> usize {
        self.0.send(CountWorking).await.unwrap_or(0)
    }
}

/// Starts (or hands to) the session's worker a prompt that is `running` in the store.
#[derive(Message)]
#[rtype(result = "()")]
struct Dispatch(Prompt);

impl Handler<Dispatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, Dispatch(prompt): Dispatch, ctx: &mut Context<Self>) {
        let actor = self.actor(&prompt.session_id, ctx);
        actor.do_send(StartWork(prompt));
    }
}

impl Handler<StartElsewhere> for Supervisor {
    type Result = ();

    fn handle(&mut self, StartElsewhere(prompts): StartElsewhere, ctx: &mut Context<Self>) {
        actix::spawn(resume(SupervisorHandle(ctx.address()), prompts));
    }
}

/// Ends a running prompt of a session.
#[derive(Message)]
#[rtype(result = "()")]
struct CancelRunning {
    session_id: String,
    prompt_id: String,
}

impl Handler<CancelRunning> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CancelRunning, ctx: &mut Context<Self>) {
        // Made if need be: a prompt resumed at boot may not have its actor yet (the resume
        // is dispatched in steps, see `resume`); the cancel then waits in the new actor for
        // the prompt's worker, which ends it at once.
        let actor = self.actor(&message.session_id, ctx);
        actor.do_send(CancelPrompt(message.prompt_id));
    }
}

/// An approval a person answered, for the session's run that waits for it (none: its run
/// ended, and nothing waits).
#[derive(Message)]
#[rtype(result = "()")]
struct ApprovalAnswered(crate::store::approvals::Approval);

impl Handler<ApprovalAnswered> for Supervisor {
    type Result = ();

    fn handle(&mut self, ApprovalAnswered(approval): ApprovalAnswered, _: &mut Context<Self>) {
        if let Some(actor) = self
            .sessions
            .get(&approval.session_id)
            .filter(|addr| addr.connected())
        {
            actor.do_send(AnswerRun(approval));
        }
    }
}

/// How many session actors have a worker running now: the count the workers keep
/// ([`Life::working`](super::life::Life::working)), so asking costs the same for 2 sessions or 2,000.
#[derive(Message)]
#[rtype(result = "usize")]
struct CountWorking;

impl Handler<CountWorking> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: CountWorking, _: &mut Context<Self>) -> usize {
        self.shared.life.working()
    }
}

/// Boot reconciliation; replies with what was found.
///
/// The order is what makes a kill at any moment safe: the dead supervisor's leftovers are
/// read, *all* their processes are ended (each run's group, whatever carries its id in the
/// environment, the app-server children and what they started, what a worktree's setup
/// command started), and only then are their runs
/// closed as interrupted, at the moment their processes were seen gone. A supervisor killed
/// during this leaves the runs marked running, so the next one does it all again; no prompt
/// of theirs runs before their last process is gone.
#[derive(Message)]
#[rtype(result = "Result<Recovered, String>")]
struct Boot;

impl Handler<Boot> for Supervisor {
    type Result = ResponseActFuture<Self, Result<Recovered, String>>;

    fn handle(&mut self, _: Boot, _: &mut Context<Self>) -> Self::Result {
        let shared = self.shared.clone();
        Box::pin(
            async move {
                let begun = std::time::Instant::now();
                // What the last daemon's workers spilled goes in first, ahead of anything this
                // boot tells about their runs and before any prompt of theirs runs again.
                let told = ingest_spills(&shared).await?;
                let recovered = reconcile(&shared, told).await?;
                let reconciled = begun.elapsed();
                process::kill_point("boot.committed");
                // On a shared store its node's own prompts are taken again under its new
                // epoch; the queued ones are claimed as room allows, after boot.
                let prompts = shared
                    .ledger
                    .write(Fenced {
                        claim: shared.coordination.fence(),
                        write: CurrentOrNext {
                            session_ids: recovered.sessions.clone(),
                            claimer: shared.coordination.claimer(),
                        },
                    })
                    .await
                    .map_err(|error| error.to_string())?;
                shared.coordination.wake_claimer();
                tracing::info!(
                    reconcile_ms = reconciled.as_millis() as u64,
                    claim_ms = (begun.elapsed() - reconciled).as_millis() as u64,
                    prompts = prompts.len(),
                    "boot reconciled"
                );
                Ok::<_, String>((recovered, prompts))
            }
            .into_actor(self)
            .map(|result, _, ctx| {
                let (recovered, prompts) = result?;
                actix::spawn(resume(SupervisorHandle(ctx.address()), prompts));
                Ok(recovered)
            }),
        )
    }
}

/// How many resumed prompts are handed to their sessions' actors before the others waiting
/// on the daemon's thread (a request, an engine's output) get a turn.
const RESUME_STEP: usize = 64;

/// Hands the prompts boot found running to their sessions' workers, [`RESUME_STEP`] at a time
/// with a yield between steps: each worker's first steps (its session and project read, its
/// slot asked for) cost about 25 µs, so 2,000 of them at once would keep the daemon from
/// answering anyone for 50 ms; in steps, a request waits for one step at most at each of
/// its turns. The boot's answer (and with it the daemon's readiness) does not wait for them.
async fn resume(supervisor: SupervisorHandle, prompts: Vec<Prompt>) {
    let mut prompts = prompts.into_iter().peekable();
    while prompts.peek().is_some() {
        for prompt in prompts.by_ref().take(RESUME_STEP) {
            supervisor.dispatch(prompt);
        }
        tokio::task::yield_now().await;
    }
}

/// Stores the events the last daemon's workers spilled when it shut down during a store lock
/// (`store::spill`): one ledger write per file, in order, numbered as usual, then the file is
/// removed. Returns what they tell of their runs' ends and their prompts' requeues, which
/// recovery then does not tell again. A file that does not parse, or whose write fails for
/// another reason than a lock (its session is gone), is left in place and named in one log
/// line; a store still locked past `store.lock_timeout_ms` fails the boot (reconciling
/// without the spilled events would number later events before them).
async fn ingest_spills(shared: &Shared) -> Result<runs::Told, String> {
    let scan = crate::store::spill::scan(&shared.home);
    for (path, why) in &scan.unreadable {
        tracing::error!(path = %path.display(), why, "a spill file was not read; it is left in place");
    }
    let mut told = runs::Told::default();
    for spill in scan.spills {
        let write = IngestSpill {
            events: spill.events.clone(),
        };
        match shared.ledger.write(write).await {
            Ok((stored, skipped)) => {
                tracing::info!(
                    path = %spill.path.display(),
                    stored,
                    skipped,
                    "spilled events stored"
                );
                for event in &spill.events {
                    told.note(&event.event());
                }
                if let Err(error) = crate::store::spill::remove(&spill) {
                    tracing::error!(path = %spill.path.display(), %error, "a stored spill file was not removed");
                }
            }
            Err(error) if error.is_transient() => {
                return Err(format!(
                    "{error}: the events spilled at {} were not stored",
                    spill.path.display()
                ))
            }
            Err(error) => {
                tracing::error!(path = %spill.path.display(), %error, "a spill file's events were not stored; it is left in place");
            }
        }
    }
    Ok(told)
}

/// Ends what a dead supervisor left running, then closes its runs (see [`Boot`]).
async fn reconcile(shared: &Shared, told: runs::Told) -> Result<Recovered, String> {
    // On a shared store only this node's runs are its to end: the app-server children's and
    // the setup commands' records name no node, so another daemon's could be taken for
    // them; they are left alone there (a setup shell dies with its daemon, see
    // `process::dies_with_this_process`).
    let node_id = shared
        .coordination
        .node_id()
        .map(str::to_string)
        .unwrap_or_default();
    let alone = !shared.coordination.shares_store();
    let read = shared.readers.read(|connection| {
        Ok((
            runs::leftover_runs(connection, &node_id)?,
            processes::app_servers(connection)?,
            projects::projects(connection)?,
            if alone {
                sessions::sessions_in_setup(connection)?
            } else {
                Vec::new()
            },
        ))
    });
    let (runs, mut servers, mut projects, setting_up) = read.map_err(|error| error.to_string())?;
    // A run whose spool is whole goes on: its prompt's worker takes it over (live restore,
    // see `adoptable`). Only on a store of its own for now: on a shared one the lease guard
    // ends a dead daemon's runs.
    let (adopted, runs): (Vec<_>, Vec<_>) = runs
        .into_iter()
        .partition(|run| alone && adoptable(&shared.home, run));
    for run in &adopted {
        tracing::info!(
            run = run.id,
            session = run.session_id,
            "a run left running is taken over"
        );
    }
    // An app-server child another node started is that node's (a state from before nodes
    // were recorded was the one daemon's); on a shared store a project whose child is not
    // known to be this node's is not looked for by its environment either, which on a host
    // with two homes would find the other home's.
    servers.retain(|state| {
        state
            .node_id
            .as_deref()
            .is_none_or(|node| alone || node == node_id)
    });
    if !alone {
        projects.retain(|project| servers.iter().any(|state| state.project_id == project.id));
    }
    // Each run: its group (when still its own) and its id in the environment.
    let mut marks: Vec<process::Mark> = runs
        .iter()
        .map(|run| {
            process::Mark::of_leader(
                run.pid.map(|pid| pid as i32),
                run.pid_start.map(|start| start as u64),
                crate::env::RUN_ID,
                &run.id,
            )
        })
        .collect();
    // Each project's app-server child: the one recorded, and one spawned before its state
    // was (found by the project's id in its environment).
    for project in &projects {
        let stored = servers.iter().find(|state| state.project_id == project.id);
        let pid = stored.and_then(|state| state.pid);
        let start = stored.and_then(|state| state.pid_start);
        marks.push(process::Mark::of_leader(
            pid.map(|pid| pid as i32),
            start,
            crate::env::APP_SERVER_PROJECT,
            &project.id,
        ));
    }
    // What a worktree's setup command started (its shell died with the supervisor), found by
    // the session's id in the environment; after the runs' and app-servers' marks, whose
    // places in `gone_at` are read below.
    marks.extend(setting_up.iter().map(|session_id| process::Mark {
        group: None,
        env: Some((crate::env::SETUP_SESSION.to_string(), session_id.clone())),
        since: None,
        born: None,
        spawned_here: false,
    }));
    process::kill_point("boot.found");
    let grace = shared.settings().cancel_grace;
    let gone_at = process::end_marked(&marks, grace, Some("boot.signalled")).await;
    process::kill_point("boot.ended");
    let ended: Vec<(String, i64)> = runs
        .iter()
        .zip(&gone_at)
        .map(|(run, at)| (run.id.clone(), *at))
        .collect();
    let app_servers = servers
        .iter()
        .filter(|state| state.pid.is_some())
        .filter_map(|state| {
            let project_id = state.project_id.clone();
            let index = projects
                .iter()
                .position(|project| project.id == project_id)?;
            Some((
                project_id,
                recovered_app_server(state, gone_at[runs.len() + index]),
            ))
        })
        .collect();
    let recovered = shared
        .ledger
        .write(Recover {
            node_id,
            ended,
            app_servers,
            told,
        })
        .await
        .map_err(|error| error.to_string())?;
    let mut recovered = recovered;
    recovered.taken_over = adopted
        .iter()
        .map(|run| runs::TakenOver {
            run_id: run.id.clone(),
            session_id: run.session_id.clone(),
            prompt_id: run.prompt_id.clone(),
            shim_pid: run.pid,
        })
        .collect();
    // The spools of the runs closed here are of no more use.
    for run in &runs {
        let _ = std::fs::remove_dir_all(process::shim::spool_dir(&shared.home, &run.id));
    }
    deny_left_approvals(shared).await;
    forget_dead_kept(shared).await;
    Ok(recovered)
}

/// Whether a run the daemon before left marked running is taken over rather than redone: its
/// spool holds its output whole past what the stored events cover (that daemon handed the run
/// over, or died: either way it kept every byte it read there, `session/spool.rs`), that
/// daemon did not end it itself (`stopped`), and its shim (the process recorded for the run,
/// by its pid and start time) lives, or recorded the engine's end before it went (the turn
/// ended while no daemon ran: judged from the spool). A spool of an older corral (format 0)
/// is whole only after a hand-over; one of a newer corral is not read.
fn adoptable(home: &std::path::Path, run: &runs::LeftoverRun) -> bool {
    let (Some(pid), Some(start)) = (run.pid, run.pid_start) else {
        return false;
    };
    let spool = process::shim::spool_dir(home, &run.id);
    let holds = |name: &str, stored: u64| {
        let length = std::fs::symlink_metadata(spool.join(name)).map_or(0, |file| file.len());
        length >= stored
    };
    if !spool.is_dir() || spool.join(process::shim::STOPPED).exists() {
        return false;
    }
    let short = !holds(process::shim::SPOOLED_STDOUT, run.stored.stdout)
        || !holds(process::shim::SPOOLED_STDERR, run.stored.stderr);
    if short || spool.join(process::shim::INCOMPLETE).exists() {
        let why = if short {
            "shorter than what its stored events cover (truncated or removed)"
        } else {
            "marked incomplete (its daemon could not write it: a full disk)"
        };
        tracing::warn!(
            run = run.id,
            "a run's spool is {why}: the run is ended and its prompt run again"
        );
        return false;
    }
    let alive = u32::try_from(pid)
        .ok()
        .filter(|pid| process::is_alive(*pid, Some(start as u64)));
    let Some(format) = process::shim::spool_format(&spool, alive) else {
        // Gone without a recorded end.
        return false;
    };
    let whole = spool_whole(format, spool.join(process::shim::HANDED_OVER).exists());
    if !whole && format > process::shim::SPOOL_FORMAT {
        tracing::warn!(
            run = run.id,
            format,
            "a run whose shim is a newer corral's is not taken over (its spool is not read)"
        );
    }
    whole
}

/// Whether a spool of `format` holds all that its run's stored events do not cover.
fn spool_whole(format: u32, handed_over: bool) -> bool {
    match format {
        // The daemon kept every byte it read (any end of that daemon).
        process::shim::SPOOL_FORMAT => true,
        // The daemon wrote what it had read and not stored only at a hand-over.
        0 => handed_over,
        _ => false,
    }
}

/// What the runs of before left waiting for a person is denied: their engines are gone, or,
/// for a run taken over, no longer read an answer (their stdin closed with the daemon before).
async fn deny_left_approvals(shared: &Shared) {
    let write = super::ledger::DenyLeftApprovals {
        run_id: None,
        node_id: shared.coordination.node_id().map(str::to_string),
        reason: "the daemon restarted, and the engine that asked was ended with it".into(),
    };
    match shared.ledger.write(write).await {
        Ok(told) => shared.publisher.publish(told),
        Err(error) => tracing::warn!(%error, "approvals left by the last daemon were not denied"),
    }
}

/// Forgets the kept background processes (`keep_background`) that died since they were kept,
/// so that the list `status` filters stays short. A kept one that lives is left alone: it
/// outlived its run on purpose. On a shared store only this host's are looked at (a pid of
/// another host's means nothing here).
async fn forget_dead_kept(shared: &Shared) {
    let node = shared.coordination.node_id();
    let forget: Vec<(i64, i64)> = shared
        .readers
        .read(|connection| processes::kept_processes(connection, node))
        .unwrap_or_default()
        .into_iter()
        .filter(|kept| !process::is_alive(kept.pid as u32, Some(kept.pid_start as u64)))
        .map(|kept| (kept.pid, kept.pid_start))
        .collect();
    if !forget.is_empty() {
        let forget = super::ledger::KeepProcesses {
            kept: Vec::new(),
            forget,
        };
        if let Err(error) = shared.ledger.write(forget).await {
            tracing::warn!(%error, "dead kept processes not forgotten");
        }
    }
}

/// The stored state of an app-server child a dead supervisor left, as it is now: stopped, no
/// pid, its end told in `last_exit` and in its recent events (its earlier history and its
/// restarts kept).
fn recovered_app_server(
    state: &processes::AppServerState,
    gone_at: i64,
) -> processes::AppServerState {
    let mut state = state.clone();
    let closed = serde_json::json!({
        "pid": state.pid,
        "generation": state.generation,
        "status": "ended by recovery",
        "close_source": "recovery",
        "reason": "the daemon that ran it died; a new one ended its process group",
        "at": gone_at,
    });
    state.pid = None;
    state.pid_start = None;
    state.status = processes::ServerStatus::Stopped;
    state.last_exit = Some(closed.clone());
    state
        .recent
        .push(serde_json::json!({ "at": gone_at, "kind": "recovered", "detail": closed }));
    let keep = state
        .recent
        .len()
        .saturating_sub(super::app_server::RECENT_EVENTS);
    state.recent.drain(..keep);
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spool_is_whole_in_this_format_and_in_the_old_one_only_after_a_hand_over() {
        let now = process::shim::SPOOL_FORMAT;
        assert!(spool_whole(now, false), "a kill -9 of this corral's daemon");
        assert!(spool_whole(now, true));
        assert!(spool_whole(0, true), "an older corral's hand-over");
        assert!(
            !spool_whole(0, false),
            "an older corral killed: lines missing"
        );
        assert!(
            !spool_whole(now + 1, true),
            "a newer corral's spool is not read"
        );
    }
}
