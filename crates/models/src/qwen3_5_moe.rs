//! `Qwen3_5MoeForCausalLM`, the text model of Qwen3.5/3.6's mixture-of-experts releases
//! (35B-A3B, 122B-A10B, 397B-A17B), after transformers' `modeling_qwen3_5_moe.py`: Qwen3.5's
//! hybrid of gated delta-net and gated attention layers (`qwen3_5.rs`), with a sparse block on
//! every layer — softmax router, top-k renormalized, plus a shared expert scaled by
//! `σ(shared_expert_gate · x)`.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::mlp::FeedForward;
use crate::moe::{self, MOE_NAMES, MoeConfig, SharedExpert, SparseMoe};
use crate::mtp::Mtp;
use serde_json::Value;

pub const QWEN3_5_MOE: ArchSpec = ArchSpec {
    hf_class: "Qwen3_5MoeForCausalLM",
    gguf_arch: Some("qwen35moe"),
    load,
    gguf_modules: crate::qwen3_5::GGUF_MODULES,
    gguf_config: Some(|g, c| {
        crate::qwen3_5::config_from_gguf(g, c)?;
        moe::config_from_gguf(g, c, true)
    }),
    tiny: TinySpec {
        name: "qwen3_5_moe",
        config_class: "Qwen3_5MoeTextConfig",
        seed: 131,
        config: r#"{"num_hidden_layers": 3, "head_dim": 32, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"],
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1], "mrope_interleaved": true}}"#,
        norm_center: 0.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    crate::qwen3_5::load_with(ck, config, experts(ck, config)?)
}

/// The multi-token-prediction layer of a Qwen3.5-MoE checkpoint (experts like every layer's).
pub fn load_mtp(ck: &Checkpoint, config: &Value) -> Result<Mtp> {
    crate::qwen3_5::mtp_with(ck, config, experts(ck, config)?)
}

/// A layer's routed experts, which always renormalize their top-k weights, and shared expert.
fn experts<'a>(ck: &'a Checkpoint, config: &Value) -> Result<impl Fn(usize, &str) -> Result<FeedForward> + 'a> {
    let c = MoeConfig::parse(config, true)?;
    let hidden = moe::config_usize(config, "hidden_size")?;
    let inter = moe::config_usize(config, "moe_intermediate_size")?;
    let shared_inter = moe::config_usize(config, "shared_expert_intermediate_size")?;
    Ok(move |_: usize, prefix: &str| {
        let mut block = SparseMoe::load(ck, prefix, MOE_NAMES, &c, hidden, inter)?;
        let p = format!("{prefix}.mlp");
        block.shared_expert =
            Some(SharedExpert::load(ck, &p, "shared_expert", hidden, shared_inter, Some("shared_expert_gate"))?);
        Ok(FeedForward::Moe(Box::new(block)))
    })
}
