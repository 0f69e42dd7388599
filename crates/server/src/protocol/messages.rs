//! Anthropic's Messages API bodies (`/v1/messages`, `/v1/messages/count_tokens`) and their
//! translation into a chat completion request, as vLLM's `AnthropicServingMessages` translates
//! them: the system prompt (top-level, and any `system` messages) becomes one system message,
//! `tool_use` blocks become assistant tool calls, `tool_result` blocks tool messages, `thinking`
//! blocks the message's reasoning; `stop_sequences` are chat's `stop`, tools chat's functions.

use crate::errors::{ApiError, ApiResult};
use crate::tools::dumps;
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub messages: Option<Vec<InputMessage>>,
    pub max_tokens: Option<i64>,
    pub system: Option<SystemPrompt>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub output_config: Option<OutputConfig>,
    /// An extension (vllm-rs; not Anthropic's): generate `max_tokens` whatever EOS says, as
    /// chat's vLLM `ignore_eos` (for benchmarks that need fixed output lengths).
    pub ignore_eos: Option<bool>,
}

/// `output_config`: the output's JSON schema (chat's `response_format`); `effort` has no
/// counterpart here.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct OutputConfig {
    pub format: Option<OutputFormat>,
    pub effort: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OutputFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub schema: Option<Value>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum SystemPrompt {
    Text(String),
    Blocks(Vec<TextBlock>),
}

#[derive(Clone, Debug, Deserialize)]
pub struct TextBlock {
    pub text: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Claude Code (2.1.154 on) also sends `ctx` and `msg`, which vLLM reads as `user`.
    #[serde(alias = "ctx", alias = "msg")]
    User,
    Assistant,
    System,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InputMessage {
    pub role: Role,
    pub content: Content,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {},
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Value>,
    },
    Thinking {
        thinking: String,
    },
    RedactedThinking {},
    /// Only meaningful inside a tool result; skipped elsewhere, as vLLM skips it.
    ToolReference {},
}

#[derive(Clone, Debug, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: Option<bool>,
}

impl MessagesRequest {
    /// The chat completion body this request runs as. `count_only`: for count_tokens (no
    /// `max_tokens` needed; tools rendered without choosing how they are called).
    pub fn to_chat(&self, count_only: bool) -> ApiResult<Value> {
        let Some(messages) = &self.messages else {
            return Err(ApiError::schema("messages", "messages: Field required"));
        };
        let mut chat = Map::new();
        let messages = chat_messages(self.system.as_ref(), messages)?;
        // A final assistant message is a prefill, as Anthropic reads it: the reply continues it.
        let last = messages.last();
        if last.is_some_and(|m| m["role"] == "assistant" && m["content"].is_string() && m.get("tool_calls").is_none()) {
            chat.insert("continue_final_message".into(), json!(true));
            chat.insert("add_generation_prompt".into(), json!(false));
        }
        chat.insert("messages".into(), Value::Array(messages));
        if let Some(m) = &self.model {
            chat.insert("model".into(), json!(m));
        }
        if let Some(k) = &self.chat_template_kwargs {
            chat.insert("chat_template_kwargs".into(), Value::Object(k.clone()));
        }
        if let Some(tools) = &self.tools {
            let tools: Vec<Value> = tools
                .iter()
                .map(|t| {
                    let mut schema = t.input_schema.clone();
                    // As vLLM: a schema without a type describes an object.
                    if let Some(o) = schema.as_object_mut() {
                        o.entry("type").or_insert_with(|| json!("object"));
                    }
                    json!({"type": "function", "function":
                        {"name": t.name, "description": t.description, "parameters": schema}})
                })
                .collect();
            chat.insert("tools".into(), Value::Array(tools));
        }
        if count_only {
            if self.tools.is_some() {
                chat.insert("tool_choice".into(), json!("none"));
            }
            return Ok(Value::Object(chat));
        }
        let Some(max_tokens) = self.max_tokens else {
            return Err(ApiError::schema("max_tokens", "max_tokens: Field required"));
        };
        chat.insert("max_tokens".into(), json!(max_tokens));
        if let Some(rf) = self.output_config.as_ref().map(response_format).transpose()?.flatten() {
            chat.insert("response_format".into(), rf);
        }
        if let Some(c) = &self.tool_choice {
            chat.insert("tool_choice".into(), chat_tool_choice(c)?);
            if let Some(d) = c.disable_parallel_tool_use {
                chat.insert("parallel_tool_calls".into(), json!(!d));
            }
        }
        let optional = [
            ("stop", self.stop_sequences.as_ref().map(|s| json!(s))),
            ("temperature", self.temperature.map(|v| json!(v))),
            ("top_p", self.top_p.map(|v| json!(v))),
            ("top_k", self.top_k.map(|v| json!(v))),
            ("stream", self.stream.map(|v| json!(v))),
            ("ignore_eos", self.ignore_eos.map(|v| json!(v))),
        ];
        for (k, v) in optional {
            if let Some(v) = v {
                chat.insert(k.into(), v);
            }
        }
        Ok(Value::Object(chat))
    }
}

