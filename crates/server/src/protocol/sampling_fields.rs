//! The request fields both generation endpoints share (sampling, stops, output options),
//! read from the same JSON body as the endpoint's own fields.

use super::common::{StopParam, StreamOptions};
use serde::Deserialize;
use std::collections::HashMap;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SamplingFields {
    pub model: Option<String>,
    pub n: Option<i64>,
    pub seed: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub echo: Option<bool>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub logit_bias: Option<HashMap<String, f64>>,
    pub stop: Option<StopParam>,
    pub stop_token_ids: Option<Vec<i64>>,
    pub include_stop_str_in_output: Option<bool>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<i64>,
    pub skip_special_tokens: Option<bool>,
    pub allowed_token_ids: Option<Vec<i64>>,
    pub bad_words: Option<Vec<String>>,
    pub prompt_logprobs: Option<i64>,
    pub add_special_tokens: Option<bool>,
    pub priority: Option<i64>,
    pub request_id: Option<String>,
    pub cache_salt: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub truncation_side: Option<String>,
    pub return_token_ids: Option<bool>,
    pub return_tokens_as_token_ids: Option<bool>,
    pub use_beam_search: Option<bool>,
    pub logprob_token_ids: Option<Vec<i64>>,
    pub length_penalty: Option<f64>,
    // Accepted and type-checked, without effect on the output.
    pub user: Option<String>,
    pub session_id: Option<String>,
}
