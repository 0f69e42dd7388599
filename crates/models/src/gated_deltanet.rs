//! Gated delta-net linear attention (Qwen3-Next, Qwen3.5/3.6), after transformers'
//! `Qwen3_5GatedDeltaNet`: projections to q/k/v (through a causal depthwise convolution and
//! SiLU), the output gate `z`, and per value head a write strength `beta = σ(b)` and a decay
//! `exp(g)`, `g = −exp(A_log)·softplus(a + dt_bias)`; the gated delta rule over a fixed
//! `dk × dv` state per value head; an RMSNorm gated by `silu(z)` per head; `out_proj`.
//!
//! Each request keeps one state slot (its convolution window and its delta-rule states) in the
//! KV cache's recurrent group; a request whose step starts at position 0 starts from zeros
//! (a new request, or one preempted and recomputed).

use crate::batch::{ForwardBatch, SeqAttention};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::recurrent_state::{HeadLayout, convolve_requests, positive, scan_heads, softplus};
use serde_json::Value;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::ops::Activation;
use vllm_rs_kernels::{ops, pool};

/// Shapes of a gated delta-net layer (config keys `linear_*`).
#[derive(Clone, Copy, Debug)]
pub struct GdnDims {
    pub num_k_heads: usize,
    pub num_v_heads: usize,
    pub head_k_dim: usize,
    pub head_v_dim: usize,
    pub conv_kernel: usize,
    /// Value heads ordered `[k-head 0's first, k-head 1's first, …, k-head 0's second, …]`
    /// (llama.cpp's GGUF) instead of grouped by key head (transformers): value head `h` reads
    /// key head `h % num_k_heads` instead of `h / (num_v_heads / num_k_heads)`.
    pub tiled_v_heads: bool,
}

impl GdnDims {
    pub fn parse(config: &Value) -> Result<Self> {
        let get = |key: &str| positive(config, key);
        let d = GdnDims {
            num_k_heads: get("linear_num_key_heads")?,
            num_v_heads: get("linear_num_value_heads")?,
            head_k_dim: get("linear_key_head_dim")?,
            head_v_dim: get("linear_value_head_dim")?,
            conv_kernel: get("linear_conv_kernel_dim")?,
            tiled_v_heads: false,
        };
        if !d.num_v_heads.is_multiple_of(d.num_k_heads) || d.conv_kernel < 2 {
            return Err(Error::msg(format!(
                "config: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({}) and \
                 linear_conv_kernel_dim ({}) at least 2",
                d.num_v_heads, d.num_k_heads, d.conv_kernel
            )));
        }
        Ok(d)
    }

    fn key_dim(&self) -> usize {
        self.num_k_heads * self.head_k_dim
    }

    fn value_dim(&self) -> usize {
        self.num_v_heads * self.head_v_dim
    }

    /// Channels of the convolution: q, k and v side by side.
    fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    fn conv_state(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    /// The key head value head `h` reads.
    fn k_head(&self, h: usize) -> usize {
        if self.tiled_v_heads { h % self.num_k_heads } else { h / (self.num_v_heads / self.num_k_heads) }
    }

    fn head_state(&self) -> usize {
        self.head_k_dim * self.head_v_dim
    }

    /// One request's state: the convolution window, then a `dk × dv` matrix per value head.
    pub fn state_elements(&self) -> usize {
        self.conv_state() + self.num_v_heads * self.head_state()
    }
}

pub struct GatedDeltaNet {
    pub dims: GdnDims,
    pub in_proj_qkv: Linear,
    pub in_proj_z: Linear,
    pub in_proj_b: Linear,
    pub in_proj_a: Linear,
    /// `conv_dim × kernel`.
    pub conv_weight: Vec<f32>,
    /// `−exp(A_log)` per value head.
    pub neg_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// The gated RMSNorm's weight (`head_v_dim`; the scale itself, not `1 + w`).
    pub norm_weight: Vec<f32>,
    pub eps: f32,
    pub out_proj: Linear,
}

/// Scratch of a gated delta-net layer.
#[derive(Default)]
pub struct GdnBuffers {
    qkv: Vec<f32>,
    z: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    core: Vec<f32>,
    row: Vec<f32>,
}

impl GatedDeltaNet {
    /// Loads `{prefix}.in_proj_{qkv,z,b,a}`, `conv1d`, `A_log` (or `A`, already `−exp(A_log)`, as
    /// GGUF stores it), `dt_bias`, `norm`, `out_proj`.
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, dims: GdnDims, eps: f32) -> Result<Self> {
        let lin = |name: &str, out: usize, inp: usize| Linear::load(ck, &format!("{prefix}.{name}"), out, inp, false);
        let (nv, conv) = (dims.num_v_heads, dims.conv_dim());
        Ok(GatedDeltaNet {
            dims,
            in_proj_qkv: lin("in_proj_qkv", conv, hidden)?,
            in_proj_z: lin("in_proj_z", dims.value_dim(), hidden)?,
            in_proj_b: lin("in_proj_b", nv, hidden)?,
            in_proj_a: lin("in_proj_a", nv, hidden)?,
            conv_weight: ck.vector(&format!("{prefix}.conv1d.weight"), conv * dims.conv_kernel)?,
            neg_a: match ck.optional_vector(&format!("{prefix}.A"), nv)? {
                Some(a) => a,
                None => ck.vector(&format!("{prefix}.A_log"), nv)?.iter().map(|a| -a.exp()).collect(),
            },
            dt_bias: ck.vector(&format!("{prefix}.dt_bias"), nv)?,
            norm_weight: ck.vector(&format!("{prefix}.norm.weight"), dims.head_v_dim)?,
            eps,
            out_proj: lin("out_proj", hidden, dims.value_dim())?,
        })
    }

