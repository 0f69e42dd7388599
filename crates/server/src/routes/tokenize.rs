//! `POST /tokenize` and `POST /detokenize` (vLLM's schemas).

use crate::errors::{ApiError, ApiResult};
use crate::json_body::typed;
use crate::prompt::{ChatInput, TokenizeOptions, chat_prompt, check_chars};
use crate::protocol::fields::Endpoint;
use crate::protocol::tokenize::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};
use crate::routes::prepare_off_thread;
use crate::routes::read_request;
use crate::state::{AppState, ModelContext};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub async fn tokenize(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle_tokenize(&state, &headers, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle_tokenize(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> ApiResult<TokenizeResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let state = state.clone();
    prepare_off_thread(body, Endpoint::Tokenize, move |obj| tokenize_request(&state, model, typed(obj)?)).await
}

fn tokenize_request(state: &AppState, model: Arc<ModelContext>, req: TokenizeRequest) -> ApiResult<TokenizeResponse> {
    state.check_model(req.model.as_deref())?;
    let tokens = match (&req.prompt, &req.messages) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("Give either `prompt` or `messages`, not both.")),
        (Some(p), None) => {
            check_chars("prompt", p.chars().count(), &state.config.limits)?;
            model.tokenizer.encode(p, req.add_special_tokens.unwrap_or(true))?
        }
        (None, Some(messages)) => {
            let opts = TokenizeOptions::new(req.add_special_tokens.unwrap_or(false), None, None, &model)?;
            let input = ChatInput {
                messages,
                add_generation_prompt: req.add_generation_prompt.unwrap_or(true),
                continue_final_message: req.continue_final_message.unwrap_or(false),
                request_template: req.chat_template.as_deref(),
                template_kwargs: req.chat_template_kwargs.as_ref(),
                documents: None,
                tools: None,
            };
            chat_prompt_ids(&input, &opts, state, &model)?
        }
        (None, None) => return Err(ApiError::schema("prompt", "prompt: Field required (or give `messages`)")),
    };
    let token_strs = req
        .return_token_strs
        .unwrap_or(false)
        .then(|| tokens.iter().map(|&t| model.tokenizer.id_to_token(t).unwrap_or_default()).collect());
    Ok(TokenizeResponse { count: tokens.len(), max_model_len: model.max_model_len(), tokens, token_strs })
}

/// Chat tokens without the generation checks (an empty prompt is fine here).
fn chat_prompt_ids(
    input: &ChatInput,
    opts: &TokenizeOptions,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<Vec<u32>> {
    match chat_prompt(input, opts, state, model) {
        Ok(p) => Ok(p.prompt.ids),
        Err(e) if e.message == "The decoder prompt cannot be empty" => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

pub async fn detokenize(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle_detokenize(&state, &headers, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle_detokenize(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> ApiResult<DetokenizeResponse> {
    let (model, body) = read_request(state, headers, body).await?;
    let state = state.clone();
    prepare_off_thread(body, Endpoint::Detokenize, move |obj| {
        let req: DetokenizeRequest = typed(obj)?;
        state.check_model(req.model.as_deref())?;
        let Some(tokens) = req.tokens else { return Err(ApiError::schema("tokens", "tokens: Field required")) };
        let prompt = model.tokenizer.decode(&tokens, false).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
        Ok(DetokenizeResponse { prompt })
    })
    .await
}
