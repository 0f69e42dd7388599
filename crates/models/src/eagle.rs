//! EAGLE-1 draft heads (`--speculative-config '{"method": "eagle", "model": HEAD, ...}'`), as
//! vLLM's `llama_eagle.py` runs them, from folders as the EAGLE repo saves them (config
//! `LlamaForCausalLM`, tensors `fc.*` and `layers.N.*`, with or without `model.`).
//!
//! `x = fc([embed(token p+1), hidden p])` (plus `fc.bias` where stored: the EAGLE repo trains
//! one), over the target's final (normed) hidden state and its embedding table, no norms before;
//! then Llama layers, the first without its input norm; no final norm; the target's `lm_head`.
//! Chained steps feed the output back. This is an [`Mtp`] whose norms are identities.

use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, full_attention, load_attention, model_info};
use crate::error::{Error, Result};
use crate::layers::{Embedding, Linear, RmsNorm};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::model::Model;
use crate::mtp::{Chain, Mtp};
use crate::norm::Norm;
use serde_json::Value;
use std::path::Path;

/// The HF classes of EAGLE-1 heads: the EAGLE repo's configs say `LlamaForCausalLM`, vLLM's
/// name for the head is `EagleLlamaForCausalLM`.
pub const CLASSES: [&str; 2] = ["LlamaForCausalLM", "EagleLlamaForCausalLM"];

/// Loads the EAGLE-1 head in folder `path` for `target`.
pub fn load(path: &Path, target: &dyn Model) -> Result<Mtp> {
    let config = crate::config::read_config(path)?;
    let arch = crate::config::architecture(&config)?;
    let file = path.join("config.json");
    if crate::eagle3::CLASSES.contains(&arch.as_str()) {
        return Err(Error::file(&file, format!("{arch} is an EAGLE-3 head: use method eagle3")));
    }
    if !CLASSES.contains(&arch.as_str()) {
        return Err(Error::file(
            &file,
            format!("{arch} is not an EAGLE head ({}); method eagle needs one", CLASSES.join(", ")),
        ));
    }
    let ck = Checkpoint::from_safetensors_dir(path)?;
    build(&ck, &config, target).map_err(|e| crate::in_file(e, &file))
}

fn build(ck: &Checkpoint, config: &Value, target: &dyn Model) -> Result<Mtp> {
    let mut c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let scaling = c.rope_scaling.take().filter(|s| !s.is_null());
    c.validate()?;
    let t = target.info();
    let (hidden, vocab) = (c.hidden_size, t.vocab_size);
    if c.vocab_size != vocab || hidden != t.hidden_size {
        return Err(Error::msg(format!(
            "the head ({} tokens, hidden size {hidden}) does not fit the target ({vocab} tokens, hidden size {}, {}): \
             use the head made for this model",
            c.vocab_size, t.hidden_size, t.architecture
        )));
    }
    let act = config.get("hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if act != "silu" || config.get("mlp_bias").and_then(Value::as_bool) == Some(true) {
        return Err(Error::msg(format!("config: only SiLU MLPs without bias are supported (hidden_act {act:?})")));
    }
    let p = if ck.contains("fc.weight") { "" } else { "model." };
    if !ck.contains(&format!("{p}fc.weight")) {
        return Err(Error::msg("no fc.weight in the checkpoint: not an EAGLE-1 head"));
    }
    let embed = target.embedding().cloned().ok_or_else(|| Error::msg("the target has no embedding table to share"))?;
    let lm_head = target.lm_head().cloned().ok_or_else(|| Error::msg("the target has no lm_head to share"))?;
    let (hd, eps) = (c.head_dim(), c.rms_norm_eps);
    let bias = config.get("attention_bias").and_then(Value::as_bool).unwrap_or(false);
    let norm = |name: &str| RmsNorm::load(ck, name, hidden, eps, 0.0).map(Norm::Rms);
    let layers = (0..c.num_hidden_layers)
        .map(|i| {
            let l = format!("{p}layers.{i}");
            let params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
            let attn =
                load_attention(ck, &format!("{l}.self_attn"), hidden, params, (bias, bias), [None, None], false)?;
            let mlp = GatedMlp::load(ck, &format!("{l}.mlp"), hidden, c.intermediate_size, Activation::Silu)?;
            Ok(DecoderLayer {
                // The EAGLE repo's first layer has none (its input is fc's output).
                input_norm: if i == 0 { Norm::Identity } else { norm(&format!("{l}.input_layernorm"))? },
                self_attn: attn.into(),
                post_attn_norm: None,
                pre_mlp_norm: norm(&format!("{l}.post_attention_layernorm"))?,
                mlp: FeedForward::Gated(mlp),
                post_mlp_norm: None,
                rope: 0,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut info = model_info(config, &c, &layers)?;
    info.architecture = CLASSES[1].to_string();
    let block = DecoderModel {
        info,
        embed_tokens: Embedding { weight: embed },
        embed_scale: 1.0,
        embed_positions: None,
        layers,
        norm: Norm::Identity,
        lm_head,
        final_logit_softcap: None,
        logit_scale: 1.0,
        rope_inv_freqs: vec![crate::llama::rope_inv_freq(ck, &c, scaling.as_ref(), hd)?],
    };
    Ok(Mtp {
        enorm: Norm::Identity,
        hnorm: Norm::Identity,
        eh_proj: Linear::load(ck, &format!("{p}fc"), hidden, 2 * hidden, ck.contains(&format!("{p}fc.bias")))?,
        block,
        mask_position_0: false,
        chain: Chain::Normed,
    })
}
