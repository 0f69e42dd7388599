//! DeepSeek-V2/V3 GGUF files (llama.cpp's `deepseek2` architecture, which also holds V3 and the
//! models built on it): the tensor names and the metadata, turned back into transformers' names
//! and config as `convert_hf_to_gguf.py` wrote them.
//!
//! - `kv_b_proj` is stored split and ready for absorbed attention: `attn_k_b` (`W_UKᵀ` per head,
//!   `kv_lora_rank × qk_nope_head_dim`) and `attn_v_b` (`W_UV` per head); older files hold the
//!   fused `attn_kv_b`. `mla.rs` takes either.
//! - The metadata says one KV head (MLA as MQA over the latent); transformers' config has as many
//!   as query heads.
//! - The router: `expert_gating_func` sigmoid is V3 (`noaux_tc`, with the `exp_probs_b`
//!   correction bias), softmax (or none, in older files) V2, whose group-limited routing
//!   transformers scores by each group's best expert (llama.cpp by its best two: this follows
//!   transformers).
//! - YaRN: only `mscale_all_dim` is stored (as `0.1 · mscale_all_dim`); llama.cpp takes `mscale`
//!   equal to it, as the released configs have it, and so does this.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::moe;
use serde_json::{Value, json};

/// llama.cpp's names of DeepSeek's attention and expert tensors (the others are the common ones).
pub const GGUF_MODULES: &[(&str, &str)] = &[
    ("attn_q_a", "self_attn.q_a_proj"),
    ("attn_q_a_norm", "self_attn.q_a_layernorm"),
    ("attn_q_b", "self_attn.q_b_proj"),
    ("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"),
    ("attn_kv_a_norm", "self_attn.kv_a_layernorm"),
    ("attn_kv_b", "self_attn.kv_b_proj"),
    ("attn_k_b", "self_attn.k_b_proj"),
    ("attn_v_b", "self_attn.v_b_proj"),
    ("ffn_gate_shexp", "mlp.shared_experts.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_experts.up_proj"),
    ("ffn_down_shexp", "mlp.shared_experts.down_proj"),
    ("exp_probs_b.bias", "mlp.gate.e_score_correction_bias"),
];

/// llama.cpp's `expert_gating_func` values.
const GATING_SOFTMAX: u64 = 1;
const GATING_SIGMOID: u64 = 2;

/// The latent attention's keys of an HF config from `{arch}.` metadata, which llama.cpp writes
/// as MQA over the latent (`deepseek2`, `kimi-linear`): one KV head whose key is the latent and
/// the rotary key.
pub fn mla_config_from_gguf(g: &GgufFile, arch: &str, c: &mut Value) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let req = |k: &str| g.require_u64(&key(k));
    let opt = |k: &str| g.get_u64(&key(k));
    let rope = req("rope.dimension_count")?;
    // Files from before the `_mla` keys store the per-head sizes in key_length/value_length.
    let qk = opt("attention.key_length_mla").map_or_else(|| req("attention.key_length"), Ok)?;
    let v = opt("attention.value_length_mla").map_or_else(|| req("attention.value_length"), Ok)?;
    let nope = qk.checked_sub(rope).ok_or_else(|| {
        Error::file(&g.path, format!("the key length {qk} is smaller than the rotary dimension {rope}"))
    })?;
    c["num_key_value_heads"] = c["num_attention_heads"].clone();
    c["head_dim"] = rope.into();
    c["q_lora_rank"] = opt("attention.q_lora_rank").into();
    c["kv_lora_rank"] = req("attention.kv_lora_rank")?.into();
    c["qk_rope_head_dim"] = rope.into();
    c["qk_nope_head_dim"] = nope.into();
    c["v_head_dim"] = v.into();
    Ok(())
}

/// The DeepSeek keys of an HF config from `deepseek2` metadata, over the common translation.
pub fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let key = |k: &str| format!("deepseek2.{k}");
    let req = |k: &str| g.require_u64(&key(k));
    let opt = |k: &str| g.get_u64(&key(k));
    moe::config_from_gguf(g, c, false)?;
    mla_config_from_gguf(g, "deepseek2", c)?;
    c["first_k_dense_replace"] = opt("leading_dense_block_count").unwrap_or(0).into();
    c["n_shared_experts"] = opt("expert_shared_count").unwrap_or(0).into();
    c["routed_scaling_factor"] = g.get_f64(&key("expert_weights_scale")).unwrap_or(1.0).into();
    let (groups, used) = (opt("expert_group_count").unwrap_or(1), opt("expert_group_used_count").unwrap_or(1));
    c["n_group"] = groups.into();
    c["topk_group"] = used.into();
    match opt("expert_gating_func").unwrap_or(GATING_SOFTMAX) {
        GATING_SOFTMAX => {
            c["topk_method"] = if groups > 1 { "group_limited_greedy" } else { "greedy" }.into();
        }
        GATING_SIGMOID => {
            c["architectures"] = json!(["DeepseekV3ForCausalLM"]);
            c["topk_method"] = "noaux_tc".into();
        }
        other => return Err(Error::file(&g.path, format!("expert_gating_func {other} is not supported for DeepSeek"))),
    }
    if let Some(s) = c.get_mut("rope_scaling").filter(|s| s["rope_type"] == "yarn") {
        let mscale = g.get_f64(&key("rope.scaling.yarn_log_multiplier")).map_or(1.0, |m| m / 0.1);
        s["mscale"] = mscale.into();
        s["mscale_all_dim"] = mscale.into();
        s["original_max_position_embeddings"] = req("rope.scaling.original_context_length")?.into();
        s["beta_fast"] = g.get_f64(&key("rope.scaling.yarn_beta_fast")).unwrap_or(32.0).into();
        s["beta_slow"] = g.get_f64(&key("rope.scaling.yarn_beta_slow")).unwrap_or(1.0).into();
    }
    Ok(())
}
