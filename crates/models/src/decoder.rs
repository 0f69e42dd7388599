//! The one decoder-only model: embedding → layers (attention + feed-forward + norms, chosen per
//! layer) → final norm → `lm_head`. Every architecture is an instance built by its own file.
//!
//! A layer runs pre-norm: `h += [post_attn_norm](attn(input_norm(h)))`, then
//! `h += [post_mlp_norm](mlp(pre_mlp_norm(h)))`; the optional norms are Gemma's "sandwich" norms.
//! Each residual add is fused with the norm that follows it (row by row while in cache).

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::error::Result;
use crate::gated_deltanet::GatedDeltaNet;
use crate::layers::{Attention, AttentionBuffers, Embedding, Linear, RmsNorm};
use crate::mla::MlaAttention;
use crate::mlp::FeedForward;
use crate::model::{ForwardInput, Model, ModelInfo, Workspace};
use crate::norm::Norm;
use serde_json::Value;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::attention::{AttentionParams, KvCache};
use vllm_rs_kernels::ops::RopeTable;
use vllm_rs_kernels::{Backend, Weight};

/// A layer's token mixer: attention over paged K/V, or multi-head latent attention over the
/// compressed latents.
pub enum Mixer {
    Attention(Attention),
    Mla(MlaAttention),
    /// Gated delta-net linear attention over a recurrent state.
    GatedDeltaNet(GatedDeltaNet),
    /// LFM2's gated short convolution over a convolution window.
    ShortConv(crate::short_conv::ShortConv),
    /// Mamba-2's selective state space.
    Mamba2(crate::mamba2::Mamba2),
    /// Kimi delta attention: gated delta-net with a decay per key channel.
    Kda(Box<crate::kda::KimiDeltaAttention>),
    /// Mamba-2 and attention side by side on the same input (Falcon-H1): two cache layers.
    Parallel(Box<crate::falcon_h1::ParallelMixer>),
    /// The block has no mixer half (Nemotron-H's MLP blocks).
    None,
}

impl From<Attention> for Mixer {
    fn from(a: Attention) -> Self {
        Mixer::Attention(a)
    }
}

impl Mixer {
    /// What this layer caches per request: one cache layer each, but two for a parallel mixer.
    pub fn kv_cache_specs(&self) -> Vec<KvCacheSpec> {
        match self {
            Mixer::Attention(a) => vec![a.kv_cache_spec()],
            Mixer::Mla(a) => vec![a.kv_cache_spec()],
            Mixer::GatedDeltaNet(a) => vec![a.kv_cache_spec()],
            Mixer::ShortConv(a) => vec![a.kv_cache_spec()],
            Mixer::Mamba2(a) => vec![a.kv_cache_spec()],
            Mixer::Kda(a) => vec![a.kv_cache_spec()],
            Mixer::Parallel(p) => p.kv_cache_specs(),
            // Nothing cached: an empty recurrent state, which takes no memory.
            Mixer::None => vec![KvCacheSpec::Recurrent { state_elements: 0 }],
        }
    }

    /// How many cache layers this mixer uses (the length of [`Mixer::kv_cache_specs`], without
    /// building them: the decoder asks on every forward).
    pub fn cache_layers(&self) -> usize {
        if matches!(self, Mixer::Parallel(_)) { 2 } else { 1 }
    }

    /// `x` is the normed hidden state (`tokens × hidden`); writes `tokens × hidden` into `out`.
    /// `layer` is the mixer's (first) cache layer.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        batch: &ForwardBatch,
        rope: &RopeTable,
        kv: &mut KvCache,
        layer: usize,
        ws: &mut AttentionBuffers,
        out: &mut Vec<f32>,
    ) {
        match self {
            Mixer::Attention(a) => a.forward(be, x, batch, rope, kv, layer, ws, out),
            Mixer::Mla(a) => a.forward(be, x, batch, rope, kv, layer, ws, out),
            Mixer::GatedDeltaNet(a) => a.forward(be, x, batch, kv, layer, &mut ws.gdn, out),
            Mixer::ShortConv(a) => a.forward(be, x, batch, kv, layer, &mut ws.short_conv, out),
            Mixer::Mamba2(a) => a.forward(be, x, batch, kv, layer, &mut ws.mamba2, out),
            Mixer::Kda(a) => a.forward(be, x, batch, kv, layer, &mut ws.kda, out),
            Mixer::Parallel(p) => p.forward(be, x, batch, rope, kv, layer, ws, out),
            Mixer::None => unreachable!("the decoder skips absent halves"),
        }
    }
}

