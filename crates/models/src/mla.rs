//! Multi-head latent attention (DeepSeek-V2/V3, after transformers' `DeepseekV2Attention`):
//! every position caches one compressed latent `c` (`kv_lora_rank`, RMS-normed) and one rotary
//! key `k_pe` (`qk_rope_head_dim`) shared by all heads — the `Mla` cache spec — instead of
//! per-head K and V.
//!
//! Keys and values are never expanded: per head, `k_nope = W_UK c` and `v = W_UV c`, so
//! `q_nope · k_nope = (W_UKᵀ q_nope) · c` and `Σ p v = W_UV (Σ p c)`. The query is absorbed into
//! latent space once per token (`[W_UKᵀ q_nope ; q_pe]`), attention runs as one-KV-head attention
//! over the cached `[c ; k_pe]` rows with the latents as values, and `W_UV` maps each head's
//! result back (vLLM's and llama.cpp's decode path; used here for prefill too, so a token's
//! arithmetic is the same however it is batched or chunked).

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::{AttentionBuffers, Linear, RmsNorm};
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::attention::{AttentionParams, KvCache};
use vllm_rs_kernels::ops::RopeTable;
use vllm_rs_kernels::{Backend, Weight};

/// The shape of one MLA layer.
#[derive(Clone, Copy, Debug)]
pub struct MlaShape {
    pub num_heads: usize,
    /// Rank of the query's low-rank projection, if it has one.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    pub scale: f32,
    /// Multiplies the rotated query and key parts (YaRN's attention factor; 1 without scaling).
    pub rope_factor: f32,
    /// Whether rotary pairs are adjacent (DeepSeek's layout) or half a rotary dimension apart.
    pub rope_interleaved: bool,
    /// Whether the `qk_rope_head_dim` parts are rotated at all (Kimi Linear's MLA leaves them
    /// as they are: its delta-attention layers carry the positions).
    pub rotate: bool,
}

/// The query projection: direct, or low-rank through a normed bottleneck.
pub enum QueryProj {
    Direct(Linear),
    LowRank { a: Linear, norm: RmsNorm, b: Linear },
}

pub struct MlaAttention {
    pub q: QueryProj,
    /// `hidden → kv_lora_rank + qk_rope_head_dim`: the latent and the rotary key.
    pub kv_a_proj_with_mqa: Linear,
    pub kv_a_layernorm: RmsNorm,
    /// Per head, `W_UKᵀ` (`kv_lora_rank × qk_nope_head_dim`): absorbs `q_nope` into latent space.
    pub w_uk_t: Vec<Weight>,
    /// Per head, `W_UV` (`v_head_dim × kv_lora_rank`): the head's value from its latent result.
    pub w_uv: Vec<Weight>,
    pub o_proj: Linear,
    pub shape: MlaShape,
}

/// Scratch of [`MlaAttention::forward`].
#[derive(Default)]
pub struct MlaBuffers {
    q_lora: Vec<f32>,
    rows: Vec<f32>,
    out: Vec<f32>,
    heads: Vec<f32>,
}

/// transformers builds `q_a_layernorm` and `kv_a_layernorm` with their default epsilon.
const LORA_NORM_EPS: f32 = 1e-6;

