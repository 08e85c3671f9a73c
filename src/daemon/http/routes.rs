//! The route table: every path the HTTP server answers, in one place. [`app`] builds the
//! actix-web app from it and [`describe`] answers `GET /describe` from it, so the two cannot
//! drift apart.
//!
//! A route names what serves it ([`Serve`]): most are a socket method ([`Serve::Rpc`]), whose
//! params come from the path (a segment fills the param of its name, or the one
//! [`Route::renames`] says), the query ([`Route::query`]: each parameter declared with its
//! type, anything else refused) and, for writes, the JSON body (an object of the method's
//! params).

use actix_web::{web, App};
use serde_json::{json, Value};

use super::{api, HttpContext};
use crate::protocol::PROTOCOL_VERSION;

/// An HTTP method a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// Whether a request with this method changes something (a cookie needs CSRF then).
    pub fn writes(self) -> bool {
        self != Verb::Get
    }

    fn method(self) -> actix_web::http::Method {
        use actix_web::http::Method;
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }
}

/// The type of a query parameter (query values are text: each is read as its type says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// A whole number of at least 0.
    Count,
    /// `true` or `false`.
    Boolean,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Text => "string",
            Kind::Count => "integer",
            Kind::Boolean => "boolean",
        }
    }
}

/// A query parameter a route takes: its name in the URL, the method's param it fills.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    pub name: &'static str,
    pub param: &'static str,
    pub kind: Kind,
}

const fn q(name: &'static str, kind: Kind) -> Query {
    Query {
        name,
        param: name,
        kind,
    }
}

/// What serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// `{"ok":true}`, without authentication.
    Healthz,
    /// The routes and capabilities.
    Describe,
    /// The dashboard's page (`assets/index.html` with its CSRF token).
    Index,
    /// The login: `?token=T` sets the cookie.
    Login,
    /// A file of `assets/`.
    Asset,
    /// A socket method.
    Rpc(&'static str),
    /// A page of a session's stored events.
    EventsPage,
    /// The WebSocket of events.
    EventsSocket,
}

/// One route.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub verb: Verb,
    /// actix-web's pattern: `{name}` is a path segment.
    pub path: &'static str,
    pub serve: Serve,
    pub query: &'static [Query],
    /// Whether the body is read (a JSON object of params).
    pub body: bool,
    /// Path segments that fill a param of another name: `(segment, param)`.
    pub renames: &'static [(&'static str, &'static str)],
}

const fn route(verb: Verb, path: &'static str, serve: Serve) -> Route {
    Route {
        verb,
        path,
        serve,
        query: &[],
        body: false,
        renames: &[],
    }
}

const fn rpc(verb: Verb, path: &'static str, method: &'static str) -> Route {
    route(verb, path, Serve::Rpc(method))
}

const fn with_query(mut route: Route, query: &'static [Query]) -> Route {
    route.query = query;
    route
}

const fn with_body(mut route: Route) -> Route {
    route.body = true;
    route
}

const fn renamed(mut route: Route, renames: &'static [(&'static str, &'static str)]) -> Route {
    route.renames = renames;
    route
}

use Kind::{Boolean, Count, Text};
use Verb::{Delete, Get, Patch, Post, Put};

/// `?archived=true` lists archived ones too (the method's `all`).
const ARCHIVED: Query = Query {
    name: "archived",
    param: "all",
    kind: Boolean,
};

