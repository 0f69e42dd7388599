//! The frontend's error type: every failure names what was being read or rendered.

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    /// A JSON file did not parse, or has a field of the wrong shape.
    #[error("{}: {msg}", path.display())]
    Config { path: PathBuf, msg: String },

    /// The tokenizer could not be built (bad tokenizer.json, bad GGUF tokenizer metadata).
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    /// Encoding or decoding failed (for example a token id outside the vocabulary).
    #[error("{0}")]
    Codec(String),

    /// The chat template does not parse.
    #[error("chat template does not parse: {0}")]
    TemplateSyntax(String),

    /// The chat template failed while rendering (an undefined attribute, a type error...).
    #[error("chat template failed: {0}")]
    TemplateRender(String),

    /// The chat template called `raise_exception(message)`: the message is the template's own.
    #[error("{message}")]
    TemplateRaised { message: String },

    /// Input that the caller passed is not acceptable (an empty stop string, messages not a list...).
    #[error("{0}")]
    InvalidInput(String),
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io { path: path.to_path_buf(), source }
    }

    pub(crate) fn config(path: &Path, msg: impl Into<String>) -> Self {
        Error::Config { path: path.to_path_buf(), msg: msg.into() }
    }

    pub(crate) fn tokenizer(msg: impl Into<String>) -> Self {
        Error::Tokenizer(msg.into())
    }
}
