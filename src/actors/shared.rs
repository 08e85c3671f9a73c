//! What the supervisor, the session actors, the claimer and the ask waiter share
//! ([`Shared`]): named parts, each cloneable on its own so that a component is given the ones
//! it needs (the worktree operations get [`Worktrees`](super::worktree::Worktrees), the
//! relay a [`Publisher`]): the ledger's and the slot manager's handles, the readers, the
//! settings ([`SettingsCell`]), the events ([`Publisher`]), the life cycle ([`Life`]), the
//! coordination with other daemons ([`Coordination`]), the app-server children
//! ([`AppServers`]) and the `git` worktree isolation uses ([`GitFinder`]). Kept apart from the
//! supervisor so that the actors it starts depend on what they share, not on the supervisor.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::app_servers::AppServers;
use super::coordination::{Alone, AmongOthers, Coordination};
use super::ledger::LedgerHandle;
use super::life::Life;
use super::notifier::Notifier;
use super::publisher::Publisher;
use super::slots::{SlotLimits, SlotsHandle};
use super::worktree::Worktrees;
use crate::store::pauses::{Pause, PauseSet};
use crate::store::settings::{Settings, DEFAULT_SLOTS_PER_ENGINE};
use crate::store::ReaderPool;
use tokio::sync::watch;

/// The supervisor's parts, as every session actor and the supervisor's helpers hold them.
pub struct Shared {
    /// `CORRAL_HOME`, given to every engine child.
    pub home: PathBuf,
    pub ledger: LedgerHandle,
    pub slots: SlotsHandle,
    pub readers: Arc<ReaderPool>,
    pub settings: SettingsCell,
    /// Stores the events no worker tells, and publishes every stored event.
    pub publisher: Publisher,
    /// The exec hosting this supervisor: the default parent of the agents' own commands.
    pub exec_id: Option<String>,
    /// Running, draining, shut down; and how many workers run.
    pub life: Life,
    /// Alone on the store, or among other daemons under a lease.
    pub coordination: Box<dyn Coordination>,
    /// The app-server child of each project that uses one, started on first use.
    pub app_servers: AppServers,
    pub git: GitFinder,
    /// The pauses in force, watched by the workers.
    pub pauses: PausesCell,
    /// Tells a person what happened (`notify.*`).
    pub notifier: Notifier,
}

impl Shared {
    /// `lease`: this daemon's on a shared store (`None`: the store's only daemon).
    pub fn new(
        home: PathBuf,
        ledger: LedgerHandle,
        slots: SlotsHandle,
        readers: ReaderPool,
        settings: Settings,
        exec_id: Option<String>,
        lease: Option<Arc<crate::lease::holder::Lease>>,
    ) -> Self {
        let life = Life::default();
        let coordination: Box<dyn Coordination> = match lease {
            Some(lease) => Box::new(AmongOthers::new(lease, life.watch_working())),
            None => Box::new(Alone),
        };
        let readers = Arc::new(readers);
        let settings_cell = SettingsCell::new(settings);
        let notifier = Notifier::start(settings_cell.clone(), home.clone());
        let app_servers = AppServers::new(
            home.clone(),
            ledger.clone(),
            readers.clone(),
            coordination.node_id().map(str::to_string),
            coordination.guard_mark().map(str::to_string),
            life.shutdown_signal(),
        );
        Shared {
            app_servers,
            publisher: Publisher::new(ledger.clone(), slots.clone(), life.shutdown_signal()),
            home,
            ledger,
            slots,
            readers,
            settings: settings_cell,
            exec_id,
            life,
            coordination,
            git: GitFinder::default(),
            // Read before boot (`Shared::reload_pauses`).
            pauses: PausesCell::new(Vec::new()),
            notifier,
        }
    }

    /// The settings in effect now.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.now()
    }

    /// What the worktree operations need of this supervisor.
    pub fn worktrees(&self) -> Worktrees {
        Worktrees {
            home: self.home.clone(),
            readers: self.readers.clone(),
            ledger: self.ledger.clone(),
            publisher: self.publisher.clone(),
            settings: self.settings.clone(),
            node_id: self.coordination.node_id().map(str::to_string),
        }
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

    /// Reads the pauses from the store and puts them in effect: after a prompt's failure
    /// paused its project (`pause_on_failure`), or told by another daemon that they changed.
    /// Says whether they changed.
    pub fn reload_pauses(&self) -> Result<bool, String> {
        let pauses = self
            .readers
            .read(crate::store::pauses::pauses)
            .map_err(|error| error.to_string())?;
        Ok(self.pauses.replace(pauses))
    }

    /// Puts `settings` in effect (the lease's length among them).
    pub fn replace_settings(&self, settings: Settings) {
        self.coordination.set_lease_length(settings.store_lease);
        self.settings.replace(settings);
    }
}

/// The settings in effect: replaced whole when one changes, read as a snapshot.
#[derive(Clone, Default)]
pub struct SettingsCell(Arc<RwLock<Arc<Settings>>>);

impl SettingsCell {
    pub fn new(settings: Settings) -> Self {
        SettingsCell(Arc::new(RwLock::new(Arc::new(settings))))
    }

    /// The settings in effect now.
    pub fn now(&self) -> Arc<Settings> {
        self.0
            .read()
            .map(|settings| settings.clone())
            .unwrap_or_default()
    }

    fn replace(&self, settings: Settings) {
        if let Ok(mut current) = self.0.write() {
            *current = Arc::new(settings);
        }
    }
}

/// The pauses in force (`store::pauses`): replaced whole by whoever changed them in the
/// store, watched by every worker (a pause stops a prompt waiting for a slot or a retry).
#[derive(Clone)]
pub struct PausesCell(Arc<watch::Sender<Arc<PauseSet>>>);

impl PausesCell {
    pub fn new(pauses: Vec<Pause>) -> Self {
        PausesCell(Arc::new(watch::channel(Arc::new(PauseSet(pauses))).0))
    }

    pub fn watch(&self) -> watch::Receiver<Arc<PauseSet>> {
        self.0.subscribe()
    }

    /// Puts `pauses` in effect; the workers wake only when they changed (said).
    pub fn replace(&self, pauses: Vec<Pause>) -> bool {
        self.0.send_if_modified(|now| {
            let changed = now.0 != pauses;
            if changed {
                *now = Arc::new(PauseSet(pauses));
            }
            changed
        })
    }
}

/// The `git` on PATH that worktree isolation uses: found once and kept; looked for again
/// after a failure (git installed while the daemon runs).
#[derive(Clone, Default)]
pub struct GitFinder(Arc<tokio::sync::Mutex<Option<crate::git::Git>>>);

impl GitFinder {
    /// The `git` on PATH (at least 2.17), found on first use; a failure is not kept, so the
    /// next call looks again.
    pub async fn find(&self) -> Result<crate::git::Git, crate::git::GitError> {
        let mut found = self.0.lock().await;
        if let Some(git) = found.as_ref() {
            return Ok(git.clone());
        }
        let git = crate::git::Git::detect().await?;
        *found = Some(git.clone());
        Ok(git)
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
