//! Builds an HF `tokenizers::Tokenizer` from a GGUF file's `tokenizer.ggml.*` metadata.
//!
//! Two vocabulary kinds (`tokenizer.ggml.model`):
//! - `gpt2`: byte-level BPE with the file's merges; the pre-tokenizer regex is chosen by
//!   `tokenizer.ggml.pre` (the names llama.cpp uses).
//! - `llama`: SentencePiece BPE with byte fallback (Llama 2, Gemma). The file has no merges, so
//!   they are derived from the token scores the way HF's SentencePiece converter does, which makes
//!   the ids equal to the model's own tokenizer.json.
//!
//! Token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
//! Control (and unknown) tokens become special added tokens, user-defined ones plain added tokens:
//! both are matched whole in the text before the model runs, as llama.cpp does.

use crate::error::{Error, Result};
use crate::tokenizer::Parts;
use std::collections::HashSet;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::utils::Sequence as NormalizerSequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};
use vllm_rs_formats::gguf::{GgufFile, Value};

const NORMAL: i64 = 1;
const UNKNOWN: i64 = 2;
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;
const BYTE: i64 = 6;

/// SentencePiece's word-boundary mark, which stands for a space inside tokens.
const SPM_SPACE: char = '\u{2581}';

const SUPPORTED_KINDS: &str = "gpt2 (byte-level BPE), llama (SentencePiece BPE)";

/// Everything read from the metadata, checked for shape.
struct Vocabulary<'a> {
    tokens: Vec<&'a str>,
    types: Vec<i64>,
}

pub(crate) fn build(g: &GgufFile) -> Result<(tokenizers::Tokenizer, Parts)> {
    let err = |msg: String| Error::tokenizer(format!("{}: {msg}", g.path.display()));
    let kind =
        g.get_str("tokenizer.ggml.model").ok_or_else(|| err("metadata key tokenizer.ggml.model is missing".into()))?;
    let vocab = read_vocabulary(g).map_err(err)?;
    let (inner, default_add_bos) = match kind {
        "gpt2" => (build_byte_level(g, &vocab).map_err(err)?, false),
        "llama" => (build_sentencepiece(g, &vocab).map_err(err)?, true),
        other => return Err(err(format!("tokenizer kind {other:?} is not supported (supported: {SUPPORTED_KINDS})"))),
    };
    let token_of = |key: &str| -> Result<Option<String>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => {
                let id = v.as_u64().ok_or_else(|| err(format!("{key} is not an integer")))?;
                let tok = vocab.tokens.get(id as usize).ok_or_else(|| {
                    err(format!("{key} = {id} is outside the vocabulary of {} tokens", vocab.tokens.len()))
                })?;
                Ok(Some(spelled(tok, kind)))
            }
        }
    };
    let flag = |key: &str| -> Result<Option<bool>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| err(format!("{key} is not a boolean"))),
        }
    };
    let parts = Parts {
        bos_token: token_of("tokenizer.ggml.bos_token_id")?,
        eos_token: token_of("tokenizer.ggml.eos_token_id")?,
        pad_token: token_of("tokenizer.ggml.padding_token_id")?,
        unk_token: token_of("tokenizer.ggml.unknown_token_id")?,
        other_named: Vec::new(),
        // llama.cpp adds BOS for SentencePiece vocabularies unless the file says otherwise.
        add_bos_token: Some(flag("tokenizer.ggml.add_bos_token")?.unwrap_or(default_add_bos)),
        add_eos_token: Some(flag("tokenizer.ggml.add_eos_token")?.unwrap_or(false)),
        chat_templates: match g.get("tokenizer.chat_template") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![("default".to_string(), s.clone())],
            Some(_) => return Err(err("tokenizer.chat_template is not a string".into())),
        },
    };
    Ok((inner, parts))
}

/// The spelling a token has in the built tokenizer (SentencePiece space runs use the ▁ mark).
fn spelled(tok: &str, kind: &str) -> String {
    if kind == "llama" { spm_respell(tok) } else { tok.to_string() }
}