/// Every route, in the order `/describe` lists them.
pub const ROUTES: &[Route] = &[
    route(Get, "/healthz", Serve::Healthz),
    route(Get, "/describe", Serve::Describe),
    route(Get, "/", Serve::Index),
    route(Get, "/login", Serve::Login),
    route(Get, "/assets/{file}", Serve::Asset),
    with_query(rpc(Get, "/api/v1/status", "status"), &[q("waiters", Count)]),
    rpc(Get, "/api/v1/overview", "overview"),
    with_query(rpc(Get, "/api/v1/projects", "project.list"), &[ARCHIVED]),
    with_body(rpc(Post, "/api/v1/projects", "project.add")),
    rpc(Get, "/api/v1/projects/{project}", "project.show"),
    with_body(rpc(Patch, "/api/v1/projects/{project}", "project.set")),
    rpc(
        Post,
        "/api/v1/projects/{project}/archive",
        "project.archive",
    ),
    rpc(Get, "/api/v1/groups", "group.list"),
    with_body(rpc(Put, "/api/v1/groups/{name}", "group.set")),
    rpc(Delete, "/api/v1/groups/{name}", "group.remove"),
    // What is paused; a pause and a resume name their scope in the body (`{"session"}`,
    // `{"project"}`, `{"group"}` or `{"all": true}`; a pause may add `"now": true`).
    rpc(Get, "/api/v1/pauses", "pause.list"),
    with_body(rpc(Post, "/api/v1/pause", "pause")),
    with_body(rpc(Post, "/api/v1/resume", "resume")),
    // Schedules: a new one names `{"session"}` or `{"project"}`, with `cron` and `text`.
    rpc(Get, "/api/v1/schedules", "schedule.list"),
    with_body(rpc(Post, "/api/v1/schedules", "schedule.add")),
    with_query(
        rpc(Get, "/api/v1/schedules/{schedule}", "schedule.show"),
        &[q("limit", Count)],
    ),
    rpc(Post, "/api/v1/schedules/{schedule}/pause", "schedule.pause"),
    rpc(
        Post,
        "/api/v1/schedules/{schedule}/resume",
        "schedule.resume",
    ),
    rpc(Delete, "/api/v1/schedules/{schedule}", "schedule.remove"),
    with_query(
        rpc(Get, "/api/v1/sessions", "session.list"),
        &[q("project", Text), ARCHIVED],
    ),
    with_body(rpc(Post, "/api/v1/sessions", "session.new")),
    rpc(Get, "/api/v1/sessions/{session}", "session.show"),
    with_body(rpc(Patch, "/api/v1/sessions/{session}", "session.rename")),
    // `{"discard_changes": true}` removes a kept worktree (a widening).
    with_body(rpc(
        Post,
        "/api/v1/sessions/{session}/archive",
        "session.archive",
    )),
    // A read: `?stat=true` for git's summary instead of the patch.
    with_query(
        rpc(Get, "/api/v1/sessions/{session}/diff", "session.diff"),
        &[q("stat", Boolean)],
    ),
    // Writes the person's branch (a widening): `{"into", "squash"}`.
    with_body(rpc(
        Post,
        "/api/v1/sessions/{session}/merge",
        "session.merge",
    )),
    rpc(
        Post,
        "/api/v1/sessions/{session}/recreate",
        "session.recreate",
    ),
    with_body(rpc(
        Post,
        "/api/v1/sessions/{session}/prompts",
        "prompt.send",
    )),
    with_body(rpc(
        Post,
        "/api/v1/sessions/{session}/steer",
        "session.steer",
    )),
    rpc(
        Post,
        "/api/v1/sessions/{session}/compact",
        "session.compact",
    ),
    with_query(
        route(Get, "/api/v1/sessions/{session}/events", Serve::EventsPage),
        &[q("after", Count), q("limit", Count)],
    ),
    rpc(Get, "/api/v1/sessions/{session}/driver", "driver.show"),
    with_body(rpc(
        Post,
        "/api/v1/sessions/{session}/driver",
        "driver.claim",
    )),
    with_body(rpc(
        Delete,
        "/api/v1/sessions/{session}/driver",
        "driver.release",
    )),
    renamed(
        rpc(Post, "/api/v1/prompts/{prompt}/cancel", "prompt.cancel"),
        &[("prompt", "target")],
    ),
    rpc(Get, "/api/v1/prompts/{prompt}/wait", "prompt.wait"),
    // `{"text"}`: a new text for it (optional).
    with_body(rpc(Post, "/api/v1/prompts/{prompt}/retry", "prompt.retry")),
    // `{"text"}`: a queued prompt's new text.
    with_body(rpc(Patch, "/api/v1/prompts/{prompt}", "prompt.edit")),
    with_query(
        rpc(Get, "/api/v1/history", "history"),
        &[q("session", Text)],
    ),
    with_query(
        rpc(Get, "/api/v1/execs", "execs.list"),
        &[
            q("parent", Text),
            q("caller", Text),
            q("outcome", Text),
            q("search", Text),
            q("repo", Text),
            q("task", Text),
            q("wave", Text),
            q("limit", Count),
            q("after", Text),
        ],
    ),
    with_query(
        rpc(Get, "/api/v1/approvals", "approvals.list"),
        &[q("session", Text), q("all", Boolean)],
    ),
    // `{decision}` is `approve` or `deny`; the body `{"reason", "for_session", "pattern"}`.
    with_body(rpc(
        Post,
        "/api/v1/approvals/{approval}/{decision}",
        "approvals.answer",
    )),
    rpc(Get, "/api/v1/settings", "settings.list"),
    rpc(Get, "/api/v1/settings/{name}", "settings.get"),
    with_body(rpc(Put, "/api/v1/settings/{name}", "settings.set")),
    rpc(Post, "/api/v1/shutdown", "shutdown"),
    with_query(
        route(Get, "/api/v1/events", Serve::EventsSocket),
        &[q("session", Text), q("after", Count)],
    ),
];

