//! The supervisor: the registry of session actors, and what they all share.
//!
//! It starts a session's actor the first time the session has work and keeps it (an idle
//! actor is a few hundred bytes; keeping it avoids a stop/start race with the next send). At
//! boot it reconciles what a previous supervisor left ([`Boot`]): every process of the runs
//! marked running (their groups, checked by pid *and* start time, and whatever carries a
//! run's id in its environment) and of the app-server children is ended first; then the runs
//! are closed as interrupted, at the moment their processes were gone, and their sessions'
//! work resumes. Before all that it stores what the last daemon's workers spilled at a
//! shutdown during a store lock (`store::spill`, [`ingest_spills`]).
//!
//! What it writes for others never drops for a store another program locks: the events no
//! session's worker tells ([`Shared::append_events`]) and the app-server children's states
//! (`keep_app_server_state`) are written again past `store.lock_timeout_ms`, until stored
//! or shut down.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use actix::prelude::*;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::app_server::{AppServerActor, AppServerState};
use super::ledger::{
    AppendEvents, CurrentOrNext, Fenced, IngestSpill, LedgerError, LedgerHandle, Recover,
    SaveAppServer, Unwritten,
};
use super::session::{CancelPrompt, SessionActor, StartWork, SETUP_ENV};
use super::slots::{SlotLimits, SlotsHandle};
use crate::process;
use crate::store::events::{Event, NewEvent};
use crate::store::projects::Project;
use crate::store::prompts::Prompt;
use crate::store::runs::Recovered;
use crate::store::settings::{Settings, DEFAULT_SLOTS_PER_ENGINE};
use crate::store::ReaderPool;
use crate::store::{processes, projects, runs, sessions};

/// Every engine child carries its run's id in this variable, so that a child whose pid was
/// never recorded can still be found after a crash, and what it leaves behind when it ends.
pub const RUN_ID_ENV: &str = "CORRAL_RUN_ID";

/// Every app-server child carries its project's id in this variable, for the same reasons.
pub const APP_SERVER_ENV: &str = "CORRAL_APP_SERVER_PROJECT";

/// What the supervisor and every session actor share.
pub struct Shared {
    /// `CORRAL_HOME`, given to every engine child.
    pub home: PathBuf,
    pub ledger: LedgerHandle,
    pub slots: SlotsHandle,
    pub readers: ReaderPool,
    /// The current settings; replaced whole when one changes.
    settings: RwLock<Arc<Settings>>,
    /// Every stored event, published after its commit (subscribers filter by session).
    pub events: broadcast::Sender<Arc<Published>>,
    /// The exec hosting this supervisor: the default parent of the agents' own commands.
    pub exec_id: Option<String>,
    /// Set once when the daemon shuts down: workers requeue their prompt and stop.
    shutdown: watch::Sender<bool>,
    /// Set when a shutdown begins: running prompts may finish, but no new one starts.
    draining: std::sync::atomic::AtomicBool,
    /// The app-server child of each project that uses one, started on first use.
    app_servers: std::sync::Mutex<HashMap<String, Addr<AppServerActor>>>,
    /// How many session actors have a worker running now, kept by the workers themselves
    /// ([`Shared::begin_work`]): `status` and the shutdown read it without asking every
    /// session actor (2,000 of them at a large boot), and the shutdown is woken when it
    /// changes (a worker that ends by spilling its events stores no event to wake it).
    working: Arc<watch::Sender<usize>>,
    /// The announcer of slot waits ([`Shared::announce_waiting`]), started on first use.
    announcer: std::sync::OnceLock<mpsc::UnboundedSender<Announcement>>,
    /// The `git` worktree isolation uses ([`Shared::git`]): found once, looked for again
    /// after a failure (git installed while the daemon runs).
    git: tokio::sync::Mutex<Option<crate::git::Git>>,
    /// On a shared (PostgreSQL) store, this daemon's lease: the claim its prompts are taken
    /// under, the fence its workers' writes carry. `None` on SQLite (one daemon, no lease).
    pub lease: Option<Arc<crate::lease::holder::Lease>>,
    /// Woken when queued prompts may be claimable here (shared store): a prompt queued
    /// elsewhere, a slot freed, a rescue; the claimer (`actors::claims`) takes what fits.
    pub claim_wanted: tokio::sync::Notify,
    /// The asks of other daemons this one waits on (steer, compact: `actors::asks`).
    pub asks: super::asks::Waiting,
}