fn chat_tool_choice(c: &ToolChoice) -> ApiResult<Value> {
    Ok(match c.kind.as_str() {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => match &c.name {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => return Err(ApiError::schema("tool_choice.name", "tool_choice.name: Field required")),
        },
        other => {
            return Err(ApiError::schema(
                "tool_choice.type",
                format!("tool_choice.type: expected one of auto, any, tool, none; got {other:?}"),
            ));
        }
    })
}

/// `output_config` as chat's `response_format` (`None`: no format asked for).
fn response_format(c: &OutputConfig) -> ApiResult<Option<Value>> {
    if c.effort.is_some() {
        return Err(ApiError::invalid(
            "output_config.effort",
            "`output_config.effort` is not supported by this server (vllm-rs) yet; remove it from the request.",
        ));
    }
    let Some(f) = &c.format else { return Ok(None) };
    match (f.kind.as_str(), &f.schema) {
        ("json_schema", Some(schema)) => {
            Ok(Some(json!({"type": "json_schema", "json_schema": {"name": "json_schema", "schema": schema}})))
        }
        ("json_schema", None) => {
            Err(ApiError::schema("output_config.format.schema", "output_config.format.schema: Field required"))
        }
        (other, _) => Err(ApiError::schema(
            "output_config.format.type",
            format!("output_config.format.type: expected json_schema, got {other:?}"),
        )),
    }
}

/// Claude Code's per-request attribution header, which vLLM drops from the system prompt (it
/// changes with every request and would defeat prefix caching).
const BILLING_HEADER: &str = "x-anthropic-billing-header";

fn image_refused() -> ApiError {
    ApiError::invalid("messages", "Image content is not supported by this server (text only).")
}

