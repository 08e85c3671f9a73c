//! The daemon's methods: each request becomes calls on the [`Corral`] handle.
//!
//! One entry point, [`call`], for every transport (the socket's `server.rs`, the HTTP API):
//! a [`Caller`] says who asks (the daemon's state, the peer's pid, its exec). Each method is
//! a type of `crate::protocol` (`protocol::Method`: its name, params and result); the
//! dispatch table ([`dispatch!`]) maps it to its group's impl of [`Serve`] or [`Inspect`],
//! which takes the decoded params and returns the typed result, one file per group: `projects.rs`
//! (projects, groups), `sessions.rs` (sessions, history, steer, compact), `prompts.rs`
//! (send, with the sender's exec recorded, cancel, wait), `drivers.rs` (driver claims),
//! `settings.rs`, `status.rs` (status, shutdown). This file holds what they share: param
//! checks, selectors, the refusal of widening requests from supervised runs, and
//! [`inspect`], the read-only methods the CLI also answers from the store (`cli::local`).
//!
//! Selectors (`project`, `session`, `prompt` params) accept an exact id, an exact name or
//! title, or a unique id prefix; a selector that matches several is an error with code
//! `AMBIGUOUS` whose `data.candidates` lists them.

mod approvals;
mod drivers;
mod execs;
mod http;
mod overview;
mod pauses;
mod projects;
mod prompts;
mod schedules;
mod sessions;

pub(crate) use prompts::resolve_prompt;
mod settings;
mod status;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::origin;
use super::server::DaemonContext;
use crate::protocol::*;
use crate::store;
use crate::store::select::Unselected;
use crate::store::sql::{self, Conn as Store};
use crate::{Corral, CorralError};

pub use status::{kept_alive, STATUS_WAITERS};

/// How a request reached the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The Unix socket (`server.rs`).
    Socket,
    /// The HTTP API (loopback TCP).
    Http,
}

/// Who asks: what a method may know of its caller, whatever the transport. The socket keeps
/// one per connection (`exec_id` is set by `initialize`); HTTP makes one per request.
pub struct Caller {
    pub context: Rc<DaemonContext>,
    /// The peer's pid (the socket's `SO_PEERCRED`, read at accept; over HTTP the process
    /// behind the loopback TCP peer): the process that connected, which may have exited since.
    pub peer_pid: Option<i32>,
    /// The client's exec (the driver of what it sends), from `initialize`.
    pub exec_id: RefCell<Option<String>>,
    /// Whether a `prompt.send` of this caller carried the exec for the daemon to record (an
    /// exec is recorded once).
    pub exec_recorded: Cell<bool>,
    /// Whether this caller's exec was started by `exec.start` and not yet ended by
    /// `exec.end` (only such an exec may be ended through the caller).
    pub exec_started: Cell<bool>,
    pub transport: Transport,
    /// The rows the check of the request being served read ([`origin::Judged`]): set by
    /// [`serve_checked`] right before the method runs, taken by a method that serves them
    /// (before its first await, so that no other request of the connection comes between).
    judged: RefCell<origin::Judged>,
    /// Where this connection's peer was last found among the live runs (a pass over `/proc`
    /// saved while the runs stay the same).
    pub origins: origin::OriginCache,
}

impl Caller {
    pub fn new(context: Rc<DaemonContext>, peer_pid: Option<i32>, transport: Transport) -> Self {
        Caller {
            context,
            peer_pid,
            exec_id: RefCell::new(None),
            exec_recorded: Cell::new(false),
            exec_started: Cell::new(false),
            transport,
            judged: RefCell::default(),
            origins: origin::OriginCache::default(),
        }
    }

    /// The rows the request's check read (see [`Caller::judged`]); empty once taken.
    fn take_judged(&self) -> origin::Judged {
        self.judged.take()
    }

    pub(crate) fn corral(&self) -> &Corral {
        &self.context.corral
    }
}

impl From<CorralError> for RpcError {
    fn from(error: CorralError) -> Self {
        let code = match &error {
            CorralError::Superseded(_) => code::SUPERSEDED,
            CorralError::NotFound(_) => code::NOT_FOUND,
            CorralError::Invalid(_) => code::INVALID_PARAMS,
            CorralError::Store(_) => code::INTERNAL,
            CorralError::Locked(_) => code::BUSY,
            CorralError::Answered(_) => code::ANSWERED,
        };
        RpcError::new(code, error.to_string())
    }
}

