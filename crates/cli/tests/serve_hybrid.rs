//! A hybrid model (the tiny Qwen3.5: gated delta-net layers beside attention) served over HTTP:
//! prefix-cache hits for requests sharing a prefix (the recurrent state resumes from a saved
//! snapshot), reported in /metrics, with the output of a server that caches nothing; the
//! `--mamba-*` flags; speculative decoding with the recurrent state rolled back after rejected
//! drafts.
//!
//! The tiny model has no tokenizer (its vocabulary is 320 ids): prompts are token ids, and
//! SmolLM2's tokenizer turns the ids it samples into text.

mod common;

use common::Server;
use serde_json::{Value, json};
use std::process::Command;

fn start(extra: &[&str]) -> Server {
    let model = vllm_rs_testutil::test_data("data/tiny/qwen3_5").to_string_lossy().into_owned();
    let tokenizer = vllm_rs_testutil::hf_dir("smollm2").to_string_lossy().into_owned();
    let mut args = vec![model, "--tokenizer".into(), tokenizer, "--max-model-len".into(), "512".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_args(args, &[])
}

/// 48 shared tokens (three blocks), then 9 of the request's own.
fn prompt(seed: u32) -> Value {
    let ids: Vec<u32> = (0..48u32).map(|i| 3 + (i * 37) % 300).chain((0..9).map(|i| 5 + seed * 7 + i)).collect();
    json!({"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": true})
}

fn text(r: &Value) -> String {
    r["choices"][0]["text"].as_str().expect("text").to_string()
}

#[test]
fn requests_sharing_a_prefix_resume_from_the_saved_recurrent_state() {
    let s = start(&[]);
    let cold = start(&["--no-enable-prefix-caching"]);
    for seed in [1, 2, 3] {
        assert_eq!(text(&s.ok("/v1/completions", &prompt(seed))), text(&cold.ok("/v1/completions", &prompt(seed))));
    }
    // The first request saved its state at its last block boundary (48); the next two resume there.
    assert_eq!(s.metric("vllm:prefix_cache_hits_total"), 96.0, "{}", s.log());
    assert_eq!(cold.metric("vllm:prefix_cache_hits_total"), 0.0);
    assert!(s.log().contains("prefix-cache snapshots"), "the state pool is logged: {}", s.log());

    let none = start(&["--mamba-cache-mode", "none"]);
    for seed in [1, 2] {
        none.ok("/v1/completions", &prompt(seed));
    }
    assert_eq!(none.metric("vllm:prefix_cache_hits_total"), 0.0, "no snapshots, no hits on a hybrid");
}

#[test]
fn a_bad_mamba_block_size_and_a_recurrent_draft_model_are_refused() {
    let model = vllm_rs_testutil::test_data("data/tiny/qwen3_5").to_string_lossy().into_owned();
    let tokenizer = vllm_rs_testutil::hf_dir("smollm2").to_string_lossy().into_owned();
    let spec = serde_json::json!({"model": model, "num_speculative_tokens": 3}).to_string();
    for (flag, value, says) in [
        ("--mamba-block-size", "100", "must be a positive multiple of --block-size"),
        ("--speculative-config", spec.as_str(), "use a draft with attention layers only"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
            .args(["generate", "--model", &model, "--tokenizer", &tokenizer, "--prompt", "x", flag, value])
            .env("NO_COLOR", "1")
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{flag} {value}: {err}");
    }
}

#[test]
fn speculative_decoding_on_a_hybrid_model_keeps_the_greedy_text() {
    // Drafts from a tiny Llama of the same vocabulary: mostly rejected, so the recurrent state
    // is rolled back on most steps (`draft_p_min` 0: a random draft is never sure of a token).
    let draft = vllm_rs_testutil::test_data("data/tiny/llama").to_string_lossy().into_owned();
    let spec = json!({"model": draft, "num_speculative_tokens": 3, "draft_p_min": 0}).to_string();
    let s = start(&["--speculative-config", &spec]);
    let plain = start(&[]);
    for seed in [1, 2] {
        assert_eq!(text(&s.ok("/v1/completions", &prompt(seed))), text(&plain.ok("/v1/completions", &prompt(seed))));
    }
    assert!(s.metric("vllm:spec_decode_num_draft_tokens_total") > 0.0, "{}", s.log());
}
