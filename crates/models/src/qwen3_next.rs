//! `Qwen3NextForCausalLM` (Qwen3-Next-80B-A3B), after transformers' `modeling_qwen3_next.py`:
//! the hybrid that Qwen3.5 grew from (`qwen3_5.rs`: gated delta-net and gated attention,
//! `(1 + w)` norms, partial rotary) with Qwen2-MoE's sparse blocks (routed experts plus a gated
//! shared expert; `decoder_sparse_step` and `mlp_only_layers` pick the sparse layers). Its
//! delta-net projections are fused per key-head group — `in_proj_qkvz` rows are
//! `[q, k, v, z]` of group 0, then of group 1, …, and `in_proj_ba` rows `[b, a]` per group — and
//! are regrouped on load into Qwen3.5's separate `in_proj_{qkv,z,b,a}`.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::gated_deltanet::GdnDims;
use crate::mlp::{Activation, FeedForward};
use crate::moe::{self, SharedExpert};
use crate::mtp::Mtp;
use crate::qwen3_moe::qwen_moe_ffn;
use serde_json::Value;
use std::ops::Range;

pub const QWEN3_NEXT: ArchSpec = ArchSpec {
    hf_class: "Qwen3NextForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "qwen3_next",
        config_class: "Qwen3NextConfig",
        seed: 132,
        config: r#"{"num_hidden_layers": 3, "head_dim": 32, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"], "mlp_only_layers": [2],
            "intermediate_size": 64,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.5}}"#,
        norm_center: 0.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let d = GdnDims::parse(config)?;
    let mut ck = ck.clone();
    for i in 0..moe::config_usize(config, "num_hidden_layers")? {
        let p = format!("model.layers.{i}.linear_attn");
        if ck.contains(&format!("{p}.in_proj_qkvz.weight")) {
            unfuse_projections(&mut ck, &p, d)?;
        }
    }
    crate::qwen3_5::load_with(&ck, config, feed_forward(&ck, config)?)
}

/// The multi-token-prediction layer of a Qwen3-Next checkpoint.
pub fn load_mtp(ck: &Checkpoint, config: &Value) -> Result<Mtp> {
    crate::qwen3_5::mtp_with(ck, config, feed_forward(ck, config)?)
}

/// Layer `i`'s feed-forward block: routed experts with a gated shared expert, or a dense MLP
/// on the `mlp_only_layers`.
fn feed_forward<'a>(ck: &'a Checkpoint, config: &Value) -> Result<impl Fn(usize, &str) -> Result<FeedForward> + 'a> {
    let routed = qwen_moe_ffn(ck, config)?;
    let hidden = moe::config_usize(config, "hidden_size")?;
    let shared_inter = moe::config_usize(config, "shared_expert_intermediate_size")?;
    Ok(move |i: usize, prefix: &str| {
        let mut ffn = routed(i, prefix, Activation::Silu)?;
        if let FeedForward::Moe(block) = &mut ffn {
            let p = format!("{prefix}.mlp");
            block.shared_expert =
                Some(SharedExpert::load(ck, &p, "shared_expert", hidden, shared_inter, Some("shared_expert_gate"))?);
        }
        Ok(ffn)
    })
}

/// `{p}.in_proj_qkvz` → `in_proj_qkv` (all q, all k, all v) and `in_proj_z`; `{p}.in_proj_ba`
/// → `in_proj_b` and `in_proj_a`.
fn unfuse_projections(ck: &mut Checkpoint, p: &str, d: GdnDims) -> Result<()> {
    let (dk, dv, r) = (d.head_k_dim, d.head_v_dim, d.num_v_heads / d.num_k_heads);
    let group = 2 * dk + 2 * r * dv;
    // Rows `from..from + len` of every group.
    let every = |from: usize, len: usize| -> Vec<Range<usize>> {
        (0..d.num_k_heads).map(|g| g * group + from..g * group + from + len).collect()
    };
    let mut qkv = every(0, dk);
    qkv.extend(every(dk, dk));
    qkv.extend(every(2 * dk, r * dv));
    let z = every(2 * dk + r * dv, r * dv);
    let name = |s: &str| format!("{p}.{s}.weight");
    ck.regroup_rows(&name("in_proj_qkvz"), &[(name("in_proj_qkv"), qkv), (name("in_proj_z"), z)])?;
    let ba = |from: usize| (0..d.num_k_heads).map(|g| g * 2 * r + from..g * 2 * r + from + r).collect();
    ck.regroup_rows(&name("in_proj_ba"), &[(name("in_proj_b"), ba(0)), (name("in_proj_a"), ba(r))])
}