/// A session's worker counted in [`Shared::working`] for as long as this lives: dropped when
/// the worker future ends, or with its actor.
#[derive(Debug)]
pub struct Working(Arc<watch::Sender<usize>>);

impl Drop for Working {
    fn drop(&mut self) {
        self.0.send_modify(|working| *working -= 1);
    }
}

/// An event as published to subscribers: the stored event, and its JSON text made once for
/// all of them (ten watchers of a daemon would otherwise serialize every event ten times, on
/// the thread the sessions run on). Derefs to the [`Event`].
#[derive(Debug)]
pub struct Published {
    event: Event,
    json: std::sync::OnceLock<String>,
}

impl Published {
    pub fn new(event: Event) -> Self {
        Published {
            event,
            json: std::sync::OnceLock::new(),
        }
    }

    /// The event as JSON text, serialized on first use.
    pub fn json(&self) -> &str {
        self.json
            .get_or_init(|| serde_json::to_string(&self.event).expect("events serialize"))
    }
}

impl std::ops::Deref for Published {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.event
    }
}

/// How many events a slow subscriber may fall behind before it is told it lagged (it can
/// then read what it missed from the store).
pub const EVENT_CHANNEL: usize = 16_384;

impl Shared {
    pub fn new(
        home: PathBuf,
        ledger: LedgerHandle,
        slots: SlotsHandle,
        readers: ReaderPool,
        settings: Settings,
        exec_id: Option<String>,
        lease: Option<Arc<crate::lease::holder::Lease>>,
    ) -> Self {
        let working = Arc::new(watch::channel(0).0);
        if let Some(lease) = &lease {
            lease.count_running(working.subscribe());
        }
        Shared {
            home,
            ledger,
            slots,
            readers,
            settings: RwLock::new(Arc::new(settings)),
            events: broadcast::channel(EVENT_CHANNEL).0,
            exec_id,
            shutdown: watch::channel(false).0,
            draining: std::sync::atomic::AtomicBool::new(false),
            app_servers: std::sync::Mutex::new(HashMap::new()),
            working,
            announcer: std::sync::OnceLock::new(),
            git: tokio::sync::Mutex::new(None),
            lease,
            claim_wanted: tokio::sync::Notify::new(),
            asks: super::asks::Waiting::default(),
        }
    }

    /// Who takes the next prompt in a write that could start one: this daemon under its
    /// claim (shared store), or as the store's only daemon (SQLite).
    pub fn claimer(&self) -> crate::store::prompts::ClaimBy {
        match &self.lease {
            Some(lease) => crate::store::prompts::ClaimBy::Daemon(lease.claim()),
            None => crate::store::prompts::ClaimBy::Alone,
        }
    }

    /// The `git` on PATH (at least 2.17), found on first use and kept; a failure is not kept,
    /// so the next call looks again.
    pub(crate) async fn git(&self) -> Result<crate::git::Git, crate::git::GitError> {
        let mut found = self.git.lock().await;
        if let Some(git) = found.as_ref() {
            return Ok(git.clone());
        }
        let git = crate::git::Git::detect().await?;
        *found = Some(git.clone());
        Ok(git)
    }

    /// Counts a session's worker as working until the returned guard is dropped.
    pub fn begin_work(&self) -> Working {
        self.working.send_modify(|working| *working += 1);
        Working(self.working.clone())
    }

    /// How many session actors have a worker running now.
    pub fn working(&self) -> usize {
        *self.working.borrow()
    }

    /// [`Shared::working`], seen as it changes.
    pub fn watch_working(&self) -> watch::Receiver<usize> {
        self.working.subscribe()
    }

