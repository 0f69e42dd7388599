//! Kimi delta attention (KDA), after transformers' `KimiLinearDeltaAttention`: gated delta-net
//! (`gated_deltanet.rs`) with a decay per key channel instead of per head. Per token: separate
//! q, k, v projections through one depthwise causal convolution with SiLU; q and k L2-normalised
//! per head (q also scaled by `1/√dk`); the decay `exp(−exp(A_log[h]) · softplus(f_b(f_a(x)) +
//! dt_bias))`, one per key channel; `beta = σ(b_proj(x))` per head; the delta rule per head
//! (`S ← diag(decay)·S`, `S ← S + k ⊗ beta·(v − Sᵀk)`, `out = Sᵀq`); the output RMS-normed per
//! head and gated by `σ(g_b(g_a(x)))`; `o_proj`.
//!
//! Each request keeps one state slot (its convolution window, then its heads' `dk × dv` states)
//! in the recurrent KV cache group, as the other recurrent mixers.

use crate::batch::{ForwardBatch, SeqAttention};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::recurrent_state::{HeadLayout, convolve_requests, scan_heads, softplus};
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::ops::Activation;
use vllm_rs_kernels::{Backend, ops, pool};

/// Shapes of a KDA layer: `num_heads` heads of `head_dim` for q, k and v alike.
#[derive(Clone, Copy, Debug)]
pub struct KdaDims {
    pub num_heads: usize,
    pub head_dim: usize,
    pub conv_kernel: usize,
}

