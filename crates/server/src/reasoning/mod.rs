//! Reasoning parsers (`--reasoning-parser`): split a model's thinking (`<think>...</think>`,
//! or gpt-oss's `analysis` channel, see [`crate::harmony`]) from its answer. The thinking goes to `message.reasoning` / `delta.reasoning` (vLLM's field
//! name), the rest to `content`; tool parsing and structured output apply to the answer only.

mod granite;

use crate::errors::{ApiError, ApiResult};
use serde::Deserialize;
use serde_json::Value;
use vllm_rs_engine::ThinkingBudget;
use vllm_rs_frontend::Tokenizer;

const START: &str = "<think>";
const END: &str = "</think>";

/// The parsers this server has, by vLLM's names.
pub const NAMES: &[&str] = &["qwen3", "deepseek_r1", "granite", "openai_gptoss", "gpt_oss"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningParser {
    /// Qwen3: thinking only when the output opens `<think>` (or the prompt left one open); with
    /// `enable_thinking: false` the template closes an empty block and the output is all answer.
    Qwen3,
    /// DeepSeek-R1: the output is thinking until `</think>` (the template opens the block).
    DeepSeekR1,
    /// IBM Granite 3.2: plain-text markers (see [`granite`]); no marker tokens, so a grammar
    /// applies from the output's start and there is no thinking budget.
    Granite,
    /// gpt-oss (`openai_gptoss`, alias `gpt_oss`): the `analysis` channel of its harmony
    /// messages; the content is its `final` and preamble messages (see [`crate::harmony`]).
    GptOss,
}

/// Token ids of the think markers, for the engine (structured output starts after the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkTokens {
    pub start: u32,
    pub end: u32,
}

impl ReasoningParser {
    /// The parser named `name` for `tokenizer`, with its think tokens, which a `<think>` parser
    /// needs as single tokens (vLLM refuses to start otherwise too).
    pub fn by_name(name: &str, tokenizer: &Tokenizer) -> Result<(Self, Option<ThinkTokens>), String> {
        let parser = match name {
            "qwen3" => ReasoningParser::Qwen3,
            "deepseek_r1" => ReasoningParser::DeepSeekR1,
            "granite" => return Ok((ReasoningParser::Granite, None)),
            // Harmony ends its thinking with a header, not one token: no think tokens.
            "openai_gptoss" | "gpt_oss" => {
                crate::tool_parsers::check_tokenizer(crate::tool_parsers::HARMONY, |t| {
                    tokenizer.token_to_id(t).is_some()
                })
                .map_err(|e| format!("reasoning parser {name:?}: {e}"))?;
                return Ok((ReasoningParser::GptOss, None));
            }
            "deepseek_v3" | "glm45" | "hunyuan_a13b" | "mistral" | "step3" | "ernie45" | "olmo3" | "minimax_m2"
            | "seed_oss" | "kimi_k2" => {
                return Err(format!(
                    "reasoning parser {name:?} is not implemented yet; available: {}",
                    NAMES.join(", ")
                ));
            }
            _ => return Err(format!("unknown reasoning parser {name:?}; available: {}", NAMES.join(", "))),
        };
        let id = |t: &str| {
            tokenizer.token_to_id(t).ok_or_else(|| {
                format!("reasoning parser {name:?}: the tokenizer has no {t} token (is this a reasoning model?)")
            })
        };
        Ok((parser, Some(ThinkTokens { start: id(START)?, end: id(END)? })))
    }

    /// Whether the output starts inside a thinking block: for DeepSeek-R1 unless the prompt
    /// closed it; for Qwen3 when the prompt ends with an open block.
    pub fn starts_thinking(self, prompt: &[u32], t: Option<ThinkTokens>) -> bool {
        match (self, t) {
            (ReasoningParser::DeepSeekR1, Some(t)) => !reasoning_ended(prompt, t),
            (ReasoningParser::Qwen3, Some(t)) => {
                let last_start = prompt.iter().rposition(|&x| x == t.start);
                last_start.is_some_and(|s| !prompt[s..].contains(&t.end))
            }
            _ => false,
        }
    }

    /// A streamed choice's split.
    pub fn stream(self, thinking_at_start: bool) -> ReasoningStream {
        match self {
            ReasoningParser::Granite => ReasoningStream::Granite(granite::GraniteStream::new()),
            ReasoningParser::GptOss => ReasoningStream::Harmony(Box::default()),
            _ => ReasoningStream::Think(ThinkStream::new(thinking_at_start)),
        }
    }

