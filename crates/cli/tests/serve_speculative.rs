//! `serve --speculative-config`: n-gram drafts, a draft model, an MTP layer and an EAGLE-3 head through the HTTP server give
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
    let spec = ["--speculative-config", r#"{"method": "ngram", "num_speculative_tokens": 4}"#];
    let s = Server::start_with_env(&spec, &[("VLLM_LOG_STATS_INTERVAL", "0.2")]);
    assert_eq!(completion(&s), want, "speculation changed the greedy text");
    let drafts = s.metric("vllm:spec_decode_num_draft_tokens_total");
    let accepted = s.metric("vllm:spec_decode_num_accepted_tokens_total");
    assert!(accepted > 0.0 && accepted <= drafts, "drafts {drafts}, accepted {accepted}");
    assert!(s.metric("vllm:spec_decode_num_drafts_total") > 0.0);
    // The periodic statistics, as vLLM logs them, name the acceptance.
    let logged = |s: &Server, what: &str| {
        (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            s.log().contains(what)
        })
    };
    assert!(logged(&s, "Avg generation throughput: "), "{}", s.log());
    assert!(logged(&s, "SpecDecoding metrics: Mean acceptance length: "), "{}", s.log());
    let quiet =
        Server::start_with_env(&[&spec[..], &["--disable-log-stats"]].concat(), &[("VLLM_LOG_STATS_INTERVAL", "0.2")]);
    completion(&quiet);
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(!quiet.log().contains("Avg generation throughput"), "--disable-log-stats: {}", quiet.log());
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
fn a_bad_stats_interval_is_refused_at_start_up() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["serve", "--port", "0"])
        .env("VLLM_LOG_STATS_INTERVAL", "soon")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    // A server that took the value would run on: stop it rather than wait for ever.
    let ended = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        child.try_wait().expect("waits").is_some()
    });
    if !ended {
        child.kill().expect("kills");
    }
    let out = child.wait_with_output().expect("waits");
    assert!(ended && !out.status.success(), "the server started with VLLM_LOG_STATS_INTERVAL=soon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("VLLM_LOG_STATS_INTERVAL=\"soon\": give a number of seconds above 0"), "{err}");
}

#[test]
fn a_bad_speculative_config_is_refused_at_start_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["serve", "--speculative-config", r#"{"method": "medusa", "model": "m", "num_speculative_tokens": 3}"#])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not implemented yet; available: ngram, draft_model, mtp, eagle, eagle3"), "{err}");
}

/// A tiny model (with a draft head: `scripts/make_tiny_draft_heads.py`), which has no
/// tokenizer: prompts are token ids, SmolLM2's tokenizer turns the sampled ids into text.
fn start_tiny(dir: &str, extra: &[&str]) -> Server {
    let model = vllm_rs_testutil::test_data(dir).to_string_lossy().into_owned();
    let tokenizer = vllm_rs_testutil::hf_dir("smollm2").to_string_lossy().into_owned();
    let mut args = vec![model, "--tokenizer".into(), tokenizer, "--max-model-len".into(), "256".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_args(args, &[])
}

/// Tiny model `dir` served with `spec` gives, for case `case` of golden `golden`, the greedy
/// text it gives without it; drafts are accepted, and the log names the drafter (`drafter`).
fn a_draft_head_keeps_the_greedy_text(dir: &str, golden: &str, case: usize, spec: &str, drafter: &str) {
    let golden = vllm_rs_testutil::golden(golden);
    let prompt = &golden["cases"][case]["prompt_token_ids"];
    let body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": true});
    let text = |s: &Server| s.ok("/v1/completions", &body)["choices"][0]["text"].as_str().unwrap().to_string();
    let want = text(&start_tiny(dir, &[]));
    let s = start_tiny(dir, &["--speculative-config", spec]);
    assert_eq!(text(&s), want, "{drafter} drafts changed the greedy text");
    let accepted = s.metric("vllm:spec_decode_num_accepted_tokens_total");
    assert!(accepted > 0.0 && accepted <= s.metric("vllm:spec_decode_num_draft_tokens_total"), "{accepted}");
    assert!(s.log().contains(&format!("{drafter} drafter")), "the drafter is named in the log");
}

#[test]
fn mtp_speculation_through_the_server() {
    // vLLM's older method name, as `-sc` takes it.
    let spec = "method=deepseek_mtp,num_speculative_tokens=3";
    a_draft_head_keeps_the_greedy_text("data/tiny/deepseek_v3_mtp", "tiny/deepseek_v3_mtp.json", 2, spec, "MTP");
}

#[test]
fn eagle3_speculation_through_the_server() {
    let head = vllm_rs_testutil::test_data("data/tiny/llama_eagle3").to_string_lossy().into_owned();
    let spec = json!({"method": "eagle3", "model": head, "num_speculative_tokens": 3}).to_string();
    a_draft_head_keeps_the_greedy_text("data/tiny/llama", "tiny/llama_eagle3.json", 1, &spec, "EAGLE-3");
}

/// The same target and head saved as PyTorch `.bin` files (`scripts/make_tiny_bin.py`), as
/// many EAGLE heads ship.
#[test]
fn eagle3_speculation_with_pytorch_bin_weights() {
    let head = vllm_rs_testutil::test_data("data/tiny-bin/llama_eagle3").to_string_lossy().into_owned();
    let spec = json!({"method": "eagle3", "model": head, "num_speculative_tokens": 3}).to_string();
    a_draft_head_keeps_the_greedy_text("data/tiny-bin/llama", "tiny/llama_eagle3.json", 1, &spec, "EAGLE-3");
}

#[test]
fn eagle_speculation_through_the_server() {
    let head = vllm_rs_testutil::test_data("data/tiny/llama_eagle").to_string_lossy().into_owned();
    let spec = json!({"method": "eagle", "model": head, "num_speculative_tokens": 3}).to_string();
    a_draft_head_keeps_the_greedy_text("data/tiny/llama", "tiny/llama_eagle.json", 0, &spec, "EAGLE");
}

#[test]
fn mtp_without_mtp_weights_is_refused_at_start_up() {
    let model = vllm_rs_testutil::test_data("data/tiny/deepseek_v3");
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .arg("serve")
        .arg(&model)
        .arg("--tokenizer")
        .arg(vllm_rs_testutil::hf_dir("smollm2"))
        .args(["--speculative-config", r#"{"method": "mtp", "num_speculative_tokens": 2}"#])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no MTP weights"), "{err}");
}
