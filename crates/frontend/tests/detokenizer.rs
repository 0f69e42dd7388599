//! Streaming detokenization: the deltas add up to `decode(all output ids)` on every real
//! tokenizer, and never show U+FFFD for a character split across tokens.

mod common;

use common::{Rng, golden_texts, hf_tokenizer, random_texts};
use std::sync::Arc;
use vllm_rs_frontend::{IncrementalDetokenizer, Tokenizer};

const TOKENIZERS: [&str; 4] = ["smollm2", "qwen05", "gemma3_tokenizer", "qwen3"];

fn texts() -> Vec<String> {
    let mut t = golden_texts();
    t.extend(random_texts(60, 11));
    t.extend(
        [
            "👨‍👩‍👧‍👦 family, 🇯🇵 flag, 🧑🏾‍🚀 astronaut",
            "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀𓀁 𐍈 — rare scripts that need byte fallback",
            "漢字かな交じり文と한국어와 中文混合",
        ]
        .map(String::from),
    );
    t
}

/// Streams `ids` after `prompt`; returns the deltas.
fn stream(tok: &Arc<Tokenizer>, prompt: &[u32], ids: &[u32], skip: bool) -> Vec<String> {
    let mut d = IncrementalDetokenizer::new(tok.clone(), prompt, skip).unwrap();
    ids.iter().map(|&id| d.push(id).unwrap()).collect()
}

#[test]
fn deltas_add_up_to_the_decoded_text() {
    for name in TOKENIZERS {
        let tok = Arc::new(hf_tokenizer(name));
        let prompt = tok.encode("User: say something in 日本語 👋\nAssistant:", true).unwrap();
        let mut byte_split_seen = false;
        for text in texts() {
            let ids = tok.encode(&text, false).unwrap();
            let want = tok.decode(&ids, false).unwrap();
            for p in [&prompt[..], &[]] {
                let deltas = stream(&tok, p, &ids, false);
                assert_eq!(deltas.concat(), want, "{name}: {text:?}");
                if !want.contains('\u{FFFD}') {
                    assert!(
                        deltas.iter().all(|d| !d.contains('\u{FFFD}')),
                        "{name}: U+FFFD mid-character in {deltas:?}"
                    );
                }
                byte_split_seen |= deltas.iter().any(String::is_empty) && !ids.is_empty();
            }
        }
        assert!(byte_split_seen, "{name}: no token ended inside a character; the corpus does not test the hold-back");
    }
}

#[test]
fn special_tokens_skipped_or_kept() {
    for name in TOKENIZERS {
        let tok = Arc::new(hf_tokenizer(name));
        let specials: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&i| tok.is_special(i)).take(3).collect();
        assert!(!specials.is_empty(), "{name} has special tokens");
        let mut ids = vec![specials[0]];
        ids.extend(tok.encode("Hello 世界", false).unwrap());
        ids.extend(&specials);
        ids.extend(tok.encode(" and 🎉 again", false).unwrap());
        ids.push(specials[0]);
        for skip in [true, false] {
            let deltas = stream(&tok, &tok.encode("prompt", false).unwrap(), &ids, skip);
            assert_eq!(deltas.concat(), tok.decode(&ids, skip).unwrap(), "{name} skip={skip}");
        }
    }
}

/// Random ids (for byte-level vocabularies many are single bytes that do not form valid UTF-8):
/// the deltas plus what is held back at the end are exactly `decode(all)`, and without the tail
/// they are a prefix of it.
///
/// Gemma's <0xNN> byte tokens are left out: HF's ByteFallback decoder turns a whole run of byte
/// tokens into U+FFFDs when the run is not valid UTF-8, so `decode` of a random run changes
/// characters already decoded (`<0x25>` is "%" alone but "\u{FFFD}" before `<0xEA>`). No stream
/// can match that; text made of whole characters (the tests above) streams exactly.
#[test]
fn random_id_streams() {
    let mut rng = Rng::new(3);
    for name in TOKENIZERS {
        let tok = Arc::new(hf_tokenizer(name));
        let is_byte_fallback = |id: u32| tok.id_to_token(id).is_some_and(|t| t.len() == 6 && t.starts_with("<0x"));
        let mut streams = 0;
        while streams < 100 {
            let n = 1 + rng.below(40);
            // Byte-level vocabularies keep their single bytes among the first ids.
            let ids: Vec<u32> = (0..n)
                .map(|_| if rng.below(3) == 0 { rng.below(tok.vocab_size()) } else { rng.below(300) } as u32)
                .collect();
            if ids.iter().any(|&id| is_byte_fallback(id)) {
                continue;
            }
            streams += 1;
            let mut d = IncrementalDetokenizer::new(tok.clone(), &[], false).unwrap();
            let mut out = String::new();
            for &id in &ids {
                out.push_str(&d.push(id).unwrap());
            }
            let full = tok.decode(&ids, false).unwrap();
            assert!(full.starts_with(&out), "{name}: {ids:?}");
            out.push_str(&d.flush().unwrap());
            assert_eq!(out, full, "{name}: {ids:?}");
        }
    }
}

#[test]
fn gguf_built_tokenizers_stream_too() {
    let tok = Arc::new(common::gguf_tokenizer("gemma3"));
    for text in ["𓀀 byte fallback 𓀁", "plain words", "tabs\tand\nnewlines  "] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(stream(&tok, &[2], &ids, true).concat(), text);
    }
}

#[test]
fn out_of_vocabulary_ids_are_errors() {
    let tok = Arc::new(hf_tokenizer("smollm2"));
    let mut d = IncrementalDetokenizer::new(tok.clone(), &[1, 2, 3], false).unwrap();
    let e = d.push(1_000_000).unwrap_err().to_string();
    assert!(e.contains("1000000"), "{e}");
    assert!(IncrementalDetokenizer::new(tok, &[5, 9_999_999], false).is_err());
}
