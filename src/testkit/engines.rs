//! The real engine CLIs for the tests that drive them (`tests/it/real_engines.rs` through the CLI,
//! `tests/it/real_codex.rs` through the library): where each binary is, and a private, offline
//! environment per test to run it in.
//!
//! - The binaries come from `CORRAL_CLAUDE_BIN`, `CORRAL_OPENCODE_BIN` and `CORRAL_CODEX_BIN`,
//!   which `.ci/run` sets after installing the pinned npm packages. A variable that is unset or
//!   names no file is the only reason a test may skip: [`binary_or_skip`] prints why.
//! - corral passes its own environment to engine children, so each engine gets a generated
//!   wrapper script ([`EngineEnv::wrapper`]) that sets a private `HOME`, `XDG_*` and `TMPDIR`,
//!   points the engine at the test's loopback mock with a dummy key, turns off everything that
//!   would reach beyond loopback (telemetry, updates, plugin installs), turns the engine's own
//!   retries down (corral owns the retry policy), then execs the real binary with `"$@"`.
//!   `corral config set engines.<engine>.path WRAPPER` ([`EngineEnv::configure`]) makes corral
//!   run it. The settings are the ones measured to keep each CLI offline and quiet.
//! - [`engine_slot`] keeps at most [`MAX_ENGINE_TESTS`] such tests running at once in a test
//!   binary: OpenCode takes ~600 MB and ~2 s of CPU per run, Claude Code ~300 MB.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

use super::daemon::DaemonHome;

/// The real engines these tests drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Claude,
    Opencode,
    Codex,
}

impl Engine {
    /// The engine's name in corral (`--engine`, `engines.<name>.path`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Claude => "claude",
            Engine::Opencode => "opencode",
            Engine::Codex => "codex",
        }
    }

    /// The variable naming the engine's native binary.
    pub fn bin_var(self) -> &'static str {
        match self {
            Engine::Claude => "CORRAL_CLAUDE_BIN",
            Engine::Opencode => "CORRAL_OPENCODE_BIN",
            Engine::Codex => "CORRAL_CODEX_BIN",
        }
    }
}

/// The engine's binary, or `None` after printing why the test is skipped (its variable is
/// unset, or names no file: the install failed). In CI (`CI` set, or `.ci/run`'s
/// `CORRAL_TEST_ENGINES=required`) a missing engine fails the test instead: the real-engine
/// tests must not pass without the real engines.
pub fn binary_or_skip(engine: Engine) -> Option<PathBuf> {
    let var = engine.bin_var();
    let why = match std::env::var_os(var) {
        None => format!(
            "{var} is not set (the real {} CLI is not installed; .ci/run sets it)",
            engine.name()
        ),
        Some(value) if !Path::new(&value).is_file() => format!(
            "{var}={} names no file (the {} install failed?)",
            Path::new(&value).display(),
            engine.name()
        ),
        Some(value) => return Some(PathBuf::from(value)),
    };
    let required = std::env::var("CORRAL_TEST_ENGINES").is_ok_and(|said| said == "required")
        || std::env::var_os("CI").is_some_and(|value| !value.is_empty());
    if required {
        panic!("{why}: in CI the real-engine tests must not pass without the real engine");
    }
    println!("skipping: {why}");
    None
}

/// corral's rate-limit delays in these tests (seconds): three quick retries.
pub const RATE_LIMIT_DELAYS: &str = "0.1,0.1,0.1";

/// `cancel.grace_ms` in these tests: every engine ends at once on SIGTERM.
pub const CANCEL_GRACE_MS: &str = "1000";

/// `run.timeout_s` in these tests: a stuck engine fails the test instead of hanging it.
pub const RUN_TIMEOUT_S: &str = "120";

/// Claude Code's own per-request timeout in these tests (its default is 10 minutes).
pub const CLAUDE_API_TIMEOUT_MS: &str = "30000";

/// The model catalog of codex.md §2: `mock-model` becomes a known model, so no turn starts
/// with a "Model metadata … not found" notice.
const CODEX_MODELS_JSON: &str = r#"{"models": [{
  "slug": "mock-model",
  "display_name": "Mock Model",
  "support_verbosity": false,
  "truncation_policy": {"mode": "tokens", "limit": 10000},
  "supported_reasoning_levels": [],
  "shell_type": "shell_command",
  "apply_patch_tool_type": "freeform",
  "visibility": "list",
  "supported_in_api": true,
  "priority": 1,
  "model_messages": {"instructions_template": "You are a synthetic test model."},
  "experimental_supported_tools": [],
  "context_window": 128000
}]}
"#;

/// A private environment for one engine: a directory with its home, config, temporary
/// directory and the wrapper corral runs. Removed when dropped.
pub struct EngineEnv {
    engine: Engine,
    dir: tempfile::TempDir,
    wrapper: PathBuf,
}

