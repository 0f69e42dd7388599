//! Tool parsers (`--tool-call-parser`): find the function calls a model wrote in its own format
//! in the generated text, for `tool_choice: "auto"`. One file per format, named as vLLM names
//! the parser. Streaming runs the same parser over the text so far: content streams until the
//! format's start marker, each call is sent once it is complete (name first, then its
//! arguments), so a stream's calls are the non-streaming response's calls.

mod hermes;
mod llama3_json;
mod mistral;
mod pythonic;

use crate::tools::ToolCall;

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
    /// The calls already complete in an unfinished output (streaming).
    fn complete_calls(&self, text: &str) -> Vec<ParsedCall>;
}

/// The parsers this server has, by vLLM's names.
pub const NAMES: &[&str] = &["hermes", "llama3_json", "mistral", "pythonic"];

/// vLLM's parser names that are not implemented here (refused at start with a clear message).
const NOT_YET: &[&str] = &[
    "qwen3_coder",
    "qwen3_xml",
    "deepseek_v3",
    "deepseek_v31",
    "openai",
    "llama4_json",
    "llama4_pythonic",
    "granite",
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

/// The parser named `name`, or why there is none.
pub fn by_name(name: &str) -> Result<Box<dyn ToolParser>, String> {
    Ok(match name {
        "hermes" => Box::new(hermes::Hermes),
        "llama3_json" => Box::new(llama3_json::Llama3Json),
        "mistral" => Box::new(mistral::Mistral),
        "pythonic" => Box::new(pythonic::Pythonic),
        n if NOT_YET.contains(&n) => {
            return Err(format!("tool call parser {n:?} is not implemented yet; available: {}", NAMES.join(", ")));
        }
        n => return Err(format!("unknown tool call parser {n:?}; available: {}", NAMES.join(", "))),
    })
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
    /// Calls sent so far.
    sent_calls: usize,
}

/// What one step of a stream sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamDelta {
    pub content: String,
    /// New calls, each with its index in the choice's calls.
    pub calls: Vec<(usize, ToolCall)>,
}

impl ToolStream {
    pub fn new(parser: Box<dyn ToolParser>) -> Self {
        ToolStream { parser, text: String::new(), sent_content: 0, in_calls: false, sent_calls: 0 }
    }

    /// Whether any call has been sent.
    pub fn called(&self) -> bool {
        self.sent_calls > 0
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
            let calls =
                if finished { self.parser.extract(&self.text).calls } else { self.parser.complete_calls(&self.text) };
            for c in calls.into_iter().skip(self.sent_calls) {
                out.calls.push((self.sent_calls, ToolCall::new(c.name, c.arguments)));
                self.sent_calls += 1;
            }
            // No call after all (malformed): what was held back is content, as vLLM returns it.
            if finished && self.sent_calls == 0 {
                out.content.push_str(&self.text[self.sent_content..]);
                self.sent_content = self.text.len();
            }
        }
        out
    }
}

/// The longest suffix of `text` that is a proper prefix of `marker`.
fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
