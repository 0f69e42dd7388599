//! OpenAI's Responses API bodies (`/v1/responses`) and their translation into a chat
//! completion request: `instructions` become the system message, input items (messages,
//! `function_call`, `function_call_output`) chat messages, function tools chat's tools,
//! `text.format` chat's `response_format`; the output is reasoning, message and
//! `function_call` items, as vLLM's `OpenAIServingResponses` builds them.

use crate::chat_output::Message;
use crate::errors::{ApiError, ApiResult};
use crate::turn::Ending;
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResponsesRequest {
    pub input: Option<Input>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub store: Option<bool>,
    pub stream: Option<bool>,
    pub max_output_tokens: Option<i64>,
    pub tools: Option<Vec<Map<String, Value>>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextConfig>,
    pub metadata: Option<Value>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub user: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Map<String, Value>>),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextConfig {
    pub format: Option<Map<String, Value>>,
}

/// Request fields passed to the chat path unchanged (same names, same checks).
pub const CHAT_FIELDS: &[&str] = &[
    "model",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "seed",
    "parallel_tool_calls",
    "request_id",
    "priority",
    "cache_salt",
    // vLLM's sampling extension, as chat takes it (fixed output lengths for benchmarks).
    "ignore_eos",
];

impl ResponsesRequest {
    /// This request's new messages (its `input`).
    pub fn input_messages(&self) -> ApiResult<Vec<Value>> {
        match &self.input {
            None => Err(ApiError::schema("input", "input: Field required")),
            Some(Input::Text(t)) => Ok(vec![json!({"role": "user", "content": t})]),
            Some(Input::Items(items)) => items_to_messages(items, "input"),
        }
    }

    /// The chat body for `conversation` (history and input), with the fields of `passed`
    /// (the request's [`CHAT_FIELDS`]) added.
    pub fn to_chat(&self, conversation: &[Value], passed: Map<String, Value>) -> ApiResult<Value> {
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(i) = self.instructions.as_deref().filter(|i| !i.is_empty()) {
            messages.push(json!({"role": "system", "content": i}));
        }
        messages.extend_from_slice(conversation);
        let mut chat = passed;
        chat.insert("messages".into(), Value::Array(messages));
        if let Some(m) = self.max_output_tokens {
            chat.insert("max_tokens".into(), json!(m));
        }
        if let Some(tools) = &self.tools {
            chat.insert("tools".into(), Value::Array(tools.iter().map(chat_tool).collect::<ApiResult<_>>()?));
        }
        if let Some(c) = &self.tool_choice {
            chat.insert("tool_choice".into(), chat_tool_choice(c)?);
        }
        if let Some(f) = self.text.as_ref().and_then(|t| t.format.as_ref())
            && let Some(rf) = response_format(f)?
        {
            chat.insert("response_format".into(), rf);
        }
        Ok(Value::Object(chat))
    }

    /// The request fields a response object repeats.
    pub fn echo(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("instructions".into(), json!(self.instructions));
        m.insert("max_output_tokens".into(), json!(self.max_output_tokens));
        m.insert("metadata".into(), self.metadata.clone().unwrap_or_else(|| json!({})));
        m.insert("parallel_tool_calls".into(), json!(self.parallel_tool_calls.unwrap_or(true)));
        m.insert("previous_response_id".into(), json!(self.previous_response_id));
        m.insert("store".into(), json!(self.store.unwrap_or(true)));
        m.insert("temperature".into(), json!(self.temperature));
        m.insert("top_p".into(), json!(self.top_p));
        let format = self.text.as_ref().and_then(|t| t.format.clone()).unwrap_or_else(|| {
            let mut f = Map::new();
            f.insert("type".into(), json!("text"));
            f
        });
        m.insert("text".into(), json!({"format": format}));
        m.insert("tool_choice".into(), self.tool_choice.clone().unwrap_or_else(|| json!("auto")));
        m.insert("tools".into(), json!(self.tools.clone().unwrap_or_default()));
        m.insert("truncation".into(), json!("disabled"));
        m.insert("user".into(), json!(self.user));
        m
    }
}

/// Input (or stored output) items as chat messages. Reasoning items are skipped, as vLLM skips
/// them; consecutive function calls join one assistant message.
pub fn items_to_messages(items: &[Map<String, Value>], param: &str) -> ApiResult<Vec<Value>> {
    let mut out: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let field = |k: &str| item.get(k).and_then(Value::as_str);
        let required = |k: &str| {
            field(k).ok_or_else(|| ApiError::schema(&format!("{at}.{k}"), format!("{k}: Field required (a string)")))
        };
        match field("type").unwrap_or("message") {
            "message" => {
                let role = match required("role")? {
                    "developer" => "system",
                    r @ ("user" | "assistant" | "system") => r,
                    other => {
                        return Err(ApiError::schema(
                            &format!("{at}.role"),
                            format!("role: expected user, assistant, system or developer; got {other:?}"),
                        ));
                    }
                };
                out.push(json!({"role": role, "content": content_text(item.get("content"), &at)?}));
            }
            "function_call" => {
                let call = json!({"id": required("call_id")?, "type": "function",
                    "function": {"name": required("name")?, "arguments": required("arguments")?}});
                match out.last_mut().and_then(|m| m.get_mut("tool_calls")).and_then(Value::as_array_mut) {
                    Some(calls) => calls.push(call),
                    None => out.push(json!({"role": "assistant", "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output = content_text(item.get("output"), &at)?;
                out.push(json!({"role": "tool", "tool_call_id": required("call_id")?, "content": output}));
            }
            "reasoning" => {}
            other => {
                return Err(ApiError::invalid(
                    param,
                    format!("Input items of type `{other}` are not supported by this server."),
                ));
            }
        }
    }
    Ok(out)
}

/// A message's content: a string, or text parts (`input_text`, `output_text`) joined.
fn content_text(content: Option<&Value>, at: &str) -> ApiResult<String> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            "input",
                            format!(
                                "Content parts of type `{}` are not supported by this server (text only).",
                                kind.unwrap_or("?")
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::schema(&format!("{at}.content"), "content: expected a string or a list of content parts")),
    }
}

fn chat_tool(t: &Map<String, Value>) -> ApiResult<Value> {
    match t.get("type").and_then(Value::as_str) {
        Some("function") => {
            let mut f = t.clone();
            f.remove("type");
            f.remove("strict");
            Ok(json!({"type": "function", "function": f}))
        }
        other => Err(ApiError::invalid(
            "tools",
            format!("Tools of type `{}` are not supported by this server (function tools only).", other.unwrap_or("?")),
        )),
    }
}

fn chat_tool_choice(c: &Value) -> ApiResult<Value> {
    match c {
        Value::String(_) => Ok(c.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            Ok(json!({"type": "function", "function": {"name": o.get("name")}}))
        }
        _ => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}.",
        )),
    }
}