pub struct DecoderLayer {
    pub input_norm: Norm,
    pub self_attn: Mixer,
    /// Applied to the attention output before the residual add (Gemma).
    pub post_attn_norm: Option<Norm>,
    pub pre_mlp_norm: Norm,
    pub mlp: FeedForward,
    /// Applied to the MLP output before the residual add (Gemma).
    pub post_mlp_norm: Option<Norm>,
    /// Which of the model's rotary tables this layer's attention uses.
    pub rope: usize,
}

impl DecoderLayer {
    /// Whether the layer has its mixer half (`mixer`) or its feed-forward half.
    fn has(&self, mixer: bool) -> bool {
        if mixer { !matches!(self.self_attn, Mixer::None) } else { !matches!(self.mlp, FeedForward::None) }
    }

    /// The norm before a half.
    fn norm(&self, mixer: bool) -> &Norm {
        if mixer { &self.input_norm } else { &self.pre_mlp_norm }
    }
}

pub struct DecoderModel {
    pub info: ModelInfo,
    pub embed_tokens: Embedding,
    /// Multiplies every token embedding (Gemma's `sqrt(hidden_size)`), 1 for none.
    pub embed_scale: f32,
    /// Learned absolute positions added to the input embeddings (GPT-2, OPT).
    pub embed_positions: Option<PositionEmbedding>,
    pub layers: Vec<DecoderLayer>,
    pub norm: Norm,
    pub lm_head: Weight,
    /// `tanh` soft-capping of the logits (Gemma 2), if set.
    pub final_logit_softcap: Option<f32>,
    /// Multiplies the logits (Granite's `1 / logits_scaling`), 1 for none.
    pub logit_scale: f32,
    /// Inverse frequencies of each rotary table the layers index. A model without rotary
    /// embeddings has one empty table: zero frequency pairs rotate nothing.
    pub rope_inv_freqs: Vec<Vec<f32>>,
}

/// A learned table of absolute position embeddings; position `p` reads row `p + offset`
/// (OPT keeps two unused rows in front).
pub struct PositionEmbedding {
    pub weight: Weight,
    pub offset: usize,
}

impl PositionEmbedding {
    /// `h[t] += weight[positions[t] + offset]`, using `rows` as scratch.
    fn add(&self, be: &dyn Backend, positions: &[u32], h: &mut [f32], rows: &mut Vec<f32>) {
        let ids: Vec<u32> = positions.iter().map(|&p| p + self.offset as u32).collect();
        be.embedding(&self.weight, &ids, 1.0, rows);
        be.add_assign(h, rows);
    }
}

impl DecoderModel {
    /// Writes the embeddings of `ids` into `out` (`ids.len() × hidden_size`).
    pub fn embed_input_ids(&self, be: &dyn Backend, ids: &[u32], out: &mut Vec<f32>) {
        self.embed_tokens.forward(be, ids, self.embed_scale, out);
    }
}

