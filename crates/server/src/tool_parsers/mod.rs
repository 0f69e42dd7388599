//! Tool parsers (`--tool-call-parser`): find the function calls a model wrote in its own format
//! in the generated text, for `tool_choice: "auto"`. One file per format, named as vLLM names
//! the parser. Streaming runs the same parser over the text so far: content streams until the
//! format's start marker; each call is sent as vLLM sends it, its id, type and name once, then
//! its arguments in fragments as they become final (`hermes`, `deepseek_v3`: the raw text as
//! it is written; `qwen3_coder`: each parameter once it is closed; `llama3_json`, `mistral`,
//! `granite`: `json.dumps` of the arguments as far as it is final; `pythonic`: each call,
//! whole, once it is closed). A stream's calls are the non-streaming response's
//! calls (`hermes`: the same JSON values in the model's own spacing; where vLLM's stream sends
//! a call the whole parse then rejects, so does this one).
//!
//! `openai` (gpt-oss) is not one of these: its calls are harmony messages, read together with
//! the reasoning and the content ([`crate::harmony`], chosen in [`crate::chat_output`]).

mod deepseek_v3;
mod granite;
mod hermes;
mod llama3_json;
mod mistral;
mod partial_json;
mod pythonic;
mod qwen3_coder;

use crate::tools::tool_call_id;
use serde_json::Value;

/// A function call as written by the model: its name and arguments JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// What a parser found in a whole text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extracted {
    /// The text outside the calls (`None`: none, or only whitespace before the calls).
    pub content: Option<String>,
    pub calls: Vec<ParsedCall>,
}

pub trait ToolParser: Send + Sync {
    /// Where the calls may begin (the first of these in the text): content before it is the
    /// model's text.
    fn start_markers(&self) -> &[&str];
    /// The calls in a finished output, and the content around them. No calls: the whole text
    /// is content (a malformed call stays text, as vLLM returns it).
    fn extract(&self, text: &str) -> Extracted;
    /// The calls begun in an unfinished output (streaming): each one's name, and as much of
    /// its arguments text as is final (later texts only extend it).
    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall>;
    /// All a stream has sent of the calls once its text is `text`. vLLM's streaming parsers
    /// end with what they have sent (the calls so far, even one the whole parse would refuse);
    /// a format whose last part is only known at the end (`qwen3_coder`) takes the whole parse.
    fn streamed_calls(&self, text: &str, _finished: bool) -> Vec<ParsedCall> {
        self.calls_so_far(text)
    }
    /// The id a streamed call gets (vLLM's parsers differ: most `chatcmpl-tool-<hex>`).
    fn stream_call_id(&self) -> String {
        tool_call_id()
    }
    /// Whether a streamed call's first delta carries the arguments known so far along with its
    /// name (vLLM's `qwen3_coder`), rather than the name alone.
    fn name_with_arguments(&self) -> bool {
        false
    }
}

/// The parsers this server has, by vLLM's names.
pub const NAMES: &[&str] =
    &["hermes", "llama3_json", "mistral", "pythonic", "qwen3_coder", "deepseek_v3", "granite", HARMONY];

/// gpt-oss's parser: its output is read as harmony messages, not by a [`ToolParser`].
pub const HARMONY: &str = "openai";

/// vLLM's parser names that are not implemented here (refused at start with a clear message).
const NOT_YET: &[&str] = &[
    "qwen3_xml",
    "deepseek_v31",
    "llama4_json",
    "llama4_pythonic",
    "granite-20b-fc",
    "internlm",
    "jamba",
    "xlam",
    "minimax",
    "kimi_k2",
    "glm45",
    "phi4_mini_json",
    "hunyuan_a13b",
    "step3",
    "seed_oss",
];