impl MlaAttention {
    /// Loads `{prefix}.{q_proj | q_a_proj, q_a_layernorm, q_b_proj}`, `kv_a_proj_with_mqa`,
    /// `kv_a_layernorm`, `kv_b_proj` (or GGUF's `k_b_proj` and `v_b_proj`: [`up_projections`])
    /// and `o_proj`.
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, s: MlaShape) -> Result<Self> {
        let (h, nope, rope, vd, l) =
            (s.num_heads, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim, s.kv_lora_rank);
        let lin = |name: &str, out, inp| Linear::load(ck, &format!("{prefix}.{name}"), out, inp, false);
        let q_out = h * (nope + rope);
        let q = match s.q_lora_rank {
            None => QueryProj::Direct(lin("q_proj", q_out, hidden)?),
            Some(r) => QueryProj::LowRank {
                a: lin("q_a_proj", r, hidden)?,
                norm: RmsNorm::load(ck, &format!("{prefix}.q_a_layernorm"), r, LORA_NORM_EPS, 0.0)?,
                b: lin("q_b_proj", q_out, r)?,
            },
        };
        let (w_uk_t, w_uv) = up_projections(ck, prefix, s)?;
        Ok(MlaAttention {
            q,
            kv_a_proj_with_mqa: lin("kv_a_proj_with_mqa", l + rope, hidden)?,
            kv_a_layernorm: RmsNorm::load(ck, &format!("{prefix}.kv_a_layernorm"), l, LORA_NORM_EPS, 0.0)?,
            w_uk_t,
            w_uv,
            o_proj: lin("o_proj", hidden, h * vd)?,
            shape: s,
        })
    }

    pub fn kv_cache_spec(&self) -> KvCacheSpec {
        KvCacheSpec::Mla { kv_lora_rank: self.shape.kv_lora_rank, qk_rope_head_dim: self.shape.qk_rope_head_dim }
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
        let s = &self.shape;
        let (h, nope, r, l) = (s.num_heads, s.qk_nope_head_dim, s.qk_rope_head_dim, s.kv_lora_rank);
        let (qk, lr) = (nope + r, l + r);
        let AttentionBuffers { q, k: latent, v: q_abs, attn, mla, .. } = ws;
        match &self.q {
            QueryProj::Direct(p) => p.forward(be, x, n, q),
            QueryProj::LowRank { a, norm, b } => {
                a.forward(be, x, n, &mut mla.q_lora);
                norm.forward(be, &mut mla.q_lora);
                b.forward(be, &mla.q_lora, n, q);
            }
        }
        // Each position's cache row: [normed latent ; rotated key].
        self.kv_a_proj_with_mqa.forward(be, x, n, latent);
        for (t, row) in latent.chunks_exact_mut(lr).enumerate() {
            let (c, k_pe) = row.split_at_mut(l);
            be.rms_norm_rows(c, l, &self.kv_a_layernorm.weight, LORA_NORM_EPS, 0.0);
            if s.rotate {
                be.rope(k_pe, r, rope, t, s.rope_interleaved);
                scale_by(be, k_pe, s.rope_factor);
            }
        }
        let group = &batch.groups[kv.group_of(layer)];
        be.write_kv(kv, layer, group.slot_mapping, latent, &[]);
        // Absorbed queries [W_UKᵀ q_nope ; rotated q_pe], head by head.
        q_abs.resize(n * h * lr, 0.0);
        for head in 0..h {
            gather(q, h * qk, head * qk..head * qk + nope, &mut mla.rows);
            mla.out.resize(n * l, 0.0);
            be.matmul(&mla.rows, n, &self.w_uk_t[head], &mut mla.out);
            for t in 0..n {
                let dst = &mut q_abs[(t * h + head) * lr..(t * h + head + 1) * lr];
                dst[..l].copy_from_slice(&mla.out[t * l..(t + 1) * l]);
                dst[l..].copy_from_slice(&q[(t * h + head) * qk + nope..(t * h + head + 1) * qk]);
                if s.rotate {
                    be.rope(&mut dst[l..], r, rope, t, s.rope_interleaved);
                    scale_by(be, &mut dst[l..], s.rope_factor);
                }
            }
        }
        let params = AttentionParams {
            num_heads: h,
            num_kv_heads: 1,
            head_dim: lr,
            scale: s.scale,
            sliding_window: None,
            softcap: None,
            sinks: None,
        };
        attn.resize(n * h * lr, 0.0);
        be.paged_attention(q_abs, kv, layer, &group.seqs, &params, attn);
        // Each head's latent result (the leading `l` of its row) through its W_UV.
        let vd = s.v_head_dim;
        mla.heads.resize(n * h * vd, 0.0);
        for head in 0..h {
            gather(attn, h * lr, head * lr..head * lr + l, &mut mla.rows);
            mla.out.resize(n * vd, 0.0);
            be.matmul(&mla.rows, n, &self.w_uv[head], &mut mla.out);
            for t in 0..n {
                mla.heads[(t * h + head) * vd..(t * h + head + 1) * vd].copy_from_slice(&mla.out[t * vd..(t + 1) * vd]);
            }
        }
        self.o_proj.forward(be, &mla.heads, n, out);
    }
}

