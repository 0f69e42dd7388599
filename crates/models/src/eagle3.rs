//! EAGLE-3 draft heads (`LlamaForCausalLMEagle3` folders, `--speculative-config '{"method":
//! "eagle3", "model": HEAD, ...}'`), as vLLM's `llama_eagle3.py` runs them.
//!
//! The head reads the residual stream entering three target layers (`eagle_aux_hidden_state_layer_ids`,
//! default `[2, L/2, L-3]`), concatenated and projected by `fc` to its hidden size. One Llama
//! layer whose attention reads `2·hidden`: `[input_layernorm(embed(token p+1)),
//! hidden_norm(hidden p)]`, with the un-normed hidden state as the residual (normed first when
//! `norm_before_residual`); then `post_attention_layernorm`, the MLP, `norm` and `lm_head` over
//! the draft vocabulary, whose ids map to the target's by `d2t` offsets. Chained steps take the
//! pre-norm output. The embedding table is the target's unless the folder has one.

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::full_attention;
use crate::draft_head::{DraftHead, concat_rows};
use crate::error::{Error, Result};
use crate::layers::{Attention, Embedding, Linear, RmsNorm, gather_rows};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::model::{Model, ModelInfo, Workspace};
use serde_json::Value;
use std::path::Path;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::ops::RopeTable;
use vllm_rs_kernels::{Backend, Weight};

/// The HF classes of EAGLE-3 heads.
pub const CLASSES: [&str; 2] = ["LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"];

pub struct Eagle3 {
    info: ModelInfo,
    aux_layers: Vec<usize>,
    /// `hidden × (3 · target hidden)`.
    fc: Linear,
    embed: Embedding,
    input_norm: RmsNorm,
    hidden_norm: RmsNorm,
    norm_before_residual: bool,
    attn: Attention,
    post_attn_norm: RmsNorm,
    mlp: FeedForward,
    norm: RmsNorm,
    /// `draft vocabulary × hidden`.
    lm_head: Weight,
    /// The target's id of each draft-vocabulary id.
    draft_to_target: Vec<u32>,
    rope_inv_freq: Vec<f32>,
}

/// Loads the EAGLE-3 head in folder `path` for `target`.
pub fn load(path: &Path, target: &dyn Model) -> Result<Eagle3> {
    let config = crate::config::read_config(path)?;
    let arch = crate::config::architecture(&config)?;
    if !CLASSES.contains(&arch.as_str()) {
        return Err(Error::file(
            &path.join("config.json"),
            format!("{arch} is not an EAGLE-3 head ({}); method eagle3 needs one", CLASSES.join(", ")),
        ));
    }
    let ck = Checkpoint::from_safetensors_dir(path)?;
    build(&ck, &config, target).map_err(|e| crate::in_file(e, &path.join("config.json")))
}