/// `text.format` as chat's `response_format` (`None` for plain text).
fn response_format(f: &Map<String, Value>) -> ApiResult<Option<Value>> {
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = f.clone();
            schema.remove("type");
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(ApiError::invalid("text.format", "text.format.type must be text, json_object or json_schema.")),
    }
}

/// `<prefix>_<random hex>`: the ids of output items.
pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", super::common::random_hex())
}

pub fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() { json!([]) } else { json!([{"type": "reasoning_text", "text": text}]) };
    json!({"id": id, "type": "reasoning", "summary": [], "content": content, "status": status})
}

pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub fn message_item(id: &str, text: Option<&str>, status: &str) -> Value {
    let content = text.map_or(json!([]), |t| json!([output_text(t)]));
    json!({"id": id, "type": "message", "role": "assistant", "status": status, "content": content})
}

pub fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
        "status": status})
}

/// An output message's status: `incomplete` when the output ran into `max_output_tokens`.
pub fn message_status(ending: Option<&Ending>) -> &'static str {
    if ending.is_some_and(|e| e.finish_reason == Some("length")) { "incomplete" } else { "completed" }
}

/// The output items of a whole turn.
pub fn output_items(m: &Message, ending: &Ending) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = m.reasoning.as_deref().filter(|r| !r.is_empty()) {
        out.push(reasoning_item(&item_id("rs"), r, "completed"));
    }
    if let Some(c) = m.content.as_deref().filter(|c| !c.is_empty()) {
        out.push(message_item(&item_id("msg"), Some(c), message_status(Some(ending))));
    }
    for c in &m.tool_calls {
        out.push(call_item(&item_id("fc"), &c.id, &c.name, &c.arguments, "completed"));
    }
    out
}

/// A response object. `ending`: `None` while it runs.
pub fn response_json(
    id: &str,
    created_at: u64,
    model: &str,
    echo: &Map<String, Value>,
    output: Vec<Value>,
    ending: Option<&Ending>,
) -> Value {
    let incomplete = message_status(ending) == "incomplete";
    let status = match ending {
        None => "in_progress",
        Some(_) if incomplete => "incomplete",
        Some(_) => "completed",
    };
    let usage = ending.map(|e| {
        let u = &e.usage;
        json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })
    });
    let mut r = Map::new();
    r.insert("id".into(), json!(id));
    r.insert("object".into(), json!("response"));
    r.insert("created_at".into(), json!(created_at));
    r.insert("model".into(), json!(model));
    r.insert("status".into(), json!(status));
    r.insert("error".into(), Value::Null);
    r.insert(
        "incomplete_details".into(),
        if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
    );
    r.insert("background".into(), json!(false));
    r.insert("output".into(), Value::Array(output));
    r.insert("usage".into(), usage.unwrap_or(Value::Null));
    r.extend(echo.clone());
    Value::Object(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ResponsesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn items_become_chat_messages() {
        let r = req(json!({"instructions": "Be brief.", "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add 1 and 2."}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{\"a\": 1}"},
            {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{\"a\": 2}"},
            {"type": "function_call_output", "call_id": "c1", "output": "3"},
        ], "tools": [{"type": "function", "name": "add", "parameters": {"type": "object"}, "strict": true}],
           "tool_choice": {"type": "function", "name": "add"}, "max_output_tokens": 7,
           "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}}));
        let conv = r.input_messages().unwrap();
        let chat = r.to_chat(&conv, Map::new()).unwrap();
        assert_eq!(
            chat["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Add 1 and 2."},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}},
                    {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "3"},
            ])
        );
        assert_eq!(
            chat["tools"],
            json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}])
        );
        assert_eq!(chat["tool_choice"], json!({"type": "function", "function": {"name": "add"}}));
        assert_eq!(chat["max_tokens"], json!(7));
        assert_eq!(chat["response_format"]["json_schema"]["name"], json!("n"));
    }

    #[test]
    fn unsupported_inputs_are_refused() {
        let image = req(json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}));
        assert!(image.input_messages().unwrap_err().message.contains("input_image"));
        let web = req(json!({"input": "x", "tools": [{"type": "web_search"}]}));
        assert!(web.to_chat(&[], Map::new()).unwrap_err().message.contains("web_search"));
        assert_eq!(req(json!({})).input_messages().unwrap_err().param.as_deref(), Some("body.input"));
        let no_role = req(json!({"input": [{"type": "message", "content": "x"}]}));
        assert_eq!(no_role.input_messages().unwrap_err().param.as_deref(), Some("body.input[0].role"));
    }
}
