//! [`Tokenizer`]: an HF `tokenizers::Tokenizer` plus what `tokenizer_config.json` (or the GGUF
//! metadata) says about special tokens, BOS/EOS insertion and chat templates.

use crate::error::{Error, Result};
use crate::gguf_tokenizer;
use crate::tokenizer_config::{TokenSpec, TokenizerConfig};
use std::collections::HashSet;
use std::path::Path;
use tokenizers::processors::template::TemplateProcessing;
use vllm_rs_formats::gguf::GgufFile;

/// Everything the loaders (HF directory, GGUF) hand to [`Tokenizer::assemble`].
pub(crate) struct Parts {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    /// Other named special tokens for the chat template's variables (`mask_token`, `boi_token`...).
    pub other_named: Vec<(String, String)>,
    /// `Some` when the source says explicitly whether to add BOS / EOS: the post-processor is then
    /// rebuilt to do exactly that (as transformers does); `None` keeps the tokenizer's own.
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    pub chat_templates: Vec<(String, String)>,
}

/// A text tokenizer with its special tokens and chat templates.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
    pad: Option<(String, u32)>,
    unk: Option<(String, u32)>,
    other_named: Vec<(String, String)>,
    add_bos_token: bool,
    add_eos_token: bool,
    chat_templates: Vec<(String, String)>,
    special_ids: HashSet<u32>,
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos_token", &self.add_bos_token)
            .field("chat_templates", &self.chat_templates.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .finish()
    }
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json` and `dir/tokenizer_config.json` (plus `chat_template.jinja`).
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let mut inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| Error::config(&path, format!("not a valid tokenizer.json: {e}")))?;
        let cfg = TokenizerConfig::from_dir(dir)?;
        add_missing_special_tokens(&mut inner, &cfg);
        let content = |t: &Option<TokenSpec>| t.as_ref().map(|t| t.content.clone());
        let other_named = cfg
            .other_special
            .iter()
            .filter(|(n, _)| !n.is_empty())
            .map(|(n, t)| (n.clone(), t.content.clone()))
            .collect();
        let parts = Parts {
            bos_token: content(&cfg.bos_token),
            eos_token: content(&cfg.eos_token),
            pad_token: content(&cfg.pad_token),
            unk_token: content(&cfg.unk_token),
            other_named,
            add_bos_token: cfg.add_bos_token,
            add_eos_token: cfg.add_eos_token,
            chat_templates: cfg.chat_templates,
        };
        Self::assemble(inner, parts)
    }

    /// Builds an HF-compatible tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let (inner, parts) = gguf_tokenizer::build(g)?;
        Self::assemble(inner, parts)
    }

    pub(crate) fn assemble(mut inner: tokenizers::Tokenizer, parts: Parts) -> Result<Self> {
        // A tokenizer.json may carry padding/truncation for batch use (MiniLM pads to 128);
        // a serving tokenizer must return exactly the text's ids.
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| Error::tokenizer(format!("cannot switch off truncation: {e}")))?;
        let lookup = |t: &Option<String>| t.as_ref().and_then(|t| inner.token_to_id(t).map(|id| (t.clone(), id)));
        let (bos, eos, pad, unk) =
            (lookup(&parts.bos_token), lookup(&parts.eos_token), lookup(&parts.pad_token), lookup(&parts.unk_token));
        if parts.add_bos_token.is_some() || parts.add_eos_token.is_some() {
            // transformers drops the flag when the token does not exist, rather than failing.
            let add_bos = parts.add_bos_token.unwrap_or(false) && bos.is_some();
            let add_eos = parts.add_eos_token.unwrap_or(false) && eos.is_some();
            let processor = bos_eos_processor(bos.as_ref().filter(|_| add_bos), eos.as_ref().filter(|_| add_eos))?;
            inner.with_post_processor(Some(processor));
        }
        // What the post-processor really does, whoever configured it.
        let with_special = inner.encode("", true).map_err(|e| Error::tokenizer(format!("cannot encode: {e}")))?;
        let ids = with_special.get_ids();
        let add_bos_token = matches!((&bos, ids.first()), (Some((_, b)), Some(f)) if b == f);
        let add_eos_token = matches!((&eos, ids.last()), (Some((_, e)), Some(l)) if e == l);
        let special_ids =
            inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        let vocab_size = inner.get_vocab(true).values().map(|&id| id as usize + 1).max().unwrap_or(0);
        Ok(Tokenizer {
            inner,
            bos,
            eos,
            pad,
            unk,
            other_named: parts.other_named,
            add_bos_token,
            add_eos_token,
            chat_templates: parts.chat_templates,
            special_ids,
            vocab_size,
        })
    }

    /// Token ids of `text`. Special tokens written in the text are recognized (as in transformers);
    /// `add_special_tokens` adds what the tokenizer adds around a sequence (Gemma's `<bos>`).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| Error::Codec(format!("cannot tokenize the text: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// [`Tokenizer::encode`] cut to at most `max_len` tokens the way transformers truncates
    /// (`truncation=True, max_length=max_len`): the text's tokens lose their end, and the special
    /// tokens added around them (`[CLS] … [SEP]`) stay.
    pub fn encode_truncated(&self, text: &str, add_special_tokens: bool, max_len: usize) -> Result<Vec<u32>> {
        let codec = |e: tokenizers::Error| Error::Codec(format!("cannot tokenize the text: {e}"));
        let full = self.inner.encode(text, add_special_tokens).map_err(codec)?;
        if full.len() <= max_len {
            return Ok(full.get_ids().to_vec());
        }
        let mut plain = self.inner.encode(text, false).map_err(codec)?;
        let added = full.len() - plain.len();
        if added > max_len {
            return Err(Error::Codec(format!("{max_len} tokens cannot hold the {added} special tokens")));
        }
        plain.truncate(max_len - added, 0, tokenizers::TruncationDirection::Right);
        let done = self.inner.post_process(plain, None, add_special_tokens).map_err(codec)?;
        Ok(done.get_ids().to_vec())
    }

    /// Token ids and token type ids of a text pair with the tokenizer's special tokens
    /// (`[CLS] a [SEP] b [SEP]`, types 0 then 1), as cross-encoders read them. With `max_len`,
    /// the longer text loses its last token until the pair fits (transformers' `longest_first`).
    pub fn encode_pair(&self, a: &str, b: &str, max_len: Option<usize>) -> Result<(Vec<u32>, Vec<u32>)> {
        let codec = |e: tokenizers::Error| Error::Codec(format!("cannot tokenize the text: {e}"));
        use tokenizers::PostProcessor as _;
        let mut ea = self.inner.encode(a, false).map_err(codec)?;
        let mut eb = self.inner.encode(b, false).map_err(codec)?;
        if let Some(max) = max_len {
            let added = self.inner.get_post_processor().map_or(0, |p| p.added_tokens(true));
            let room =
                max.checked_sub(added).ok_or_else(|| Error::Codec(format!("{max} tokens cannot hold a pair")))?;
            let (mut la, mut lb) = (ea.len(), eb.len());
            while la + lb > room {
                if la > lb { la -= 1 } else { lb -= 1 }
            }
            ea.truncate(la, 0, tokenizers::TruncationDirection::Right);
            eb.truncate(lb, 0, tokenizers::TruncationDirection::Right);
        }
        let done = self.inner.post_process(ea, Some(eb), true).map_err(codec)?;
        Ok((done.get_ids().to_vec(), done.get_type_ids().to_vec()))
    }

    /// Text of `ids`. An id outside the vocabulary is an error (HF would silently drop it).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(Error::Codec(format!("token id {bad} is outside the vocabulary (ids 0..{})", self.vocab_size)));
        }
        self.inner.decode(ids, skip_special_tokens).map_err(|e| Error::Codec(format!("cannot decode token ids: {e}")))
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// One past the largest token id, added tokens included: every id below it decodes.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos.as_ref().map(|(_, id)| *id)
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos.as_ref().map(|(_, id)| *id)
    }

    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad.as_ref().map(|(_, id)| *id)
    }

    pub fn unk_token_id(&self) -> Option<u32> {
        self.unk.as_ref().map(|(_, id)| *id)
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_ref().map(|(t, _)| t.as_str())
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_ref().map(|(t, _)| t.as_str())
    }

    /// Whether `encode(.., true)` puts BOS first / EOS last.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos_token
    }

    pub fn add_eos_token(&self) -> bool {
        self.add_eos_token
    }

    /// An added token marked special (skipped by `decode(.., skip_special_tokens = true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The default chat template (`default` when the source names several).
    pub fn chat_template(&self) -> Option<&str> {
        self.named_chat_template("default")
    }

    /// A chat template by name (`tool_use`, `rag`...), for sources that ship several.
    pub fn named_chat_template(&self, name: &str) -> Option<&str> {
        self.chat_templates.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_str())
    }

    /// The template transformers would pick: `tool_use` when tools are given and it exists, else the default.
    pub fn chat_template_for(&self, with_tools: bool) -> Option<&str> {
        with_tools.then(|| self.named_chat_template("tool_use")).flatten().or_else(|| self.chat_template())
    }

    /// Named special tokens as transformers passes them to chat templates (`bos_token`, `eos_token`,
    /// `unk_token`, `pad_token`, and others the config names).
    pub fn special_tokens_map(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, tok) in
            [("bos_token", &self.bos), ("eos_token", &self.eos), ("unk_token", &self.unk), ("pad_token", &self.pad)]
        {
            if let Some((t, _)) = tok {
                out.push((name.to_string(), t.clone()));
            }
        }
        out.extend(self.other_named.iter().cloned());
        out
    }

    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// A tokenizer from a HF directory, or from `gguf`'s metadata when `path` is not a directory
