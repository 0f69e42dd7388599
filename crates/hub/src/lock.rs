//! Cross-process locks, so two vllm-rs processes started together (or a vllm-rs and a Python
//! huggingface_hub, which also uses `flock` on these paths) do not write the same download.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::error::HubError;

/// Holds the lock until dropped.
pub(crate) struct FileLock {
    _file: Option<File>,
}

pub(crate) fn lock(path: &Path, what: &str) -> Result<FileLock, HubError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(HubError::io("cannot create", parent))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(HubError::io("cannot open lock file", path))?;
    match file.try_lock() {
        Ok(()) => Ok(FileLock { _file: Some(file) }),
        Err(TryLockError::WouldBlock) => {
            eprintln!("waiting for another process that is downloading {what} (lock {})", path.display());
            file.lock().map_err(HubError::io("cannot lock", path))?;
            Ok(FileLock { _file: Some(file) })
        }
        Err(TryLockError::Error(e)) => {
            // Some network filesystems refuse locks. Every download is hash-checked before it is
            // renamed into place, so two writers at once cannot produce a file that looks good.
            tracing::warn!("cannot lock {}: {e}; continuing without a lock", path.display());
            Ok(FileLock { _file: None })
        }
    }
}