/// Every method but subscriptions (`server.rs`: they stream) and `initialize` (the
/// transport's handshake).
/// A request may carry its caller's exec for the daemon to record around it
/// ([`execs::record_around`]), whatever the method — but `exec.start` and `exec.end`, whose
/// own `exec` is the one they record or end.
pub async fn call(caller: &Caller, method: &str, params: &Value) -> Result<Value, RpcError> {
    // A daemon that is shutting down takes no new prompt: refused before anything is recorded,
    // since the client waits for the daemon's end and sends again (recording its exec once).
    if method == PromptSend::NAME && caller.context.is_shutting_down() {
        return Err(RpcError::new(code::BUSY, "the daemon is shutting down")
            .with_data(serde_json::json!({ "reason": "shutting_down" })));
    }
    let carried = match method {
        ExecStart::NAME | ExecEnd::NAME => None,
        _ => execs::exec_to_record(caller, params)?,
    };
    match carried {
        Some(record) => {
            execs::record_around(caller, method, record, answer(caller, method, params)).await
        }
        None => answer(caller, method, params).await,
    }
}

/// Checks every request alike, then answers it: the read-only methods on a reader
/// ([`inspect`]), the others through [`serve`] (which refuses a widening one from a run).
async fn answer(caller: &Caller, method: &str, params: &Value) -> Result<Value, RpcError> {
    check_named(params)?;
    // An agent reaches its own session only (`confine.rs`), whatever the method.
    super::confine::confine(caller, method, params).await?;
    // Only a read-only method takes a reader: the others (`status` among them) answer while
    // a PostgreSQL server cannot be reached.
    if is_inspect(method) {
        if let Some(answer) = caller
            .corral()
            .read(|c| Ok(inspect(c, method, params)))
            .map_err(store_error)?
        {
            return answer;
        }
    }
    serve(caller, method, params).await
}

/// A method served with the daemon's supervisor, in its group's file. Its params say what
/// it would widen ([`origin::Widening`]), checked by [`serve_checked`] before it is served.
trait Serve: Method<Params: origin::Widening> {
    async fn serve(caller: &Caller, params: Self::Params) -> Result<Self::Result, RpcError>;
}

/// A method that only reads the store, answered on one connection (see [`inspect`]).
trait Inspect: Method {
    fn inspect(c: &Store, params: Self::Params) -> Result<Self::Result, RpcError>;
}

/// The dispatch table: each method to its group's [`Serve`] or [`Inspect`] impl. The
/// method names come from the types (`protocol::METHODS` is made from the same ones).
macro_rules! dispatch {
    (inspect: [$($inspect:ty),* $(,)?], serve: [$($serve:ty),* $(,)?] $(,)?) => {
        /// The methods that only read the store, answered on one connection: the daemon
        /// serves them on a reader of its pool, and the CLI on its own read-only connection
        /// when no daemon runs (`cli::local`), so both give the same results and check params
        /// alike. `None`: `method` is not one of them.
        pub fn is_inspect(method: &str) -> bool {
            matches!(method, $(<$inspect as Method>::NAME)|*)
        }

        /// See [`is_inspect`]: `method` answered on `c`.
        pub fn inspect(c: &Store, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
            Some(match method {
                $(<$inspect as Method>::NAME => decode::<$inspect>(params)
                    .and_then(|params| <$inspect as Inspect>::inspect(c, params))
                    .and_then(|result| encode(&result)),)*
                _ => return None,
            })
        }

        async fn serve(caller: &Caller, method: &str, params: &Value) -> Result<Value, RpcError> {
            match method {
                $(<$serve as Method>::NAME => serve_checked::<$serve>(caller, params).await,)*
                other => Err(unknown_method(other)),
            }
        }

        /// What a request would widen with nothing read (`origin::widening`).
        #[cfg(test)]
        pub(crate) fn widening_unread(method: &str, params: &Value) -> Option<String> {
            use origin::Widening as _;
            let context = origin::WideningContext::unread();
            match method {
                $(<$serve as Method>::NAME => decode::<$serve>(params).ok()?.widens(&context),)*
                _ => None,
            }
        }

        /// Every method [`call`] answers.
        #[cfg(test)]
        const SERVED: &[&str] = &[$(<$inspect as Method>::NAME,)* $(<$serve as Method>::NAME,)*];
    };
}

