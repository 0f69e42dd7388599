//! From the request's sampling fields to engine [`SamplingParams`], with vLLM's defaults
//! (request value, else the model's generation config, else OpenAI's default), vLLM's checks
//! and messages, `n` fan-out with child seeds `seed + i`, and `max_tokens` resolved per prompt.

use crate::beam_search::BeamParams;
use crate::config::Limits;
use crate::errors::{ApiError, ApiResult};
use crate::protocol::sampling_fields::SamplingFields;
use crate::state::{AppState, ModelContext};
use vllm_rs_engine::{Grammar, SamplingParams, SchedulingPolicy, ThinkingBudget};
use vllm_rs_frontend::{OutputOptions, Tokenizer};

/// vLLM's `VLLM_MAX_N_SEQUENCES`.
const MAX_N: i64 = 16384;
/// vLLM's `VLLM_MAX_STOP_STRINGS` (4 unless that environment variable says otherwise).
fn max_stop_strings() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| std::env::var("VLLM_MAX_STOP_STRINGS").ok().and_then(|v| v.parse().ok()).unwrap_or(4))
}
/// vLLM's `VLLM_MAX_NUM_BAD_WORDS`.
const MAX_BAD_WORDS: usize = 128;
const MAX_CACHE_SALT_CHARS: usize = 128;

/// Everything per-sequence that follows from the request, before the prompt is known.
#[derive(Clone, Debug)]
pub struct RequestPlan {
    pub n: usize,
    base: SamplingParams,
    seed: Option<u64>,
    pub output: OutputOptions,
    /// The request's max tokens (`None`: unset) and the field it came from.
    requested_max_tokens: Option<i64>,
    max_tokens_param: &'static str,
    /// `max_tokens` when the request does not set it (completions: 16; chat: none).
    default_max_tokens: Option<usize>,
    /// `echo` with `max_tokens = 0`: return the prompt only (the engine still makes one token).
    pub echo_only: bool,
    pub priority: i32,
    pub cache_salt: Option<String>,
    /// `use_beam_search`: the `n` sequences of a prompt are one beam search's width.
    pub beam: Option<BeamParams>,
}

/// The endpoint-specific inputs to [`RequestPlan::new`].
pub struct PlanInputs {
    /// Logprobs per generated token (completions' `logprobs`, chat's `top_logprobs` when
    /// `logprobs` is true).
    pub logprobs: Option<i64>,
    pub logprobs_param: &'static str,
    pub max_tokens: Option<i64>,
    pub max_tokens_param: &'static str,
    pub default_max_tokens: Option<usize>,
    /// Completions' `echo` with `max_tokens = 0`.
    pub echo_only: bool,
    /// Prompt logprobs when the request does not set `prompt_logprobs` but echoes
    /// (vLLM: completions use `logprobs`, chat `top_logprobs`).
    pub echo_prompt_logprobs: Option<i64>,
}

fn to_f32(v: Option<f64>) -> Option<f32> {
    v.map(|x| x as f32)
}

fn token_ids(param: &'static str, ids: &[i64]) -> ApiResult<Vec<u32>> {
    ids.iter()
        .map(|&t| {
            u32::try_from(t)
                .map_err(|_| ApiError::invalid(param, format!("{param} must contain token ids >= 0, got {t}.")))
        })
        .collect()
}

/// vLLM's `to_beam_search_params`, when `use_beam_search` is set. Each step asks for `2n`
/// logprobs, so `n` is bounded by half of `--max-logprobs` (vLLM's step fails on more).
fn beam_params(f: &SamplingFields, n: i64, model: &ModelContext) -> ApiResult<Option<BeamParams>> {
    if !f.use_beam_search.unwrap_or(false) {
        return Ok(None);
    }
    logprob_count("n", Some(2 * n), model, "sample")?;
    Ok(Some(BeamParams {
        length_penalty: f.length_penalty.unwrap_or(1.0),
        include_stop_str_in_output: f.include_stop_str_in_output.unwrap_or(false),
        ignore_eos: f.ignore_eos.unwrap_or(false),
    }))
}

