//! HF directories with PyTorch `.bin` weights (`scripts/make_tiny_bin.py`: the tiny Llama's
//! tensors saved by `torch.save`, whole and in two shards with an index) load as their
//! safetensors twins do: every tensor read, transformers' greedy ids, the same logits bit for bit.

mod common;

use common::{greedy, ids};
use vllm_rs_testutil::{golden, test_data};

#[test]
fn pytorch_bin_checkpoints_decode_as_their_safetensors_twins() {
    let st = vllm_rs_models::load(&test_data("data/tiny/llama")).unwrap_or_else(|e| panic!("{e}"));
    let g = golden("tiny/llama.json");
    let n_new = g["num_new_tokens"].as_u64().unwrap() as usize;
    for dir in ["data/tiny-bin/llama", "data/tiny-bin/llama_sharded"] {
        let lm = vllm_rs_models::load(&test_data(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert!(lm.unread.is_empty(), "{dir}: tensors left unread: {:?}", lm.unread);
        for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(&case["prompt_token_ids"]);
            let got = greedy(lm.model.as_ref(), &prompt, n_new, usize::MAX);
            assert_eq!(got.token_ids, ids(&case["token_ids"]), "{dir} case {i}: ids differ from transformers");
            let want = greedy(st.model.as_ref(), &prompt, n_new, usize::MAX);
            assert!(got.final_logits == want.final_logits, "{dir} case {i}: logits differ from the safetensors twin");
        }
    }
}

#[test]
fn a_corrupt_pytorch_bin_is_refused_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("vllm-rs-bad-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(test_data("data/tiny-bin/llama/config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(test_data("data/tiny-bin/llama/pytorch_model.bin")).unwrap();
    std::fs::write(dir.join("pytorch_model.bin"), &bytes[..bytes.len() / 2]).unwrap();
    let err = vllm_rs_models::load(&dir).err().expect("a truncated file is refused").to_string();
    assert!(err.contains("pytorch_model.bin"), "{err}");
    // Files that hold no weights (training_args.bin) are not taken for weights.
    std::fs::remove_file(dir.join("pytorch_model.bin")).unwrap();
    std::fs::write(dir.join("training_args.bin"), b"not weights").unwrap();
    let err = vllm_rs_models::load(&dir).err().expect("no weights").to_string();
    assert!(err.contains("no *.safetensors (or pytorch_model*.bin) files"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