fn build(ck: &Checkpoint, config: &Value, target: &dyn Model) -> Result<Eagle3> {
    let mut c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    // Llama 3.1 heads carry their target's `llama3` rotary scaling.
    let scaling = c.rope_scaling.take().filter(|s| !s.is_null());
    c.validate()?;
    let t = target.info();
    let (hidden, vocab) = (c.hidden_size, t.vocab_size);
    if c.vocab_size != vocab {
        return Err(Error::msg(format!(
            "the head's vocabulary ({} tokens) is not the target's ({vocab}, {}): use the head made for this model",
            c.vocab_size, t.architecture
        )));
    }
    let target_hidden = config.get("target_hidden_size").and_then(Value::as_u64).map_or(hidden, |v| v as usize);
    if target_hidden != t.hidden_size {
        return Err(Error::msg(format!(
            "the head reads hidden states of {target_hidden} values, the target's have {}",
            t.hidden_size
        )));
    }
    let aux_layers = aux_layers(config, t.num_layers)?;
    let draft_vocab = config.get("draft_vocab_size").and_then(Value::as_u64).map_or(vocab, |v| v as usize);
    // Tensor names: `midlayer.*` (the EAGLE repo's) or `layers.0.*`, with or without `model.`.
    let find = |names: &[String]| names.iter().find(|n| ck.contains(&format!("{n}.weight")) || ck.contains(n)).cloned();
    let top = |name: &str| find(&[name.to_string(), format!("model.{name}")]).unwrap_or_else(|| name.to_string());
    let layer = find(&[
        "midlayer.input_layernorm".into(),
        "layers.0.input_layernorm".into(),
        "model.layers.0.input_layernorm".into(),
    ])
    .map(|n| n.trim_end_matches(".input_layernorm").to_string())
    .ok_or_else(|| Error::msg("no head layer (midlayer.* or layers.0.*) in the checkpoint"))?;
    let eps = c.rms_norm_eps;
    let norm = |name: &str| RmsNorm::load(ck, name, hidden, eps, 0.0);
    let embed = match ck.contains(&format!("{}.weight", top("embed_tokens"))) {
        true => ck.matrix(&format!("{}.weight", top("embed_tokens")), vocab, hidden)?,
        false => target.embedding().cloned().ok_or_else(|| Error::msg("the target has no embedding table to share"))?,
    };
    if embed.cols != hidden {
        return Err(Error::msg(format!("the target's embeddings have {} values, the head {hidden}", embed.cols)));
    }
    let hd = c.head_dim();
    let params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
    let bias = config.get("attention_bias").and_then(Value::as_bool).unwrap_or(false);
    let a = format!("{layer}.self_attn");
    let (q, kv) = (c.num_attention_heads * hd, c.num_kv_heads() * hd);
    // Queries, keys and values from `[embedding, hidden]`, twice the hidden size.
    let attn = Attention {
        q_proj: Linear::load(ck, &format!("{a}.q_proj"), q, 2 * hidden, bias)?,
        k_proj: Linear::load(ck, &format!("{a}.k_proj"), kv, 2 * hidden, bias)?,
        v_proj: Linear::load(ck, &format!("{a}.v_proj"), kv, 2 * hidden, bias)?,
        o_proj: Linear::load(ck, &format!("{a}.o_proj"), hidden, q, bias)?,
        q_norm: None,
        k_norm: None,
        params,
        rope_interleaved: false,
        output_gate: false,
    };
    let inter = c.intermediate_size;
    let mlp = FeedForward::Gated(GatedMlp::load(ck, &format!("{layer}.mlp"), hidden, inter, Activation::Silu)?);
    let draft_to_target = match ck.contains("d2t") {
        true => ck
            .vector("d2t", draft_vocab)?
            .iter()
            .enumerate()
            .map(|(i, &d)| u32::try_from(i as i64 + d as i64).ok().filter(|&t| (t as usize) < vocab))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| Error::msg("d2t maps a draft token outside the target's vocabulary"))?,
        false if draft_vocab == vocab => (0..vocab as u32).collect(),
        false => {
            return Err(Error::msg(format!("draft_vocab_size is {draft_vocab} but the checkpoint has no d2t map")));
        }
    };
    let info = ModelInfo {
        architecture: CLASSES[0].to_string(),
        num_layers: 1,
        num_kv_heads: c.num_kv_heads(),
        head_dim: hd,
        hidden_size: hidden,
        vocab_size: vocab,
        max_position_embeddings: c.max_position_embeddings,
        kv_cache_specs: vec![attn.kv_cache_spec()],
    };
    Ok(Eagle3 {
        info,
        fc: Linear::load(ck, &top("fc"), hidden, aux_layers.len() * target_hidden, false)?,
        aux_layers,
        embed: Embedding { weight: embed },
        input_norm: norm(&format!("{layer}.input_layernorm"))?,
        hidden_norm: norm(&format!("{layer}.hidden_norm"))?,
        norm_before_residual: config.get("norm_before_residual").and_then(Value::as_bool).unwrap_or(false),
        attn,
        post_attn_norm: norm(&format!("{layer}.post_attention_layernorm"))?,
        mlp,
        norm: norm(&top("norm"))?,
        lm_head: ck.matrix(&format!("{}.weight", top("lm_head")), draft_vocab, hidden)?.for_matmul(),
        draft_to_target,
        rope_inv_freq: crate::llama::rope_inv_freq(ck, &c, scaling.as_ref(), hd)?,
    })
}

