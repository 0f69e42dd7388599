//! Where models are cached and fetched from. Everything the fetchers read from the environment is
//! gathered here once, so tests can pass an explicit `HubConfig` instead of mutating process env.

use std::path::{Path, PathBuf};

use crate::catalog::{CATALOG, CatalogEntry};
use crate::progress::Progress;

pub const DEFAULT_PYPI_INDEX: &str = "https://pypi.org/simple";
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

#[derive(Clone)]
pub struct HubConfig {
    /// Catalog downloads land in `cache_dir/models/<name>/`.
    pub cache_dir: PathBuf,
    /// Base URL of a PEP 691 (JSON) or PEP 503 (HTML) simple package index.
    pub pypi_index: String,
    pub hf_endpoint: String,
    /// The `hub` directory of the Hugging Face cache, shared with Python's huggingface_hub.
    pub hf_cache: PathBuf,
    pub hf_token: Option<String>,
    /// No network at all: only what is already cached can be used.
    pub offline: bool,
    pub progress: Progress,
    /// The short names `resolve` knows. Data, so tests can point the real fetch code at test entries.
    pub catalog: &'static [CatalogEntry],
}

impl HubConfig {
    /// Reads the same variables as vLLM / huggingface_hub, plus `VLLM_RS_CACHE` and
    /// `VLLM_RS_PYPI_INDEX`.
    pub fn from_env() -> HubConfig {
        Self::from_vars(|key| std::env::var(key).ok())
    }

    /// `from_env` over any variable source; empty values count as unset, like Python's `os.getenv(...) or`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> HubConfig {
        let var = |key: &str| var(key).filter(|v| !v.trim().is_empty());
        let home = var("HOME").map(PathBuf::from).or_else(std::env::home_dir).unwrap_or_else(|| PathBuf::from("."));
        let expand = |p: String| expand_tilde(&p, &home);
        let xdg_cache = var("XDG_CACHE_HOME").map(expand).unwrap_or_else(|| home.join(".cache"));

        let cache_dir = var("VLLM_RS_CACHE").map(expand).unwrap_or_else(|| xdg_cache.join("vllm-rs"));
        let hf_home = var("HF_HOME").map(expand).unwrap_or_else(|| xdg_cache.join("huggingface"));
        let hf_cache = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(expand)
            .unwrap_or_else(|| hf_home.join("hub"));
        // A token saved by `huggingface-cli login` / `hf auth login` lives in a file; honour it so
        // gated repos work the same as from Python.
        let token_path = var("HF_TOKEN_PATH").map(expand).unwrap_or_else(|| hf_home.join("token"));
        let hf_token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(&token_path).ok())
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let offline = ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"].iter().any(|k| var(k).is_some_and(|v| is_true(&v)));

        HubConfig {
            cache_dir,
            pypi_index: var("VLLM_RS_PYPI_INDEX").unwrap_or_else(|| DEFAULT_PYPI_INDEX.to_string()),
            hf_endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string()),
            hf_cache,
            hf_token,
            offline,
            progress: Progress::Auto,
            catalog: CATALOG,
        }
    }
}

impl std::fmt::Debug for HubConfig {
    // Hand-written so the token never lands in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("cache_dir", &self.cache_dir)
            .field("pypi_index", &self.pypi_index)
            .field("hf_endpoint", &self.hf_endpoint)
            .field("hf_cache", &self.hf_cache)
            .field("hf_token", &self.hf_token.as_ref().map(|_| "<set>"))
            .field("offline", &self.offline)
            .field("catalog", &self.catalog.iter().map(|e| e.name).collect::<Vec<_>>())
            .finish()
    }
}

/// huggingface_hub's `_is_true`.
fn is_true(value: &str) -> bool {
    matches!(value.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

pub(crate) fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Some("") => home.to_path_buf(),
        Some(rest) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> HubConfig {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        HubConfig::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_follow_home() {
        let c = cfg(&[("HOME", "/home/u"), ("HF_TOKEN_PATH", "/nonexistent/token")]);
        assert_eq!(c.cache_dir, PathBuf::from("/home/u/.cache/vllm-rs"));
        assert_eq!(c.hf_cache, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert_eq!(c.pypi_index, DEFAULT_PYPI_INDEX);
        assert_eq!(c.hf_endpoint, DEFAULT_HF_ENDPOINT);
        assert!(!c.offline);
        assert!(c.hf_token.is_none());
    }

    #[test]
    fn precedence_of_overrides() {
        let c = cfg(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x"), ("HF_TOKEN_PATH", "/nonexistent/token")]);
        assert_eq!(c.cache_dir, PathBuf::from("/x/vllm-rs"));
        assert_eq!(c.hf_cache, PathBuf::from("/x/huggingface/hub"));

        let c = cfg(&[
            ("HOME", "/h"),
            ("XDG_CACHE_HOME", "/x"),
            ("VLLM_RS_CACHE", "~/vc"),
            ("HF_HOME", "/hfh"),
            ("HF_TOKEN", " hf_abc \n"),
            ("HF_HUB_OFFLINE", "yes"),
            ("VLLM_RS_PYPI_INDEX", "http://127.0.0.1:9/simple"),
        ]);
        assert_eq!(c.cache_dir, PathBuf::from("/h/vc"));
        assert_eq!(c.hf_cache, PathBuf::from("/hfh/hub"));
        assert_eq!(c.hf_token.as_deref(), Some("hf_abc"));
        assert!(c.offline);
        assert_eq!(c.pypi_index, "http://127.0.0.1:9/simple");

        let c = cfg(&[("HOME", "/h"), ("HF_HOME", "/hfh"), ("HF_HUB_CACHE", "/hc"), ("TRANSFORMERS_OFFLINE", "0")]);
        assert_eq!(c.hf_cache, PathBuf::from("/hc"));
        assert!(!c.offline);
    }

    #[test]
    fn token_from_file_and_debug_hides_it() {
        let dir = std::env::temp_dir().join(format!("vllm-rs-hub-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "hf_secret\n").unwrap();
        let c = cfg(&[("HOME", "/h"), ("HF_HOME", dir.to_str().unwrap())]);
        assert_eq!(c.hf_token.as_deref(), Some("hf_secret"));
        assert!(!format!("{c:?}").contains("hf_secret"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
