//! `/v1/models` bodies (vLLM's `ModelList` / `ModelCard` / `ModelPermission`).

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ModelPermission {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub allow_create_engine: bool,
    pub allow_sampling: bool,
    pub allow_logprobs: bool,
    pub allow_search_indices: bool,
    pub allow_view: bool,
    pub allow_fine_tuning: bool,
    pub organization: &'static str,
    pub group: Option<String>,
    pub is_blocking: bool,
}

impl ModelPermission {
    pub fn new(created: u64) -> Self {
        ModelPermission {
            id: format!("modelperm-{}", super::common::random_hex()),
            object: "model_permission",
            created,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: "*",
            group: None,
            is_blocking: false,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub root: Option<String>,
    pub parent: Option<String>,
    pub max_model_len: Option<usize>,
    pub permission: Vec<ModelPermission>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}
