//! `DeepseekV2ForCausalLM`, after transformers' `modeling_deepseek_v2.py`: multi-head latent
//! attention (`mla.rs`; the compressed latent is what the KV cache holds), the first
//! `first_k_dense_replace` layers with a dense SwiGLU MLP and the rest with a sparse MoE block:
//! softmax routing, `greedy` or `group_limited_greedy` top-k, weights times
//! `routed_scaling_factor`, plus `n_shared_experts` always-on experts (no gate). Safetensors, and
//! GGUF as llama.cpp's `deepseek2` (`deepseek_gguf.rs`; V3 files too). Rotary embeddings over the `qk_rope_head_dim` part, interleaved pairs, YaRN-scaled
//! where the config says so (the real checkpoints' long context).

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, plain_decoder};
use crate::deepseek_gguf;
use crate::error::{Error, Result};
use crate::layers::{Linear, RmsNorm};
use crate::llama::{pre_norm_layer, pre_norm_model};
use crate::mla::{self, MlaAttention, MlaShape};
use crate::mlp::{Activation, FeedForward};
use crate::moe::{self, GroupLimit, GroupScore, MOE_NAMES, MoeConfig, Scoring, SharedExpert};
use crate::mtp::{Chain, Mtp};
use crate::norm::Norm;
use crate::yarn::Yarn;
use serde_json::Value;
use vllm_rs_kernels::ops;

pub const DEEPSEEK_V2: ArchSpec = ArchSpec {
    hf_class: "DeepseekV2ForCausalLM",
    gguf_arch: Some("deepseek2"),
    load,
    gguf_modules: deepseek_gguf::GGUF_MODULES,
    gguf_config: Some(deepseek_gguf::config_from_gguf),
    tiny: TinySpec {
        name: "deepseek_v2",
        config_class: "DeepseekV2Config",
        seed: 114,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "num_key_value_heads": 4,
            "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
            "n_routed_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 32, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2,
            "routed_scaling_factor": 1.5, "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "max_position_embeddings": 256,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// What differs between DeepSeek-V2 and V3 in transformers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Softmax scores; `greedy` or `group_limited_greedy` (groups by their best expert);
    /// interleaved rotary pairs.
    V2,
    /// Sigmoid scores, experts chosen with `e_score_correction_bias` added, groups by their best
    /// two (`noaux_tc`), `norm_topk_prob` (default true); rotary pairs interleaved unless
    /// `rope_interleave` is false.
    V3,
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    load_deepseek(ck, config, Version::V2)
}

pub fn load_deepseek(ck: &Checkpoint, config: &Value, version: Version) -> Result<DecoderModel> {
    let (c, shape, inv_freq) = attention_config(config, version)?;
    let layer = layer_loader(ck, config, &c, shape, version)?;
    let layers = (0..c.num_hidden_layers).map(layer).collect::<Result<Vec<_>>>()?;
    // Layers past the model's are DeepSeek-V3's MTP layers, which draft (`mtp.rs`).
    let n = c.num_hidden_layers;
    let layer_of = |name: &str| name.strip_prefix("model.layers.")?.split('.').next()?.parse::<usize>().ok();
    ck.skip(|name| layer_of(name).is_some_and(|i| i >= n));
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size)?;
    let mut m = pre_norm_model(ck, config, &c, embed, layers, shape.qk_rope_head_dim)?;
    m.rope_inv_freqs = vec![inv_freq];
    Ok(m)
}

/// DeepSeek-V3's multi-token-prediction layer, `model.layers.{num_hidden_layers}` (vLLM's
/// `deepseek_mtp.py`): a decoder layer like the model's last, its `enorm`, `hnorm`, `eh_proj`
/// and `shared_head`; the embedding table its own copy or, where not stored, the model's.
pub fn load_deepseek_v3_mtp(ck: &Checkpoint, config: &Value) -> Result<Mtp> {
    let (c, shape, inv_freq) = attention_config(config, Version::V3)?;
    let n = c.num_hidden_layers;
    let p = format!("model.layers.{n}");
    match config.get("num_nextn_predict_layers").and_then(Value::as_u64) {
        Some(1) => {}
        other => return Err(Error::msg(format!("config: num_nextn_predict_layers is {other:?}; MTP needs exactly 1"))),
    }
    if !ck.contains(&format!("{p}.eh_proj.weight")) {
        return Err(Error::msg(format!(
            "the checkpoint has no MTP weights ({p}.eh_proj.weight): use a checkpoint that keeps them, or another method"
        )));
    }
    let layer = layer_loader(ck, config, &c, shape, Version::V3)?(n)?;
    let hidden = c.hidden_size;
    let own_embed = format!("{p}.embed_tokens.weight");
    let embed_name = if ck.contains(&own_embed) { own_embed.as_str() } else { "model.embed_tokens.weight" };
    let embed = ck.matrix(embed_name, c.vocab_size, hidden)?;
    let norm = |name: &str| -> Result<Norm> {
        Ok(Norm::Rms(RmsNorm::load(ck, &format!("{p}.{name}"), hidden, c.rms_norm_eps, 0.0)?))
    };
    let mut block = plain_decoder(ck, config, &c, (embed, vec![layer]), norm("shared_head.norm")?, vec![inv_freq])?;
    let own_head = format!("{p}.shared_head.head.weight");
    if ck.contains(&own_head) {
        block.lm_head = ck.matrix(&own_head, c.vocab_size, hidden)?.for_matmul();
    }
    Ok(Mtp {
        enorm: norm("enorm")?,
        hnorm: norm("hnorm")?,
        eh_proj: Linear::load(ck, &format!("{p}.eh_proj"), hidden, 2 * hidden, false)?,
        block,
        mask_position_0: true,
        chain: Chain::PreNorm,
    })
}

