//! `Lfm2ForCausalLM` (Liquid's LFM2), after transformers' `modeling_lfm2.py`: a hybrid of gated
//! short-convolution layers (`layer_types[i] = "conv"`, see `short_conv.rs`) and attention with
//! per-head q/k RMSNorm; a SwiGLU feed-forward block (`w1`, `w3`, `w2`) on every layer, its width
//! adjusted from `intermediate_size` as transformers does; the final norm is `embedding_norm`.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::RmsNorm;
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::norm::Norm;
use crate::short_conv::ShortConv;
use serde_json::Value;
use vllm_rs_kernels::ops;

pub const LFM2: ArchSpec = ArchSpec {
    hf_class: "Lfm2ForCausalLM",
    gguf_arch: Some("lfm2"),
    load,
    gguf_modules: &[
        ("attn_norm", "operator_norm"),
        ("ffn_norm", "ffn_norm"),
        ("attn_q_norm", "self_attn.q_layernorm"),
        ("attn_k_norm", "self_attn.k_layernorm"),
        ("shortconv.in_proj", "conv.in_proj"),
        ("shortconv.conv", "conv.conv"),
        ("shortconv.out_proj", "conv.out_proj"),
    ],
    gguf_config: Some(config_from_gguf),
    tiny: TinySpec {
        name: "lfm2",
        config_class: "Lfm2Config",
        seed: 133,
        config: r#"{"num_hidden_layers": 4, "norm_eps": 1e-5, "tie_word_embeddings": true, "conv_bias": false,
            "conv_L_cache": 3, "layer_types": ["conv", "full_attention", "conv", "conv"],
            "intermediate_size": 192, "block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0,
            "block_auto_adjust_ff_dim": true,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// llama.cpp's `lfm2` metadata: a KV head count per layer (0 for convolution layers), the
/// convolution's taps, and the feed-forward width already adjusted.
fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let kv = crate::config::gguf_per_layer(g, "lfm2.attention.head_count_kv")?;
    c["layer_types"] = kv.iter().map(|&n| if n == 0 { "conv" } else { "full_attention" }).collect();
    c["num_key_value_heads"] = kv.iter().copied().max().unwrap_or(0).into();
    c["conv_L_cache"] = g.require_u64("lfm2.shortconv.l_cache")?.into();
    c["block_auto_adjust_ff_dim"] = false.into();
    c["norm_eps"] = c["rms_norm_eps"].clone();
    Ok(())
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let mut config = config.clone();
    config["rms_norm_eps"] = config.get("norm_eps").cloned().unwrap_or(1e-5.into());
    config["intermediate_size"] = ffn_width(&config)?.into();
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let kernel = config["conv_L_cache"].as_u64().unwrap_or(3) as usize;
    let conv_bias = config["conv_bias"].as_bool().unwrap_or(false);
    if kernel < 2 {
        return Err(Error::msg(format!("config: conv_L_cache {kernel} must be at least 2")));
    }
    let mut ck = ck.clone();
    let norm = |ck: &Checkpoint, name: &str, dim: usize| RmsNorm::load(ck, name, dim, eps, 0.0);
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for (i, kind) in layer_types(&config, c.num_hidden_layers)?.iter().enumerate() {
        let p = format!("model.layers.{i}");
        for (from, to) in [
            ("feed_forward.w1", "mlp.gate_proj"),
            ("feed_forward.w3", "mlp.up_proj"),
            ("feed_forward.w2", "mlp.down_proj"),
            ("self_attn.out_proj", "self_attn.o_proj"),
        ] {
            let from = format!("{p}.{from}.weight");
            if ck.contains(&from) {
                ck.rename(&from, &format!("{p}.{to}.weight"))?;
            }
        }
        let mixer = if *kind == "conv" {
            Mixer::ShortConv(ShortConv::load(&ck, &format!("{p}.conv"), hidden, kernel, conv_bias)?)
        } else {
            let a = format!("{p}.self_attn");
            let qk =
                [Some(norm(&ck, &format!("{a}.q_layernorm"), hd)?), Some(norm(&ck, &format!("{a}.k_layernorm"), hd)?)];
            let params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
            Mixer::Attention(load_attention(&ck, &a, hidden, params, (false, false), qk, false)?)
        };
        layers.push(DecoderLayer {
            input_norm: Norm::Rms(norm(&ck, &format!("{p}.operator_norm"), hidden)?),
            self_attn: mixer,
            post_attn_norm: None,
            pre_mlp_norm: Norm::Rms(norm(&ck, &format!("{p}.ffn_norm"), hidden)?),
            mlp: FeedForward::Gated(GatedMlp::load(
                &ck,
                &format!("{p}.mlp"),
                hidden,
                c.intermediate_size,
                Activation::Silu,
            )?),
            post_mlp_norm: None,
            rope: 0,
        });
    }
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    plain_decoder(
        &ck,
        &config,
        &c,
        (embed, layers),
        Norm::Rms(norm(&ck, "model.embedding_norm", hidden)?),
        vec![ops::rope_inv_freq(c.rope_theta, hd)],
    )
}

/// The feed-forward width transformers' `Lfm2MLP` derives: with `block_auto_adjust_ff_dim`,
/// two thirds of `intermediate_size` (`block_ff_dim` in older configs), times
/// `block_ffn_dim_multiplier`, rounded up to `block_multiple_of`.
fn ffn_width(config: &Value) -> Result<usize> {
    let size = config
        .get("block_ff_dim")
        .or(config.get("intermediate_size"))
        .and_then(Value::as_u64)
        .ok_or_else(|| Error::msg("config: missing field `intermediate_size`"))? as usize;
    if !config["block_auto_adjust_ff_dim"].as_bool().unwrap_or(true) {
        return Ok(size);
    }
    let mut width = 2 * size / 3;
    if let Some(m) = config.get("block_ffn_dim_multiplier").and_then(Value::as_f64) {
        let multiple = config["block_multiple_of"].as_u64().unwrap_or(256).max(1) as usize;
        width = ((m * width as f64) as usize).div_ceil(multiple) * multiple;
    }
    Ok(width)
}

/// `layer_types` ("conv" / "full_attention"), or `full_attn_idxs` naming the attention layers.
fn layer_types(config: &Value, n: usize) -> Result<Vec<&str>> {
    let types: Vec<&str> = match (config["layer_types"].as_array(), config["full_attn_idxs"].as_array()) {
        (Some(list), _) => list.iter().map(|t| t.as_str().unwrap_or("?")).collect(),
        (None, Some(idx)) => {
            let full: Vec<u64> = idx.iter().filter_map(Value::as_u64).collect();
            (0..n as u64).map(|i| if full.contains(&i) { "full_attention" } else { "conv" }).collect()
        }
        (None, None) => vec!["full_attention"; n],
    };
    if types.len() != n {
        return Err(Error::msg(format!("config: layer_types has {} entries for {n} layers", types.len())));
    }
    if let Some(bad) = types.iter().find(|t| !matches!(**t, "conv" | "full_attention")) {
        return Err(Error::msg(format!("config: layer type {bad:?} is not one of \"conv\", \"full_attention\"")));
    }
    Ok(types)
}