impl EngineEnv {
    /// Prepares `engine`'s environment against the mock at `base_url` (Claude:
    /// `http://127.0.0.1:PORT`; OpenCode and codex: `http://127.0.0.1:PORT/v1`).
    pub fn new(engine: Engine, binary: &Path, base_url: &str) -> EngineEnv {
        EngineEnv::prepare(engine, binary, base_url, 0)
    }

    /// Codex's environment as [`EngineEnv::new`] prepares it, but with codex's own
    /// `stream_max_retries` as given (0 there: corral owns retries; `tests/it/real_codex.rs`
    /// gives codex one to see its app-server `willRetry`).
    pub fn codex(binary: &Path, base_url: &str, stream_max_retries: u32) -> EngineEnv {
        EngineEnv::prepare(Engine::Codex, binary, base_url, stream_max_retries)
    }

    fn prepare(
        engine: Engine,
        binary: &Path,
        base_url: &str,
        codex_stream_max_retries: u32,
    ) -> EngineEnv {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path();
        let home = root.join("home");
        let tmp = root.join("tmp");
        for path in [&home, &tmp, &root.join("bin")] {
            std::fs::create_dir_all(path).unwrap();
        }
        let mut vars: Vec<(&str, String)> = vec![
            ("HOME", path_text(&home)),
            ("XDG_CONFIG_HOME", path_text(&home.join(".config"))),
            ("XDG_DATA_HOME", path_text(&home.join(".local/share"))),
            ("XDG_CACHE_HOME", path_text(&home.join(".cache"))),
            ("XDG_STATE_HOME", path_text(&home.join(".local/state"))),
            ("TMPDIR", path_text(&tmp)),
            // Loopback never goes through a proxy the machine may name.
            ("NO_PROXY", "127.0.0.1,localhost".into()),
            ("no_proxy", "127.0.0.1,localhost".into()),
        ];
        let mut unset = vec![
            "http_proxy",
            "HTTP_PROXY",
            "https_proxy",
            "HTTPS_PROXY",
            "all_proxy",
            "ALL_PROXY",
        ];
        match engine {
            Engine::Claude => {
                vars.extend([
                    ("CLAUDE_CONFIG_DIR", path_text(&home.join(".claude"))),
                    ("ANTHROPIC_BASE_URL", base_url.to_string()),
                    ("ANTHROPIC_API_KEY", "sk-ant-dummy-not-a-real-key".into()),
                    // This alone removes all traffic but the mock's; the others say the same.
                    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                    ("DISABLE_TELEMETRY", "1".into()),
                    ("DISABLE_AUTOUPDATER", "1".into()),
                    ("DISABLE_ERROR_REPORTING", "1".into()),
                    ("DISABLE_BUG_COMMAND", "1".into()),
                    ("CLAUDE_CODE_TMPDIR", path_text(&tmp)),
                    // corral owns retries: one request per run.
                    ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
                    ("API_TIMEOUT_MS", CLAUDE_API_TIMEOUT_MS.into()),
                    // Full access as root (CI's user): claude refuses to skip its permissions
                    // for root unless told it runs in a sandbox, as a person would tell it.
                    ("IS_SANDBOX", "1".into()),
                ]);
                unset.extend([
                    "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN",
                    "CLAUDE_CODE_USE_BEDROCK",
                    "CLAUDE_CODE_USE_VERTEX",
                    "ANTHROPIC_MODEL",
                    "ANTHROPIC_SMALL_FAST_MODEL",
                ]);
            }
            Engine::Opencode => {
                let config_dir = home.join(".config/opencode");
                std::fs::create_dir_all(&config_dir).unwrap();
                std::fs::write(config_dir.join("opencode.json"), opencode_config(base_url))
                    .unwrap();
                vars.extend([
                    ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
                    ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
                    ("OPENCODE_DISABLE_SHARE", "1".into()),
                    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
                    ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".into()),
                    ("OPENCODE_DISABLE_CLAUDE_CODE", "1".into()),
                    // Its background `npm install @opencode-ai/plugin` fails fast, locally.
                    ("npm_config_registry", "http://127.0.0.1:9/".into()),
                ]);
                // OPENCODE_CONFIG_CONTENT is corral's to set (the session's permissions), laid
                // over the tests' own: it is not unset here.
                unset.extend(["OPENCODE_CONFIG"]);
            }
            Engine::Codex => {
                let codex_home = root.join("codex-home");
                std::fs::create_dir_all(&codex_home).unwrap();
                let catalog = codex_home.join("mock_models.json");
                std::fs::write(&catalog, CODEX_MODELS_JSON).unwrap();
                std::fs::write(
                    codex_home.join("config.toml"),
                    codex_config(base_url, &catalog, codex_stream_max_retries),
                )
                .unwrap();
                vars.extend([
                    ("CODEX_HOME", path_text(&codex_home)),
                    ("MOCK_API_KEY", "dummy".into()),
                    ("RUST_BACKTRACE", "0".into()),
                ]);
                unset.extend(["OPENAI_API_KEY", "CODEX_API_KEY"]);
            }
        }
        let wrapper = root.join("bin").join(engine.name());
        std::fs::write(&wrapper, wrapper_script(engine, binary, &vars, &unset)).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        EngineEnv {
            engine,
            dir,
            wrapper,
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The script corral runs as the engine.
    pub fn wrapper(&self) -> &Path {
        &self.wrapper
    }

    /// The engine's private `HOME`.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Points the daemon home's corral at the wrapper, with quick retries, cancels and
    /// shutdown.
    pub fn configure(&self, home: &DaemonHome) {
        let path = format!("engines.{}.path", self.engine.name());
        home.config(&[
            (path.as_str(), path_text(&self.wrapper).as_str()),
            ("retry.rate_limit_delays", RATE_LIMIT_DELAYS),
            ("cancel.grace_ms", CANCEL_GRACE_MS),
            ("run.timeout_s", RUN_TIMEOUT_S),
            ("daemon.shutdown_grace_ms", "500"),
        ]);
    }
}

fn path_text(path: &Path) -> String {
    path.to_str()
        .expect("temporary paths are UTF-8")
        .to_string()
}

/// A POSIX shell single-quoted word.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The wrapper: the private environment, then the real binary with corral's arguments.
fn wrapper_script(
    engine: Engine,
    binary: &Path,
    vars: &[(&str, String)],
    unset: &[&str],
) -> String {
    let mut script = format!(
        "#!/bin/sh\n# Generated by src/testkit/engines.rs: the real {} CLI, private and offline.\n",
        engine.name()
    );
    script.push_str(&format!("unset {}\n", unset.join(" ")));
    for (name, value) in vars {
        script.push_str(&format!("export {name}={}\n", shell_quote(value)));
    }
    script.push_str(&format!(
        "exec {} \"$@\"\n",
        shell_quote(&path_text(binary))
    ));
    script
}

/// `$XDG_CONFIG_HOME/opencode/opencode.json`: the mock is the only provider and model.
fn opencode_config(base_url: &str) -> String {
    let config = serde_json::json!({
        "autoupdate": false,
        "share": "disabled",
        "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "provider": {
            "mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock",
                "options": { "baseURL": base_url, "apiKey": "sk-dummy" },
                "models": {
                    "mock-model": {
                        "name": "Mock Model",
                        "limit": { "context": 128000, "output": 4096 },
                        // A reasoning model: opencode sends `--variant`'s effort only to one.
                        "reasoning": true,
                    },
                },
            },
        },
    });
    serde_json::to_string_pretty(&config).unwrap()
}

