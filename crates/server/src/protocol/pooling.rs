//! `/v1/embeddings`, `/pooling`, `/score` and `/rerank` bodies (vLLM's names and shapes).

use crate::protocol::common::Usage;
use serde::{Deserialize, Serialize};

/// What to pool: one text, several, one token-id list, or several (OpenAI's `input`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum PoolingInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    pub input: Option<PoolingInput>,
    pub encoding_format: Option<String>,
    pub dimensions: Option<i64>,
    pub user: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub request_id: Option<String>,
    pub add_special_tokens: Option<bool>,
    pub normalize: Option<bool>,
    pub priority: Option<i64>,
}

/// One vector: a list of floats, or (`encoding_format: "base64"`) the little-endian f32 bytes
/// in base64.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolingData {
    pub index: usize,
    /// `"embedding"` (`/v1/embeddings`) or `"pooling"` (`/pooling`).
    pub object: &'static str,
    /// `embedding` for `/v1/embeddings`, `data` for `/pooling`.
    #[serde(flatten)]
    pub vector: NamedVector,
}

#[derive(Clone, Debug, Serialize)]
pub enum NamedVector {
    #[serde(rename = "embedding")]
    Embedding(Vector),
    #[serde(rename = "data")]
    Data(Vector),
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolingResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<PoolingData>,
    pub usage: Usage,
}

/// `text_1` / `text_2` (or `queries` / `documents`): one text or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ScoreTexts {
    One(String),
    Many(Vec<String>),
}

impl ScoreTexts {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            ScoreTexts::One(s) => vec![s],
            ScoreTexts::Many(v) => v,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ScoreRequest {
    pub model: Option<String>,
    pub text_1: Option<ScoreTexts>,
    pub text_2: Option<ScoreTexts>,
    pub queries: Option<ScoreTexts>,
    pub documents: Option<ScoreTexts>,
    pub user: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub request_id: Option<String>,
    pub priority: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScoreData {
    pub index: usize,
    pub object: &'static str,
    pub score: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScoreResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<ScoreData>,
    pub usage: Usage,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct RerankRequest {
    pub model: Option<String>,
    pub query: Option<String>,
    pub documents: Option<Vec<String>>,
    pub top_n: Option<i64>,
    pub return_documents: Option<bool>,
    pub user: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub request_id: Option<String>,
    pub priority: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RerankDocument {
    pub text: String,
    /// Always null here (vLLM's field for image documents).
    pub multi_modal: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RerankResult {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankDocument>,
    pub relevance_score: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct RerankResponse {
    pub id: String,
    pub model: String,
    pub usage: RerankUsage,
    pub results: Vec<RerankResult>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClassificationRequest {
    pub model: Option<String>,
    pub input: Option<PoolingInput>,
    pub user: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub request_id: Option<String>,
    pub add_special_tokens: Option<bool>,
    pub priority: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassificationData {
    pub index: usize,
    pub label: String,
    pub probs: Vec<f32>,
    pub num_classes: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassificationResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<ClassificationData>,
    pub usage: Usage,
}