    /// A receiver that turns true when the supervisor shuts down.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The app-server actor of a project, started on first use. Its state changes are kept
    /// in the store.
    pub fn app_server(&self, project: &Project, program: &std::path::Path) -> Addr<AppServerActor> {
        let mut servers = self
            .app_servers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(addr) = servers.get(&project.id).filter(|addr| addr.connected()) {
            return addr.clone();
        }
        let ledger = self.ledger.clone();
        let project_id = project.id.clone();
        // Its history goes on from what the last daemon stored (restarts, recent events).
        let stored = self
            .readers
            .read(processes::app_servers)
            .unwrap_or_default()
            .into_iter()
            .find(|state| state["project_id"].as_str() == Some(project.id.as_str()));
        let actor = AppServerActor::new(
            project.id.clone(),
            program.to_path_buf(),
            project.path.clone(),
            self.home.clone(),
            project.full_access && project.kind != "remote",
        )
        .guarded_by(self.guard_mark());
        let actor = match &stored {
            Some(stored) => actor.resume_from(stored),
            None => actor,
        };
        let (latest, states) = watch::channel(None);
        actix::spawn(keep_app_server_state(
            ledger,
            project_id,
            self.node_id().map(str::to_string),
            states,
            self.shutdown_signal(),
        ));
        let addr = actor
            .on_change(move |state: AppServerState| {
                latest.send_replace(Some(state));
            })
            .start();
        servers.insert(project.id.clone(), addr.clone());
        addr
    }

    /// This daemon's node on a shared store (`None` on SQLite).
    pub fn node_id(&self) -> Option<&str> {
        self.lease.as_ref().map(|lease| lease.node_id.as_str())
    }

    /// The lease guard's mark every child of this daemon carries (shared store only).
    pub fn guard_mark(&self) -> Option<&str> {
        self.lease.as_ref().and_then(|lease| lease.child_mark())
    }

    /// The live app-server actors (for `status`).
    pub fn app_server_actors(&self) -> Vec<Addr<AppServerActor>> {
        self.app_servers
            .lock()
            .map(|servers| servers.values().cloned().collect())
            .unwrap_or_default()
    }

    /// No new prompt starts from now on (running ones go on).
    pub fn begin_drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Tells every worker to stop: running children are ended and their prompts requeued.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        // A write waiting for a store another program locks comes back now, unapplied (after
        // the signal, so whoever gets it back sees the shutdown): its worker keeps its events
        // in the spill journal before the daemon exits.
        self.ledger.stop_waiting();
    }

    /// The settings in effect now.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .map(|settings| settings.clone())
            .unwrap_or_default()
    }

    /// Reads the settings from the store and puts them in effect, slot limits included: after
    /// a change here, or told by another daemon of a shared store that one changed there.
    pub async fn reload_settings(&self) -> Result<(), String> {
        let settings = self
            .readers
            .read(Settings::load)
            .map_err(|error| error.to_string())?;
        let limits = slot_limits(&settings);
        self.replace_settings(settings);
        self.slots
            .set_limits(limits)
            .await
            .map_err(|error| error.to_string())
    }

    pub fn replace_settings(&self, settings: Settings) {
        if let Some(lease) = &self.lease {
            lease.set_length(settings.store_lease);
        }
        if let Ok(mut current) = self.settings.write() {
            *current = Arc::new(settings);
        }
    }

    /// Stores a worker's `slot.waiting` announcement: `events` are its deferred events with
    /// the `slot.waiting` event last, whose `held_by` is filled in here. Announcements made
    /// at once are stored together: their blockers asked of the slot manager in one message
    /// and their events written in one ledger write, published after it (a boot resuming
    /// 2,000 waiting sessions has them all announce 20 ms in; one by one they would hold up
    /// the daemon's first answers). Returns once they are stored; an error hands back the
    /// events not stored (a store locked past `store.lock_timeout_ms`), for the worker to
    /// keep deferred, in order.
    pub async fn announce_waiting(&self, events: Vec<NewEvent>) -> Result<(), Vec<NewEvent>> {
        let Some(session_id) = events.last().map(|event| event.session_id.clone()) else {
            return Ok(());
        };
        let announcer = self.announcer.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            actix::spawn(announce(
                self.ledger.clone(),
                self.slots.clone(),
                self.events.clone(),
                receiver,
            ));
            sender
        });
        let (reply, answer) = oneshot::channel();
        let announcement = Announcement {
            session_id,
            events,
            reply,
        };
        if let Err(mpsc::error::SendError(announcement)) = announcer.send(announcement) {
            return Err(announcement.events);
        }
        // No answer: the announcer stopped with the system; nothing is left to keep them.
        answer.await.unwrap_or(Ok(()))
    }

    /// Stores events that no session's worker tells (a worker keeps its own, in order with
    /// its run: `session::try_store_events`) and publishes them. Nothing is dropped for a
    /// store another program locks: the ledger waits up to `store.lock_timeout_ms`, and a
    /// write it gave up unapplied is made again (each try waits that long, so this does not
    /// spin), until it commits or the supervisor shuts down. An error means the events are
    /// not stored: the shutdown came first, the ledger stopped, or the write failed (an
    /// unknown session).
    pub async fn append_events(&self, events: Vec<NewEvent>) -> Result<Vec<Event>, LedgerError> {
        let mut write = AppendEvents { events };
        loop {
            match self.ledger.write_keeping(write).await {
                Ok(stored) => {
                    for event in &stored {
                        // No subscriber is not an error.
                        let _ = self.events.send(Arc::new(Published::new(event.clone())));
                    }
                    return Ok(stored);
                }
                Err(Unwritten {
                    error,
                    write: Some(kept),
                }) if error.is_transient() && !*self.shutdown.borrow() => {
                    tracing::warn!(%error, "events kept: trying their write again");
                    write = kept;
                }
                Err(unwritten) => return Err(unwritten.error),
            }
        }
    }
}