/// The conversation as chat messages: the system prompt first.
fn chat_messages(system: Option<&SystemPrompt>, messages: &[InputMessage]) -> ApiResult<Vec<Value>> {
    let mut parts: Vec<String> = match system {
        None => Vec::new(),
        Some(SystemPrompt::Text(s)) => vec![s.clone()],
        Some(SystemPrompt::Blocks(b)) => {
            b.iter().filter(|b| !b.text.starts_with(BILLING_HEADER)).map(|b| b.text.clone()).collect()
        }
    };
    for m in messages.iter().filter(|m| m.role == Role::System) {
        match &m.content {
            Content::Text(s) => parts.push(s.clone()),
            Content::Blocks(blocks) => {
                for b in blocks {
                    if let ContentBlock::Text { text } = b
                        && !text.starts_with(BILLING_HEADER)
                    {
                        parts.push(text.clone());
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    let system: String = parts.concat();
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in messages.iter().filter(|m| m.role != Role::System) {
        let role = if m.role == Role::User { "user" } else { "assistant" };
        let blocks = match &m.content {
            Content::Text(s) => {
                out.push(json!({"role": role, "content": s}));
                continue;
            }
            Content::Blocks(b) => b,
        };
        let mut msg = Map::new();
        msg.insert("role".into(), json!(role));
        let (mut texts, mut calls, mut reasoning) = (Vec::new(), Vec::new(), String::new());
        for b in blocks {
            match b {
                ContentBlock::Text { text } => texts.push(text.clone()),
                ContentBlock::Image {} => return Err(image_refused()),
                ContentBlock::Thinking { thinking } => reasoning.push_str(thinking),
                ContentBlock::RedactedThinking {} | ContentBlock::ToolReference {} => {}
                ContentBlock::ToolUse { id, name, input } => {
                    let args = if input.is_null() { "{}".to_string() } else { dumps(input) };
                    calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
                }
                ContentBlock::ToolResult { tool_use_id, content } if m.role == Role::User => {
                    out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": tool_text(content)?}));
                }
                ContentBlock::ToolResult { content, .. } => {
                    texts.push(format!("Tool result: {}", tool_text(content)?));
                }
            }
        }
        if !reasoning.is_empty() {
            msg.insert("reasoning".into(), json!(reasoning));
        }
        let has_calls = !calls.is_empty();
        if has_calls {
            msg.insert("tool_calls".into(), Value::Array(calls));
        }
        if !texts.is_empty() {
            msg.insert("content".into(), json!(texts.concat()));
        }
        // A user turn made only of tool results is the tool messages above.
        if msg.contains_key("content") || has_calls || (m.role == Role::Assistant && !reasoning.is_empty()) {
            out.push(Value::Object(msg));
        }
    }
    Ok(out)
}

/// A tool result's content: a string, or text blocks joined by newlines.
fn tool_text(content: &Option<Value>) -> ApiResult<String> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(items)) => {
            let mut texts = Vec::new();
            for item in items {
                match item.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(item.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
                    Some("image") => return Err(image_refused()),
                    _ => {}
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(ApiError::schema(
            "messages.content.content",
            "tool_result content: expected a string or a list of content blocks",
        )),
    }
}

/// Anthropic's `stop_reason` for a chat finish reason.
pub fn stop_reason(finish: Option<&str>, stop_sequence: Option<&str>, called: bool) -> Option<&'static str> {
    match finish {
        _ if called => Some("tool_use"),
        Some("stop") if stop_sequence.is_some() => Some("stop_sequence"),
        Some("stop") => Some("end_turn"),
        Some("length") => Some("max_tokens"),
        Some("tool_calls") => Some("tool_use"),
        _ => None,
    }
}

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s < 500 => "invalid_request_error",
        _ => "api_error",
    }
}

/// `{"type": "error", "error": {"type", "message"}}`.
pub fn error_json(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(e.status.as_u16()), "message": e.message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> MessagesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn system_tool_use_and_results_become_chat_messages() {
        let r = req(json!({
            "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
            "stop_sequences": ["END"],
            "messages": [
                {"role": "user", "content": "Add 1 and 2."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "use add", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "3"}]}]},
            ],
            "tools": [{"name": "add", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        }));
        let chat = r.to_chat(false).unwrap();
        assert_eq!(
            chat["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Add 1 and 2."},
                {"role": "assistant", "reasoning": "use add", "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "3"},
            ])
        );
        assert_eq!(chat["stop"], json!(["END"]));
        assert_eq!(chat["tool_choice"], json!("required"));
        assert_eq!(chat["parallel_tool_calls"], json!(false));
        assert_eq!(chat["tools"][0]["function"]["parameters"], json!({"type": "object"}));
        assert_eq!(r.to_chat(true).unwrap()["tool_choice"], json!("none"));
    }

    #[test]
    fn claude_code_quirks_and_output_config() {
        let r = req(json!({
            "max_tokens": 5,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: 1234"}, {"type": "text", "text": "Be brief."}],
            "messages": [{"role": "ctx", "content": "Context."}, {"role": "msg", "content": [{"type": "tool_reference"}, {"type": "text", "text": "Hi"}]}],
            "tools": [{"name": "f", "input_schema": {"properties": {}}}],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        }));
        let chat = r.to_chat(false).unwrap();
        assert_eq!(
            chat["messages"],
            json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Context."}, {"role": "user", "content": "Hi"}])
        );
        assert_eq!(chat["tools"][0]["function"]["parameters"], json!({"properties": {}, "type": "object"}));
        assert_eq!(chat["response_format"]["json_schema"]["schema"], json!({"type": "object"}));
        let effort = req(json!({"max_tokens": 5, "messages": [], "output_config": {"effort": "high"}}));
        assert_eq!(effort.to_chat(false).unwrap_err().param.as_deref(), Some("output_config.effort"));
    }

    #[test]
    fn a_final_assistant_message_is_continued() {
        let prefill = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! I am"}]);
        let chat = req(json!({"max_tokens": 3, "messages": prefill})).to_chat(false).unwrap();
        assert_eq!((&chat["continue_final_message"], &chat["add_generation_prompt"]), (&json!(true), &json!(false)));
        let chat = req(json!({"messages": prefill})).to_chat(true).unwrap();
        assert_eq!(chat["continue_final_message"], json!(true), "count_tokens counts the same prompt");
        let asked = json!([{"role": "user", "content": "Hi"}]);
        assert!(
            req(json!({"max_tokens": 3, "messages": asked}))
                .to_chat(false)
                .unwrap()
                .get("continue_final_message")
                .is_none()
        );
    }

    #[test]
    fn missing_fields_and_images_are_refused() {
        let e = req(json!({"messages": []})).to_chat(false).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.max_tokens"));
        assert!(req(json!({"messages": []})).to_chat(true).is_ok(), "count_tokens needs no max_tokens");
        let e = req(json!({"max_tokens": 1})).to_chat(false).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.messages"));
        let img =
            json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]});
        assert!(req(img).to_chat(false).unwrap_err().message.contains("Image"));
    }

    #[test]
    fn stop_reasons_and_error_types() {
        assert_eq!(stop_reason(Some("stop"), None, false), Some("end_turn"));
        assert_eq!(stop_reason(Some("stop"), Some("END"), false), Some("stop_sequence"));
        assert_eq!(stop_reason(Some("length"), None, false), Some("max_tokens"));
        assert_eq!(stop_reason(Some("stop"), None, true), Some("tool_use"));
        assert_eq!(error_type(400), "invalid_request_error");
        assert_eq!(error_type(404), "not_found_error");
        assert_eq!(error_type(500), "api_error");
    }
}