/// The config, the latent-attention shape and the rotary frequencies (YaRN-scaled where the
/// config says so; the shape's softmax scale and rotary factor follow).
fn attention_config(config: &Value, version: Version) -> Result<(CommonConfig, MlaShape, Vec<f32>)> {
    let mut c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let scaling = c.rope_scaling.take().filter(|s| !s.is_null());
    c.validate()?;
    let mut shape = mla::shape_from_config(config, c.num_attention_heads)?;
    if version == Version::V3 {
        shape.rope_interleaved = config.get("rope_interleave").and_then(Value::as_bool).unwrap_or(true);
    }
    let inv_freq = match scaling {
        None => ops::rope_inv_freq(c.rope_theta, shape.qk_rope_head_dim),
        Some(s) if s.get("rope_type").or(s.get("type")).and_then(Value::as_str) == Some("yarn") => {
            let y = Yarn::from_params(&s, c.rope_theta, shape.qk_rope_head_dim)?;
            shape.scale *= y.softmax_scale;
            shape.rope_factor = y.attention_factor;
            y.inv_freq
        }
        Some(s) => return Err(Error::msg(format!("config: rope_scaling {s} is not supported (only yarn)"))),
    };
    Ok((c, shape, inv_freq))
}

/// Loads decoder layer `i`: latent attention and the layer's feed-forward block.
fn layer_loader<'a>(
    ck: &'a Checkpoint,
    config: &Value,
    c: &'a CommonConfig,
    shape: MlaShape,
    version: Version,
) -> Result<impl Fn(usize) -> Result<DecoderLayer> + 'a> {
    let ffn = feed_forward(ck, config, c.hidden_size, version)?;
    Ok(move |i: usize| {
        let p = format!("model.layers.{i}");
        let mla = MlaAttention::load(ck, &format!("{p}.self_attn"), c.hidden_size, shape)?;
        pre_norm_layer(ck, &p, c, Mixer::Mla(mla), ffn(i, &p, Activation::Silu)?)
    })
}

/// Layer `i`'s feed-forward block: dense below `first_k_dense_replace`, else the routed experts
/// with DeepSeek's routing and the shared experts.
fn feed_forward<'a>(
    ck: &'a Checkpoint,
    config: &Value,
    hidden: usize,
    version: Version,
) -> Result<impl Fn(usize, &str, Activation) -> Result<FeedForward> + 'a> {
    let get = |k: &str| config.get(k).filter(|v| !v.is_null());
    let uint = |k: &str, default: usize| get(k).map_or(Ok(default), |_| moe::config_usize(config, k));
    if let Some(f) = get("moe_layer_freq").filter(|f| f.as_u64() != Some(1)) {
        return Err(Error::msg(format!("config: moe_layer_freq {f} is not supported (only 1)")));
    }
    if version == Version::V2 && get("norm_topk_prob").and_then(Value::as_bool) == Some(true) {
        return Err(Error::msg("config: norm_topk_prob = true is not supported for DeepSeek-V2"));
    }
    let mut c = MoeConfig::parse(config, version == Version::V3)?;
    c.mlp_only_layers = (0..uint("first_k_dense_replace", 0)?).collect();
    let method = get("topk_method").and_then(Value::as_str);
    let score = match (version, method.unwrap_or(if version == Version::V2 { "greedy" } else { "noaux_tc" })) {
        (Version::V2, "greedy") => None,
        (Version::V2, "group_limited_greedy") => Some(GroupScore::Max),
        (Version::V3, "noaux_tc") => Some(GroupScore::SumTop2),
        (_, other) => return Err(Error::msg(format!("config: topk_method {other:?} is not supported"))),
    };
    let group_limit = score.map(|score| GroupLimit::parse(config, c.num_experts, score)).transpose()?;
    let scale = moe::routed_scaling_factor(config)?;
    let expert_inter = moe::config_usize(config, "moe_intermediate_size")?;
    let shared_inter = expert_inter * uint("n_shared_experts", 0)?;
    let routed =
        moe::layer_ffn(ck, c, MOE_NAMES, hidden, [moe::config_usize(config, "intermediate_size")?, expert_inter]);
    Ok(move |i: usize, prefix: &str, act: Activation| {
        let mut ffn = routed(i, prefix, act)?;
        if let FeedForward::Moe(block) = &mut ffn {
            block.routed_scaling_factor = scale;
            block.group_limit = group_limit;
            if version == Version::V3 {
                block.scoring = Scoring::Sigmoid;
                let n = block.experts.len();
                block.correction_bias = Some(ck.vector(&format!("{prefix}.mlp.gate.e_score_correction_bias"), n)?);
            }
            if shared_inter > 0 {
                let p = format!("{prefix}.mlp");
                block.shared_expert = Some(SharedExpert::load(ck, &p, "shared_experts", hidden, shared_inter, None)?);
            }
        }
        Ok(ffn)
    })
}