/// holding a `tokenizer.json`.
pub fn load_tokenizer(path: &Path, gguf: Option<&GgufFile>) -> Result<Tokenizer> {
    if path.is_dir() && path.join("tokenizer.json").exists() {
        return Tokenizer::from_hf_dir(path);
    }
    match gguf {
        Some(g) => Tokenizer::from_gguf(g),
        None if path.is_dir() => Err(Error::config(path, "no tokenizer.json in this directory")),
        None => Err(Error::config(path, "not a directory with a tokenizer.json, and no GGUF file was given")),
    }
}

/// transformers adds the named special tokens of tokenizer_config.json (and its
/// `added_tokens_decoder`) to the tokenizer when tokenizer.json lacks them, so they are matched whole.
fn add_missing_special_tokens(inner: &mut tokenizers::Tokenizer, cfg: &TokenizerConfig) {
    let present: HashSet<String> = inner.get_added_tokens_decoder().into_values().map(|t| t.content).collect();
    let mut missing: Vec<&TokenSpec> = Vec::new();
    let named = [&cfg.bos_token, &cfg.eos_token, &cfg.unk_token, &cfg.pad_token];
    let mut wanted: Vec<&TokenSpec> = named.into_iter().flatten().collect();
    wanted.extend(cfg.other_special.iter().map(|(_, t)| t));
    wanted.extend(cfg.added_tokens_decoder.iter().map(|(_, t)| t));
    for t in wanted {
        if !present.contains(&t.content) && !missing.iter().any(|m| m.content == t.content) {
            missing.push(t);
        }
    }
    for t in missing {
        let added = t.to_added_token();
        if t.special {
            inner.add_special_tokens(&[added]);
        } else {
            inner.add_tokens(&[added]);
        }
        tracing::debug!(token = %t.content, "added a special token named by tokenizer_config.json");
    }
}