/// The slot manager's limits under these settings.
pub(crate) fn slot_limits(settings: &Settings) -> SlotLimits {
    SlotLimits {
        per_engine: settings.slots.clone(),
        default_per_engine: DEFAULT_SLOTS_PER_ENGINE,
        total: settings.slots_total,
    }
}

/// One worker's `slot.waiting` announcement ([`Shared::announce_waiting`]).
struct Announcement {
    session_id: String,
    /// Its deferred events, then the `slot.waiting` event.
    events: Vec<NewEvent>,
    /// `Err`: the events that were not stored, handed back.
    reply: oneshot::Sender<Result<(), Vec<NewEvent>>>,
}

/// The most announcements stored in one write.
const ANNOUNCE_BATCH: usize = 4_096;

/// The announcer: takes every announcement waiting now, asks the slot manager what blocks
/// each (in one message), stores all their events in one write and answers each worker. A
/// write that fails for another reason than a lock (a session gone meanwhile) is made again
/// one announcement at a time, so that one session's failure costs no other its events.
async fn announce(
    ledger: LedgerHandle,
    slots: SlotsHandle,
    published: broadcast::Sender<Arc<Published>>,
    mut announcements: mpsc::UnboundedReceiver<Announcement>,
) {
    let mut batch = Vec::new();
    while announcements.recv_many(&mut batch, ANNOUNCE_BATCH).await > 0 {
        let sessions = batch.iter().map(|a| a.session_id.clone()).collect();
        let blockers = slots.blockers(sessions).await.unwrap_or_default();
        for (announcement, blocker) in batch.iter_mut().zip(blockers) {
            if let Some(waiting) = announcement.events.last_mut() {
                waiting.payload["held_by"] = serde_json::to_value(blocker).unwrap_or_default();
            }
        }
        if batch.len() > 1 {
            let events = batch.iter().flat_map(|a| a.events.clone()).collect();
            match ledger.write_keeping(AppendEvents { events }).await {
                Ok(stored) => {
                    publish(&published, stored);
                    for announcement in batch.drain(..) {
                        let _ = announcement.reply.send(Ok(()));
                    }
                    continue;
                }
                Err(Unwritten {
                    error,
                    write: Some(_),
                }) if error.is_transient() => {
                    // Never ran: every worker keeps its own, in order.
                    for announcement in batch.drain(..) {
                        let _ = announcement.reply.send(Err(announcement.events));
                    }
                    continue;
                }
                Err(unwritten) => {
                    tracing::warn!(error = %unwritten.error, "slot announcements stored one by one");
                }
            }
        }
        for announcement in batch.drain(..) {
            let Announcement { events, reply, .. } = announcement;
            let answer = match ledger.write_keeping(AppendEvents { events }).await {
                Ok(stored) => {
                    publish(&published, stored);
                    Ok(())
                }
                Err(Unwritten {
                    write: Some(AppendEvents { events }),
                    ..
                }) => Err(events),
                Err(Unwritten { error, write: None }) => {
                    tracing::error!(%error, "events not stored");
                    Ok(())
                }
            };
            let _ = reply.send(answer);
        }
    }
}

