//! `GET /v1/models`.

use crate::protocol::common::unix_now;
use crate::protocol::models::{ModelCard, ModelList, ModelPermission};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub async fn list(State(state): State<Arc<AppState>>) -> Response {
    let model = match state.ready_model() {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let created = unix_now();
    let data = state
        .config
        .served_model_names
        .iter()
        .map(|name| ModelCard {
            id: name.clone(),
            object: "model",
            created,
            owned_by: "vllm",
            root: Some(state.config.model_root.clone()),
            parent: None,
            max_model_len: Some(model.max_model_len()),
            permission: vec![ModelPermission::new(created)],
        })
        .collect();
    Json(ModelList { object: "list", data }).into_response()
}
