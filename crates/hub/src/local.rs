//! Models given as a path: an HF-layout directory or a .gguf file, used where they are.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::HubError;

/// Checks that `path` is something a loader can open and says precisely what is wrong if not,
/// before any weight loading starts.
pub(crate) fn check_local(path: &Path) -> Result<PathBuf, HubError> {
    let bad = |reason: String| HubError::BadLocalModel { path: path.to_path_buf(), reason };
    if path.is_dir() {
        if path.join("config.json").is_file() {
            return Ok(path.to_path_buf());
        }
        let mut ggufs: Vec<PathBuf> = fs::read_dir(path)
            .map_err(HubError::io("cannot list", path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && has_gguf_extension(p))
            .collect();
        ggufs.sort();
        return match ggufs.as_slice() {
            [only] => check_local(only),
            [] => Err(bad("the directory has neither config.json (Hugging Face layout) nor a .gguf file".into())),
            many => Err(bad(format!(
                "the directory has no config.json and {} .gguf files; pass one of them: {}",
                many.len(),
                many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ))),
        };
    }
    let mut magic = [0u8; 4];
    let mut file = File::open(path).map_err(HubError::io("cannot open", path))?;
    if file.read_exact(&mut magic).is_ok() && &magic == b"GGUF" {
        return Ok(path.to_path_buf());
    }
    if has_gguf_extension(path) {
        return Err(bad("the file does not start with the GGUF magic; it is truncated or not a GGUF file".into()));
    }
    Err(bad("a model file must be GGUF; for safetensors weights pass the directory that holds config.json".into()))
}

fn has_gguf_extension(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// Whether a string that names nothing on disk was still clearly meant as a path (so the error
/// should be "no such path" rather than "unknown model").
pub(crate) fn looks_like_path(s: &str) -> bool {
    s.starts_with(['/', '.', '~', '\\'])
        || s.contains('\\')
        || s.matches('/').count() > 1
        || s.to_ascii_lowercase().ends_with(".gguf")
        || s.to_ascii_lowercase().ends_with(".safetensors")
}