/// `logprob_token_ids` as vLLM takes it: a non-empty list replaces the top `logprobs` of each
/// generated position (the switch, `logprobs`, must still be on); an empty one changes nothing.
/// Echo-only requests (no generated position) and beam search refuse it, as vLLM does.
fn explicit_logprob_ids(
    f: &SamplingFields,
    inp: &PlanInputs,
    logprobs: Option<usize>,
    model: &ModelContext,
) -> ApiResult<Option<Vec<u32>>> {
    let ids = match f.logprob_token_ids.as_deref() {
        Some(ids) if !ids.is_empty() => token_ids("logprob_token_ids", ids)?,
        _ => return Ok(None),
    };
    let refuse = |why: &str| Err(ApiError::invalid("logprob_token_ids", why.to_string()));
    if logprobs.is_none() {
        return refuse(&format!(
            "logprob_token_ids needs `{}` set: it names the tokens logprobs report.",
            inp.logprobs_param
        ));
    }
    if inp.echo_only {
        return refuse("logprob_token_ids needs generated tokens; this request only echoes its prompt (max_tokens 0).");
    }
    if f.use_beam_search == Some(true) {
        return refuse("logprob_token_ids is not supported with beam search.");
    }
    if ids.len() > model.max_logprobs {
        return refuse(&format!(
            "logprob_token_ids has {} ids, more than max allowed: {} (--max-logprobs).",
            ids.len(),
            model.max_logprobs
        ));
    }
    Ok(Some(ids))
}

/// A count of logprobs: `None`, `-1` (all: the vocabulary), or a non-negative number, at most
/// `--max-logprobs`.
fn logprob_count(param: &'static str, v: Option<i64>, model: &ModelContext, what: &str) -> ApiResult<Option<usize>> {
    let Some(v) = v else { return Ok(None) };
    if v < -1 {
        return Err(ApiError::invalid(param, format!("`{param}` must be a positive value or -1.")));
    }
    let n = if v == -1 { model.vocab_size() } else { v as usize };
    if n > model.max_logprobs {
        return Err(ApiError::invalid(
            param,
            format!("Requested {what} logprobs of {n}, which is greater than max allowed: {}", model.max_logprobs),
        ));
    }
    Ok(Some(n))
}

