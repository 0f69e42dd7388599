//! Checkpoint loading, model configs, layers and the supported architectures.

pub mod arch;
pub mod batch;
pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod deepseek_v2;
pub mod deepseek_v3;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod layers;
pub mod llama;
pub mod mistral;
pub mod mixtral;
pub mod mla;
pub mod mlp;
pub mod model;
pub mod moe;
pub mod norm;
pub mod olmoe;
pub mod opt;
pub mod phi3;
pub mod qwen2_moe;
pub mod qwen3_moe;
pub mod registry;
pub mod yarn;

// The file formats live below models and frontend; re-exported under their old paths.
pub use vllm_rs_formats::{error, gguf};

pub use batch::{ForwardBatch, GroupBatch};
pub use error::{Error, Result};
pub use model::{ForwardInput, Model, ModelInfo, Workspace};

use checkpoint::Checkpoint;
use gguf::GgufFile;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// A model ready to run, with the metadata the frontend needs (tokenizer, chat template).
pub struct LoadedModel {
    pub model: Box<dyn Model>,
    /// `config.json`, or its translation from GGUF metadata.
    pub config: Value,
    /// The GGUF file, when loaded from one (its metadata holds the tokenizer).
    pub gguf: Option<Arc<GgufFile>>,
}

/// Loads an HF model directory or a `.gguf` file.
pub fn load(path: &Path) -> Result<LoadedModel> {
    if path.is_dir() {
        let config = config::read_config(path)?;
        let arch = config::architecture(&config).map_err(|e| Error::file(&path.join("config.json"), e.to_string()))?;
        // Check the architecture before touching weights, so the error is about what matters.
        registry::check(&arch).map_err(|e| Error::file(&path.join("config.json"), e.to_string()))?;
        let ck = Checkpoint::from_safetensors_dir(path)?;
        let model = registry::build(&arch, &ck, &config).map_err(|e| in_file(e, &path.join("config.json")))?;
        Ok(LoadedModel { model, config, gguf: None })
    } else if path.is_file() {
        let g = Arc::new(GgufFile::open(path)?);
        let config = config::config_from_gguf(&g)?;
        let arch = config::architecture(&config)?;
        let ck = Checkpoint::from_gguf(&g)?;
        let model = registry::build(&arch, &ck, &config).map_err(|e| in_file(e, path))?;
        Ok(LoadedModel { model, config, gguf: Some(g) })
    } else {
        Err(Error::file(path, "no such file or directory"))
    }
}

/// Config errors raised while building a model (`config: missing field …`) name no file; they
/// come from `file` (config.json, or the GGUF whose metadata became the config).
fn in_file(e: Error, file: &Path) -> Error {
    match e {
        Error::Msg(msg) => Error::file(file, msg),
        e => e,
    }
}
