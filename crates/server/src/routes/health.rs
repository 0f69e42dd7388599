//! `GET /health`, `GET /version`, `GET|POST /ping`.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// 200 once the model is loaded and the engine runs; 503 while loading, draining, or after the
/// engine thread died.
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let ok = !state.is_shutting_down() && state.model().is_some_and(|m| m.runner.is_alive());
    if ok { StatusCode::OK.into_response() } else { StatusCode::SERVICE_UNAVAILABLE.into_response() }
}

/// SageMaker's health check (vLLM answers it like `/health`).
pub async fn ping(state: State<Arc<AppState>>) -> Response {
    health(state).await
}

pub async fn version() -> Response {
    Json(serde_json::json!({"version": env!("CARGO_PKG_VERSION")})).into_response()
}
