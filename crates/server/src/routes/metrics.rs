//! `GET /metrics` (Prometheus text format).

use crate::metrics::render_process;
use crate::state::{AppState, Runner};
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use vllm_rs_engine::EngineStats;

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = match state.model() {
        Some(m) => m.metrics.render(&runner_stats(&m.runner)),
        None => String::new(),
    };
    render_process(&mut text, state.started_unix);
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    r
}

/// The engine's counters; a pooling runner counts its inputs' tokens as prompt tokens and its
/// batches as steps.
fn runner_stats(runner: &Runner) -> EngineStats {
    match runner {
        Runner::Generate(e) => e.stats(),
        Runner::Pooling(p) => p.engine_stats(),
    }
}
