//! `POST /v1/completions`, streaming and not, as vLLM's `OpenAIServingCompletion`.

use crate::beam_search::{self, BeamParams};
use crate::errors::{ApiError, ApiResult};
use crate::generation::{Event, Generation, SequenceSpec};
use crate::json_body::{RawObject, typed};
use crate::prompt::{TokenizeOptions, completion_prompts};
use crate::protocol::common::{PromptTokensDetails, Usage, include_usage, request_id, unix_now};
use crate::protocol::completion::{
    CompletionChoice, CompletionRequest, CompletionResponse, CompletionStreamChoice, CompletionStreamResponse,
    StopReasonJson,
};
use crate::protocol::fields::Endpoint;
use crate::protocol::logprobs::{TokenNamer, completion_logprobs, prompt_logprobs_json};
use crate::protocol::sampling_fields::SamplingFields;
use crate::routes::{finish_str, prepare_off_thread, read_request};
use crate::sampling::{PlanInputs, RequestPlan};
use crate::sse;
use crate::state::{AppState, ModelContext};
use crate::structured::{self, StructuredFields};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Instant;
use vllm_rs_engine::TokenLogprobs;
use vllm_rs_frontend::OutputDelta;

/// OpenAI's default `max_tokens` for completions (vLLM's `CompletionRequest.max_tokens = 16`).
const DEFAULT_MAX_TOKENS: usize = 16;
/// Sequences one request may start (prompts x n), as vLLM's `VLLM_MAX_N_SEQUENCES` bounds `n`.
const MAX_SEQUENCES: usize = 16384;

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle(state, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// What the response needs to know about the request.
struct Ctx {
    id: String,
    created: u64,
    model_name: String,
    model: Arc<ModelContext>,
    n: usize,
    num_prompts: usize,
    echo: bool,
    echo_only: bool,
    logprobs: Option<usize>,
    return_token_ids: bool,
    tokens_as_ids: bool,
    include_usage: bool,
    continuous_usage: bool,
    prompt_details: bool,
    beam: Option<BeamParams>,
}

async fn handle(state: Arc<AppState>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let arrival = Instant::now();
    let (model, body) = read_request(&state, &headers, body).await?;
    model.engine()?;
    let (ctx, specs, stream) = {
        let (state, model) = (state.clone(), model.clone());
        prepare_off_thread(body, Endpoint::Completion, move |obj| prepare(&state, model, obj)).await?
    };
    let mut generation = beam_search::start(model.clone(), &ctx.id, specs, arrival, ctx.beam.as_ref()).await?;
    if stream {
        return Ok(sse::response(stream_events(ctx, generation), state.config.sse_keepalive));
    }
    let collected = generation.collect().await?;
    Ok(Json(full_response(&ctx, &generation, &collected)).into_response())
}

/// The request checked and turned into sequences (tokenized), and whether it streams.
fn prepare(state: &AppState, model: Arc<ModelContext>, obj: &RawObject) -> ApiResult<(Ctx, Vec<SequenceSpec>, bool)> {
    let req: CompletionRequest = typed(obj)?;
    let f: SamplingFields = typed(obj)?;
    state.check_model(f.model.as_deref())?;
    let echo = f.echo.unwrap_or(false);
    let inputs = PlanInputs {
        logprobs: req.logprobs,
        logprobs_param: "logprobs",
        max_tokens: f.max_tokens,
        max_tokens_param: "max_tokens",
        default_max_tokens: Some(DEFAULT_MAX_TOKENS),
        echo_only: echo && f.max_tokens == Some(0),
        echo_prompt_logprobs: if echo { req.logprobs } else { None },
    };
    let stream = f.stream.unwrap_or(false);
    if stream && f.use_beam_search == Some(true) {
        // vLLM's check (its chat endpoint streams the finished beams; completions refuse).
        return Err(ApiError::bad_request("Streaming is not currently supported with beam search"));
    }
    let mut plan = RequestPlan::new(&f, inputs, &model)?;
    let structured: StructuredFields = typed(obj)?;
    if let Some((spec, param)) = structured.spec()? {
        plan.set_grammar(structured::compile(&model, &spec, param)?, None);
    }
    let limits = &state.config.limits;
    let opts = TokenizeOptions::new(
        f.add_special_tokens.unwrap_or(true),
        f.truncate_prompt_tokens,
        f.truncation_side.as_deref(),
        &model,
    )?;
    let prompts = completion_prompts(req.prompt, &opts, &model, limits)?;
    if prompts.len() * plan.n > MAX_SEQUENCES {
        return Err(ApiError::invalid(
            "n",
            format!(
                "{} prompts x n = {} asks for {} sequences; at most {MAX_SEQUENCES} per request.",
                prompts.len(),
                plan.n,
                prompts.len() * plan.n
            ),
        ));
    }
    let mut specs = Vec::with_capacity(prompts.len() * plan.n);
    for (pi, p) in prompts.iter().enumerate() {
        let max_tokens = plan.max_tokens(p.ids.len(), &model, limits)?;
        for j in 0..plan.n {
            specs.push(SequenceSpec {
                choice: pi * plan.n + j,
                prompt_index: pi,
                prompt: p.clone(),
                params: plan.params(j, max_tokens, state, &model),
                output: plan.output.clone(),
                max_tokens_param: plan.max_tokens_param_value(max_tokens),
                priority: plan.priority,
                cache_salt: plan.cache_salt.clone(),
            });
        }
    }
    let (usage, continuous) = include_usage(f.stream_options.as_ref(), state.config.enable_force_include_usage);
    let ctx = Ctx {
        id: request_id("cmpl", f.request_id.as_deref()),
        created: unix_now(),
        model_name: state.model_name().to_string(),
        model: model.clone(),
        n: plan.n,
        num_prompts: prompts.len(),
        echo,
        echo_only: plan.echo_only,
        // The request's count, or every id of `logprob_token_ids`.
        logprobs: plan.logprobs(),
        return_token_ids: f.return_token_ids.unwrap_or(false),
        tokens_as_ids: f.return_tokens_as_token_ids.unwrap_or(state.config.return_tokens_as_token_ids),
        include_usage: usage,
        continuous_usage: continuous,
        prompt_details: state.config.enable_prompt_tokens_details,
        beam: plan.beam.clone(),
    };
    model.metrics.record_request(plan.n);
    Ok((ctx, specs, stream))
}

/// The prompt as echoed: its text (decoded when it was given as token ids; empty with
/// `return_token_ids`, as vLLM).
fn prompt_text(ctx: &Ctx, prompt: &crate::prompt::Prompt) -> String {
    if ctx.return_token_ids {
        return String::new();
    }
    match &prompt.text {
        Some(t) => t.clone(),
        None => ctx.model.tokenizer.decode(&prompt.ids, false).unwrap_or_default(),
    }
}

fn full_response(ctx: &Ctx, generation: &Generation, collected: &[crate::generation::Collected]) -> CompletionResponse {
    let mut namer = TokenNamer::new(&ctx.model.tokenizer, ctx.tokens_as_ids);
    let mut choices = Vec::with_capacity(collected.len());
    let mut prompt_tokens = vec![0; ctx.num_prompts];
    let mut cached_tokens = vec![0; ctx.num_prompts];
    let mut completion_tokens = 0;
    for (seq, c) in generation.sequences().iter().zip(collected) {
        let prompt = &seq.spec.prompt;
        prompt_tokens[seq.spec.prompt_index] = prompt.ids.len();
        cached_tokens[seq.spec.prompt_index] = seq.num_cached_tokens;
        completion_tokens += seq.num_generated();
        let gen_ids = &seq.proc.token_ids;
        let (text, ids, entries): (String, Vec<u32>, Vec<Option<&TokenLogprobs>>) = if ctx.echo {
            let ptext = prompt_text(ctx, prompt);
            let mut entries: Vec<Option<&TokenLogprobs>> = match &c.prompt_logprobs {
                Some(p) => p.iter().map(Option::as_ref).collect(),
                None => vec![None; prompt.ids.len()],
            };
            if ctx.echo_only {
                (ptext, prompt.ids.clone(), entries)
            } else {
                entries.extend(c.logprobs.iter().map(Some));
                (ptext + &seq.proc.text, [prompt.ids.as_slice(), gen_ids].concat(), entries)
            }
        } else {
            (seq.proc.text.clone(), gen_ids.clone(), c.logprobs.iter().map(Some).collect())
        };
        let logprobs = ctx.logprobs.map(|k| completion_logprobs(&ids, &entries, k, &mut namer, 0));
        choices.push(CompletionChoice {
            index: choices.len(),
            text,
            logprobs,
            finish_reason: finish_str(seq.proc.finish_reason()),
            stop_reason: seq.proc.stop_reason().map(StopReasonJson::from),
            token_ids: ctx.return_token_ids.then(|| gen_ids.clone()),
            prompt_logprobs: c.prompt_logprobs.as_ref().map(|p| prompt_logprobs_json(p, &mut namer)),
            prompt_token_ids: ctx.return_token_ids.then(|| prompt.ids.clone()),
        });
    }
    let mut usage = Usage::new(prompt_tokens.iter().sum(), completion_tokens);
    if ctx.prompt_details {
        usage.prompt_tokens_details = Some(PromptTokensDetails { cached_tokens: cached_tokens.iter().sum() });
    }
    CompletionResponse {
        id: ctx.id.clone(),
        object: "text_completion",
        created: ctx.created,
        model: ctx.model_name.clone(),
        choices,
        service_tier: None,
        system_fingerprint: None,
        usage,
    }
}

/// Streaming state: what has been sent per choice.
struct Streamer {
    ctx: Ctx,
    generation: Generation,
    echoed: Vec<bool>,
    text_offsets: Vec<usize>,
    num_tokens: Vec<usize>,
    prompt_tokens: Vec<usize>,
    cached_tokens: Option<usize>,
    done: bool,
}

fn stream_events(ctx: Ctx, generation: Generation) -> impl futures_util::Stream<Item = String> + Send + 'static {
    let choices = ctx.n * ctx.num_prompts;
    let mut prompt_tokens = vec![0; ctx.num_prompts];
    for s in generation.sequences() {
        prompt_tokens[s.spec.prompt_index] = s.spec.prompt.ids.len();
    }
    let st = Streamer {
        echoed: vec![false; choices],
        text_offsets: vec![0; choices],
        num_tokens: vec![0; choices],
        prompt_tokens,
        cached_tokens: None,
        ctx,
        generation,
        done: false,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let events = st.step().await;
        Some((events, st))
    })
    .flat_map(futures_util::stream::iter)
}

