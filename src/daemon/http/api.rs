//! The handlers: every request is checked (Host, then authentication, then CSRF for a
//! cookie's write), its params gathered strictly (path, typed query, JSON body within
//! [`MAX_BODY`]), and its method answered through the [`Bridge`](super::Bridge). A success
//! body is the method's `result`; an error body is `{"error":{code,message,data}}` with the
//! socket's codes and the HTTP status [`status_of`] gives: never a backtrace.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};

use super::access::{self, Authenticated};
use super::routes::{self, Kind, Route, Serve};
use super::{HttpContext, MAX_BODY};
use crate::daemon::methods;
use crate::protocol::{code, RpcError, MAX_EXEC_ID};

/// The page, with `{{CSRF_TOKEN}}` where its login's CSRF token goes.
const INDEX: &str = include_str!("assets/index.html");
/// The page that says how to log in.
const LOGIN: &str = include_str!("assets/login.html");

/// A script's content type (ES modules need a JavaScript one).
const JS: &str = "text/javascript; charset=utf-8";

/// An [`ASSETS`] row: a script of `assets/`, by its file name.
macro_rules! script {
    ($name:literal) => {
        ($name, JS, include_str!(concat!("assets/", $name)))
    };
}

/// The dashboard's other files (`/assets/NAME`), served as they are: only a name listed here is
/// served, so a request cannot reach another file. `app.js`'s header has the scripts' map; tests
/// below check that this table and the folder agree, and that every import names a file here.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    script!("theme-early.js"),
    script!("app.js"),
    script!("theme.js"),
    script!("dom.js"),
    script!("format.js"),
    script!("api.js"),
    script!("feeds.js"),
    script!("needs-you.js"),
    script!("ui.js"),
    script!("transcript.js"),
    script!("worktree.js"),
    script!("page-overview.js"),
    script!("page-session.js"),
    script!("page-projects.js"),
    script!("page-schedules.js"),
    script!("page-settings.js"),
    script!("page-history.js"),
    script!("router.js"),
];

/// The longest query string taken, in bytes.
pub const MAX_QUERY: usize = 16 << 10;

/// Stored events one page gives at most (`limit`'s default and ceiling).
pub const EVENTS_PAGE: usize = 1000;

/// The HTTP status of an error code (the socket's codes; `docs/http.md` has the table).
pub fn status_of(error_code: i64) -> StatusCode {
    match error_code {
        code::PARSE_ERROR | code::INVALID_REQUEST | code::INVALID_PARAMS => StatusCode::BAD_REQUEST,
        code::VERSION_MISMATCH => StatusCode::BAD_REQUEST,
        code::METHOD_NOT_FOUND | code::NOT_FOUND => StatusCode::NOT_FOUND,
        code::AMBIGUOUS | code::SUPERSEDED | code::CLAIMED | code::ANSWERED => StatusCode::CONFLICT,
        code::BUSY => StatusCode::SERVICE_UNAVAILABLE,
        code::NOT_ALLOWED | code::PEER_REFUSED => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A JSON answer, never cached.
fn json_response(status: StatusCode, body: &Value) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(serde_json::to_string(body).expect("JSON serializes"))
}

/// An error's answer, with the status of its code.
pub fn error_response(error: RpcError) -> HttpResponse {
    json_response(status_of(error.code), &json!({ "error": error }))
}

/// A request the access rules refuse: `status` (401 or 403), code `PEER_REFUSED`, and why.
pub(super) fn refused(status: StatusCode, reason: &str, message: &str) -> HttpResponse {
    let error = RpcError::new(code::PEER_REFUSED, message).with_data(json!({ "reason": reason }));
    let mut response = json_response(status, &json!({ "error": error }));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"corral\""),
        );
    }
    response
}

fn unauthenticated() -> HttpResponse {
    refused(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "not logged in: open the URL `corral web` prints, or send Authorization: Bearer \
         <HOME/http.token>",
    )
}

