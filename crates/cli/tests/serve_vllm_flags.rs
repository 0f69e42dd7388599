//! `vllm serve` command lines work unchanged: vLLM's flags (underscore spellings, `-tp`, a YAML
//! `--config`, flags that mean nothing on a CPU) start the server, and the ones that cannot be
//! honoured stop start-up with a message saying why.

mod common;

use common::Server;
use serde_json::json;
use std::process::Command;

fn vllm_rs(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(args).env("NO_COLOR", "1").output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_vllm_quickstart_command_line_starts_the_server() {
    let dir = std::env::temp_dir().join(format!("vllm-rs-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.yaml");
    std::fs::write(&config, "max_logprobs: 3\nenable_prefix_caching: true\nseed: 7\n").unwrap();
    let s = Server::start(&[
        "--dtype",
        "bfloat16",
        "--gpu_memory_utilization",
        "0.5",
        "-tp",
        "1",
        "--trust-remote-code",
        "--enforce-eager",
        "--mamba-ssm-cache-dtype",
        "float32",
        "--language-model-only",
        "--limit-mm-per-prompt",
        r#"{"image": 4, "video": 2}"#,
        "--disable-log-requests",
        "--uvicorn-log-level",
        "warning",
        "--max_num_seqs",
        "8",
        "-dp",
        "1",
        "--root-path",
        "/api",
        "--load-format",
        "auto",
        "--tokenizer-mode",
        "auto",
        "--chat-template-content-format",
        "string",
        "--enable-request-id-headers",
        "--hf-token",
        "hf_unused",
        "--config",
        config.to_str().unwrap(),
    ]);
    // --enable-request-id-headers: the client's id comes back, else a new one.
    let id_of = |given: Option<&str>| {
        let mut req = ureq::get(s.url("/health"));
        if let Some(g) = given {
            req = req.header("x-request-id", g);
        }
        let resp = req.call().expect("GET /health");
        resp.headers().get("x-request-id").map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(id_of(Some("trace-42")).as_deref(), Some("trace-42"));
    let fresh = id_of(None).expect("a generated x-request-id");
    assert!(fresh.len() == 32 && fresh != id_of(None).unwrap(), "{fresh}");
    let r = s.ok("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0}));
    assert!(r["choices"][0]["text"].is_string());
    // max_logprobs: 3 from the YAML file is in force.
    let (status, _) = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 1, "logprobs": 5}));
    assert_eq!(status, 400, "the config file's max_logprobs applies");
    let log = s.log();
    for note in [
        "--dtype bfloat16: dense weights and activations are rounded to bf16",
        "--trust-remote-code",
        "--enforce-eager",
        "--limit-mm-per-prompt",
        "--root-path",
        "--chat-template-content-format",
    ] {
        assert!(log.contains(note), "no log line for {note}: {log}");
    }
}

/// The rest of vLLM's flags (crates/cli/src/vllm_flags.rs): accepted with a log line, rewritten
/// to ours (the KV size and the speculative shorthand take effect), or refused saying why.
#[test]
fn the_rest_of_vllms_serve_flags_start_the_server_or_say_why_not() {
    let s = Server::start(&[
        "--distributed-executor-backend",
        "mp",
        "--compilation-config",
        r#"{"level": 3}"#,
        "-asc",
        "1",
        "--no-async-scheduling",
        "--cudagraph-capture-sizes",
        "1",
        "2",
        "4",
        "--kv-cache-memory-bytes",
        "128MiB",
        "--spec-method",
        "ngram",
        "--spec-tokens",
        "3",
    ]);
    let r = s.ok("/v1/completions", &json!({"prompt": "1, 2, 3, 1, 2, 3, 1, 2", "max_tokens": 8, "temperature": 0}));
    assert!(r["choices"][0]["text"].is_string());
    assert!(s.metric("vllm:spec_decode_num_draft_tokens_total") > 0.0, "--spec-method ngram took no effect");
    let log = s.log();
    for note in [
        "--distributed-executor-backend mp: accepted, one process serves the model",
        "--compilation-config {\"level\": 3}: accepted, a GPU setting",
        "-asc 1: accepted (1 is how it is here)",
        "--cudagraph-capture-sizes 1 2 4: accepted",
    ] {
        assert!(log.contains(note), "no log line for {note}: {log}");
    }
    // --kv-cache-memory-bytes is --kv-cache-memory, given after the test servers' 256MiB: the
    // last value wins as with argparse, so whole blocks within 128 MiB.
    let kv = log.split("KV cache: ").nth(1).and_then(|l| l.split(" blocks of").next()).expect("KV cache line");
    let kv_mib: f64 = log.split_once(" group(s) (").unwrap().1.split(" MiB").next().unwrap().parse().unwrap();
    assert!((120.0..=128.0).contains(&kv_mib), "{kv} blocks, {kv_mib} MiB: {log}");
    let model = vllm_rs_testutil::gguf_path("smollm2");
    for (flags, says) in [
        (&["--headless"][..], "--headless: there is no engine-only mode"),
        (&["-dcp", "2"][..], "-dcp 2: only 1 is supported"),
        (&["--logits-processors", "my.Proc"][..], "--logits-processors: it names Python code"),
        (&["--spec-tokens", "3", "-sc", "{}"][..], "give these or --speculative-config, not both"),
    ] {
        let (ok, err) = vllm_rs(&[&["serve", model.to_str().unwrap()][..], flags].concat());
        assert!(!ok && err.contains(says), "{flags:?}: {err}");
    }
}

#[test]
fn flags_that_cannot_be_honoured_are_refused() {
    let model = vllm_rs_testutil::gguf_path("smollm2");
    let model = model.to_str().unwrap();
    for (flag, value, says) in [
        ("-tp", "2", "one process serves one model"),
        ("--quantization", "awq", "only GGUF files are read"),
        ("--device", "cuda", "built without CUDA support"),
        ("--device", "tpu", "expected auto, cpu or cuda"),
        ("--dtype", "int8", "expected auto, float32"),
        ("--activation-bits", "4", "[possible values: 16, 8]"),
        ("--gpu-memory-utilization", "1.5", "must be in (0, 1]"),
        ("--mamba-ssm-cache-dtype", "float16", "recurrent states are kept in float32"),
        ("-dp", "2", "one engine per process"),
        ("--lora-modules", "sql=./adapter", "LoRA adapters are not supported yet"),
        ("--ssl-keyfile", "key.pem", "terminate TLS in a reverse proxy"),
        ("--load-format", "dummy", "only safetensors, PyTorch .bin and GGUF files are read"),
        ("--tokenizer-mode", "mistral", "only Hugging Face tokenizers"),
    ] {
        let (ok, err) = vllm_rs(&["generate", "--model", model, "--prompt", "x", flag, value]);
        assert!(!ok && err.contains(says), "{flag} {value}: {err}");
    }
}

/// `--load-format pt` (vLLM's name for PyTorch `.bin` weights) is accepted, and a directory of
/// them loads and generates.
#[test]
fn load_format_pt_reads_a_pytorch_bin_directory() {
    let dir = vllm_rs_testutil::test_data("data/tiny-bin/llama");
    let tokenizer = vllm_rs_testutil::hf_dir("smollm2");
    let (ok, err) = vllm_rs(&[
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--prompt",
        "a b c",
        "--max-tokens",
        "2",
        "--load-format",
        "pt",
    ]);
    assert!(ok, "{err}");
}

#[test]
fn gpu_memory_utilization_sizes_the_kv_cache_from_available_memory() {
    let model = vllm_rs_testutil::gguf_path("smollm2");
    let args = [
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "x",
        "--max-tokens",
        "1",
        "--max-model-len",
        "256",
    ];
    let mib = |extra: &[&str]| -> f64 {
        let (ok, err) = vllm_rs(&[&args[..], extra].concat());
        assert!(ok, "{err}");
        let line = err.lines().find(|l| l.contains("KV cache:")).expect("KV cache log line");
        let at = line.find(" MiB of").expect("MiB");
        line[..at].rsplit(['(', ' ']).next().unwrap().parse().unwrap()
    };
    let (small, large) = (mib(&["--gpu-memory-utilization", "0.01"]), mib(&["--gpu-memory-utilization", "0.02"]));
    assert!((large / small - 2.0).abs() < 0.1, "0.01 → {small} MiB, 0.02 → {large} MiB");
}

#[test]
fn tokenizer_flag_replaces_the_models_tokenizer() {
    let model = vllm_rs_testutil::gguf_path("smollm2");
    let ids = |extra: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
            .args(["--log-level", "error", "generate", "--model", model.to_str().unwrap(), "--prompt", "Hello world"])
            .args(["--max-tokens", "1", "--json", "--max-model-len", "256"])
            .args(extra)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["prompt_token_ids"].clone()
    };
    let own = ids(&[]);
    let qwen = vllm_rs_testutil::hf_dir("qwen05");
    let other = ids(&["--tokenizer", qwen.to_str().unwrap()]);
    assert_eq!(own, json!([19556, 905]), "SmolLM2's own ids");
    assert_eq!(other, json!([9707, 1879]), "Qwen2.5's ids for the same text");
    let (ok, err) =
        vllm_rs(&["generate", "--model", model.to_str().unwrap(), "--prompt", "x", "--tokenizer", "/nonexistent"]);
    assert!(!ok && err.contains("tokenizer"), "{err}");
}

