//! gpt-oss's "harmony" output format, read for `--reasoning-parser openai_gptoss` (alias
//! `gpt_oss`) and `--tool-call-parser openai`: a sequence of messages, each a header and a body,
//!
//! `<|channel|>analysis<|message|>thinking…<|end|>`
//! `<|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{…}<|call|>`
//! `<|start|>assistant<|channel|>final<|message|>answer…<|return|>`
//!
//! (the prompt ends with `<|start|>assistant`, so the first header has no role). The `analysis`
//! channel is reasoning; a message to a function (`to=functions.NAME`, or a bare name that is
//! not a built-in tool) is a call; `final`, and `commentary` without a recipient (a preamble
//! shown to the user), are content.
//!
//! vLLM runs openai-harmony's `StreamableParser` over the token ids; here the same state machine
//! runs over the detokenized text with the markers kept (they are special tokens, so the chat
//! path turns `skip_special_tokens` off for these requests: see
//! [`crate::chat_output::OutputPlan::reads_harmony`]). As in the strict parser: in a header only
//! `<|message|>` counts; in a body only `<|end|>`, `<|call|>` and `<|return|>` (the rest is
//! text); between messages only `<|start|>`. A header that does not parse, or output that
//! ends inside one, is kept as content on the `final` channel, text and markers as written
//! (vLLM's recovery), and reading starts afresh.

use crate::tool_parsers::{ParsedCall, partial_marker_len};
use serde_json::{Value, json};

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const CONSTRAIN: &str = "<|constrain|>";
/// What ends a message body (`<|return|>` and `<|call|>` also end gpt-oss's generation).
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
/// Harmony's roles (a header naming another is a tool's message, when it has more parts).
const ROLES: [&str; 5] = ["user", "assistant", "system", "developer", "tool"];
/// Built-in tools (vLLM's `BUILTIN_TOOL_TO_MCP_SERVER_LABEL`): their messages are not calls.
const BUILTIN_TOOLS: [&str; 3] = ["python", "browser", "container"];

/// A message header: who wrote it, to whom, on which channel, in what format.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    pub role: String,
    pub recipient: Option<String>,
    pub channel: Option<String>,
    pub content_type: Option<String>,
}

/// A complete message.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub header: Header,
    pub text: String,
}

/// What reading a piece of output found, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Body text of the current message (empty when its header has just been read).
    Text {
        channel: Option<String>,
        recipient: Option<String>,
        text: String,
    },
    Done(Message),
}

enum State {
    /// Between messages: only `<|start|>` may come.
    ExpectStart,
    /// Reading a header; `role` is known for the first one (the prompt wrote it).
    Header {
        text: String,
        role: Option<&'static str>,
    },
    Body {
        header: Header,
        text: String,
    },
}

/// The strict harmony reader, fed text as it is generated.
pub struct Reader {
    state: State,
    /// Fed text not read yet (it may end in part of a marker).
    pending: String,
    /// Everything read since the last complete message: what a malformed one is kept as.
    raw: String,
}

impl Default for Reader {
    fn default() -> Self {
        Reader { state: first_header(), pending: String::new(), raw: String::new() }
    }
}

fn first_header() -> State {
    State::Header { text: String::new(), role: Some("assistant") }
}

impl Reader {
    /// The current message's channel and recipient, once its header is read.
    fn current(&self) -> (Option<String>, Option<String>) {
        match &self.state {
            State::Body { header, .. } => (header.channel.clone(), header.recipient.clone()),
            _ => (None, None),
        }
    }

    /// Reads `piece`; with `finished`, the output ends after it.
    pub fn feed(&mut self, piece: &str, finished: bool) -> Vec<Event> {
        self.pending.push_str(piece);
        let mut out = Vec::new();
        while self.step(finished, &mut out) {}
        if finished {
            self.end(&mut out);
        }
        out
    }