/// The three target layers read: `eagle_config.eagle_aux_hidden_state_layer_ids`, else vLLM's
/// default `2, L/2, L-3`; ascending (the order they are concatenated in).
fn aux_layers(config: &Value, target_layers: usize) -> Result<Vec<usize>> {
    let ids: Vec<usize> = match config["eagle_config"]["eagle_aux_hidden_state_layer_ids"].as_array() {
        Some(ids) => ids.iter().map(|v| v.as_u64().map(|v| v as usize)).collect::<Option<_>>().unwrap_or_default(),
        None if target_layers >= 3 => vec![2.min(target_layers - 1), target_layers / 2, target_layers - 3],
        None => Vec::new(),
    };
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != 3 || sorted.iter().any(|&l| l >= target_layers) {
        return Err(Error::msg(format!(
            "the head reads target layers {ids:?}: it needs three distinct layers of the target's {target_layers}"
        )));
    }
    Ok(sorted)
}

impl DraftHead for Eagle3 {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn aux_layers(&self) -> &[usize] {
        &self.aux_layers
    }

    /// `fc` over the concatenated inputs of the aux layers.
    fn target_hidden(&self, be: &dyn Backend, target: &Workspace, out: &mut Vec<f32>) {
        let dim = self.info.hidden_size;
        let rows = target.aux.first().map_or(0, |a| a.len() / dim);
        let parts: Vec<&[f32]> = target.aux.iter().map(Vec::as_slice).collect();
        self.fc.forward(be, &concat_rows(&parts, dim), rows, out);
    }

    /// Afterwards `ws.h` holds the pre-norm output (what a chained step takes) and `ws.x` the
    /// normed one (what `lm_head` reads).
    fn forward(&self, batch: &ForwardBatch, hidden: &[f32], kv: &mut KvCache, ws: &mut Workspace) {
        let be = ws.backend;
        let (dim, n) = (self.info.hidden_size, batch.num_tokens());
        let mut embeds = Vec::new();
        self.embed.forward(be, batch.input_ids, 1.0, &mut embeds);
        self.input_norm.forward(be, &mut embeds);
        ws.h.clear();
        ws.h.extend_from_slice(hidden);
        let mut normed = ws.h.clone();
        self.hidden_norm.forward(be, &mut normed);
        if self.norm_before_residual {
            ws.h.clone_from(&normed);
        }
        let cat = concat_rows(&[&embeds, &normed], dim);
        ws.ropes.resize_with(1, RopeTable::default);
        ws.ropes[0].fill(&self.rope_inv_freq, batch.positions);
        self.attn.forward(be, &cat, batch, &ws.ropes[0], kv, 0, &mut ws.attention, &mut ws.y);
        self.post_attn_norm.add_forward(be, &mut ws.h, &ws.y, &mut ws.x);
        self.mlp.forward(be, &ws.x, n, [&mut ws.gate, &mut ws.up], &mut ws.moe, &mut ws.y);
        self.norm.add_forward(be, &mut ws.h, &ws.y, &mut ws.x);
    }

    fn chain_hidden<'w>(&self, ws: &'w Workspace) -> &'w [f32] {
        &ws.h
    }

    fn argmax(&self, ws: &Workspace, rows: &[usize], logits: &mut Vec<f32>) -> Vec<u32> {
        let mut normed = Vec::new();
        gather_rows(&ws.x, self.info.hidden_size, rows, &mut normed);
        logits.resize(rows.len() * self.lm_head.rows, 0.0);
        ws.backend.matmul(&normed, rows.len(), &self.lm_head, logits);
        let mut next = Vec::new();
        ws.backend.argmax_rows(logits, self.lm_head.rows, &mut next);
        next.iter().map(|&d| self.draft_to_target[d as usize]).collect()
    }
}
