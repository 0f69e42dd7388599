//! A model folder's `tokenizer_config.json` as the loader reads it, beside a small byte-level
//! BPE `tokenizer.json`: special tokens (strings, AddedToken objects, lists, maps), the
//! `added_tokens_decoder`, `add_bos_token`/`add_eos_token` (which rebuild the post-processor)
//! and chat templates (a string or a named list). The tokenizer then encodes and decodes text
//! with those tokens in it, and its chat template (if it compiles) renders a conversation. Ok or
//! an error, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use std::path::PathBuf;
use std::sync::OnceLock;
use vllm_rs_frontend::{ChatTemplate, Tokenizer};

const TOKENIZER_JSON: &[u8] = include_bytes!("../../tests/data/gpt_oss/tokenizer.json");

/// This process's model folder, holding the fixed tokenizer.json.
fn dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("vllm-rs-fuzz-tokenizer-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create the folder");
        std::fs::write(d.join("tokenizer.json"), TOKENIZER_JSON).expect("write tokenizer.json");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = dir();
    std::fs::write(dir.join("tokenizer_config.json"), data).expect("write the input");
    let Ok(t) = Tokenizer::from_hf_dir(dir) else { return };
    let specials: Vec<String> = t.special_tokens_map().into_iter().map(|(_, tok)| tok).collect();
    let text = format!("Hello {} world", specials.join(" x "));
    for add in [false, true] {
        if let Ok(ids) = t.encode(&text, add) {
            let _ = t.decode(&ids, true);
            let _ = t.decode(&ids, false);
        }
    }
    for with_tools in [false, true] {
        if let Ok(Some(template)) = ChatTemplate::from_tokenizer(&t, with_tools) {
            let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]);
            let _ = template.render(&messages, true, &Default::default());
        }
    }
});
