//! Running one API request's sequences on the engine: submit them, merge their output streams,
//! turn outputs into text deltas ([`OutputProcessor`]), abort a sequence when a stop string ends
//! it, and record each sequence's timing in the metrics.
//!
//! Engine request ids are the response id plus a number unique in this process, as vLLM appends a
//! random suffix: a client-chosen `request_id` shows in responses but never names another
//! client's engine request (nor is refused because another client uses it).
//!
//! Dropping a [`Generation`] (the client went away, the response future was cancelled) drops the
//! engine streams, which aborts the unfinished sequences and frees their KV blocks.

use crate::errors::{ApiError, ApiResult};
use crate::metrics::SequenceRecord;
use crate::prompt::Prompt;
use crate::state::ModelContext;
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use vllm_rs_engine::{EngineError, EngineRequest, FinishReason, RequestOutput, SamplingParams, TokenLogprobs};
use vllm_rs_frontend::{OutputDelta, OutputOptions, OutputProcessor};

/// One sequence to run: a prompt, its engine parameters and its place in the response.
pub struct SequenceSpec {
    /// The response's choice index.
    pub choice: usize,
    /// Index of the prompt (completions with several prompts).
    pub prompt_index: usize,
    pub prompt: Arc<Prompt>,
    pub params: SamplingParams,
    pub output: OutputOptions,
    /// The `max_tokens` the request asked for (for the metrics histogram).
    pub max_tokens_param: usize,
    pub priority: i32,
    pub cache_salt: Option<String>,
}

/// A running sequence.
pub struct Sequence {
    pub spec: SequenceSpec,
    pub request_id: String,
    pub proc: OutputProcessor,
    /// Prompt tokens served from the prefix cache.
    pub num_cached_tokens: usize,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    inter_token: Vec<f64>,
    recorded: bool,
}

impl Sequence {
    pub fn num_generated(&self) -> usize {
        self.proc.token_ids.len()
    }
}

/// What [`Generation::next`] yields.
pub enum Event {
    /// New output of sequence `seq` (an index into [`Generation::sequences`]).
    Output { seq: usize, delta: OutputDelta },
    /// The engine rejected a sequence after it was submitted.
    Failed(ApiError),
}

/// Per-sequence logprobs gathered by [`Generation::collect`].
#[derive(Clone, Debug, Default)]
pub struct Collected {
    pub logprobs: Vec<TokenLogprobs>,
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
}

type Item = (usize, Option<Result<RequestOutput, EngineError>>);

pub struct Generation {
    model: Arc<ModelContext>,
    arrival: Instant,
    seqs: Vec<Sequence>,
    streams: SelectAll<BoxStream<'static, Item>>,
}

impl Generation {
    /// Checks every sequence, then submits them all. `base_id` (the response id) prefixes the
    /// engine request ids.
    pub fn start(
        model: Arc<ModelContext>,
        base_id: &str,
        specs: Vec<SequenceSpec>,
        arrival: Instant,
    ) -> ApiResult<Self> {
        let mut g = Self::new(model, base_id, specs, arrival)?;
        for (i, s) in g.seqs.iter().enumerate() {
            let req = EngineRequest {
                request_id: s.request_id.clone(),
                prompt_token_ids: s.spec.prompt.ids.clone(),
                params: s.spec.params.clone(),
                priority: s.spec.priority,
                cache_salt: s.spec.cache_salt.clone(),
            };
            // On failure the streams already made drop with `g`, aborting their requests.
            let rs = g.model.engine()?.add_request(req)?;
            let st = stream::unfold(Some(rs), move |state| async move {
                let mut rs = state?;
                match rs.next().await {
                    Some(item) => Some(((i, Some(item)), Some(rs))),
                    None => Some(((i, None), None)),
                }
            });
            g.streams.push(st.boxed());
        }
        Ok(g)
    }

    /// Sequences whose whole output is already known (beam search ran them step by step, each
    /// step recorded in the metrics then): each yields `outputs[i]` and ends, so the endpoints
    /// shape it as they shape engine output.
    pub fn finished(
        model: Arc<ModelContext>,
        base_id: &str,
        specs: Vec<SequenceSpec>,
        outputs: Vec<RequestOutput>,
        arrival: Instant,
    ) -> ApiResult<Self> {
        let mut g = Self::new(model, base_id, specs, arrival)?;
        for (i, out) in outputs.into_iter().enumerate() {
            g.seqs[i].recorded = true;
            g.streams.push(stream::iter([(i, Some(Ok(out))), (i, None)]).boxed());
        }
        Ok(g)
    }