impl Model for DecoderModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embedding(&self) -> Option<&Weight> {
        Some(&self.embed_tokens.weight)
    }

    fn lm_head(&self) -> Option<&Weight> {
        Some(&self.lm_head)
    }

    fn forward<'w>(
        &self,
        input: ForwardInput,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        ws: &'w mut Workspace,
    ) -> &'w [f32] {
        let n = batch.num_tokens();
        let be = ws.backend;
        match input {
            ForwardInput::TokenIds(ids) => self.embed_input_ids(be, ids, &mut ws.h),
            ForwardInput::Embeddings(e) => {
                ws.h.clear();
                ws.h.extend_from_slice(e);
            }
        }
        assert_eq!(ws.h.len(), n * self.info.hidden_size, "one input row per batch token");
        if let Some(pe) = &self.embed_positions {
            pe.add(be, batch.positions, &mut ws.h, &mut ws.y);
        }
        ws.ropes.resize_with(self.rope_inv_freqs.len(), RopeTable::default);
        for (table, inv_freq) in ws.ropes.iter_mut().zip(&self.rope_inv_freqs) {
            table.fill(inv_freq, batch.positions);
        }
        // The blocks' halves in order, each `h += half(norm(h))`; a layer may lack one half
        // (Nemotron-H). Each residual add is fused with the norm that follows it.
        let halves: Vec<(usize, bool)> = (0..self.layers.len())
            .flat_map(|i| [(i, true), (i, false)])
            .filter(|&(i, mixer)| self.layers[i].has(mixer))
            .collect();
        let norm_of = |k: usize| halves.get(k).map_or(&self.norm, |&(i, mixer)| self.layers[i].norm(mixer));
        let cache_layers = first_cache_layers(&self.layers);
        ws.x.clone_from(&ws.h);
        norm_of(0).forward(be, &mut ws.x);
        ws.aux.resize_with(ws.aux_layers.len(), Vec::new);
        for (k, &(i, mixer)) in halves.iter().enumerate() {
            let layer = &self.layers[i];
            if (k == 0 || halves[k - 1].0 != i)
                && let Some(a) = ws.aux_layers.iter().position(|&l| l == i)
            {
                ws.aux[a].clone_from(&ws.h);
            }
            if mixer {
                let rope = &ws.ropes[layer.rope];
                let c = cache_layers[i];
                layer.self_attn.forward(be, &ws.x, batch, rope, kv, c, &mut ws.attention, &mut ws.y);
                if let Some(norm) = &layer.post_attn_norm {
                    norm.forward(be, &mut ws.y);
                }
            } else {
                layer.mlp.forward(be, &ws.x, n, [&mut ws.gate, &mut ws.up], &mut ws.moe, &mut ws.y);
                if let Some(norm) = &layer.post_mlp_norm {
                    norm.forward(be, &mut ws.y);
                }
            }
            norm_of(k + 1).add_forward(be, &mut ws.h, &ws.y, &mut ws.x);
        }
        &ws.x
    }

    fn compute_logits(&self, be: &dyn Backend, hidden: &[f32], logits: &mut Vec<f32>) {
        let rows = hidden.len() / self.info.hidden_size;
        // Every value is overwritten: only new capacity is zeroed.
        logits.resize(rows * self.info.vocab_size, 0.0);
        be.matmul(hidden, rows, &self.lm_head, logits);
        if self.logit_scale != 1.0 {
            be.scale(logits, self.logit_scale);
        }
        if let Some(cap) = self.final_logit_softcap {
            be.softcap(logits, cap);
        }
    }
}

/// A decoder around `layers` with unscaled token embeddings `embed` (no learned positions, no
/// logit soft-capping), the final norm `norm` and the (optionally tied) head.
pub fn plain_decoder(
    ck: &Checkpoint,
    config: &Value,
    c: &CommonConfig,
    (embed, layers): (Weight, Vec<DecoderLayer>),
    norm: Norm,
    rope_inv_freqs: Vec<Vec<f32>>,
) -> Result<DecoderModel> {
    Ok(DecoderModel {
        info: model_info(config, c, &layers)?,
        lm_head: lm_head(ck, c, &embed)?,
        embed_tokens: Embedding { weight: embed },
        embed_scale: 1.0,
        embed_positions: None,
        layers,
        norm,
        final_logit_softcap: None,
        logit_scale: 1.0,
        rope_inv_freqs,
    })
}

