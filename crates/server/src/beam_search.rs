//! Beam search (`use_beam_search`) as vLLM's serving layer runs it (`BeamSearchOnlineMixin`):
//! over the engine, not inside it. Each step asks the engine for one token of every live beam
//! with `2 × beam_width` logprobs; every candidate extends its beam by one token; the
//! `beam_width` best by cumulative logprob live on, and a candidate that is EOS completes its
//! beam. At the end completed and live beams are ranked by
//! `cum_logprob / len ^ length_penalty` (vLLM's `get_beam_search_score`: `len` counts the
//! prompt, less a final EOS) and the best `beam_width` are the response's choices (`n` is the
//! beam width).
//!
//! As vLLM, a step uses only the request's temperature and `allowed_token_ids` (logprobs are the
//! model's raw ones, so the temperature changes nothing); stop strings, penalties and grammars
//! do not apply; the finish reason is `stop` (with the EOS id as `stop_reason`) or `length`.

use crate::errors::ApiResult;
use crate::generation::{Generation, SequenceSpec};
use crate::prompt::Prompt;
use crate::state::ModelContext;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use vllm_rs_engine::{FinishReason, RequestOutput, SamplingParams, TokenLogprobs};
use vllm_rs_frontend::OutputOptions;

/// vLLM's `BeamSearchParams` besides the width, temperature and `max_tokens`, which come with
/// each sequence's engine parameters.
#[derive(Clone, Debug)]
pub struct BeamParams {
    pub length_penalty: f64,
    pub include_stop_str_in_output: bool,
    pub ignore_eos: bool,
}

/// vLLM's `get_beam_search_score`: `tokens` are the prompt and the beam's tokens.
pub fn beam_score(num_tokens: usize, ends_with_eos: bool, cum_logprob: f64, length_penalty: f64) -> f64 {
    let len = num_tokens - usize::from(ends_with_eos);
    cum_logprob / (len as f64).powf(length_penalty)
}

#[derive(Clone, Default)]
struct Beam {
    /// Generated tokens (a completing EOS only with `include_stop_str_in_output`).
    tokens: Vec<u32>,
    /// One entry per step, the EOS step included.
    logprobs: Vec<TokenLogprobs>,
    cum_logprob: f64,
    /// Completed by EOS.
    stopped: bool,
}

/// Starts the request's sequences: on the engine as they are, or, with `beam`, as a beam search
/// per prompt (the `n` sequences of a prompt are its beam width), whose results come out of the
/// returned [`Generation`] as engine output would.
pub async fn start(
    model: Arc<ModelContext>,
    base_id: &str,
    specs: Vec<SequenceSpec>,
    arrival: Instant,
    beam: Option<&BeamParams>,
) -> ApiResult<Generation> {
    let Some(beam) = beam else { return Generation::start(model, base_id, specs, arrival) };
    let mut groups: Vec<Vec<SequenceSpec>> = Vec::new();
    for spec in specs {
        match groups.last_mut() {
            Some(g) if g[0].prompt_index == spec.prompt_index => g.push(spec),
            _ => groups.push(vec![spec]),
        }
    }
    let searches = groups.iter().map(|g| search(&model, base_id, &g[0], g.len(), beam, arrival));
    let results = futures_util::future::try_join_all(searches).await?;
    let (mut kept, mut outputs) = (Vec::new(), Vec::new());
    for (group, beams) in groups.into_iter().zip(results) {
        // Fewer beams than asked for when fewer candidates existed (vLLM returns those).
        for (mut spec, out) in group.into_iter().zip(beams) {
            spec.output.stop.clear();
            kept.push(spec);
            outputs.push(out);
        }
    }
    Generation::finished(model, base_id, kept, outputs, arrival)
}

