//! `POST /invocations` (SageMaker): one route for every kind of request, dispatched on the
//! body's fields as vLLM tries its request types in turn: `messages` → chat, `prompt` →
//! completion, then on pooling models `query` + `documents` → rerank, `text_1`/`queries` →
//! score, `input` → classify (a model with a head) or embeddings.

use crate::errors::ApiError;
use crate::json_body::RawObject;
use crate::routes::{chat, classify, completions, embeddings, read_request, score};
use crate::state::{AppState, Runner};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub async fn invocations(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let (model, bytes) = match read_request(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let fields: Vec<String> = match RawObject::parse(&bytes) {
        Ok(obj) => obj.fields().map(|(k, _)| k.to_string()).collect(),
        Err(e) => return e.into_response(),
    };
    let has = |k: &str| fields.iter().any(|f| f == k);
    let pooling = matches!(model.runner, Runner::Pooling(_));
    let body = Body::from(bytes.bytes.clone());
    drop(bytes);
    let st = State(state);
    match () {
        _ if has("messages") && !pooling => chat::create(st, headers, body).await.into_response(),
        _ if has("prompt") && !pooling => completions::create(st, headers, body).await.into_response(),
        _ if pooling && has("query") && has("documents") => score::rerank(st, headers, body).await,
        _ if pooling && (has("text_1") || has("queries")) => score::score(st, headers, body).await,
        _ if pooling && has("input") && model.pooler().is_ok_and(|p| p.num_labels().is_some()) => {
            classify::classify(st, headers, body).await
        }
        _ if pooling && has("input") => embeddings::embeddings(st, headers, body).await,
        _ => {
            let expected = match pooling {
                true => {
                    "EmbeddingRequest (input), ClassificationRequest (input), ScoreRequest (text_1, text_2), RerankRequest (query, documents)"
                }
                false => "ChatCompletionRequest (messages), CompletionRequest (prompt)",
            };
            ApiError::bad_request(format!("Cannot find suitable handler for request. Expected one of: {expected}"))
                .into_response()
        }
    }
}
