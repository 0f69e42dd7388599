//! `MistralForCausalLM`: Llama with sliding-window attention on every layer when the config
//! sets `sliding_window` (transformers' `modeling_mistral.py`). llama.cpp converts Mistral to
//! its `llama` architecture, so a Mistral GGUF loads as `LlamaForCausalLM`.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::{DecoderModel, Mixer};
use crate::error::Result;
use crate::llama::{self, Variant};
use serde_json::Value;

pub const MISTRAL: ArchSpec = ArchSpec {
    hf_class: "MistralForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "mistral",
        config_class: "MistralConfig",
        seed: 105,
        config: r#"{"num_hidden_layers": 3, "head_dim": 24, "sliding_window": 8, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": false, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let mut m = llama::load(ck, config, Variant::default())?;
    apply_sliding_window(&mut m, config);
    Ok(m)
}

/// Gives every layer the config's `sliding_window`, if it sets one (Mistral, Mixtral).
pub fn apply_sliding_window(m: &mut DecoderModel, config: &Value) {
    let window = config.get("sliding_window").and_then(Value::as_u64).map(|w| w as usize);
    for layer in &mut m.layers {
        if let Mixer::Attention(a) = &mut layer.self_attn {
            a.params.sliding_window = window;
        }
    }
    m.info.kv_cache_specs = crate::decoder::kv_cache_specs(&m.layers);
}
