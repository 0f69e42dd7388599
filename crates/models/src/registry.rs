//! Architectures by Hugging Face class name. Adding one: its file, one line here, one parity test.

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::llama::Variant;
use crate::model::Model;
use crate::{gemma3, llama};
use serde_json::Value;

type Loader = fn(&Checkpoint, &Value) -> Result<Box<dyn Model>>;

const REGISTRY: &[(&str, Loader)] = &[
    ("LlamaForCausalLM", |ck, c| {
        Ok(Box::new(llama::load(ck, c, Variant { gguf_qk_permuted: true, ..Default::default() })?))
    }),
    ("Qwen2ForCausalLM", |ck, c| Ok(Box::new(llama::load(ck, c, Variant { qkv_bias: true, ..Default::default() })?))),
    ("Qwen3ForCausalLM", |ck, c| Ok(Box::new(llama::load(ck, c, Variant { qk_norm: true, ..Default::default() })?))),
    ("Gemma3ForCausalLM", |ck, c| Ok(Box::new(gemma3::load(ck, c)?))),
];

/// The supported class names, for error messages and `--help`.
pub fn supported() -> Vec<&'static str> {
    REGISTRY.iter().map(|(n, _)| *n).collect()
}

/// Builds the model named by `architecture` from the checkpoint.
pub fn build(architecture: &str, ck: &Checkpoint, config: &Value) -> Result<Box<dyn Model>> {
    let (_, load) = REGISTRY.iter().find(|(n, _)| *n == architecture).ok_or_else(|| unsupported(architecture))?;
    load(ck, config)
}

/// Checks an architecture name before any weights are read.
pub fn check(architecture: &str) -> Result<()> {
    if supported().contains(&architecture) { Ok(()) } else { Err(unsupported(architecture)) }
}

fn unsupported(architecture: &str) -> Error {
    Error::msg(format!("architecture {architecture} is not supported; supported: {}", supported().join(", ")))
}