pub(super) fn shared(request: &HttpRequest) -> &HttpContext {
    request
        .app_data::<web::Data<HttpContext>>()
        .expect("the app carries its shared state")
}

/// Host must name this server (DNS rebinding): `None` when it does.
fn check_host(request: &HttpRequest, shared: &HttpContext) -> Option<HttpResponse> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|host| host.to_str().ok());
    match host {
        Some(host) if access::allowed_host(host, shared.listen) => None,
        _ => Some(refused(
            StatusCode::FORBIDDEN,
            "host",
            &format!(
                "refused: the Host header must be {} or localhost:{} (this API serves this \
                 machine's own pages only)",
                shared.listen,
                shared.listen.port()
            ),
        )),
    }
}

/// Headers every page and answer carries: no framing, no sniffing, no referrer (the login
/// URL holds the token).
fn harden(mut response: HttpResponse) -> HttpResponse {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    response
}

/// The policy of every page and answer: the page's own files only, no inline script, no
/// plugin, no framing, nothing fetched elsewhere (the dashboard's ES modules are its own files,
/// which `script-src 'self'` allows). `style-src-attr 'unsafe-inline'`: the dashboard's scripts
/// still set a few `style` attributes (margins, a slot bar's width), which would otherwise be
/// dropped; an attribute cannot load or run anything, and no `<style>` element is allowed.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     style-src-attr 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
     object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The login page's: as [`CSP`], but its own inline stylesheet applies (it has no script;
/// `assets/login.html` keeps its style inline so it stands alone).
const LOGIN_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
     object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Every route's entry: the Host check, then what serves it.
pub async fn handle(
    route: &'static Route,
    request: HttpRequest,
    body: web::Payload,
) -> HttpResponse {
    let shared = shared(&request);
    if let Some(refusal) = check_host(&request, shared) {
        return harden(refusal);
    }
    let response = match route.serve {
        Serve::Healthz => json_response(StatusCode::OK, &json!({ "ok": true })),
        Serve::Describe => match shared.access.authenticate(request.headers()) {
            Some(_) => json_response(StatusCode::OK, &routes::describe()),
            None => unauthenticated(),
        },
        Serve::Index => index(&request, shared),
        Serve::Login => login(&request, shared),
        Serve::Asset => asset(&request),
        Serve::Rpc(method) => rpc(route, method, &request, body).await,
        Serve::EventsPage => events_page(route, &request).await,
        Serve::EventsSocket => super::ws::upgrade(route, &request, body).await,
    };
    harden(response)
}

/// An unknown path: a JSON 404 (after the Host check).
pub async fn no_route(request: HttpRequest) -> HttpResponse {
    if let Some(refusal) = check_host(&request, shared(&request)) {
        return harden(refusal);
    }
    harden(error_response(RpcError::new(
        code::METHOD_NOT_FOUND,
        format!(
            "no route {} {} (GET /describe lists them)",
            request.method(),
            cut(request.path(), 200)
        ),
    )))
}

/// A known path with another method: 405, naming the methods it takes.
pub async fn wrong_method(request: HttpRequest, allowed: String) -> HttpResponse {
    if let Some(refusal) = check_host(&request, shared(&request)) {
        return harden(refusal);
    }
    let error = RpcError::new(
        code::METHOD_NOT_FOUND,
        format!(
            "{} takes {allowed}, not {}",
            cut(request.path(), 200),
            request.method()
        ),
    );
    let mut response = json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({ "error": error }));
    if let Ok(value) = HeaderValue::from_str(&allowed) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    harden(response)
}

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