    /// Reads what it can of `pending`; false when it must wait for more text.
    fn step(&mut self, finished: bool, out: &mut Vec<Event>) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        match &mut self.state {
            State::ExpectStart => {
                if let Some(rest) = self.pending.strip_prefix(START) {
                    self.pending = rest.to_string();
                    self.raw.push_str(START);
                    self.state = State::Header { text: String::new(), role: None };
                    return true;
                }
                if !finished && START.starts_with(self.pending.as_str()) {
                    return false;
                }
                // Anything else is an unexpected token: up to the next marker, say.
                let first = self.pending.chars().next().map_or(0, char::len_utf8);
                let n = self.pending[first..].find("<|").map_or(self.pending.len(), |i| i + first);
                let bad: String = self.pending.drain(..n).collect();
                self.raw.push_str(&bad);
                self.recover(out);
                true
            }
            State::Header { text, role } => {
                let Some(i) = self.pending.find(MESSAGE) else {
                    let keep = if finished { 0 } else { partial_marker_len(&self.pending, MESSAGE) };
                    let take: String = self.pending.drain(..self.pending.len() - keep).collect();
                    text.push_str(&take);
                    self.raw.push_str(&take);
                    return false;
                };
                text.push_str(&self.pending[..i]);
                self.raw.push_str(&self.pending[..i + MESSAGE.len()]);
                self.pending.drain(..i + MESSAGE.len());
                match parse_header(text, *role) {
                    Ok(header) => {
                        out.push(Event::Text {
                            channel: header.channel.clone(),
                            recipient: header.recipient.clone(),
                            text: String::new(),
                        });
                        self.state = State::Body { header, text: String::new() };
                    }
                    Err(_) => self.recover(out),
                }
                true
            }
            State::Body { header, text } => {
                let end = ENDS.iter().filter_map(|m| self.pending.find(m).map(|i| (i, m.len()))).min();
                let (body_len, marker_len) = match end {
                    Some(e) => e,
                    None if finished => (self.pending.len(), 0),
                    None => {
                        let keep = ENDS.iter().map(|m| partial_marker_len(&self.pending, m)).max().unwrap_or(0);
                        (self.pending.len() - keep, 0)
                    }
                };
                let piece: String = self.pending.drain(..body_len).collect();
                self.pending.drain(..marker_len);
                if !piece.is_empty() {
                    text.push_str(&piece);
                    out.push(Event::Text {
                        channel: header.channel.clone(),
                        recipient: header.recipient.clone(),
                        text: piece,
                    });
                }
                if end.is_none() {
                    return false;
                }
                self.complete(out);
                true
            }
        }
    }

    /// The end of the output: a body ends there; a header cannot.
    fn end(&mut self, out: &mut Vec<Event>) {
        match self.state {
            State::Body { .. } => self.complete(out),
            State::Header { .. } => self.recover(out),
            State::ExpectStart => {}
        }
        *self = Reader::default();
    }

    fn complete(&mut self, out: &mut Vec<Event>) {
        if let State::Body { header, text } = std::mem::replace(&mut self.state, State::ExpectStart) {
            out.push(Event::Done(Message { header, text }));
        }
        self.raw.clear();
    }

    /// A malformed message: what was read of it becomes `final` content, and reading restarts.
    fn recover(&mut self, out: &mut Vec<Event>) {
        let text = std::mem::take(&mut self.raw);
        let final_channel = Some("final".to_string());
        out.push(Event::Text { channel: final_channel.clone(), recipient: None, text: text.clone() });
        let header = Header { role: "assistant".into(), channel: final_channel, ..Default::default() };
        out.push(Event::Done(Message { header, text }));
        self.state = first_header();
    }
}

/// openai-harmony's header parse: the channel after `<|channel|>`, the role first (unless the
/// prompt gave it), the content type last (`json`, `<|constrain|>json`), the recipient before
/// it (`to=NAME`, or a single bare word); anything more is an error.
fn parse_header(text: &str, role: Option<&'static str>) -> Result<Header, String> {
    let mut text = text.to_string();
    let mut channel = None;
    if let Some(i) = text.find(CHANNEL) {
        let after = &text[i + CHANNEL.len()..];
        let end = after.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(after.len());
        if end == 0 {
            return Err("channel marker present but no channel value found in header".into());
        }
        channel = Some(after[..end].to_string());
        text = format!("{}{}", &text[..i], &after[end..]);
    }
    let mut text = text.trim().to_string();
    if text.contains(CONSTRAIN) {
        text = text.replace(CONSTRAIN, &format!(" {CONSTRAIN}")).trim().to_string();
    }
    let mut parts: Vec<&str> = text.split_ascii_whitespace().collect();
    let role = match role {
        Some(r) => r.to_string(),
        None => {
            let first = *parts.first().ok_or("message header did not contain a role")?;
            if ROLES.contains(&first) {
                first.to_string()
            } else if parts.len() > 1 || first.starts_with("to=") {
                parts.remove(0);
                "tool".to_string()
            } else {
                return Err(format!("Unknown role: {first}"));
            }
        }
    };
    if parts.first() == Some(&role.as_str()) {
        parts.remove(0);
    }
    let (mut recipient, mut content_type) = (None, None);
    if let Some(last) = parts.pop() {
        if let Some(r) = last.strip_prefix("to=") {
            recipient = Some(r.to_string());
        } else if parts.is_empty() && !last.starts_with(CONSTRAIN) {
            recipient = Some(last.to_string());
        } else {
            content_type = Some(last.to_string());
            recipient = parts.pop().map(|r| r.strip_prefix("to=").unwrap_or(r).to_string());
        }
    }
    if !parts.is_empty() {
        return Err(format!("unexpected tokens remaining in message header: {:?}", parts.join(" ")));
    }
    Ok(Header { role, recipient, channel, content_type })
}

