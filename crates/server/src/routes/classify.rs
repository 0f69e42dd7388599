//! `POST /classify` (vLLM's schema) on a `*ForSequenceClassification` model: each input's
//! label probabilities (softmax of the head's logits) and the most likely label.

use crate::errors::ApiResult;
use crate::json_body::typed;
use crate::pooling::{TokenizeFor, need_head, pool_all, prepare_input, runner_inputs};
use crate::protocol::common::{Usage, request_id, unix_now};
use crate::protocol::fields::Endpoint;
use crate::protocol::pooling::{ClassificationData, ClassificationRequest, ClassificationResponse};
use crate::routes::{prepare_off_thread, read_request};
use crate::state::{AppState, ModelContext};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use vllm_rs_engine::PoolingTask;
use vllm_rs_engine::sampler::log_softmax;

pub async fn classify(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle(&state, &headers, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> ApiResult<ClassificationResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let (st, m) = (state.clone(), model.clone());
    let (ids, id) = prepare_off_thread(body, Endpoint::Classify, move |obj| prepare(&st, &m, typed(obj)?)).await?;
    let pooler = model.pooler()?;
    let labels = pooler.labels.clone().unwrap_or_default();
    let prompt_tokens = ids.iter().map(Vec::len).sum();
    let logits = pool_all(pooler, runner_inputs(ids, PoolingTask::Classify)).await?;
    let data = logits
        .into_iter()
        .enumerate()
        .map(|(index, l)| {
            let probs: Vec<f32> = log_softmax(&l).iter().map(|lp| lp.exp()).collect();
            let best = probs.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
            ClassificationData { index, label: labels[best].clone(), num_classes: probs.len(), probs }
        })
        .collect();
    Ok(ClassificationResponse {
        id,
        object: "list",
        created: unix_now(),
        model: state.model_name().to_string(),
        data,
        usage: Usage::new(prompt_tokens, 0),
    })
}

fn prepare(state: &AppState, model: &ModelContext, req: ClassificationRequest) -> ApiResult<(Vec<Vec<u32>>, String)> {
    need_head(model.pooler()?)?;
    let how = TokenizeFor {
        add_special_tokens: req.add_special_tokens.unwrap_or(true),
        truncate: req.truncate_prompt_tokens,
    };
    let ids = prepare_input(state, model, req.model.as_deref(), req.input, &how, req.priority)?;
    Ok((ids, request_id("classify", req.request_id.as_deref())))
}