    /// The sequences checked and set up, nothing submitted yet.
    fn new(model: Arc<ModelContext>, base_id: &str, specs: Vec<SequenceSpec>, arrival: Instant) -> ApiResult<Self> {
        let vocab = model.vocab_size();
        for s in &specs {
            s.params.validate(vocab)?;
        }
        let n = specs.len();
        let mut seqs = Vec::with_capacity(n);
        for (i, spec) in specs.into_iter().enumerate() {
            let proc = OutputProcessor::new(model.tokenizer.clone(), &spec.prompt.ids, &spec.output)
                .map_err(|e| ApiError::invalid("stop", e.to_string()))?;
            let request_id = engine_request_id(base_id, (n > 1).then_some(i));
            seqs.push(Sequence {
                spec,
                request_id,
                proc,
                num_cached_tokens: 0,
                first_token: None,
                last_token: None,
                inter_token: Vec::new(),
                recorded: false,
            });
        }
        Ok(Generation { model, arrival, seqs, streams: SelectAll::new() })
    }

    pub fn sequences(&self) -> &[Sequence] {
        &self.seqs
    }

    /// The next output of any sequence; `None` when all are done.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            let (i, item) = self.streams.next().await?;
            let seq = &mut self.seqs[i];
            if seq.proc.is_finished() {
                continue; // outputs that raced a stop-string abort
            }
            let out = match item {
                Some(Ok(o)) => o,
                Some(Err(e)) => return Some(Event::Failed(e.into())),
                // The engine dropped the request without finishing it (shutdown).
                None => RequestOutput {
                    request_id: seq.request_id.clone(),
                    new_token_ids: Vec::new(),
                    logprobs: Vec::new(),
                    prompt_logprobs: None,
                    finish_reason: Some(FinishReason::Abort),
                    stop_token: None,
                    num_prompt_tokens: seq.spec.prompt.ids.len(),
                    num_cached_tokens: seq.num_cached_tokens,
                },
            };
            if !out.new_token_ids.is_empty() {
                let now = Instant::now();
                match seq.last_token {
                    None => seq.first_token = Some(now),
                    Some(prev) => seq.inter_token.push((now - prev).as_secs_f64()),
                }
                seq.last_token = Some(now);
            }
            if seq.num_generated() == 0 {
                seq.num_cached_tokens = out.num_cached_tokens;
            }
            let delta = match seq.proc.process(out) {
                Ok(d) => d,
                Err(e) => return Some(Event::Failed(ApiError::internal(format!("detokenizing: {e}")))),
            };
            if delta.needs_abort
                && let Ok(engine) = self.model.engine()
            {
                engine.abort(vec![seq.request_id.clone()]);
            }
            if delta.finish_reason.is_some() {
                self.record(i);
            }
            return Some(Event::Output { seq: i, delta });
        }
    }

    /// Runs every sequence to the end, keeping what the response needs besides text and tokens.
    pub async fn collect(&mut self) -> ApiResult<Vec<Collected>> {
        let mut out: Vec<Collected> = (0..self.seqs.len()).map(|_| Collected::default()).collect();
        while let Some(ev) = self.next().await {
            match ev {
                Event::Failed(e) => return Err(e),
                Event::Output { seq, delta } => {
                    let c = &mut out[seq];
                    c.logprobs.extend(delta.logprobs);
                    if delta.prompt_logprobs.is_some() {
                        c.prompt_logprobs = delta.prompt_logprobs;
                    }
                }
            }
        }
        Ok(out)
    }

    fn record(&mut self, i: usize) {
        let arrival = self.arrival;
        let s = &mut self.seqs[i];
        if s.recorded {
            return;
        }
        s.recorded = true;
        let generated = s.num_generated();
        let decode = match (s.first_token, s.last_token) {
            (Some(a), Some(b)) => Some((b - a).as_secs_f64()),
            _ => None,
        };
        let tpot = decode.filter(|_| generated > 1).map(|d| d / (generated - 1) as f64);
        let r = SequenceRecord {
            finish_reason: Some(s.proc.finish_reason().unwrap_or(FinishReason::Abort)),
            time_to_first_token: s.first_token.map(|t| (t - arrival).as_secs_f64()),
            inter_token_latencies: std::mem::take(&mut s.inter_token),
            e2e_latency: arrival.elapsed().as_secs_f64(),
            time_per_output_token: tpot,
            decode_time: decode,
            prompt_tokens: s.spec.prompt.ids.len(),
            generation_tokens: generated,
            max_tokens_param: s.spec.max_tokens_param,
        };
        self.model.metrics.record_sequence(&r);
    }
}

/// `base-N` (one sequence) or `base-i-N` (sequence `i` of several), N counting every sequence
/// this process has submitted.
fn engine_request_id(base: &str, seq: Option<usize>) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    match seq {
        None => format!("{base}-{n}"),
        Some(i) => format!("{base}-{i}-{n}"),
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        for i in 0..self.seqs.len() {
            self.record(i);
        }
    }
}
