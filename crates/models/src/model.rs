//! What every architecture exposes to the engine.

use crate::batch::ForwardBatch;
use vllm_rs_kernels::attention::KvCache;

/// Shape facts the engine needs to size the KV cache and validate requests.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// Hugging Face class name, e.g. `Qwen2ForCausalLM`.
    pub architecture: String,
    pub num_layers: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
}

pub trait Model: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// Runs the whole batch once: writes each row's K/V into `kv` and returns the logits of the
    /// rows in `batch.logits_indices`, `[logits_indices.len() × vocab_size]`.
    fn forward(&self, batch: &ForwardBatch, kv: &mut KvCache) -> Vec<f32>;
}
