//! Draft heads: small networks that draft tokens for speculative decoding from the target
//! model's own hidden states — a checkpoint's multi-token-prediction layer (`mtp.rs`) or an
//! EAGLE-3 head (`eagle3.rs`) or an EAGLE-1 head (`eagle.rs`, in MTP form). Each keeps a KV cache of its
//! own attention layer(s).
//!
//! A head's entry at position `p` is computed from the target's hidden state(s) at `p` and the
//! token at `p + 1`; it proposes the token after that. A chained step feeds the head's own
//! output ([`DraftHead::chain_hidden`]) in place of the target's.

use crate::batch::ForwardBatch;
use crate::model::{ModelInfo, Workspace};
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;

/// Row `r` of the result is row `r` of every part, side by side (each part `rows × dim`).
pub fn concat_rows(parts: &[&[f32]], dim: usize) -> Vec<f32> {
    let rows = parts.first().map_or(0, |p| p.len() / dim);
    (0..rows).flat_map(|r| parts.iter().flat_map(move |p| &p[r * dim..(r + 1) * dim])).copied().collect()
}

pub trait DraftHead: Send + Sync {
    /// The head's attention layer(s) (`kv_cache_specs`) and the vocabulary it proposes in
    /// (the target's).
    fn info(&self) -> &ModelInfo;

    /// Target layers whose input (the residual stream entering the layer) the head reads, in
    /// ascending order ([`Workspace::aux_layers`]); none: it reads the final hidden states.
    fn aux_layers(&self) -> &[usize] {
        &[]
    }

    /// The hidden states a head's first step starts from, one row per target row, from the
    /// target's workspace after its forward.
    fn target_hidden(&self, be: &dyn Backend, target: &Workspace, out: &mut Vec<f32>);

    /// Runs the batch: `batch.input_ids` are the tokens after each row's position, `hidden`
    /// (`rows × hidden_size`) the hidden states at those positions.
    fn forward(&self, batch: &ForwardBatch, hidden: &[f32], kv: &mut KvCache, ws: &mut Workspace);

    /// What a chained step takes from each row, after [`DraftHead::forward`].
    fn chain_hidden<'w>(&self, ws: &'w Workspace) -> &'w [f32];

    /// The greedy token (in the target's vocabulary) of each of `rows` of the last forward;
    /// `logits` is scratch.
    fn argmax(&self, ws: &Workspace, rows: &[usize], logits: &mut Vec<f32>) -> Vec<u32>;
}
