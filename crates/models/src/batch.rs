//! The flat batch one forward pass runs: every scheduled token of every request, side by side.

pub use vllm_rs_kernels::attention::SeqAttention;

/// Inputs of one model step, in vLLM's vocabulary.
pub struct ForwardBatch<'a> {
    /// One token id per row.
    pub input_ids: &'a [u32],
    /// Position of each row's token in its request.
    pub positions: &'a [u32],
    /// Per KV cache group (see `KvCache::group_of`): where rows write and what they attend.
    pub groups: Vec<GroupBatch<'a>>,
    /// Rows whose logits are wanted (usually each request's last row).
    pub logits_indices: &'a [usize],
    /// Recurrent layers: `(row, slot)` — once row `row` is in, save the request's state into
    /// state slot `slot` (a prefix-cache snapshot, or the state after a draft token that
    /// verification may reject). In row order; a row may have several.
    pub state_saves: &'a [(usize, u32)],
}

/// One KV cache group's view of the batch.
pub struct GroupBatch<'a> {
    /// Cache slot (`block * block_size + offset`) each row's K/V is written to.
    pub slot_mapping: &'a [usize],
    /// Per request: its rows (`query_start_loc`), `seq_lens` and this group's block table.
    pub seqs: Vec<SeqAttention<'a>>,
}

impl ForwardBatch<'_> {
    pub fn num_tokens(&self) -> usize {
        self.input_ids.len()
    }
}
