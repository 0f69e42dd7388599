//! vLLM's server load tracking (`--enable-server-load-tracking`, `GET /load`): the number of
//! generation and pooling requests in flight, counted from the moment a request reaches its
//! handler until its response body is done or dropped (a stream counts until its last event
//! is sent or the client goes away). Without the flag the count stays 0, as in vLLM.

use crate::state::AppState;
use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Requests in flight on the tracked routes.
#[derive(Default)]
pub struct ServerLoad(Arc<AtomicUsize>);

impl ServerLoad {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Decrements the count when the response body it rides on is dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Middleware of the tracked routes: counts the request while its handler and body run.
pub async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if !state.config.server_load_tracking {
        return next.run(req).await;
    }
    let counter = state.server_load.0.clone();
    counter.fetch_add(1, Ordering::Relaxed);
    let guard = InFlight(counter);
    let (parts, body) = next.run(req).await.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// `GET /load`: `{"server_load": N}`.
pub async fn load(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"server_load": state.server_load.get()}))
}