fn see_other(location: &'static str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

fn html(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(body)
}

/// `GET /`: the page for a logged-in browser, else to the login.
fn index(request: &HttpRequest, shared: &HttpContext) -> HttpResponse {
    let csrf = access::cookie_value(request.headers(), access::COOKIE)
        .and_then(|cookie| shared.access.login_of(&cookie));
    match csrf {
        Some(csrf) => html(StatusCode::OK, INDEX.replace("{{CSRF_TOKEN}}", &csrf)),
        None => see_other("/login"),
    }
}

/// `GET /login?code=C` or `GET /login?token=T`: a live code (spent now) or the token logs the browser in (the cookie) and goes to the page;
/// anything else is the login page, 401.
fn login(request: &HttpRequest, shared: &HttpContext) -> HttpResponse {
    let pairs = query_pairs(request.query_string()).unwrap_or_default();
    let given = |wanted: &str| {
        pairs
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.as_str())
    };
    // A single-use code (what a browser is handed), or the token (scripts).
    let valid = match (given("code"), given("token")) {
        (Some(code), _) => access::take_login_code(code),
        (None, Some(token)) => shared.access.is_token(token),
        (None, None) => false,
    };
    if !valid {
        let mut page = html(StatusCode::UNAUTHORIZED, LOGIN.to_string());
        page.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(LOGIN_CSP),
        );
        return page;
    }
    match shared.access.login() {
        Ok((cookie, _csrf)) => {
            let mut response = see_other("/");
            if let Ok(value) = HeaderValue::from_str(&access::login_cookie(&cookie)) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(error) => error_response(RpcError::new(
            code::INTERNAL,
            format!("cannot make a login: {error}"),
        )),
    }
}

/// `GET /assets/NAME`.
fn asset(request: &HttpRequest) -> HttpResponse {
    let name = request.match_info().get("file").unwrap_or_default();
    match ASSETS.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, text)) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, *content_type))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(*text),
        None => error_response(RpcError::new(
            code::NOT_FOUND,
            format!("no asset '{}'", cut(name, 80)),
        )),
    }
}

/// The query's pairs, decoded; a query past [`MAX_QUERY`] or not form-encoded is refused.
fn query_pairs(query: &str) -> Result<Vec<(String, String)>, RpcError> {
    if query.len() > MAX_QUERY {
        return Err(RpcError::new(
            code::INVALID_REQUEST,
            format!("the query is {} bytes; at most {MAX_QUERY}", query.len()),
        ));
    }
    web::Query::<Vec<(String, String)>>::from_query(query)
        .map(web::Query::into_inner)
        .map_err(|error| RpcError::new(code::INVALID_PARAMS, format!("the query: {error}")))
}

/// The params a route's query gives, each read as its declared type; an unknown or repeated
/// parameter is refused.
pub(super) fn query_params(route: &Route, query: &str) -> Result<Map<String, Value>, RpcError> {
    let mut params = Map::new();
    for (name, value) in query_pairs(query)? {
        let Some(declared) = route.query.iter().find(|query| query.name == name) else {
            let known: Vec<&str> = route.query.iter().map(|query| query.name).collect();
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "unknown query parameter '{}' ({})",
                    cut(&name, 80),
                    if known.is_empty() {
                        "this route takes none".to_string()
                    } else {
                        format!("this route takes {}", known.join(", "))
                    }
                ),
            ));
        };
        let typed = match declared.kind {
            Kind::Text => Value::String(value),
            Kind::Count => value.parse::<u64>().map(Value::from).map_err(|_| {
                RpcError::new(
                    code::INVALID_PARAMS,
                    format!(
                        "{name} must be a whole number of at least 0, not '{}'",
                        cut(&value, 80)
                    ),
                )
            })?,
            Kind::Boolean => match value.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => {
                    return Err(RpcError::new(
                        code::INVALID_PARAMS,
                        format!("{name} must be true or false, not '{}'", cut(&value, 80)),
                    ))
                }
            },
        };
        if params.insert(declared.param.to_string(), typed).is_some() {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("query parameter '{name}' is given twice"),
            ));
        }
    }
    Ok(params)
}

