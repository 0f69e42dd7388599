//! `vllm-rs embed` on all-MiniLM-L6-v2: the golden sentences from a file, as JSON lines and as
//! `.npy`, match sentence-transformers (cosine ≥ 0.99999; the long one is truncated as
//! sentence-transformers truncates it); a generative model and `--no-truncate` on a long text
//! fail with a message.

use std::process::Command;
use vllm_rs_testutil::{gguf_path, golden, hf_dir};

fn embed(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-rs")).arg("embed").args(args).output().expect("run vllm-rs embed")
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

#[test]
fn embeds_a_file_as_jsonl_and_npy() {
    let g = golden("embeddings/minilm.json");
    let cases = g["cases"].as_array().unwrap();
    let dir = std::env::temp_dir().join(format!("vllm-rs-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("texts.txt");
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    std::fs::write(&input, texts.join("\n")).unwrap();
    let model = hf_dir("minilm");
    let (m, i) = (model.to_str().unwrap(), input.to_str().unwrap());
    let out = embed(&["--model", m, "--input", i]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), cases.len());
    let npy = dir.join("v.npy");
    let out = embed(&["--model", m, "--input", i, "--format", "npy", "--output", npy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&npy).unwrap();
    let data = &bytes[10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize..];
    let npy_vals: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(npy_vals.len(), cases.len() * 384);
    for (k, c) in cases.iter().enumerate() {
        let want: Vec<f64> = c["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let got: Vec<f64> = lines[k]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert!(cosine(&got, &want) >= 0.99999, "line {k}");
        let row: Vec<f64> = npy_vals[k * 384..(k + 1) * 384].iter().map(|&x| x as f64).collect();
        assert!(cosine(&row, &got) > 0.9999999, "npy row {k}");
    }
    let out = embed(&["--model", m, "--input", i, "--no-truncate"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("line 11"));
    let smol = gguf_path("smollm2");
    let out = embed(&["--model", smol.to_str().unwrap(), "--input", i]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("embedding model"));
    // --runner / --convert that cannot apply stop with a message naming the flag.
    for (flags, says) in
        [(["--runner", "generate"], "--runner generate"), (["--convert", "classify"], "--convert classify")]
    {
        let out = embed(&["--model", m, "--input", i, flags[0], flags[1]]);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(says), "{flags:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
