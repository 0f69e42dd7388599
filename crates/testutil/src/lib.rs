//! Where tests find real models and goldens.
//!
//! Real models are fetched by `scripts/fetch_test_models.sh` into `$VLLM_RS_TEST_MODELS`
//! (default `<repo>/.models`, laid out as `gguf/…` and `hf/…`). A missing model fails the test
//! with instructions; nothing is skipped silently.

use std::path::{Path, PathBuf};

/// The repository root: `$VLLM_RS_REPO` where set (a test binary carried to another machine,
/// `scripts/gpu_check.sh`), else where this crate was built.
pub fn repo_root() -> PathBuf {
    match std::env::var_os("VLLM_RS_REPO") {
        Some(root) => PathBuf::from(root),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root"),
    }
}

/// Root of the fetched test models.
pub fn models_dir() -> PathBuf {
    std::env::var_os("VLLM_RS_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".models"))
}

fn must_exist(p: PathBuf) -> PathBuf {
    assert!(
        p.exists(),
        "test model {} is missing: run scripts/fetch_test_models.sh (or set VLLM_RS_TEST_MODELS)",
        p.display()
    );
    p
}

/// Short model names used across tests and goldens.
pub const REAL_MODELS: [&str; 3] = ["smollm2", "qwen05", "gemma3"];

/// The HF-format directory of a real model (`smollm2`, `qwen05`, `gemma3`).
pub fn hf_dir(name: &str) -> PathBuf {
    let d = match name {
        "smollm2" => "hf/smollm2-135m-instruct-from-q4_1",
        "qwen05" => "hf/qwen2.5-coder-0.5b-instruct-from-q4_k_m",
        "gemma3" => "hf/gemma3-270m-from-q4_k_m",
        "minilm" => "hf/all-MiniLM-L6-v2",
        "mpnet" => "hf/all-mpnet-base-v2",
        other => panic!("unknown test model {other}"),
    };
    must_exist(models_dir().join(d))
}

/// The GGUF file of a real model.
pub fn gguf_path(name: &str) -> PathBuf {
    let f = match name {
        "smollm2" => "gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf",
        "qwen05" => "gguf/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf",
        "gemma3" => "gguf/gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf",
        other => panic!("unknown test model {other}"),
    };
    must_exist(models_dir().join(f))
}

/// A file under `tests/` in the repo (goldens, tiny checkpoints).
pub fn test_data(rel: &str) -> PathBuf {
    must_exist(repo_root().join("tests").join(rel))
}

/// Parses a JSON golden under `tests/goldens/`.
pub fn golden(rel: &str) -> serde_json::Value {
    let p = test_data(&format!("goldens/{rel}"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
