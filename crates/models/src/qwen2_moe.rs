//! `Qwen2MoeForCausalLM`, after transformers' `modeling_qwen2_moe.py`: Qwen2's attention (QKV
//! bias) with the sparse MoE block plus a shared expert every token runs through, scaled by
//! `sigmoid(shared_expert_gate · x)`, on the layers `decoder_sparse_step` and `mlp_only_layers`
//! make sparse; a dense SwiGLU MLP on the others.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::llama::{self, Variant};
use crate::mlp::FeedForward;
use crate::moe::{self, SharedExpert};
use crate::qwen3_moe::qwen_moe_ffn;
use serde_json::Value;

pub const QWEN2_MOE: ArchSpec = ArchSpec {
    hf_class: "Qwen2MoeForCausalLM",
    gguf_arch: Some("qwen2moe"),
    load,
    gguf_modules: &[],
    gguf_config: Some(|g, c| moe::config_from_gguf(g, c, false)),
    tiny: TinySpec {
        name: "qwen2_moe",
        config_class: "Qwen2MoeConfig",
        seed: 113,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "mlp_only_layers": [1],
            "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let routed = qwen_moe_ffn(ck, config)?;
    let shared_inter = moe::config_usize(config, "shared_expert_intermediate_size")?;
    let hidden = moe::config_usize(config, "hidden_size")?;
    let variant = Variant { qkv_bias: true, ..Default::default() };
    llama::load_with(ck, config, variant, |i, prefix, act| {
        let mut ffn = routed(i, prefix, act)?;
        if let FeedForward::Moe(block) = &mut ffn {
            let p = format!("{prefix}.mlp");
            block.shared_expert =
                Some(SharedExpert::load(ck, &p, "shared_expert", hidden, shared_inter, Some("shared_expert_gate"))?);
        }
        Ok(ffn)
    })
}
