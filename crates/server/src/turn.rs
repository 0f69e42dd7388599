//! One assistant turn generated over the chat path, for the APIs that reshape chat's output
//! (`/v1/responses`, `/v1/messages`), as vLLM serves them: the API's request is translated into a
//! chat completion body, which is checked, rendered, sampled and parsed (reasoning, tool calls)
//! exactly as `/v1/chat/completions` does it; its one choice comes back whole ([`Turn::finish`])
//! or as a stream of content blocks ([`Turn::next`]): reasoning, text and tool calls, each opened,
//! filled and closed in the order the model wrote them.

use crate::chat_output::{ChoiceStream, DeltaParts, Message};
use crate::errors::{ApiError, ApiResult};
use crate::generation::{Event, Generation};
use crate::json_body::{RawObject, typed};
use crate::protocol::chat::ChatRequest;
use crate::protocol::sampling_fields::SamplingFields;
use crate::reasoning::ThinkTokens;
use crate::routes::chat::{self, Ctx};
use crate::routes::finish_str;
use crate::state::{AppState, ModelContext};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use vllm_rs_frontend::StopReason;

/// A chat body prepared (on the blocking pool) and ready to run.
pub struct Prepared {
    ctx: Ctx,
    specs: Vec<crate::generation::SequenceSpec>,
    pub stream: bool,
}

/// Runs `f` on `chat_body` as the chat route reads its bodies.
fn with_chat_body<T>(chat_body: &Value, f: impl FnOnce(&RawObject) -> ApiResult<T>) -> ApiResult<T> {
    let bytes = serde_json::to_vec(chat_body).map_err(|e| ApiError::internal(e.to_string()))?;
    f(&RawObject::parse(&bytes)?)
}

/// Prepares `chat_body` (a `/v1/chat/completions` request with one choice) as the chat route does.
pub fn prepare(state: &AppState, model: Arc<ModelContext>, chat_body: &Value) -> ApiResult<Prepared> {
    with_chat_body(chat_body, |obj| {
        let (ctx, specs, stream, n) = chat::prepare(state, model, obj)?;
        debug_assert_eq!(n, 1, "the translated body asks for one choice");
        Ok(Prepared { ctx, specs, stream })
    })
}

/// The prompt tokens of `chat_body`'s conversation, rendered as the chat route renders it.
pub fn count_prompt_tokens(state: &AppState, model: &ModelContext, chat_body: &Value) -> ApiResult<usize> {
    with_chat_body(chat_body, |obj| {
        let f: SamplingFields = typed(obj)?;
        state.check_model(f.model.as_deref())?;
        let req: ChatRequest = typed(obj)?;
        let messages = req.messages.as_deref().unwrap_or_default();
        Ok(chat::render(&req, messages, &f, state, model)?.0.prompt.ids.len())
    })
}

/// A chat error about field `chat` as the client's API names it (`api`): Responses'
/// `max_output_tokens` is chat's `max_tokens`, Anthropic's `stop_sequences` chat's `stop`.
pub fn renamed(mut e: ApiError, chat: &str, api: &str) -> ApiError {
    let body_path = format!("body.{chat}");
    if let Some(p) = e.param.as_deref().filter(|&p| p == chat || p == body_path) {
        e.param = Some(p.replacen(chat, api, 1));
        e.message = e.message.replace(chat, api);
    }
    e
}

/// Token counts of a turn.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TurnUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    /// Generated tokens inside thinking blocks (`--reasoning-parser`; the markers not counted).
    pub reasoning_tokens: usize,
}

/// Counts generated tokens inside thinking blocks, delta by delta, by the marker token ids.
#[derive(Clone, Copy, Debug)]
struct ReasoningCounter {
    think: Option<ThinkTokens>,
    inside: bool,
}

impl ReasoningCounter {
    fn new(ctx: &Ctx) -> Self {
        // Parsers that mark thinking in plain text (granite) have no marker ids: nothing is counted.
        let think = ctx.model.reasoning.and_then(|(_, t)| t);
        let inside = ctx.output.reasoning.is_some_and(|(_, at_start)| at_start);
        ReasoningCounter { think, inside }
    }

