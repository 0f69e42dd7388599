//! [`IncrementalDetokenizer`]: turns generated token ids into text deltas as they arrive.
//!
//! vLLM's scheme: decode a small window of recent ids twice — the already-emitted part
//! (`prefix_offset..read_offset`) and the whole window (`prefix_offset..`) — and emit the
//! difference. Decoding in context keeps what depends on neighbours right (SentencePiece's
//! leading space), and a window whose text ends in U+FFFD is held back: the last token stopped
//! inside a multi-byte character (a byte-fallback or byte-level token), so the next ones
//! complete it. The window starts on a short suffix of the prompt, chosen as vLLM does.
//!
//! For whole characters the deltas add up to `decode(all ids)`. A run of byte-fallback tokens
//! that is not valid UTF-8 is the exception: HF's ByteFallback decoder then turns every byte of
//! the run into U+FFFD, including bytes already emitted as ASCII; those cannot be taken back
//! (vLLM restarts its decode stream in that case and diverges the same way).

use crate::error::Result;
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// How many prompt ids the window starts with: the shortest suffix of at least this many ids
/// that decodes cleanly, searched up to `MAX_PROMPT_CONTEXT` (vLLM's bounds).
const MIN_PROMPT_CONTEXT: usize = 4;
const MAX_PROMPT_CONTEXT: usize = 23;

const REPLACEMENT: char = '\u{FFFD}';

pub struct IncrementalDetokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    /// The window: ids from `prefix_offset` on (earlier ones are dropped).
    ids: Vec<u32>,
    /// End of the emitted part of the window.
    read_offset: usize,
    /// Text of `ids[..read_offset]`.
    prefix_text: String,
}

impl IncrementalDetokenizer {
    /// Starts after `prompt_ids`; `skip_special_tokens` as in vLLM's sampling params.
    pub fn new(tokenizer: Arc<Tokenizer>, prompt_ids: &[u32], skip_special_tokens: bool) -> Result<Self> {
        let mut d = IncrementalDetokenizer {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            read_offset: 0,
            prefix_text: String::new(),
        };
        for &id in d.prompt_context(prompt_ids)? {
            d.push(id)?;
        }
        Ok(d)
    }

    /// The prompt ids the window starts with: the shortest suffix (4 to 23 ids) whose text has no
    /// U+FFFD, or the whole prompt when there is none (a prompt of 4 ids or fewer is taken whole).
    fn prompt_context<'p>(&self, prompt: &'p [u32]) -> Result<&'p [u32]> {
        if prompt.len() > MIN_PROMPT_CONTEXT {
            for n in MIN_PROMPT_CONTEXT..=prompt.len().min(MAX_PROMPT_CONTEXT) {
                let suffix = &prompt[prompt.len() - n..];
                if !self.tokenizer.decode(suffix, false)?.contains(REPLACEMENT) {
                    return Ok(suffix);
                }
            }
        }
        Ok(prompt)
    }

    /// Adds one generated id; returns the text it completes (often empty: a special token being
    /// skipped, or part of a character).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        if text.len() <= self.prefix_text.len() || text.ends_with(REPLACEMENT) {
            return Ok(String::new());
        }
        let delta = match text.strip_prefix(self.prefix_text.as_str()) {
            Some(d) => d.to_string(),
            // The window decodes its start differently now (a decoder that looks at neighbours):
            // cut by characters, as vLLM does.
            None => text.chars().skip(self.prefix_text.chars().count()).collect(),
        };
        // Slide the window: what was the unemitted part becomes the prefix.
        self.ids.drain(..self.read_offset);
        self.read_offset = self.ids.len();
        self.prefix_text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        Ok(delta)
    }

    /// Text held back at the end of generation: an incomplete character (as U+FFFD). vLLM never
    /// emits it; call this only to get exactly `decode(all ids)`.
    pub fn flush(&mut self) -> Result<String> {
        let text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        let delta: String = match text.strip_prefix(self.prefix_text.as_str()) {
            Some(d) => d.to_string(),
            None => text.chars().skip(self.prefix_text.chars().count()).collect(),
        };
        self.ids.drain(..self.read_offset);
        self.read_offset = self.ids.len();
        self.prefix_text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        Ok(delta)
    }
}
