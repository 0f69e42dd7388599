//! HTTP handlers, one file per endpoint family.

pub mod chat;
pub mod classify;
pub mod completions;
pub mod embeddings;
pub mod health;
pub mod messages;
pub mod metrics;
pub mod models;
pub mod responses;
pub mod sagemaker;
pub mod score;
pub mod tokenize;

use crate::errors::{ApiError, ApiResult};
use crate::json_body::{self, BodyBytes, BodyLimits, RawObject};
use crate::protocol::fields::{Endpoint, check_fields};
use crate::state::{AppState, ModelContext};
use axum::body::Body;
use axum::http::HeaderMap;
use std::sync::Arc;

/// The loaded model and the request body's bytes, after the checks every POST endpoint shares
/// before parsing: model ready, JSON media type, size and time limits.
pub async fn read_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<(Arc<ModelContext>, BodyBytes)> {
    let model = state.ready_model()?;
    let limits = BodyLimits {
        max_bytes: state.config.limits.max_body_bytes,
        timeout: state.config.connections.body_read_timeout,
        in_flight: state.body_budget.clone(),
    };
    let bytes = json_body::read_json_bytes(headers, body, &limits, state.shutdown_signal()).await?;
    Ok((model, bytes))
}

/// Parses the body, checks its fields against `endpoint` (only known or neutral ones), and runs
/// `prepare` on them — on the blocking pool: parsing, tokenizing and template rendering grow with
/// the body, and must not hold up the threads that answer every other request. The body's memory
/// is freed before this returns.
pub async fn prepare_off_thread<T, F>(body: BodyBytes, endpoint: Endpoint, prepare: F) -> ApiResult<T>
where
    F: FnOnce(&RawObject) -> ApiResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let obj = RawObject::parse(&body)?;
        check_fields(&obj, endpoint)?;
        prepare(&obj)
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::internal(format!("preparing the request failed: {e}"))))
}

pub fn finish_str(r: Option<vllm_rs_engine::FinishReason>) -> Option<&'static str> {
    r.map(|r| r.as_str())
}
