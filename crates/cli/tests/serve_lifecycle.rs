//! Start-up and shut-down: `/health` is 503 until the model is ready; SIGTERM stops accepting,
//! lets in-flight requests finish and exits 0; past the grace period the rest are aborted;
//! unknown flags are a clear error.

mod common;

use common::{Server, eventually, parse_sse};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn health_is_503_until_the_model_is_ready() {
    let s = Server::spawn(&[], &[("VLLM_RS_SERVE_LOAD_DELAY_MS", "3000")]);
    assert_eq!(s.get("/health").0, 503);
    let (st, body) = s.post("/v1/completions", &json!({"prompt": "x"}));
    assert_eq!(st, 503);
    assert_eq!(body["error"]["code"], 503);
    assert_eq!(s.get("/v1/models").0, 503);
    s.wait_ready(Duration::from_secs(120));
    assert_eq!(s.get("/health").0, 200);
    assert!(s.log().contains("model ready"), "{}", s.log());
}

#[test]
fn sigterm_lets_in_flight_requests_finish() {
    let mut s = Server::start(&[]);
    let body = std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let req = json!({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true, "stream": true});
            s.stream_raw("/v1/completions", &req)
        });
        eventually("the request runs", Duration::from_secs(30), || s.metric("vllm:num_requests_running{") == 1.0);
        s.signal("TERM");
        // New connections are refused while the running request goes on.
        eventually("the listener closes", Duration::from_secs(10), || std::net::TcpStream::connect(&s.addr).is_err());
        assert!(!h.is_finished(), "the request should still be running while the server drains");
        h.join().unwrap()
    });
    let chunks = parse_sse(&body);
    let last = chunks.iter().rev().find(|c| !c["choices"].as_array().unwrap().is_empty()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "the request ran to its end");
    let tokens: usize = chunks.iter().filter(|c| !c["choices"].as_array().unwrap().is_empty()).count();
    assert_eq!(tokens, 200);
    let status = s.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", s.log());
    assert!(s.log().contains("SIGTERM"), "{}", s.log());
}

#[test]
fn after_the_grace_period_requests_are_aborted() {
    let mut s = Server::start(&["--shutdown-timeout", "1"]);
    let t0 = Instant::now();
    let body = std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let req = json!({"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true, "stream": true});
            s.stream_raw("/v1/completions", &req)
        });
        eventually("the request runs", Duration::from_secs(30), || s.metric("vllm:num_requests_running{") == 1.0);
        s.signal("TERM");
        h.join().unwrap()
    });
    let chunks = parse_sse(&body);
    let last = chunks.iter().rev().find(|c| !c["choices"].as_array().unwrap().is_empty()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "abort");
    let status = s.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", s.log());
    assert!(t0.elapsed() < Duration::from_secs(25));
}

#[test]
fn sigint_when_idle_exits_0() {
    let mut s = Server::start(&[]);
    s.signal("INT");
    assert_eq!(s.wait_exit(Duration::from_secs(30)).code(), Some(0), "{}", s.log());
}

#[test]
fn unknown_flags_are_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(["serve", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-such-flag"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--host",
        "--port",
        "--served-model-name",
        "--api-key",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enable-prefix-caching",
        "--kv-cache-memory",
        "--kv-cache-dtype",
        "--chat-template",
        "--generation-config",
        "--dtype",
        "--seed",
        "--max-logprobs",
        "--allowed-origins",
        "--threads",
        "--log-level",
        "--max-prompt-chars",
        "--max-new-tokens",
        "--shutdown-timeout",
        "--timeout-keep-alive",
        "--timeout-body-read",
        "--limit-concurrency",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn a_model_that_cannot_load_is_an_error_exit() {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["serve", "/nonexistent/model.gguf", "--host", "127.0.0.1", "--port", "0"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nonexistent"), "{err}");
}

#[test]
fn kv_cache_dtype_is_applied_and_bad_values_are_a_clear_error() {
    let s = Server::start(&["--kv-cache-dtype", "float16"]);
    assert!(s.log().contains("MiB of float16)"), "{}", s.log());
    let (st, body) = s.post("/v1/completions", &json!({"prompt": "The capital of France is", "max_tokens": 4}));
    assert_eq!(st, 200, "{body}");
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(["serve", "--kv-cache-dtype", "fp8"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fp8") && err.contains("float16") && err.contains("bfloat16"), "{err}");
}

#[test]
fn an_empty_api_key_is_refused_at_start_up() {
    let mut args = vec!["serve".to_string()];
    args.extend(common::default_args());
    args.extend(["--host", "127.0.0.1", "--port", "0", "--api-key", ""].map(String::from));
    let mut child = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(&args)
        .env_remove("VLLM_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`--api-key ''` started a server without authentication");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_ne!(status.code(), Some(0));
    assert!(err.contains("--api-key") && err.contains("empty"), "{err}");
    assert!(!err.contains("listening on"), "it must refuse before it listens: {err}");
}
