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
    let mut c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let scaling = c.rope_scaling.take().filter(|s| !s.is_null());
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
    let mut m = pre_norm_model(ck, config, &c, embed, layers, hd)?;
    m.rope_inv_freqs = vec![rope_inv_freq(ck, &c, scaling.as_ref(), hd)?];
    Ok(m)
}

/// The rotary frequencies: `rope_theta`'s, rescaled as Llama 3.1 does (`rope_type: llama3`), or
/// divided by a GGUF's `rope_freqs` (llama.cpp's form of the same scaling).
pub fn rope_inv_freq(ck: &Checkpoint, c: &CommonConfig, scaling: Option<&Value>, dim: usize) -> Result<Vec<f32>> {
    let mut inv_freq = ops::rope_inv_freq(c.rope_theta, dim);
    if ck.contains("rope_freqs.weight") {
        let factors = ck.vector("rope_freqs.weight", dim / 2)?;
        inv_freq.iter_mut().zip(factors).for_each(|(f, d)| *f /= d);
    }
    match scaling {
        None => Ok(inv_freq),
        Some(s) if s.get("rope_type").or(s.get("type")).and_then(Value::as_str) == Some("llama3") => {
            llama3_scaling(&mut inv_freq, s)?;
            Ok(inv_freq)
        }
        Some(s) => {
            let kind = s.get("rope_type").or(s.get("type"));
            Err(Error::msg(format!("config: rope_scaling {kind:?} is not supported yet (default and llama3 are)")))
        }
    }
}

/// transformers' `_compute_llama3_parameters`: wavelengths shorter than
/// `original_max_position_embeddings / high_freq_factor` keep their frequency, those longer than
/// `.. / low_freq_factor` are slowed by `factor`, and those between are blended.
fn llama3_scaling(inv_freq: &mut [f32], s: &Value) -> Result<()> {
    let get = |k: &str| {
        s.get(k).and_then(Value::as_f64).ok_or_else(|| Error::msg(format!("config: rope_scaling (llama3) needs {k}")))
    };
    let (factor, low, high) = (get("factor")?, get("low_freq_factor")?, get("high_freq_factor")?);
    let old_len = get("original_max_position_embeddings")?;
    if factor <= 0.0 || high <= low {
        return Err(Error::msg(
            "config: rope_scaling (llama3) needs factor > 0 and high_freq_factor > low_freq_factor",
        ));
    }
    let (low_wavelen, high_wavelen) = (old_len / low, old_len / high);
    for f in inv_freq {
        let freq = *f as f64;
        let wavelen = 2.0 * std::f64::consts::PI / freq;
        *f = if wavelen < high_wavelen {
            freq
        } else if wavelen > low_wavelen {
            freq / factor
        } else {
            let smooth = (old_len / wavelen - low) / (high - low);
            (1.0 - smooth) * freq / factor + smooth * freq
        } as f32;
    }
    Ok(())
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