/// Per head, `W_UKᵀ` and `W_UV`: from transformers' fused `kv_b_proj` (per head, `W_UK` rows then
/// `W_UV` rows), or from GGUF's `k_b_proj` (already `W_UKᵀ` per head) and `v_b_proj`.
fn up_projections(ck: &Checkpoint, prefix: &str, s: MlaShape) -> Result<(Vec<Weight>, Vec<Weight>)> {
    let (h, nope, vd, l) = (s.num_heads, s.qk_nope_head_dim, s.v_head_dim, s.kv_lora_rank);
    let split = format!("{prefix}.k_b_proj.weight");
    let (mut w_uk_t, mut w_uv) = (Vec::with_capacity(h), Vec::with_capacity(h));
    if ck.contains(&split) {
        let k_b = ck.matrix(&split, h * l, nope)?.to_f32();
        let v_b = ck.matrix(&format!("{prefix}.v_b_proj.weight"), h * vd, l)?.to_f32();
        for (uk_t, uv) in k_b.chunks_exact(l * nope).zip(v_b.chunks_exact(vd * l)) {
            w_uk_t.push(Weight::from_f32(l, nope, uk_t).for_matmul());
            w_uv.push(Weight::from_f32(vd, l, uv).for_matmul());
        }
        return Ok((w_uk_t, w_uv));
    }
    let kv_b = ck.matrix(&format!("{prefix}.kv_b_proj.weight"), h * (nope + vd), l)?.to_f32();
    for head in kv_b.chunks_exact((nope + vd) * l) {
        let (uk, uv) = head.split_at(nope * l);
        let t: Vec<f32> = (0..l).flat_map(|c| (0..nope).map(move |r| uk[r * l + c])).collect();
        w_uk_t.push(Weight::from_f32(l, nope, &t).for_matmul());
        w_uv.push(Weight::from_f32(vd, l, uv).for_matmul());
    }
    Ok((w_uk_t, w_uv))
}

/// `x *= factor`, skipped when it is 1 (multipliers that are mostly absent).
pub(crate) fn scale_by(be: &dyn Backend, x: &mut [f32], factor: f32) {
    if factor != 1.0 {
        be.scale(x, factor);
    }
}

/// The columns `cols` of every `row`-wide row of `x`, packed into `out`.
fn gather(x: &[f32], row: usize, cols: std::ops::Range<usize>, out: &mut Vec<f32>) {
    out.clear();
    for r in x.chunks_exact(row) {
        out.extend_from_slice(&r[cols.clone()]);
    }
}

/// The MLA fields of a DeepSeek config.
pub fn shape_from_config(config: &serde_json::Value, num_heads: usize) -> Result<MlaShape> {
    let get = |k: &str| {
        config
            .get(k)
            .and_then(serde_json::Value::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| Error::msg(format!("config: missing field `{k}` (a non-negative integer)")))
    };
    let (nope, rope) = (get("qk_nope_head_dim")?, get("qk_rope_head_dim")?);
    if !rope.is_multiple_of(2) {
        return Err(Error::msg(format!("config: qk_rope_head_dim {rope} must be even for rotary embeddings")));
    }
    let q_lora_rank = match config.get("q_lora_rank").filter(|v| !v.is_null()) {
        None => None,
        Some(_) => Some(get("q_lora_rank")?),
    };
    Ok(MlaShape {
        num_heads,
        q_lora_rank,
        kv_lora_rank: get("kv_lora_rank")?,
        qk_nope_head_dim: nope,
        qk_rope_head_dim: rope,
        v_head_dim: get("v_head_dim")?,
        scale: 1.0 / ((nope + rope) as f32).sqrt(),
        rope_factor: 1.0,
        rope_interleaved: true,
        rotate: true,
    })
}
