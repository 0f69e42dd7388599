//! `KimiLinearForCausalLM` (Moonshot's Kimi Linear, 48B-A3B), after transformers'
//! `modeling_kimi_linear.py`: pre-norm layers, most with Kimi delta attention (`kda.rs`), the
//! others with multi-head latent attention (`mla.rs`) whose rotary part is left unrotated (the
//! delta-attention layers carry the positions); a dense SwiGLU MLP on the first layers, then
//! DeepSeek-V3-style experts (sigmoid router with a correction bias, groups by their best two,
//! renormalized, scaled by `routed_scaling_factor`) with shared experts.
//!
//! Checkpoints and configs come as Moonshot released them (and as transformers saves them):
//! `block_sparse_moe` with `experts.N.{w1,w3,w2}`, `{q,k,v}_conv1d`; `num_experts_per_token`,
//! `num_expert_group`, `num_shared_experts`, `moe_renormalize`, `model_max_length`; the layer
//! kinds as `layer_types` or `linear_attn_config` (1-based `kda_layers`, `full_attn_layers`).
//!
//! GGUF as llama.cpp's converter writes it (`kimi-linear`), read as llama.cpp runs it: the KDA
//! layers are those with `head_count_kv` 0, with `linear_num_heads` = `head_count` and their
//! tensors as `ssm_*` (`A` stored as `−exp(A_log)`, `dt_bias` as `ssm_dt.bias`); MLA as
//! `deepseek2` (`kv_b_proj` split into `attn_k_b`, transposed per head, and `attn_v_b`; or the
//! fused `attn_kv_b`); experts stacked into `*_exps`, the correction bias `exp_probs_b`, the shared
//! experts `*_shexp`; the first `leading_dense_block_count` layers dense. Routing as llama.cpp's:
//! sigmoid (other `expert_gating_func`s are refused), always renormalized, `expert_weights_scale`,
//! groups only where `expert_group_count` > 1 (the converter reads DeepSeek's `n_group`, not
//! Moonshot's `num_expert_group`, so it writes no groups for Moonshot's configs).

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::{CommonConfig, gguf_per_layer};
use crate::decoder::{DecoderModel, Mixer};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::kda::{self, KimiDeltaAttention};
use crate::llama::{pre_norm_layer, pre_norm_model};
use crate::mla::{self, MlaAttention};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::moe::{self, GroupLimit, GroupScore, MoeConfig, MoeNames, Scoring, SharedExpert, SparseMoe};
use serde_json::{Value, json};

