//! The app-server children of a daemon ([`AppServers`]): one per project that uses one,
//! started on first use, its history carried on from what the last daemon stored, and each
//! of its state changes kept in the store, in order, never dropped for a locked store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::app_server::{AppServerActor, AppServerHandle, AppServerState};
use super::ledger::{LedgerHandle, SaveAppServer};
use crate::store::projects::Project;
use crate::store::{processes, ReaderPool};

/// The app-server actor of each project that uses one, by project id.
pub struct AppServers {
    servers: Mutex<HashMap<String, AppServerHandle>>,
    /// `CORRAL_HOME`, given to each child.
    home: PathBuf,
    ledger: LedgerHandle,
    readers: Arc<ReaderPool>,
    /// This daemon's node on a shared store, written with each state.
    node_id: Option<String>,
    /// The mark the lease guard knows this daemon's children by (see `Coordination`).
    guard_mark: Option<String>,
    shutdown: watch::Receiver<bool>,
}

impl AppServers {
    pub(crate) fn new(
        home: PathBuf,
        ledger: LedgerHandle,
        readers: Arc<ReaderPool>,
        node_id: Option<String>,
        guard_mark: Option<String>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        AppServers {
            servers: Mutex::new(HashMap::new()),
            home,
            ledger,
            readers,
            node_id,
            guard_mark,
            shutdown,
        }
    }

    /// The app-server actor of `project`, started on first use (or again, after its child
    /// went away); `init_timeout`: `app_server.init_timeout_ms` now.
    pub fn of(&self, project: &Project, program: &Path, init_timeout: Duration) -> AppServerHandle {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(server) = servers.get(&project.id).filter(|server| server.connected()) {
            // The path in the settings and the project's variables now: a change reaches the
            // next child.
            server.use_program(program.to_path_buf(), project.env.clone());
            return server.clone();
        }
        // Its history goes on from what the last daemon stored (restarts, recent events).
        let stored = self
            .readers
            .read(processes::app_servers)
            .unwrap_or_default()
            .into_iter()
            .find(|state| state.project_id == project.id);
        let actor = AppServerActor::new(
            project.id.clone(),
            program.to_path_buf(),
            project.path.clone(),
            self.home.clone(),
            project.full_access && project.kind != "remote",
        )
        .init_timeout(init_timeout)
        .with_env(project.env.clone())
        .guarded_by(self.guard_mark.as_deref());
        let actor = match stored {
            Some(stored) => actor.resume_from(stored),
            None => actor,
        };
        let (latest, states) = watch::channel(None);
        actix::spawn(keep_state(
            self.ledger.clone(),
            project.id.clone(),
            self.node_id.clone(),
            states,
            self.shutdown.clone(),
        ));
        let server = AppServerHandle::start(actor.on_change(move |state: AppServerState| {
            latest.send_replace(Some(state));
        }));
        servers.insert(project.id.clone(), server.clone());
        server
    }

    /// The live app-server actors (for `status`).
    pub fn all(&self) -> Vec<AppServerHandle> {
        self.servers
            .lock()
            .map(|servers| servers.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// Stores an app-server child's state after each change, in order, and never drops one for a
/// locked store: one write at a time per project, the newest state replacing any not yet
/// stored (each is whole, so the last one stored is the truth), and a write the ledger gave
/// up past `store.lock_timeout_ms` made again with the newest state, until the shutdown.
/// Ends with the actor (its sender).
async fn keep_state(
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
            let state = state.of_node(node_id.as_deref());
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
