//! `POST /score` (`/v1/score`) and `POST /rerank` (`/v1/rerank`, `/v2/rerank`), as vLLM scores:
//! with an embedding (bi-encoder) model, the cosine similarity of the two texts' embeddings;
//! with a cross-encoder (a one-label `*ForSequenceClassification`), the sigmoid of the logit of
//! the pair read together (`[CLS] a [SEP] b [SEP]`).

use crate::errors::{ApiError, ApiResult};
use crate::json_body::typed;
use crate::pooling::{
    Input, TokenizeFor, check_len, check_priority, cosine, input_ids, pool_all, runner_inputs, truncation,
};
use crate::prompt::check_vocab;
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
use vllm_rs_engine::{PoolingInput as RunnerInput, PoolingTask};

/// Pairs to score, tokenized for the model's kind.
enum Scoring {
    /// Token ids of the left and right texts, and the `(left, right)` index of each pair.
    BiEncoder { left: Vec<Vec<u32>>, right: Vec<Vec<u32>>, pairs: Vec<(usize, usize)> },
    /// Each pair's token ids and token type ids.
    CrossEncoder(Vec<(Vec<u32>, Vec<u32>)>),
}

struct Pairs {
    scoring: Scoring,
    id: String,
}

impl Pairs {
    /// Tokenizes every `(left, right)` pair of texts for this model.
    fn new(
        left: Vec<String>,
        right: Vec<String>,
        pairs: Vec<(usize, usize)>,
        truncate: Option<i64>,
        state: &AppState,
        model: &ModelContext,
        id: String,
    ) -> ApiResult<Self> {
        let pooler = model.pooler()?;
        let scoring = match pooler.num_labels() {
            None => Scoring::BiEncoder {
                left: tokenize_side("text_1", left, truncate, state, model)?,
                right: tokenize_side("text_2", right, truncate, state, model)?,
                pairs,
            },
            Some(1) => {
                let max_len = model.max_model_len();
                let cut = truncation(truncate, max_len)?;
                let encoded = pairs
                    .iter()
                    .map(|&(i, j)| {
                        let (ids, types) = model.tokenizer.encode_pair(&left[i], &right[j], cut)?;
                        check_len(ids.len(), max_len)?;
                        check_vocab("text_2", &ids, model)?;
                        Ok((ids, types))
                    })
                    .collect::<ApiResult<_>>()?;
                Scoring::CrossEncoder(encoded)
            }
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "This classifier has {n} labels; scoring needs a cross-encoder with one label (use /classify)."
                )));
            }
        };
        Ok(Pairs { scoring, id })
    }

    /// The score of every pair; also returns the tokens run.
    async fn scores(self, model: &ModelContext) -> ApiResult<(Vec<f64>, usize, String)> {
        let pooler = model.pooler()?;
        match self.scoring {
            Scoring::BiEncoder { left, right, pairs } => {
                let tokens = left.iter().chain(&right).map(Vec::len).sum();
                let n_left = left.len();
                let inputs = runner_inputs(left.into_iter().chain(right).collect(), PoolingTask::Embed);
                let all = pool_all(pooler, inputs).await?;
                let (l, r) = all.split_at(n_left);
                Ok((pairs.iter().map(|&(i, j)| cosine(&l[i], &r[j])).collect(), tokens, self.id))
            }
            Scoring::CrossEncoder(encoded) => {
                let tokens = encoded.iter().map(|(ids, _)| ids.len()).sum();
                let inputs = encoded
                    .into_iter()
                    .map(|(token_ids, types)| RunnerInput {
                        token_ids,
                        token_type_ids: Some(types),
                        task: PoolingTask::Classify,
                    })
                    .collect();
                let logits = pool_all(pooler, inputs).await?;
                Ok((logits.iter().map(|l| 1.0 / (1.0 + (-(l[0] as f64)).exp())).collect(), tokens, self.id))
            }
        }
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
    let id = request_id("score", req.request_id.as_deref());
    Pairs::new(t1, t2, pairs, req.truncate_prompt_tokens, state, model, id)
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
            r.document = Some(RerankDocument { text: docs[r.index].clone(), multi_modal: None });
        }
    }
    Ok(RerankResponse {
        id,
        model: state.model_name().to_string(),
        usage: RerankUsage { prompt_tokens: tokens, total_tokens: tokens },
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
    let pairs = (0..docs.len()).map(|j| (0, j)).collect();
    let id = request_id("score", req.request_id.as_deref()); // vLLM names rerank answers score-…
    let pairs = Pairs::new(vec![query], docs.clone(), pairs, req.truncate_prompt_tokens, state, model, id)?;
    Ok((pairs, req.return_documents.unwrap_or(true).then_some(docs), top_n))
}
