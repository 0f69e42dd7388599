//! The official `openai` SDK's Responses API and the `anthropic` SDK's Messages API (both pinned
//! in scripts/requirements-ci.txt, installed into the test venv by scripts/fetch_test_models.sh)
//! against the real server: plain, streaming, `previous_response_id`, stored responses, stop
//! sequences, count_tokens and errors on SmolLM2; tool use on Qwen2.5-Coder-0.5B with the hermes
//! parser. A missing venv or SDK fails the test.

mod common;

use common::Server;
use std::path::PathBuf;
use std::process::Command;

/// The test venv's python, checked to have `module`.
fn venv_python(module: &str) -> PathBuf {
    let py = vllm_rs_testutil::models_dir().join("venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/fetch_test_models.sh (it creates the test venv)", py.display());
    let check = Command::new(&py).args(["-c", &format!("import {module}")]).output().expect("run the venv python");
    assert!(
        check.status.success(),
        "the test venv has no `{module}` module: rerun scripts/fetch_test_models.sh (requirements-ci.txt pins it)\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    py
}

fn run_check(s: &Server, module: &str, script: &str, args: &[&str]) {
    let py = venv_python(module);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python").join(script);
    let out = Command::new(py).arg(path).arg(&s.base).args(args).output().expect("run the SDK check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}\nserver log:\n{}", s.log());
    assert!(stdout.contains("OK"), "{stdout}");
}

#[test]
fn openai_responses_and_anthropic_messages_sdks_work() {
    let s = Server::start(&["--served-model-name", "smol", "--api-key", "sdk-key"]);
    run_check(&s, "openai", "responses_sdk_check.py", &["smol", "sdk-key"]);
    run_check(&s, "anthropic", "anthropic_sdk_check.py", &["smol", "sdk-key"]);
}

#[test]
fn sdk_tool_use_round_trips_on_both_apis() {
    let model = vllm_rs_testutil::gguf_path("qwen05");
    let s = Server::start_model(
        &model,
        &["--served-model-name", "qwen", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    );
    run_check(&s, "anthropic", "sdk_tools_responses_messages_check.py", &["qwen"]);
}
