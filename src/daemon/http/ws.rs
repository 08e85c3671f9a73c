//! `GET /api/v1/events`: the WebSocket of events, one session's (`?session=S`, cursor `seq`)
//! or every session's (no `session`; cursor the daemon-wide `feed_seq`), from `?after=N`.
//!
//! Each client has three parts on its worker thread: the feed (the shared event stream,
//! `daemon::events::event_stream`: replay from the store, then the live broadcast, the lag
//! rule), a writer that hands frames to the connection, and between them a queue bounded to
//! [`CLIENT_BYTES`]. The feed waits for room in the queue as long as the client makes some:
//! a client that frees none for [`STALL`] is not reading, and is dropped (its connection
//! closed, nothing kept for it); the sessions never wait for any client, since they publish
//! into the broadcast without waiting. A client that reads but falls more than the broadcast's
//! buffer behind gets `events.lagged` with the cursor to resume from, then the server closes,
//! as on the socket.
//!
//! Messages are the socket's notifications as JSON text:
//! `{"jsonrpc":"2.0","method":"events.event","params":{"event":{…}}}` and
//! `{"jsonrpc":"2.0","method":"events.lagged","params":{"resume_after":N}}`.

use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::routes::Route;
use crate::daemon::events::{event_stream, EventStream, Scope, StreamItem};
use crate::daemon::methods;
use crate::protocol::{code, Notification, RpcError};

/// The bytes queued for one client at most (an event larger than that goes alone).
pub const CLIENT_BYTES: usize = 1 << 20;

/// What a queued message counts for besides its text.
const MESSAGE_OVERHEAD: usize = 64;

/// How long a client with a full queue may go without reading before it is dropped.
pub const STALL: Duration = Duration::from_secs(5);

/// What the writer sends.
enum Frame {
    Text(String),
    Pong(web::Bytes),
}

/// Checks, resolves and upgrades; the client's parts then run on this worker.
pub async fn upgrade(route: &Route, request: &HttpRequest, body: web::Payload) -> HttpResponse {
    let shared = super::api::shared(request);
    if let Some(refusal) = super::api::check_access(route, request, shared) {
        return refusal;
    }
    let origin = request
        .headers()
        .get(actix_web::http::header::ORIGIN)
        .map(|origin| origin.to_str().unwrap_or("?"));
    if !super::access::allowed_origin(origin, shared.listen) {
        return super::api::refused(
            actix_web::http::StatusCode::FORBIDDEN,
            "origin",
            &format!(
                "refused: the WebSocket's Origin must be http://{} or http://localhost:{}",
                shared.listen,
                shared.listen.port()
            ),
        );
    }
    let params = match super::api::query_params(route, request.query_string()) {
        Ok(params) => params,
        Err(error) => return super::api::error_response(error),
    };
    let after = params.get("after").and_then(Value::as_u64).unwrap_or(0);
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let corral = shared.corral.clone();
    // An agent follows its own session's events only (`daemon::confine`).
    let asked = Value::Object(params.clone());
    if let Err(error) = super::api::confine_events(request, &corral, &asked).await {
        return super::api::error_response(error);
    }
    let scope = match params.get("session").and_then(Value::as_str) {
        None => Scope::All,
        Some(selector) => {
            let selector = selector.to_string();
            let resolving = corral.clone();
            match web::block(move || methods::resolve_session(&resolving, &selector)).await {
                Ok(Ok(session)) => Scope::Session(session.id),
                Ok(Err(error)) => return super::api::error_response(error),
                Err(_) => {
                    return super::api::error_response(RpcError::new(
                        code::INTERNAL,
                        "the session could not be read",
                    ))
                }
            }
        }
    };
    // Listening starts before the answer: nothing published after it is missed.
    let events = event_stream(corral, scope, after);
    let (response, session, messages) = match actix_ws::handle(request, body) {
        Ok(upgraded) => upgraded,
        Err(error) => {
            return super::api::error_response(RpcError::new(
                code::INVALID_REQUEST,
                format!("not a WebSocket upgrade: {error}"),
            ))
        }
    };
    actix_web::rt::spawn(serve(events, session, messages));
    response
}