/// `$CODEX_HOME/config.toml`: the mock is the provider; nothing reaches beyond loopback;
/// codex's own request retries are off so that corral owns the retry policy, and its stream
/// retries are `stream_max_retries`.
fn codex_config(base_url: &str, catalog: &Path, stream_max_retries: u32) -> String {
    let toml_string = |text: &str| serde_json::to_string(text).expect("a string serializes");
    format!(
        r#"# Generated by src/testkit/engines.rs: the real codex against a loopback mock, offline.
model = "mock-model"
model_provider = "mock"
model_catalog_json = {catalog}
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false                        # else DNS/HTTPS to ab.chatgpt.com

[features]
plugins = false                        # else git ls-remote github.com and more DNS
unbounded_connection_retries = false   # else "connection refused" retries forever
shell_snapshot = false                 # else a login shell per session

[model_providers.mock]
name = "Mock"
base_url = {base_url}
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0                # corral, not codex, owns retries
stream_max_retries = {stream_max_retries}
stream_idle_timeout_ms = 10000
"#,
        catalog = toml_string(&path_text(catalog)),
        base_url = toml_string(base_url),
    )
}

/// At most this many tests run real engines at once in one test binary.
pub const MAX_ENGINE_TESTS: usize = 4;

fn slots() -> &'static (Mutex<usize>, Condvar) {
    static SLOTS: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    SLOTS.get_or_init(|| (Mutex::new(0), Condvar::new()))
}

/// A test's permission to run real engines; released when dropped.
pub struct EngineSlot(());

/// Waits until fewer than [`MAX_ENGINE_TESTS`] tests hold a slot, then takes one.
pub fn engine_slot() -> EngineSlot {
    let (taken, freed) = slots();
    let mut taken = freed
        .wait_while(
            taken.lock().unwrap_or_else(|poison| poison.into_inner()),
            |taken| *taken >= MAX_ENGINE_TESTS,
        )
        .unwrap_or_else(|poison| poison.into_inner());
    *taken += 1;
    EngineSlot(())
}

impl Drop for EngineSlot {
    fn drop(&mut self) {
        let (taken, freed) = slots();
        *taken.lock().unwrap_or_else(|poison| poison.into_inner()) -= 1;
        freed.notify_one();
    }
}
