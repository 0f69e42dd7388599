//! `DeepseekV3ForCausalLM`, after transformers' `modeling_deepseek_v3.py`: DeepSeek-V2's model
//! (`deepseek_v2.rs`: latent attention, dense first layers, shared experts) with V3's router —
//! sigmoid scores, the experts chosen with `e_score_correction_bias` added within the groups
//! whose best two score highest (`noaux_tc`), weighted by their plain scores, renormalized and
//! scaled by `routed_scaling_factor`. The checkpoints' multi-token-prediction layer is not part
//! of the model (nor in transformers); `--speculative-config` method `mtp` drafts with it
//! (`mtp.rs`, loaded by `deepseek_v2::load_deepseek_v3_mtp`). GGUF files of V3 are llama.cpp's `deepseek2`, read by the
//! V2 spec (`deepseek_gguf.rs`), which hands them to this one.

use crate::arch::{ArchSpec, TinySpec};
use crate::deepseek_v2::{Version, load_deepseek};

pub const DEEPSEEK_V3: ArchSpec = ArchSpec {
    hf_class: "DeepseekV3ForCausalLM",
    gguf_arch: None,
    load: |ck, c| load_deepseek(ck, c, Version::V3),
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "deepseek_v3",
        config_class: "DeepseekV3Config",
        seed: 115,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "num_key_value_heads": 4,
            "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
            "n_routed_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 32, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": true,
            "routed_scaling_factor": 2.5, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};
