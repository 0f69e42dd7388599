//! The tokenizer built from GGUF metadata gives the same ids as the tokenizer.json of the
//! matching HF directory (for gemma3 the real Gemma 3 tokenizer.json), and decodes them back.

mod common;

use common::{code_texts, gguf_tokenizer, golden_texts, hf_tokenizer, random_texts};
use vllm_rs_frontend::Tokenizer;

fn corpus() -> Vec<String> {
    let mut texts = golden_texts();
    texts.extend(code_texts(60));
    texts.extend(random_texts(400, 7));
    texts
}

fn compare(name: &str, gguf: &Tokenizer, hf: &Tokenizer, compare_skip_special: bool) {
    let mut checked = 0;
    for text in corpus() {
        for add_special in [false, true] {
            let a = gguf.encode(&text, add_special).unwrap();
            let b = hf.encode(&text, add_special).unwrap();
            assert_eq!(a, b, "{name}: ids differ (add_special_tokens={add_special}) for {text:?}");
        }
        let ids = gguf.encode(&text, false).unwrap();
        let back = gguf.decode(&ids, false).unwrap();
        assert_eq!(back, hf.decode(&ids, false).unwrap(), "{name}: decode differs for {text:?}");
        // SentencePiece decodes its ▁ mark as a space, so text that contains ▁ itself cannot come back.
        if !text.contains('\u{2581}') {
            assert_eq!(back, text, "{name}: decode(encode(text)) is not the text");
        }
        if compare_skip_special {
            assert_eq!(gguf.decode(&ids, true).unwrap(), hf.decode(&ids, true).unwrap(), "{name}: {text:?}");
        }
        checked += 1;
    }
    assert!(checked > 400);
}

fn same_specials(name: &str, gguf: &Tokenizer, hf: &Tokenizer) {
    assert_eq!(gguf.add_bos_token(), hf.add_bos_token(), "{name} add_bos");
    assert_eq!(gguf.add_eos_token(), hf.add_eos_token(), "{name} add_eos");
    for id in [0u32, 1, 2, 100, 1000] {
        assert_eq!(gguf.id_to_token(id), hf.id_to_token(id), "{name} token {id}");
    }
}

#[test]
fn smollm2_gguf_matches_hf() {
    let (g, h) = (gguf_tokenizer("smollm2"), hf_tokenizer("smollm2"));
    same_specials("smollm2", &g, &h);
    assert_eq!(g.bos_token_id(), h.bos_token_id());
    assert_eq!((g.eos_token(), g.vocab_size()), (Some("<|im_end|>"), 49152));
    assert_eq!(g.vocab_size(), h.vocab_size());
    assert_eq!(g.chat_template(), h.chat_template());
    compare("smollm2", &g, &h, true);
}

#[test]
fn qwen05_gguf_matches_hf() {
    let (g, h) = (gguf_tokenizer("qwen05"), hf_tokenizer("qwen05"));
    same_specials("qwen05", &g, &h);
    // The GGUF names <|endoftext|> as BOS (never added); the HF config names none.
    assert_eq!((g.bos_token_id(), h.bos_token_id()), (Some(151643), None));
    assert_eq!(g.eos_token_id(), h.eos_token_id());
    assert_eq!(g.vocab_size(), h.vocab_size());
    assert_eq!(g.chat_template(), h.chat_template());
    compare("qwen05", &g, &h, true);
}

#[test]
fn gemma3_gguf_matches_the_real_gemma3_tokenizer() {
    let (g, h) = (gguf_tokenizer("gemma3"), hf_tokenizer("gemma3"));
    same_specials("gemma3", &g, &h);
    assert_eq!(g.bos_token_id(), h.bos_token_id());
    assert!(g.add_bos_token());
    // The GGUF's eos is <eos>; the HF config names <end_of_turn> (the chat turn end) instead.
    assert_eq!((g.eos_token(), h.eos_token()), (Some("<eos>"), Some("<end_of_turn>")));
    // HF adds <image_soft_token> (262144) beyond the GGUF's 262144 tokens.
    assert_eq!((g.vocab_size(), h.vocab_size()), (262144, 262145));
    // The GGUF marks every control token special (<unused0>, <mask>...), the HF config only a
    // few: decoding with skip_special_tokens differs on those, so it is not compared here.
    compare("gemma3", &g, &h, false);
}
