//! Which top-level request fields each endpoint takes.
//!
//! vLLM accepts any extra field and ignores it with a debug log. We do not ignore anything
//! that would change the output:
//! - fields we implement, and harmless OpenAI fields that never change the output (`user`,
//!   `store`, `metadata`, `service_tier`...), are accepted;
//! - fields vLLM implements and we do not yet (`logits_processors`...), and the `guided_*`
//!   fields older vLLM took (now `structured_outputs`), are rejected with 400 naming the field —
//!   unless they carry the value that means "off" (`null`, `"watermarking": false`...), which
//!   clients often send by default;
//! - any other field is accepted, as vLLM accepts it, with a warning in the log naming it
//!   (clients send the extra fields of other servers' APIs; a typo shows in the log).

use crate::errors::{ApiError, ApiResult};
use crate::json_body::RawObject;
use serde_json::Value;
use serde_json::value::RawValue;

/// A field we do not implement, and the values of it that mean "not used".
pub struct Unsupported {
    pub name: &'static str,
    pub neutral: fn(&Value) -> bool,
}

const fn unsupported(name: &'static str, neutral: fn(&Value) -> bool) -> Unsupported {
    Unsupported { name, neutral }
}

fn null(v: &Value) -> bool {
    v.is_null()
}
fn null_or_false(v: &Value) -> bool {
    v.is_null() || v == &Value::Bool(false)
}
fn null_or_true(v: &Value) -> bool {
    v.is_null() || v == &Value::Bool(true)
}
fn null_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}
fn null_or_one(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(1.0)
}
fn null_or_minus_one(v: &Value) -> bool {
    v.is_null() || v.as_i64() == Some(-1)
}
fn no_tool_choice(v: &Value) -> bool {
    v.is_null() || v.as_str() == Some("none")
}
fn text_modalities(v: &Value) -> bool {
    v.is_null() || v.as_array().is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text")))
}

/// Fields vLLM's generation endpoints share that we do not implement.
const UNSUPPORTED_COMMON: &[Unsupported] = &[
    unsupported("guided_json", null),
    unsupported("guided_regex", null),
    unsupported("guided_choice", null),
    unsupported("guided_grammar", null),
    unsupported("guided_decoding_backend", null),
    unsupported("guided_whitespace_pattern", null),
    unsupported("logits_processors", null_or_empty),
    unsupported("watermarking", null_or_false),
    unsupported("spaces_between_special_tokens", null_or_true),
    unsupported("kv_transfer_params", null),
    unsupported("ec_transfer_params", null),
    unsupported("vllm_xargs", null_or_empty),
    unsupported("repetition_detection", null),
    unsupported("return_weight_versions", null_or_false),
    unsupported("stream_interval", null_or_one),
    unsupported("best_of", null_or_one),
];

const UNSUPPORTED_COMPLETION: &[Unsupported] = &[
    unsupported("suffix", null_or_empty),
    unsupported("prompt_embeds", null_or_empty),
    // Chat only here: the end of thinking is known from the reasoning parser.
    unsupported("thinking_token_budget", null_or_minus_one),
];

const UNSUPPORTED_CHAT: &[Unsupported] = &[
    unsupported("functions", null),
    unsupported("function_call", no_tool_choice),
    unsupported("reasoning_effort", null),
    unsupported("audio", null),
    unsupported("modalities", text_modalities),
    unsupported("prediction", null),
    unsupported("web_search_options", null),
    unsupported("verbosity", null),
    unsupported("media_io_kwargs", null_or_empty),
    unsupported("mm_processor_kwargs", null_or_empty),
];

/// Accepted on both generation endpoints (implemented, or never changing the output).
const COMMON: &[&str] = &[
    "model",
    "frequency_penalty",
    "logit_bias",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "allowed_token_ids",
    "prompt_logprobs",
    "bad_words",
    "add_special_tokens",
    "priority",
    "request_id",
    "cache_salt",
    "truncate_prompt_tokens",
    "truncation_side",
    "return_token_ids",
    "return_tokens_as_token_ids",
    "echo",
    "max_tokens",
    "response_format",
    "structured_outputs",
    "use_beam_search",
    "logprob_token_ids",
    "length_penalty",
    // Harmless: identification, routing hints or render-only options.
    "user",
    "session_id",
    "return_token_offsets",
    "mm_payload",
    "return_mm_kwargs",
    "routed_experts_prompt_start",
];

