//! Loading errors: each names the file (or tensor) and says what is wrong.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    #[error("{0}")]
    Msg(String),
}

impl Error {
    pub fn file(path: &Path, msg: impl Into<String>) -> Self {
        Error::File { path: path.display().to_string(), msg: msg.into() }
    }

    pub fn msg(msg: impl Into<String>) -> Self {
        Error::Msg(msg.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