fn read_vocabulary(g: &GgufFile) -> std::result::Result<Vocabulary<'_>, String> {
    let tokens = string_array(g, "tokenizer.ggml.tokens")?.ok_or("metadata key tokenizer.ggml.tokens is missing")?;
    if tokens.is_empty() {
        return Err("tokenizer.ggml.tokens is empty".into());
    }
    let types = match g.get("tokenizer.ggml.token_type") {
        None => vec![NORMAL; tokens.len()],
        Some(v) => {
            let arr = v.as_array().ok_or("tokenizer.ggml.token_type is not an array")?;
            let types: Vec<i64> = arr
                .iter()
                .map(|t| t.as_i64())
                .collect::<Option<_>>()
                .ok_or("tokenizer.ggml.token_type holds non-integers")?;
            if types.len() != tokens.len() {
                return Err(format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    types.len(),
                    tokens.len()
                ));
            }
            types
        }
    };
    Ok(Vocabulary { tokens, types })
}

fn string_array<'a>(g: &'a GgufFile, key: &str) -> std::result::Result<Option<Vec<&'a str>>, String> {
    let Some(v) = g.get(key) else { return Ok(None) };
    let arr = v.as_array().ok_or_else(|| format!("{key} is not an array"))?;
    let strs: Option<Vec<&str>> = arr.iter().map(Value::as_str).collect();
    strs.map(Some).ok_or_else(|| format!("{key} holds non-strings"))
}

// ---------------------------------------------------------------------------------------------
// gpt2: byte-level BPE

/// How a `tokenizer.ggml.pre` name splits text before BPE (llama.cpp's grouping of the names).
#[derive(Clone, Copy, Debug, PartialEq)]
enum PreSplit {
    /// GPT-2's regex (the `ByteLevel` pre-tokenizer's own).
    Gpt2,
    /// Every digit alone first, then GPT-2's regex (StarCoder, SmolLM).
    DigitsThenGpt2,
    Regex(&'static str),
}

// The split regexes as the models' tokenizer.json files write them.
const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_REGEX: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// (names, split, ignore_merges). llama.cpp sets `ignore_merges` for the Llama 3 family only:
/// a word that is a whole vocabulary token is taken as is.
const PRE_TOKENIZERS: &[(&[&str], PreSplit, bool)] = &[
    (&["gpt-2", "phi-2", "mpt", "olmo"], PreSplit::Gpt2, false),
    (&["smollm", "starcoder", "refact", "codeshell"], PreSplit::DigitsThenGpt2, false),
    (&["qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"], PreSplit::Regex(QWEN2_REGEX), false),
    (&["qwen35"], PreSplit::Regex(QWEN35_REGEX), false),
    (&["llama3", "llama-v3", "llama-bpe", "falcon3", "lfm2"], PreSplit::Regex(LLAMA3_REGEX), true),
    (&["dbrx", "smaug-bpe"], PreSplit::Regex(LLAMA3_REGEX), false),
    (&["gpt-4o", "llama4"], PreSplit::Regex(GPT4O_REGEX), false),
];

fn supported_pre_names() -> String {
    PRE_TOKENIZERS.iter().flat_map(|(names, _, _)| names.iter().copied()).collect::<Vec<_>>().join(", ")
}

fn lookup_pre(name: &str) -> Option<(PreSplit, bool)> {
    PRE_TOKENIZERS.iter().find(|(names, _, _)| names.contains(&name)).map(|&(_, split, ignore)| (split, ignore))
}

/// The byte-level pre-tokenizer for a `tokenizer.ggml.pre` name.
fn byte_level_pre_tokenizer(pre: &str) -> std::result::Result<(PreTokenizerWrapper, bool), String> {
    let (split, ignore_merges) = lookup_pre(pre).ok_or_else(|| {
        format!("pre-tokenizer {pre:?} (tokenizer.ggml.pre) is not supported (supported: {})", supported_pre_names())
    })?;
    let pre = match split {
        PreSplit::Gpt2 => ByteLevel::new(false, true, true).into(),
        PreSplit::DigitsThenGpt2 => {
            Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()
        }
        PreSplit::Regex(re) => {
            let split = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| format!("bad split regex: {e}"))?;
            Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()]).into()
        }
    };
    Ok((pre, ignore_merges))
}