    fn count(&mut self, ids: &[u32]) -> usize {
        let Some(t) = self.think else { return 0 };
        let mut n = 0;
        for &id in ids {
            if id == t.start {
                self.inside = true;
            } else if id == t.end {
                self.inside = false;
            } else if self.inside {
                n += 1;
            }
        }
        n
    }
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    /// Chat's finish reason: `stop`, `length`, `tool_calls`, `abort`...
    pub finish_reason: Option<&'static str>,
    /// The stop string that ended it, if one did.
    pub stop_sequence: Option<String>,
    pub usage: TurnUsage,
}

/// A whole turn.
pub struct Finished {
    pub message: Message,
    pub ending: Ending,
}

/// What kind of content a block holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Reasoning,
    Text,
    Call { id: String, name: String },
}

/// One step of a streamed turn.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEvent {
    Start(Block),
    Delta(String),
    /// The block closes with its whole text (a call's arguments).
    Stop(Block, String),
    Done(Ending),
    Failed(ApiError),
}

/// How an API writes a streamed turn: its opening events, then each turn event's.
pub trait StreamWriter: Send + 'static {
    fn opening(&mut self, turn: &Turn) -> String;
    fn event(&mut self, event: TurnEvent, turn: &Turn) -> String;
}

/// The SSE body of a streamed turn, as `writer` words it; it ends after `Done` or `Failed`.
pub fn sse_events<W: StreamWriter>(turn: Turn, writer: W) -> impl futures_util::Stream<Item = String> + Send + 'static {
    futures_util::stream::unfold((turn, writer, true), |(mut turn, mut writer, first)| async move {
        let mut out = if first { writer.opening(&turn) } else { String::new() };
        let event = turn.next().await?;
        out += &writer.event(event, &turn);
        Some((out, (turn, writer, false)))
    })
}

/// A running turn.
pub struct Turn {
    ctx: Ctx,
    generation: Generation,
    choice: ChoiceStream,
    reasoning: ReasoningCounter,
    blocks: Blocks,
    usage: TurnUsage,
    pending: VecDeque<TurnEvent>,
    /// Set once the sequence has finished (the last blocks' `Stop` events may still be pending).
    ending: Option<Ending>,
}

impl Prepared {
    /// `<prefix><the chat id's random part>` (`resp_…`, `msg_…`).
    pub fn id_with_prefix(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.ctx.id.strip_prefix("chatcmpl-").unwrap_or(&self.ctx.id))
    }

    /// Submits the sequence to the engine.
    pub fn start(self, arrival: Instant) -> ApiResult<Turn> {
        let generation = Generation::start(self.ctx.model.clone(), &self.ctx.id, self.specs, arrival)?;
        let usage = TurnUsage { prompt_tokens: self.ctx.prompt_ids.len(), ..Default::default() };
        let choice = self.ctx.output.stream();
        Ok(Turn {
            reasoning: ReasoningCounter::new(&self.ctx),
            ctx: self.ctx,
            generation,
            choice,
            blocks: Blocks::default(),
            usage,
            pending: VecDeque::new(),
            ending: None,
        })
    }
}

fn stop_sequence(r: Option<&StopReason>) -> Option<String> {
    match r {
        Some(StopReason::Text(s)) => Some(s.clone()),
        _ => None,
    }
}

impl Turn {
    pub fn prompt_tokens(&self) -> usize {
        self.usage.prompt_tokens
    }

    /// How the turn ended, once it has (with the last blocks' `Stop` events, before `Done`).
    pub fn ending(&self) -> Option<&Ending> {
        self.ending.as_ref()
    }

    /// Runs the turn to its end.
    pub async fn finish(mut self) -> ApiResult<Finished> {
        self.generation.collect().await?;
        let seq = &self.generation.sequences()[0];
        let message = self.ctx.output.message(&seq.proc.text);
        let engine = finish_str(seq.proc.finish_reason());
        let ending = Ending {
            finish_reason: self.ctx.output.finish_reason(!message.tool_calls.is_empty(), engine),
            stop_sequence: stop_sequence(seq.proc.stop_reason()),
            usage: TurnUsage {
                completion_tokens: seq.num_generated(),
                cached_tokens: seq.num_cached_tokens,
                reasoning_tokens: self.reasoning.count(&seq.proc.token_ids),
                ..self.usage
            },
        };
        Ok(Finished { message, ending })
    }

