//! `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}` (and `/cancel`, which has nothing
//! to cancel without background mode): OpenAI's Responses API over the
//! chat path ([`crate::turn`]). A request with `previous_response_id` continues that response's
//! conversation (its input and output; not its `instructions`); `store` (default true) keeps the
//! result in the bounded [`crate::response_store`]. Streams are OpenAI's typed events, each with
//! its `sequence_number`, in OpenAI's order.

use crate::errors::{ApiError, ApiResult};
use crate::json_body::{RawObject, typed};
use crate::protocol::common::unix_now;
use crate::protocol::fields::Endpoint;
use crate::protocol::responses::{
    CHAT_FIELDS, ResponsesRequest, call_item, item_id, items_to_messages, message_item, message_status, output_items,
    output_text, reasoning_item, response_json,
};
use crate::response_store::Stored;
use crate::routes::{prepare_off_thread, read_request};
use crate::sse;
use crate::state::AppState;
use crate::turn::{self, Block, Ending, StreamWriter, Turn, TurnEvent};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    handle(state, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.responses.get(&id) {
        Some(s) => Json(s.response).into_response(),
        None => not_found(&id, None).into_response(),
    }
}

pub async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    if state.responses.remove(&id) {
        Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
    } else {
        not_found(&id, None).into_response()
    }
}

/// vLLM's answer: only background responses (not served here) can be cancelled.
pub async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.responses.get(&id) {
        Some(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", "Cannot cancel a synchronous response.")
                .into_response()
        }
        None => not_found(&id, None).into_response(),
    }
}

/// vLLM's answer for an unknown (or no longer stored) response id.
fn not_found(id: &str, param: Option<&str>) -> ApiError {
    let e =
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("Response with id '{id}' not found."));
    match param {
        Some(p) => e.with_param(p),
        None => e,
    }
}

/// What the response needs besides the turn.
struct Ctx {
    id: String,
    created_at: u64,
    model: String,
    echo: Map<String, Value>,
    /// The conversation so far (without `instructions`), stored with the response.
    conversation: Vec<Value>,
    store: bool,
    state: Arc<AppState>,
}

impl Ctx {
    fn response(&self, output: Vec<Value>, ending: Option<&Ending>) -> Value {
        response_json(&self.id, self.created_at, &self.model, &self.echo, output, ending)
    }

    /// The finished response, stored when asked.
    fn finish(&self, output: Vec<Value>, ending: &Ending) -> Value {
        let response = self.response(output, Some(ending));
        if self.store {
            let stored = Stored { response: response.clone(), messages: self.conversation.clone() };
            self.state.responses.insert(&self.id, stored);
        }
        response
    }
}

async fn handle(state: Arc<AppState>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let arrival = Instant::now();
    let (model, body) = read_request(&state, &headers, body).await?;
    model.engine()?;
    let (prepared, ctx) = {
        let (st, model) = (state.clone(), model.clone());
        prepare_off_thread(body, Endpoint::Responses, move |obj| {
            let req: ResponsesRequest = typed(obj)?;
            let conversation = conversation(&st, &req)?;
            let chat = req.to_chat(&conversation, passed_fields(obj)?)?;
            let prepared =
                turn::prepare(&st, model, &chat).map_err(|e| turn::renamed(e, "max_tokens", "max_output_tokens"))?;
            let ctx = Ctx {
                id: prepared.id_with_prefix("resp_"),
                created_at: unix_now(),
                model: st.model_name().to_string(),
                echo: req.echo(),
                conversation,
                store: req.store.unwrap_or(true),
                state: st.clone(),
            };
            Ok((prepared, ctx))
        })
        .await?
    };
    let stream = prepared.stream;
    let turn = prepared.start(arrival)?;
    if stream {
        let writer = Writer { ctx, seq: 0, output: Vec::new(), open: None };
        return Ok(sse::response(turn::sse_events(turn, writer), state.config.sse_keepalive));
    }
    let finished = turn.finish().await?;
    let output = output_items(&finished.message, &finished.ending);
    Ok(Json(ctx.finish(output, &finished.ending)).into_response())
}

/// The previous response's conversation and output, then this request's input.
fn conversation(state: &AppState, req: &ResponsesRequest) -> ApiResult<Vec<Value>> {
    let mut messages = match &req.previous_response_id {
        None => Vec::new(),
        Some(prev) => {
            let stored = state.responses.get(prev).ok_or_else(|| not_found(prev, Some("previous_response_id")))?;
            let output: Vec<Map<String, Value>> = stored.response["output"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_object().cloned()).collect())
                .unwrap_or_default();
            let mut m = stored.messages;
            m.extend(items_to_messages(&output, "previous_response_id")?);
            m
        }
    };
    messages.extend(req.input_messages()?);
    Ok(messages)
}

