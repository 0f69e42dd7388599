//! `/v1/chat/completions` bodies.

use super::common::Usage;
use super::completion::StopReasonJson;
use super::logprobs::ChatLogprobs;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The chat-only request fields (the shared ones are in `SamplingFields`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatRequest {
    pub messages: Option<Vec<Map<String, Value>>>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub add_generation_prompt: Option<bool>,
    pub continue_final_message: Option<bool>,
    pub documents: Option<Vec<Map<String, Value>>>,
    pub chat_template: Option<String>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub return_prompt_text: Option<bool>,
    /// Checked by [`crate::tools::parse`].
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub include_reasoning: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<String>,
    pub refusal: Option<String>,
    pub annotations: Option<Value>,
    pub audio: Option<Value>,
    pub function_call: Option<Value>,
    /// Omitted when empty (as vLLM serializes it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Value>,
    pub reasoning: Option<String>,
}

impl ChatMessage {
    pub fn new(role: &str, content: Option<String>) -> Self {
        ChatMessage {
            role: role.to_string(),
            content,
            refusal: None,
            annotations: None,
            audio: None,
            function_call: None,
            tool_calls: Vec::new(),
            reasoning: None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonJson>,
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub service_tier: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Usage,
    pub prompt_logprobs: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatStreamChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// Sent on the chunk that finishes the choice (as vLLM does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<Option<StopReasonJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatStreamResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatStreamChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
}
