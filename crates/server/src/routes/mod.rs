//! HTTP handlers, one file per endpoint family.

pub mod chat;
pub mod completions;
pub mod health;
pub mod metrics;
pub mod models;
pub mod tokenize;

use crate::errors::ApiResult;
use crate::json_body;
use crate::protocol::fields::{Endpoint, check_fields};
use crate::state::{AppState, ModelContext};
use axum::body::Body;
use axum::http::HeaderMap;
use serde_json::Value;
use std::sync::Arc;

/// The loaded model and the request body as JSON, after the checks every POST endpoint shares:
/// model ready, JSON media type, size, syntax, and only known or neutral fields.
pub async fn read_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    endpoint: Endpoint,
) -> ApiResult<(Arc<ModelContext>, Value)> {
    let model = state.ready_model()?;
    let obj = json_body::read_object(headers, body, state.config.limits.max_body_bytes).await?;
    check_fields(&obj, endpoint)?;
    Ok((model, Value::Object(obj)))
}

pub fn finish_str(r: Option<vllm_rs_engine::FinishReason>) -> Option<&'static str> {
    r.map(|r| r.as_str())
}