/// What a message (or a piece of one) is to the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Call,
    Reasoning,
    Content,
    Ignored,
}

/// vLLM's classification: a function recipient first, then the channel.
fn kind(channel: Option<&str>, recipient: Option<&str>) -> Kind {
    match (channel, recipient) {
        (_, Some(r)) if is_function_recipient(r) => Kind::Call,
        (Some("analysis"), _) => Kind::Reasoning,
        (Some("final"), _) | (Some("commentary"), None) => Kind::Content,
        _ => Kind::Ignored,
    }
}

/// A recipient that names a function: `functions.NAME`, or any other name that is not the
/// assistant, a marker, or a built-in tool (vLLM's chat-completions heuristic).
fn is_function_recipient(r: &str) -> bool {
    if r.is_empty() || r.starts_with("<|") || r == "assistant" {
        return false;
    }
    if let Some(name) = r.strip_prefix("functions.") {
        return !name.is_empty();
    }
    let first = r.split('.').next().unwrap_or(r);
    !BUILTIN_TOOLS.contains(&r) && !BUILTIN_TOOLS.contains(&first)
}

fn function_name(recipient: &str) -> String {
    recipient.strip_prefix("functions.").unwrap_or(recipient).to_string()
}

/// A call's arguments as vLLM returns them: JSON content re-serialized (`json.dumps`, ASCII
/// escapes), other content types and text that is not JSON as written.
fn call_arguments(m: &Message) -> String {
    let json = m.header.content_type.as_deref().is_none_or(|t| t.contains("json"));
    match serde_json::from_str::<Value>(&m.text) {
        Ok(v) if json => vllm_rs_frontend::py_json_dumps_with(&v, true),
        _ => m.text.clone(),
    }
}

/// A whole output read: the analysis texts, the content texts (each joined by newlines, `None`
/// when empty), and the calls, from the assistant's messages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub reasoning: Option<String>,
    pub content: Option<String>,
    pub calls: Vec<ParsedCall>,
}

/// Reads a finished output (vLLM's `HarmonyParser.parse`).
pub fn parse(text: &str) -> Parsed {
    let (mut reasoning, mut content, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    for event in Reader::default().feed(text, true) {
        let Event::Done(m) = event else { continue };
        if m.header.role != "assistant" {
            continue;
        }
        match kind(m.header.channel.as_deref(), m.header.recipient.as_deref()) {
            Kind::Reasoning if !m.text.is_empty() => reasoning.push(m.text),
            Kind::Content if !m.text.is_empty() => content.push(m.text),
            Kind::Call => {
                let name = function_name(m.header.recipient.as_deref().unwrap_or_default());
                calls.push(ParsedCall { name, arguments: call_arguments(&m) });
            }
            _ => {}
        }
    }
    let joined = |v: Vec<String>| Some(v.join("\n")).filter(|s| !s.is_empty());
    Parsed { reasoning: joined(reasoning), content: joined(content), calls }
}

/// One step of a stream: the reasoning and content text, and the call deltas as vLLM writes
/// them (`{"index", "id", "type", "function": {"name", "arguments"}}` when a call opens, with
/// what is known of its arguments; then `{"index", "function": {"arguments"}}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamStep {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<Value>,
}

/// One streamed choice (vLLM's `HarmonyParser.parse_delta`). Pieces of several messages go
/// out as they are written: content texts are not joined by newlines here, as in vLLM.
#[derive(Default)]
pub struct Stream {
    reader: Reader,
    /// Calls opened so far.
    calls: usize,
}

impl Stream {
    pub fn push(&mut self, piece: &str, finished: bool) -> StreamStep {
        let mut recipient = self.reader.current().1;
        let mut out = StreamStep::default();
        for event in self.reader.feed(piece, finished) {
            let (channel, to, text) = match event {
                Event::Done(_) => {
                    recipient = None;
                    continue;
                }
                Event::Text { channel, recipient, text } => (channel, recipient, text),
            };
            match kind(channel.as_deref(), to.as_deref()) {
                Kind::Reasoning => out.reasoning.push_str(&text),
                Kind::Content => out.content.push_str(&text),
                Kind::Call if recipient != to => {
                    let name = function_name(to.as_deref().unwrap_or_default());
                    out.calls.push(json!({"index": self.calls, "id": crate::tools::tool_call_id(),
                        "type": "function", "function": {"name": name, "arguments": text}}));
                    self.calls += 1;
                    recipient = to;
                }
                Kind::Call if !text.is_empty() => match out.calls.last_mut() {
                    Some(last) => {
                        let args = &mut last["function"]["arguments"];
                        *args = Value::String(format!("{}{text}", args.as_str().unwrap_or_default()));
                    }
                    None => out.calls.push(json!({"index": self.calls - 1, "function": {"arguments": text}})),
                },
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
