//! `/v1/completions` bodies.

use super::common::Usage;
use super::logprobs::CompletionLogprobs;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The completion-only request fields (the shared ones are in `SamplingFields`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    pub prompt: Option<PromptInput>,
    pub logprobs: Option<i64>,
}

/// `prompt`: a text, a list of texts, a list of token ids, or a list of token-id lists.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// vLLM's `stop_reason`: the stop string or the stop token id.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StopReasonJson {
    Text(String),
    Token(u32),
}

impl From<&vllm_rs_frontend::StopReason> for StopReasonJson {
    fn from(r: &vllm_rs_frontend::StopReason) -> Self {
        match r {
            vllm_rs_frontend::StopReason::Text(s) => StopReasonJson::Text(s.clone()),
            vllm_rs_frontend::StopReason::TokenId(t) => StopReasonJson::Token(*t),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonJson>,
    pub token_ids: Option<Vec<u32>>,
    pub prompt_logprobs: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub service_tier: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Usage,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionStreamChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionStreamResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionStreamChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}