dispatch! {
    inspect: [
        ProjectList, ProjectShow, SessionList, SessionShow, History, SettingsGet, SettingsList,
        ExecsList, ApprovalsList, GroupList, PauseList, ScheduleList,
    ],
    serve: [
        Status, Shutdown,
        ProjectAdd, ProjectSet, ProjectArchive, GroupSet, GroupRemove,
        PauseWork, ResumeWork,
        ScheduleAdd, ScheduleShow, SchedulePause, ScheduleResume, ScheduleRemove,
        SessionNew, SessionRename, SessionArchive, SessionDiff, SessionMerge, SessionRecreate,
        SessionSteer, SessionCompact,
        PromptSend, PromptCancel, PromptWait, PromptRetry, PromptEdit,
        SettingsSet,
        DriverClaim, DriverRelease, DriverShow,
        Overview,
        ExecStart, ExecEnd,
        HttpLoginCode,
        ApprovalsAnswer,
    ],
}

/// One served method: its params decoded, a widening request from a run refused, then served.
async fn serve_checked<M: Serve>(caller: &Caller, params: &Value) -> Result<Value, RpcError> {
    let mut params = decode::<M>(params)?;
    let judged = refuse_widening_from_a_run(caller, M::NAME, &mut params).await?;
    caller.judged.replace(judged);
    let served = M::serve(caller, params).await;
    // Not kept past its request, whether the method took it or not.
    caller.judged.take();
    encode(&served?)
}

fn unknown_method(method: &str) -> RpcError {
    RpcError::new(code::METHOD_NOT_FOUND, format!("unknown method '{method}'"))
        .with_data(json!({ "methods": METHODS }))
}

/// A method's params from the request's (absent or null: `{}`); a value of the wrong type is
/// -32602 with the params type's message.
fn decode<M: Method>(params: &Value) -> Result<M::Params, RpcError> {
    let decoded = if params.is_null() {
        M::Params::deserialize(&json!({}))
    } else {
        M::Params::deserialize(params)
    };
    decoded.map_err(|error| RpcError::new(code::INVALID_PARAMS, error.to_string()))
}

/// A result as the wire's JSON.
fn encode<T: Serialize>(result: &T) -> Result<Value, RpcError> {
    serde_json::to_value(result).map_err(|error| RpcError::new(code::INTERNAL, error.to_string()))
}

/// Params are named: an object, or absent. Positional (array) params are refused, whatever
/// the method, as is any other JSON value.
pub(crate) fn check_named(params: &Value) -> Result<(), RpcError> {
    match params {
        Value::Object(_) | Value::Null => Ok(()),
        other => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "params must be an object of named params, not {} (positional params are not supported)",
                json_type(other)
            ),
        )),
    }
}

/// The longest title a person may give a session, in characters (a generated one is cut at
/// 120).
pub const MAX_TITLE: usize = 500;

fn store_error(error: CorralError) -> RpcError {
    error.into()
}

/// A person's title: not empty, at most [`MAX_TITLE`] characters.
/// A wire engine name (empty or absent: none named, the project's); an unknown one is
/// invalid params naming the known ones.
fn engine(name: Option<&str>) -> Result<Option<crate::engine::EngineKind>, RpcError> {
    name.filter(|name| !name.is_empty())
        .map(|name| {
            name.parse()
                .map_err(|error| RpcError::new(code::INVALID_PARAMS, error))
        })
        .transpose()
}

fn check_title(title: &str) -> Result<(), RpcError> {
    if title.is_empty() {
        return Err(RpcError::new(code::INVALID_PARAMS, "the title is empty"));
    }
    let length = title.chars().count();
    if length > MAX_TITLE {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("the title is {length} characters; at most {MAX_TITLE}"),
        ));
    }
    Ok(())
}