/// Publishes stored events (no subscriber is not an error).
fn publish(published: &broadcast::Sender<Arc<Published>>, stored: Vec<Event>) {
    for event in stored {
        let _ = published.send(Arc::new(Published::new(event)));
    }
}

/// Stores an app-server child's state after each change, in order, and never drops one for a
/// locked store: one write at a time per project, the newest state replacing any not yet
/// stored (each is whole, so the last one stored is the truth), and a write the ledger gave
/// up past `store.lock_timeout_ms` made again with the newest state, until the shutdown.
/// Ends with the actor (its sender).
async fn keep_app_server_state(
    ledger: LedgerHandle,
    project_id: String,
    node_id: Option<String>,
    mut states: watch::Receiver<Option<AppServerState>>,
    shutdown: watch::Receiver<bool>,
) {
    while states.changed().await.is_ok() {
        loop {
            let Some(state) = states.borrow_and_update().clone() else {
                break;
            };
            let state = state.to_json(node_id.as_deref());
            let project_id = project_id.clone();
            match ledger.write(SaveAppServer { project_id, state }).await {
                Ok(()) => break,
                Err(error) if error.is_transient() && !*shutdown.borrow() => {
                    tracing::warn!(%error, "app-server state kept: trying its write again");
                }
                Err(error) => {
                    tracing::error!(%error, "app-server state not stored");
                    break;
                }
            }
        }
    }
}

/// The supervisor actor. Private: see `crate::Corral`.
pub struct Supervisor {
    shared: Arc<Shared>,
    sessions: HashMap<String, Addr<SessionActor>>,
}

impl Supervisor {
    pub fn new(shared: Arc<Shared>) -> Self {
        Supervisor {
            shared,
            sessions: HashMap::new(),
        }
    }

    fn actor(&mut self, session_id: &str) -> Addr<SessionActor> {
        if let Some(addr) = self
            .sessions
            .get(session_id)
            .filter(|addr| addr.connected())
        {
            return addr.clone();
        }
        let addr = SessionActor::new(session_id.to_string(), self.shared.clone()).start();
        self.sessions.insert(session_id.to_string(), addr.clone());
        addr
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

/// Starts (or hands to) the session's worker a prompt that is `running` in the store.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Dispatch(pub Prompt);

impl Handler<Dispatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, Dispatch(prompt): Dispatch, _: &mut Context<Self>) {
        let actor = self.actor(&prompt.session_id);
        actor.do_send(StartWork(prompt));
    }
}

/// Ends a running prompt of a session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRunning {
    pub session_id: String,
    pub prompt_id: String,
}

impl Handler<CancelRunning> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CancelRunning, _: &mut Context<Self>) {
        // Made if need be: a prompt resumed at boot may not have its actor yet (the resume
        // is dispatched in steps, see `resume`); the cancel then waits in the new actor for
        // the prompt's worker, which ends it at once.
        let actor = self.actor(&message.session_id);
        actor.do_send(CancelPrompt(message.prompt_id));
    }
}

/// How many session actors exist (for status and tests).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountSessions;

impl Handler<CountSessions> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: CountSessions, _: &mut Context<Self>) -> usize {
        self.sessions.len()
    }
}

/// How many session actors have a worker running now: the count the workers keep
/// ([`Shared::working`]), so asking costs the same for 2 sessions or 2,000.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountWorking;

