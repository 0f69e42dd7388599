//! Checkpoint loading, model configs, layers and the supported architectures.

pub mod arch;
pub mod batch;
pub mod bert;
pub mod checkpoint;
pub mod classifier;
pub mod config;
pub mod decoder;
mod deepseek_gguf;
pub mod deepseek_v2;
pub mod deepseek_v3;
pub mod draft_head;
pub mod eagle;
pub mod eagle3;
pub mod encoder;
pub mod falcon_h1;
pub mod gated_deltanet;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod gpt_oss;
pub mod granite_hybrid;
pub mod kda;
pub mod kimi_linear;
pub mod layers;
pub mod lfm2;
pub mod llama;
pub mod mamba2;
pub mod mistral;
pub mod mixtral;
pub mod mla;
pub mod mlp;
pub mod model;
pub mod modernbert;
pub mod moe;
pub mod mpnet;
pub mod mtp;
pub mod nemotron_h;
pub mod norm;
pub mod olmoe;
pub mod opt;
pub mod phi3;
pub mod pooling;
pub mod pooling_model;
pub mod qwen2_moe;
pub mod qwen3_5;
pub mod qwen3_5_moe;
pub mod qwen3_moe;
pub mod qwen3_next;
pub mod recurrent_state;
pub mod registry;
pub mod short_conv;
pub mod yarn;

// The file formats live below models and frontend; re-exported under their old paths.
pub use vllm_rs_formats::{error, gguf};

pub use batch::{ForwardBatch, GroupBatch};
pub use error::{Error, Result};
pub use model::{ForwardInput, Model, ModelInfo, Workspace};
pub use pooling_model::{Backbone, PoolingInfo, PoolingModel, PoolingWorkspace};

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
    /// Tensors of the checkpoint the model does not use ([`Checkpoint::unread`]; logged).
    pub unread: Vec<String>,
}

/// Loads an HF model directory or a `.gguf` file.
pub fn load(path: &Path) -> Result<LoadedModel> {
    if path.is_dir() {
        let (config, arch, ck) = open_hf_dir(path)?;
        let model = registry::build(&arch, &ck, &config).map_err(|e| in_file(e, &path.join("config.json")))?;
        Ok(LoadedModel { model, config, gguf: None, unread: report_unread(&ck) })
    } else if path.is_file() {
        let g = Arc::new(GgufFile::open(path)?);
        let config = config::config_from_gguf(&g)?;
        let arch = config::architecture(&config)?;
        let ck = Checkpoint::from_gguf(&g)?;
        let model = registry::build(&arch, &ck, &config).map_err(|e| in_file(e, path))?;
        Ok(LoadedModel { model, config, gguf: Some(g), unread: report_unread(&ck) })
    } else {
        Err(Error::file(path, "no such file or directory"))
    }
}

/// The checkpoint's tensors the model left unread, with a warning naming them: vLLM refuses
/// unknown weight names; a checkpoint may hold more than the model (an MTP layer beside it),
/// so here they only warn.
fn report_unread(ck: &Checkpoint) -> Vec<String> {
    let unread = ck.unread();
    if let Some(first) = unread.first() {
        let more = if unread.len() > 1 { format!(" and {} more", unread.len() - 1) } else { String::new() };
        tracing::warn!("{}: {} tensor(s) left unused: {first}{more}", ck.origin.display(), unread.len());
    }
    unread
}

/// An HF model folder's config (its text model's, for the multimodal classes served as text),
/// architecture (supported, checked before any weight is read) and checkpoint.
fn open_hf_dir(path: &Path) -> Result<(Value, String, Checkpoint)> {
    let mut config = config::read_config(path)?;
    let text_model = registry::text_model_of(&config);
    if let Some((text, _)) = &text_model {
        tracing::info!("serving the text model of {}: images and video are not supported", config["architectures"][0]);
        config = text.clone();
    }
    let arch = config::architecture(&config).map_err(|e| Error::file(&path.join("config.json"), e.to_string()))?;
    registry::check(&arch).map_err(|e| Error::file(&path.join("config.json"), e.to_string()))?;
    let mut ck = Checkpoint::from_safetensors_dir(path)?;
    if let Some((_, prefix)) = text_model {
        ck.rename_prefix(prefix, "model");
    }
    Ok((config, arch, ck))
}