impl Streamer {
    async fn step(&mut self) -> Vec<String> {
        match self.generation.next().await {
            Some(Event::Output { seq, delta }) => self.chunk(seq, delta).into_iter().collect(),
            Some(Event::Failed(e)) => {
                self.done = true;
                vec![sse::data(&e.to_json()), sse::DONE.to_string()]
            }
            None => {
                self.done = true;
                let mut out = Vec::new();
                if self.ctx.include_usage {
                    let mut usage = Usage::new(self.prompt_tokens.iter().sum(), self.num_tokens.iter().sum());
                    if self.ctx.prompt_details {
                        usage.prompt_tokens_details =
                            Some(PromptTokensDetails { cached_tokens: self.cached_tokens.unwrap_or(0) });
                    }
                    out.push(self.json(Vec::new(), Some(usage)));
                }
                out.push(sse::DONE.to_string());
                out
            }
        }
    }

    fn json(&self, choices: Vec<CompletionStreamChoice>, usage: Option<Usage>) -> String {
        let chunk = CompletionStreamResponse {
            id: self.ctx.id.clone(),
            object: "text_completion",
            created: self.ctx.created,
            model: self.ctx.model_name.clone(),
            choices,
            usage,
        };
        sse::data(&serde_json::to_string(&chunk).expect("chunk JSON"))
    }

