//! `Gemma3ForCausalLM` (text-only Gemma 3), after transformers' `modeling_gemma3.py`.
//!
//! Differences from Llama: embeddings scaled by `sqrt(hidden_size)`; four RMSNorms per layer
//! with `(1 + w)` weights; q/k RMSNorm; GELU-tanh MLP; attention scale from
//! `query_pre_attn_scalar`; sliding-window layers (with their own RoPE base) interleaved with
//! global ones. [`load_gemma`] also builds Gemma 2 (`gemma2.rs`), which lacks the q/k norms and
//! the local rotary base.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::{Checkpoint, Format};
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, lm_head, load_attention, model_info};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::{Embedding, RmsNorm};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::norm::Norm;
use serde::Deserialize;
use serde_json::{Value, json};
use vllm_rs_kernels::attention::AttentionParams;
use vllm_rs_kernels::ops;

pub const GEMMA3: ArchSpec = ArchSpec {
    hf_class: "Gemma3ForCausalLM",
    gguf_arch: Some("gemma3"),
    load,
    gguf_modules: GEMMA_GGUF_MODULES,
    gguf_config: Some(gguf_config),
    tiny: TinySpec {
        name: "gemma3",
        config_class: "Gemma3TextConfig",
        seed: 104,
        config: r#"{"num_hidden_layers": 4, "head_dim": 32, "query_pre_attn_scalar": 24, "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
            "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}"#,
        norm_center: 0.0,
        scaled_embed: true,
    },
};

/// Gemma's four norms in llama.cpp's names (`ffn_norm` is the pre-MLP norm, not llama's
/// post-attention one).
pub const GEMMA_GGUF_MODULES: &[(&str, &str)] = &[
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
];

/// What a Gemma 3 GGUF does not store; llama.cpp hard-codes the same for gemma3.
fn gguf_config(g: &GgufFile, c: &mut Value) -> Result<()> {
    let layers = c["num_hidden_layers"].as_u64().unwrap_or(0);
    let layer_types: Vec<&str> =
        (0..layers).map(|i| if (i + 1) % 6 == 0 { "full_attention" } else { "sliding_attention" }).collect();
    c["sliding_window"] = json!(g.get_u64("gemma3.attention.sliding_window"));
    c["layer_types"] = json!(layer_types);
    c["rope_local_base_freq"] = json!(10000.0);
    c["query_pre_attn_scalar"] = c["head_dim"].clone();
    c["hidden_activation"] = json!("gelu_pytorch_tanh");
    Ok(())
}

#[derive(Deserialize)]
struct GemmaExtra {
    #[serde(default = "gelu_tanh")]
    hidden_activation: String,
    query_pre_attn_scalar: f32,
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default, alias = "_sliding_window_pattern")]
    sliding_window_pattern: Option<usize>,
    #[serde(default = "local_base")]
    rope_local_base_freq: f32,
    #[serde(default)]
    final_logit_softcapping: Option<f32>,
    #[serde(default)]
    attn_logit_softcapping: Option<f32>,
    #[serde(default)]
    attention_bias: bool,
}

fn gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn local_base() -> f32 {
    10000.0
}

/// What differs between Gemma 2 and Gemma 3 (this loader builds both).
#[derive(Clone, Copy, Debug)]
pub struct GemmaVariant {
    /// Per-head RMSNorm on Q and K (Gemma 3).
    pub qk_norm: bool,
    /// Sliding layers rotate with `rope_local_base_freq` (Gemma 3); else every layer uses
    /// `rope_theta`.
    pub local_rope: bool,
    /// Every this-many-th layer is global when the config lists no `layer_types`.
    pub default_pattern: usize,
}

const GEMMA3_VARIANT: GemmaVariant = GemmaVariant { qk_norm: true, local_rope: true, default_pattern: 6 };

/// Rotary tables of the model: global layers use 0, sliding ones 1 (if `local_rope`).
const ROPE_GLOBAL: usize = 0;
const ROPE_LOCAL: usize = 1;

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    load_gemma(ck, config, GEMMA3_VARIANT)
}

pub fn load_gemma(ck: &Checkpoint, config: &Value, v: GemmaVariant) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let x: GemmaExtra = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let act = Activation::parse(&x.hidden_activation)
        .filter(|a| *a == Activation::GeluTanh)
        .ok_or_else(|| Error::msg(format!("config: hidden_activation {:?} is not supported", x.hidden_activation)))?;
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    // GGUF stores Gemma norms as `1 + w` already.
    let offset = if ck.format == Format::Gguf { 0.0 } else { 1.0 };
    let norm = |name: &str, dim: usize| RmsNorm::load(ck, name, dim, eps, offset);
    let sliding = |i: usize| match &x.layer_types {
        Some(t) => t.get(i).is_some_and(|t| t == "sliding_attention"),
        None => !(i + 1).is_multiple_of(x.sliding_window_pattern.unwrap_or(v.default_pattern)),
    };
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        let params = AttentionParams {
            num_heads: c.num_attention_heads,
            num_kv_heads: c.num_kv_heads(),
            head_dim: hd,
            scale: 1.0 / x.query_pre_attn_scalar.sqrt(),
            sliding_window: if sliding(i) { x.sliding_window } else { None },
            softcap: x.attn_logit_softcapping,
            sinks: None,
        };
        let qk_norm = |name: &str| v.qk_norm.then(|| norm(&format!("{a}.{name}"), hd)).transpose();
        let qk_norms = [qk_norm("q_norm")?, qk_norm("k_norm")?];
        let bias = (x.attention_bias, x.attention_bias);
        let self_attn = load_attention(ck, &a, hidden, params, bias, qk_norms, false)?;
        let n = |name: &str| norm(&format!("{p}.{name}"), hidden).map(Norm::Rms);
        layers.push(DecoderLayer {
            input_norm: n("input_layernorm")?,
            self_attn: self_attn.into(),
            post_attn_norm: Some(n("post_attention_layernorm")?),
            pre_mlp_norm: n("pre_feedforward_layernorm")?,
            mlp: FeedForward::Gated(GatedMlp::load(ck, &format!("{p}.mlp"), hidden, c.intermediate_size, act)?),
            post_mlp_norm: Some(n("post_feedforward_layernorm")?),
            rope: if sliding(i) && v.local_rope { ROPE_LOCAL } else { ROPE_GLOBAL },
        });
    }
    Ok(DecoderModel {
        info: model_info(config, &c, &layers)?,
        lm_head: lm_head(ck, &c, &embed)?,
        embed_tokens: Embedding { weight: embed },
        // transformers casts sqrt(hidden_size) to the compute dtype (f32 here).
        embed_scale: (hidden as f64).sqrt() as f32,
        embed_positions: None,
        layers,
        norm: Norm::Rms(norm("model.norm", hidden)?),
        final_logit_softcap: x.final_logit_softcapping,
        logit_scale: 1.0,
        rope_inv_freqs: if v.local_rope {
            vec![ops::rope_inv_freq(c.rope_theta, hd), ops::rope_inv_freq(x.rope_local_base_freq, hd)]
        } else {
            vec![ops::rope_inv_freq(c.rope_theta, hd)]
        },
    })
}