#[test]
fn download_dir_and_revision_choose_where_and_what_is_fetched() {
    // Offline, resolution says where it looked: under --download-dir, at --revision.
    let run = |args: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(args).env("HF_HUB_OFFLINE", "1").output().expect("runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["generate", "--model", "smollm2", "--prompt", "x", "--download-dir", "/tmp/vllm-rs-dl"]);
    assert!(err.contains("/tmp/vllm-rs-dl/models/smollm2/"), "{err}");
    let err = run(&[
        "generate",
        "--model",
        "org/repo",
        "--revision",
        "v2",
        "--prompt",
        "x",
        "--download-dir",
        "/tmp/vllm-rs-dl",
    ]);
    assert!(err.contains("revision 'v2'") && err.contains("/tmp/vllm-rs-dl/models--org--repo"), "{err}");
}

/// `--override-generation-config`: its values become the defaults of requests that leave them out;
/// a key that does nothing here, or text that is not a JSON object, stops start-up.
#[test]
fn override_generation_config_sets_the_sampling_defaults() {
    let s = Server::start(&["--override-generation-config", r#"{"temperature": 0, "max_new_tokens": 3}"#]);
    let chat = |extra: serde_json::Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "Name a colour."}]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s.ok("/v1/chat/completions", &body)
    };
    let by_default = chat(json!({}));
    let greedy = chat(json!({"max_tokens": 3, "temperature": 0}));
    assert_eq!(by_default["usage"]["completion_tokens"], 3, "{by_default}");
    assert_eq!(by_default["choices"][0]["message"], greedy["choices"][0]["message"]);
    for (value, says) in [(r#"{"beam_width": 2}"#, "beam_width is not a default"), ("temperature=0", "a JSON object")] {
        let (ok, err) = vllm_rs(&["serve", "--port", "0", "--override-generation-config", value]);
        assert!(!ok && err.contains(says), "{value}: {err}");
    }
}