/// The parser named `name` for a request offering `tools` (some formats type the arguments by
/// the tools' schemas), or why there is none.
pub fn by_name(name: &str, tools: &[Value]) -> Result<Box<dyn ToolParser>, String> {
    Ok(match name {
        "hermes" => Box::new(hermes::Hermes),
        "llama3_json" => Box::new(llama3_json::Llama3Json),
        "mistral" => Box::new(mistral::Mistral),
        "pythonic" => Box::new(pythonic::Pythonic),
        "qwen3_coder" => Box::new(qwen3_coder::Qwen3Coder::new(tools)),
        "deepseek_v3" => Box::new(deepseek_v3::DeepSeekV3),
        "granite" => Box::new(granite::Granite),
        HARMONY => return Err(format!("the {HARMONY} tool call parser reads harmony messages, not plain text")),
        n if NOT_YET.contains(&n) => {
            return Err(format!("tool call parser {n:?} is not implemented yet; available: {}", NAMES.join(", ")));
        }
        n => return Err(format!("unknown tool call parser {n:?}; available: {}", NAMES.join(", "))),
    })
}

/// Checks a `--tool-call-parser` name: one of [`NAMES`].
pub fn check_name(name: &str) -> Result<(), String> {
    match name {
        HARMONY => Ok(()),
        n => by_name(n, &[]).map(|_| ()),
    }
}

/// Checks, at start-up, that the model's tokenizer has the tokens parser `name` needs (vLLM's
/// `qwen3_coder` and `deepseek_v3` refuse to start without their call markers as tokens).
pub fn check_tokenizer(name: &str, has_token: impl Fn(&str) -> bool) -> Result<(), String> {
    let needed: &[&str] = match name {
        "qwen3_coder" => &["<tool_call>", "</tool_call>"],
        "deepseek_v3" => &["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"],
        HARMONY => &["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>"],
        _ => &[],
    };
    match needed.iter().find(|t| !has_token(t)) {
        Some(t) => Err(format!("the {name} tool call parser needs the {t} token, which this model's tokenizer lacks")),
        None => Ok(()),
    }
}

/// A parsed call's arguments as vLLM writes them: `json.dumps` of the parsed object.
fn normalized_arguments(value: &serde_json::Value) -> String {
    crate::tools::dumps(value)
}

/// The text before byte `at` as content (`None` when empty, as vLLM's `content or None`).
fn content_before(text: &str, at: usize) -> Option<String> {
    (at > 0).then(|| text[..at].to_string())
}

/// A call object `{"name": .., <args_key>: {..}}` (arguments under the first of `args_keys`
/// present); `None` when it is not one.
fn call_from_object(v: &serde_json::Value, args_keys: &[&str]) -> Option<ParsedCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = args_keys.iter().find_map(|k| v.get(*k))?;
    Some(ParsedCall { name, arguments: normalized_arguments(args) })
}

/// JSON values one after another from the start of `text` (as Python's `raw_decode` in a loop),
/// with `separator` allowed between them; stops at the first thing that is not one.
fn json_values(text: &str, separator: char) -> Vec<serde_json::Value> {
    json_values_and_rest(text, separator).0
}

/// [`json_values`], and the text after the last one.
fn json_values_and_rest(text: &str, separator: char) -> (Vec<serde_json::Value>, &str) {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let mut it = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
        match it.next() {
            Some(Ok(v)) => {
                out.push(v);
                rest = rest[it.byte_offset()..].trim_start();
                rest = rest.strip_prefix(separator).unwrap_or(rest).trim_start();
            }
            _ => break,
        }
    }
    (out, rest)
}

/// The calls of a run of call objects separated by `separator` (streaming): each complete one,
/// then the unfinished one with the final part of its arguments (see [`partial_json`]).
fn json_calls_so_far(text: &str, separator: char, args_keys: &[&str]) -> Vec<ParsedCall> {
    let (values, rest) = json_values_and_rest(text, separator);
    let mut out = Vec::new();
    for v in &values {
        match call_from_object(v, args_keys) {
            Some(c) => out.push(c),
            // No arguments: its name was streamed all the same (as vLLM does), and it ends there.
            None => {
                let name = v.get("name").and_then(serde_json::Value::as_str);
                out.extend(name.map(|n| ParsedCall { name: n.to_string(), arguments: String::new() }));
                return out;
            }
        }
    }
    out.extend(partial_json::partial_call(rest, args_keys).map(|(name, arguments)| ParsedCall { name, arguments }));
    out
}