/// Privilege stays with people: a request that would widen what an agent may do is refused
/// when it comes from inside a supervised run (`origin::find`), and the attempt is recorded
/// as an event of the run's session. Its rules are judged twice: first for the worst caller
/// (a run that may do nothing), on the store — most requests widen nothing for anyone and
/// cost no look at the peer; then, for a peer inside a run, for that run (`prompt.send`
/// into a session without a sandbox widens only for a run that has one). Over HTTP a peer
/// that was not found is refused: a person's browser or curl is always found (`http::peer`).
async fn refuse_widening_from_a_run<P: origin::Widening>(
    caller: &Caller,
    method: &str,
    params: &mut P,
) -> Result<origin::Judged, RpcError> {
    if !P::MAY_WIDEN {
        return Ok(origin::Judged::default());
    }
    let corral = caller.corral();
    let (worst, judged) = judge(corral, params, None)?;
    let Some(worst) = worst else {
        return Ok(judged);
    };
    let Some(peer) = caller.peer_pid else {
        if caller.transport == Transport::Http {
            let what = worst;
            tracing::warn!(
                method,
                what,
                "refused a widening request whose HTTP peer was not found"
            );
            return Err(RpcError::new(
                code::NOT_ALLOWED,
                format!("cannot tell who asks (the process behind this connection was not found): {what}"),
            ));
        }
        return Ok(judged);
    };
    let runs = corral.live_runs().await;
    let Some(origin) = caller.origins.find(peer, &runs) else {
        return Ok(judged);
    };
    // Judged again for that run: the rows of this look are the ones served.
    let (what, judged) = judge(corral, params, Some(origin.session_id.as_deref()))?;
    let Some(what) = what else {
        return Ok(judged);
    };
    tracing::warn!(method, what, peer, run = %origin.run_id, found_by = origin.found_by, transport = ?caller.transport, "refused a widening request from a supervised run");
    Err(origin::refuse(corral, &origin, peer, method, &what).await)
}

/// What `params` would widen, on one read of the store: for the worst caller (`run`:
/// `None`), or for the run of that session (`Some(None)`: a run of no one session); with
/// the rows it read. The params' selectors are pinned to the ids judged first, so the method
/// serves what was judged.
fn judge<P: origin::Widening>(
    corral: &Corral,
    params: &mut P,
    run: Option<Option<&str>>,
) -> Result<(Option<String>, origin::Judged), RpcError> {
    corral
        .read(|c| {
            let context = match run {
                None => origin::WideningContext::of_store(c),
                Some(session) => origin::WideningContext::of_run(c, session),
            };
            params.pin(&context);
            let widens = params.widens(&context);
            Ok((widens, context.into_judged()))
        })
        .map_err(store_error)
}

/// A selector's failure with the protocol's error codes (the CLI's direct reads of the store
/// answer the same, `cli::local`).
impl From<Unselected> for RpcError {
    fn from(error: Unselected) -> Self {
        let message = error.to_string();
        match error {
            Unselected::Empty { .. } => RpcError::new(code::INVALID_PARAMS, message),
            Unselected::None { .. } => RpcError::new(code::NOT_FOUND, message),
            Unselected::Ambiguous { candidates, .. } => RpcError::new(code::AMBIGUOUS, message)
                .with_data(json!({ "candidates": candidates })),
        }
    }
}

fn select<T>(
    kind: &'static str,
    selector: &str,
    items: Vec<T>,
    id: impl Fn(&T) -> &str,
    name: impl Fn(&T) -> Option<&str>,
) -> Result<T, RpcError> {
    Ok(crate::store::select::select(
        kind, selector, items, id, name,
    )?)
}

pub fn resolve_project(
    corral: &Corral,
    selector: &str,
) -> Result<store::projects::Project, RpcError> {
    corral
        .read(|c| Ok(project_of(c, selector)))
        .map_err(store_error)?
}

pub fn resolve_session(
    corral: &Corral,
    selector: &str,
) -> Result<store::sessions::Session, RpcError> {
    corral
        .read(|c| Ok(session_of(c, selector)))
        .map_err(store_error)?
}

/// The project `selector` names, read on `c`.
pub(crate) fn project_of(c: &Store, selector: &str) -> Result<store::projects::Project, RpcError> {
    // An exact id (what clients send) wins anyway: one indexed row, not every project.
    if let Some(project) = read(store::projects::project(c, selector.trim()))? {
        return Ok(project);
    }
    let projects = read(store::projects::projects(c))?;
    select("project", selector, projects, |p| &p.id, |p| Some(&p.name))
}

