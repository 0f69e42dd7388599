//! One [`ArchSpec`] per architecture, declared in the architecture's own file: its HF class,
//! its GGUF name, how GGUF tensor names and metadata map to HF ones, and the tiny random
//! config its parity test runs on. The registry, the error messages, the GGUF loader and the
//! golden scripts all read these specs (the scripts through `scripts/tiny_models.json`, which
//! `tests/arch_specs.rs` keeps equal to them).

use crate::checkpoint::Checkpoint;
use crate::decoder::DecoderModel;
use crate::error::Result;
use crate::gguf::GgufFile;
use serde_json::Value;

pub struct ArchSpec {
    /// Hugging Face class name (`architectures[0]` in config.json).
    pub hf_class: &'static str,
    /// llama.cpp's `general.architecture`, where GGUF files of this architecture are read.
    pub gguf_arch: Option<&'static str>,
    /// Builds the model from a checkpoint under HF tensor names and an HF-style config.
    pub load: fn(&Checkpoint, &Value) -> Result<DecoderModel>,
    /// GGUF per-layer module names that mean something else here than in [`GGUF_LAYER_MODULES`]
    /// (consulted first).
    pub gguf_modules: &'static [(&'static str, &'static str)],
    /// Config keys GGUF metadata does not store, added after the common translation
    /// ([`crate::config::config_from_gguf`]).
    pub gguf_config: Option<fn(&GgufFile, &mut Value) -> Result<()>>,
    /// The tiny random checkpoint of the parity tests.
    pub tiny: TinySpec,
}

/// How `scripts/make_tiny_models.py` makes the tiny checkpoint (`tests/data/tiny/<name>`).
pub struct TinySpec {
    /// Directory and golden name.
    pub name: &'static str,
    /// transformers' config class.
    pub config_class: &'static str,
    pub seed: u64,
    /// Config keyword arguments over [`TINY_COMMON`], as a JSON object.
    pub config: &'static str,
    /// What the random norm weights are centred on: 1, or 0 where the checkpoint stores the
    /// `w` of `(1 + w)` (Gemma).
    pub norm_center: f32,
    /// Embeddings drawn `sqrt(hidden_size)` times smaller, for models that multiply them by it
    /// (Gemma): else the residual stream is all input embedding and a tied head echoes it.
    pub scaled_embed: bool,
}

/// Config keyword arguments every tiny checkpoint shares (initializer_range is the weight std
/// the script draws with).
pub const TINY_COMMON: &str = r#"{"vocab_size": 320, "hidden_size": 64, "intermediate_size": 140,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
 "initializer_range": 0.15, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}"#;

/// llama.cpp's per-layer module names (`blk.N.<module>.<weight|bias>`) for the llama family.
pub const GGUF_LAYER_MODULES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    // Mixture of experts: one 3-D tensor `[experts, out, in]` per projection.
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_exps", "mlp.experts.gate_proj"),
    ("ffn_up_exps", "mlp.experts.up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
    // The shared expert beside them, and its gate (Qwen2-MoE, Qwen3.5-MoE).
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
];

impl ArchSpec {
    /// `blk.N.attn_q.weight` → `model.layers.N.self_attn.q_proj.weight`, etc.
    pub fn hf_tensor_name(&self, gguf: &str) -> Option<String> {
        let top = match gguf {
            "token_embd.weight" => Some("model.embed_tokens.weight"),
            // LFM2's final norm (llama.cpp names it after the embedding it follows in the file).
            "token_embd_norm.weight" => Some("model.embedding_norm.weight"),
            "output_norm.weight" => Some("model.norm.weight"),
            "output.weight" => Some("lm_head.weight"),
            // Llama 3's rotary scaling as per-frequency divisors (read by `llama.rs`).
            "rope_freqs.weight" => Some("rope_freqs.weight"),
            _ => None,
        };
        if let Some(t) = top {
            return Some(t.to_string());
        }
        let rest = gguf.strip_prefix("blk.")?;
        let (layer, rest) = rest.split_once('.')?;
        layer.parse::<usize>().ok()?;
        // A whole name the spec maps (`ssm_dt.bias`, or a tensor without a suffix: `ssm_a`).
        if let Some((_, hf)) = self.gguf_modules.iter().find(|(g, _)| *g == rest) {
            return Some(format!("model.layers.{layer}.{hf}"));
        }
        let (module, suffix) = rest.rsplit_once('.')?;
        let (_, hf) = self.gguf_modules.iter().chain(GGUF_LAYER_MODULES).find(|(g, _)| *g == module)?;
        Some(format!("model.layers.{layer}.{hf}.{suffix}"))
    }
}