const COMPLETION: &[&str] = &["prompt", "logprobs"];

const CHAT: &[&str] = &[
    "messages",
    "logprobs",
    "top_logprobs",
    "max_completion_tokens",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "chat_template",
    "chat_template_kwargs",
    "return_prompt_text",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "include_reasoning",
    "thinking_token_budget",
    // Harmless OpenAI fields.
    "store",
    "metadata",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
];

const TOKENIZE: &[&str] = &[
    "model",
    "prompt",
    "add_special_tokens",
    "return_token_strs",
    "messages",
    "add_generation_prompt",
    "continue_final_message",
    "chat_template",
    "chat_template_kwargs",
];
const UNSUPPORTED_TOKENIZE: &[Unsupported] = &[
    unsupported("tools", null_or_empty),
    unsupported("media_io_kwargs", null_or_empty),
    unsupported("mm_processor_kwargs", null_or_empty),
];

const DETOKENIZE: &[&str] = &["model", "tokens"];

/// Anthropic's `/v1/messages` (see `protocol/messages.rs`).
const MESSAGES: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "chat_template_kwargs",
    "output_config",
    "ignore_eos",
    // Harmless: identification and routing.
    "metadata",
    "service_tier",
];
const UNSUPPORTED_MESSAGES: &[Unsupported] =
    &[unsupported("container", null), unsupported("mcp_servers", null_or_empty)];
const COUNT_TOKENS: &[&str] = &["model", "messages", "system", "tools", "tool_choice", "chat_template_kwargs"];

/// `/v1/responses`, besides the fields it passes to chat as they are (see `protocol/responses.rs`).
const RESPONSES: &[&str] = &[
    "input",
    "instructions",
    "previous_response_id",
    "store",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "text",
    // Harmless: identification, routing, stream framing.
    "metadata",
    "user",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "stream_options",
];
fn truncation_disabled(v: &Value) -> bool {
    v.is_null() || v.as_str() == Some("disabled")
}
const UNSUPPORTED_RESPONSES: &[Unsupported] = &[
    unsupported("background", null_or_false),
    unsupported("include", null_or_empty),
    unsupported("reasoning", null_or_empty),
    unsupported("truncation", truncation_disabled),
    unsupported("top_logprobs", null),
    unsupported("max_tool_calls", null),
    unsupported("conversation", null),
    unsupported("prompt", null),
];

/// The pooling endpoints (`/v1/embeddings`, `/pooling`; `/score`, `/rerank`).
const EMBEDDINGS: &[&str] = &[
    "model",
    "input",
    "encoding_format",
    "dimensions",
    "user",
    "truncate_prompt_tokens",
    "request_id",
    "add_special_tokens",
    "normalize",
    "priority",
];
const CLASSIFY: &[&str] =
    &["model", "input", "user", "truncate_prompt_tokens", "request_id", "add_special_tokens", "priority"];
const SCORE: &[&str] =
    &["model", "text_1", "text_2", "queries", "documents", "user", "truncate_prompt_tokens", "request_id", "priority"];
const RERANK: &[&str] = &[
    "model",
    "query",
    "documents",
    "top_n",
    "return_documents",
    "user",
    "truncate_prompt_tokens",
    "request_id",
    "priority",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completion,
    Chat,
    Tokenize,
    Detokenize,
    Embeddings,
    Classify,
    Score,
    Rerank,
    Messages,
    CountTokens,
    Responses,
}

impl Endpoint {
    fn accepts(self, key: &str) -> bool {
        self.fields().any(|f| f == key)
    }

    /// The fields this endpoint takes; /openapi.json's request schemas list exactly these
    /// (tests/openapi_routes.rs).
    pub fn fields(self) -> impl Iterator<Item = &'static str> {
        let lists: &[&[&'static str]] = match self {
            Endpoint::Completion => &[COMMON, COMPLETION],
            Endpoint::Chat => &[COMMON, CHAT],
            Endpoint::Tokenize => &[TOKENIZE],
            Endpoint::Detokenize => &[DETOKENIZE],
            Endpoint::Embeddings => &[EMBEDDINGS],
            Endpoint::Classify => &[CLASSIFY],
            Endpoint::Score => &[SCORE],
            Endpoint::Rerank => &[RERANK],
            Endpoint::Messages => &[MESSAGES],
            Endpoint::CountTokens => &[COUNT_TOKENS],
            Endpoint::Responses => &[RESPONSES, super::responses::CHAT_FIELDS],
        };
        lists.iter().flat_map(|l| l.iter().copied())
    }