/// The session `selector` names, read on `c`.
pub(crate) fn session_of(c: &Store, selector: &str) -> Result<store::sessions::Session, RpcError> {
    // An exact id wins anyway: one indexed row, not every session (issue 11: a prompt sent
    // to one of 2,000 sessions read all 2,000).
    if let Some(session) = read(store::sessions::session(c, selector.trim()))? {
        return Ok(session);
    }
    session_among_all(c, selector)
}

/// The session `selector` names by title or id prefix, read on `c` ([`session_of`] once the
/// selector was found to be no session's id).
pub(crate) fn session_among_all(
    c: &Store,
    selector: &str,
) -> Result<store::sessions::Session, RpcError> {
    let sessions = read(store::sessions::sessions(c))?;
    select(
        "session",
        selector,
        sessions,
        |s| &s.id,
        |s| s.title.as_deref(),
    )
}

fn read<T>(result: sql::Result<T>) -> Result<T, RpcError> {
    result.map_err(|error| RpcError::new(code::INTERNAL, format!("store: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_method_is_served_once() {
        // The transports answer these themselves (the handshake, the streams).
        let transports = [
            Initialize::NAME,
            EventsSubscribe::NAME,
            EventsUnsubscribe::NAME,
        ];
        let mut served: Vec<&str> = SERVED.iter().chain(&transports).copied().collect();
        served.sort_unstable();
        let mut listed = METHODS.to_vec();
        listed.sort_unstable();
        assert_eq!(served, listed);
    }

    /// Over HTTP a widening request whose peer was not found is refused (a person's browser
    /// or curl is always found); over the socket it is a person's, as before. A request that
    /// widens nothing needs no peer, and a found peer outside every run is a person.
    #[test]
    fn a_widening_request_over_http_from_an_unknown_peer_is_refused() {
        let home = tempfile::tempdir().unwrap();
        actix::System::new().block_on(async {
            let corral = Corral::start(crate::CorralOptions::new(home.path()))
                .await
                .unwrap();
            let context = Rc::new(DaemonContext::new(corral, home.path().to_path_buf()));
            let caller = |peer, transport| Caller::new(context.clone(), peer, transport);
            let widening = json!({ "name": "deploy", "locking": false });
            let narrowing = json!({ "name": "deploy", "locking": true });
            let unknown = caller(None, Transport::Http);
            let refused = call(&unknown, GroupSet::NAME, &widening).await.unwrap_err();
            assert_eq!(refused.code, code::NOT_ALLOWED, "{refused:?}");
            assert!(
                refused.message.starts_with("cannot tell who asks"),
                "{refused:?}"
            );
            assert!(refused.message.ends_with("making group deploy non-locking"));
            call(&unknown, GroupSet::NAME, &narrowing).await.unwrap();
            let myself = Some(std::process::id() as i32);
            call(&caller(myself, Transport::Http), GroupSet::NAME, &widening)
                .await
                .unwrap();
            call(&caller(None, Transport::Socket), GroupSet::NAME, &narrowing)
                .await
                .unwrap();
            call(&caller(None, Transport::Socket), GroupSet::NAME, &widening)
                .await
                .unwrap();
        });
    }

    #[test]
    fn params_of_the_wrong_type_keep_their_messages() {
        let message = |value: Value| decode::<SettingsSet>(&value).unwrap_err().message;
        assert_eq!(message(json!({})), "name is required");
        assert_eq!(
            message(json!({ "name": 7 })),
            "name must be a string, not a number"
        );
        assert_eq!(
            message(json!({ "name": "n", "value": 12 })),
            "value has the wrong type (a number)"
        );
        assert_eq!(
            decode::<ProjectAdd>(&json!({ "name": "q" }))
                .unwrap_err()
                .message,
            "missing field `path`"
        );
        let unset = decode::<SettingsSet>(&json!({ "name": "n", "value": null })).unwrap();
        assert_eq!(unset.value, None);
        assert!(decode::<Status>(&Value::Null).unwrap().waiters.is_none());
    }
}
