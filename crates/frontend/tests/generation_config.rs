//! Generation configs of the real models: HF generation_config.json and GGUF metadata.

use vllm_rs_formats::gguf::GgufFile;
use vllm_rs_frontend::GenerationConfig;

fn hf(name: &str) -> GenerationConfig {
    GenerationConfig::from_model_dir(&vllm_rs_testutil::hf_dir(name)).unwrap().expect("generation_config.json")
}

fn gguf(name: &str) -> GenerationConfig {
    GenerationConfig::from_gguf(&GgufFile::open(&vllm_rs_testutil::gguf_path(name)).unwrap()).unwrap()
}

#[test]
fn hf_generation_configs() {
    let s = hf("smollm2");
    assert_eq!((s.bos_token_id, s.eos_token_ids.clone(), s.pad_token_id), (Some(1), vec![2, 0], Some(2)));
    let q = hf("qwen05");
    assert_eq!(q.eos_token_ids, vec![151645, 151643]);
    let g = hf("gemma3");
    assert_eq!((g.bos_token_id, g.eos_token_ids.clone(), g.pad_token_id), (Some(2), vec![1, 106], Some(0)));
    assert_eq!(g.temperature, None);
}

/// llama.cpp's end-of-generation sets for these files: the eos first, then every token its
/// vocabulary code treats as EOG (by id key or by text, FIM pad/repo/separator included).
#[test]
fn gguf_end_of_generation_sets() {
    let s = gguf("smollm2");
    // <|im_end|>, <|endoftext|>, and <reponame> (llama.cpp's FIM repo token).
    assert_eq!((s.bos_token_id, s.eos_token_ids.clone(), s.pad_token_id), (Some(1), vec![2, 0, 4], Some(2)));
    let q = gguf("qwen05");
    // <|im_end|>, then </s> (a plain token llama.cpp still treats as EOG), <|endoftext|>,
    // <|fim_pad|>, <|repo_name|>, <|file_sep|>.
    assert_eq!(q.eos_token_ids, vec![151645, 128247, 151643, 151662, 151663, 151664]);
    let g = gguf("gemma3");
    // <eos>, <end_of_turn>, </s>.
    assert_eq!(g.eos_token_ids, vec![1, 106, 212]);
    assert_eq!((g.temperature, g.top_k, g.max_new_tokens), (None, None, None));
}
