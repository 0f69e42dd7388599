//! `vllm-rs bench pp-tg` on SmolLM2: llama-bench's report, with `-d` depths (the depth's prompt
//! test served from the prefix cache, its generation test after a prompt of that length); a
//! model whose prefix cannot be cached at that depth fails with a message instead of timing the
//! whole prompt.

use std::process::Command;
use vllm_rs_testutil::gguf_path;

fn pp_tg(args: &[&str]) -> std::process::Output {
    let smol = gguf_path("smollm2");
    Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["bench", "pp-tg", "--model", smol.to_str().unwrap(), "-r", "1", "-o", "json"])
        .args(args)
        .output()
        .expect("run vllm-rs bench pp-tg")
}

#[test]
fn depths_report_llama_bench_rows() {
    let out = pp_tg(&["-p", "16", "-n", "4", "-d", "0,96"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let tests: Vec<(&str, u64)> =
        rows.iter().map(|r| (r["test"].as_str().unwrap(), r["n_depth"].as_u64().unwrap())).collect();
    assert_eq!(tests, [("pp16", 0), ("tg4", 0), ("pp16 @ d96", 96), ("tg4 @ d96", 96)]);
    assert!(rows.iter().all(|r| r["avg_ts"].as_f64().unwrap() > 0.0), "{rows:?}");
}

#[test]
fn a_depth_the_prefix_cache_cannot_serve_is_an_error() {
    // Blocks of 64 tokens: a depth of 40 fills no block, so nothing can come from the cache.
    let out = pp_tg(&["-p", "8", "-n", "2", "-d", "40", "--block-size", "64"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pp8 @ d40") && err.contains("prefix cache"), "{err}");
}
