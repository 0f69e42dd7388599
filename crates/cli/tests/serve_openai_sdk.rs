//! The official `openai` Python SDK (pinned in scripts/requirements-ci.txt, installed into the
//! test venv by scripts/fetch_test_models.sh) against the real server: models list,
//! completion, chat, streaming with usage, errors. A missing venv or SDK fails the test.

mod common;

use common::Server;
use std::path::PathBuf;
use std::process::Command;

fn venv_python() -> PathBuf {
    let py = vllm_rs_testutil::models_dir().join("venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/fetch_test_models.sh (it creates the test venv with the openai SDK from \
         scripts/requirements-ci.txt), or set VLLM_RS_TEST_MODELS",
        py.display()
    );
    let check = Command::new(&py).args(["-c", "import openai"]).output().expect("run the venv python");
    assert!(
        check.status.success(),
        "the test venv has no `openai` module: rerun scripts/fetch_test_models.sh (requirements-ci.txt pins it)\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    py
}

#[test]
fn official_openai_sdk_works_unmodified() {
    let py = venv_python();
    let s = Server::start(&["--served-model-name", "smol", "--api-key", "sdk-key"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_check.py");
    let out = Command::new(py).arg(script).args([&s.base, "smol", "sdk-key"]).output().expect("run the SDK check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "SDK check failed:\n{stdout}\n{stderr}\nserver log:\n{}", s.log());
    assert!(stdout.contains("OK"), "{stdout}");
}