impl RequestPlan {
    pub fn new(f: &SamplingFields, inp: PlanInputs, model: &ModelContext) -> ApiResult<Self> {
        let d = &model.defaults;
        let n = f.n.unwrap_or(1);
        if n < 1 {
            return Err(ApiError::invalid("n", format!("n must be at least 1, got {n}.")));
        }
        if n > MAX_N {
            return Err(ApiError::invalid("n", format!("n must be at most {MAX_N}, got {n}.")));
        }
        let stream = f.stream.unwrap_or(false);
        // vLLM tests the dict's truthiness: `{}` is allowed without `stream`.
        let has_options =
            f.stream_options.as_ref().is_some_and(|o| o.include_usage.is_some() || o.continuous_usage_stats.is_some());
        if !stream && has_options {
            return Err(ApiError::invalid("stream_options", "Stream options can only be defined when `stream=True`."));
        }
        let mut logprobs = logprob_count(inp.logprobs_param, inp.logprobs, model, "sample")?;
        let logprob_token_ids = explicit_logprob_ids(f, &inp, logprobs, model)?;
        if let Some(ids) = &logprob_token_ids {
            logprobs = Some(ids.len());
        }
        let prompt_logprobs_req = f.prompt_logprobs.or(inp.echo_prompt_logprobs);
        if let Some(p) = f.prompt_logprobs
            && stream
            && (p > 0 || p == -1)
        {
            return Err(ApiError::invalid(
                "prompt_logprobs",
                "`prompt_logprobs` are not available when `stream=True`.",
            ));
        }
        let prompt_logprobs = logprob_count("prompt_logprobs", prompt_logprobs_req, model, "prompt")?;

        let stop = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
        if stop.len() > max_stop_strings() {
            return Err(ApiError::schema(
                "stop",
                format!(
                    "stop: List should have at most {} items after validation, not {}",
                    max_stop_strings(),
                    stop.len()
                ),
            ));
        }
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid("stop", "stop cannot contain an empty string."));
        }
        let min_tokens = f.min_tokens.unwrap_or(0);
        if min_tokens < 0 {
            return Err(ApiError::invalid(
                "min_tokens",
                format!("min_tokens must be greater than or equal to 0, got {min_tokens}."),
            ));
        }
        let logit_bias = match &f.logit_bias {
            Some(lb) => lb.to_engine(model.vocab_size())?,
            None => Vec::new(),
        };
        let bad_words_token_ids = match &f.bad_words {
            Some(words) => bad_words_ids(words, &model.tokenizer)?,
            None => Vec::new(),
        };
        let priority = f.priority.unwrap_or(0);
        let priority = i32::try_from(priority)
            .map_err(|_| ApiError::invalid("priority", format!("priority must fit in 32 bits, got {priority}.")))?;
        if priority != 0 && model.engine()?.config.policy != SchedulingPolicy::Priority {
            // vLLM's message; the field is honoured under --scheduling-policy priority only.
            return Err(ApiError::invalid(
                "priority",
                format!("Got priority {priority} but Priority scheduling is not enabled."),
            ));
        }
        if let Some(salt) = &f.cache_salt
            && (salt.is_empty()
                || salt.chars().count() > MAX_CACHE_SALT_CHARS
                || salt.chars().any(|c| matches!(c, '@' | '/' | '\\' | '\0')))
        {
            return Err(ApiError::invalid(
                "cache_salt",
                "Parameter 'cache_salt' must be a non-empty string of at most 128 characters without '@', '/', '\\\\', or NUL.",
            ));
        }

        let base = SamplingParams {
            temperature: to_f32(f.temperature).or(d.temperature).unwrap_or(1.0),
            top_p: to_f32(f.top_p).or(d.top_p).unwrap_or(1.0),
            top_k: match f.top_k {
                Some(k) => {
                    i32::try_from(k).map_err(|_| ApiError::invalid("top_k", format!("top_k out of range: {k}.")))?
                }
                None => d.top_k.unwrap_or(0),
            },
            min_p: to_f32(f.min_p).or(d.min_p).unwrap_or(0.0),
            presence_penalty: to_f32(f.presence_penalty).unwrap_or(0.0),
            frequency_penalty: to_f32(f.frequency_penalty).unwrap_or(0.0),
            repetition_penalty: to_f32(f.repetition_penalty).or(d.repetition_penalty).unwrap_or(1.0),
            seed: None,
            max_tokens: 1,
            min_tokens: min_tokens as usize,
            ignore_eos: f.ignore_eos.unwrap_or(false),
            stop_token_ids: token_ids("stop_token_ids", f.stop_token_ids.as_deref().unwrap_or(&[]))?,
            logprobs,
            logprob_token_ids,
            prompt_logprobs,
            logit_bias,
            allowed_token_ids: f.allowed_token_ids.as_deref().map(|a| token_ids("allowed_token_ids", a)).transpose()?,
            bad_words_token_ids,
            grammar: None,
            grammar_after_token: None,
            thinking_budget: None,
        };
        // vLLM's SamplingParams checks (ranges), then its greedy rule for n.
        let mut probe = base.clone();
        probe.max_tokens = usize::MAX;
        probe.validate(model.vocab_size())?;
        let beam = beam_params(f, n, model)?;
        if base.is_greedy() && n > 1 && beam.is_none() {
            return Err(ApiError::invalid("n", format!("n must be 1 when using greedy sampling, got {n}.")));
        }
        let seed = f.seed.map(|s| s as u64);
        Ok(RequestPlan {
            n: n as usize,
            base,
            seed,
            output: OutputOptions {
                stop,
                include_stop_str_in_output: f.include_stop_str_in_output.unwrap_or(false),
                skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
            },
            requested_max_tokens: inp.max_tokens,
            max_tokens_param: inp.max_tokens_param,
            default_max_tokens: inp.default_max_tokens,
            echo_only: inp.echo_only,
            priority,
            cache_salt: f.cache_salt.clone(),
            beam,
        })
    }

    /// Logprobs a generated position reports besides the chosen token's: the request's count,
    /// or one per id of `logprob_token_ids`.
    pub fn logprobs(&self) -> Option<usize> {
        self.base.logprobs
    }

    pub fn logprob_token_ids(&self) -> Option<&[u32]> {
        self.base.logprob_token_ids.as_deref()
    }

    /// The `max_tokens` a sequence of a `prompt_len`-token prompt runs with (vLLM's
    /// `get_max_tokens`): the request's value, else the default, capped by the room left in the
    /// context and by `--max-new-tokens`.
    pub fn max_tokens(&self, prompt_len: usize, model: &ModelContext, limits: &Limits) -> ApiResult<usize> {
        let max_model_len = model.max_model_len();
        let param = self.max_tokens_param;
        if prompt_len > max_model_len {
            return Err(ApiError::invalid(
                "input_tokens",
                format!(
                    "This model's maximum context length is {max_model_len} tokens. However, your prompt contains \
                     {prompt_len} input tokens, which exceeds this limit even without any output tokens. Please \
                     reduce the length of the input prompt."
                ),
            ));
        }
        if prompt_len == max_model_len {
            return Err(ApiError::invalid(
                "input_tokens",
                format!(
                    "This model's maximum context length is {max_model_len} tokens. However, your prompt contains \
                     {prompt_len} input tokens, which leaves no room for output tokens. Please reduce the length of \
                     the input prompt."
                ),
            ));
        }
        if self.echo_only {
            return Ok(1);
        }
        if let Some(m) = self.requested_max_tokens {
            if m < 1 {
                return Err(ApiError::invalid(param, format!("{param} must be at least 1, got {m}.")));
            }
            if m as u64 > max_model_len as u64 {
                return Err(ApiError::invalid(
                    param,
                    format!(
                        "{param}={m} cannot be greater than max_model_len={max_model_len}. Please request fewer \
                         output tokens."
                    ),
                ));
            }
            if limits.max_new_tokens > 0 && m as u64 > limits.max_new_tokens as u64 {
                return Err(ApiError::invalid(
                    param,
                    format!(
                        "{param}={m} is more than this server allows per request ({}; see --max-new-tokens).",
                        limits.max_new_tokens
                    ),
                ));
            }
        }
        let room = max_model_len - prompt_len;
        let wanted = self
            .requested_max_tokens
            .map(|m| m as usize)
            .or(self.default_max_tokens)
            .or(model.defaults.max_tokens)
            .unwrap_or(room);
        let cap = if limits.max_new_tokens > 0 { limits.max_new_tokens } else { usize::MAX };
        Ok(wanted.min(room).min(cap).max(1))
    }

    /// Constrains every sequence of the request to `grammar` (structured outputs, tool calls).
    /// With `after`, the grammar applies after that token (the end of the model's reasoning).
    pub fn set_grammar(&mut self, grammar: Grammar, after: Option<u32>) {
        self.base.grammar = Some(grammar);
        self.base.grammar_after_token = after;
    }

    /// `thinking_token_budget`: every sequence's thinking ends once the budget is spent.
    pub fn set_thinking_budget(&mut self, budget: Option<ThinkingBudget>) {
        self.base.thinking_budget = budget;
    }

    /// The `max_tokens` value the request asked for, for metrics (what it runs with otherwise).
    pub fn max_tokens_param_value(&self, effective: usize) -> usize {
        self.requested_max_tokens.map_or(effective, |m| m.max(0) as usize)
    }

    /// Engine parameters of sequence `j` (of `n`) of one prompt: child seeds are `seed + j`
    /// (vLLM's parallel sampling); unseeded sequences take the server's next default seed.
    pub fn params(&self, j: usize, max_tokens: usize, state: &AppState, model: &ModelContext) -> SamplingParams {
        let mut p = self.base.clone();
        p.max_tokens = max_tokens;
        p.seed = match self.seed {
            Some(s) => Some(s.wrapping_add(j as u64)),
            None => state.next_default_seed(model),
        };
        p
    }
}

