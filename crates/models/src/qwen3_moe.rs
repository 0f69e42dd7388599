//! `Qwen3MoeForCausalLM`, after transformers' `modeling_qwen3_moe.py`: Qwen3's attention (per-head
//! q/k RMSNorm) with the sparse MoE block (softmax over all experts, top-k, renormalized when
//! `norm_topk_prob`) on the layers `decoder_sparse_step` and `mlp_only_layers` make sparse, a
//! dense SwiGLU MLP on the others. llama.cpp's `qwen3moe` always renormalizes.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::llama::{self, Variant};
use crate::mlp::{Activation, FeedForward};
use crate::moe::{self, MOE_NAMES, MoeConfig};
use serde_json::Value;

pub const QWEN3_MOE: ArchSpec = ArchSpec {
    hf_class: "Qwen3MoeForCausalLM",
    gguf_arch: Some("qwen3moe"),
    load,
    gguf_modules: &[],
    gguf_config: Some(|g, c| moe::config_from_gguf(g, c, true)),
    tiny: TinySpec {
        name: "qwen3_moe",
        config_class: "Qwen3MoeConfig",
        seed: 110,
        config: r#"{"num_hidden_layers": 2, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "norm_topk_prob": true, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let variant = Variant { qk_norm: true, ..Default::default() };
    llama::load_with(ck, config, variant, qwen_moe_ffn(ck, config)?)
}

/// The feed-forward builder of the Qwen MoE families: experts `moe_intermediate_size` wide on
/// the sparse layers, a dense MLP `intermediate_size` wide on the others.
pub fn qwen_moe_ffn<'a>(
    ck: &'a Checkpoint,
    config: &Value,
) -> Result<impl Fn(usize, &str, Activation) -> Result<FeedForward> + 'a> {
    let c = MoeConfig::parse(config, false)?;
    let inter = [moe::config_usize(config, "intermediate_size")?, moe::config_usize(config, "moe_intermediate_size")?];
    let hidden = moe::config_usize(config, "hidden_size")?;
    Ok(moe::layer_ffn(ck, c, MOE_NAMES, hidden, inter))
}