    /// The next block event; `None` after `Done` or `Failed`.
    pub async fn next(&mut self) -> Option<TurnEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.ending.is_some() {
                return None;
            }
            match self.generation.next().await {
                Some(Event::Output { delta, .. }) => {
                    if self.usage.completion_tokens == 0 {
                        self.usage.cached_tokens = delta.num_cached_tokens;
                    }
                    self.usage.completion_tokens += delta.token_ids.len();
                    self.usage.reasoning_tokens += self.reasoning.count(&delta.token_ids);
                    let finished = delta.finish_reason.is_some();
                    let parts = self.choice.push(&delta.text, finished);
                    self.pending.extend(self.blocks.push(parts));
                    if finished {
                        self.pending.extend(self.blocks.close());
                        let engine = finish_str(delta.finish_reason);
                        let ending = Ending {
                            finish_reason: self.ctx.output.finish_reason(self.choice.called(), engine),
                            stop_sequence: stop_sequence(delta.stop_reason.as_ref()),
                            usage: self.usage,
                        };
                        self.pending.push_back(TurnEvent::Done(ending.clone()));
                        self.ending = Some(ending);
                    }
                }
                Some(Event::Failed(e)) => {
                    self.ending = Some(Ending { finish_reason: Some("abort"), stop_sequence: None, usage: self.usage });
                    return Some(TurnEvent::Failed(e));
                }
                None => {
                    // Every sequence ends with a finish reason; this is the engine going away.
                    self.ending = Some(Ending { finish_reason: Some("abort"), stop_sequence: None, usage: self.usage });
                    return Some(TurnEvent::Failed(ApiError::shutting_down()));
                }
            }
        }
    }
}

/// The open block and what it holds so far.
#[derive(Default)]
struct Blocks {
    open: Option<(Block, String)>,
}

impl Blocks {
    /// Events for a step's parts: reasoning, then content, then tool-call deltas (chat's order).
    fn push(&mut self, parts: DeltaParts) -> Vec<TurnEvent> {
        let mut out = Vec::new();
        self.text(Block::Reasoning, parts.reasoning, &mut out);
        self.text(Block::Text, parts.content, &mut out);
        for tc in parts.tool_calls {
            let f = tc.get("function");
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            if let (Some(id), Some(name)) = (tc.get("id").and_then(Value::as_str), name) {
                out.extend(self.close());
                let block = Block::Call { id: id.to_string(), name: name.to_string() };
                out.push(TurnEvent::Start(block.clone()));
                self.open = Some((block, String::new()));
            }
            let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or("");
            if let Some((Block::Call { .. }, text)) = &mut self.open
                && !args.is_empty()
            {
                text.push_str(args);
                out.push(TurnEvent::Delta(args.to_string()));
            }
        }
        out
    }

    fn text(&mut self, kind: Block, text: String, out: &mut Vec<TurnEvent>) {
        if text.is_empty() {
            return;
        }
        if self.open.as_ref().is_none_or(|(b, _)| *b != kind) {
            out.extend(self.close());
            out.push(TurnEvent::Start(kind.clone()));
            self.open = Some((kind, String::new()));
        }
        if let Some((_, all)) = &mut self.open {
            all.push_str(&text);
        }
        out.push(TurnEvent::Delta(text));
    }

