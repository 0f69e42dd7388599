//! The client-side tokenizer: what the datasets need from it (vLLM's `TokenizerLike` subset), and
//! loading it from `--tokenizer` (an HF directory, a `.gguf` file, a catalog name or an HF repo id).

use anyhow::{Context, Result, anyhow};
use std::path::{Path, PathBuf};
use vllm_rs_frontend::Tokenizer;
use vllm_rs_models::gguf::GgufFile;

/// What the benchmark asks of a tokenizer, with transformers' meanings.
pub trait BenchTokenizer: Send + Sync {
    /// transformers' `tokenizer.vocab_size`: the base vocabulary, added tokens not counted.
    fn vocab_size(&self) -> usize;
    /// transformers' `all_special_ids`: the named special tokens (bos, eos, unk, pad, ...).
    fn all_special_ids(&self) -> Vec<u32>;
    /// Tokens the tokenizer adds around one sequence (a BOS: 1).
    fn num_special_tokens_to_add(&self) -> usize;
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>>;
    /// `tokenizer.decode(ids)`: special tokens kept.
    fn decode(&self, ids: &[u32]) -> Result<String>;
}

impl BenchTokenizer for Tokenizer {
    fn vocab_size(&self) -> usize {
        self.inner().get_vocab_size(false)
    }

    fn all_special_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> =
            self.special_tokens_map().iter().filter_map(|(_, content)| self.token_to_id(content)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn num_special_tokens_to_add(&self) -> usize {
        let with = Tokenizer::encode(self, "", true).map(|v| v.len()).unwrap_or(0);
        let without = Tokenizer::encode(self, "", false).map(|v| v.len()).unwrap_or(0);
        with.saturating_sub(without)
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        Tokenizer::encode(self, text, add_special_tokens).map_err(|e| anyhow!("{e}"))
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        Tokenizer::decode(self, ids, false).map_err(|e| anyhow!("{e}"))
    }
}

/// Loads the tokenizer named by `spec`: an existing HF directory or `.gguf` file, else whatever
/// `vllm_rs_hub::resolve` makes of it (catalog name, HF repo id; fetched when missing).
pub fn load(spec: &str) -> Result<Tokenizer> {
    let path = PathBuf::from(spec);
    let path = if path.exists() {
        path
    } else {
        vllm_rs_hub::resolve(Some(spec)).map_err(|e| anyhow!("--tokenizer {spec}: {e}"))?.path
    };
    load_path(&path).with_context(|| format!("tokenizer {}", path.display()))
}

fn load_path(path: &Path) -> Result<Tokenizer> {
    if path.is_dir() {
        if path.join("tokenizer.json").exists() {
            return vllm_rs_frontend::load_tokenizer(path, None).map_err(|e| anyhow!("{e}"));
        }
        // A directory holding one GGUF file.
        let ggufs: Vec<PathBuf> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        return match ggufs.as_slice() {
            [one] => load_path(one),
            _ => Err(anyhow!("no tokenizer.json (and not exactly one .gguf file) in this directory")),
        };
    }
    let gguf = GgufFile::open(path).map_err(|e| anyhow!("{e}"))?;
    vllm_rs_frontend::load_tokenizer(path, Some(&gguf)).map_err(|e| anyhow!("{e}"))
}
