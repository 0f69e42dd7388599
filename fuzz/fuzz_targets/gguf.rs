//! A GGUF file: header, metadata, tensor infos (sizes, offsets), the config and generation
//! config read from it, and every tensor's weight view. Thin: the reader is the models crate's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_rs_frontend::GenerationConfig;
use vllm_rs_models::config::config_from_gguf;
use vllm_rs_models::gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("vllm-rs-fuzz-{}.gguf", std::process::id()));
    std::fs::write(&path, data).expect("write the input");
    if let Ok(g) = GgufFile::open(&path) {
        let _ = config_from_gguf(&g);
        let _ = GenerationConfig::from_gguf(&g);
        let names: Vec<String> = g.tensors.keys().cloned().collect();
        for name in names {
            let _ = g.weight(&name);
        }
    }
});
