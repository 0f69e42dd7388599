//! `ModernBertModel` and `ModernBertForSequenceClassification` (transformers'
//! `modeling_modernbert.py`): a pre-norm encoder without learned positions or token types.
//! Token embeddings → LayerNorm; each layer `h += Wo(attn(rope(Wqkv(attn_norm(h)))))` (no
//! `attn_norm` in layer 0), `h += Wo(act(input) · gate)` with `input, gate = Wi(mlp_norm(h))`;
//! a final LayerNorm. Every `global_attn_every_n_layers`-th layer (from 0) attends to the whole
//! sequence with the global rotary base, the others within `local_attention / 2` tokens either
//! side with the local base. Biases of the norms, attention, MLP and head are each optional.

use crate::checkpoint::Checkpoint;
use crate::classifier::{SequenceClassifier, labels};
use crate::encoder::{EncoderConfig, EncoderLayer, EncoderModel, NormPlacement, Positions, tensor_prefix};
use crate::error::{Error, Result};
use crate::layers::{Embedding, Linear};
use crate::mlp::Activation;
use crate::norm::LayerNorm;
use crate::pooling::PoolingType;
use crate::pooling_model::PoolingInfo;
use serde::Deserialize;
use serde_json::Value;
use vllm_rs_kernels::ops::rope_inv_freq;

/// The bare encoder; `ModernBertForMaskedLM` (answerdotai/ModernBERT-base) holds it under
/// `model.` (its LM head is not loaded); with a sequence classification head.
pub const CLASSES: [&str; 3] = ["ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification"];

/// The config fields beyond [`EncoderConfig`]'s, with transformers' defaults. Hub checkpoints
/// carry `global_rope_theta` / `local_rope_theta` / `global_attn_every_n_layers`; transformers 5
/// writes `rope_parameters` per layer type (lifted by `config::read_config` into `rope_theta`
/// and `rope_local_base_freq`) and `layer_types`. Like transformers, the newer fields win.
#[derive(Deserialize)]
struct ModernBertConfig {
    #[serde(default)]
    norm_bias: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default)]
    classifier_bias: bool,
    #[serde(default = "gelu")]
    classifier_activation: String,
    #[serde(default = "cls")]
    classifier_pooling: String,
    #[serde(default = "local_attention")]
    local_attention: usize,
    #[serde(default = "every_third")]
    global_attn_every_n_layers: usize,
    layer_types: Option<Vec<String>>,
    rope_theta: Option<f32>,
    global_rope_theta: Option<f32>,
    rope_local_base_freq: Option<f32>,
    local_rope_theta: Option<f32>,
    rope_scaling: Option<Value>,
}

fn gelu() -> String {
    "gelu".into()
}
fn cls() -> String {
    "cls".into()
}
fn local_attention() -> usize {
    128
}
fn every_third() -> usize {
    3
}

/// Both configs of a ModernBERT folder: the shared encoder fields and its own.
fn parse(config: &Value) -> Result<(EncoderConfig, ModernBertConfig)> {
    // ModernBERT names two shared fields otherwise, and its norms default to torch's eps.
    let mut shared = config.clone();
    shared["hidden_act"] = config.get("hidden_activation").cloned().unwrap_or_else(|| gelu().into());
    shared["layer_norm_eps"] = config.get("norm_eps").cloned().unwrap_or_else(|| 1e-5.into());
    let c = EncoderConfig::parse(&shared)?;
    let m: ModernBertConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    Ok((c, m))
}

/// Whether each layer is a local (sliding window) one.
fn local_layers(c: &EncoderConfig, m: &ModernBertConfig) -> Result<Vec<bool>> {
    let Some(types) = &m.layer_types else {
        if m.global_attn_every_n_layers == 0 {
            return Err(Error::msg("config: global_attn_every_n_layers must be positive"));
        }
        return Ok((0..c.num_hidden_layers).map(|i| !i.is_multiple_of(m.global_attn_every_n_layers)).collect());
    };
    if types.len() != c.num_hidden_layers {
        return Err(Error::msg(format!(
            "config: layer_types lists {} layers, num_hidden_layers is {}",
            types.len(),
            c.num_hidden_layers
        )));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "full_attention" => Ok(false),
            "sliding_attention" => Ok(true),
            other => Err(Error::msg(format!("config: layer type {other:?} is not supported"))),
        })
        .collect()
}

