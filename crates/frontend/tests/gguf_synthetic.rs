//! Tokenizers built from small hand-written GGUF files: the paths the real files do not take
//! (a Llama-2 style SentencePiece vocabulary with a space prefix, a plain GPT-2 pre-tokenizer)
//! and every malformed-metadata error.

use std::path::{Path, PathBuf};
use vllm_rs_formats::gguf::GgufFile;
use vllm_rs_frontend::{GenerationConfig, Tokenizer};

enum Meta {
    Str(&'static str),
    U32(u32),
    Bool(bool),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

/// Writes a GGUF v3 file with metadata only.
fn write_gguf(name: &str, kvs: &[(&str, Meta)]) -> PathBuf {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, v) in kvs {
        string(&mut out, key);
        match v {
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
            Meta::U32(x) => {
                out.extend(4u32.to_le_bytes());
                out.extend(x.to_le_bytes());
            }
            Meta::Bool(b) => {
                out.extend(7u32.to_le_bytes());
                out.push(u8::from(*b));
            }
            Meta::Strs(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for s in items {
                    string(&mut out, s);
                }
            }
            Meta::I32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::F32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(6u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
    let path = std::env::temp_dir().join(format!("vllm-rs-frontend-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, out).unwrap();
    path
}

fn open(path: &Path) -> GgufFile {
    GgufFile::open(path).unwrap()
}

/// GPT-2's printable spelling of each byte.
fn byte_chars() -> Vec<String> {
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
                char::from(b).to_string()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap().to_string()
            }
        })
        .collect()
}

/// Byte alphabet (ids 0..256), then he, ll, hell, hello, <|end|> (control), <tool> (user-defined).
fn gpt2_meta(pre: &'static str) -> Vec<(&'static str, Meta)> {
    let mut tokens = byte_chars();
    tokens.extend(["he", "ll", "hell", "hello", "<|end|>", "<tool>"].map(String::from));
    let mut types = vec![1; 260];
    types.extend([3, 4]);
    let merges = ["h e", "l l", "he ll", "hell o"].map(String::from).to_vec();
    vec![
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.pre", Meta::Str(pre)),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.merges", Meta::Strs(merges)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(260)),
        ("tokenizer.chat_template", Meta::Str("{{ messages[0].content }}")),
    ]
}

#[test]
fn gpt2_vocabulary_with_control_and_user_tokens() {
    let path = write_gguf("gpt2", &gpt2_meta("gpt-2"));
    let g = open(&path);
    let tok = Tokenizer::from_gguf(&g).unwrap();
    // " hello" is one GPT-2 word, Ġhello; there is no Ġh merge, so Ġ stays alone.
    assert_eq!(tok.encode("hello<|end|> hello<tool>", true).unwrap(), vec![259, 260, 32, 259, 261]);
    assert_eq!(tok.decode(&[259, 260, 32, 259, 261], false).unwrap(), "hello<|end|> hello<tool>");
    assert_eq!(tok.decode(&[259, 260, 32, 259, 261], true).unwrap(), "hello hello<tool>");
    assert!(tok.is_special(260) && !tok.is_special(261));
    assert_eq!((tok.eos_token(), tok.bos_token(), tok.add_bos_token()), (Some("<|end|>"), None, false));
    assert_eq!(tok.chat_template(), Some("{{ messages[0].content }}"));
    assert_eq!(tok.vocab_size(), 262);
    let generation = GenerationConfig::from_gguf(&g).unwrap();
    assert_eq!(generation.eos_token_ids, vec![260]);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn llama2_style_sentencepiece_with_space_prefix() {
    // <unk> <s> </s>, 256 byte tokens, then pieces whose scores rank the merges.
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces = [
        ("\u{2581}", 0.0),
        ("h", 0.0),
        ("e", 0.0),
        ("l", 0.0),
        ("o", 0.0),
        ("w", 0.0),
        ("r", 0.0),
        ("d", 0.0),
        ("ll", -1.0),
        ("\u{2581}h", -2.0),
        ("\u{2581}he", -3.0),
        ("\u{2581}hell", -4.0),
        ("\u{2581}hello", -5.0),
        ("or", -6.0),
        ("\u{2581}w", -7.0),
        ("\u{2581}wor", -8.0),
        ("ld", -9.0),
        ("\u{2581}world", -10.0),
    ];
    for (p, s) in pieces {
        tokens.push(p.to_string());
        types.push(1);
        scores.push(s);
    }
    let id = |p: &str| tokens.iter().position(|t| t == p).unwrap() as u32;
    let (hello, world) = (id("\u{2581}hello"), id("\u{2581}world"));
    let path = write_gguf(
        "spm",
        &[
            ("tokenizer.ggml.model", Meta::Str("llama")),
            ("tokenizer.ggml.tokens", Meta::Strs(tokens.clone())),
            ("tokenizer.ggml.token_type", Meta::I32s(types)),
            ("tokenizer.ggml.scores", Meta::F32s(scores)),
            ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
            ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
            ("tokenizer.ggml.unknown_token_id", Meta::U32(0)),
        ],
    );
    let tok = Tokenizer::from_gguf(&open(&path)).unwrap();
    // llama.cpp's defaults for SentencePiece: a space prefix and BOS.
    assert_eq!(tok.encode("hello world", true).unwrap(), vec![1, hello, world]);
    assert_eq!(tok.decode(&[1, hello, world], true).unwrap(), "hello world");
    // é is not a piece: its UTF-8 bytes, <0xC3> <0xA9>.
    assert_eq!(tok.encode("é", false).unwrap(), vec![id("\u{2581}"), 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(tok.decode(&tok.encode("hello é", false).unwrap(), false).unwrap(), "hello é");
    // As llama.cpp: the space also goes after a special token, and before leading spaces.
    assert_eq!(tok.encode("</s>hello", false).unwrap(), vec![2, hello]);
    assert_eq!(tok.encode(" hello", false).unwrap()[..2], [id("\u{2581}"), hello]);
    std::fs::remove_file(path).unwrap();
}

fn gguf_error(name: &str, kvs: &[(&str, Meta)]) -> String {
    let path = write_gguf(name, kvs);
    let e = Tokenizer::from_gguf(&open(&path)).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(e.contains(path.to_str().unwrap()), "the error names the file: {e}");
    e
}

#[test]
fn malformed_tokenizer_metadata_is_a_clear_error() {
    let e = gguf_error(
        "kind",
        &[("tokenizer.ggml.model", Meta::Str("bert")), ("tokenizer.ggml.tokens", Meta::Strs(vec!["a".into()]))],
    );
    assert!(e.contains("\"bert\"") && e.contains("gpt2") && e.contains("llama"), "{e}");

    let e = gguf_error("pre", &gpt2_meta("my-new-pre"));
    assert!(e.contains("my-new-pre") && e.contains("smollm") && e.contains("llama-bpe"), "{e}");

    let mut no_merges = gpt2_meta("gpt-2");
    no_merges.retain(|(k, _)| *k != "tokenizer.ggml.merges");
    assert!(gguf_error("merges", &no_merges).contains("tokenizer.ggml.merges is missing"));

    let mut bad_merge = gpt2_meta("gpt-2");
    bad_merge[4].1 = Meta::Strs(vec!["x y".into(), "nospace".into()]);
    assert!(gguf_error("badmerge", &bad_merge).contains("merge #1"));

    let mut short_types = gpt2_meta("gpt-2");
    short_types[3].1 = Meta::I32s(vec![1, 1]);
    assert!(gguf_error("types", &short_types).contains("2 entries"));

    let mut bad_eos = gpt2_meta("gpt-2");
    bad_eos[5].1 = Meta::U32(9999);
    assert!(gguf_error("eos", &bad_eos).contains("outside the vocabulary"));

    let e = gguf_error("notokens", &[("tokenizer.ggml.model", Meta::Str("gpt2"))]);
    assert!(e.contains("tokenizer.ggml.tokens is missing"), "{e}");

    let e = gguf_error(
        "noscores",
        &[("tokenizer.ggml.model", Meta::Str("llama")), ("tokenizer.ggml.tokens", Meta::Strs(vec!["a".into()]))],
    );
    assert!(e.contains("tokenizer.ggml.scores"), "{e}");

    let mut bad_flag = gpt2_meta("gpt-2");
    bad_flag.push(("tokenizer.ggml.add_bos_token", Meta::U32(1)));
    assert!(gguf_error("flag", &bad_flag).contains("add_bos_token is not a boolean"));

    let mut ok = gpt2_meta("gpt-2");
    ok.push(("tokenizer.ggml.add_bos_token", Meta::Bool(false)));
    let path = write_gguf("ok", &ok);
    assert!(Tokenizer::from_gguf(&open(&path)).is_ok());
    std::fs::remove_file(path).unwrap();
}
