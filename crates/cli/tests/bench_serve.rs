//! `vllm-rs bench serve` against `vllm-rs serve` (both the real binary, the smollm2 GGUF): the
//! report block, the result JSON's counts and ordering of its metrics, and failed requests
//! counted as failed rather than ending the run.

mod common;

use common::Server;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NUM_PROMPTS: u64 = 6;
const INPUT_LEN: u64 = 32;
const OUTPUT_LEN: u64 = 8;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("vllm-rs-bench-serve-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `vllm-rs bench serve` against `s` with a small random workload plus `extra`; the process
/// output and the saved (detailed) result JSON.
fn bench(s: &Server, dir: &Path, name: &str, extra: &[&str]) -> (Output, Value) {
    let mut args: Vec<String> = ["bench", "serve", "--base-url", &s.base]
        .iter()
        .map(|x| x.to_string())
        .chain(
            [
                "--dataset-name",
                "random",
                "--random-input-len",
                &INPUT_LEN.to_string(),
                "--random-output-len",
                &OUTPUT_LEN.to_string(),
                "--num-prompts",
                &NUM_PROMPTS.to_string(),
                "--max-concurrency",
                "2",
                "--ignore-eos",
                "--seed",
                "0",
                "--percentile-metrics",
                "ttft,tpot,itl,e2el",
                "--metric-percentiles",
                "50,99",
                "--save-result",
                "--save-detailed",
                "--result-dir",
                &dir.to_string_lossy(),
                "--result-filename",
                name,
                "--disable-tqdm",
            ]
            .iter()
            .map(|x| x.to_string()),
        )
        .collect();
    args.extend(extra.iter().map(|x| x.to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(&args).env("NO_COLOR", "1").output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench serve failed: {}\nstdout:\n{stdout}\nstderr:\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    let text = std::fs::read_to_string(dir.join(name)).expect("result file");
    (out, serde_json::from_str(&text).expect("result JSON"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn bench_serve_against_vllm_rs_serve() {
    let s = Server::start(&[]);
    let dir = TempDir::new("ok");
    let (out, r) = bench(&s, &dir.0, "ok.json", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);

    // The report block, as vLLM prints it.
    let block: Vec<&str> =
        stdout.lines().skip_while(|l| !l.starts_with("============ Serving Benchmark Result ============")).collect();
    assert!(!block.is_empty(), "no report block:\n{stdout}");
    let row = |label: &str| {
        block.iter().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no '{label}' row:\n{stdout}")).to_string()
    };
    assert_eq!(row("Successful requests:"), format!("{:<40} {:<10}", "Successful requests:", NUM_PROMPTS));
    assert_eq!(row("Failed requests:"), format!("{:<40} {:<10}", "Failed requests:", 0));
    assert_eq!(
        row("Total generated tokens:"),
        format!("{:<40} {:<10}", "Total generated tokens:", NUM_PROMPTS * OUTPUT_LEN)
    );
    for label in [
        "Benchmark duration (s):",
        "Request throughput (req/s):",
        "Output token throughput (tok/s):",
        "Total token throughput (tok/s):",
        "Mean TTFT (ms):",
        "P99 TTFT (ms):",
        "Median TPOT (ms):",
        "P50 ITL (ms):",
        "P99 E2EL (ms):",
    ] {
        row(label);
    }
    assert_eq!(block.last().unwrap(), &"=".repeat(50));

    // The result JSON.
    assert_eq!(r["completed"], NUM_PROMPTS);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["num_prompts"], NUM_PROMPTS);
    assert_eq!(r["max_concurrency"], 2);
    assert_eq!(r["request_rate"], "inf");
    assert_eq!(r["backend"], "openai");
    assert_eq!(r["total_output_tokens"], NUM_PROMPTS * OUTPUT_LEN, "--ignore-eos: every request runs to its length");
    assert_eq!(r["total_input_tokens"], NUM_PROMPTS * INPUT_LEN, "the server counts the prompts as the client does");
    assert!(r["output_lens"].as_array().unwrap().iter().all(|n| n == OUTPUT_LEN));
    assert!(r["errors"].as_array().unwrap().iter().all(|e| e == ""));
    for itl in r["itls"].as_array().unwrap() {
        let n = itl.as_array().unwrap().len() as u64;
        assert!((1..OUTPUT_LEN).contains(&n), "one gap between each two token chunks: {n}");
    }
    let duration = f(&r, "duration");
    assert!(duration > 0.0);
    assert!((f(&r, "request_throughput") - NUM_PROMPTS as f64 / duration).abs() < 1e-9);
    assert!((f(&r, "output_throughput") - (NUM_PROMPTS * OUTPUT_LEN) as f64 / duration).abs() < 1e-9);
    for m in ["ttft", "tpot", "itl", "e2el"] {
        let (mean, median) = (f(&r, &format!("mean_{m}_ms")), f(&r, &format!("median_{m}_ms")));
        let (p50, p99) = (f(&r, &format!("p50_{m}_ms")), f(&r, &format!("p99_{m}_ms")));
        assert!(mean > 0.0 && median > 0.0 && f(&r, &format!("std_{m}_ms")) >= 0.0, "{m}: {r}");
        assert!((p50 - median).abs() <= 1e-9 * median, "{m}: p50 {p50} != median {median}");
        assert!(p50 <= p99, "{m}: p50 {p50} > p99 {p99}");
    }
    // A request's end-to-end latency covers its first token and the rest.
    assert!(f(&r, "p99_ttft_ms") <= f(&r, "p99_e2el_ms"));
    assert!(f(&r, "max_concurrent_requests") >= 1.0);

    // Requests the server refuses are failed requests; the run still completes and reports.
    let (out, r) = bench(&s, &dir.0, "fail.json", &["--extra-body", r#"{"max_tokens": 4096}"#]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(r["completed"], 0);
    assert_eq!(r["failed"], NUM_PROMPTS);
    assert_eq!(r["total_output_tokens"], 0);
    assert!(stdout.contains("Failed requests during benchmark run detected"), "{stdout}");
    assert!(stdout.contains(&format!("{:<40} {:<10}", "Failed requests:", NUM_PROMPTS)), "{stdout}");
    let errors = r["errors"].as_array().unwrap();
    assert!(errors.iter().all(|e| e.as_str().unwrap().contains("400")), "{errors:?}");
}

/// The Responses and Messages APIs driven the same way: every request runs to its length
/// (`ignore_eos`, the extension both endpoints take) and the usage events give the counts.
#[test]
fn bench_serve_drives_the_responses_and_messages_apis() {
    let s = Server::start(&[]);
    let dir = TempDir::new("apis");
    for (backend, endpoint) in [("openai-responses", "/v1/responses"), ("anthropic-messages", "/v1/messages")] {
        let name = format!("{backend}.json");
        let (_, r) = bench(&s, &dir.0, &name, &["--backend", backend, "--endpoint", endpoint]);
        assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(NUM_PROMPTS), Some(0)), "{backend}: {r}");
        assert_eq!(r["backend"], backend);
        assert_eq!(r["total_output_tokens"], NUM_PROMPTS * OUTPUT_LEN, "{backend}: every request ran to its length");
        assert!(f(&r, "mean_ttft_ms") > 0.0 && f(&r, "mean_itl_ms") > 0.0, "{backend}: {r}");
    }
}