pub const KIMI_LINEAR: ArchSpec = ArchSpec {
    hf_class: "KimiLinearForCausalLM",
    gguf_arch: Some("kimi-linear"),
    load,
    gguf_modules: GGUF_MODULES,
    gguf_config: Some(config_from_gguf),
    tiny: TinySpec {
        name: "kimi_linear",
        config_class: "KimiLinearConfig",
        seed: 150,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "num_key_value_heads": 4,
            "q_lora_rank": null, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
            "num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24, "n_shared_experts": 1,
            "n_group": 2, "topk_group": 1, "routed_scaling_factor": 1.5, "rms_norm_eps": 1e-5,
            "linear_num_heads": 4, "linear_head_dim": 16, "linear_conv_kernel_dim": 4,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse"], "tie_word_embeddings": false}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// llama.cpp's names of the Kimi Linear tensors (`kimi-linear`) beside the common ones, mapped to
/// the names the safetensors loader reads: the KDA layers' `ssm_*`, the MLA layers' DeepSeek
/// names, the experts under Moonshot's `block_sparse_moe` (the 3-D `*_exps` as `experts.w1` etc.).
pub const GGUF_MODULES: &[(&str, &str)] = &[
    ("ssm_conv1d_q", "self_attn.q_conv1d"),
    ("ssm_conv1d_k", "self_attn.k_conv1d"),
    ("ssm_conv1d_v", "self_attn.v_conv1d"),
    ("ssm_f_a", "self_attn.f_a_proj"),
    ("ssm_f_b", "self_attn.f_b_proj"),
    ("ssm_beta", "self_attn.b_proj"),
    ("ssm_a", "self_attn.A"),
    ("ssm_dt.bias", "self_attn.dt_bias"),
    ("ssm_g_a", "self_attn.g_a_proj"),
    ("ssm_g_b", "self_attn.g_b_proj"),
    ("ssm_norm", "self_attn.o_norm"),
    ("attn_q_a", "self_attn.q_a_proj"),
    ("attn_q_a_norm", "self_attn.q_a_layernorm"),
    ("attn_q_b", "self_attn.q_b_proj"),
    ("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"),
    ("attn_kv_a_norm", "self_attn.kv_a_layernorm"),
    ("attn_kv_b", "self_attn.kv_b_proj"),
    ("attn_k_b", "self_attn.k_b_proj"),
    ("attn_v_b", "self_attn.v_b_proj"),
    ("ffn_gate_inp", "block_sparse_moe.gate"),
    ("ffn_gate_exps", "block_sparse_moe.experts.w1"),
    ("ffn_up_exps", "block_sparse_moe.experts.w3"),
    ("ffn_down_exps", "block_sparse_moe.experts.w2"),
    ("exp_probs_b.bias", "block_sparse_moe.gate.e_score_correction_bias"),
    ("ffn_gate_shexp", "block_sparse_moe.shared_experts.gate_proj"),
    ("ffn_up_shexp", "block_sparse_moe.shared_experts.up_proj"),
    ("ffn_down_shexp", "block_sparse_moe.shared_experts.down_proj"),
];

/// llama.cpp's `expert_gating_func` value for sigmoid scores.
const GATING_SIGMOID: u64 = 2;

/// The Kimi Linear keys of an HF config from `kimi-linear` metadata, as llama.cpp runs the file.
pub fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let key = |k: &str| format!("kimi-linear.{k}");
    let req = |k: &str| g.require_u64(&key(k));
    let opt = |k: &str| g.get_u64(&key(k));
    let refuse = |what: String| Err(Error::file(&g.path, format!("{what} is not supported for Kimi Linear")));
    if let Some(fused) = g.tensors.keys().find(|t| t.ends_with(".attn_qkv.weight")) {
        return refuse(format!("the fused KDA projection {fused}"));
    }
    moe::config_from_gguf(g, c, true)?;
    // llama.cpp renormalizes Kimi's routing weights whatever `expert_weights_norm` says.
    c["norm_topk_prob"] = true.into();
    if c.get("moe_intermediate_size").is_none() {
        // Per layer (llama.cpp reads a key or an array): one size over the sparse layers.
        let sizes = gguf_per_layer(g, &key("expert_feed_forward_length"))?;
        let mut sparse = sizes.iter().filter(|&&s| s > 0);
        let first = sparse.next().copied().unwrap_or(0);
        if first == 0 || sparse.any(|&s| s != first) {
            return refuse(format!("expert_feed_forward_length {sizes:?} (one size for all experts)"));
        }
        c["moe_intermediate_size"] = first.into();
    }
    match opt("expert_gating_func") {
        Some(GATING_SIGMOID) => {}
        other => return refuse(format!("expert_gating_func {other:?} (only {GATING_SIGMOID}, sigmoid)")),
    }
    // Groups as llama.cpp forms them when there are more than one: scored by their best two.
    match opt("expert_group_count").filter(|&n| n > 1) {
        Some(n) => {
            c["n_group"] = n.into();
            c["topk_group"] = req("expert_group_used_count")?.into();
        }
        None => {
            c["n_group"] = 1.into();
            c["topk_group"] = 1.into();
        }
    }
    // 0 or absent: llama.cpp does not scale the weights.
    let scale = g.get_f64(&key("expert_weights_scale")).filter(|&s| s != 0.0).unwrap_or(1.0);
    c["routed_scaling_factor"] = scale.into();
    c["n_shared_experts"] = req("expert_shared_count")?.into();
    let n = c["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    // The KDA layers are those with no KV heads (llama.cpp's recurrent layers).
    let kv = match opt("attention.head_count_kv") {
        Some(one) => vec![one; n],
        None => gguf_per_layer(g, &key("attention.head_count_kv"))?,
    };
    let types: Vec<&str> = kv.iter().map(|&h| if h == 0 { "linear_attention" } else { "full_attention" }).collect();
    c["layer_types"] = json!(types);
    let dense = opt("leading_dense_block_count").unwrap_or(0) as usize;
    c["mlp_layer_types"] = json!((0..n).map(|i| if i < dense { "dense" } else { "sparse" }).collect::<Vec<_>>());
    // llama.cpp gives the KDA layers as many heads as the MLA layers.
    c["linear_num_heads"] = c["num_attention_heads"].clone();
    c["linear_head_dim"] = req("kda.head_dim")?.into();
    c["linear_conv_kernel_dim"] = req("ssm.conv_kernel")?.into();
    crate::deepseek_gguf::mla_config_from_gguf(g, "kimi-linear", c)?;
    // Nothing is rotated (llama.cpp applies no rotary embedding to Kimi at all).
    if let Some(m) = c.as_object_mut() {
        m.remove("rope_scaling");
    }
    Ok(())
}

/// The experts as Moonshot names them: `block_sparse_moe.experts.N.{w1, w3, w2}`.
const NAMES: MoeNames = MoeNames { block: "block_sparse_moe", proj: ["w1", "w3", "w2"] };

/// Moonshot's config names of keys the shared loaders read under transformers' usual names.
const ALIASES: &[(&str, &str)] = &[
    ("num_experts_per_token", "num_experts_per_tok"),
    ("num_expert_group", "n_group"),
    ("num_shared_experts", "n_shared_experts"),
    ("moe_renormalize", "norm_topk_prob"),
    ("model_max_length", "max_position_embeddings"),
];

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let mut config = config.clone();
    for (released, usual) in ALIASES {
        if config.get(usual).is_none_or(Value::is_null) && config.get(released).is_some() {
            config[usual] = config[released].clone();
        }
    }
    let config = &config;
    refuse_unsupported(config)?;
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let (hidden, eps) = (c.hidden_size, c.rms_norm_eps);
    let kinds = layer_kinds(config, c.num_hidden_layers)?;
    let kda_dims = kda::dims_from_config(config)?;
    let mut mla_shape = mla::shape_from_config(config, c.num_attention_heads)?;
    mla_shape.rotate = false;
    let moe = MoeConfig::parse(config, true)?;
    let expert_inter = moe::config_usize(config, "moe_intermediate_size")?;
    let shared = moe::config_usize(config, "n_shared_experts").unwrap_or(0) * expert_inter;
    let group = GroupLimit::parse(config, moe.num_experts, GroupScore::SumTop2)?;
    let scale = moe::routed_scaling_factor(config)?;
    let mut layers = Vec::with_capacity(kinds.len());
    for (i, (linear, sparse)) in kinds.into_iter().enumerate() {
        let p = format!("model.layers.{i}");
        let attn = format!("{p}.self_attn");
        let mixer = match linear {
            true => Mixer::Kda(Box::new(KimiDeltaAttention::load(ck, &attn, hidden, kda_dims, eps)?)),
            false => Mixer::Mla(MlaAttention::load(ck, &attn, hidden, mla_shape)?),
        };
        let ffn = match sparse {
            true => {
                let mut block = SparseMoe::load(ck, &p, NAMES, &moe, hidden, expert_inter)?;
                let m = format!("{p}.{}", NAMES.block);
                block.scoring = Scoring::Sigmoid;
                block.correction_bias = Some(ck.vector(&format!("{m}.gate.e_score_correction_bias"), moe.num_experts)?);
                block.group_limit = Some(group);
                block.routed_scaling_factor = scale;
                if shared > 0 {
                    block.shared_expert = Some(SharedExpert::load(ck, &m, "shared_experts", hidden, shared, None)?);
                }
                FeedForward::Moe(Box::new(block))
            }
            // Transformers saves the dense MLP under the experts' module name too.
            false => {
                let m = if ck.contains(&format!("{p}.mlp.gate_proj.weight")) { "mlp" } else { NAMES.block };
                FeedForward::Gated(GatedMlp::load(
                    ck,
                    &format!("{p}.{m}"),
                    hidden,
                    c.intermediate_size,
                    Activation::Silu,
                )?)
            }
        };
        layers.push(pre_norm_layer(ck, &p, &c, mixer, ffn)?);
    }
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    // No rotation anywhere: the table is never read.
    pre_norm_model(ck, config, &c, embed, layers, mla_shape.qk_rope_head_dim)
}

/// Options of the released configs this implementation does not have.
fn refuse_unsupported(config: &Value) -> Result<()> {
    let is = |k: &str, v: Value| config.get(k).is_some_and(|x| *x == v);
    let checks = [
        (is("mla_use_nope", false.into()), "mla_use_nope = false (rotary latent attention)"),
        (is("attention_bias", true.into()), "attention_bias = true"),
        (config.get("hidden_act").is_some_and(|a| a != "silu"), "hidden_act other than silu"),
        (
            config.get("moe_router_activation_func").is_some_and(|a| a != "sigmoid"),
            "moe_router_activation_func other than sigmoid",
        ),
        (config.get("moe_layer_freq").is_some_and(|f| f.as_u64() != Some(1)), "moe_layer_freq other than 1"),
    ];
    match checks.iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(Error::msg(format!("config: {what} is not supported for Kimi Linear"))),
        None => Ok(()),
    }
}