impl Handler<CountWorking> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: CountWorking, _: &mut Context<Self>) -> usize {
        self.shared.working()
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
pub struct Boot;

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
                        claim: shared.lease.as_ref().map(|lease| lease.claim()),
                        write: CurrentOrNext {
                            session_ids: recovered.sessions.clone(),
                            claimer: shared.claimer(),
                        },
                    })
                    .await
                    .map_err(|error| error.to_string())?;
                shared.claim_wanted.notify_one();
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
                actix::spawn(resume(ctx.address(), prompts));
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
async fn resume(supervisor: Addr<Supervisor>, prompts: Vec<Prompt>) {
    let mut prompts = prompts.into_iter().peekable();
    while prompts.peek().is_some() {
        for prompt in prompts.by_ref().take(RESUME_STEP) {
            supervisor.do_send(Dispatch(prompt));
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
        .lease
        .as_ref()
        .map(|lease| lease.node_id.clone())
        .unwrap_or_default();
    let alone = shared.lease.is_none();
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
    // An app-server child another node started is that node's (a state from before nodes
    // were recorded was the one daemon's); on a shared store a project whose child is not
    // known to be this node's is not looked for by its environment either, which on a host
    // with two homes would find the other home's.
    servers.retain(|state| {
        state["node_id"]
            .as_str()
            .is_none_or(|node| alone || node == node_id)
    });
    if !alone {
        projects.retain(|project| {
            servers
                .iter()
                .any(|state| state["project_id"].as_str() == Some(project.id.as_str()))
        });
    }
    // Each run: its group (when still its own) and its id in the environment.
    let mut marks: Vec<process::Mark> = runs
        .iter()
        .map(|run| {
            process::Mark::of_leader(
                run.pid.map(|pid| pid as i32),
                run.pid_start.map(|start| start as u64),
                RUN_ID_ENV,
                &run.id,
            )
        })
        .collect();
    // Each project's app-server child: the one recorded, and one spawned before its state
    // was (found by the project's id in its environment).
    for project in &projects {
        let stored = servers
            .iter()
            .find(|state| state["project_id"].as_str() == Some(project.id.as_str()));
        let pid = stored.and_then(|state| state["pid"].as_i64());
        let start = stored.and_then(|state| state["pid_start"].as_u64());
        marks.push(process::Mark::of_leader(
            pid.map(|pid| pid as i32),
            start,
            APP_SERVER_ENV,
            &project.id,
        ));
    }
    // What a worktree's setup command started (its shell died with the supervisor), found by
    // the session's id in the environment; after the runs' and app-servers' marks, whose
    // places in `gone_at` are read below.
    marks.extend(setting_up.iter().map(|session_id| process::Mark {
        group: None,
        env: Some((SETUP_ENV.to_string(), session_id.clone())),
        since: None,
        born: None,
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
        .filter(|state| !state["pid"].is_null())
        .filter_map(|state| {
            let project_id = state["project_id"].as_str()?.to_string();
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
    forget_dead_kept(shared).await;
    Ok(recovered)
}

/// Forgets the kept background processes (`keep_background`) that died since they were kept,
/// so that the list `status` filters stays short. A kept one that lives is left alone: it
/// outlived its run on purpose. On a shared store only this host's are looked at (a pid of
/// another host's means nothing here).
async fn forget_dead_kept(shared: &Shared) {
    let node = shared.node_id();
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
fn recovered_app_server(state: &serde_json::Value, gone_at: i64) -> serde_json::Value {
    let mut state = state.clone();
    let closed = serde_json::json!({
        "pid": state["pid"],
        "generation": state["generation"],
        "status": "ended by recovery",
        "close_source": "recovery",
        "reason": "the daemon that ran it died; a new one ended its process group",
        "at": gone_at,
    });
    state["pid"] = serde_json::Value::Null;
    state["pid_start"] = serde_json::Value::Null;
    state["status"] = serde_json::json!("stopped");
    state["last_exit"] = closed.clone();
    let mut recent = state["recent"].as_array().cloned().unwrap_or_default();
    recent.push(serde_json::json!({ "at": gone_at, "kind": "recovered", "detail": closed }));
    let keep = recent
        .len()
        .saturating_sub(super::app_server::RECENT_EVENTS);
    state["recent"] = serde_json::Value::Array(recent.split_off(keep));
    state
}
