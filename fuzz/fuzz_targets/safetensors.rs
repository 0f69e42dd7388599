//! A safetensors file (header length, JSON header, tensor offsets) loaded as a checkpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_rs_models::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("vllm-rs-fuzz-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("model.safetensors"), data).expect("write the input");
    if let Ok(c) = Checkpoint::from_safetensors_dir(&dir) {
        let names: Vec<String> = c.names().map(str::to_string).collect();
        for n in names {
            let _ = c.vector(&n, 4);
            let _ = c.matrix(&n, 2, 2);
        }
    }
});