/// Reads the JSON body: an object of params (empty: none), at most [`MAX_BODY`] bytes.
async fn body_params(
    request: &HttpRequest,
    body: web::Payload,
) -> Result<Map<String, Value>, RpcError> {
    // The bytes read count against every request's bound until the params are made.
    let too_large = |length: &dyn std::fmt::Display| {
        RpcError::new(
            code::INVALID_REQUEST,
            format!("the body is {length} bytes; at most {MAX_BODY}"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok())
        .and_then(|length| length.parse::<u64>().ok());
    if let Some(length) = declared.filter(|length| *length > MAX_BODY as u64) {
        return Err(too_large(&length));
    }
    let (bytes, _held) = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(params)) => Ok(params),
        Ok(other) => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "the body must be a JSON object of the method's params, not {}",
                crate::protocol::json_type(&other)
            ),
        )),
        Err(error) => Err(RpcError::new(
            code::PARSE_ERROR,
            format!("the body is not JSON: {error}"),
        )),
    }
}

/// The request bytes the server holds at once, read and not yet made params, over every
/// connection: past it a request is answered BUSY (503) instead of read.
pub const MAX_BYTES_IN_FLIGHT: usize = 64 << 20;

/// The longest a request's body may take to arrive (`CORRAL_HTTP_BODY_TIMEOUT_MS` overrides
/// it, for tests).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn body_timeout() -> std::time::Duration {
    std::env::var(crate::env::HTTP_BODY_TIMEOUT_MS)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(BODY_TIMEOUT, std::time::Duration::from_millis)
}

/// Room for request bytes, shared by the workers.
static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_BYTES_IN_FLIGHT);

/// Request bytes held: given back to [`IN_FLIGHT`] when dropped.
struct Held(usize);

impl Held {
    /// Takes room for `bytes` more, at once or not at all.
    fn take(&mut self, bytes: usize) -> Result<(), RpcError> {
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        match IN_FLIGHT.try_acquire_many(permits) {
            Ok(permit) => {
                permit.forget();
                self.0 += permits as usize;
                Ok(())
            }
            Err(_) => Err(RpcError::new(
                code::BUSY,
                format!(
                    "busy: the server holds {} MiB of request bodies already; try again",
                    MAX_BYTES_IN_FLIGHT >> 20
                ),
            )),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        IN_FLIGHT.add_permits(self.0);
    }
}

/// The whole body, at most [`MAX_BODY`] bytes, arrived within [`BODY_TIMEOUT`] (a client
/// that sends a byte at a time does not hold a connection for longer), its bytes counted
/// against [`MAX_BYTES_IN_FLIGHT`] while they are held.
async fn read_body(mut body: web::Payload) -> Result<(web::Bytes, Held), RpcError> {
    use actix::prelude::Stream;
    let timeout = body_timeout();
    let mut held = Held(0);
    let mut bytes = web::BytesMut::new();
    let reading = async {
        while let Some(chunk) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx)).await
        {
            let chunk = chunk.map_err(|error| {
                RpcError::new(
                    code::INVALID_REQUEST,
                    format!("the body could not be read: {error}"),
                )
            })?;
            if bytes.len() + chunk.len() > MAX_BODY {
                return Err(RpcError::new(
                    code::INVALID_REQUEST,
                    format!("the body is more than {MAX_BODY} bytes; at most {MAX_BODY}"),
                ));
            }
            held.take(chunk.len())?;
            bytes.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, reading).await {
        Ok(Ok(())) => Ok((bytes.freeze(), held)),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(RpcError::new(
            code::INVALID_REQUEST,
            format!(
                "the body did not arrive within {} ms; send it whole",
                timeout.as_millis()
            ),
        )),
    }
}

/// A route's params: its path segments, its query, its body (a body member a segment fills
/// must say the same).
async fn params_of(
    route: &Route,
    request: &HttpRequest,
    body: web::Payload,
) -> Result<Map<String, Value>, RpcError> {
    let mut params = query_params(route, request.query_string())?;
    if route.body {
        for (name, value) in body_params(request, body).await? {
            if params.contains_key(&name) {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("{name} is given in the query and the body"),
                ));
            }
            params.insert(name, value);
        }
    }
    for (segment, value) in request.match_info().iter() {
        let param = route
            .renames
            .iter()
            .find(|(name, _)| *name == segment)
            .map_or(segment, |(_, param)| *param);
        let value = Value::String(value.to_string());
        match params.get(param) {
            Some(given) if *given != value => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("{param} is given in the path and, differently, in the body"),
                ))
            }
            _ => {
                params.insert(param.to_string(), value);
            }
        }
    }
    Ok(params)
}