/// GPT-2's map from bytes to printable characters, in which byte-level vocabularies are written.
fn bytes_to_chars() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        map[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).expect("below the surrogate range");
            next += 1;
            c
        };
    }
    map
}

fn build_byte_level(g: &GgufFile, v: &Vocabulary) -> std::result::Result<tokenizers::Tokenizer, String> {
    let pre_name = g.get_str("tokenizer.ggml.pre").ok_or_else(|| {
        format!("metadata key tokenizer.ggml.pre is missing (supported pre-tokenizers: {})", supported_pre_names())
    })?;
    let (pre_tokenizer, ignore_merges) = byte_level_pre_tokenizer(pre_name)?;
    let byte_chars = bytes_to_chars();
    let alphabet: HashSet<char> = byte_chars.iter().copied().collect();
    // A token written outside the byte alphabet (a converter writing raw text) is respelled
    // byte by byte, as transformers' GGUF loader does, so the model can still produce it.
    let vocab_key = |t: &str| -> String {
        if t.chars().all(|c| alphabet.contains(&c)) {
            t.to_string()
        } else {
            t.bytes().map(|b| byte_chars[b as usize]).collect()
        }
    };
    let mut vocab: Vocab = Vocab::default();
    for (id, t) in v.tokens.iter().enumerate() {
        if vocab.insert(vocab_key(t), id as u32).is_some() {
            return Err(format!("token {t:?} appears twice in tokenizer.ggml.tokens"));
        }
    }
    let merge_strs =
        string_array(g, "tokenizer.ggml.merges")?.ok_or("metadata key tokenizer.ggml.merges is missing")?;
    let mut merges = Vec::with_capacity(merge_strs.len());
    for (i, m) in merge_strs.iter().enumerate() {
        // Like llama.cpp, split at the first space after the first character.
        let cut = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| i);
        let Some(cut) = cut else { return Err(format!("merge #{i} {m:?} is not two tokens separated by a space")) };
        merges.push((m[..cut].to_string(), m[cut + 1..].to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre_tokenizer));
    tok.with_decoder(Some(ByteLevel::default()));
    // Added tokens must keep the vocabulary's id, so only those spelled in the byte alphabet
    // (whose text is their vocabulary key) can be added; a control token outside it is a
    // converter's mislabel (transformers skips it too).
    let in_alphabet = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    let mut special = Vec::new();
    let mut plain = Vec::new();
    for (t, &ty) in v.tokens.iter().zip(&v.types) {
        match ty {
            CONTROL | UNKNOWN if in_alphabet(t) => {
                special.push(AddedToken::from(t.to_string(), true).normalized(false))
            }
            USER_DEFINED if in_alphabet(t) => plain.push(AddedToken::from(t.to_string(), false).normalized(false)),
            CONTROL | UNKNOWN | USER_DEFINED => {
                tracing::debug!(token = %t, "GGUF added token outside the byte alphabet is not matched whole")
            }
            _ => {}
        }
    }
    tok.add_special_tokens(&special);
    tok.add_tokens(&plain);
    Ok(tok)
}

// ---------------------------------------------------------------------------------------------
// llama: SentencePiece BPE

/// Whitespace-only tokens (Gemma's runs of spaces) are stored with real spaces, while the model
/// sees text with spaces replaced by ▁: spell them the way the model looks them up.
fn spm_respell(t: &str) -> String {
    if t.contains(' ') && t.chars().all(char::is_whitespace) { t.replace(' ', "\u{2581}") } else { t.to_string() }
}

