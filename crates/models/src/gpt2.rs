//! `GPT2LMHeadModel`, after transformers' `modeling_gpt2.py`: learned absolute positions,
//! pre-LayerNorm (with bias) layers without rotary embeddings, biases on every projection, a
//! `gelu_new` MLP and a tied head. HF checkpoints store the `Conv1D` weights `[in, out]`; they
//! are transposed at load, and the fused `c_attn` is split into q, k, v by rows.
//! Safetensors only for now.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{
    DecoderLayer, DecoderModel, PositionEmbedding, full_attention, lm_head, load_attention, model_info,
};
use crate::error::{Error, Result};
use crate::layers::{Embedding, Linear};
use crate::mlp::{Activation, FeedForward, Mlp};
use crate::norm::{LayerNorm, Norm};
use serde::Deserialize;
use serde_json::Value;

pub const GPT2: ArchSpec = ArchSpec {
    hf_class: "GPT2LMHeadModel",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "gpt2",
        config_class: "GPT2Config",
        seed: 108,
        // The shared hidden_size, heads, positions reach GPT2Config through its attribute map.
        config: r#"{"n_layer": 3, "n_inner": 140, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

#[derive(Deserialize)]
struct Gpt2Config {
    vocab_size: usize,
    n_positions: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    #[serde(default)]
    n_inner: Option<usize>,
    #[serde(default = "gelu_new")]
    activation_function: String,
    #[serde(default = "eps")]
    layer_norm_epsilon: f32,
    #[serde(default = "yes")]
    scale_attn_weights: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn gelu_new() -> String {
    "gelu_new".into()
}
fn eps() -> f32 {
    1e-5
}
fn yes() -> bool {
    true
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let g: Gpt2Config = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    if !g.scale_attn_weights || g.scale_attn_by_inverse_layer_idx {
        return Err(Error::msg(
            "config: scale_attn_weights = false / scale_attn_by_inverse_layer_idx is not supported",
        ));
    }
    let act = Activation::parse(&g.activation_function).ok_or_else(|| {
        Error::msg(format!("config: activation_function {:?} is not supported", g.activation_function))
    })?;
    if g.n_head == 0 || !g.n_embd.is_multiple_of(g.n_head) {
        return Err(Error::msg(format!("config: n_embd ({}) must be a multiple of n_head ({})", g.n_embd, g.n_head)));
    }
    let (hidden, inner) = (g.n_embd, g.n_inner.unwrap_or(4 * g.n_embd));
    let c = CommonConfig {
        hidden_size: hidden,
        intermediate_size: inner,
        num_hidden_layers: g.n_layer,
        num_attention_heads: g.n_head,
        num_key_value_heads: None,
        head_dim: None,
        vocab_size: g.vocab_size,
        max_position_embeddings: g.n_positions,
        rms_norm_eps: g.layer_norm_epsilon,
        rope_theta: 0.0,
        tie_word_embeddings: g.tie_word_embeddings,
        rope_scaling: None,
    };
    let ck = &to_hf_layout(ck, &g)?;
    let norm = |name: &str| LayerNorm::load(ck, name, hidden, g.layer_norm_epsilon).map(Norm::Layer);
    let hd = c.head_dim();
    let mut layers = Vec::with_capacity(g.n_layer);
    for i in 0..g.n_layer {
        let p = format!("transformer.h.{i}");
        let params = full_attention(g.n_head, g.n_head, hd);
        layers.push(DecoderLayer {
            input_norm: norm(&format!("{p}.ln_1"))?,
            self_attn: load_attention(ck, &format!("{p}.attn"), hidden, params, (true, true), [None, None], false)?
                .into(),
            post_attn_norm: None,
            pre_mlp_norm: norm(&format!("{p}.ln_2"))?,
            mlp: FeedForward::Plain(Mlp {
                fc1: Linear::load(ck, &format!("{p}.mlp.c_fc"), inner, hidden, true)?,
                fc2: Linear::load(ck, &format!("{p}.mlp.c_proj"), hidden, inner, true)?,
                act,
            }),
            post_mlp_norm: None,
            rope: 0,
        });
    }
    let embed = ck.matrix("transformer.wte.weight", g.vocab_size, hidden)?;
    Ok(DecoderModel {
        info: model_info(config, &c, &layers)?,
        lm_head: lm_head(ck, &c, &embed)?,
        embed_tokens: Embedding { weight: embed },
        embed_scale: 1.0,
        embed_positions: Some(PositionEmbedding {
            weight: ck.matrix("transformer.wpe.weight", g.n_positions, hidden)?,
            offset: 0,
        }),
        layers,
        norm: norm("transformer.ln_f")?,
        final_logit_softcap: None,
        logit_scale: 1.0,
        rope_inv_freqs: vec![vec![]],
    })
}

/// The checkpoint with every `Conv1D` weight as `[out, in]`, `c_attn` split into
/// `{q,k,v}_proj` (weights and biases) and the attention's `c_proj` named `o_proj`.
fn to_hf_layout(ck: &Checkpoint, g: &Gpt2Config) -> Result<Checkpoint> {
    let mut ck = ck.clone();
    let h = g.n_embd;
    for i in 0..g.n_layer {
        let (a, m) = (format!("transformer.h.{i}.attn"), format!("transformer.h.{i}.mlp"));
        for w in [format!("{a}.c_attn"), format!("{a}.c_proj"), format!("{m}.c_fc"), format!("{m}.c_proj")] {
            ck.transpose(&format!("{w}.weight"))?;
        }
        for suffix in ["weight", "bias"] {
            let parts = ["q_proj", "k_proj", "v_proj"].map(|n| (format!("{a}.{n}.{suffix}"), h));
            ck.split_rows(&format!("{a}.c_attn.{suffix}"), &parts)?;
            ck.rename(&format!("{a}.c_proj.{suffix}"), &format!("{a}.o_proj.{suffix}"))?;
        }
    }
    Ok(ck)
}