/// vLLM's `update_from_tokenizer`: each bad word, tokenized as it is and with a leading space
/// (when that makes a different first token of the same length).
fn bad_words_ids(words: &[String], tokenizer: &Tokenizer) -> ApiResult<Vec<Vec<u32>>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for word in words {
        if word.is_empty() {
            return Err(ApiError::invalid(
                "bad_words",
                format!("bad_words cannot contain an empty string. Got bad_words={words:?}"),
            ));
        }
        if !seen.insert(word.as_str()) {
            continue;
        }
        for prefix_space in [false, true] {
            let text = format!("{}{}", if prefix_space { " " } else { "" }, word.trim_start());
            let ids = tokenizer.encode(&text, false)?;
            if ids.is_empty() {
                if !prefix_space {
                    return Err(ApiError::invalid(
                        "bad_words",
                        "bad_words entries must tokenize to at least one token.",
                    ));
                }
                continue;
            }
            let take = match (prefix_space, out.last()) {
                (false, _) => true,
                (true, Some(prev)) => ids[0] != prev[0] && ids.len() == prev.len(),
                (true, None) => true,
            };
            if take {
                out.push(ids);
                if out.len() > MAX_BAD_WORDS {
                    return Err(ApiError::invalid(
                        "bad_words",
                        format!(
                            "Too many bad words after tokenization: {}. The max number is {MAX_BAD_WORDS}.",
                            out.len()
                        ),
                    ));
                }
            }
        }
    }
    Ok(out)
}