fn build_sentencepiece(g: &GgufFile, v: &Vocabulary) -> std::result::Result<tokenizers::Tokenizer, String> {
    let scores: Vec<f32> =
        match g.get("tokenizer.ggml.scores") {
            None => return Err(
                "metadata key tokenizer.ggml.scores is missing (a SentencePiece vocabulary needs it to rank merges)"
                    .into(),
            ),
            Some(s) => {
                let arr = s.as_array().ok_or("tokenizer.ggml.scores is not an array")?;
                let scores: Option<Vec<f32>> = arr.iter().map(|x| x.as_f64().map(|f| f as f32)).collect();
                scores.ok_or("tokenizer.ggml.scores holds non-numbers")?
            }
        };
    if scores.len() != v.tokens.len() {
        return Err(format!("tokenizer.ggml.scores has {} entries for {} tokens", scores.len(), v.tokens.len()));
    }
    let pieces: Vec<String> = v.tokens.iter().map(|t| spm_respell(t)).collect();
    let mut vocab = Vocab::default();
    for (id, p) in pieces.iter().enumerate() {
        if vocab.insert(p.clone(), id as u32).is_some() {
            return Err(format!("token {p:?} appears twice in tokenizer.ggml.tokens"));
        }
    }
    let merges = sentencepiece_merges(&pieces, &v.types, &scores, |s| vocab.get(s).copied());
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges).fuse_unk(true);
    if let Some(unk) = g.get_u64("tokenizer.ggml.unknown_token_id").and_then(|id| pieces.get(id as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    // Characters no piece covers fall back to <0xNN> byte tokens when the vocabulary has them.
    let has_bytes = v.types.contains(&BYTE);
    let bpe = builder.byte_fallback(has_bytes).build().map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    // llama.cpp's default for SentencePiece is to put a space before the text and after every
    // special or user-defined token (Llama 2); Gemma's files switch it off. HF's legacy Llama
    // tokenizer does the same with a Prepend normalizer (it runs on each piece of text between
    // added tokens), and strips that one space again when decoding.
    let add_space_prefix = match g.get("tokenizer.ggml.add_space_prefix") {
        None => true,
        Some(b) => b.as_bool().ok_or("tokenizer.ggml.add_space_prefix is not a boolean")?,
    };
    let replace_space = |from: &str, to: &str| Replace::new(from, to).map_err(|e| format!("bad replace: {e}"));
    let mut decoders: Vec<DecoderWrapper> =
        vec![replace_space("\u{2581}", " ")?.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_space_prefix {
        let prepend = Prepend::new(SPM_SPACE.to_string()).into();
        tok.with_normalizer(Some(NormalizerSequence::new(vec![prepend, replace_space(" ", "\u{2581}")?.into()])));
        decoders.push(Strip::new(' ', 1, 0).into());
    } else {
        tok.with_normalizer(Some(replace_space(" ", "\u{2581}")?));
    }
    tok.with_decoder(Some(tokenizers::decoders::sequence::Sequence::new(decoders)));
    let mut special = Vec::new();
    let mut plain = Vec::new();
    for (p, &ty) in pieces.iter().zip(&v.types) {
        match ty {
            CONTROL | UNKNOWN => special.push(AddedToken::from(p.clone(), true).normalized(false)),
            USER_DEFINED => plain.push(AddedToken::from(p.clone(), false).normalized(false)),
            _ => {}
        }
    }
    tok.add_special_tokens(&special);
    tok.add_tokens(&plain);
    Ok(tok)
}

/// The merges SentencePiece BPE implies: every way to cut a piece into two vocabulary pieces,
/// best-scored piece first. User-defined pieces rank with score 0, their score in the SentencePiece
/// model (llama.cpp's converter writes -1000 for them). Ties go to the longer left part, then the
/// longer right part, then vocabulary order: the order HF's converter writes, which matters for
/// runs of user-defined whitespace pieces.
fn sentencepiece_merges(
    pieces: &[String],
    types: &[i64],
    scores: &[f32],
    id_of: impl Fn(&str) -> Option<u32>,
) -> Vec<(String, String)> {
    struct Cand {
        score: f32,
        left_chars: usize,
        right_chars: usize,
        left: u32,
        right: u32,
    }
    let mut cands: Vec<Cand> = Vec::new();
    for (id, piece) in pieces.iter().enumerate() {
        let score = match types[id] {
            NORMAL => scores[id],
            USER_DEFINED => 0.0,
            _ => continue,
        };
        let mut local = Vec::new();
        let total_chars = piece.chars().count();
        for (k, (cut, _)) in piece.char_indices().enumerate().skip(1) {
            if let (Some(l), Some(r)) = (id_of(&piece[..cut]), id_of(&piece[cut..])) {
                local.push(Cand { score, left_chars: k, right_chars: total_chars - k, left: l, right: r });
            }
        }
        local.sort_by_key(|c| (c.left, c.right));
        cands.extend(local);
    }
    // Stable: equal keys keep piece order, then (left id, right id).
    cands.sort_by(|a, b| {
        b.score.total_cmp(&a.score).then(b.left_chars.cmp(&a.left_chars)).then(b.right_chars.cmp(&a.right_chars))
    });
    cands.into_iter().map(|c| (pieces[c.left as usize].clone(), pieces[c.right as usize].clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        let m = bytes_to_chars();
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[b'a' as usize], 'a');
        assert_eq!(m[0xAD], 'Ń');
        let distinct: HashSet<char> = m.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn unknown_pre_tokenizer_lists_the_supported_ones() {
        let e = byte_level_pre_tokenizer("no-such-pre").unwrap_err();
        assert!(e.contains("no-such-pre") && e.contains("smollm") && e.contains("qwen2"), "{e}");
    }

    #[test]
    fn merges_rank_by_score_then_longer_left() {
        use std::collections::HashMap;
        let pieces: Vec<String> =
            ["a", "b", "c", "ab", "bc", "abc", "\u{2581}\u{2581}", "\u{2581}"].map(String::from).to_vec();
        let types = [NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, USER_DEFINED, NORMAL];
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0, -1000.0, 0.0];
        let ids: HashMap<&str, u32> = pieces.iter().enumerate().map(|(i, p)| (p.as_str(), i as u32)).collect();
        let m = sentencepiece_merges(&pieces, &types, &scores, |s| ids.get(s).copied());
        let m: Vec<(&str, &str)> = m.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        // ▁▁ is user-defined: score 0 beats every normal piece here; abc: longer left first.
        assert_eq!(m, vec![("\u{2581}", "\u{2581}"), ("b", "c"), ("a", "b"), ("ab", "c"), ("a", "bc")]);
    }

    /// Our pre-tokenizer for each `tokenizer.ggml.pre` name splits text as the regex transformers'
    /// GGUF loader maps that name to (an independent spelling of it) does in Python.
    #[test]
    fn pre_tokenizers_split_like_the_golden() {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let g = vllm_rs_testutil::golden("frontend/pretokenizers.json");
        let texts = g["texts"].as_array().unwrap();
        let pres = g["pre"].as_object().unwrap();
        assert!(pres.len() >= 6);
        for (name, expected) in pres {
            let (pre, _) = byte_level_pre_tokenizer(name).unwrap();
            for (text, want) in texts.iter().zip(expected.as_array().unwrap()) {
                let mut s = PreTokenizedString::from(text.as_str().unwrap());
                pre.pre_tokenize(&mut s).unwrap();
                let got: Vec<String> = s
                    .get_splits(OffsetReferential::Original, OffsetType::Char)
                    .into_iter()
                    .map(|(p, _, _)| p.to_string())
                    .collect();
                let want: Vec<String> =
                    want.as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
                assert_eq!(got, want, "{name}: {text}");
            }
        }
    }

    #[test]
    fn respell_only_whitespace_runs() {
        assert_eq!(spm_respell("   "), "\u{2581}\u{2581}\u{2581}");
        assert_eq!(spm_respell("\n\n"), "\n\n");
        assert_eq!(spm_respell("a b"), "a b");
    }
}
