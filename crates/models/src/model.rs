//! What every architecture exposes to the engine.

use crate::batch::ForwardBatch;
use vllm_rs_core::KvCacheSpec;
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
    /// What each layer caches per request (one entry per layer): the engine groups layers by
    /// it and sizes the cache from it.
    pub kv_cache_specs: Vec<KvCacheSpec>,
}

pub trait Model: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// Runs the whole batch once: writes each row's K/V into `kv` and the logits of the rows in
    /// `batch.logits_indices` into `logits`, `[logits_indices.len() × vocab_size]` (resized,
    /// reusing its allocation: a step's logits are megabytes at batch 32).
    fn forward_into(&self, batch: &ForwardBatch, kv: &mut KvCache, logits: &mut Vec<f32>);

    /// [`Model::forward_into`] a new vector.
    fn forward(&self, batch: &ForwardBatch, kv: &mut KvCache) -> Vec<f32> {
        let mut logits = Vec::new();
        self.forward_into(batch, kv, &mut logits);
        logits
    }
}
