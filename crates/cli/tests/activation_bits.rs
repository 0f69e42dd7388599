//! `--activation-bits 8` from the command line: it runs, the log says so (and, where the CPU
//! lacks AVX-512 VNNI, that it is no faster there), and it takes effect — SmolLM2's greedy
//! answer to a prompt whose int8 tokens leave the int16 ones within 32 tokens differs.

use std::process::Command;
use vllm_rs_testutil::gguf_path;

fn vllm_rs(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-rs")).args(args).output().expect("runs vllm-rs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

#[test]
fn int8_activations_run_say_so_and_change_the_tokens() {
    let smol = gguf_path("smollm2");
    let model = smol.to_str().unwrap();
    let (_, err) =
        vllm_rs(&["bench", "pp-tg", "--model", model, "-r", "1", "-p", "16", "-n", "4", "--activation-bits", "8"]);
    assert!(err.contains("--activation-bits 8: "), "{err}");
    // The first golden prompt of tests/goldens/real/smollm2.json: int8 leaves float32 (and int16)
    // at its 13th token.
    let prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";
    let answer = |bits: &str| {
        let args = ["generate", "--model", model, "--prompt", prompt, "--max-tokens", "32", "--temperature", "0"];
        vllm_rs(&[&args[..], &["--ignore-eos", "--activation-bits", bits]].concat()).0
    };
    let (int16, int8) = (answer("16"), answer("8"));
    assert!(!int16.is_empty() && !int8.is_empty());
    assert_ne!(int16, int8, "--activation-bits 8 gave the int16 answer: the flag took no effect");
}
