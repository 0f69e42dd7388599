//! `Phi3ForCausalLM`, after transformers' `modeling_phi3.py`: Mistral's model (a sliding window
//! on every layer when the config sets one) with fused projections: `qkv_proj` is q, k and v
//! stacked by rows, `gate_up_proj` gate then up. They are split by rows at load, so the layers
//! are the Llama ones. Safetensors only for now (llama.cpp's `phi3` is not mapped).

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::DecoderModel;
use crate::error::{Error, Result};
use crate::mistral::MISTRAL;
use serde_json::Value;

pub const PHI3: ArchSpec = ArchSpec {
    hf_class: "Phi3ForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "phi3",
        config_class: "Phi3Config",
        seed: 107,
        config: r#"{"num_hidden_layers": 3, "sliding_window": 8, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "pad_token_id": 0, "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let partial = config.pointer("/rope_parameters/partial_rotary_factor").and_then(Value::as_f64).unwrap_or(1.0);
    if partial != 1.0 {
        return Err(Error::msg(format!("config: partial_rotary_factor {partial} is not supported")));
    }
    let (q, kv) = (c.num_attention_heads * c.head_dim(), c.num_kv_heads() * c.head_dim());
    let inter = c.intermediate_size;
    let mut ck = ck.clone();
    for i in 0..c.num_hidden_layers {
        let (a, m) = (format!("model.layers.{i}.self_attn"), format!("model.layers.{i}.mlp"));
        split(&mut ck, &a, "qkv_proj", &[("q_proj", q), ("k_proj", kv), ("v_proj", kv)])?;
        split(&mut ck, &m, "gate_up_proj", &[("gate_proj", inter), ("up_proj", inter)])?;
    }
    (MISTRAL.load)(&ck, config)
}

/// Splits `{prefix}.{fused}.weight` by rows into `{prefix}.{part}.weight`s.
fn split(ck: &mut Checkpoint, prefix: &str, fused: &str, parts: &[(&str, usize)]) -> Result<()> {
    let parts: Vec<(String, usize)> = parts.iter().map(|(n, rows)| (format!("{prefix}.{n}.weight"), *rows)).collect();
    ck.split_rows(&format!("{prefix}.{fused}.weight"), &parts)
}