/// The request's fields that chat takes as they are.
fn passed_fields(obj: &RawObject) -> ApiResult<Map<String, Value>> {
    let mut out = Map::new();
    for &k in CHAT_FIELDS {
        if let Some(raw) = obj.get(k) {
            let v: Value = serde_json::from_str(raw.get()).map_err(|e| ApiError::schema(k, e.to_string()))?;
            out.insert(k.to_string(), v);
        }
    }
    Ok(out)
}

/// The item being streamed: its id, place and kind.
struct OpenItem {
    id: String,
    index: usize,
    block: Block,
}

/// OpenAI's stream events, and the output items so far.
struct Writer {
    ctx: Ctx,
    seq: u64,
    output: Vec<Value>,
    open: Option<OpenItem>,
}

impl StreamWriter for Writer {
    fn opening(&mut self, _: &Turn) -> String {
        let r = self.ctx.response(Vec::new(), None);
        let mut out = self.event("response.created", json!({"response": r}));
        out += &self.event("response.in_progress", json!({"response": r}));
        out
    }

    fn event(&mut self, ev: TurnEvent, turn: &Turn) -> String {
        let mut out = String::new();
        match ev {
            TurnEvent::Start(block) => self.start(block, &mut out),
            TurnEvent::Delta(delta) => {
                let mut d = self.at();
                d["delta"] = json!(delta);
                let kind = match self.open.as_ref().map(|o| &o.block) {
                    Some(Block::Reasoning) => "response.reasoning_text.delta",
                    Some(Block::Call { .. }) => "response.function_call_arguments.delta",
                    _ => {
                        d["logprobs"] = json!([]);
                        "response.output_text.delta"
                    }
                };
                out += &self.event(kind, d);
            }
            TurnEvent::Stop(_, text) => self.stop(text, message_status(turn.ending()), &mut out),
            TurnEvent::Done(ending) => {
                let response = self.ctx.finish(std::mem::take(&mut self.output), &ending);
                let kind =
                    if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
                out += &self.event(kind, json!({"response": response}));
            }
            TurnEvent::Failed(e) => {
                let data = json!({"code": e.kind, "message": e.message, "param": e.param});
                out += &self.event("error", data);
            }
        }
        out
    }
}

impl Writer {
    /// One event: `event: <type>` and its data with the next sequence number.
    fn event(&mut self, kind: &str, mut data: Value) -> String {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        format!("event: {kind}\ndata: {data}\n\n")
    }

    /// `item_id`, `output_index` and `content_index` of the open item.
    fn at(&self) -> Value {
        let o = self.open.as_ref().expect("an open item");
        json!({"item_id": o.id, "output_index": o.index, "content_index": 0})
    }

    fn start(&mut self, block: Block, out: &mut String) {
        let index = self.output.len();
        let (id, item) = match &block {
            Block::Reasoning => {
                let id = item_id("rs");
                let item = reasoning_item(&id, "", "in_progress");
                (id, item)
            }
            Block::Text => {
                let id = item_id("msg");
                let item = message_item(&id, None, "in_progress");
                (id, item)
            }
            Block::Call { id: call_id, name } => {
                let id = item_id("fc");
                let item = call_item(&id, call_id, name, "", "in_progress");
                (id, item)
            }
        };
        *out += &self.event("response.output_item.added", json!({"output_index": index, "item": item}));
        self.open = Some(OpenItem { id, index, block });
        let part = match self.open.as_ref().map(|o| &o.block) {
            Some(Block::Reasoning) => json!({"type": "reasoning_text", "text": ""}),
            Some(Block::Text) => output_text(""),
            _ => return,
        };
        let mut d = self.at();
        d["part"] = part;
        *out += &self.event("response.content_part.added", d);
    }

    fn stop(&mut self, text: String, status: &str, out: &mut String) {
        let Some(open) = self.open.take() else { return };
        let at = json!({"item_id": open.id, "output_index": open.index, "content_index": 0});
        let item = match &open.block {
            Block::Reasoning | Block::Text => {
                let (done, part, item) = if open.block == Block::Reasoning {
                    let part = json!({"type": "reasoning_text", "text": text});
                    ("response.reasoning_text.done", part, reasoning_item(&open.id, &text, "completed"))
                } else {
                    ("response.output_text.done", output_text(&text), message_item(&open.id, Some(&text), status))
                };
                let mut d = at.clone();
                d["text"] = json!(text);
                if open.block == Block::Text {
                    d["logprobs"] = json!([]);
                }
                *out += &self.event(done, d);
                let mut d = at;
                d["part"] = part;
                *out += &self.event("response.content_part.done", d);
                item
            }
            Block::Call { id: call_id, name } => {
                let d = json!({"item_id": open.id, "output_index": open.index, "name": name, "arguments": text});
                *out += &self.event("response.function_call_arguments.done", d);
                call_item(&open.id, call_id, name, &text, "completed")
            }
        };
        *out += &self.event("response.output_item.done", json!({"output_index": open.index, "item": item}));
        self.output.push(item);
    }
}
