//! `Gemma2ForCausalLM`, after transformers' `modeling_gemma2.py`: Gemma 3's layer (four
//! `(1 + w)` RMSNorms, GELU-tanh MLP, `query_pre_attn_scalar`, scaled embeddings) without the
//! q/k norms, one rotary base for all layers, sliding windows on alternate layers, and tanh
//! soft-capping of the attention scores and of the final logits. Safetensors only for now.

use crate::arch::{ArchSpec, TinySpec};
use crate::gemma3::{GemmaVariant, load_gemma};

pub const GEMMA2: ArchSpec = ArchSpec {
    hf_class: "Gemma2ForCausalLM",
    gguf_arch: None,
    load: |ck, c| load_gemma(ck, c, GemmaVariant { qk_norm: false, local_rope: false, default_pattern: 2 }),
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "gemma2",
        config_class: "Gemma2Config",
        seed: 106,
        config: r#"{"num_hidden_layers": 4, "head_dim": 32, "query_pre_attn_scalar": 24, "sliding_window": 8,
            "final_logit_softcapping": 1.0, "attn_logit_softcapping": 5.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": true, "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}"#,
        norm_center: 0.0,
        scaled_embed: true,
    },
};