/// Per layer: (delta attention?, experts?), from `layer_types` / `mlp_layer_types`, or the
/// released `linear_attn_config` (1-based layer lists) and `first_k_dense_replace`.
fn layer_kinds(config: &Value, n: usize) -> Result<Vec<(bool, bool)>> {
    let attention: Vec<bool> = match config["layer_types"].as_array() {
        Some(types) => types.iter().map(|t| t == "linear_attention").collect(),
        None => {
            let full = config["linear_attn_config"]["full_attn_layers"].as_array().ok_or_else(|| {
                Error::msg("config: missing field `layer_types` (or linear_attn_config.full_attn_layers)")
            })?;
            let full: Vec<u64> = full.iter().filter_map(Value::as_u64).collect();
            (1..=n as u64).map(|l| !full.contains(&l)).collect()
        }
    };
    let mlp: Vec<bool> = match config["mlp_layer_types"].as_array() {
        Some(types) => types.iter().map(|t| t == "sparse").collect(),
        None => {
            let dense = config["first_k_dense_replace"].as_u64().unwrap_or(1) as usize;
            (0..n).map(|i| i >= dense).collect()
        }
    };
    if attention.len() != n || mlp.len() != n {
        return Err(Error::msg(format!(
            "config: the layer kinds list {} and {} layers, not {n}",
            attention.len(),
            mlp.len()
        )));
    }
    Ok(attention.into_iter().zip(mlp).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn released_configs_name_the_layers_by_lists() {
        let c = json!({"linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3]}, "first_k_dense_replace": 1});
        assert_eq!(layer_kinds(&c, 4).unwrap(), vec![(true, false), (false, true), (true, true), (false, true)]);
        let e = refuse_unsupported(&json!({"mla_use_nope": false})).unwrap_err().to_string();
        assert!(e.contains("mla_use_nope = false"), "{e}");
        assert!(layer_kinds(&json!({"layer_types": ["linear_attention"]}), 2).is_err());
    }
}
