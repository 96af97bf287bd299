//! The dashboard's actions: each a `POST` of JSON, refused unless the actions are on and the
//! request comes from the dashboard's own page ([`guard`](super::guard)), then one or a few
//! calls of the wheel's public API.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{failed, guard, ShownWheel, BULK_MAX};
use crate::durable::DurableScheduler;
use crate::Error;

/// What an action did, for its answer: the HTTP status and the JSON body.
type Done = (StatusCode, Value);

/// An action refused: the status and `{"error": why}`, a small value to return early with.
type Refused = (StatusCode, Json<Value>);

fn refuse(status: StatusCode, why: &str) -> Refused {
    (status, Json(json!({ "error": why })))
}

/// Checks an action (enabled, from the dashboard's own page, with a JSON body) and reads its
/// body: the answer to send back otherwise.
fn checked(w: &ShownWheel, headers: &HeaderMap, body: &[u8]) -> Result<Value, Refused> {
    if !w.actions {
        let why = "the dashboard is read-only: the mounting code enables actions with Dashboard::actions";
        return Err(refuse(StatusCode::FORBIDDEN, why));
    }
    if let Some(why) = guard::refuse_cross_site(headers) {
        return Err(refuse(StatusCode::FORBIDDEN, why));
    }
    let json_body = headers
        .get(CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")));
    if !json_body {
        return Err(refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send JSON: Content-Type: application/json"));
    }
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| refuse(StatusCode::BAD_REQUEST, "send a JSON object, such as {\"key\": \"...\"}"))
}

/// The key an action names: `{"key": k}`.
fn one_key(w: &ShownWheel, headers: &HeaderMap, body: &[u8]) -> Result<String, Refused> {
    match checked(w, headers, body)?.get("key").and_then(Value::as_str) {
        Some(key) if !key.is_empty() => Ok(key.to_owned()),
        _ => Err(refuse(StatusCode::BAD_REQUEST, "send the key as JSON: {\"key\": \"...\"}")),
    }
}

/// The keys a dead-letter action names: `{"key": k}` (one, answered by its own status) or
/// `{"keys": [..]}` (up to [`BULK_MAX`], answered together).
enum Keys {
    One(String),
    Many(Vec<String>),
}

fn keys(w: &ShownWheel, headers: &HeaderMap, body: &[u8]) -> Result<Keys, Refused> {
    let body = checked(w, headers, body)?;
    if let Some(key) = body.get("key").and_then(Value::as_str).filter(|k| !k.is_empty()) {
        return Ok(Keys::One(key.to_owned()));
    }
    let send = format!("send {{\"key\": \"...\"}} or {{\"keys\": [...]}}, 1 to {BULK_MAX} keys");
    let Some(list) = body.get("keys").and_then(Value::as_array).filter(|l| !l.is_empty() && l.len() <= BULK_MAX) else {
        return Err(refuse(StatusCode::BAD_REQUEST, &send));
    };
    let keys: Option<Vec<String>> =
        list.iter().map(|k| k.as_str().filter(|k| !k.is_empty()).map(str::to_owned)).collect();
    keys.map(Keys::Many).ok_or_else(|| refuse(StatusCode::BAD_REQUEST, &send))
}

fn acted(result: Result<Done, Error>) -> Response {
    match result {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(e) => failed(&e),
    }
}

/// `found` as 200 with `{"key": key, done: true}`, or a 404 saying `missing`.
fn found_or_not(key: &str, found: bool, done: &str, missing: &str) -> Done {
    if found {
        (StatusCode::OK, json!({ "key": key, done: true }))
    } else {
        (StatusCode::NOT_FOUND, json!({ "key": key, "error": missing }))
    }
}

/// Makes the waiting or ready task due now: `reschedule(key, 0)`.
pub(super) async fn run_now(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    let key = match one_key(&w, &headers, &body) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    acted(match w.timers.reschedule(&key, Duration::ZERO).await {
        Ok(()) => Ok(found_or_not(&key, true, "due_now", "")),
        Err(Error::NotFound) => Ok(found_or_not(
            &key,
            false,
            "",
            "no task waiting or ready under this key (running, finished or cancelled)",
        )),
        Err(e) => Err(e),
    })
}

/// Cancels the waiting or ready task.
pub(super) async fn cancel(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    let key = match one_key(&w, &headers, &body) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    let missing = "no task waiting or ready under this key (a running one is stopped by cancel-running)";
    acted(w.timers.cancel(&key).await.map(|found| found_or_not(&key, found, "cancelled", missing)))
}

/// Tells the handler of the running task to stop.
pub(super) async fn cancel_running(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    let key = match one_key(&w, &headers, &body) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    let missing = "no task running under this key";
    acted(w.timers.cancel_running(&key).await.map(|found| found_or_not(&key, found, "cancel_requested", missing)))
}

pub(super) async fn pause(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = checked(&w, &headers, &body) {
        return refused.into_response();
    }
    acted(w.timers.pause().await.map(|()| (StatusCode::OK, json!({ "paused": true }))))
}

pub(super) async fn resume(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = checked(&w, &headers, &body) {
        return refused.into_response();
    }
    acted(w.timers.resume().await.map(|()| (StatusCode::OK, json!({ "paused": false }))))
}

/// What putting back one dead letter did.
enum Requeued {
    Done,
    Missing,
    Pending,
}

async fn requeue_one(timers: &DurableScheduler, key: &str) -> Result<Requeued, Error> {
    match timers.requeue_dead(key).await {
        Ok(true) => Ok(Requeued::Done),
        Ok(false) => Ok(Requeued::Missing),
        Err(Error::DuplicateKey(_)) => Ok(Requeued::Pending),
        Err(e) => Err(e),
    }
}

/// Puts back the dead letter under `key` (due at once, attempts reset), or each of `keys`.
pub(super) async fn requeue(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    let keys = match keys(&w, &headers, &body) {
        Ok(keys) => keys,
        Err(refused) => return refused.into_response(),
    };
    acted(match keys {
        Keys::One(key) => requeue_one(&w.timers, &key).await.map(|done| match done {
            Requeued::Done => (StatusCode::OK, json!({ "key": key, "requeued": true })),
            Requeued::Missing => {
                (StatusCode::NOT_FOUND, json!({ "key": key, "error": "no dead letter under this key" }))
            }
            Requeued::Pending => (
                StatusCode::CONFLICT,
                json!({ "key": key, "error": "a task under this key is pending: the dead letter stays" }),
            ),
        }),
        Keys::Many(keys) => requeue_each(&w.timers, &keys).await.map(|v| (StatusCode::OK, v)),
    })
}

/// Requeues each of `keys`: `{"requeued": [..], "missing": [..], "pending": [..]}`.
async fn requeue_each(timers: &DurableScheduler, keys: &[String]) -> Result<Value, Error> {
    let (mut requeued, mut missing, mut pending) = (Vec::new(), Vec::new(), Vec::new());
    for key in keys {
        match requeue_one(timers, key).await? {
            Requeued::Done => requeued.push(key),
            Requeued::Missing => missing.push(key),
            Requeued::Pending => pending.push(key),
        }
    }
    Ok(json!({ "requeued": requeued, "missing": missing, "pending": pending }))
}

/// Deletes the dead letter under `key`, or each of `keys`.
pub(super) async fn delete(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    let keys = match keys(&w, &headers, &body) {
        Ok(keys) => keys,
        Err(refused) => return refused.into_response(),
    };
    let missing = "no dead letter under this key";
    acted(match keys {
        Keys::One(key) => w.timers.delete_dead(&key).await.map(|found| found_or_not(&key, found, "deleted", missing)),
        Keys::Many(keys) => {
            async {
                let (mut deleted, mut not_found) = (Vec::new(), Vec::new());
                for key in &keys {
                    if w.timers.delete_dead(key).await? {
                        deleted.push(key)
                    } else {
                        not_found.push(key)
                    }
                }
                Ok((StatusCode::OK, json!({ "deleted": deleted, "missing": not_found })))
            }
            .await
        }
    })
}

/// Requeues the oldest [`BULK_MAX`] dead letters, and says how many are left; the page calls it
/// again until none is (or none of those left could be requeued: their keys are pending).
pub(super) async fn requeue_all(w: ShownWheel, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = checked(&w, &headers, &body) {
        return refused.into_response();
    }
    acted(
        async {
            let oldest = w.timers.dead_letters(BULK_MAX).await?;
            let keys: Vec<String> = oldest.iter().map(|d| d.key().to_owned()).collect();
            let mut done = requeue_each(&w.timers, &keys).await?;
            done["left"] = json!(w.timers.stats().await?.dead);
            Ok((StatusCode::OK, done))
        }
        .await,
    )
}
