//! Multi-token prediction (MTP): the extra layer some checkpoints ship beside the model
//! (DeepSeek-V3's `model.layers.{num_hidden_layers}`, Qwen3.5's and Qwen3-Next's `mtp.*`),
//! which guesses the token after next from the model's final hidden state at a position and the
//! embedding of the next token. It serves as a speculative-decoding draft head
//! (`--speculative-config '{"method": "mtp", ...}'`), as in vLLM's `deepseek_mtp.py` and
//! `qwen3_5_mtp.py`; an EAGLE-1 head has the same form (`eagle.rs`):
//!
//! `x = eh_proj([enorm(embed(token p+1)), hnorm(hidden p)])`, one decoder layer over `x` with
//! its own KV cache, then the head's norm and the head. Chained drafts feed the layer's own
//! output hidden state back in place of the model's.

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::draft_head::{DraftHead, concat_rows};
use crate::error::{Error, Result};
use crate::layers::{Linear, gather_rows};
use crate::model::{ForwardInput, Model, ModelInfo, Workspace};
use crate::norm::Norm;
use serde_json::Value;
use std::path::Path;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;

/// Which hidden state a chained draft step takes from the step before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chain {
    /// The layer's output before the head's norm (DeepSeek).
    PreNorm,
    /// The normed output the head reads.
    Normed,
}

pub struct Mtp {
    pub enorm: Norm,
    pub hnorm: Norm,
    /// `hidden × 2·hidden`: the normed embedding and the normed hidden state, side by side.
    pub eh_proj: Linear,
    /// One decoder layer, with the MTP's embedding table, the head's norm as its final norm
    /// and the head as its `lm_head`.
    pub block: DecoderModel,
    /// Embeddings at position 0 are zeroed (DeepSeek: nothing precedes them).
    pub mask_position_0: bool,
    pub chain: Chain,
}

/// Builds an MTP layer from a checkpoint and its config.
type Loader = fn(&Checkpoint, &Value) -> Result<Mtp>;

/// The MTP loaders, by HF class.
const LOADERS: &[(&str, Loader)] = &[
    ("DeepseekV3ForCausalLM", crate::deepseek_v2::load_deepseek_v3_mtp),
    ("Qwen3_5ForCausalLM", crate::qwen3_5::load_mtp),
    ("Qwen3_5MoeForCausalLM", crate::qwen3_5_moe::load_mtp),
    ("Qwen3NextForCausalLM", crate::qwen3_next::load_mtp),
];

/// Loads the MTP layer of the HF checkpoint folder `path`.
pub fn load(path: &Path) -> Result<Mtp> {
    if !path.is_dir() {
        return Err(Error::file(path, "MTP layers are read from HF safetensors folders only (GGUF: not yet)"));
    }
    let (config, arch, ck) = crate::open_hf_dir(path)?;
    let Some((_, loader)) = LOADERS.iter().find(|(class, _)| *class == arch) else {
        let with: Vec<&str> = LOADERS.iter().map(|(c, _)| *c).collect();
        return Err(Error::msg(format!(
            "{arch} has no MTP layers we can run; MTP is implemented for {}",
            with.join(", ")
        )));
    };
    loader(&ck, &config).map_err(|e| crate::in_file(e, &path.join("config.json")))
}

impl DraftHead for Mtp {
    fn info(&self) -> &ModelInfo {
        self.block.info()
    }

    /// The target's final (normed) hidden states.
    fn target_hidden(&self, _: &dyn Backend, target: &Workspace, out: &mut Vec<f32>) {
        out.clone_from(&target.x);
    }

    /// Afterwards `ws.x` holds what the head reads.
    fn forward(&self, batch: &ForwardBatch, hidden: &[f32], kv: &mut KvCache, ws: &mut Workspace) {
        let be = ws.backend;
        let dim = self.info().hidden_size;
        let (e, h) = (&mut ws.gate, &mut ws.up);
        self.block.embed_input_ids(be, batch.input_ids, e);
        if self.mask_position_0 {
            for (row, &p) in e.chunks_exact_mut(dim).zip(batch.positions) {
                if p == 0 {
                    row.fill(0.0);
                }
            }
        }
        self.enorm.forward(be, e);
        h.clear();
        h.extend_from_slice(hidden);
        self.hnorm.forward(be, h);
        let cat = concat_rows(&[e, h], dim);
        let mut x = std::mem::take(&mut ws.selected);
        self.eh_proj.forward(be, &cat, batch.num_tokens(), &mut x);
        self.block.forward(ForwardInput::Embeddings(&x), batch, kv, ws);
        ws.selected = x;
    }

    fn chain_hidden<'w>(&self, ws: &'w Workspace) -> &'w [f32] {
        match self.chain {
            Chain::PreNorm => &ws.h,
            Chain::Normed => &ws.x,
        }
    }

    fn argmax(&self, ws: &Workspace, rows: &[usize], logits: &mut Vec<f32>) -> Vec<u32> {
        let mut normed = Vec::new();
        gather_rows(&ws.x, self.info().hidden_size, rows, &mut normed);
        self.block.compute_logits(ws.backend, &normed, logits);
        let mut next = Vec::new();
        ws.backend.argmax_rows(logits, self.info().vocab_size, &mut next);
        next
    }
}