/// The encoder classes `load_encoder` builds.
pub fn encoder_classes() -> Vec<&'static str> {
    bert::CLASSES.iter().chain(&mpnet::CLASSES).chain(&modernbert::CLASSES).copied().collect()
}

/// Whether `path` is a model folder whose `config.json` names an encoder class.
pub fn is_encoder(path: &Path) -> bool {
    path.is_dir()
        && config::read_config(path)
            .and_then(|c| config::architecture(&c))
            .is_ok_and(|a| encoder_classes().contains(&a.as_str()))
}

/// Loads an encoder (BERT, RoBERTa, XLM-R, MPNet, ModernBERT) from an HF folder, with its
/// sentence-transformers pooling (CLS and normalization when the folder has none, as vLLM).
pub fn load_encoder(path: &Path) -> Result<PoolingModel> {
    let cfg_path = path.join("config.json");
    let config = config::read_config(path)?;
    let arch = config::architecture(&config).map_err(|e| Error::file(&cfg_path, e.to_string()))?;
    let mut ck = Checkpoint::from_safetensors_dir(path)?;
    let model = if bert::CLASSES.contains(&arch.as_str()) {
        bert::load(&ck, &config, &arch)
    } else if mpnet::CLASSES.contains(&arch.as_str()) {
        mpnet::load(&ck, &config, &arch)
    } else if modernbert::CLASSES.contains(&arch.as_str()) {
        modernbert::load(&mut ck, &config, &arch)
    } else {
        Err(Error::msg(format!("{arch} is not an encoder; encoders: {}", encoder_classes().join(", "))))
    }
    .map_err(|e| in_file(e, &cfg_path))?;
    let classifier = classifier::SequenceClassifier::load(&ck, &config, &arch, model.info.hidden_size)
        .map_err(|e| in_file(e, &cfg_path))?;
    if classifier.is_none() {
        // BERT's pooler feeds only a classification head; embeddings pool the hidden states.
        ck.skip(|name| name.split('.').any(|part| part == "pooler"));
    }
    let unread = report_unread(&ck);
    let pooling = pooling::PoolingConfig::read(path, pooling::PoolingType::Cls)?;
    Ok(PoolingModel {
        info: model.info.clone(),
        backbone: Backbone::Encoder(Box::new(model)),
        pooling,
        classifier,
        gguf: None,
        unread,
    })
}

/// Loads a decoder (HF folder or GGUF) to pool its final hidden states: the folder's
/// sentence-transformers pooling, else last-token pooling with normalization (vLLM's defaults
/// for `--runner pooling` on a `*ForCausalLM`).
pub fn load_decoder_for_pooling(path: &Path) -> Result<PoolingModel> {
    let lm = load(path)?;
    let pooling = match path.is_dir() {
        true => pooling::PoolingConfig::read(path, pooling::PoolingType::Last)?,
        false => pooling::PoolingConfig::defaults(pooling::PoolingType::Last),
    };
    let i = lm.model.info();
    let info = PoolingInfo {
        architecture: i.architecture.clone(),
        hidden_size: i.hidden_size,
        vocab_size: i.vocab_size,
        max_position_embeddings: i.max_position_embeddings,
    };
    let (backbone, gguf, unread) = (Backbone::Decoder(lm.model), lm.gguf, lm.unread);
    Ok(PoolingModel { info, backbone, pooling, classifier: None, gguf, unread })
}

/// Config errors raised while building a model (`config: missing field …`) name no file; they
/// come from `file` (config.json, or the GGUF whose metadata became the config).
pub(crate) fn in_file(e: Error, file: &Path) -> Error {
    match e {
        Error::Msg(msg) => Error::file(file, msg),
        e => e,
    }
}