    fn unsupported(self, key: &str) -> Option<&'static Unsupported> {
        let lists: &[&[Unsupported]] = match self {
            Endpoint::Completion => &[UNSUPPORTED_COMMON, UNSUPPORTED_COMPLETION],
            Endpoint::Chat => &[UNSUPPORTED_COMMON, UNSUPPORTED_CHAT],
            Endpoint::Tokenize => &[UNSUPPORTED_TOKENIZE],
            Endpoint::Messages => &[UNSUPPORTED_MESSAGES],
            Endpoint::Responses => &[UNSUPPORTED_RESPONSES],
            Endpoint::Detokenize
            | Endpoint::Embeddings
            | Endpoint::Classify
            | Endpoint::Score
            | Endpoint::Rerank
            | Endpoint::CountTokens => &[],
        };
        lists.iter().flat_map(|l| l.iter()).find(|u| u.name == key)
    }
}

/// Neutral values are short (`null`, `false`, `[]`, `{"type": "text"}`...): a longer one is
/// not neutral, and is not parsed to find out.
const LONGEST_NEUTRAL: usize = 256;

fn is_neutral(u: &Unsupported, raw: &RawValue) -> bool {
    raw.get().len() <= LONGEST_NEUTRAL && serde_json::from_str::<Value>(raw.get()).is_ok_and(|v| (u.neutral)(&v))
}

/// Rejects unsupported fields (with a non-neutral value), naming them. Unknown fields are
/// accepted and logged, as vLLM does (clients send extra fields of other servers' APIs).
pub fn check_fields(body: &RawObject, endpoint: Endpoint) -> ApiResult<()> {
    let mut unknown = Vec::new();
    for (key, value) in body.fields() {
        if endpoint.accepts(key) {
            continue;
        }
        match endpoint.unsupported(key) {
            Some(u) if is_neutral(u, value) => continue,
            Some(_) => {
                return Err(ApiError::invalid(
                    key,
                    format!("`{key}` is not supported by this server (vllm-rs) yet; remove it from the request."),
                ));
            }
            None => unknown.push(key),
        }
    }
    if !unknown.is_empty() {
        IGNORED_FIELDS.fetch_add(unknown.len() as u64, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!("The following fields were present in the request but ignored: {unknown:?}");
    }
    Ok(())
}

/// Unknown request fields accepted and ignored since start-up (`/metrics`; the log names them).
/// One process-wide count with no field label: the names are the client's, unbounded.
static IGNORED_FIELDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn ignored_fields() -> u64 {
    IGNORED_FIELDS.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value, e: Endpoint) -> ApiResult<()> {
        let text = v.to_string();
        check_fields(&RawObject::parse(text.as_bytes()).unwrap(), e)
    }

    #[test]
    fn known_and_neutral_fields_pass() {
        check(
            json!({"model": "m", "prompt": "x", "user": "u", "response_format": {"type": "text"}}),
            Endpoint::Completion,
        )
        .unwrap();
        check(json!({"messages": [], "tool_choice": "none", "tools": null, "store": false}), Endpoint::Chat).unwrap();
        check(json!({"response_format": {"type": "json_object"}, "structured_outputs": null}), Endpoint::Chat).unwrap();
    }

    #[test]
    fn unsupported_and_unknown_fields_name_the_field() {
        let e = check(json!({"guided_json": {"type": "object"}}), Endpoint::Chat).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("guided_json"));
        assert!(e.message.contains("not supported"), "{}", e.message);
        let e = check(json!({"functions": [{"name": "f"}]}), Endpoint::Chat).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("functions"));
        // Unknown fields (a typo, another API's extras) are accepted and logged, as vLLM does.
        check(json!({"max_token": 5, "messages": [], "tools": []}), Endpoint::Completion).unwrap();
    }
}
