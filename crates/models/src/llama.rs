//! `LlamaForCausalLM` and its close relatives (Qwen2 adds QKV bias, Qwen3 adds q/k RMSNorm).
//!
//! Mirrors transformers' `modeling_llama.py`: pre-norm decoder layers with rotary attention and a
//! SwiGLU MLP, a final RMSNorm and an (optionally tied) `lm_head`.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::{Checkpoint, Format};
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::RmsNorm;
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::norm::Norm;
use serde::Deserialize;
use serde_json::Value;
use vllm_rs_kernels::attention::AttentionParams;
use vllm_rs_kernels::{Weight, ops};

pub const LLAMA: ArchSpec = ArchSpec {
    hf_class: "LlamaForCausalLM",
    gguf_arch: Some("llama"),
    load: |ck, c| load(ck, c, Variant { gguf_qk_permuted: true, ..Default::default() }),
    gguf_modules: &[],
    gguf_config: Some(mixtral_from_gguf),
    tiny: TinySpec {
        name: "llama",
        config_class: "LlamaConfig",
        seed: 101,
        config: r#"{"num_hidden_layers": 3, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 50000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

pub const QWEN2: ArchSpec = ArchSpec {
    hf_class: "Qwen2ForCausalLM",
    gguf_arch: Some("qwen2"),
    load: |ck, c| load(ck, c, Variant { qkv_bias: true, ..Default::default() }),
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "qwen2",
        config_class: "Qwen2Config",
        seed: 102,
        config: r#"{"num_hidden_layers": 3, "num_key_value_heads": 1, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": true, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

pub const QWEN3: ArchSpec = ArchSpec {
    hf_class: "Qwen3ForCausalLM",
    gguf_arch: Some("qwen3"),
    load: |ck, c| load(ck, c, Variant { qk_norm: true, ..Default::default() }),
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "qwen3",
        config_class: "Qwen3Config",
        seed: 103,
        config: r#"{"num_hidden_layers": 3, "head_dim": 32, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// llama.cpp writes Mixtral as `llama` with experts: such a file loads as `MixtralForCausalLM`.
fn mixtral_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    if g.get_u64("llama.expert_count").is_some_and(|n| n > 0) {
        c["architectures"] = serde_json::json!([crate::mixtral::MIXTRAL.hf_class]);
        crate::moe::config_from_gguf(g, c, true)?;
    }
    Ok(())
}

/// What distinguishes the members of the family.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant {
    /// Q/K/V projections have biases (Qwen2 always; Llama when `attention_bias`).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3).
    pub qk_norm: bool,
    /// RMSNorm over the whole Q and K projections instead, across heads (OLMoE).
    pub qk_norm_whole: bool,
    /// llama.cpp stores this architecture's Q/K rows permuted so RoPE pairs are adjacent
    /// (true for llama only); we then rotate interleaved pairs instead of copying the weights.
    pub gguf_qk_permuted: bool,
}

#[derive(Deserialize)]
struct LlamaExtra {
    #[serde(default = "silu")]
    hidden_act: String,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
}

fn silu() -> String {
    "silu".into()
}

pub fn load(ck: &Checkpoint, config: &Value, variant: Variant) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let inter = c.intermediate_size;
    load_with(ck, config, variant, |_, prefix, act| {
        Ok(FeedForward::Gated(GatedMlp::load(ck, &format!("{prefix}.mlp"), c.hidden_size, inter, act)?))
    })
}

/// [`load`] with each layer's feed-forward block built by `mlp(layer, its prefix, activation)`
/// (the mixture-of-experts families).
pub fn load_with(
    ck: &Checkpoint,
    config: &Value,
    mut variant: Variant,
    mlp: impl Fn(usize, &str, Activation) -> Result<FeedForward>,
) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let extra: LlamaExtra = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    if extra.mlp_bias {
        return Err(Error::msg("config: mlp_bias = true is not supported"));
    }
    let act = Activation::parse(&extra.hidden_act)
        .filter(|a| *a == Activation::Silu)
        .ok_or_else(|| Error::msg(format!("config: hidden_act {:?} is not supported", extra.hidden_act)))?;
    variant.qkv_bias |= extra.attention_bias;
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let norm = |name: &str, dim: usize| RmsNorm::load(ck, name, dim, eps, 0.0);
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        let qk_norm = |name: &str, heads: usize| {
            let dim = if variant.qk_norm_whole { heads * hd } else { hd };
            (variant.qk_norm || variant.qk_norm_whole).then(|| norm(&format!("{a}.{name}"), dim)).transpose()
        };
        let params = AttentionParams {
            num_heads: c.num_attention_heads,
            num_kv_heads: c.num_kv_heads(),
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            sliding_window: None,
            softcap: None,
            sinks: None,
        };
        let qk_norms = [qk_norm("q_norm", c.num_attention_heads)?, qk_norm("k_norm", c.num_kv_heads())?];
        let interleaved = ck.format == Format::Gguf && variant.gguf_qk_permuted;
        let bias = (variant.qkv_bias, extra.attention_bias);
        let self_attn = load_attention(ck, &a, hidden, params, bias, qk_norms, interleaved)?;
        layers.push(pre_norm_layer(ck, &p, &c, self_attn.into(), mlp(i, &p, act)?)?);
    }
    pre_norm_model(ck, config, &c, embed, layers, hd)
}

/// A Llama-style layer: RMSNorms `{prefix}.input_layernorm` before the mixer and
/// `{prefix}.post_attention_layernorm` before the feed-forward block.
pub fn pre_norm_layer(
    ck: &Checkpoint,
    prefix: &str,
    c: &CommonConfig,
    mixer: Mixer,
    mlp: FeedForward,
) -> Result<DecoderLayer> {
    let norm = |name: &str| RmsNorm::load(ck, &format!("{prefix}.{name}"), c.hidden_size, c.rms_norm_eps, 0.0);
    Ok(DecoderLayer {
        input_norm: Norm::Rms(norm("input_layernorm")?),
        self_attn: mixer,
        post_attn_norm: None,
        pre_mlp_norm: Norm::Rms(norm("post_attention_layernorm")?),
        mlp,
        post_mlp_norm: None,
        rope: 0,
    })
}

/// A Llama-style model around `layers`: unscaled embeddings, the RMSNorm `model.norm`, the
/// (optionally tied) head, one rotary table over `rope_dim`.
pub fn pre_norm_model(
    ck: &Checkpoint,
    config: &Value,
    c: &CommonConfig,
    embed: Weight,
    layers: Vec<DecoderLayer>,
    rope_dim: usize,
) -> Result<DecoderModel> {
    let norm = Norm::Rms(RmsNorm::load(ck, "model.norm", c.hidden_size, c.rms_norm_eps, 0.0)?);
    plain_decoder(ck, config, c, (embed, layers), norm, vec![ops::rope_inv_freq(c.rope_theta, rope_dim)])
}