    /// Splits a finished output into (reasoning, content).
    pub fn split(self, text: &str, thinking_at_start: bool) -> (Option<String>, Option<String>) {
        match self {
            ReasoningParser::Granite => return granite::split(text),
            ReasoningParser::GptOss => {
                let p = crate::harmony::parse(text);
                return (p.reasoning, p.content);
            }
            _ => {}
        }
        let trimmed = text.trim_start();
        let (opened, body) = match trimmed.strip_prefix(START) {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if !opened && !thinking_at_start {
            return (None, Some(text.to_string()));
        }
        match body.split_once(END) {
            Some((r, c)) => (Some(r.to_string()), (!c.is_empty()).then(|| c.to_string())),
            None => (Some(body.to_string()), None),
        }
    }
}

/// Whether the prompt already closed its thinking (the last end marker after the last start).
pub fn reasoning_ended(prompt: &[u32], t: ThinkTokens) -> bool {
    match (prompt.iter().rposition(|&x| x == t.start), prompt.iter().rposition(|&x| x == t.end)) {
        (Some(s), Some(e)) => e > s,
        (None, Some(_)) => true,
        _ => false,
    }
}

/// The request fields that shape the reasoning itself.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ReasoningFields {
    pub thinking_token_budget: Option<Value>,
}

impl ReasoningFields {
    /// `thinking_token_budget` as vLLM takes it (a non-negative integer; -1 or null: none), for
    /// a model whose reasoning markers are `think` and whose prompt is `prompt`. Without a
    /// reasoning parser there is no end of thinking to force: a 400 rather than ignoring it.
    pub fn budget(&self, think: Option<ThinkTokens>, prompt: &[u32]) -> ApiResult<Option<ThinkingBudget>> {
        const P: &str = "thinking_token_budget";
        let budget = match &self.thinking_token_budget {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) if n.as_i64() == Some(-1) => return Ok(None),
            Some(Value::Number(n)) if n.is_u64() => n.as_u64().unwrap_or_default() as usize,
            Some(_) => {
                return Err(ApiError::invalid(
                    P,
                    "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
                ));
            }
        };
        let Some(t) = think else {
            return Err(ApiError::invalid(
                P,
                "`thinking_token_budget` needs a reasoning model with think tokens: start the server with \
                 --reasoning-parser qwen3 or deepseek_r1.",
            ));
        };
        let last_start = prompt.iter().rposition(|&x| x == t.start);
        let in_think = !reasoning_ended(prompt, t) && last_start.is_some();
        let counted = match last_start {
            Some(s) if in_think => prompt.len() - (s + 1),
            _ => 0,
        };
        Ok(Some(ThinkingBudget { budget, start: t.start, end: t.end, in_think, counted }))
    }
}

/// One streamed choice's split.
pub enum ReasoningStream {
    Think(ThinkStream),
    Granite(granite::GraniteStream),
    Harmony(Box<crate::harmony::Stream>),
}

impl ReasoningStream {
    /// The next piece of text, split; `finished` on the last.
    pub fn push(&mut self, piece: &str, finished: bool) -> SplitDelta {
        match self {
            ReasoningStream::Think(s) => s.push(piece, finished),
            ReasoningStream::Granite(s) => s.push(piece, finished),
            ReasoningStream::Harmony(s) => {
                let step = s.push(piece, finished);
                (step.reasoning, step.content)
            }
        }
    }
}

/// One streamed choice's split at `<think>` markers.
pub struct ThinkStream {
    text: String,
    /// Decided: `Some(true)` thinking, `Some(false)` answer only; `None` until the first
    /// non-whitespace text shows whether `<think>` opens it.
    thinking: Option<bool>,
    at_start: bool,
    /// Bytes of `text` already sent.
    sent: usize,
    ended: bool,
}

/// (reasoning, content) of one step.
pub type SplitDelta = (String, String);

impl ThinkStream {
    pub fn new(thinking_at_start: bool) -> Self {
        ThinkStream {
            text: String::new(),
            thinking: thinking_at_start.then_some(true),
            at_start: thinking_at_start,
            sent: 0,
            ended: false,
        }
    }

