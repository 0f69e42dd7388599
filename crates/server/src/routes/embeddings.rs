//! `POST /v1/embeddings` and `POST /pooling` (vLLM's schemas) on an embedding model.

use crate::errors::ApiResult;
use crate::json_body::typed;
use crate::pooling::{
    TokenizeFor, check_dimensions, encode_vector, finish_vector, need_embedder, parse_encoding_format, pool_all,
    prepare_input, runner_inputs,
};
use crate::protocol::common::{Usage, request_id, unix_now};
use crate::protocol::fields::Endpoint;
use crate::protocol::pooling::{EmbeddingRequest, NamedVector, PoolingData, PoolingResponse};
use crate::routes::{prepare_off_thread, read_request};
use crate::state::{AppState, ModelContext};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use vllm_rs_engine::PoolingTask;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Embeddings,
    Pooling,
}

pub async fn embeddings(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    respond(handle(&state, &headers, body, Kind::Embeddings).await)
}

pub async fn pooling(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    respond(handle(&state, &headers, body, Kind::Pooling).await)
}

fn respond(r: ApiResult<PoolingResponse>) -> Response {
    match r {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A request checked and tokenized, ready to pool.
struct Prepared {
    ids: Vec<Vec<u32>>,
    dimensions: Option<usize>,
    normalize: bool,
    base64: bool,
    id: String,
}

async fn handle(state: &Arc<AppState>, headers: &HeaderMap, body: Body, kind: Kind) -> ApiResult<PoolingResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let (st, m) = (state.clone(), model.clone());
    let p = prepare_off_thread(body, Endpoint::Embeddings, move |obj| prepare(&st, &m, typed(obj)?, kind)).await?;
    let pooler = model.pooler()?;
    let prompt_tokens = p.ids.iter().map(Vec::len).sum();
    let vectors = pool_all(pooler, runner_inputs(p.ids, PoolingTask::Embed)).await?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let v = encode_vector(finish_vector(v, p.dimensions, p.normalize), p.base64);
            match kind {
                Kind::Embeddings => PoolingData { index, object: "embedding", vector: NamedVector::Embedding(v) },
                Kind::Pooling => PoolingData { index, object: "pooling", vector: NamedVector::Data(v) },
            }
        })
        .collect();
    Ok(PoolingResponse {
        id: p.id,
        object: "list",
        created: unix_now(),
        model: state.model_name().to_string(),
        data,
        usage: Usage::new(prompt_tokens, 0),
    })
}

fn prepare(state: &AppState, model: &ModelContext, req: EmbeddingRequest, kind: Kind) -> ApiResult<Prepared> {
    let pooler = model.pooler()?;
    need_embedder(pooler)?;
    let how = TokenizeFor {
        add_special_tokens: req.add_special_tokens.unwrap_or(true),
        truncate: req.truncate_prompt_tokens,
    };
    let ids = prepare_input(state, model, req.model.as_deref(), req.input, &how, req.priority)?;
    let prefix = if kind == Kind::Embeddings { "embd" } else { "pool" };
    Ok(Prepared {
        ids,
        dimensions: check_dimensions(req.dimensions, pooler, state.model_name())?,
        normalize: req.normalize.unwrap_or(pooler.pooling.normalize),
        base64: parse_encoding_format(req.encoding_format.as_deref())?,
        id: request_id(prefix, req.request_id.as_deref()),
    })
}
