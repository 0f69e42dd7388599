//! `POST /score` (`/v1/score`) and `POST /rerank` (`/v1/rerank`, `/v2/rerank`) on an embedding
//! model: the score of a pair is the cosine similarity of the two texts' embeddings, as vLLM
//! scores with embedding (bi-encoder) models.

use crate::errors::{ApiError, ApiResult};
use crate::json_body::typed;
use crate::pooling::{Input, TokenizeFor, check_priority, cosine, input_ids, pool_all};
use crate::protocol::common::{Usage, request_id, unix_now};
use crate::protocol::fields::Endpoint;
use crate::protocol::pooling::{
    RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage, ScoreData, ScoreRequest, ScoreResponse,
    ScoreTexts,
};
use crate::routes::{prepare_off_thread, read_request};
use crate::state::{AppState, ModelContext};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Pairs to score: the token ids of the left and right texts, and which of each a pair takes.
struct Pairs {
    left: Vec<Vec<u32>>,
    right: Vec<Vec<u32>>,
    /// `(left, right)` index of each pair, in output order.
    pairs: Vec<(usize, usize)>,
    id: String,
}

impl Pairs {
    /// Embeds both sides once each, scores every pair; also returns the tokens embedded.
    async fn scores(self, model: &ModelContext) -> ApiResult<(Vec<f64>, usize, String)> {
        let pooler = model.pooler()?;
        let tokens = self.left.iter().chain(&self.right).map(Vec::len).sum();
        let n_left = self.left.len();
        let all = pool_all(pooler, self.left.into_iter().chain(self.right).collect()).await?;
        let (l, r) = all.split_at(n_left);
        Ok((self.pairs.iter().map(|&(i, j)| cosine(&l[i], &r[j])).collect(), tokens, self.id))
    }
}

fn tokenize_side(
    param: &str,
    texts: Vec<String>,
    truncate: Option<i64>,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<Vec<Vec<u32>>> {
    let how = TokenizeFor { add_special_tokens: true, truncate };
    input_ids(param, texts.into_iter().map(Input::Text).collect(), &how, state, model)
}

pub async fn score(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle_score(&state, &headers, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle_score(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> ApiResult<ScoreResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let (st, m) = (state.clone(), model.clone());
    let pairs = prepare_off_thread(body, Endpoint::Score, move |obj| prepare_score(&st, &m, typed(obj)?)).await?;
    let (scores, tokens, id) = pairs.scores(&model).await?;
    let data =
        scores.into_iter().enumerate().map(|(index, score)| ScoreData { index, object: "score", score }).collect();
    Ok(ScoreResponse {
        id,
        object: "list",
        created: unix_now(),
        model: state.model_name().to_string(),
        data,
        usage: Usage::new(tokens, 0),
    })
}

/// Either spelling of a side: vLLM's `text_1`/`text_2`, or `queries`/`documents`.
fn side(a: Option<ScoreTexts>, b: Option<ScoreTexts>, names: (&str, &str)) -> ApiResult<Vec<String>> {
    match (a, b) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(format!("Give `{}` or `{}`, not both.", names.0, names.1))),
        (Some(t), None) | (None, Some(t)) => Ok(t.into_vec()),
        (None, None) => Err(ApiError::schema(names.0, format!("{}: Field required", names.0))),
    }
}

fn prepare_score(state: &AppState, model: &ModelContext, req: ScoreRequest) -> ApiResult<Pairs> {
    state.check_model(req.model.as_deref())?;
    model.pooler()?;
    check_priority(req.priority)?;
    let t1 = side(req.text_1, req.queries, ("text_1", "queries"))?;
    let t2 = side(req.text_2, req.documents, ("text_2", "documents"))?;
    if t1.is_empty() || t2.is_empty() {
        return Err(ApiError::bad_request("At least one text element must be given on each side."));
    }
    if t1.len() > 1 && t1.len() != t2.len() {
        return Err(ApiError::bad_request("Input lengths must be either 1:1, 1:N or N:N."));
    }
    let pairs = (0..t2.len()).map(|j| (if t1.len() == 1 { 0 } else { j }, j)).collect();
    Ok(Pairs {
        left: tokenize_side("text_1", t1, req.truncate_prompt_tokens, state, model)?,
        right: tokenize_side("text_2", t2, req.truncate_prompt_tokens, state, model)?,
        pairs,
        id: request_id("score", req.request_id.as_deref()),
    })
}

pub async fn rerank(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle_rerank(&state, &headers, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle_rerank(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> ApiResult<RerankResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let (st, m) = (state.clone(), model.clone());
    let (pairs, docs, top_n) =
        prepare_off_thread(body, Endpoint::Rerank, move |obj| prepare_rerank(&st, &m, typed(obj)?)).await?;
    let (scores, tokens, id) = pairs.scores(&model).await?;
    let mut results: Vec<RerankResult> = scores
        .into_iter()
        .enumerate()
        .map(|(index, relevance_score)| RerankResult { index, document: None, relevance_score })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score).then(a.index.cmp(&b.index)));
    results.truncate(top_n);
    if let Some(docs) = docs {
        for r in &mut results {
            r.document = Some(RerankDocument { text: docs[r.index].clone() });
        }
    }
    Ok(RerankResponse {
        id,
        model: state.model_name().to_string(),
        usage: RerankUsage { total_tokens: tokens },
        results,
    })
}

/// The pairs (query, each document), the documents to echo (`return_documents`, default
/// true), and how many results to return (`top_n`; 0 or absent: all).
fn prepare_rerank(
    state: &AppState,
    model: &ModelContext,
    req: RerankRequest,
) -> ApiResult<(Pairs, Option<Vec<String>>, usize)> {
    state.check_model(req.model.as_deref())?;
    model.pooler()?;
    check_priority(req.priority)?;
    let query = req.query.ok_or_else(|| ApiError::schema("query", "query: Field required"))?;
    let docs = req.documents.ok_or_else(|| ApiError::schema("documents", "documents: Field required"))?;
    if docs.is_empty() {
        return Err(ApiError::invalid("documents", "`documents` is empty: give at least one document."));
    }
    let top_n = match req.top_n {
        None | Some(0) => docs.len(),
        Some(n) if n > 0 => (n as usize).min(docs.len()),
        Some(n) => return Err(ApiError::invalid("top_n", format!("top_n must be positive (or 0 for all), got {n}."))),
    };
    let pairs = Pairs {
        left: tokenize_side("query", vec![query], req.truncate_prompt_tokens, state, model)?,
        right: tokenize_side("documents", docs.clone(), req.truncate_prompt_tokens, state, model)?,
        pairs: (0..docs.len()).map(|j| (0, j)).collect(),
        id: request_id("rerank", req.request_id.as_deref()),
    };
    Ok((pairs, req.return_documents.unwrap_or(true).then_some(docs), top_n))
}
