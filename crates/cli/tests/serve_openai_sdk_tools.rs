//! The official `openai` Python SDK (the test venv of scripts/fetch_test_models.sh) calling tools
//! and parsing structured output against the real server on Qwen2.5-Coder-0.5B with the hermes
//! tool parser: see tests/python/openai_tools_check.py.

mod common;

use common::Server;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn openai_sdk_tool_calls_and_parse_work() {
    let py = vllm_rs_testutil::models_dir().join("venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/fetch_test_models.sh", py.display());
    let model = vllm_rs_testutil::gguf_path("qwen05");
    let s = Server::start_model(
        &model,
        &["--served-model-name", "qwen", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_tools_check.py");
    let out = Command::new(py).arg(script).args([&s.base, "qwen"]).output().expect("run the SDK check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "SDK check failed:\n{stdout}\n{stderr}\nserver log:\n{}", s.log());
    assert!(stdout.contains("OK"), "{stdout}");
}
