//! `GET /metrics` (Prometheus text format).

use crate::metrics::render_process;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = match state.model() {
        Some(m) => m.metrics.render(&m.engine.stats()),
        None => String::new(),
    };
    render_process(&mut text, state.started_unix);
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    r
}
