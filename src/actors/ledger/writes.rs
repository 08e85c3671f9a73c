//! The ledger's writes: one type per write (`grep EnqueuePrompt` finds it here), each a
//! [`LedgerWrite`]: what it does in the store's transaction, and what it answers once the
//! batch committed. Most are made by the `ledger_write!` macro below.

use super::*;

// ---------------------------------------------------------------------------------------------
// The writes of the exec ledger.

/// Records an exec when it starts (or whole, when it carries its completion).
pub struct RecordExec(pub NewExec);

impl LedgerWrite for RecordExec {
    type Output = ();
    fn apply(&self, connection: &Conn) -> Result<(), StoreError> {
        Ok(exec::insert(connection, &self.0)?)
    }
}

/// Records an exec whose end is known, completing its row if its start is stored already
/// (see `exec::record_whole`).
pub struct RecordWholeExec(pub NewExec);

impl LedgerWrite for RecordWholeExec {
    type Output = ();
    fn apply(&self, connection: &Conn) -> Result<(), StoreError> {
        Ok(exec::record_whole(connection, &self.0)?)
    }
}

/// Completes an exec. Replies whether the row was still open.
pub struct CompleteExec {
    pub id: String,
    pub completion: ExecCompletion,
}

impl LedgerWrite for CompleteExec {
    type Output = bool;
    fn apply(&self, connection: &Conn) -> Result<bool, StoreError> {
        Ok(exec::complete(connection, &self.id, &self.completion)?)
    }
}

/// Closes open execs whose process is gone as `lost`. Replies how many were closed.
pub struct CloseLostExecs {
    pub ids: Vec<String>,
    pub at: i64,
}

impl LedgerWrite for CloseLostExecs {
    type Output = usize;
    fn apply(&self, connection: &Conn) -> Result<usize, StoreError> {
        Ok(exec::close_lost(connection, &self.ids, self.at)?)
    }
}

// ---------------------------------------------------------------------------------------------
// The writes of the supervisor (projects, sessions, prompts, runs, events, settings).

