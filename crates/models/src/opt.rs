//! `OPTForCausalLM`, after transformers' `modeling_opt.py`: learned absolute positions read two
//! rows further on (OPT's offset of 2), pre-LayerNorm layers without rotary embeddings, biases
//! on every projection, a ReLU MLP and a tied head. Post-norm checkpoints
//! (`do_layer_norm_before = false`, opt-350m) and a `word_embed_proj_dim` other than
//! `hidden_size` (project_in/out) are refused with a config error. Safetensors only.

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

pub const OPT: ArchSpec = ArchSpec {
    hf_class: "OPTForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "opt",
        config_class: "OPTConfig",
        seed: 109,
        config: r#"{"num_hidden_layers": 3, "ffn_dim": 140, "word_embed_proj_dim": 64, "do_layer_norm_before": true,
            "enable_bias": true, "activation_function": "relu", "tie_word_embeddings": true}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// Rows of the position table before position 0.
const POSITION_OFFSET: usize = 2;

/// torch's `nn.LayerNorm` default, which OPT uses.
const LAYER_NORM_EPS: f32 = 1e-5;

#[derive(Deserialize)]
struct OptConfig {
    vocab_size: usize,
    hidden_size: usize,
    ffn_dim: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    max_position_embeddings: usize,
    #[serde(default)]
    word_embed_proj_dim: Option<usize>,
    #[serde(default = "yes")]
    do_layer_norm_before: bool,
    #[serde(default)]
    _remove_final_layer_norm: bool,
    #[serde(default = "yes")]
    enable_bias: bool,
    #[serde(default = "yes")]
    layer_norm_elementwise_affine: bool,
    #[serde(default = "relu")]
    activation_function: String,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn yes() -> bool {
    true
}
fn relu() -> String {
    "relu".into()
}

/// Rejects the OPT variants this file does not build, naming the key.
fn check(o: &OptConfig) -> Result<()> {
    let refuse = |what: String| Err(Error::msg(format!("config: {what} is not supported")));
    if let Some(d) = o.word_embed_proj_dim.filter(|&d| d != o.hidden_size) {
        return refuse(format!("word_embed_proj_dim {d} != hidden_size {} (project_in/out)", o.hidden_size));
    }
    if !o.do_layer_norm_before || o._remove_final_layer_norm {
        return refuse("do_layer_norm_before = false (post-norm OPT) or _remove_final_layer_norm".into());
    }
    if !o.enable_bias || !o.layer_norm_elementwise_affine {
        return refuse("enable_bias = false or layer_norm_elementwise_affine = false".into());
    }
    if o.num_attention_heads == 0 || !o.hidden_size.is_multiple_of(o.num_attention_heads) {
        return refuse(format!("hidden_size {} over num_attention_heads {}", o.hidden_size, o.num_attention_heads));
    }
    Ok(())
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let o: OptConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    check(&o)?;
    let act = Activation::parse(&o.activation_function).ok_or_else(|| {
        Error::msg(format!("config: activation_function {:?} is not supported", o.activation_function))
    })?;
    let hidden = o.hidden_size;
    let c = CommonConfig {
        hidden_size: hidden,
        intermediate_size: o.ffn_dim,
        num_hidden_layers: o.num_hidden_layers,
        num_attention_heads: o.num_attention_heads,
        num_key_value_heads: None,
        head_dim: None,
        vocab_size: o.vocab_size,
        max_position_embeddings: o.max_position_embeddings,
        rms_norm_eps: LAYER_NORM_EPS,
        rope_theta: 0.0,
        tie_word_embeddings: o.tie_word_embeddings,
        rope_scaling: None,
    };
    let mut ck = ck.clone();
    let norm = |ck: &Checkpoint, name: &str| LayerNorm::load(ck, name, hidden, LAYER_NORM_EPS).map(Norm::Layer);
    let hd = c.head_dim();
    let mut layers = Vec::with_capacity(o.num_hidden_layers);
    for i in 0..o.num_hidden_layers {
        let p = format!("model.decoder.layers.{i}");
        for suffix in ["weight", "bias"] {
            ck.rename(&format!("{p}.self_attn.out_proj.{suffix}"), &format!("{p}.self_attn.o_proj.{suffix}"))?;
        }
        let params = full_attention(o.num_attention_heads, o.num_attention_heads, hd);
        let ck = &ck;
        layers.push(DecoderLayer {
            input_norm: norm(ck, &format!("{p}.self_attn_layer_norm"))?,
            self_attn: load_attention(
                ck,
                &format!("{p}.self_attn"),
                hidden,
                params,
                (true, true),
                [None, None],
                false,
            )?
            .into(),
            post_attn_norm: None,
            pre_mlp_norm: norm(ck, &format!("{p}.final_layer_norm"))?,
            mlp: FeedForward::Plain(Mlp {
                fc1: Linear::load(ck, &format!("{p}.fc1"), o.ffn_dim, hidden, true)?,
                fc2: Linear::load(ck, &format!("{p}.fc2"), hidden, o.ffn_dim, true)?,
                act,
            }),
            post_mlp_norm: None,
            rope: 0,
        });
    }
    let embed = ck.matrix("model.decoder.embed_tokens.weight", o.vocab_size, hidden)?;
    let positions = o.max_position_embeddings + POSITION_OFFSET;
    Ok(DecoderModel {
        info: model_info(config, &c, &layers)?,
        lm_head: lm_head(&ck, &c, &embed)?,
        embed_tokens: Embedding { weight: embed },
        embed_scale: 1.0,
        embed_positions: Some(PositionEmbedding {
            weight: ck.matrix("model.decoder.embed_positions.weight", positions, hidden)?,
            offset: POSITION_OFFSET,
        }),
        layers,
        norm: norm(&ck, "model.decoder.final_layer_norm")?,
        final_logit_softcap: None,
        logit_scale: 1.0,
        rope_inv_freqs: vec![vec![]],
    })
}