/// One prompt's beam search of `width` beams; `spec` carries the prompt and its parameters.
async fn search(
    model: &Arc<ModelContext>,
    base_id: &str,
    spec: &SequenceSpec,
    width: usize,
    beam: &BeamParams,
    arrival: Instant,
) -> ApiResult<Vec<RequestOutput>> {
    let eos = model.engine()?.config.eos_token_id;
    let stops_at = |t: u32| !beam.ignore_eos && Some(t) == eos;
    let allowed: Option<HashSet<u32>> = spec.params.allowed_token_ids.as_ref().map(|a| a.iter().copied().collect());
    let step = SamplingParams {
        temperature: spec.params.temperature,
        max_tokens: 1,
        logprobs: Some(2 * width),
        allowed_token_ids: spec.params.allowed_token_ids.clone(),
        ..SamplingParams::default()
    };
    let prompt = &spec.prompt.ids;
    let mut live = vec![Beam::default()];
    let mut completed = Vec::new();
    let mut num_cached_tokens = None;
    for _ in 0..spec.params.max_tokens {
        let steps = live.iter().enumerate().map(|(i, b)| SequenceSpec {
            choice: i,
            prompt_index: 0,
            prompt: Arc::new(Prompt { ids: [prompt.as_slice(), &b.tokens].concat(), text: None }),
            params: step.clone(),
            output: OutputOptions::default(),
            max_tokens_param: 1,
            priority: spec.priority,
            cache_salt: spec.cache_salt.clone(),
        });
        let mut g = Generation::start(model.clone(), base_id, steps.collect(), arrival)?;
        let collected = g.collect().await?;
        num_cached_tokens.get_or_insert(g.sequences()[0].num_cached_tokens);
        let mut candidates: Vec<(f64, usize, TokenLogprobs)> = Vec::new();
        for (bi, c) in collected.iter().enumerate() {
            let Some(lp) = c.logprobs.first() else { continue };
            for chosen in step_candidates(lp) {
                if allowed.as_ref().is_some_and(|a| !a.contains(&chosen.token_id)) {
                    continue;
                }
                let cum = live[bi].cum_logprob + f64::from(chosen.logprob);
                if stops_at(chosen.token_id) {
                    let mut done = live[bi].extended(chosen, cum, beam.include_stop_str_in_output);
                    done.stopped = true;
                    completed.push(done);
                } else {
                    candidates.push((cum, bi, chosen));
                }
            }
        }
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        candidates.truncate(width);
        live = candidates.into_iter().map(|(cum, bi, chosen)| live[bi].extended(chosen, cum, true)).collect();
        if live.is_empty() {
            break;
        }
    }
    completed.extend(live);
    let score = |b: &Beam| {
        let ends_with_eos = b.tokens.last().or(prompt.last()).is_some_and(|&t| Some(t) == eos);
        beam_score(prompt.len() + b.tokens.len(), ends_with_eos, b.cum_logprob, beam.length_penalty)
    };
    completed.sort_by(|a, b| score(b).total_cmp(&score(a)));
    completed.truncate(width);
    let output = |b: Beam| RequestOutput {
        request_id: base_id.to_string(),
        new_token_ids: b.tokens,
        logprobs: b.logprobs,
        prompt_logprobs: None,
        finish_reason: Some(if b.stopped { FinishReason::Stop } else { FinishReason::Length }),
        stop_token: if b.stopped { eos } else { None },
        num_prompt_tokens: prompt.len(),
        num_cached_tokens: num_cached_tokens.unwrap_or(0),
    };
    Ok(completed.into_iter().map(output).collect())
}

impl Beam {
    fn extended(&self, chosen: TokenLogprobs, cum_logprob: f64, keep_token: bool) -> Beam {
        let mut b = self.clone();
        if keep_token {
            b.tokens.push(chosen.token_id);
        }
        b.logprobs.push(chosen);
        b.cum_logprob = cum_logprob;
        b
    }
}

/// The tokens one step offers (its top logprobs and the sampled token, as vLLM's logprobs
/// dict), each as the logprobs entry of a beam that takes it.
fn step_candidates(lp: &TokenLogprobs) -> Vec<TokenLogprobs> {
    let mut out: Vec<TokenLogprobs> = lp
        .top
        .iter()
        .enumerate()
        .map(|(i, &(token_id, logprob))| TokenLogprobs { token_id, logprob, rank: i + 1, top: lp.top.clone() })
        .collect();
    if !lp.top.iter().any(|&(t, _)| t == lp.token_id) {
        out.push(lp.clone());
    }
    out
}