    /// The next piece of text, split; the same split as [`ReasoningParser::split`] of the whole
    /// (either parser: they differ only in where thinking starts, given to [`Self::new`]).
    pub fn push(&mut self, piece: &str, finished: bool) -> SplitDelta {
        self.text.push_str(piece);
        if self.thinking.is_none() {
            let t = self.text.trim_start();
            if t.starts_with(START) {
                self.thinking = Some(true);
                self.sent = self.text.len() - t.len() + START.len();
            } else if !finished && START.starts_with(t) {
                return (String::new(), String::new()); // maybe `<think>` still to come
            } else {
                self.thinking = Some(false);
            }
        } else if self.at_start && self.sent == 0 {
            // DeepSeek-R1 style: the output may still repeat the opening marker.
            let t = self.text.trim_start();
            if t.starts_with(START) {
                self.sent = self.text.len() - t.len() + START.len();
            } else if !finished && START.starts_with(t) && !t.is_empty() {
                return (String::new(), String::new());
            }
        }
        if self.thinking == Some(false) || self.ended {
            let c = self.text[self.sent..].to_string();
            self.sent = self.text.len();
            return (String::new(), c);
        }
        let unsent = &self.text[self.sent..];
        if let Some(i) = unsent.find(END) {
            let r = unsent[..i].to_string();
            let c = unsent[i + END.len()..].to_string();
            self.ended = true;
            self.sent = self.text.len();
            return (r, c);
        }
        // Hold back what may be the start of `</think>`.
        let held = if finished { 0 } else { crate::tool_parsers::partial_marker_len(unsent, END) };
        let end = self.text.len() - held;
        let r = self.text[self.sent..end].to_string();
        self.sent = end;
        (r, String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: ThinkTokens = ThinkTokens { start: 1, end: 2 };

    #[test]
    fn split_follows_the_markers() {
        let q = ReasoningParser::Qwen3;
        assert_eq!(
            q.split("<think>\nhmm\n</think>\n\nParis.", false),
            (Some("\nhmm\n".into()), Some("\n\nParis.".into()))
        );
        assert_eq!(q.split("Paris.", false), (None, Some("Paris.".into())));
        assert_eq!(q.split("hmm</think>Paris.", true), (Some("hmm".into()), Some("Paris.".into())));
        assert_eq!(q.split("<think>still thinking", false), (Some("still thinking".into()), None));
        let r1 = ReasoningParser::DeepSeekR1;
        assert_eq!(r1.split("a</think>b", true), (Some("a".into()), Some("b".into())));
        assert_eq!(r1.split("<think>a", true), (Some("a".into()), None));
        // Prompts: an open block starts the output thinking; a closed one (enable_thinking false) not.
        assert!(q.starts_thinking(&[5, 1, 6], Some(T)));
        assert!(!q.starts_thinking(&[5, 1, 2, 6], Some(T)));
        assert!(!q.starts_thinking(&[5, 6], Some(T)));
        assert!(r1.starts_thinking(&[5, 6], Some(T)));
        assert!(!ReasoningParser::Granite.starts_thinking(&[5, 1, 6], None));
        assert!(reasoning_ended(&[1, 9, 2], T) && !reasoning_ended(&[2, 1], T));
    }

    #[test]
    fn thinking_budgets_are_read_as_vllm_validates_them() {
        let f = |v: Value| ReasoningFields { thinking_token_budget: Some(v) };
        assert_eq!(f(Value::Null).budget(Some(T), &[]).unwrap(), None);
        assert_eq!(f((-1).into()).budget(Some(T), &[]).unwrap(), None);
        let b = f(8.into()).budget(Some(T), &[5, 1, 6, 7]).unwrap().unwrap();
        assert_eq!(
            (b.budget, b.start, b.end, b.in_think, b.counted),
            (8, 1, 2, true, 2),
            "two prompt tokens after <think>"
        );
        let b = f(0.into()).budget(Some(T), &[5, 1, 2, 6]).unwrap().unwrap();
        assert_eq!((b.in_think, b.counted), (false, 0), "the prompt closed its block");
        for bad in [Value::from(-2), Value::from(1.5), Value::from(true), Value::from("3")] {
            let e = f(bad.clone()).budget(Some(T), &[]).unwrap_err();
            assert_eq!((e.status.as_u16(), e.param.as_deref()), (400, Some("thinking_token_budget")), "{bad}");
        }
        let e = f(4.into()).budget(None, &[]).unwrap_err();
        assert!(e.message.contains("--reasoning-parser"), "{}", e.message);
    }

    #[test]
    fn streaming_split_anywhere_matches_the_whole_split() {
        for (parser, at_start, text) in [
            (ReasoningParser::Qwen3, false, "<think>\nLet me think é.\n</think>\n\nThe answer is 4."),
            (ReasoningParser::Qwen3, false, "The answer is 4 <thin"),
            (ReasoningParser::Qwen3, true, "so</think>done"),
            (ReasoningParser::DeepSeekR1, true, "<think>x</thi"),
            (ReasoningParser::DeepSeekR1, true, "plain reasoning</think>"),
        ] {
            let (want_r, want_c) = parser.split(text, at_start);
            let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            for &at in &bounds {
                let mut s = ThinkStream::new(at_start);
                let (r1, c1) = s.push(&text[..at], false);
                let (r2, c2) = s.push(&text[at..], true);
                assert_eq!(r1 + &r2, want_r.clone().unwrap_or_default(), "{text:?} split at {at}");
                assert_eq!(c1 + &c2, want_c.clone().unwrap_or_default(), "{text:?} split at {at}");
            }
        }
    }
}
