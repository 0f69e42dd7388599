//! Model configuration as Hugging Face's `config.json` spells it.
//!
//! GGUF metadata is translated into the same JSON shape ([`config_from_gguf`]), so each
//! architecture parses one format. Fields every architecture shares live in [`CommonConfig`];
//! the rest each architecture reads from the JSON itself.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::Path;

/// Fields shared by the decoder-only architectures we support.
#[derive(Clone, Debug, Deserialize)]
pub struct CommonConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f32,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f32,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
}

fn default_max_pos() -> usize {
    2048
}
fn default_rope_theta() -> f32 {
    10000.0
}

impl CommonConfig {
    pub fn num_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Rejects shapes the kernels cannot run, with a message naming the field.
    pub fn validate(&self) -> Result<()> {
        let kv = self.num_kv_heads();
        if self.num_attention_heads == 0 || kv == 0 || !self.num_attention_heads.is_multiple_of(kv) {
            return Err(Error::msg(format!(
                "config: num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({kv})",
                self.num_attention_heads
            )));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(Error::msg(format!("config: head_dim {} must be even for rotary embeddings", self.head_dim())));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            let t = self.rope_scaling.as_ref().and_then(|v| v.get("rope_type").or(v.get("type")));
            return Err(Error::msg(format!("config: rope_scaling {t:?} is not supported yet")));
        }
        Ok(())
    }
}

/// Reads `config.json` from a model directory.
pub fn read_config(dir: &Path) -> Result<Value> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::file(&path, format!("cannot read: {e}")))?;
    let mut config = serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("bad JSON: {e}")))?;
    lift_rope_parameters(&mut config);
    Ok(config)
}

/// transformers ≥ 5 writes `rope_parameters` (`{rope_theta, rope_type, …}`, or one such object
/// per layer type for Gemma 3) instead of `rope_theta` / `rope_local_base_freq` / `rope_scaling`.
/// Copies it into those older fields, which the architectures read; like transformers, the new
/// field wins. A non-default `rope_type` becomes `rope_scaling`, which validation rejects.
pub fn lift_rope_parameters(config: &mut Value) {
    let Some(rp) = config.get("rope_parameters").filter(|v| v.is_object()).cloned() else { return };
    let (global, local) = match (rp.get("full_attention"), rp.get("sliding_attention")) {
        (None, None) => (Some(&rp), None),
        (g, l) => (g, l),
    };
    for (params, theta_key) in [(global, "rope_theta"), (local, "rope_local_base_freq")] {
        let Some(params) = params else { continue };
        if let Some(theta) = params.get("rope_theta").filter(|t| t.is_number()) {
            config[theta_key] = theta.clone();
        }
        let kind = params.get("rope_type").and_then(Value::as_str).unwrap_or("default");
        if kind != "default" {
            config["rope_scaling"] = params.clone();
        }
    }
}

/// The HF class name in a config (`architectures[0]`).
pub fn architecture(config: &Value) -> Result<String> {
    config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
        .map(str::to_string)
        .ok_or_else(|| Error::msg("config.json has no \"architectures\" list"))
}

/// A GGUF metadata key holding one count per layer (hybrids: 0 where a layer lacks the part).
pub fn gguf_per_layer(g: &GgufFile, key: &str) -> Result<Vec<u64>> {
    let list = g.get(key).and_then(|v| v.as_array());
    let list = list.ok_or_else(|| Error::msg(format!("metadata key {key} (one per layer) is missing")))?;
    Ok(list.iter().map(|v| v.as_u64().unwrap_or(0)).collect())
}

/// Builds an HF-style config from GGUF metadata (the inverse of llama.cpp's converter).
pub fn config_from_gguf(g: &GgufFile) -> Result<Value> {
    let arch = g.architecture()?;
    let spec = crate::registry::by_gguf_arch(arch).ok_or_else(|| {
        let supported = crate::registry::supported_gguf().join(", ");
        Error::file(&g.path, format!("GGUF architecture {arch:?} is not supported (supported: {supported})"))
    })?;
    let key = |k: &str| format!("{arch}.{k}");
    let req = |k: &str| g.require_u64(&key(k)).map(|v| v as usize);
    // A count per layer in hybrids (0 where a layer has no attention or feed-forward): the
    // largest is the model's.
    let most = |k: &str| {
        let one = g.get_u64(&key(k));
        one.or_else(|| gguf_per_layer(g, &key(k)).ok()?.into_iter().max()).map(|v| v as usize)
    };
    let hidden = req("embedding_length")?;
    let heads = req("attention.head_count")?;
    let kv_heads = most("attention.head_count_kv").unwrap_or(heads);
    let head_dim = g.get_u64(&key("attention.key_length")).map(|v| v as usize).unwrap_or(hidden / heads.max(1));
    let vocab = match g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
        Some(t) => t.len(),
        None => req("vocab_size")?,
    };
    // Nemotron-H's RMSNorms carry the plain `layer_norm_epsilon` key.
    let eps = ["attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"]
        .iter()
        .find_map(|k| g.get_f64(&key(k)))
        .ok_or_else(|| {
            Error::file(&g.path, format!("metadata key {} is missing", key("attention.layer_norm_rms_epsilon")))
        })?;
    let layers = req("block_count")?;
    let mut c = json!({
        "architectures": [spec.hf_class],
        "hidden_size": hidden,
        "intermediate_size": most("feed_forward_length")
            .ok_or_else(|| Error::file(&g.path, format!("metadata key {} is missing", key("feed_forward_length"))))?,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": g.get_u64(&key("context_length")).unwrap_or(2048),
        "rms_norm_eps": eps,
        "rope_theta": g.get_f64(&key("rope.freq_base")).unwrap_or(10000.0),
        "tie_word_embeddings": !g.tensors.contains_key("output.weight"),
        "bos_token_id": g.get_u64("tokenizer.ggml.bos_token_id"),
        "eos_token_id": g.get_u64("tokenizer.ggml.eos_token_id"),
    });
    if let Some(t) = g.get_str(&key("rope.scaling.type")).filter(|t| *t != "none") {
        c["rope_scaling"] = json!({"rope_type": t, "factor": g.get_f64(&key("rope.scaling.factor"))});
    }
    if let Some(quirks) = spec.gguf_config {
        quirks(g, &mut c)?;
    }
    Ok(c)
}

/// A multiplier of the config: a number, 1 when absent or null.
pub fn multiplier(config: &Value, key: &str) -> Result<f32> {
    match config.get(key).filter(|v| !v.is_null()) {
        None => Ok(1.0),
        Some(v) => v.as_f64().map(|f| f as f32).ok_or_else(|| Error::msg(format!("config: {key} must be a number"))),
    }
}
