//! Shared by the integration tests: the text corpus and tokenizer loading.
#![allow(dead_code)]

use std::path::PathBuf;
use vllm_rs_frontend::Tokenizer;

/// The HF directory whose tokenizer a test compares with (`gemma3`'s hf dir carries the real
/// Gemma 3 tokenizer.json; `qwen3` and `gemma3` also exist as tokenizer-only directories).
pub fn tokenizer_dir(name: &str) -> PathBuf {
    match name {
        "qwen3" | "gemma3_tokenizer" => {
            let sub = if name == "qwen3" { "qwen3" } else { "gemma3" };
            let p = vllm_rs_testutil::models_dir().join("tokenizers").join(sub);
            assert!(p.exists(), "{} is missing: run scripts/fetch_test_models.sh", p.display());
            p
        }
        other => vllm_rs_testutil::hf_dir(other),
    }
}

pub fn hf_tokenizer(name: &str) -> Tokenizer {
    Tokenizer::from_hf_dir(&tokenizer_dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn gguf_tokenizer(name: &str) -> Tokenizer {
    let g = vllm_rs_formats::gguf::GgufFile::open(&vllm_rs_testutil::gguf_path(name)).unwrap();
    Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A small deterministic generator (xorshift64*), so the corpus is the same on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random strings over many scripts, emoji, digits and whitespace runs.
pub fn random_texts(n: usize, seed: u64) -> Vec<String> {
    const RANGES: &[(u32, u32)] = &[
        (0x20, 0x7e),
        (0x30, 0x39),
        (0xa0, 0x24f),
        (0x370, 0x3ff),
        (0x400, 0x4ff),
        (0x590, 0x6ff),
        (0x900, 0x97f),
        (0xe00, 0xe7f),
        (0x3040, 0x30ff),
        (0x4e00, 0x9fff),
        (0xac00, 0xd7a3),
        (0x1f300, 0x1faff),
        (0x2000, 0x206f),
    ];
    const SEPS: &[&str] = &[" ", "  ", "\t", "\n", " \n", "   ", "", "\u{a0}", "\r\n", "    ", "\n\n"];
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let mut s = String::new();
            for _ in 0..1 + rng.below(30) {
                let (a, b) = RANGES[rng.below(RANGES.len())];
                for _ in 0..1 + rng.below(8) {
                    if let Some(c) = char::from_u32(a + rng.below((b - a + 1) as usize) as u32) {
                        s.push(c);
                    }
                }
                s.push_str(SEPS[rng.below(SEPS.len())]);
            }
            s
        })
        .collect()
}

/// Chunks of this repository's Rust and Python sources: real code with indentation runs.
pub fn code_texts(max: usize) -> Vec<String> {
    let root = vllm_rs_testutil::repo_root();
    let mut files = Vec::new();
    for dir in ["crates/models/src", "crates/kernels/src", "crates/frontend/src", "scripts"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "rs" || x == "py") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(1500).take(3) {
            out.push(chunk.iter().collect());
            if out.len() >= max {
                return out;
            }
        }
    }
    out
}

/// The texts of the Python golden (also a good hand-written corpus).
pub fn golden_texts() -> Vec<String> {
    let g = vllm_rs_testutil::golden("frontend/tokenizer_ids.json");
    g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}