/// What the server can do, for `/describe`.
pub const CAPABILITIES: &[&str] = &[
    "api.v1",
    "auth.bearer",
    "auth.cookie",
    "csrf",
    "events.websocket",
    "events.session",
    "events.all",
    "events.resume",
    "dashboard",
    "approvals",
];

/// The actix-web app: one resource per path, a route per verb; anything else is a JSON 404
/// (or 405 on a known path).
pub fn app(
    shared: web::Data<HttpContext>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let mut app = App::new()
        .app_data(shared)
        .default_service(web::to(api::no_route));
    let mut paths: Vec<&'static str> = Vec::new();
    for route in ROUTES {
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    for path in paths {
        let mut resource = web::resource(path);
        let mut allowed = Vec::new();
        for route in ROUTES.iter().filter(|route| route.path == path) {
            allowed.push(route.verb.name());
            resource = resource.route(web::method(route.verb.method()).to(
                move |request: actix_web::HttpRequest, body: web::Payload| {
                    api::handle(route, request, body)
                },
            ));
        }
        let allowed = allowed.join(", ");
        resource = resource.default_service(web::to(move |request: actix_web::HttpRequest| {
            api::wrong_method(request, allowed.clone())
        }));
        app = app.service(resource);
    }
    app
}

/// `GET /describe`'s answer.
pub fn describe() -> Value {
    let routes: Vec<Value> = ROUTES
        .iter()
        .map(|route| {
            let rpc = match route.serve {
                Serve::Rpc(method) => Value::from(method),
                _ => Value::Null,
            };
            let query: Vec<Value> = route
                .query
                .iter()
                .map(|query| json!({ "name": query.name, "type": query.kind.name() }))
                .collect();
            json!({
                "method": route.verb.name(),
                "path": route.path,
                "rpc": rpc,
                "query": query,
                "body": route.body,
                "auth": route.serve != Serve::Healthz && route.serve != Serve::Login
                    && route.serve != Serve::Asset,
                "websocket": route.serve == Serve::EventsSocket,
            })
        })
        .collect();
    json!({
        "corral_version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "routes": routes,
        "capabilities": CAPABILITIES,
        "max_body": super::MAX_BODY,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_listed_once_and_its_segments_fill_params() {
        let mut seen = std::collections::HashSet::new();
        for route in ROUTES {
            assert!(seen.insert((route.verb, route.path)), "{route:?} twice");
            for (segment, _) in route.renames {
                assert!(route.path.contains(&format!("{{{segment}}}")), "{route:?}");
            }
            // A GET takes no body: its params are its path and query.
            assert!(!(route.verb == Verb::Get && route.body), "{route:?}");
        }
        let described = describe();
        assert_eq!(described["routes"].as_array().unwrap().len(), ROUTES.len());
    }
}