impl KdaDims {
    fn width(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// q, k and v side by side: the convolution's channels.
    fn conv_dim(&self) -> usize {
        3 * self.width()
    }

    fn conv_state(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    fn head_state(&self) -> usize {
        self.head_dim * self.head_dim
    }

    pub fn state_elements(&self) -> usize {
        self.conv_state() + self.num_heads * self.head_state()
    }
}

pub struct KimiDeltaAttention {
    pub dims: KdaDims,
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    /// `conv_dim × kernel`: the q, then k, then v channels.
    pub conv_weight: Vec<f32>,
    /// The forget gate's low-rank projection (`hidden → head_dim → width`) and its bias.
    pub f_a_proj: Linear,
    pub f_b_proj: Linear,
    pub dt_bias: Vec<f32>,
    /// `−exp(A_log)` per head.
    pub neg_a: Vec<f32>,
    pub b_proj: Linear,
    /// The output gate's low-rank projection.
    pub g_a_proj: Linear,
    pub g_b_proj: Linear,
    /// The per-head output RMSNorm's weight (`head_dim`).
    pub o_norm: Vec<f32>,
    pub eps: f32,
    pub o_proj: Linear,
}

/// Scratch of a KDA layer.
#[derive(Default)]
pub struct KdaBuffers {
    proj: [Vec<f32>; 3],
    qkv: Vec<f32>,
    low: Vec<f32>,
    decay: Vec<f32>,
    beta: Vec<f32>,
    gate: Vec<f32>,
    core: Vec<f32>,
    row: Vec<f32>,
}

impl KimiDeltaAttention {
    /// Loads `{prefix}.{q,k,v}_proj`, `{q,k,v}_conv1d` (Moonshot's names, which transformers
    /// saves; or its fused `conv1d`), `f_a_proj`, `f_b_proj`, `dt_bias`, `A_log` (at `{prefix}` or
    /// under `forget_gate`; or `A`, already `−exp(A_log)`, as llama.cpp stores it), `b_proj`,
    /// `g_a_proj`, `g_b_proj`, `o_norm`, `o_proj`.
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, dims: KdaDims, eps: f32) -> Result<Self> {
        let (w, hd, nh) = (dims.width(), dims.head_dim, dims.num_heads);
        let lin = |name: &str, out: usize, inp: usize| Linear::load(ck, &format!("{prefix}.{name}"), out, inp, false);
        // The forget gate's tensors sit beside the others in the released checkpoints.
        let gate = |name: &str| match ck.contains(&format!("{prefix}.forget_gate.{name}")) {
            true => format!("forget_gate.{name}"),
            false => name.to_string(),
        };
        let conv_weight = match ck.contains(&format!("{prefix}.conv1d.weight")) {
            true => ck.vector(&format!("{prefix}.conv1d.weight"), dims.conv_dim() * dims.conv_kernel)?,
            false => ["q", "k", "v"]
                .iter()
                .map(|p| ck.vector(&format!("{prefix}.{p}_conv1d.weight"), w * dims.conv_kernel))
                .collect::<Result<Vec<_>>>()?
                .concat(),
        };
        Ok(KimiDeltaAttention {
            dims,
            q_proj: lin("q_proj", w, hidden)?,
            k_proj: lin("k_proj", w, hidden)?,
            v_proj: lin("v_proj", w, hidden)?,
            conv_weight,
            f_a_proj: lin(&format!("{}_proj", gate("f_a")), hd, hidden)?,
            f_b_proj: lin(&format!("{}_proj", gate("f_b")), w, hd)?,
            dt_bias: ck.vector(&format!("{prefix}.{}", gate("dt_bias")), w)?,
            neg_a: match ck.optional_vector(&format!("{prefix}.A"), nh)? {
                Some(a) => a,
                None => ck.vector(&format!("{prefix}.{}", gate("A_log")), nh)?.iter().map(|a| -a.exp()).collect(),
            },
            b_proj: lin("b_proj", nh, hidden)?,
            g_a_proj: lin("g_a_proj", hd, hidden)?,
            g_b_proj: lin("g_b_proj", w, hd)?,
            o_norm: ck.vector(&format!("{prefix}.o_norm.weight"), hd)?,
            eps,
            o_proj: lin("o_proj", hidden, w)?,
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
        ws: &mut KdaBuffers,
        out: &mut Vec<f32>,
    ) {
        let (n, d) = (batch.num_tokens(), self.dims);
        let (w, conv) = (d.width(), d.conv_dim());
        let KdaBuffers { proj, qkv, low, decay, beta, gate, core, row } = ws;
        let [q, k, v] = proj;
        Linear::forward_many(be, [&self.q_proj, &self.k_proj, &self.v_proj], x, n, [q, k, v]);
        qkv.clear();
        for t in 0..n {
            for p in [&*q, &*k, &*v] {
                qkv.extend_from_slice(&p[t * w..(t + 1) * w]);
            }
        }
        convolve_requests(be, kv, layer, batch, qkv, conv, (&self.conv_weight, d.conv_kernel), row);
        be.activation(Activation::Silu, qkv);
        self.prepare_qk(qkv);
        self.f_a_proj.forward(be, x, n, low);
        self.f_b_proj.forward(be, low, n, decay);
        for dt in decay.chunks_exact_mut(w) {
            for (i, g) in dt.iter_mut().enumerate() {
                *g = (self.neg_a[i / d.head_dim] * softplus(*g + self.dt_bias[i])).exp();
            }
        }
        self.b_proj.forward(be, x, n, beta);
        beta.iter_mut().for_each(|b| *b = 1.0 / (1.0 + (-*b).exp()));
        core.resize(n * w, 0.0);
        let seqs = &batch.groups[kv.group_of(layer)].seqs;
        let (states, per_slot) = kv.states_mut(layer);
        self.delta_rule(be, qkv, (decay, beta), (seqs, batch.state_saves), states, per_slot, core);
        self.g_a_proj.forward(be, x, n, low);
        self.g_b_proj.forward(be, low, n, gate);
        self.gated_norm(core, gate);
        self.o_proj.forward(be, core, n, out);
    }

    /// L2-normalises every q and k head (`x / √(Σx² + 1e-6)`, as transformers' `l2norm` here)
    /// and scales q by `1/√dk`.
    fn prepare_qk(&self, qkv: &mut [f32]) {
        let (d, conv) = (self.dims, self.dims.conv_dim());
        let scale = 1.0 / (d.head_dim as f32).sqrt();
        pool::rows_mut(qkv, conv, pool::min_rows(conv), |_, rows| {
            for r in rows.chunks_exact_mut(conv) {
                for (i, head) in r[..2 * d.width()].chunks_exact_mut(d.head_dim).enumerate() {
                    let norm = (head.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
                    head.iter_mut().for_each(|v| *v /= norm);
                    if i < d.num_heads {
                        head.iter_mut().for_each(|v| *v *= scale);
                    }
                }
            }
        });
    }

    /// Runs the rule over every request's tokens in order, one task per (request, head).
    #[allow(clippy::too_many_arguments)]
    fn delta_rule(
        &self,
        be: &dyn Backend,
        qkv: &[f32],
        (decay, beta): (&[f32], &[f32]),
        (seqs, saves): (&[SeqAttention], &[(usize, u32)]),
        states: &mut [f32],
        per_slot: usize,
        core: &mut [f32],
    ) {
        let d = self.dims;
        let (w, conv, nh, hd) = (d.width(), d.conv_dim(), d.num_heads, d.head_dim);
        let l = HeadLayout { heads: nh, conv_state: d.conv_state(), head_state: d.head_state(), head_out: hd };
        scan_heads((seqs, saves), (states, per_slot), l, core, |t, h, state, out, scratch| {
            let r = &qkv[t * conv..(t + 1) * conv];
            let at = |part: usize| &r[part * w + h * hd..part * w + (h + 1) * hd];
            let g = &decay[t * w + h * hd..t * w + (h + 1) * hd];
            be.gated_delta_step(state, at(0), at(1), at(2), g, beta[t * nh + h], scratch, out);
        });
    }

    /// `core = rmsnorm(core) · w · σ(gate)` per head.
    fn gated_norm(&self, core: &mut [f32], gate: &[f32]) {
        let hd = self.dims.head_dim;
        pool::rows_mut(core, hd, pool::min_rows(hd), |r0, rows| {
            for (i, head) in rows.chunks_exact_mut(hd).enumerate() {
                let inv = ops::inv_rms(head, self.eps);
                let g = &gate[(r0 + i) * hd..(r0 + i + 1) * hd];
                for ((v, w), g) in head.iter_mut().zip(&self.o_norm).zip(g) {
                    *v = w * (*v * inv) * (1.0 / (1.0 + (-g).exp()));
                }
            }
        });
    }
}

/// The KDA shape of a Kimi Linear config: transformers' `linear_num_heads`, `linear_head_dim`,
/// `linear_conv_kernel_dim`, or the released checkpoints' `linear_attn_config`.
pub fn dims_from_config(config: &serde_json::Value) -> Result<KdaDims> {
    let lac = &config["linear_attn_config"];
    let get = |key: &str, released: &str| {
        config[key].as_u64().or(lac[released].as_u64()).filter(|&v| v > 0).map(|v| v as usize).ok_or_else(|| {
            Error::msg(format!("config: {key} (or linear_attn_config.{released}) must be a positive integer"))
        })
    };
    let d = KdaDims {
        num_heads: get("linear_num_heads", "num_heads")?,
        head_dim: get("linear_head_dim", "head_dim")?,
        conv_kernel: get("linear_conv_kernel_dim", "short_conv_kernel_size")?,
    };
    if d.conv_kernel < 2 {
        return Err(Error::msg("config: linear_conv_kernel_dim must be at least 2"));
    }
    Ok(d)
}