/// `[bos] $A [eos]` (and the pair form), as transformers' `update_post_processor` writes it.
fn bos_eos_processor(bos: Option<&(String, u32)>, eos: Option<&(String, u32)>) -> Result<TemplateProcessing> {
    let piece = |t: &str, type_id: u32| {
        if t.contains(':') || t.starts_with('$') || t.chars().any(char::is_whitespace) {
            Err(Error::tokenizer(format!("cannot add {t:?} around sequences: the token cannot appear in a template")))
        } else {
            Ok(format!("{t}:{type_id}"))
        }
    };
    let seq = |type_id: u32, which: &str| -> Result<Vec<String>> {
        let mut v = Vec::new();
        if let Some((t, _)) = bos {
            v.push(piece(t, type_id)?);
        }
        v.push(format!("${which}:{type_id}"));
        if let Some((t, _)) = eos {
            v.push(piece(t, type_id)?);
        }
        Ok(v)
    };
    let single = seq(0, "A")?;
    let mut pair = single.clone();
    pair.extend(seq(1, "B")?);
    let mut special: Vec<(String, u32)> = Vec::new();
    special.extend(bos.cloned());
    special.extend(eos.cloned().filter(|e| Some(e) != bos));
    let err = |e: String| Error::tokenizer(format!("cannot build the BOS/EOS post-processor: {e}"));
    TemplateProcessing::builder()
        .try_single(single)
        .map_err(err)?
        .try_pair(pair)
        .map_err(err)?
        .special_tokens(special)
        .build()
        .map_err(|e| Error::tokenizer(format!("cannot build the BOS/EOS post-processor: {e}")))
}