    pub fn kv_cache_spec(&self) -> KvCacheSpec {
        KvCacheSpec::Recurrent { state_elements: self.dims.state_elements() }
    }

    /// `x` is the normed hidden state (`tokens × hidden`); writes `tokens × hidden` into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        batch: &ForwardBatch,
        kv: &mut KvCache,
        layer: usize,
        ws: &mut GdnBuffers,
        out: &mut Vec<f32>,
    ) {
        let n = batch.num_tokens();
        let d = self.dims;
        let GdnBuffers { qkv, z, b, a, core, row } = ws;
        Linear::forward_many(
            be,
            [&self.in_proj_qkv, &self.in_proj_z, &self.in_proj_b, &self.in_proj_a],
            x,
            n,
            [qkv, z, b, a],
        );
        let conv = d.conv_dim();
        convolve_requests(be, kv, layer, batch, qkv, conv, (&self.conv_weight, d.conv_kernel), row);
        be.activation(Activation::Silu, qkv);
        self.prepare_qk(qkv, n);
        // beta = σ(b) and the decay exp(g), per token and value head.
        b.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
        for at in a.chunks_exact_mut(d.num_v_heads) {
            for (h, v) in at.iter_mut().enumerate() {
                *v = (self.neg_a[h] * softplus(*v + self.dt_bias[h])).exp();
            }
        }
        core.resize(n * d.value_dim(), 0.0);
        let seqs = &batch.groups[kv.group_of(layer)].seqs;
        let (states, per_slot) = kv.states_mut(layer);
        self.delta_rule(be, qkv, b, a, (seqs, batch.state_saves), states, per_slot, core);
        self.gated_norm(be, core, z);
        self.out_proj.forward(be, core, n, out);
    }

    /// L2-normalises every q and k head (ε = 1e-6 inside the root, as transformers' `l2norm`),
    /// and scales q by `1/√dk`.
    fn prepare_qk(&self, qkv: &mut [f32], n: usize) {
        let (d, conv) = (self.dims, self.dims.conv_dim());
        let scale = 1.0 / (d.head_k_dim as f32).sqrt();
        pool::rows_mut(qkv, conv, pool::min_rows(conv), |_, rows| {
            for r in rows.chunks_exact_mut(conv) {
                for (i, head) in r[..2 * d.key_dim()].chunks_exact_mut(d.head_k_dim).enumerate() {
                    let inv = 1.0 / (head.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
                    let s = if i < d.num_k_heads { inv * scale } else { inv };
                    head.iter_mut().for_each(|v| *v *= s);
                }
            }
        });
        debug_assert_eq!(qkv.len(), n * conv);
    }

    /// Runs the rule over every request's tokens in order, one task per (request, value head).
    #[allow(clippy::too_many_arguments)]
    fn delta_rule(
        &self,
        be: &dyn Backend,
        qkv: &[f32],
        beta: &[f32],
        decay: &[f32],
        (seqs, saves): (&[SeqAttention], &[(usize, u32)]),
        states: &mut [f32],
        per_slot: usize,
        core: &mut [f32],
    ) {
        let d = self.dims;
        let (conv, nv, dk, dv) = (d.conv_dim(), d.num_v_heads, d.head_k_dim, d.head_v_dim);
        let l = HeadLayout { heads: nv, conv_state: d.conv_state(), head_state: d.head_state(), head_out: dv };
        scan_heads((seqs, saves), (states, per_slot), l, core, |t, h, state, out, scratch| {
            let r = &qkv[t * conv..(t + 1) * conv];
            let kh = d.k_head(h);
            let q = &r[kh * dk..(kh + 1) * dk];
            let k = &r[d.key_dim() + kh * dk..d.key_dim() + (kh + 1) * dk];
            let v = &r[2 * d.key_dim() + h * dv..2 * d.key_dim() + (h + 1) * dv];
            be.gated_delta_step(state, q, k, v, &decay[t * nv + h..t * nv + h + 1], beta[t * nv + h], scratch, out);
        });
    }

    /// `core = rmsnorm(core) · w · silu(z)` per value head.
    fn gated_norm(&self, be: &dyn Backend, core: &mut [f32], z: &mut [f32]) {
        let dv = self.dims.head_v_dim;
        be.activation(Activation::Silu, z);
        pool::rows_mut(core, dv, pool::min_rows(dv), |r0, rows| {
            for (i, head) in rows.chunks_exact_mut(dv).enumerate() {
                let inv = ops::inv_rms(head, self.eps);
                let g = &z[(r0 + i) * dv..(r0 + i + 1) * dv];
                for ((v, w), g) in head.iter_mut().zip(&self.norm_weight).zip(g) {
                    *v = *v * inv * w * g;
                }
            }
        });
    }
}
