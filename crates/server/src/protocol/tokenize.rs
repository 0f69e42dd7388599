//! `/tokenize` and `/detokenize` bodies (vLLM's schemas).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Either form of vLLM's `TokenizeRequest`: `prompt` (completion) or `messages` (chat).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<Map<String, Value>>>,
    pub add_special_tokens: Option<bool>,
    pub return_token_strs: Option<bool>,
    pub add_generation_prompt: Option<bool>,
    pub continue_final_message: Option<bool>,
    pub chat_template: Option<String>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    pub token_strs: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