/// The rotary bases of the global and the local layers.
fn rope_bases(m: &ModernBertConfig) -> (f32, f32) {
    (
        m.rope_theta.or(m.global_rope_theta).unwrap_or(160_000.0),
        m.rope_local_base_freq.or(m.local_rope_theta).unwrap_or(10_000.0),
    )
}

/// Loads the encoder, from tensors under `model.` (saved with a head) or at the top.
pub fn load(ck: &mut Checkpoint, config: &Value, architecture: &str) -> Result<EncoderModel> {
    let (c, m) = parse(config)?;
    if m.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(Error::msg("config: ModernBERT with rope scaling is not supported (only the default rotary)"));
    }
    let attention = c.attention();
    if !attention.head_dim.is_multiple_of(2) {
        return Err(Error::msg(format!("config: head_dim {} must be even for rotary embeddings", attention.head_dim)));
    }
    let local = local_layers(&c, &m)?;
    let (global_theta, local_theta) = rope_bases(&m);
    let prefix = tensor_prefix(ck, &["model."], "embeddings.tok_embeddings.weight");
    let (d, inter, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
    let norm = |ck: &Checkpoint, name: &str| LayerNorm::load_with(ck, &format!("{prefix}{name}"), d, eps, m.norm_bias);
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for (i, &is_local) in local.iter().enumerate() {
        let l = format!("{prefix}layers.{i}.");
        // The fused projections, split as if stored apart: Wqkv is q, k, v stacked (heads in
        // order within each); Wi is the activated half, then the gate.
        split(ck, &format!("{l}attn.Wqkv"), &["q", "k", "v"], d, m.attention_bias)?;
        split(ck, &format!("{l}mlp.Wi"), &["input", "gate"], inter, m.mlp_bias)?;
        let lin = |ck: &Checkpoint, name: &str, out, inp, bias| Linear::load(ck, &format!("{l}{name}"), out, inp, bias);
        layers.push(EncoderLayer {
            q: lin(ck, "attn.Wqkv.q", d, d, m.attention_bias)?,
            k: lin(ck, "attn.Wqkv.k", d, d, m.attention_bias)?,
            v: lin(ck, "attn.Wqkv.v", d, d, m.attention_bias)?,
            o: lin(ck, "attn.Wo", d, d, m.attention_bias)?,
            attn_norm: if i == 0 { None } else { Some(norm(ck, &format!("layers.{i}.attn_norm"))?) },
            up: lin(ck, "mlp.Wi.input", inter, d, m.mlp_bias)?,
            gate: Some(lin(ck, "mlp.Wi.gate", inter, d, m.mlp_bias)?),
            down: lin(ck, "mlp.Wo", d, inter, m.mlp_bias)?,
            ffn_norm: norm(ck, &format!("layers.{i}.mlp_norm"))?,
            // transformers' mask for local layers is `|i - j| <= local_attention // 2`.
            window: is_local.then_some(m.local_attention / 2),
            rope: Some(usize::from(is_local)), // `rotary` below: global, then local
        });
    }
    Ok(EncoderModel {
        info: PoolingInfo {
            architecture: architecture.to_string(),
            hidden_size: d,
            vocab_size: c.vocab_size,
            max_position_embeddings: c.max_position_embeddings,
        },
        word_embeddings: Embedding {
            weight: ck.matrix(&format!("{prefix}embeddings.tok_embeddings.weight"), c.vocab_size, d)?,
        },
        position_embeddings: None,
        positions: Positions::Absolute,
        token_type: None,
        embed_norm: norm(ck, "embeddings.norm")?,
        norms: NormPlacement::Pre,
        layers,
        attention,
        act: c.activation()?,
        relative_bias: None,
        rotary: vec![rope_inv_freq(global_theta, attention.head_dim), rope_inv_freq(local_theta, attention.head_dim)],
        final_norm: Some(norm(ck, "final_norm")?),
    })
}