/// One streamed choice's tool-call state.
pub struct ToolStream {
    parser: Box<dyn ToolParser>,
    text: String,
    /// Bytes of `text` already sent as content.
    sent_content: usize,
    /// Content ended: the start marker was seen.
    in_calls: bool,
    /// The calls sent so far: the arguments text sent for each.
    sent: Vec<String>,
}

/// One tool-call delta: the call's index in the choice, its id and name the first time, and
/// the next piece of its arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallDelta {
    pub index: usize,
    /// `(id, name)`, in the call's first delta only.
    pub header: Option<(String, String)>,
    pub arguments: String,
}

/// What one step of a stream sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamDelta {
    pub content: String,
    /// Call deltas in order (each is a chunk of its own, as vLLM sends).
    pub calls: Vec<CallDelta>,
}

impl ToolStream {
    pub fn new(parser: Box<dyn ToolParser>) -> Self {
        ToolStream { parser, text: String::new(), sent_content: 0, in_calls: false, sent: Vec::new() }
    }

    /// Whether any call has been sent.
    pub fn called(&self) -> bool {
        !self.sent.is_empty()
    }

    /// Takes the next piece of text; `finished` on the last one.
    pub fn push(&mut self, piece: &str, finished: bool) -> StreamDelta {
        self.text.push_str(piece);
        let mut out = StreamDelta::default();
        let markers = self.parser.start_markers();
        if !self.in_calls {
            let unsent = &self.text[self.sent_content..];
            let end = match markers.iter().filter_map(|m| unsent.find(m)).min() {
                Some(i) => {
                    self.in_calls = true;
                    self.sent_content + i
                }
                // Hold back a tail that may be the start of a marker.
                None if !finished => {
                    let held = markers.iter().map(|m| partial_marker_len(&self.text, m)).max().unwrap_or(0);
                    self.text.len() - held
                }
                None => self.text.len(),
            };
            out.content = self.text[self.sent_content..end].to_string();
            self.sent_content = end;
        }
        if self.in_calls {
            let calls = self.parser.streamed_calls(&self.text, finished);
            for (index, call) in calls.into_iter().enumerate() {
                out.calls.extend(self.call_deltas(index, call));
            }
            // No call after all (malformed): what was held back is content, as vLLM returns it.
            if finished && self.sent.is_empty() {
                out.content.push_str(&self.text[self.sent_content..]);
                self.sent_content = self.text.len();
            }
        }
        out
    }

    /// What is new about call `index`: its header the first time, and the arguments beyond
    /// those sent (nothing when they no longer extend what was sent: sent text stays sent).
    fn call_deltas(&mut self, index: usize, call: ParsedCall) -> Vec<CallDelta> {
        let mut out = Vec::new();
        if index == self.sent.len() {
            let header = Some((self.parser.stream_call_id(), call.name));
            if self.parser.name_with_arguments() {
                out.push(CallDelta { index, header, arguments: call.arguments.clone() });
                self.sent.push(call.arguments);
                return out;
            }
            out.push(CallDelta { index, header, arguments: String::new() });
            self.sent.push(String::new());
        }
        let sent = &mut self.sent[index];
        let new = call.arguments.strip_prefix(sent.as_str()).filter(|n| !n.is_empty()).map(str::to_string);
        if let Some(arguments) = new {
            out.push(CallDelta { index, header: None, arguments });
            *sent = call.arguments;
        }
        out
    }
}

/// The longest suffix of `text` that is a proper prefix of `marker`.
pub(crate) fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
