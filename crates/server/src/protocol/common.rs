//! Types shared by the completion and chat endpoints (vLLM's names and shapes).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
    pub continuous_usage_stats: Option<bool>,
}

/// `stop`: one string or a list of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum StopParam {
    One(String),
    Many(Vec<String>),
}

impl StopParam {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopParam::One(s) => vec![s],
            StopParam::Many(v) => v,
        }
    }
}

/// vLLM's `should_include_usage`: (final usage chunk, usage on every chunk).
pub fn include_usage(opts: Option<&StreamOptions>, force: bool) -> (bool, bool) {
    if force {
        return (true, true);
    }
    let Some(o) = opts else { return (false, false) };
    let usage = o.include_usage.unwrap_or(false);
    (usage, usage && o.continuous_usage_stats.unwrap_or(false))
}

/// 128 random bits as 32 hex digits: the random part of every id the server makes.
pub fn random_hex() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// `cmpl-…` / `chatcmpl-…` ids: the client's `request_id` when given, else random hex.
pub fn request_id(prefix: &str, given: Option<&str>) -> String {
    match given {
        Some(id) if !id.is_empty() => format!("{prefix}-{id}"),
        _ => format!("{prefix}-{}", random_hex()),
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
