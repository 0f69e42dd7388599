//! `POST /v1/chat/completions`, streaming and not, as vLLM's `OpenAIServingChat`: structured
//! outputs, tools and reasoning as [`crate::chat_output`] shapes them.

use crate::beam_search::{self, BeamParams};
use crate::chat_output::{ChoiceStream, OutputPlan};
use crate::errors::{ApiError, ApiResult};
use crate::generation::{Event, Generation, SequenceSpec};
use crate::json_body::{RawObject, typed};
use crate::prompt::{ChatInput, ChatPrompt, TokenizeOptions, chat_prompt};
use crate::protocol::chat::{
    ChatChoice, ChatMessage, ChatRequest, ChatResponse, ChatStreamChoice, ChatStreamResponse, Delta,
};
use crate::protocol::common::{PromptTokensDetails, Usage, include_usage, request_id, unix_now};
use crate::protocol::completion::StopReasonJson;
use crate::protocol::fields::Endpoint;
use crate::protocol::logprobs::{TokenNamer, chat_logprobs, prompt_logprobs_json};
use crate::protocol::sampling_fields::SamplingFields;
use crate::reasoning::{ReasoningFields, reasoning_ended};
use crate::routes::{finish_str, prepare_off_thread, read_request};
use crate::sampling::{PlanInputs, RequestPlan};
use crate::sse;
use crate::state::{AppState, ModelContext};
use crate::structured::{self, StructuredFields};
use crate::tools::{self, ToolCall, ToolChoice, ToolSetup};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Instant;
use vllm_rs_frontend::OutputDelta;

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match handle(state, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A prepared chat request: what shaping its output needs (the other APIs over the chat path,
/// see [`crate::turn`], read `id`, `model`, `prompt_ids` and `output`).
pub(crate) struct Ctx {
    pub(crate) id: String,
    created: u64,
    model_name: String,
    pub(crate) model: Arc<ModelContext>,
    role: String,
    /// The last message's content when `echo` applies (same role as the reply).
    echo_prefix: Option<String>,
    logprobs: Option<usize>,
    return_token_ids: bool,
    tokens_as_ids: bool,
    include_usage: bool,
    continuous_usage: bool,
    prompt_details: bool,
    pub(crate) prompt_ids: Vec<u32>,
    prompt_text: Option<String>,
    pub(crate) output: OutputPlan,
    /// `use_beam_search` (streamed, as vLLM, once the beams are done).
    beam: Option<BeamParams>,
}

async fn handle(state: Arc<AppState>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let arrival = Instant::now();
    let (model, body) = read_request(&state, &headers, body).await?;
    model.engine()?;
    let (ctx, specs, stream, n) = {
        let (state, model) = (state.clone(), model.clone());
        prepare_off_thread(body, Endpoint::Chat, move |obj| prepare(&state, model, obj)).await?
    };
    let generation = beam_search::start(model.clone(), &ctx.id, specs, arrival, ctx.beam.as_ref()).await?;
    if stream {
        return Ok(sse::response(stream_events(ctx, generation), state.config.sse_keepalive));
    }
    respond(ctx, generation, n).await
}

/// The request checked and rendered into sequences (tokenized), whether it streams, and `n`.
pub(crate) fn prepare(
    state: &AppState,
    model: Arc<ModelContext>,
    obj: &RawObject,
) -> ApiResult<(Ctx, Vec<SequenceSpec>, bool, usize)> {
    let req: ChatRequest = typed(obj)?;
    let f: SamplingFields = typed(obj)?;
    state.check_model(f.model.as_deref())?;
    let Some(messages) = req.messages.as_deref() else {
        return Err(ApiError::schema("messages", "messages: Field required"));
    };
    let want_logprobs = req.logprobs.unwrap_or(false);
    let top_logprobs = req.top_logprobs.unwrap_or(0);
    if top_logprobs < -1 {
        return Err(ApiError::invalid("top_logprobs", "`top_logprobs` must be a positive value or -1."));
    }
    if (top_logprobs == -1 || top_logprobs > 0) && !want_logprobs {
        return Err(ApiError::invalid("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true."));
    }
    let echo = f.echo.unwrap_or(false);
    let (max_tokens, max_tokens_param) = match req.max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (f.max_tokens, "max_tokens"),
    };
    let inputs = PlanInputs {
        logprobs: want_logprobs.then_some(top_logprobs),
        logprobs_param: "top_logprobs",
        max_tokens,
        max_tokens_param,
        default_max_tokens: None,
        echo_only: false,
        // vLLM: chat `echo` asks for prompt logprobs with `top_logprobs` alternatives.
        echo_prompt_logprobs: echo.then_some(top_logprobs),
    };
    let mut plan = RequestPlan::new(&f, inputs, &model)?;
    let (rendered, tools) = render(&req, messages, &f, state, &model)?;
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let output = constrain(&mut plan, obj, tools, &rendered.prompt.ids, state, &model)?;
    let output = OutputPlan { include_reasoning: req.include_reasoning.unwrap_or(true), ..output };
    if output.reads_harmony() {
        // Harmony's markers are special tokens: the parser reads them in the text.
        plan.output.skip_special_tokens = false;
    }
    let role = if add_generation_prompt {
        state.config.response_role.clone()
    } else {
        rendered.last_message.as_ref().map(|(r, _)| r.clone()).unwrap_or_else(|| state.config.response_role.clone())
    };
    let echo_prefix = match (&rendered.last_message, echo) {
        (Some((r, content)), true) if *r == role && !content.is_empty() => Some(content.clone()),
        _ => None,
    };
    let prompt = Arc::new(rendered.prompt);
    let max_tokens = plan.max_tokens(prompt.ids.len(), &model, &state.config.limits)?;
    let specs = (0..plan.n)
        .map(|j| SequenceSpec {
            choice: j,
            prompt_index: 0,
            prompt: prompt.clone(),
            params: plan.params(j, max_tokens, state, &model),
            output: plan.output.clone(),
            max_tokens_param: plan.max_tokens_param_value(max_tokens),
            priority: plan.priority,
            cache_salt: plan.cache_salt.clone(),
        })
        .collect();
    let (usage, continuous) = include_usage(f.stream_options.as_ref(), state.config.enable_force_include_usage);
    let ctx = Ctx {
        id: request_id("chatcmpl", f.request_id.as_deref()),
        created: unix_now(),
        model_name: state.model_name().to_string(),
        model: model.clone(),
        role,
        echo_prefix,
        // `top_logprobs` entries, or the chosen token and every id of `logprob_token_ids`.
        logprobs: match plan.logprob_token_ids() {
            Some(ids) => Some(ids.len() + 1),
            None => plan.logprobs(),
        },
        return_token_ids: f.return_token_ids.unwrap_or(false),
        tokens_as_ids: f.return_tokens_as_token_ids.unwrap_or(state.config.return_tokens_as_token_ids),
        include_usage: usage,
        continuous_usage: continuous,
        prompt_details: state.config.enable_prompt_tokens_details,
        prompt_ids: prompt.ids.clone(),
        prompt_text: req.return_prompt_text.unwrap_or(false).then(|| prompt.text.clone().unwrap_or_default()),
        output,
        beam: plan.beam.clone(),
    };
    model.metrics.record_request(plan.n);
    Ok((ctx, specs, f.stream.unwrap_or(false), plan.n))
}

/// The conversation rendered through the chat template and tokenized, with the request's tools
/// checked (what `/v1/messages/count_tokens` counts, too).
pub(crate) fn render(
    req: &ChatRequest,
    messages: &[serde_json::Map<String, serde_json::Value>],
    f: &SamplingFields,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<(ChatPrompt, Option<ToolSetup>)> {
    let tools = tools::parse(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
        state.config.auto_tool_parser.is_some(),
    )?;
    let opts = TokenizeOptions::new(
        f.add_special_tokens.unwrap_or(false),
        f.truncate_prompt_tokens,
        f.truncation_side.as_deref(),
        model,
    )?;
    let input = ChatInput {
        messages,
        add_generation_prompt: req.add_generation_prompt.unwrap_or(true),
        continue_final_message: req.continue_final_message.unwrap_or(false),
        request_template: req.chat_template.as_deref(),
        template_kwargs: req.chat_template_kwargs.as_ref(),
        documents: req.documents.as_deref(),
        tools: tools.as_ref().map(|t| t.tools.as_slice()),
    };
    Ok((chat_prompt(&input, &opts, state, model)?, tools))
}

/// The grammar the output must follow (tool choice `required` / named, else the structured
/// output fields), compiled here; and how the output is shaped into reasoning, content, calls.
fn constrain(
    plan: &mut RequestPlan,
    obj: &RawObject,
    tools: Option<ToolSetup>,
    prompt: &[u32],
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<OutputPlan> {
    let structured: StructuredFields = typed(obj)?;
    let requested = structured.spec()?;
    let tool_spec = tools.as_ref().map(ToolSetup::grammar).transpose()?.flatten();
    if requested.is_some() && tools.as_ref().is_some_and(|t| matches!(t.choice, ToolChoice::Named(_))) {
        return Err(ApiError::bad_request(
            "You can only either use constraints for structured outputs or tools, not both.",
        ));
    }
    let reasoning = model.reasoning.map(|(p, t)| (p, p.starts_thinking(prompt, t)));
    let think = model.reasoning.and_then(|(_, t)| t);
    plan.set_thinking_budget(typed::<ReasoningFields>(obj)?.budget(think, prompt)?);
    if let Some((spec, param)) = tool_spec.map(|s| (s, "tools")).or(requested) {
        let grammar = structured::compile(model, &spec, param)?;
        // As vLLM: the grammar applies once the reasoning has ended.
        let after = think.and_then(|t| (!reasoning_ended(prompt, t)).then_some(t.end));
        plan.set_grammar(grammar, after);
    }
    Ok(OutputPlan { reasoning, include_reasoning: true, tools, auto_parser: state.config.auto_tool_parser.clone() })
}

/// The rest of a non-streaming response.
async fn respond(ctx: Ctx, mut generation: Generation, n: usize) -> ApiResult<Response> {
    let model = ctx.model.clone();
    let collected = generation.collect().await?;
    let mut namer = TokenNamer::new(&model.tokenizer, ctx.tokens_as_ids);
    let mut choices = Vec::with_capacity(n);
    let mut prompt_logprobs = None;
    let mut completion_tokens = 0;
    for (seq, c) in generation.sequences().iter().zip(&collected) {
        completion_tokens += seq.num_generated();
        let m = ctx.output.message(&seq.proc.text);
        let content = match (&ctx.echo_prefix, m.content) {
            (Some(prefix), c) => Some(format!("{prefix}{}", c.unwrap_or_default())),
            (None, c) => c,
        };
        let mut message = ChatMessage::new(&ctx.role, content);
        message.reasoning = m.reasoning;
        message.tool_calls = m.tool_calls.iter().map(ToolCall::to_json).collect();
        if prompt_logprobs.is_none() {
            prompt_logprobs = c.prompt_logprobs.as_ref().map(|p| prompt_logprobs_json(p, &mut namer));
        }
        choices.push(ChatChoice {
            index: seq.spec.choice,
            logprobs: ctx.logprobs.map(|k| chat_logprobs(&seq.proc.token_ids, &c.logprobs, k, &mut namer)),
            finish_reason: ctx
                .output
                .finish_reason(!message.tool_calls.is_empty(), finish_str(seq.proc.finish_reason())),
            message,
            stop_reason: seq.proc.stop_reason().map(StopReasonJson::from),
            token_ids: ctx.return_token_ids.then(|| seq.proc.token_ids.clone()),
        });
    }
    let mut usage = Usage::new(ctx.prompt_ids.len(), completion_tokens);
    if ctx.prompt_details {
        let cached = generation.sequences().first().map_or(0, |s| s.num_cached_tokens);
        usage.prompt_tokens_details = Some(PromptTokensDetails { cached_tokens: cached });
    }
    let response = ChatResponse {
        id: ctx.id.clone(),
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model_name.clone(),
        choices,
        service_tier: None,
        system_fingerprint: None,
        usage,
        prompt_logprobs,
        prompt_token_ids: ctx.return_token_ids.then(|| ctx.prompt_ids.clone()),
        prompt_text: ctx.prompt_text.clone(),
    };
    Ok(Json(response).into_response())
}

struct Streamer {
    ctx: Ctx,
    generation: Generation,
    first: bool,
    num_tokens: Vec<usize>,
    cached_tokens: Option<usize>,
    done: bool,
    /// Each choice's reasoning / tool-call split.
    choices: Vec<ChoiceStream>,
}

fn stream_events(ctx: Ctx, generation: Generation) -> impl futures_util::Stream<Item = String> + Send + 'static {
    let n = generation.sequences().len();
    let choices = (0..n).map(|_| ctx.output.stream()).collect();
    let st =
        Streamer { ctx, generation, first: true, num_tokens: vec![0; n], cached_tokens: None, done: false, choices };
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
    fn chunk(&self, choice: ChatStreamChoice, usage: Option<Usage>) -> ChatStreamResponse {
        ChatStreamResponse {
            id: self.ctx.id.clone(),
            object: "chat.completion.chunk",
            created: self.ctx.created,
            model: self.ctx.model_name.clone(),
            choices: vec![choice],
            usage,
            prompt_token_ids: None,
            prompt_text: None,
        }
    }

    fn data(chunk: &ChatStreamResponse) -> String {
        sse::data(&serde_json::to_string(chunk).expect("chunk JSON"))
    }

    fn prompt_usage(&self) -> Option<Usage> {
        self.ctx.continuous_usage.then(|| Usage::new(self.ctx.prompt_ids.len(), 0))
    }

    /// The opening chunks: the role of every choice, then the echoed last message.
    fn opening(&self) -> Vec<String> {
        let n = self.num_tokens.len();
        let mut out = Vec::new();
        for i in 0..n {
            let choice = ChatStreamChoice {
                index: i,
                delta: Delta { role: Some(self.ctx.role.clone()), content: Some(String::new()), ..Default::default() },
                logprobs: None,
                finish_reason: None,
                stop_reason: None,
                token_ids: None,
            };
            let mut c = self.chunk(choice, self.prompt_usage());
            if self.ctx.return_token_ids {
                c.prompt_token_ids = Some(self.ctx.prompt_ids.clone());
            }
            c.prompt_text = self.ctx.prompt_text.clone();
            out.push(Self::data(&c));
        }
        if let Some(prefix) = &self.ctx.echo_prefix {
            for i in 0..n {
                let choice = ChatStreamChoice {
                    index: i,
                    delta: Delta { content: Some(prefix.clone()), ..Default::default() },
                    logprobs: None,
                    finish_reason: None,
                    stop_reason: None,
                    token_ids: None,
                };
                out.push(Self::data(&self.chunk(choice, self.prompt_usage())));
            }
        }
        out
    }

    async fn step(&mut self) -> Vec<String> {
        match self.generation.next().await {
            Some(Event::Output { seq, delta }) => {
                let mut out = if std::mem::take(&mut self.first) { self.opening() } else { Vec::new() };
                if self.cached_tokens.is_none() {
                    self.cached_tokens = Some(delta.num_cached_tokens);
                }
                out.extend(self.delta_chunks(seq, delta));
                out
            }
            Some(Event::Failed(e)) => {
                self.done = true;
                vec![sse::data(&e.to_json()), sse::DONE.to_string()]
            }
            None => {
                self.done = true;
                let mut out = Vec::new();
                if self.ctx.include_usage {
                    let mut usage = Usage::new(self.ctx.prompt_ids.len(), self.num_tokens.iter().sum());
                    if self.ctx.prompt_details {
                        usage.prompt_tokens_details =
                            Some(PromptTokensDetails { cached_tokens: self.cached_tokens.unwrap_or(0) });
                    }
                    let chunk = ChatStreamResponse {
                        id: self.ctx.id.clone(),
                        object: "chat.completion.chunk",
                        created: self.ctx.created,
                        model: self.ctx.model_name.clone(),
                        choices: Vec::new(),
                        usage: Some(usage),
                        prompt_token_ids: None,
                        prompt_text: None,
                    };
                    out.push(Self::data(&chunk));
                }
                out.push(sse::DONE.to_string());
                out
            }
        }
    }

    /// A sequence's new output as chunks: its text (reasoning and content), then each tool-call
    /// delta in a chunk of its own; the last chunk carries the logprobs, token ids and finish.
    fn delta_chunks(&mut self, seq_index: usize, delta: OutputDelta) -> Vec<String> {
        let i = self.generation.sequences()[seq_index].spec.choice;
        let finished = delta.finish_reason.is_some();
        let parts = self.choices[i].push(&delta.text, finished);
        let nothing = parts.content.is_empty() && parts.reasoning.is_empty() && parts.tool_calls.is_empty();
        let held = nothing && self.choices[i].shapes();
        if !finished && (held || (delta.text.is_empty() && delta.token_ids.is_empty() && self.num_tokens[i] == 0)) {
            self.num_tokens[i] += delta.token_ids.len();
            return Vec::new();
        }
        let logprobs = self.ctx.logprobs.map(|k| {
            let mut namer = TokenNamer::new(&self.ctx.model.tokenizer, self.ctx.tokens_as_ids);
            chat_logprobs(&delta.token_ids, &delta.logprobs, k, &mut namer)
        });
        self.num_tokens[i] += delta.token_ids.len();
        let mut deltas = Vec::new();
        let has_text = !parts.content.is_empty() || !parts.reasoning.is_empty();
        if has_text || parts.tool_calls.is_empty() {
            deltas.push(Delta {
                content: (!parts.content.is_empty() || parts.reasoning.is_empty()).then_some(parts.content),
                reasoning: (!parts.reasoning.is_empty()).then_some(parts.reasoning),
                ..Default::default()
            });
        }
        deltas
            .extend(parts.tool_calls.into_iter().map(|tc| Delta { tool_calls: Some(vec![tc]), ..Default::default() }));
        let last = deltas.len() - 1;
        let finish = self.ctx.output.finish_reason(self.choices[i].called(), finish_str(delta.finish_reason));
        let (mut logprobs, mut token_ids) = (logprobs, self.ctx.return_token_ids.then_some(delta.token_ids));
        let stop_reason = finished.then(|| delta.stop_reason.as_ref().map(StopReasonJson::from));
        let usage = self.ctx.continuous_usage.then(|| Usage::new(self.ctx.prompt_ids.len(), self.num_tokens[i]));
        let mut out = Vec::with_capacity(deltas.len());
        for (j, d) in deltas.into_iter().enumerate() {
            let is_last = j == last;
            let choice = ChatStreamChoice {
                index: i,
                delta: d,
                logprobs: if is_last { logprobs.take() } else { None },
                finish_reason: if is_last { finish } else { None },
                stop_reason: if is_last { stop_reason.clone() } else { None },
                token_ids: if is_last { token_ids.take() } else { None },
            };
            out.push(Self::data(&self.chunk(choice, usage.clone())));
        }
        out
    }
}
