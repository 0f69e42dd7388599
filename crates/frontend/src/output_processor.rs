//! [`OutputProcessor`]: one sequence's engine outputs turned into text deltas — incremental
//! detokenizing, `stop` strings, the finish reason and vLLM's `stop_reason`. `vllm-rs generate`
//! and the HTTP server both use it, so a request's text is produced one way only.
//!
//! As in vLLM, every generated token is kept (and counted in usage) even when a stop string cut
//! the text inside it; a stop string found while the engine is still running the request means
//! the caller must abort the request ([`OutputDelta::needs_abort`]). Text held back because it
//! might start a stop string is released when the request ends for another reason. An incomplete
//! UTF-8 character at the very end is never emitted (vLLM does not either).

use crate::detokenizer::IncrementalDetokenizer;
use crate::error::Result;
use crate::stop::StopStrings;
use crate::tokenizer::Tokenizer;
use std::sync::Arc;
use vllm_rs_engine::{FinishReason, RequestOutput, TokenLogprobs};

/// What ended a sequence besides EOS and length: vLLM's `stop_reason`.
#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    /// A `stop` string matched.
    Text(String),
    /// A `stop_token_ids` token was generated.
    TokenId(u32),
}

/// Per-request output options (vLLM's sampling-param names).
#[derive(Clone, Debug)]
pub struct OutputOptions {
    pub stop: Vec<String>,
    pub include_stop_str_in_output: bool,
    pub skip_special_tokens: bool,
}

impl Default for OutputOptions {
    fn default() -> Self {
        OutputOptions { stop: Vec::new(), include_stop_str_in_output: false, skip_special_tokens: true }
    }
}

/// What one engine output adds to a sequence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputDelta {
    /// New text, safe to show (stop strings applied).
    pub text: String,
    /// New token ids (all of them, including one whose text a stop string cut).
    pub token_ids: Vec<u32>,
    /// One entry per new token when logprobs were requested.
    pub logprobs: Vec<TokenLogprobs>,
    /// Prompt logprobs, on the first delta, when requested.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    /// Set on the last delta of the sequence.
    pub finish_reason: Option<FinishReason>,
    pub stop_reason: Option<StopReason>,
    /// A stop string ended the sequence while the engine still runs it: abort it.
    pub needs_abort: bool,
    /// Prompt tokens served from the prefix cache (as the engine reported it).
    pub num_cached_tokens: usize,
}

/// One sequence's detokenizer, stop strings and totals.
pub struct OutputProcessor {
    detok: IncrementalDetokenizer,
    stop: StopStrings,
    /// All text emitted so far.
    pub text: String,
    /// All generated token ids so far.
    pub token_ids: Vec<u32>,
    finish_reason: Option<FinishReason>,
    stop_reason: Option<StopReason>,
}

impl OutputProcessor {
    /// A sequence that continues `prompt_ids`. Fails on an empty stop string.
    pub fn new(tokenizer: Arc<Tokenizer>, prompt_ids: &[u32], opts: &OutputOptions) -> Result<Self> {
        Ok(OutputProcessor {
            detok: IncrementalDetokenizer::new(tokenizer, prompt_ids, opts.skip_special_tokens)?,
            stop: StopStrings::new(opts.stop.clone(), opts.include_stop_str_in_output)?,
            text: String::new(),
            token_ids: Vec::new(),
            finish_reason: None,
            stop_reason: None,
        })
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason
    }

    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.stop_reason.as_ref()
    }

    pub fn is_finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Folds one engine output in. After the sequence finished, further outputs add nothing.
    pub fn process(&mut self, o: RequestOutput) -> Result<OutputDelta> {
        let mut d = OutputDelta {
            prompt_logprobs: o.prompt_logprobs,
            num_cached_tokens: o.num_cached_tokens,
            ..OutputDelta::default()
        };
        if self.is_finished() {
            return Ok(d);
        }
        let mut logprobs = o.logprobs.into_iter();
        for &t in &o.new_token_ids {
            self.token_ids.push(t);
            d.token_ids.push(t);
            d.logprobs.extend(logprobs.next());
            let s = self.stop.push(&self.detok.push(t)?);
            d.text.push_str(&s.text);
            if let Some(stop) = s.stopped {
                d.finish_reason = Some(FinishReason::Stop);
                d.stop_reason = Some(StopReason::Text(stop));
                d.needs_abort = o.finish_reason.is_none();
                break;
            }
        }
        if d.finish_reason.is_none()
            && let Some(reason) = o.finish_reason
        {
            d.text.push_str(&self.stop.flush());
            d.finish_reason = Some(reason);
            d.stop_reason = o.stop_token.map(StopReason::TokenId);
        }
        self.text.push_str(&d.text);
        self.finish_reason = d.finish_reason;
        self.stop_reason = d.stop_reason.clone();
        Ok(d)
    }
}

/// The text of one token as vLLM reports it in logprobs (`decoded_token`): the token decoded on
/// its own, with the leading spaces a SentencePiece (Metaspace) decoder strips put back.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    let text = tokenizer.decode(&[id], false).unwrap_or_default();
    let Some(marker) = leading_space_marker(tokenizer) else { return text };
    let Some(raw) = tokenizer.id_to_token(id) else { return text };
    let wanted = raw.chars().take_while(|&c| c == marker).count();
    let have = text.chars().take_while(|&c| c == ' ').count();
    if wanted > have { " ".repeat(wanted - have) + &text } else { text }
}

/// The Metaspace replacement character when the pre-tokenizer has one (vLLM's
/// `get_leading_space_marker`).
fn leading_space_marker(tokenizer: &Tokenizer) -> Option<char> {
    use tokenizers::pre_tokenizers::PreTokenizerWrapper as P;
    match tokenizer.inner().get_pre_tokenizer()? {
        P::Metaspace(m) => Some(m.get_replacement()),
        P::Sequence(seq) => seq.as_ref().iter().find_map(|p| match p {
            P::Metaspace(m) => Some(m.get_replacement()),
            _ => None,
        }),
        _ => None,
    }
}