/// A notification's text.
fn notification(method: &str, params: Value) -> String {
    serde_json::to_string(&Notification::new(method, params)).expect("notifications serialize")
}

/// An event's notification: its JSON text is made once for every client.
fn event_text(event: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"events.event","params":{{"event":{event}}}}}"#)
}

/// How a client's feed ended.
enum End {
    /// The stream ended, or lagged (its notice queued): the writer flushes, then closes.
    Flush,
    /// The client left, or stopped reading: drop everything now.
    Drop,
}

async fn serve(
    events: EventStream,
    session: actix_ws::Session,
    mut messages: actix_ws::MessageStream,
) {
    let (queue, queued) = mpsc::unbounded_channel::<(Frame, Option<OwnedSemaphorePermit>)>();
    let room = Arc::new(Semaphore::new(CLIENT_BYTES));
    let writer = actix_web::rt::spawn(write(session, queued));
    let end = feed(events, &queue, &room, &mut messages).await;
    drop(queue);
    match end {
        End::Flush => {
            // The writer closes once its queue is written (at most [`CLIENT_BYTES`]); one that
            // cannot write it within [`STALL`] is not read either.
            let mut writer = writer;
            if tokio::time::timeout(STALL, &mut writer).await.is_err() {
                writer.abort();
            }
        }
        End::Drop => writer.abort(),
    }
}

/// Feeds the queue until the stream ends, the client leaves or stops reading.
async fn feed(
    mut events: EventStream,
    queue: &mpsc::UnboundedSender<(Frame, Option<OwnedSemaphorePermit>)>,
    room: &Arc<Semaphore>,
    messages: &mut actix_ws::MessageStream,
) -> End {
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            message = messages.recv() => match message {
                Some(Ok(actix_ws::Message::Ping(bytes))) => {
                    // A pong takes room in the queue as any frame: a client that pings and
                    // never reads fills it, and is dropped as one that stops reading.
                    let Some(permit) = reserve(room, bytes.len() + MESSAGE_OVERHEAD).await else {
                        return End::Drop;
                    };
                    if queue.send((Frame::Pong(bytes), Some(permit))).is_err() {
                        return End::Drop;
                    }
                    continue;
                }
                Some(Ok(actix_ws::Message::Close(_))) | Some(Err(_)) | None => return End::Drop,
                Some(Ok(_)) => continue,
            },
        };
        let text = match item {
            Some(StreamItem::Event(event)) => event_text(event.json()),
            Some(StreamItem::Lagged { resume_after }) => {
                let notice = notification("events.lagged", json!({ "resume_after": resume_after }));
                let _ = queue.send((Frame::Text(notice), None));
                return End::Flush;
            }
            None => return End::Flush,
        };
        let Some(permit) = reserve(room, text.len() + MESSAGE_OVERHEAD).await else {
            return End::Drop;
        };
        if queue.send((Frame::Text(text), Some(permit))).is_err() {
            return End::Drop;
        }
    }
}

/// Room for a frame of `cost` bytes in a client's queue, waited for as long as the client
/// reads: `None` when it frees none within [`STALL`] (it is dropped then).
async fn reserve(room: &Arc<Semaphore>, cost: usize) -> Option<OwnedSemaphorePermit> {
    let cost = cost.min(CLIENT_BYTES) as u32;
    if let Ok(permit) = room.clone().try_acquire_many_owned(cost) {
        return Some(permit);
    }
    tokio::select! {
        permit = room.clone().acquire_many_owned(cost) => permit.ok(),
        () = tokio::time::sleep(STALL) => {
            tracing::info!("http: dropped a WebSocket client that stopped reading");
            None
        }
    }
}

/// Writes the queue to the client, giving room back as each frame is handed over; closes the
/// WebSocket when the queue ends.
async fn write(
    mut session: actix_ws::Session,
    mut queued: mpsc::UnboundedReceiver<(Frame, Option<OwnedSemaphorePermit>)>,
) {
    while let Some((frame, permit)) = queued.recv().await {
        let sent = match frame {
            Frame::Text(text) => session.text(text).await,
            Frame::Pong(bytes) => session.pong(&bytes).await,
        };
        drop(permit);
        if sent.is_err() {
            return;
        }
    }
    let _ = session.close(None).await;
}
