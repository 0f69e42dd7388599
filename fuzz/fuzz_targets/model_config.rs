//! `config.json` and `generation_config.json` as the loaders read them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_rs_frontend::GenerationConfig;
use vllm_rs_models::config::{CommonConfig, architecture, lift_rope_parameters};

fuzz_target!(|data: &[u8]| {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    lift_rope_parameters(&mut v);
    let _ = architecture(&v);
    if let Ok(c) = serde_json::from_value::<CommonConfig>(v.clone())
        && c.validate().is_ok()
    {
        let _ = (c.num_kv_heads(), c.head_dim());
    }
    let _ = GenerationConfig::from_json(&v);
});