/// Authentication for an API request, and CSRF for a cookie's write: the refusal, if any.
pub(super) fn check_access(
    route: &Route,
    request: &HttpRequest,
    shared: &HttpContext,
) -> Option<HttpResponse> {
    match shared.access.authenticate(request.headers()) {
        None => Some(unauthenticated()),
        Some(Authenticated::Cookie { csrf }) if route.verb.writes() => {
            let sent = request
                .headers()
                .get(access::CSRF_HEADER)
                .and_then(|value| value.to_str().ok());
            match sent {
                Some(sent) if access::same_secret(sent, &csrf) => None,
                Some(_) => Some(refused(
                    StatusCode::FORBIDDEN,
                    "csrf",
                    "refused: the X-CSRF-Token header is not this login's",
                )),
                None => Some(refused(
                    StatusCode::FORBIDDEN,
                    "csrf",
                    "refused: a write needs the X-CSRF-Token header (the page's csrf-token meta)",
                )),
            }
        }
        Some(_) => None,
    }
}

/// The exec a client names as the driver of what it sends (`X-Corral-Exec`), if any.
fn exec_of(request: &HttpRequest) -> Result<Option<String>, RpcError> {
    match request.headers().get("x-corral-exec") {
        None => Ok(None),
        Some(value) => match value.to_str() {
            Ok(exec) if !exec.is_empty() && exec.len() <= MAX_EXEC_ID => Ok(Some(exec.to_string())),
            _ => Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("X-Corral-Exec must be an exec id of 1 to {MAX_EXEC_ID} bytes"),
            )),
        },
    }
}

/// Whether a request's peer is looked up: what a GET asks never widens, nor speaks for an
/// exec unless it names one; but while any session works, a read may be an agent's reaching
/// beyond its own session (`daemon::confine`), so every request's peer is looked up then.
fn needs_peer(route: &Route, method: &str, names_exec: bool, runs_live: bool) -> bool {
    route.verb.writes() || method.starts_with("driver.") || names_exec || runs_live
}

/// The process behind the request's TCP peer, looked up now (a pass over /proc). Done when
/// the request starts, before its body is read: a client that sent its request and closed
/// is found only while it still holds the socket.
async fn peer_of(request: &HttpRequest) -> Option<i32> {
    let peer = request.peer_addr()?;
    let local = request.app_config().local_addr();
    web::block(move || super::peer::pid_of(peer, local))
        .await
        .ok()
        .flatten()
}

/// A read of events (a page, the WebSocket) as `events.subscribe` with `params`: while any
/// session works, the peer is looked up and an agent kept to its own session
/// (`daemon::confine`).
pub(super) async fn confine_events(
    request: &HttpRequest,
    corral: &crate::Corral,
    params: &Value,
) -> Result<(), RpcError> {
    if !corral.any_working() {
        return Ok(());
    }
    let peer = peer_of(request).await;
    crate::daemon::confine::confine_peer(corral, peer, "events.subscribe", params).await
}

