//! `serve --speculative-config`: n-gram drafts and a draft model through the HTTP server give
//! the same greedy text as the server without them, and `/metrics` counts drafts and accepted tokens under vLLM's
//! names; a bad config stops start-up with a message saying what to fix.

mod common;

use common::Server;
use serde_json::json;
use std::process::Command;

// A prompt the model continues by copying, so drafts get accepted.
const PROMPT: &str = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,";

fn completion(s: &Server) -> String {
    let r = s.ok("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": 32, "temperature": 0, "ignore_eos": true}));
    r["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn ngram_speculation_through_the_server() {
    let want = {
        let plain = Server::start(&[]);
        assert!(!plain.get("/metrics").1.contains("spec_decode"), "no speculation metrics without the flag");
        completion(&plain)
    };
    let s = Server::start(&["--speculative-config", r#"{"method": "ngram", "num_speculative_tokens": 4}"#]);
    assert_eq!(completion(&s), want, "speculation changed the greedy text");
    let drafts = s.metric("vllm:spec_decode_num_draft_tokens_total");
    let accepted = s.metric("vllm:spec_decode_num_accepted_tokens_total");
    assert!(accepted > 0.0 && accepted <= drafts, "drafts {drafts}, accepted {accepted}");
    assert!(s.metric("vllm:spec_decode_num_drafts_total") > 0.0);
}

#[test]
fn draft_model_speculation_through_the_server() {
    let want = completion(&Server::start(&[]));
    let draft = vllm_rs_testutil::hf_dir("smollm2").to_string_lossy().into_owned();
    let spec = json!({"model": draft, "num_speculative_tokens": 3}).to_string();
    let s = Server::start(&["--speculative-config", &spec]);
    assert_eq!(completion(&s), want, "a draft model changed the greedy text");
    let accepted = s.metric("vllm:spec_decode_num_accepted_tokens_total");
    assert!(accepted > 0.0 && accepted <= s.metric("vllm:spec_decode_num_draft_tokens_total"));
    assert!(s.log().contains("draft model:"), "the draft is named in the log");
}

#[test]
fn a_bad_speculative_config_is_refused_at_start_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["serve", "--speculative-config", r#"{"method": "eagle3", "num_speculative_tokens": 3}"#])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not implemented yet; available: ngram, draft_model"), "{err}");
}
