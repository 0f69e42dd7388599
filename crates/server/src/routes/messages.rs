//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API over the
//! chat path ([`crate::turn`]), as vLLM serves it. Errors are Anthropic's
//! `{"type": "error", "error": {"type", "message"}}`; streams are Anthropic's named events
//! (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`).

use crate::errors::{ApiError, ApiResult};
use crate::json_body::typed;
use crate::protocol::fields::Endpoint;
use crate::protocol::messages::{MessagesRequest, error_json, stop_reason};
use crate::routes::{prepare_off_thread, read_request};
use crate::sse;
use crate::state::AppState;
use crate::turn::{self, Block, Ending, Finished, StreamWriter, Turn, TurnEvent};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    handle(state, headers, body).await.unwrap_or_else(error_response)
}

pub async fn count_tokens(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    count(state, headers, body).await.unwrap_or_else(error_response)
}

/// An error in Anthropic's shape, with the status chat would answer.
fn error_response(e: ApiError) -> Response {
    (e.status, Json(error_json(&e))).into_response()
}

async fn handle(state: Arc<AppState>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let arrival = Instant::now();
    let (model, body) = read_request(&state, &headers, body).await?;
    model.engine()?;
    let prepared = {
        let (state, model) = (state.clone(), model.clone());
        prepare_off_thread(body, Endpoint::Messages, move |obj| {
            let req: MessagesRequest = typed(obj)?;
            turn::prepare(&state, model, &req.to_chat(false)?).map_err(|e| turn::renamed(e, "stop", "stop_sequences"))
        })
        .await?
    };
    let id = prepared.id_with_prefix("msg_");
    let stream = prepared.stream;
    let turn = prepared.start(arrival)?;
    let name = state.model_name().to_string();
    if stream {
        let writer = Writer { id, model: name, index: 0, open: None, called: false };
        return Ok(sse::response(turn::sse_events(turn, writer), state.config.sse_keepalive));
    }
    Ok(Json(message(&id, &name, &turn.finish().await?)?).into_response())
}

async fn count(state: Arc<AppState>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let (model, body) = read_request(&state, &headers, body).await?;
    let n = {
        let state = state.clone();
        prepare_off_thread(body, Endpoint::CountTokens, move |obj| {
            let req: MessagesRequest = typed(obj)?;
            turn::count_prompt_tokens(&state, &model, &req.to_chat(true)?)
        })
        .await?
    };
    Ok(Json(json!({"input_tokens": n, "context_management": {"original_input_tokens": n}})).into_response())
}

fn usage_json(e: &Ending) -> Value {
    json!({
        "input_tokens": e.usage.prompt_tokens,
        "output_tokens": e.usage.completion_tokens,
        "cache_read_input_tokens": e.usage.cached_tokens,
    })
}

fn signature() -> String {
    crate::protocol::common::random_hex()
}

/// The whole message.
fn message(id: &str, model: &str, f: &Finished) -> ApiResult<Value> {
    let m = &f.message;
    let mut content = Vec::new();
    if let Some(r) = m.reasoning.as_deref().filter(|r| !r.is_empty()) {
        content.push(json!({"type": "thinking", "thinking": r, "signature": signature()}));
    }
    if let Some(t) = m.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for c in &m.tool_calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(&c.arguments)?}));
    }
    let e = &f.ending;
    Ok(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(e.finish_reason, e.stop_sequence.as_deref(), !m.tool_calls.is_empty()),
        "stop_sequence": e.stop_sequence,
        "usage": usage_json(e),
    }))
}

/// A call's arguments as the JSON object Anthropic's `input` is.
fn tool_input(arguments: &str) -> ApiResult<Value> {
    serde_json::from_str(arguments)
        .map_err(|e| ApiError::internal(format!("the tool call's arguments are not JSON ({e}): {arguments}")))
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Anthropic's stream events.
struct Writer {
    id: String,
    model: String,
    /// Index of the next content block.
    index: usize,
    /// The open block's kind.
    open: Option<Block>,
    called: bool,
}

impl StreamWriter for Writer {
    fn opening(&mut self, turn: &Turn) -> String {
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": turn.prompt_tokens(), "output_tokens": 0},
        });
        event("message_start", json!({"type": "message_start", "message": message}))
    }

    fn event(&mut self, ev: TurnEvent, _: &Turn) -> String {
        let mut out = String::new();
        match ev {
            TurnEvent::Start(block) => {
                let content_block = match &block {
                    Block::Reasoning => json!({"type": "thinking", "thinking": "", "signature": ""}),
                    Block::Text => json!({"type": "text", "text": ""}),
                    Block::Call { id, name } => {
                        self.called = true;
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}})
                    }
                };
                let data = json!({"type": "content_block_start", "index": self.index, "content_block": content_block});
                out += &event("content_block_start", data);
                self.open = Some(block);
            }
            TurnEvent::Delta(text) => {
                let delta = match self.open {
                    Some(Block::Reasoning) => json!({"type": "thinking_delta", "thinking": text}),
                    Some(Block::Call { .. }) => json!({"type": "input_json_delta", "partial_json": text}),
                    _ => json!({"type": "text_delta", "text": text}),
                };
                out += &self.delta(delta);
            }
            TurnEvent::Stop(block, _) => {
                if block == Block::Reasoning {
                    out += &self.delta(json!({"type": "signature_delta", "signature": signature()}));
                }
                out += &event("content_block_stop", json!({"type": "content_block_stop", "index": self.index}));
                self.index += 1;
                self.open = None;
            }
            TurnEvent::Done(e) => {
                let delta = json!({
                    "stop_reason": stop_reason(e.finish_reason, e.stop_sequence.as_deref(), self.called),
                    "stop_sequence": e.stop_sequence,
                });
                out +=
                    &event("message_delta", json!({"type": "message_delta", "delta": delta, "usage": usage_json(&e)}));
                out += &event("message_stop", json!({"type": "message_stop"}));
            }
            TurnEvent::Failed(e) => out += &event("error", error_json(&e)),
        }
        out
    }
}

impl Writer {
    fn delta(&self, delta: Value) -> String {
        event("content_block_delta", json!({"type": "content_block_delta", "index": self.index, "delta": delta}))
    }
}