/// `X-Corral-Exec` over HTTP names an exec of the store, still running, run by the process
/// that sends the request: anything else is refused (a request cannot speak for an exec that
/// is not its own).
async fn check_exec(
    shared: &HttpContext,
    exec_id: &str,
    peer_pid: Option<i32>,
) -> Result<(), RpcError> {
    let corral = shared.corral.clone();
    let id = exec_id.to_string();
    let row = web::block(move || corral.exec(&id))
        .await
        .map_err(|_| RpcError::new(code::INTERNAL, "the exec's read did not finish"))?
        .map_err(RpcError::from)?
        .map(|exec| (exec.pid, exec.completed_at));
    let shown = cut(exec_id, 80);
    match row {
        None => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("X-Corral-Exec names exec {shown}, which is not recorded"),
        )),
        Some((_, Some(_))) => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("X-Corral-Exec names exec {shown}, which has ended"),
        )),
        Some((pid, None)) => match (pid, peer_pid) {
            (Some(pid), Some(peer)) if pid == i64::from(peer) => Ok(()),
            _ => Err(RpcError::new(
                code::NOT_ALLOWED,
                format!(
                    "X-Corral-Exec names exec {shown}, which is not the process sending this \
                     request{}",
                    peer_pid.map_or(" (its process could not be found)".to_string(), |peer| {
                        format!(" (pid {peer})")
                    })
                ),
            )),
        },
    }
}

/// A socket method's route.
async fn rpc(
    route: &Route,
    method: &'static str,
    request: &HttpRequest,
    body: web::Payload,
) -> HttpResponse {
    let shared = shared(request);
    if let Some(refusal) = check_access(route, request, shared) {
        return refusal;
    }
    let exec_id = match exec_of(request) {
        Ok(exec_id) => exec_id,
        Err(error) => return error_response(error),
    };
    // Who asks is looked up first, before the body is read (whether a request widens is
    // known only from its body), and only when it may matter: a write (any may widen), a
    // driver's request, one that speaks for an exec. A read never widens.
    let runs_live = shared.corral.any_working();
    let peer_pid = if needs_peer(route, method, exec_id.is_some(), runs_live) {
        let found = peer_of(request).await;
        if found.is_none() {
            tracing::info!(
                method,
                "http: the process behind a {method} request was not found (it closed its \
                 connection, or is another user's): an unknown peer"
            );
        }
        found
    } else {
        None
    };
    let mut params = match params_of(route, request, body).await {
        Ok(params) => Value::Object(params),
        Err(error) => return error_response(error),
    };
    // A request's exec record is the socket's (`corral send`'s, `corral run`'s): the browser
    // never sends one, and an HTTP peer cannot be matched against one's pid.
    if params.get("exec").is_some() {
        return error_response(RpcError::new(
            code::INVALID_PARAMS,
            "exec records are the socket's: a request over HTTP takes no exec",
        ));
    }
    if let Some(exec_id) = &exec_id {
        if let Err(error) = check_exec(shared, exec_id, peer_pid).await {
            return error_response(error);
        }
    }
    // A browser's images come as their bytes: written to files, sent as their paths.
    let mut uploaded = Vec::new();
    if method == "prompt.send" {
        let home = shared.home.clone();
        let stored = web::block(move || {
            super::uploads::store(&home, &mut params).map(|written| (params, written))
        })
        .await;
        match stored {
            Ok(Ok((stored, written))) => {
                params = stored;
                uploaded = written;
            }
            Ok(Err(error)) => return error_response(error),
            Err(_) => {
                return error_response(RpcError::new(code::INTERNAL, "the upload did not finish"))
            }
        }
    }
    match shared.bridge.call(method, params, peer_pid, exec_id).await {
        Ok(result) => json_response(StatusCode::OK, &result),
        Err(error) => {
            super::uploads::remove(&uploaded);
            error_response(error)
        }
    }
}