/// The output head: `lm_head.weight`, or the embedding table when tied (and no separate head
/// is stored; some tied checkpoints store one anyway).
pub fn lm_head(ck: &Checkpoint, c: &CommonConfig, embed: &Weight) -> Result<Weight> {
    let w = if c.tie_word_embeddings && !ck.contains("lm_head.weight") {
        embed.clone()
    } else {
        ck.matrix("lm_head.weight", c.vocab_size, c.hidden_size)?
    };
    Ok(w.for_matmul())
}

/// The [`ModelInfo`] of a decoder whose layers are built.
pub fn model_info(config: &Value, c: &CommonConfig, layers: &[DecoderLayer]) -> Result<ModelInfo> {
    Ok(ModelInfo {
        architecture: crate::config::architecture(config)?,
        num_layers: layers.len(),
        num_kv_heads: c.num_kv_heads(),
        head_dim: c.head_dim(),
        hidden_size: c.hidden_size,
        vocab_size: c.vocab_size,
        max_position_embeddings: c.max_position_embeddings,
        kv_cache_specs: kv_cache_specs(layers),
    })
}

/// The cache layers of `layers`, in order (a parallel mixer has two).
pub fn kv_cache_specs(layers: &[DecoderLayer]) -> Vec<KvCacheSpec> {
    layers.iter().flat_map(|l| l.self_attn.kv_cache_specs()).collect()
}

/// The first cache layer of each of `layers`.
fn first_cache_layers(layers: &[DecoderLayer]) -> Vec<usize> {
    let mut next = 0;
    layers
        .iter()
        .map(|l| {
            let first = next;
            next += l.self_attn.cache_layers();
            first
        })
        .collect()
}

/// Causal attention over every earlier position, scaled by `1/sqrt(head_dim)`, uncapped.
pub fn full_attention(num_heads: usize, num_kv_heads: usize, head_dim: usize) -> AttentionParams {
    let scale = 1.0 / (head_dim as f32).sqrt();
    AttentionParams { num_heads, num_kv_heads, head_dim, scale, sliding_window: None, softcap: None, sinks: None }
}

/// An attention layer shaped by `p` from its `{prefix}.{q,k,v,o}_proj` projections
/// (`bias`: whether q/k/v and o have biases) and optional per-head q/k norms.
pub fn load_attention(
    ck: &Checkpoint,
    prefix: &str,
    hidden: usize,
    params: AttentionParams,
    bias: (bool, bool),
    qk_norms: [Option<RmsNorm>; 2],
    rope_interleaved: bool,
) -> Result<Attention> {
    let mut a = load_attention_gated(ck, prefix, hidden, params, bias, qk_norms, false)?;
    a.rope_interleaved = rope_interleaved;
    Ok(a)
}

/// [`load_attention`] where `output_gate` makes `q_proj` twice as wide: a gate per head beside
/// each query head (Qwen3-Next, Qwen3.5).
pub fn load_attention_gated(
    ck: &Checkpoint,
    prefix: &str,
    hidden: usize,
    params: AttentionParams,
    (qkv_bias, o_bias): (bool, bool),
    [q_norm, k_norm]: [Option<RmsNorm>; 2],
    output_gate: bool,
) -> Result<Attention> {
    let (q, kv) = (params.num_heads * params.head_dim, params.num_kv_heads * params.head_dim);
    let q_rows = if output_gate { 2 * q } else { q };
    Ok(Attention {
        q_proj: Linear::load(ck, &format!("{prefix}.q_proj"), q_rows, hidden, qkv_bias)?,
        k_proj: Linear::load(ck, &format!("{prefix}.k_proj"), kv, hidden, qkv_bias)?,
        v_proj: Linear::load(ck, &format!("{prefix}.v_proj"), kv, hidden, qkv_bias)?,
        o_proj: Linear::load(ck, &format!("{prefix}.o_proj"), hidden, q, o_bias)?,
        q_norm,
        k_norm,
        params,
        rope_interleaved: false,
        output_gate,
    })
}
