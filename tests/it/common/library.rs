//! The supervisor through its library handle, in the test's own process: a `Corral` on a
//! temporary home with the settings a test file wants, and the calls its tests repeat
//! (`tests/it/supervisor.rs`, `tests/it/app_server.rs`; `tests/it/real_codex.rs` runs its tests in
//! [`actix_test`] too).

use std::future::Future;
use std::time::Duration;

use corral::store::events::Event;
use corral::store::projects::{NewProject, Project};
use corral::store::prompts::{Enqueued, NewPrompt, Prompt};
use corral::store::runs::Run;
use corral::store::sessions::{NewSession, Session};
use corral::store::{events, prompts, runs, sessions};
use corral::{Corral, CorralOptions};

/// How long a prompt may take to end before the test fails with what it did.
const PROMPT_DEADLINE: Duration = Duration::from_secs(30);

/// A supervisor on a temporary home, and a directory for its projects.
///
/// Under `CORRAL_TEST_STORE=postgres` the home gets a database of its own in `HOME/config`
/// before the supervisor starts (`Corral::start` reads it), as a daemon's home does.
pub struct Library {
    pub corral: Corral,
    /// The home's PostgreSQL database, if its store is one; after `corral`, so dropped after
    /// the supervisor let go of it.
    pub database: Option<super::store::TestDatabase>,
    pub home: tempfile::TempDir,
    pub projects: tempfile::TempDir,
}

impl Library {
    /// Starts a supervisor on `home` (on the store of the test pass) and applies `settings`.
    pub async fn start_in(home: tempfile::TempDir, settings: &[(&str, &str)]) -> Library {
        // The engines run under the shim, as the daemon's do (this test binary has none
        // beside it). Every test of the binary sets the same value.
        std::env::set_var("CORRAL_SHIM", env!("CARGO_BIN_EXE_corral-shim"));
        let database = super::store::for_home(home.path());
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        for (name, value) in settings {
            corral.set_setting(name, Some(value)).await.unwrap();
        }
        Library {
            corral,
            database,
            home,
            projects: tempfile::tempdir().unwrap(),
        }
    }

    /// The home's store on either backend, for reading it beside the supervisor.
    pub fn store(&self) -> super::store::HomeStore<'_> {
        let url = self.database.as_ref().map(|database| database.url.as_str());
        super::store::HomeStore::of(self.home.path(), url)
    }

    /// Adds `new` with a directory of its own (named after it) as its path.
    pub async fn add_project(&self, mut new: NewProject) -> Project {
        let path = self.projects.path().join(&new.name);
        std::fs::create_dir_all(&path).unwrap();
        new.path = path.to_string_lossy().into_owned();
        self.corral.add_project(new).await.unwrap()
    }

    pub async fn session(&self, project: &Project, engine: &str) -> Session {
        self.corral
            .open_session(NewSession {
                project_id: project.id.clone(),
                engine: Some(engine.parse().expect("a known engine")),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    pub async fn send(&self, session: &Session, text: &str) -> Enqueued {
        self.corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: text.into(),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// Sends and waits for the prompt's end.
    pub async fn run(&self, session: &Session, text: &str) -> Prompt {
        let sent = self.send(session, text).await;
        self.wait(&sent.prompt.id).await
    }

    /// The prompt once it ended; after [`PROMPT_DEADLINE`] the test fails with its runs and
    /// its session's events.
    pub async fn wait(&self, prompt_id: &str) -> Prompt {
        match tokio::time::timeout(PROMPT_DEADLINE, self.corral.wait_prompt(prompt_id)).await {
            Ok(prompt) => prompt.unwrap(),
            Err(_) => {
                let prompt = self
                    .corral
                    .read(|c| prompts::prompt(c, prompt_id))
                    .unwrap()
                    .unwrap();
                let events = self.session_events(&prompt.session_id);
                let runs = self.runs(prompt_id);
                panic!(
                    "prompt {prompt:?} did not end within {PROMPT_DEADLINE:?}; runs {runs:#?}; \
                     events {events:#?}"
                );
            }
        }
    }

    pub fn runs(&self, prompt_id: &str) -> Vec<Run> {
        self.corral.read(|c| runs::runs_of(c, prompt_id)).unwrap()
    }

    /// Every event of a session.
    pub fn session_events(&self, session_id: &str) -> Vec<Event> {
        self.corral
            .read(|c| events::events_after(c, session_id, 0, 100_000))
            .unwrap()
    }

    /// The session as the store has it now.
    pub fn session_now(&self, session: &Session) -> Session {
        self.corral
            .read(|c| sessions::session(c, &session.id))
            .unwrap()
            .unwrap()
    }
}

/// Runs an async test body in its own actix system (the supervisor's actors need one); what
/// the body returns.
pub fn actix_test<T, F: Future<Output = T>>(body: impl FnOnce() -> F) -> T {
    actix::System::new().block_on(body())
}