/// `GET /api/v1/sessions/{session}/events?after=N&limit=M`: stored events after `after`,
/// oldest first, at most `limit` (≤ [`EVENTS_PAGE`]); `next_after` resumes the page.
async fn events_page(route: &Route, request: &HttpRequest) -> HttpResponse {
    let shared = shared(request);
    if let Some(refusal) = check_access(route, request, shared) {
        return refusal;
    }
    let params = match query_params(route, request.query_string()) {
        Ok(params) => params,
        Err(error) => return error_response(error),
    };
    let after = params.get("after").and_then(Value::as_u64).unwrap_or(0);
    let limit = params
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(EVENTS_PAGE as u64);
    if limit == 0 || limit > EVENTS_PAGE as u64 {
        return error_response(RpcError::new(
            code::INVALID_PARAMS,
            format!("limit must be 1 to {EVENTS_PAGE}, not {limit}"),
        ));
    }
    let selector = request
        .match_info()
        .get("session")
        .unwrap_or_default()
        .to_string();
    let corral = shared.corral.clone();
    // An agent reads its own session's events only (`daemon::confine`).
    if let Err(error) = confine_events(request, &corral, &json!({ "session": selector })).await {
        return error_response(error);
    }
    let read = web::block(move || -> Result<Value, RpcError> {
        let session = methods::resolve_session(&corral, &selector)?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let events = corral.events_after(&session.id, after, limit as usize)?;
        let next_after = events.last().map_or(after, |event| event.seq);
        Ok(json!({
            "session": session.id,
            "events": events,
            "next_after": next_after,
            "more": events.len() as u64 == limit,
        }))
    })
    .await;
    match read {
        Ok(Ok(page)) => json_response(StatusCode::OK, &page),
        Ok(Err(error)) => error_response(error),
        Err(_) => error_response(RpcError::new(code::INTERNAL, "the read did not finish")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_has_its_status() {
        assert_eq!(status_of(code::PARSE_ERROR), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(code::INVALID_PARAMS), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(code::NOT_FOUND), StatusCode::NOT_FOUND);
        assert_eq!(status_of(code::METHOD_NOT_FOUND), StatusCode::NOT_FOUND);
        assert_eq!(status_of(code::AMBIGUOUS), StatusCode::CONFLICT);
        assert_eq!(status_of(code::CLAIMED), StatusCode::CONFLICT);
        assert_eq!(status_of(code::BUSY), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status_of(code::NOT_ALLOWED), StatusCode::FORBIDDEN);
        assert_eq!(status_of(code::INTERNAL), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn every_route_that_may_widen_looks_its_peer_up() {
        // The methods whose params may widen (origin::Widening) are all written to, never read.
        for route in routes::ROUTES {
            let Serve::Rpc(method) = route.serve else {
                continue;
            };
            let widens = [
                "project.add",
                "project.set",
                "settings.set",
                "group.set",
                "shutdown",
                "driver.claim",
            ]
            .contains(&method);
            if widens {
                assert!(needs_peer(route, method, false, false), "{method}");
            }
        }
        let status = routes::ROUTES
            .iter()
            .find(|route| route.serve == Serve::Rpc("status"))
            .unwrap();
        assert!(!needs_peer(status, "status", false, false));
        assert!(needs_peer(status, "status", true, false));
        // While a session works, a read may be an agent's: its peer is looked up.
        assert!(needs_peer(status, "status", false, true));
    }

    #[test]
    fn request_bytes_in_flight_are_bounded_and_given_back() {
        let mut held = Held(0);
        held.take(MAX_BYTES_IN_FLIGHT - 10).unwrap();
        let mut other = Held(0);
        assert_eq!(other.take(11).unwrap_err().code, code::BUSY);
        other.take(10).unwrap();
        drop(held);
        drop(other);
        let mut again = Held(0);
        again.take(MAX_BYTES_IN_FLIGHT).unwrap();
    }

    #[test]
    fn query_params_are_typed_and_strict() {
        let route = routes::ROUTES
            .iter()
            .find(|route| route.serve == Serve::Rpc("session.list"))
            .unwrap();
        let params = query_params(route, "project=p&archived=true").unwrap();
        assert_eq!(
            Value::Object(params),
            json!({ "project": "p", "all": true })
        );
        for bad in ["archived=yes", "nope=1", "project=a&project=b"] {
            let error = query_params(route, bad).unwrap_err();
            assert_eq!(error.code, code::INVALID_PARAMS, "{bad}");
        }
        let status = routes::ROUTES
            .iter()
            .find(|route| route.serve == Serve::Rpc("status"))
            .unwrap();
        assert_eq!(
            query_params(status, "waiters=-1").unwrap_err().code,
            code::INVALID_PARAMS
        );
        assert_eq!(
            query_params(status, &"w".repeat(MAX_QUERY + 1))
                .unwrap_err()
                .code,
            code::INVALID_REQUEST
        );
    }

    /// The dashboard's folder in the source tree.
    fn assets_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon/http/assets")
    }

    /// A file added to `assets/` (a new module) and not to [`ASSETS`] would be a 404 in the
    /// browser only; the pages are served by their own routes.
    #[test]
    fn every_dashboard_file_is_served_and_every_served_one_is_there() {
        let dir = assets_dir();
        let mut on_disk = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            // The route's `{file}` takes no '/': the folder stays flat.
            assert!(
                entry.file_type().unwrap().is_file(),
                "assets/{name} is not a file"
            );
            on_disk.push(name);
        }
        for name in &on_disk {
            let page = name == "index.html" || name == "login.html";
            assert!(
                page || ASSETS.iter().any(|(file, _, _)| *file == name.as_str()),
                "assets/{name} is not in ASSETS: the page could not load it"
            );
        }
        for (file, content_type, text) in ASSETS {
            assert!(
                on_disk.iter().any(|name| name == file),
                "ASSETS lists {file}, not in assets/"
            );
            let now = std::fs::read_to_string(dir.join(file)).unwrap();
            assert_eq!(now, *text, "{file}");
            if file.ends_with(".js") {
                assert_eq!(*content_type, JS, "{file}");
            }
        }
    }

    /// The modules' imports, and the page's scripts and preloads, name served files only: one
    /// missing would fail in a browser only. No import leaves this folder (nor this host).
    #[test]
    fn every_script_the_dashboard_loads_is_served() {
        let served = |name: &str| ASSETS.iter().any(|(file, _, _)| *file == name);
        let mut imports = 0;
        for (file, _, text) in ASSETS.iter().filter(|(file, _, _)| file.ends_with(".js")) {
            for line in text.lines().map(str::trim) {
                // `import { a } from './x.js';`, the last line of a longer list, `import './x.js';`
                let import = (line.starts_with("import ") || line.starts_with("} from "))
                    && (line.contains(" from ") || line.starts_with("import '"));
                if !import {
                    continue;
                }
                let quoted = line.trim_end_matches(';');
                let spec = quoted
                    .strip_suffix('\'')
                    .and_then(|rest| rest.rsplit_once('\''))
                    .map(|(_, spec)| spec);
                let Some(spec) = spec else {
                    panic!("{file}: cannot read the import `{line}`");
                };
                let name = spec.strip_prefix("./").unwrap_or_default();
                assert!(
                    !name.is_empty() && !name.contains('/') && served(name),
                    "{file} imports '{spec}', which is not a served file of assets/"
                );
                imports += 1;
            }
        }
        assert!(
            imports > 10,
            "only {imports} imports found: is the search still right?"
        );

        for (at, _) in INDEX.match_indices("\"/assets/") {
            let rest = &INDEX[at + "\"/assets/".len()..];
            let name = &rest[..rest.find('"').unwrap()];
            assert!(
                served(name),
                "index.html loads /assets/{name}, which is not served"
            );
        }
        // Each script is either loaded by the page (app.js, the entry; theme-early.js, a classic
        // one) or preloaded with it, so that the browser does not find the modules one level of
        // imports at a time.
        for (file, _, _) in ASSETS.iter().filter(|(file, _, _)| file.ends_with(".js")) {
            let script = INDEX.contains(&format!("<script src=\"/assets/{file}\">"))
                || INDEX.contains(&format!("<script type=\"module\" src=\"/assets/{file}\">"));
            let preload = INDEX.contains(&format!(
                "<link rel=\"modulepreload\" href=\"/assets/{file}\">"
            ));
            assert!(
                script != preload,
                "index.html should either load {file} or preload it"
            );
        }
    }
}
