//! `MixtralForCausalLM`, after transformers' `modeling_mixtral.py`: Mistral's layer (a sliding
//! window when the config sets one) with the sparse MoE block on every layer, its modules named
//! `block_sparse_moe.{gate, experts.N.w1 (gate), w3 (up), w2 (down)}`; the top-k probabilities
//! are always renormalized. llama.cpp converts Mixtral to its `llama` architecture (Q/K rows
//! permuted, `*_exps` tensors under llama's names), so a Mixtral GGUF reaches this loader through
//! the llama spec when it has experts.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::{Checkpoint, Format};
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::llama::{self, Variant};
use crate::mistral::apply_sliding_window;
use crate::moe::{self, MOE_NAMES, MoeConfig, MoeNames};
use serde_json::Value;

pub const MIXTRAL: ArchSpec = ArchSpec {
    hf_class: "MixtralForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "mixtral",
        config_class: "MixtralConfig",
        seed: 111,
        config: r#"{"num_hidden_layers": 2, "intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 2,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

const HF_NAMES: MoeNames = MoeNames { block: "block_sparse_moe", proj: ["w1", "w3", "w2"] };

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let c = MoeConfig::parse(config, true)?;
    let inter = moe::config_usize(config, "intermediate_size")?;
    let hidden = moe::config_usize(config, "hidden_size")?;
    let names = if ck.format == Format::Gguf { MOE_NAMES } else { HF_NAMES };
    let variant = Variant { gguf_qk_permuted: true, ..Default::default() };
    let mut m = llama::load_with(ck, config, variant, moe::layer_ffn(ck, c, names, hidden, [inter, inter]))?;
    apply_sliding_window(&mut m, config);
    Ok(m)
}
