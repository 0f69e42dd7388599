//! Per-request sampling settings, with vLLM's names, defaults and validation messages.

use crate::structured_output::{Grammar, ThinkingBudget};
use thiserror::Error;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 (or -1) disables.
    pub top_k: i32,
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: f32,
    /// Seeds this request's own random generator (reproducible samples).
    pub seed: Option<u64>,
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub ignore_eos: bool,
    pub stop_token_ids: Vec<u32>,
    /// Number of top logprobs to return per output token (plus the sampled one); `None` = none.
    pub logprobs: Option<usize>,
    /// vLLM's `logprob_token_ids`: with `logprobs` set, each output position reports these
    /// tokens' logprobs (in this order) in place of the top `logprobs`.
    pub logprob_token_ids: Option<Vec<u32>>,
    /// Number of top logprobs per prompt token; `None` = none.
    pub prompt_logprobs: Option<usize>,
    pub logit_bias: Vec<(u32, f32)>,
    pub allowed_token_ids: Option<Vec<u32>>,
    /// Token-id sequences that must not be generated (from `bad_words`).
    pub bad_words_token_ids: Vec<Vec<u32>>,
    /// Structured output: the grammar every output token must follow (compiled by the caller).
    pub grammar: Option<Grammar>,
    /// The grammar applies from after this token on (the end of the model's reasoning).
    pub grammar_after_token: Option<u32>,
    /// `thinking_token_budget`: the end of thinking is forced once the budget is spent.
    pub thinking_budget: Option<ThinkingBudget>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: None,
            max_tokens: 16,
            min_tokens: 0,
            ignore_eos: false,
            stop_token_ids: Vec::new(),
            logprobs: None,
            logprob_token_ids: None,
            prompt_logprobs: None,
            logit_bias: Vec::new(),
            allowed_token_ids: None,
            bad_words_token_ids: Vec::new(),
            grammar: None,
            grammar_after_token: None,
            thinking_budget: None,
        }
    }
}

/// Below this temperature sampling is greedy (vLLM's `_SAMPLING_EPS`).
pub const SAMPLING_EPS: f32 = 1e-5;

/// A rejected parameter: `param` names the field, the message says what is allowed.
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{message}")]
pub struct ParamError {
    pub param: &'static str,
    pub message: String,
}

fn bad(param: &'static str, message: String) -> Result<(), ParamError> {
    Err(ParamError { param, message })
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Default::default() }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature < SAMPLING_EPS
    }

    /// vLLM's `_verify_args`, minus what the frontend checks (n, stop strings).
    pub fn validate(&self, vocab_size: usize) -> Result<(), ParamError> {
        let in_range = |v: f32, lo: f32, hi: f32| v.is_finite() && (lo..=hi).contains(&v);
        if !in_range(self.presence_penalty, -2.0, 2.0) {
            return bad(
                "presence_penalty",
                format!("presence_penalty must be in [-2, 2], got {}.", self.presence_penalty),
            );
        }
        if !in_range(self.frequency_penalty, -2.0, 2.0) {
            return bad(
                "frequency_penalty",
                format!("frequency_penalty must be in [-2, 2], got {}.", self.frequency_penalty),
            );
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(
                "repetition_penalty",
                format!(
                    "repetition_penalty must be a finite number greater than zero, got {}.",
                    self.repetition_penalty
                ),
            );
        }
        if !in_range(self.temperature, 0.0, 2.0) {
            return bad("temperature", format!("temperature must be in [0, 2], got {}.", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("top_p must be in (0, 1], got {}.", self.top_p));
        }
        if self.top_k < -1 {
            return bad("top_k", format!("top_k must be 0 (disable), or at least 1, got {}.", self.top_k));
        }
        if !in_range(self.min_p, 0.0, 1.0) {
            return bad("min_p", format!("min_p must be in [0, 1], got {}.", self.min_p));
        }
        if self.max_tokens < 1 {
            return bad("max_tokens", format!("max_tokens must be at least 1, got {}.", self.max_tokens));
        }
        if self.min_tokens > self.max_tokens {
            return bad(
                "min_tokens",
                format!(
                    "min_tokens must be less than or equal to max_tokens={}, got {}.",
                    self.max_tokens, self.min_tokens
                ),
            );
        }
        check_vocab("stop_token_ids", self.stop_token_ids.iter().copied(), vocab_size)?;
        check_vocab("logit_bias", self.logit_bias.iter().map(|b| b.0), vocab_size)?;
        check_vocab("bad_words", self.bad_words_token_ids.iter().flatten().copied(), vocab_size)?;
        if let Some(ids) = &self.logprob_token_ids {
            check_vocab("logprob_token_ids", ids.iter().copied(), vocab_size)?;
        }
        if let Some(a) = &self.allowed_token_ids {
            if a.is_empty() {
                return bad("allowed_token_ids", "allowed_token_ids is not allowed to be empty.".into());
            }
            check_vocab("allowed_token_ids", a.iter().copied(), vocab_size)?;
        }
        if let Some((_, b)) = self.logit_bias.iter().find(|b| !b.1.is_finite()) {
            return bad("logit_bias", format!("logit_bias values must be finite, got {b}."));
        }
        Ok(())
    }
}

fn check_vocab(param: &'static str, mut ids: impl Iterator<Item = u32>, vocab_size: usize) -> Result<(), ParamError> {
    match ids.find(|&t| t as usize >= vocab_size) {
        Some(t) => bad(param, format!("token id {t} in {param} is out of vocabulary (size {vocab_size}).")),
        None => Ok(()),
    }
}

/// What `logprobs` report (vLLM's `--logprobs-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogprobsMode {
    /// Log-softmax of the model's logits, before any processing (vLLM's default).
    #[default]
    RawLogprobs,
    RawLogits,
    /// After penalties, temperature, top-k/top-p and the rest.
    ProcessedLogprobs,
    ProcessedLogits,
}

impl LogprobsMode {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "raw_logprobs" => Self::RawLogprobs,
            "raw_logits" => Self::RawLogits,
            "processed_logprobs" => Self::ProcessedLogprobs,
            "processed_logits" => Self::ProcessedLogits,
            _ => return None,
        })
    }
}
