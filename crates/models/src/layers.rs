//! Building blocks shared by the architectures: linear, RMSNorm, embedding, rotary tables,
//! attention over the paged cache (the feed-forward blocks are in `mlp.rs`, norms in `norm.rs`).

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::error::Result;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::attention::{AttentionParams, KvCache};
use vllm_rs_kernels::ops::RopeTable;
use vllm_rs_kernels::{Backend, Weight};

/// `y = x Wᵀ (+ b)` over any weight format.
pub struct Linear {
    pub weight: Weight,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    /// Loads `{prefix}.weight` (`out × in`) and, if `bias`, `{prefix}.bias`.
    pub fn load(ck: &Checkpoint, prefix: &str, out: usize, inp: usize, bias: bool) -> Result<Self> {
        let weight = ck.matrix(&format!("{prefix}.weight"), out, inp)?.for_matmul();
        let bias = if bias { Some(ck.vector(&format!("{prefix}.bias"), out)?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn out_features(&self) -> usize {
        self.weight.rows
    }

    /// `x` is `m × in`; writes `m × out` into `y` (resized; its allocation is reused).
    pub fn forward(&self, be: &dyn Backend, x: &[f32], m: usize, y: &mut Vec<f32>) {
        Linear::forward_many(be, [self], x, m, [y]);
    }

    /// [`Linear::forward`] of the same `x` through several layers (q/k/v, gate/up) at once:
    /// one quantization of `x` and, where the weights allow, one kernel job.
    pub fn forward_many<const N: usize>(
        be: &dyn Backend,
        ls: [&Linear; N],
        x: &[f32],
        m: usize,
        ys: [&mut Vec<f32>; N],
    ) {
        let mut outs = ys;
        Linear::matmul_many(be, ls, x, m, outs.each_mut().map(|y| &mut **y));
        for (l, y) in ls.iter().zip(outs) {
            l.add_bias(be, y);
        }
    }

    /// [`Linear::forward_many`] without the biases (for blocks that add them later, with their
    /// other element-wise steps).
    pub fn matmul_many<const N: usize>(
        be: &dyn Backend,
        ls: [&Linear; N],
        x: &[f32],
        m: usize,
        ys: [&mut Vec<f32>; N],
    ) {
        let mut outs = ys;
        for (l, y) in ls.iter().zip(outs.iter_mut()) {
            y.resize(m * l.weight.rows, 0.0);
        }
        let mut slices = outs.map(|y| y.as_mut_slice());
        be.matmul_many(x, m, &ls.map(|l| &l.weight), &mut slices);
    }

    /// Adds the bias, if any, to every row of `y`.
    pub fn add_bias(&self, be: &dyn Backend, y: &mut [f32]) {
        if let Some(b) = &self.bias {
            be.add_rows(y, b);
        }
    }
}

/// RMSNorm with weights `offset + w` (`offset` 1 for Gemma checkpoints that store `w`).
pub struct RmsNorm {
    pub weight: Vec<f32>,
    pub eps: f32,
    pub offset: f32,
}

impl RmsNorm {
    pub fn load(ck: &Checkpoint, name: &str, dim: usize, eps: f32, offset: f32) -> Result<Self> {
        Ok(RmsNorm { weight: ck.vector(&format!("{name}.weight"), dim)?, eps, offset })
    }

    /// Normalizes every `weight.len()`-sized row in place.
    pub fn forward(&self, be: &dyn Backend, x: &mut [f32]) {
        be.rms_norm_rows(x, self.weight.len(), &self.weight, self.eps, self.offset);
    }

    /// The residual add and this norm: `h += y`, then `x` = `h` normalized.
    pub fn add_forward(&self, be: &dyn Backend, h: &mut [f32], y: &[f32], x: &mut Vec<f32>) {
        be.add_rms_norm_rows(h, y, x, self.weight.len(), &self.weight, self.eps, self.offset);
    }
}

/// Token embedding table (any weight format; rows are dequantized on lookup).
pub struct Embedding {
    pub weight: Weight,
}

impl Embedding {
    /// Writes the embeddings of `ids` into `out`; `scale` multiplies every embedding (Gemma's
    /// `sqrt(hidden_size)`), 1 for none.
    pub fn forward(&self, be: &dyn Backend, ids: &[u32], scale: f32, out: &mut Vec<f32>) {
        be.embedding(&self.weight, ids, scale, out);
    }
}

/// Self-attention over the paged KV cache, with optional QKV bias and per-head q/k RMSNorm.
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    pub params: AttentionParams,
    /// Whether RoPE pairs are interleaved (GGUF llama Q/K layout).
    pub rope_interleaved: bool,
    /// `q_proj` also gives a gate per head (`[q_h, gate_h]` per head, Qwen3-Next/3.5): the
    /// attention output is multiplied by `σ(gate)` before `o_proj`.
    pub output_gate: bool,
}

impl Attention {
    /// What this layer caches per request.
    pub fn kv_cache_spec(&self) -> KvCacheSpec {
        let (num_kv_heads, head_dim) = (self.params.num_kv_heads, self.params.head_dim);
        match self.params.sliding_window {
            Some(window) => KvCacheSpec::SlidingWindow { num_kv_heads, head_dim, window },
            None => KvCacheSpec::FullAttention { num_kv_heads, head_dim },
        }
    }

    /// `x` is the normed hidden state (`tokens × hidden`); writes `tokens × hidden` into `out`.
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
        let n = batch.num_tokens();
        let hd = self.params.head_dim;
        let AttentionBuffers { q, k, v, attn, gate, .. } = ws;
        Linear::forward_many(be, [&self.q_proj, &self.k_proj, &self.v_proj], x, n, [q, k, v]);
        if self.output_gate {
            split_gate(q, gate, hd);
        }
        if let Some(norm) = &self.q_norm {
            norm.forward(be, q);
        }
        if let Some(norm) = &self.k_norm {
            norm.forward(be, k);
        }
        let (qr, kr) = (self.params.num_heads * hd, self.params.num_kv_heads * hd);
        be.rope_rows(q, qr, hd, rope, self.rope_interleaved);
        be.rope_rows(k, kr, hd, rope, self.rope_interleaved);
        let group = &batch.groups[kv.group_of(layer)];
        be.write_kv(kv, layer, group.slot_mapping, k, v);
        attn.resize(n * qr, 0.0);
        be.paged_attention(q, kv, layer, &group.seqs, &self.params, attn);
        if self.output_gate {
            be.mul_sigmoid(attn, gate);
        }
        self.o_proj.forward(be, attn, n, out);
    }
}

/// Splits `[q_h, gate_h]` pairs of `hd` values out of `q`, which keeps the queries.
fn split_gate(q: &mut Vec<f32>, gate: &mut Vec<f32>, hd: usize) {
    gate.clear();
    let mut w = 0;
    for pair in 0..q.len() / (2 * hd) {
        let r = 2 * hd * pair;
        gate.extend_from_slice(&q[r + hd..r + 2 * hd]);
        q.copy_within(r..r + hd, w);
        w += hd;
    }
    q.truncate(w);
}

/// Reusable intermediate buffers of one attention layer.
#[derive(Default)]
pub struct AttentionBuffers {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub attn: Vec<f32>,
    /// The output gate of gated attention.
    pub gate: Vec<f32>,
    /// The per-head projections of multi-head latent attention.
    pub mla: crate::mla::MlaBuffers,
    /// Gated delta-net scratch.
    pub gdn: crate::gated_deltanet::GdnBuffers,
    /// Short-convolution scratch.
    pub short_conv: crate::short_conv::ShortConvBuffers,
    /// Mamba-2 scratch.
    pub mamba2: crate::mamba2::Mamba2Buffers,
    /// Kimi delta attention scratch.
    pub kda: crate::kda::KdaBuffers,
    /// Falcon-H1's parallel mixer scratch.
    pub parallel: crate::falcon_h1::ParallelBuffers,
}

/// Copies the rows of `hidden` that need logits into `out`.
pub fn gather_rows(hidden: &[f32], dim: usize, rows: &[usize], out: &mut Vec<f32>) {
    out.clear();
    for &r in rows {
        out.extend_from_slice(&hidden[r * dim..(r + 1) * dim]);
    }
}
