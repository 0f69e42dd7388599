//! `OlmoeForCausalLM`, after transformers' `modeling_olmoe.py`: Llama's layer with RMSNorm over
//! the whole Q and K projections (not per head) and the sparse MoE block on every layer
//! (experts `intermediate_size` wide, top-k not renormalized unless `norm_topk_prob`).

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::{Error, Result};
use crate::llama::{self, Variant};
use crate::moe::{self, MOE_NAMES, MoeConfig};
use serde_json::Value;

pub const OLMOE: ArchSpec = ArchSpec {
    hf_class: "OlmoeForCausalLM",
    gguf_arch: Some("olmoe"),
    load,
    gguf_modules: &[],
    gguf_config: Some(|g, c| moe::config_from_gguf(g, c, false)),
    tiny: TinySpec {
        name: "olmoe",
        config_class: "OlmoeConfig",
        seed: 112,
        config: r#"{"num_hidden_layers": 2, "intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 30000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    if let Some(clip) = config.get("clip_qkv").filter(|v| !v.is_null()) {
        return Err(Error::msg(format!("config: clip_qkv {clip} is not supported")));
    }
    let c = MoeConfig::parse(config, false)?;
    let inter = moe::config_usize(config, "intermediate_size")?;
    let hidden = moe::config_usize(config, "hidden_size")?;
    let variant = Variant { qk_norm_whole: true, ..Default::default() };
    llama::load_with(ck, config, variant, moe::layer_ffn(ck, c, MOE_NAMES, hidden, [inter, inter]))
}
