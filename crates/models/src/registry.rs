//! The supported architectures. Adding one: its file (with its [`ArchSpec`]), one line here,
//! one parity test.

use crate::arch::ArchSpec;
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::model::Model;
use serde_json::Value;

pub const ARCHS: &[&ArchSpec] = &[
    &crate::llama::LLAMA,
    &crate::llama::QWEN2,
    &crate::llama::QWEN3,
    &crate::gemma3::GEMMA3,
    &crate::mistral::MISTRAL,
    &crate::gemma2::GEMMA2,
    &crate::phi3::PHI3,
    &crate::gpt2::GPT2,
    &crate::opt::OPT,
    &crate::qwen3_moe::QWEN3_MOE,
    &crate::mixtral::MIXTRAL,
    &crate::olmoe::OLMOE,
    &crate::qwen2_moe::QWEN2_MOE,
    &crate::deepseek_v2::DEEPSEEK_V2,
    &crate::deepseek_v3::DEEPSEEK_V3,
    &crate::qwen3_5::QWEN3_5,
    &crate::qwen3_5_moe::QWEN3_5_MOE,
    &crate::qwen3_next::QWEN3_NEXT,
    &crate::lfm2::LFM2,
    &crate::nemotron_h::NEMOTRON_H,
    &crate::nemotron_h::NEMOTRON_H_MOE,
    &crate::granite_hybrid::GRANITE_MOE_HYBRID,
    &crate::falcon_h1::FALCON_H1,
    &crate::falcon_h1::FALCON_H1_NORMED,
    &crate::kimi_linear::KIMI_LINEAR,
    &crate::gpt_oss::GPT_OSS,
];

/// Multimodal classes whose text model is served alone (images and video are not supported):
/// `(class, the text model's class, the prefix its weights have in place of "model")`. Their
/// `text_config` is the text model's config.
pub const TEXT_MODELS_OF: &[(&str, &str, &str)] = &[
    ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM", "model.language_model"),
    ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM", "model.language_model"),
];

/// For a multimodal class in [`TEXT_MODELS_OF`]: its text model's config (the `text_config`
/// under the text class's name) and the prefix of the text model's weights.
pub fn text_model_of(config: &Value) -> Option<(Value, &'static str)> {
    let class = config.get("architectures")?.get(0)?.as_str()?;
    let &(_, text_class, prefix) = TEXT_MODELS_OF.iter().find(|(c, _, _)| *c == class)?;
    let mut text = config.get("text_config")?.clone();
    if let Some(tie) = config.get("tie_word_embeddings").filter(|_| text.get("tie_word_embeddings").is_none()) {
        text["tie_word_embeddings"] = tie.clone();
    }
    text["architectures"] = serde_json::json!([text_class]);
    crate::config::lift_rope_parameters(&mut text);
    Some((text, prefix))
}

/// The spec of an HF class name (the first, where a class has variants that load alike).
pub fn by_class(class: &str) -> Option<&'static ArchSpec> {
    ARCHS.iter().copied().find(|a| a.hf_class == class)
}

/// The spec of a GGUF `general.architecture`.
pub fn by_gguf_arch(arch: &str) -> Option<&'static ArchSpec> {
    ARCHS.iter().copied().find(|a| a.gguf_arch == Some(arch))
}

/// The supported class names (multimodal ones for their text model), for error messages and
/// `--help`.
pub fn supported() -> Vec<&'static str> {
    ARCHS.iter().map(|a| a.hf_class).chain(TEXT_MODELS_OF.iter().map(|t| t.0)).collect()
}

/// The GGUF architectures read, for error messages.
pub fn supported_gguf() -> Vec<&'static str> {
    ARCHS.iter().filter_map(|a| a.gguf_arch).collect()
}

/// Builds the model named by `architecture` from the checkpoint.
pub fn build(architecture: &str, ck: &Checkpoint, config: &Value) -> Result<Box<dyn Model>> {
    let spec = by_class(architecture).ok_or_else(|| unsupported(architecture))?;
    Ok(Box::new((spec.load)(ck, config)?))
}

/// Checks an architecture name before any weights are read.
pub fn check(architecture: &str) -> Result<()> {
    by_class(architecture).map(|_| ()).ok_or_else(|| unsupported(architecture))
}

fn unsupported(architecture: &str) -> Error {
    Error::msg(format!("architecture {architecture} is not supported; supported: {}", supported().join(", ")))
}