/// Splits `{fused}.weight` (and `{fused}.bias`) into equal row blocks `{fused}.{part}.*`.
fn split(ck: &mut Checkpoint, fused: &str, parts: &[&str], rows: usize, bias: bool) -> Result<()> {
    for (suffix, present) in [("weight", true), ("bias", bias)] {
        if present {
            let pieces: Vec<(String, usize)> = parts.iter().map(|p| (format!("{fused}.{p}.{suffix}"), rows)).collect();
            ck.split_rows(&format!("{fused}.{suffix}"), &pieces)?;
        }
    }
    Ok(())
}

/// `ModernBertForSequenceClassification`'s head: the `classifier_pooling` of the last hidden
/// states → `head.dense` → `classifier_activation` → `head.norm` → `classifier` (which always
/// has a bias: `classifier_bias` is the dense layer's).
pub fn head(ck: &Checkpoint, config: &Value, hidden: usize) -> Result<SequenceClassifier> {
    let (c, m) = parse(config)?;
    let pooling = match m.classifier_pooling.as_str() {
        "cls" => PoolingType::Cls,
        "mean" => PoolingType::Mean,
        other => return Err(Error::msg(format!("config: classifier_pooling {other:?} is not supported (cls, mean)"))),
    };
    let act = Activation::parse(&m.classifier_activation).ok_or_else(|| {
        Error::msg(format!("config: classifier_activation {:?} is not supported", m.classifier_activation))
    })?;
    let labels = labels(config)?;
    Ok(SequenceClassifier {
        pooling,
        dense: Linear::load(ck, "head.dense", hidden, hidden, m.classifier_bias)?,
        act,
        norm: Some(LayerNorm::load_with(ck, "head.norm", hidden, c.layer_norm_eps, m.norm_bias)?),
        out: Linear::load(ck, "classifier", labels.len(), hidden, true)?,
        labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Value {
        let mut c = serde_json::json!({
            "hidden_size": 8, "num_hidden_layers": 7, "num_attention_heads": 2, "intermediate_size": 12,
            "vocab_size": 10, "max_position_embeddings": 16,
        });
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        c
    }

    #[test]
    fn local_layers_from_either_config_form() {
        // Hub form: every 3rd layer from 0 is global.
        let (c, m) = parse(&config(serde_json::json!({"global_attn_every_n_layers": 3}))).unwrap();
        assert_eq!(local_layers(&c, &m).unwrap(), [false, true, true, false, true, true, false]);
        // transformers 5: the list wins.
        let types = ["sliding_attention", "full_attention"].repeat(4)[..7].to_vec();
        let (c, m) =
            parse(&config(serde_json::json!({"global_attn_every_n_layers": 3, "layer_types": types}))).unwrap();
        assert_eq!(local_layers(&c, &m).unwrap(), [true, false, true, false, true, false, true]);
        let (c, m) = parse(&config(serde_json::json!({"layer_types": ["full_attention"]}))).unwrap();
        assert!(local_layers(&c, &m).unwrap_err().to_string().contains("lists 1 layers"));
    }

    #[test]
    fn rope_bases_from_either_config_form() {
        let (_, m) = parse(&config(serde_json::json!({}))).unwrap();
        assert_eq!(rope_bases(&m), (160_000.0, 10_000.0));
        let (_, m) = parse(&config(serde_json::json!({"global_rope_theta": 8e4, "local_rope_theta": 2e4}))).unwrap();
        assert_eq!(rope_bases(&m), (8e4, 2e4));
        let mut v = config(serde_json::json!({"global_rope_theta": 8e4, "rope_parameters": {
            "full_attention": {"rope_theta": 5e4, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 3e3, "rope_type": "default"},
        }}));
        crate::config::lift_rope_parameters(&mut v);
        let (_, m) = parse(&v).unwrap();
        assert_eq!(rope_bases(&m), (5e4, 3e3));
    }

    #[test]
    fn shared_fields_take_modernbert_names_and_defaults() {
        let (c, _) = parse(&config(serde_json::json!({}))).unwrap();
        assert_eq!((c.hidden_act.as_str(), c.layer_norm_eps), ("gelu", 1e-5));
        let (c, _) =
            parse(&config(serde_json::json!({"hidden_activation": "gelu_pytorch_tanh", "norm_eps": 1e-6}))).unwrap();
        assert_eq!((c.hidden_act.as_str(), c.layer_norm_eps), ("gelu_pytorch_tanh", 1e-6));
    }
}