/// Defines a write: a struct of the given fields whose `apply` runs `$body` with the
/// connection bound to `$connection` and the fields to `$this`.
macro_rules! ledger_write {
    ($(#[$doc:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } -> $output:ty,
     |$this:ident, $connection:ident| $body:expr) => {
        $(#[$doc])*
        pub struct $name { $(pub $field: $ty),* }

        impl LedgerWrite for $name {
            type Output = $output;
            fn apply(&self, $connection: &Conn) -> Result<$output, StoreError> {
                let $this = self;
                Ok($body?)
            }
        }
    };
}

ledger_write!(
    /// Creates a project (and registers its execution groups as locking ones if new); `None`
    /// when one of that name exists already (looked for under the write lock, so that two
    /// adds of one name at once are told so, not a constraint's words).
    CreateProject { project: projects::NewProject } -> Option<projects::Project>,
    |this, connection| projects::insert_project_unless_named(connection, &this.project)
);

ledger_write!(
    /// Declares a group locking (serializes its projects) or a label only.
    SetGroupLocking { name: String, locking: bool } -> (),
    |this, connection| projects::set_group_locking(connection, &this.name, this.locking)
);

ledger_write!(
    /// Removes an execution group no project is in.
    RemoveGroup { name: String } -> projects::GroupRemoved,
    |this, connection| projects::remove_group(connection, &this.name)
);

ledger_write!(
    /// Opens a session.
    CreateSession { session: sessions::NewSession } -> sessions::Session,
    |this, connection| sessions::insert_session(connection, &this.session)
);

ledger_write!(
    /// Deletes a session just opened whose worktree could not be made, while nothing refers
    /// to it; replies whether it was deleted.
    ForgetNewSession { session_id: String } -> bool,
    |this, connection| sessions::forget_new_session(connection, &this.session_id)
);

ledger_write!(
    /// Moves a session's worktree to another state; replies with the session.
    SetWorktreeState { session_id: String, state: sessions::WorktreeState } -> Option<sessions::Session>,
    |this, connection| sessions::set_worktree_state(connection, &this.session_id, this.state)
);

ledger_write!(
    /// Queues a prompt: `running` when the session is free (and, on a shared store, this
    /// daemon may take it), else `queued` (one transaction). On a shared store a prompt left
    /// queued is announced to every daemon (`corral_work`), which may claim it.
    /// `total`: `slots.total`, which holds across the daemons of a shared store.
    EnqueuePrompt { prompt: prompts::NewPrompt, claimer: prompts::ClaimBy, total: Option<usize> } -> Result<prompts::Enqueued, prompts::NotQueued>,
    |this, connection| {
        let mut claimer = this.claimer.clone();
        if let prompts::ClaimBy::Daemon(claim) = &claimer {
            // A lease changing hands: the prompt is queued for whoever can take it. (The
            // total across the daemons is the claim's to check, `total`.)
            if !daemons::fence_holds(connection, claim)? {
                claimer = prompts::ClaimBy::Nobody;
            }
        }
        let enqueued = prompts::enqueue(connection, &this.prompt, claimer.as_claimer(), this.total)?;
        // Left for others when this daemon did not take it (it could not, or the session's
        // worktree is on another daemon's host, or an older prompt has the lock's turn): a
        // prompt queued behind its session's running one is that runner's next, and wakes
        // nobody.
        if matches!(&enqueued, Ok(done) if done.started.is_none() && !done.behind_running)
            && claimer != prompts::ClaimBy::Alone
            && connection.dialect() == Dialect::Postgres
        {
            listen::notify(connection, listen::WORK, "q")?;
        }
        Ok::<_, StoreError>(enqueued)
    }
);

ledger_write!(
    /// Ends a prompt and claims the session's next queued one, atomically. `announce`: other
    /// daemons share the store and hear of an end that claimed nothing (a lock the prompt
    /// held, or its slot of the total, may be what their queued prompts wait for). `total`:
    /// `slots.total` then (its last slot goes to the oldest waiter of every daemon).
    FinishPrompt {
        prompt_id: String,
        session_id: String,
        status: prompts::PromptStatus,
        error: Option<String>,
        answer: Option<String>,
        denied: i64,
        claimer: prompts::ClaimBy,
        announce: bool,
        total: Option<usize>,
    } -> prompts::Finished,
    |this, connection| {
        // Its project may pause on a failure: before the claim below, which it holds.
        let paused = match this.status {
            prompts::PromptStatus::Failed => {
                pauses::pause_on_failure(connection, &this.session_id, &this.prompt_id)?
            }
            _ => None,
        };
        if paused.is_some() {
            tell_pauses_changed(connection)?;
        }
        let mut finished = prompts::finish_and_claim_next(
            connection,
            &this.prompt_id,
            &this.session_id,
            this.status,
            this.error.as_deref(),
            this.answer.as_deref(),
            this.denied,
            this.claimer.as_claimer(),
            this.total,
        )?;
        finished.paused = paused;
        // A lock this prompt held across daemons is free, or its slot of `slots.total`:
        // those waiting may claim. Not when its session took its next prompt here: the slot
        // and the session's locks stay taken (the claim let an older waiter of another
        // daemon go first, `prompts::claim_next`, and then took nothing).
        // So may the heads its end let go that were not claimed here.
        if (this.announce && finished.next.is_none()) || finished.released.unclaimed {
            listen::notify(connection, listen::WORK, "e")?;
        }
        Ok::<_, StoreError>(finished)
    }
);

ledger_write!(
    /// Pauses a scope (`store::pauses`); replies with the pauses in force. Other daemons of a
    /// shared store hear of it, so their workers hold too.
    SetPause { scope: pauses::PauseScope, reason: String, hard: bool } -> Vec<pauses::Pause>,
    |this, connection| {
        let now = pauses::pause(connection, &this.scope, &this.reason, this.hard)?;
        tell_pauses_changed(connection)?;
        Ok::<_, StoreError>(now)
    }
);

ledger_write!(
    /// Lifts a scope's pause and claims, for `claimer`, the queued prompts it held; replies
    /// whether there was one, the prompts now running, and the pauses still in force.
    LiftPause { scope: pauses::PauseScope, claimer: prompts::ClaimBy, total: Option<usize> }
        -> (bool, Vec<prompts::Prompt>, Vec<pauses::Pause>),
    |this, connection| {
        let (lifted, started) =
            pauses::lift(connection, &this.scope, this.claimer.as_claimer(), this.total)?;
        if lifted {
            tell_pauses_changed(connection)?;
        }
        Ok::<_, StoreError>((lifted, started, pauses::pauses(connection)?))
    }
);

ledger_write!(
    /// Claims, for `claimer`, the queued heads due at `now` (`actors::due`); replies with them,
    /// now running. A store's only daemon's: on a shared store the claims take them.
    ClaimDue { now: i64, claimer: prompts::ClaimBy } -> Vec<prompts::Prompt>,
    |this, connection| Ok::<_, StoreError>(prompts::claim_due(connection, this.now, this.claimer.as_claimer())?)
);

ledger_write!(
    /// Stores a schedule (`store::schedules`); other daemons of a shared store read the next
    /// firing again.
    AddSchedule { schedule: schedules::NewSchedule, now: i64 } -> schedules::Schedule,
    |this, connection| {
        let added = schedules::insert(connection, &this.schedule, this.now)?;
        tell_schedules_changed(connection)?;
        Ok::<_, StoreError>(added)
    }
);

ledger_write!(
    /// Pauses a schedule, or resumes it to fire next at `next_at`; `None`: no such schedule.
    PauseSchedule { id: String, paused: bool, next_at: Option<i64> } -> Option<schedules::Schedule>,
    |this, connection| {
        let changed = schedules::set_paused(connection, &this.id, this.paused, this.next_at)?;
        tell_schedules_changed(connection)?;
        Ok::<_, StoreError>(changed)
    }
);

ledger_write!(
    /// Removes a schedule and its firings; whether there was one.
    RemoveSchedule { id: String } -> bool,
    |this, connection| schedules::remove(connection, &this.id)
);

ledger_write!(
    /// Takes the firings due at `now` (the schedules' clock) and moves each schedule to its
    /// next time (`schedules::take_due`): of several daemons, one takes each.
    TakeFirings { now: i64 } -> Vec<schedules::Taken>,
    |this, connection| schedules::take_due(connection, this.now)
);

ledger_write!(
    /// Records what came of a firing that was being sent.
    EndFiring { firing: schedules::Firing } -> (),
    |this, connection| schedules::end_firing(connection, &this.firing)
);

ledger_write!(
    /// Fails the firings a stopped daemon was sending (a store's only daemon, at its start).
    AbandonFirings {} -> u64,
    |_this, connection| schedules::abandon_sending(connection)
);

/// The `corral_work` notice that a schedule was added or resumed: every daemon's timer reads
/// the next firing again (any work notice does; this one names no queue).
pub const SCHEDULE_NOTICE: &str = "t";

fn tell_schedules_changed(connection: &Conn) -> Result<(), StoreError> {
    if connection.dialect() == Dialect::Postgres {
        listen::notify(connection, listen::WORK, SCHEDULE_NOTICE)?;
    }
    Ok(())
}

/// The `corral_work` notice that the pauses changed: every daemon reads them again, and
/// claims what a lifted pause held.
pub const PAUSE_NOTICE: &str = "z";

/// Tells the other daemons of a shared store that the pauses changed ([`PAUSE_NOTICE`]).
fn tell_pauses_changed(connection: &Conn) -> Result<(), StoreError> {
    if connection.dialect() == Dialect::Postgres {
        listen::notify(connection, listen::WORK, PAUSE_NOTICE)?;
    }
    Ok(())
}

ledger_write!(
    /// Runs a failed or cancelled prompt again in place, claimed at once when its session is
    /// free (see `prompts::retry`).
    RetryPrompt { prompt_id: String, text: Option<String>, claimer: prompts::ClaimBy, total: Option<usize> }
        -> Result<(prompts::Prompt, Option<prompts::Prompt>), prompts::PromptStatus>,
    |this, connection| prompts::retry(connection, &this.prompt_id, this.text.as_deref(), this.claimer.as_claimer(), this.total)
);

ledger_write!(
    /// Replaces a queued prompt's text.
    EditPrompt { prompt_id: String, text: String } -> Result<prompts::Prompt, prompts::PromptStatus>,
    |this, connection| prompts::edit(connection, &this.prompt_id, &this.text)
);

ledger_write!(
    /// Cancels a prompt if it is queued, claiming for `claimer` what it held (what runs after
    /// it, its session's next); says whether it runs or already ended.
    CancelPrompt { prompt_id: String, claimer: prompts::ClaimBy } -> Option<(prompts::CancelFound, dependencies::Released)>,
    |this, connection| {
        let found = prompts::cancel_prompt(connection, &this.prompt_id, this.claimer.as_claimer())?;
        if connection.dialect() == Dialect::Postgres {
            match &found {
                // On a shared store the prompt may run on another daemon: every daemon hears
                // it, the one that runs it ends it.
                Some((prompts::CancelFound::Running { session_id }, _)) => {
                    let payload = format!("{}{session_id}:{}", CANCEL_NOTICE, this.prompt_id);
                    listen::notify(connection, listen::WORK, &payload)?;
                }
                // What it held that this daemon did not take is the others' to claim.
                Some((prompts::CancelFound::Dequeued { .. }, _)) => {
                    listen::notify(connection, listen::WORK, "e")?;
                }
                _ => {}
            }
        }
        Ok::<_, StoreError>(found)
    }
);

/// The start of a `corral_work` notice asking the daemon that runs a prompt to end it:
/// `c:<session id>:<prompt id>`.
pub const CANCEL_NOTICE: &str = "c:";

/// The start of a `corral_work` notice that a person answered an approval, for the daemon
/// whose run waits for it: `p:<approval id>`.
pub const APPROVAL_NOTICE: &str = "p:";

ledger_write!(
    /// The prompts the sessions' workers run now: for each session, the running one or the
    /// next queued one. One transaction for all (a boot with thousands of sessions waiting
    /// would otherwise wait for as many commits in a row).
    CurrentOrNext { session_ids: Vec<String>, claimer: prompts::ClaimBy } -> Vec<prompts::Prompt>,
    |this, connection| prompts::current_or_next(connection, &this.session_ids, this.claimer.as_claimer())
);

ledger_write!(
    /// Claims queued prompts this daemon can start now (shared store); replies with them.
    /// Refused when the daemon's lease no longer holds.
    ClaimWork { claim: daemons::Claim, serves: Vec<String>, room: claims::Room } -> Vec<prompts::Prompt>,
    |this, connection| {
        hold_fence(connection, &this.claim)?;
        Ok::<_, StoreError>(claims::claim_work(connection, &this.claim, &this.serves, &this.room)?)
    }
);

ledger_write!(
    /// Takes back the prompts of daemons whose lease ran out (shared store), closing their
    /// runs and telling it; replies with them and the events told, and announces them to
    /// every daemon (`corral_work`). Refused when this daemon's own lease no longer holds.
    Rescue { claim: daemons::Claim } -> (Vec<claims::Rescued>, Vec<events::Event>),
    |this, connection| {
        hold_fence(connection, &this.claim)?;
        let rescued = claims::rescue(connection)?;
        if !rescued.0.is_empty() {
            listen::notify(connection, listen::WORK, "r")?;
        }
        Ok::<_, StoreError>(rescued)
    }
);

/// A write about a prompt claimed on a shared store, carrying its claim: applied only while
/// the claim holds (its daemon's epoch unchanged, its lease not run out), else refused with
/// [`StoreError::Fenced`] and nothing of it written. The check runs in the write's own
/// savepoint, under the store's write lock, so no rescue can come between it and the commit.
/// Without a claim (a SQLite store) it is the write itself.
pub struct Fenced<W> {
    pub claim: Option<daemons::Claim>,
    pub write: W,
}

impl<W: LedgerWrite> LedgerWrite for Fenced<W> {
    type Output = W::Output;
    fn apply(&self, connection: &Conn) -> Result<W::Output, StoreError> {
        if let Some(claim) = &self.claim {
            hold_fence(connection, claim)?;
        }
        self.write.apply(connection)
    }
}

/// `Ok` while `claim` holds, else [`StoreError::Fenced`] (see [`Fenced`]).
fn hold_fence(connection: &Conn, claim: &daemons::Claim) -> Result<(), StoreError> {
    match daemons::fence_holds(connection, claim)? {
        true => Ok(()),
        false => Err(StoreError::Fenced {
            node_id: claim.node_id.clone(),
            epoch: claim.epoch,
        }),
    }
}

ledger_write!(
    /// Writes a run's row before its child is spawned, bumping the session's provider
    /// generation; replies with the exec the child gets as its parent (the driver's, else
    /// the run's default).
    StartRun { run: runs::NewRun } -> Option<runs::RunDriver>,
    |this, connection| runs::insert_run(connection, &this.run)
);

ledger_write!(
    /// Records the spawned child's pid (its process group) and start time.
    RunSpawned { run_id: String, pid: u32, pid_start: Option<u64> } -> (),
    |this, connection| runs::run_spawned(connection, &this.run_id, this.pid, this.pid_start)
);

ledger_write!(
    /// Closes a run with its exit, class of failure and retry decision.
    EndRun { end: runs::RunEnd } -> (),
    |this, connection| runs::end_run(connection, &this.end)
);

ledger_write!(
    /// Sets (or forgets, with `None`) the engine's thread id of a session.
    SetThread { session_id: String, thread_id: Option<String>, resume_point: Option<String> } -> (),
    |this, connection| sessions::set_thread(
        connection,
        &this.session_id,
        this.thread_id.as_deref(),
        this.resume_point.as_deref(),
    )
);

ledger_write!(
    /// Sets a generated title unless a person set one; replies whether it was set.
    SetGeneratedTitle { session_id: String, title: String } -> bool,
    |this, connection| sessions::set_generated_title(connection, &this.session_id, &this.title)
);

ledger_write!(
    /// Appends events, numbered per session; replies with them numbered.
    AppendEvents { events: Vec<events::NewEvent> } -> Vec<events::Event>,
    |this, connection| events::append_events(connection, &this.events)
);

ledger_write!(
    /// Records how far a run's stored events cover its engine's output (with the events, in
    /// one commit: see [`runs::StoredThrough`]).
    MarkStored { run_id: String, through: runs::StoredThrough } -> (),
    |this, connection| runs::set_stored_through(connection, &this.run_id, &this.through)
);

ledger_write!(
    /// Boot reconciliation, once the leftover runs' processes are gone: closes each run as
    /// interrupted at the moment given (when its processes were seen gone), keeps the dead
    /// app-server children's states as they truly are now, lists the sessions with work.
    Recover {
        node_id: String,
        ended: Vec<(String, i64)>,
        app_servers: Vec<(String, processes::AppServerState)>,
        told: runs::Told,
    } -> runs::Recovered,
    |this, connection| {
        for (project_id, state) in &this.app_servers {
            processes::save_app_server(connection, project_id, state)?;
        }
        runs::recover(connection, &this.node_id, &this.ended, &this.told)
    }
);

/// Stores one spill file's events at boot (`store::spill`), in order, numbered as any
/// events; each part of the file (the events of one shutdown, sharing an `after_seq`) is
/// skipped when the session's event after that number is its first event: a boot killed
/// after this write and before it removed the file stored it already. Replies how many
/// events were stored and how many skipped.
pub struct IngestSpill {
    pub events: Vec<crate::store::spill::SpilledEvent>,
}

impl LedgerWrite for IngestSpill {
    type Output = (usize, usize);
    fn apply(&self, connection: &Conn) -> Result<(usize, usize), StoreError> {
        let (mut stored, mut skipped) = (0, 0);
        let mut events = self.events.iter().peekable();
        while let Some(first) = events.next() {
            let mut part = vec![first];
            while let Some(next) = events.next_if(|next| next.after_seq == part[0].after_seq) {
                part.push(next);
            }
            let done = match part[0].after_seq {
                Some(seq) => events::event_is(connection, seq + 1, &part[0].event())?,
                None => false,
            };
            if done {
                skipped += part.len();
                continue;
            }
            stored += part.len();
            events::append_events_at(
                connection,
                part.iter().map(|spilled| (spilled.event(), spilled.at)),
            )?;
        }
        Ok((stored, skipped))
    }
}

ledger_write!(
    /// Records the processes a run left that its project keeps; forgets gone ones.
    KeepProcesses {
        kept: Vec<processes::KeptProcess>,
        forget: Vec<(i64, i64)>,
    } -> (),
    |this, connection| processes::keep_processes(connection, &this.kept, &this.forget)
);

ledger_write!(
    /// Sets a setting (`None` removes it, back to its default). On a shared store every
    /// daemon hears of it (`corral_work`, [`SETTINGS_NOTICE`]) and puts it in effect: the
    /// limits that hold across daemons (`slots.total`) hold with the same value everywhere.
    SetSetting { name: String, value: Option<String> } -> (),
    |this, connection| {
        settings::set_setting(connection, &this.name, this.value.as_deref())?;
        if connection.dialect() == Dialect::Postgres {
            listen::notify(connection, listen::WORK, SETTINGS_NOTICE)?;
        }
        Ok::<_, StoreError>(())
    }
);

/// A `corral_work` notice telling every daemon that a setting changed in the store.
pub const SETTINGS_NOTICE: &str = "s";

ledger_write!(
    /// Asks daemon `to_node` for a steer or a compact (`request`, JSON) and tells it
    /// (`corral_work`, [`ASK_NOTICE`]).
    PutAsk { id: String, to_node: String, from_node: String, request: String } -> (),
    |this, connection| {
        asks::put(connection, &this.id, &this.to_node, &this.from_node, &this.request)?;
        if connection.dialect() == Dialect::Postgres {
            let payload = format!("{ASK_NOTICE}{}:{}", this.to_node, this.id);
            listen::notify(connection, listen::WORK, &payload)?;
        }
        Ok::<_, StoreError>(())
    }
);

ledger_write!(
    /// Answers an ask and tells its asker (`corral_work`, [`ANSWER_NOTICE`]); `false` when
    /// its asker gave up on it (or it was answered already).
    AnswerAsk { id: String, answer: String } -> bool,
    |this, connection| {
        let Some(ask) = asks::answer(connection, &this.id, &this.answer)? else {
            return Ok(false);
        };
        if connection.dialect() == Dialect::Postgres {
            let payload = format!("{ANSWER_NOTICE}{}:{}", ask.from_node, ask.id);
            listen::notify(connection, listen::WORK, &payload)?;
        }
        Ok::<_, StoreError>(true)
    }
);

ledger_write!(
    /// The asker is done with an ask: replies with it (its answer, if any) and deletes it.
    TakeAsk { id: String } -> Option<asks::AskRow>,
    |this, connection| asks::take(connection, &this.id)
);

/// A `corral_work` notice asking a daemon for something: `a:<its node>:<ask id>`.
pub const ASK_NOTICE: &str = "a:";

/// A `corral_work` notice telling an asker its answer is stored: `A:<its node>:<ask id>`.
pub const ANSWER_NOTICE: &str = "A:";

ledger_write!(
    /// Claims a session's driver for an exec; `is_live` tells whether a holder still runs.
    ClaimDriver {
        session_id: String,
        exec_id: String,
        take_over: bool,
        is_live: Box<dyn Fn(&str) -> bool + Send>,
    } -> Result<drivers::DriverClaim, drivers::ClaimRefused>,
    |this, connection| drivers::claim_driver(
        connection,
        &this.session_id,
        &this.exec_id,
        this.take_over,
        &*this.is_live,
    )
);

ledger_write!(
    /// Releases a driver claim of one generation (a stale one changes nothing).
    ReleaseDriver { session_id: String, generation: i64 } -> Option<drivers::DriverClaim>,
    |this, connection| drivers::release_driver(connection, &this.session_id, this.generation)
);

ledger_write!(
    /// Puts a running prompt back in the queue (daemon shutdown), or ends it cancelled if its
    /// cancel was asked.
    RequeuePrompt { prompt_id: String, again: Option<prompts::ClaimBy> } -> (prompts::PutBack, Option<prompts::Prompt>),
    |this, connection| prompts::requeue(connection, &this.prompt_id, this.again.as_ref().map(prompts::ClaimBy::as_claimer))
);

ledger_write!(
    /// Changes a project's settings or archives it.
    ChangeProject { id: String, change: projects::ProjectChange } -> Option<projects::Project>,
    |this, connection| projects::change_project(connection, &this.id, &this.change)
);

ledger_write!(
    /// Renames (a human title), sets the policy of (`Some(None)`: back to the project's) or
    /// archives a session.
    ChangeSession { id: String, title: Option<String>, policy: Option<Option<crate::engine::Policy>>, archive: bool } -> Option<sessions::Session>,
    |this, connection| sessions::change_session(connection, &this.id, this.title.as_deref(), this.policy, this.archive)
);

ledger_write!(
    /// Stores what an engine asks a person under `ask` (with its `approval.requested`, in
    /// the worker's events: `Worker::write_events`).
    PutApproval { approval: approvals::Approval } -> (),
    |this, connection| approvals::insert(connection, &this.approval)
);

/// The `approval.answered` event of an approval answered now.
fn approval_answered(approval: &approvals::Approval) -> events::NewEvent {
    let told = crate::events::ApprovalTold {
        approval: serde_json::to_value(approval).unwrap_or_default(),
    };
    events::NewEvent::new(
        approval.session_id.clone(),
        approval.prompt_id.clone(),
        approval.run_id.clone(),
        crate::events::Payload::ApprovalAnswered(told),
    )
}

ledger_write!(
    /// Answers a pending approval, once, with its `approval.answered`; a second answer is
    /// told the first ([`approvals::Answered::Before`]) and changes nothing. On a shared store
    /// the daemons are told ([`APPROVAL_NOTICE`]): the run that asked may be another's.
    AnswerApproval { id: String, answer: approvals::Answer } -> (approvals::Answered, Vec<events::Event>),
    |this, connection| {
        let answered = approvals::answer(connection, &this.id, &this.answer)?;
        let told = match &answered {
            approvals::Answered::Now(approval) => {
                if connection.dialect() == Dialect::Postgres {
                    let payload = format!("{APPROVAL_NOTICE}{}", approval.id);
                    listen::notify(connection, listen::WORK, &payload)?;
                }
                events::append_events(connection, &[approval_answered(approval)])?
            }
            _ => Vec::new(),
        };
        Ok::<_, StoreError>((answered, told))
    }
);

ledger_write!(
    /// Denies what a run left pending when it ended (or, `run_id` `None`, what this daemon's
    /// runs of before left: at boot), each with its `approval.answered`.
    DenyLeftApprovals { run_id: Option<String>, node_id: Option<String>, reason: String } -> Vec<events::Event>,
    |this, connection| {
        let denied = approvals::deny_left(
            connection,
            this.run_id.as_deref(),
            this.node_id.as_deref(),
            &this.reason,
        )?;
        let told: Vec<events::NewEvent> = denied.iter().map(approval_answered).collect();
        Ok::<_, StoreError>(events::append_events(connection, &told)?)
    }
);

ledger_write!(
    /// Finds or creates the wave of that name in a repository; replies with its id.
    WaveNamed { name: String, repo: Option<String> } -> String,
    |this, connection| sessions::wave_named(connection, &this.name, this.repo.as_deref())
);

ledger_write!(
    /// Keeps an app-server child's state (for `status` across daemon restarts).
    SaveAppServer { project_id: String, state: processes::AppServerState } -> (),
    |this, connection| processes::save_app_server(connection, &this.project_id, &this.state)
);

ledger_write!(
    /// Records a compaction on the session; replies with the session.
    RecordCompaction {
        session_id: String,
        messages: i64,
        characters: i64,
        reset_thread: bool,
    } -> Option<sessions::Session>,
    |this, connection| sessions::record_compaction(
        connection,
        &this.session_id,
        this.messages,
        this.characters,
        this.reset_thread,
    )
);

/// A write and the events that describe it, in one savepoint: the events are numbered and
/// stored only if the write succeeds, and both reach the store in the same commit (one commit
/// on a worker's path instead of two). Replies with the write's output and the stored events,
/// for the caller to publish.
pub struct WithEvents<W> {
    pub write: W,
    pub events: Vec<events::NewEvent>,
}

impl<W: LedgerWrite> LedgerWrite for WithEvents<W> {
    type Output = (W::Output, Vec<events::Event>);
    fn apply(&self, connection: &Conn) -> Result<Self::Output, StoreError> {
        let output = self.write.apply(connection)?;
        let events = events::append_events(connection, &self.events)?;
        Ok((output, events))
    }
}

/// Two writes in one savepoint (both or neither), in order.
pub struct Both<A, B>(pub A, pub B);

impl<A: LedgerWrite, B: LedgerWrite> LedgerWrite for Both<A, B> {
    type Output = (A::Output, B::Output);
    fn apply(&self, connection: &Conn) -> Result<Self::Output, StoreError> {
        let first = self.0.apply(connection)?;
        Ok((first, self.1.apply(connection)?))
    }
}

/// A write that may have nothing to do.
impl<W: LedgerWrite> LedgerWrite for Option<W> {
    type Output = Option<W::Output>;
    fn apply(&self, connection: &Conn) -> Result<Self::Output, StoreError> {
        self.as_ref()
            .map(|write| write.apply(connection))
            .transpose()
    }
}