    fn close(&mut self) -> Option<TurnEvent> {
        self.open.take().map(|(b, text)| TurnEvent::Stop(b, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_clients_field() {
        let e = renamed(
            ApiError::invalid("max_tokens", "max_tokens must be at least 1, got 0."),
            "max_tokens",
            "max_output_tokens",
        );
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some("max_output_tokens"), "max_output_tokens must be at least 1, got 0.")
        );
        let e = renamed(ApiError::schema("stop", "stop: too many"), "stop", "stop_sequences");
        assert_eq!(e.param.as_deref(), Some("body.stop_sequences"));
        let e = renamed(ApiError::invalid("temperature", "stop"), "stop", "stop_sequences");
        assert_eq!((e.param.as_deref(), e.message.as_str()), (Some("temperature"), "stop"));
    }

    #[test]
    fn blocks_open_and_close_in_the_order_written() {
        let mut b = Blocks::default();
        let mut ev = b.push(DeltaParts { reasoning: "hm".into(), content: "Hi".into(), tool_calls: vec![] });
        ev.extend(b.push(DeltaParts { content: "!".into(), ..Default::default() }));
        ev.extend(b.push(DeltaParts {
            tool_calls: vec![
                json!({"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}),
                json!({"index": 0, "function": {"arguments": "{\"a\""}}),
                json!({"index": 0, "function": {"arguments": ": 1}"}}),
            ],
            ..Default::default()
        }));
        ev.extend(b.close());
        let call = Block::Call { id: "c1".into(), name: "f".into() };
        assert_eq!(
            ev,
            vec![
                TurnEvent::Start(Block::Reasoning),
                TurnEvent::Delta("hm".into()),
                TurnEvent::Stop(Block::Reasoning, "hm".into()),
                TurnEvent::Start(Block::Text),
                TurnEvent::Delta("Hi".into()),
                TurnEvent::Delta("!".into()),
                TurnEvent::Stop(Block::Text, "Hi!".into()),
                TurnEvent::Start(call.clone()),
                TurnEvent::Delta("{\"a\"".into()),
                TurnEvent::Delta(": 1}".into()),
                TurnEvent::Stop(call, "{\"a\": 1}".into()),
            ]
        );
    }

    #[test]
    fn reasoning_tokens_are_those_between_the_markers() {
        let think = Some(ThinkTokens { start: 1, end: 2 });
        let mut c = ReasoningCounter { think, inside: false };
        assert_eq!(c.count(&[5, 1, 7, 8]) + c.count(&[9, 2, 6, 1, 3]), 4);
        let mut opened_by_prompt = ReasoningCounter { think, inside: true };
        assert_eq!(opened_by_prompt.count(&[7, 8, 2, 9]), 2);
        assert_eq!(ReasoningCounter { think: None, inside: true }.count(&[7, 8]), 0, "no reasoning parser");
    }

    /// Chat's stream of a reasoning model that calls a tool, cut at every place, gives the same
    /// blocks: thinking, text, the call (Qwen3 with hermes; gpt-oss's harmony messages).
    #[test]
    fn a_streamed_choice_becomes_the_same_blocks_wherever_it_is_cut() {
        use crate::chat_output::OutputPlan;
        use crate::reasoning::ReasoningParser;
        let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]);
        let plan = |reasoning, parser: &str| OutputPlan {
            reasoning: Some((reasoning, false)),
            include_reasoning: true,
            tools: crate::tools::parse(Some(&tools), Some(&json!("auto")), None, true).unwrap(),
            auto_parser: Some(parser.into()),
        };
        for (plan, text, args) in [
            (
                plan(ReasoningParser::Qwen3, "hermes"),
                "<think>need add</think>\n\nOk.<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
                "{\"a\": 1}",
            ),
            (
                plan(ReasoningParser::GptOss, "openai"),
                "<|channel|>analysis<|message|>need add<|end|><|start|>assistant<|channel|>commentary<|message|>\n\nOk.<|end|><|start|>assistant to=functions.add<|channel|>commentary json<|message|>{\"a\":1}<|call|>",
                "{\"a\":1}",
            ),
        ] {
            for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let (mut choice, mut blocks) = (plan.stream(), Blocks::default());
                let mut ev = blocks.push(choice.push(&text[..at], false));
                ev.extend(blocks.push(choice.push(&text[at..], true)));
                ev.extend(blocks.close());
                let stops: Vec<_> = ev
                    .iter()
                    .filter_map(|e| match e {
                        TurnEvent::Stop(Block::Call { name, .. }, t) => Some((format!("call {name}"), t.clone())),
                        TurnEvent::Stop(b, t) => Some((format!("{b:?}"), t.clone())),
                        _ => None,
                    })
                    .collect();
                let want = [("Reasoning", "need add"), ("Text", "\n\nOk."), ("call add", args)];
                assert_eq!(stops, want.map(|(a, b)| (a.to_string(), b.to_string())), "cut at {at} of {text:?}");
                let starts = ev.iter().filter(|e| matches!(e, TurnEvent::Start(_))).count();
                assert_eq!(starts, 3, "cut at {at}: {ev:?}");
            }
        }
    }

    #[test]
    fn a_named_call_starts_with_its_first_arguments() {
        let mut b = Blocks::default();
        let ev = b.push(DeltaParts {
            tool_calls: vec![
                json!({"index": 0, "id": "c", "type": "function", "function": {"name": "g", "arguments": "{"}}),
            ],
            ..Default::default()
        });
        let call = Block::Call { id: "c".into(), name: "g".into() };
        assert_eq!(ev, vec![TurnEvent::Start(call.clone()), TurnEvent::Delta("{".into())]);
        assert_eq!(b.close(), Some(TurnEvent::Stop(call, "{".into())));
    }
}