    fn chunk(&mut self, seq_index: usize, delta: OutputDelta) -> Option<String> {
        let seq = &self.generation.sequences()[seq_index];
        let i = seq.spec.choice;
        let prompt = seq.spec.prompt.clone();
        let prompt_index = seq.spec.prompt_index;
        if self.cached_tokens.is_none() {
            self.cached_tokens = Some(delta.num_cached_tokens);
        }
        let mut prompt_token_ids = None;
        let (text, ids, entries): (String, Vec<u32>, Vec<Option<&TokenLogprobs>>) = if self.ctx.echo && !self.echoed[i]
        {
            self.echoed[i] = true;
            prompt_token_ids = Some(prompt.ids.clone());
            let ptext = prompt_text(&self.ctx, &prompt);
            let mut entries: Vec<Option<&TokenLogprobs>> = match &delta.prompt_logprobs {
                Some(p) => p.iter().map(Option::as_ref).collect(),
                None => vec![None; prompt.ids.len()],
            };
            if self.ctx.echo_only {
                (ptext, prompt.ids.clone(), entries)
            } else {
                entries.extend(delta.logprobs.iter().map(Some));
                (ptext + &delta.text, [prompt.ids.as_slice(), &delta.token_ids].concat(), entries)
            }
        } else {
            if !self.echoed[i] && self.ctx.return_token_ids {
                self.echoed[i] = true;
                prompt_token_ids = Some(prompt.ids.clone());
            }
            if delta.text.is_empty()
                && delta.token_ids.is_empty()
                && self.num_tokens[i] == 0
                && delta.finish_reason.is_none()
            {
                return None;
            }
            (delta.text.clone(), delta.token_ids.clone(), delta.logprobs.iter().map(Some).collect())
        };
        let logprobs = self.ctx.logprobs.map(|k| {
            let mut namer = TokenNamer::new(&self.ctx.model.tokenizer, self.ctx.tokens_as_ids);
            let lp = completion_logprobs(&ids, &entries, k, &mut namer, self.text_offsets[i]);
            self.text_offsets[i] = lp.next_offset(self.text_offsets[i]);
            lp
        });
        self.num_tokens[i] += delta.token_ids.len();
        let choice = CompletionStreamChoice {
            index: i,
            text,
            logprobs,
            finish_reason: finish_str(delta.finish_reason),
            stop_reason: delta.stop_reason.as_ref().map(StopReasonJson::from),
            prompt_token_ids: if self.ctx.return_token_ids { prompt_token_ids } else { None },
            token_ids: self.ctx.return_token_ids.then(|| delta.token_ids.clone()),
        };
        let usage = self.ctx.continuous_usage.then(|| Usage::new(self.prompt_tokens[prompt_index], self.num_tokens[i]));
        Some(self.json(vec![choice], usage))
    }
}
