//! What every architecture exposes to the engine.

use crate::batch::ForwardBatch;
use crate::layers::{AttentionBuffers, gather_rows};
use crate::moe::MoeBuffers;
use std::cell::RefCell;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::attention::{KvCache, KvDtype};
use vllm_rs_kernels::ops::RopeTable;
use vllm_rs_kernels::{Backend, Weight};

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

impl ModelInfo {
    /// A KV cache of `num_blocks` blocks for tests and tools (the engine lays out its own from
    /// the groups): the paged layers in group 0 with a tensor each, sized by the layer's spec,
    /// and the recurrent layers in group 1 with `num_state_slots` state slots each (a batch
    /// gives group 1 a one-entry table per request: its slot).
    pub fn contiguous_kv_cache(
        &self,
        num_blocks: usize,
        block_size: usize,
        dtype: KvDtype,
        num_state_slots: usize,
    ) -> KvCache {
        let rows: Vec<[usize; 2]> = self.kv_cache_specs.iter().map(|s| s.row_elements()).collect();
        let layers: Vec<usize> = (0..rows.len()).collect();
        let groups: Vec<usize> = self.kv_cache_specs.iter().map(|s| usize::from(!s.is_paged())).collect();
        let states: Vec<usize> = self.kv_cache_specs.iter().map(KvCacheSpec::state_elements).collect();
        KvCache::with_layout(num_blocks, block_size, dtype, &rows, &layers, &groups)
            .with_states(&states, num_state_slots)
    }

    /// Whether some layer keeps a recurrent state (a hybrid or state-space model).
    pub fn has_recurrent_layers(&self) -> bool {
        self.kv_cache_specs.iter().any(|s| !s.is_paged())
    }
}

/// What a forward pass starts from: token ids to embed, or embeddings given by the caller
/// (`tokens × hidden_size`, e.g. image or audio features already projected).
#[derive(Clone, Copy, Debug)]
pub enum ForwardInput<'a> {
    TokenIds(&'a [u32]),
    Embeddings(&'a [f32]),
}

/// Everything one forward pass writes, kept by the caller between passes so decode does not
/// allocate per op, and the backend the pass runs on. A model holds no scratch of its own: one
/// model can serve several callers.
pub struct Workspace {
    /// Where every op of the pass runs ([`vllm_rs_kernels::backend`]).
    pub backend: &'static dyn Backend,
    /// The residual stream, `tokens × hidden`.
    pub h: Vec<f32>,
    /// A normed copy of `h`; after [`Model::forward`], the final hidden states.
    pub x: Vec<f32>,
    /// A sub-layer's output.
    pub y: Vec<f32>,
    pub attention: AttentionBuffers,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    /// Scratch of the mixture-of-experts blocks.
    pub moe: MoeBuffers,
    /// One rotary table per rotary base the model uses (Gemma's local and global layers).
    pub ropes: Vec<RopeTable>,
    /// Hidden states of the rows that need logits.
    pub selected: Vec<f32>,
    /// Layers whose input (the residual stream entering the layer, `tokens × hidden`) a forward
    /// keeps in [`Workspace::aux`], in ascending order (an EAGLE-3 head reads them).
    pub aux_layers: Vec<usize>,
    pub aux: Vec<Vec<f32>>,
}

impl Workspace {
    /// An empty workspace whose passes run on `backend`.
    pub fn on(backend: &'static dyn Backend) -> Self {
        Workspace {
            backend,
            h: Vec::new(),
            x: Vec::new(),
            y: Vec::new(),
            attention: AttentionBuffers::default(),
            gate: Vec::new(),
            up: Vec::new(),
            moe: MoeBuffers::default(),
            ropes: Vec::new(),
            selected: Vec::new(),
            aux_layers: Vec::new(),
            aux: Vec::new(),
        }
    }
}

/// A workspace on the process's backend ([`vllm_rs_kernels::backend::default`]).
impl Default for Workspace {
    fn default() -> Self {
        Workspace::on(vllm_rs_kernels::backend::default())
    }
}

pub trait Model: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// Runs every row of the batch through the model, writing each row's K/V into `kv`;
    /// returns the final (normed) hidden states, `tokens × hidden_size`, which live in `ws`.
    fn forward<'w>(
        &self,
        input: ForwardInput,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        ws: &'w mut Workspace,
    ) -> &'w [f32];

    /// The token embedding table (a draft head without its own shares it).
    fn embedding(&self) -> Option<&Weight> {
        None
    }

    /// The output head (an EAGLE-1 head shares it). [`Model::compute_logits`] must be an
    /// increasing function of each `hidden · row` (a positive scale, a soft-cap), so that a
    /// greedy draft may score a part of the head alone (the engine's `DraftVocab`).
    fn lm_head(&self) -> Option<&Weight> {
        None
    }

    /// Logits of `hidden` (`rows × hidden_size`, final hidden states) into `logits`,
    /// `[rows × vocab_size]` (resized, reusing its allocation).
    fn compute_logits(&self, be: &dyn Backend, hidden: &[f32], logits: &mut Vec<f32>);

    /// [`Model::forward`] from the batch's token ids, then the logits of the rows in
    /// `batch.logits_indices` into `logits`, `[logits_indices.len() × vocab_size]`.
    fn forward_with(&self, batch: &ForwardBatch, kv: &mut KvCache, ws: &mut Workspace, logits: &mut Vec<f32>) {
        self.forward(ForwardInput::TokenIds(batch.input_ids), batch, kv, ws);
        let Workspace { backend, x, selected, .. } = ws;
        gather_rows(x, self.info().hidden_size, batch.logits_indices, selected);
        self.compute_logits(*backend, selected, logits);
    }

    /// [`Model::forward_with`] on this thread's workspace: the engine thread calls it every
    /// step, so the buffers keep their allocations across steps without a lock in the model.
    /// (A caller that owns a [`Workspace`] calls `forward_with` instead.)
    fn forward_into(&self, batch: &ForwardBatch, kv: &mut KvCache, logits: &mut Vec<f32>) {
        WORKSPACE.with_borrow_mut(|ws| self.forward_with(batch, kv, ws, logits));
    }

    /// [`Model::forward_into`] a new vector.
    fn logits(&self, batch: &ForwardBatch, kv: &mut KvCache) -> Vec<f32> {
        let mut logits = Vec::new();
        self.forward_into(batch, kv, &mut logits);
        logits
    }
}

thread_local! {
    static WORKSPACE: RefCell<Workspace> = RefCell::default();
}
