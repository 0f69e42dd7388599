//! What a chat choice's generated text becomes: reasoning split off (`--reasoning-parser`),
//! tool calls found (constrained `required` / named choices, or `auto` through the tool parser),
//! the rest content — for a whole response, or delta by delta for a stream. gpt-oss's harmony
//! output with the `openai` parser is read once for all three ([`crate::harmony`]).

use crate::harmony;
use crate::reasoning::{ReasoningParser, ReasoningStream};
use crate::tool_parsers::{self, CallDelta, ToolParser, ToolStream};
use crate::tools::{ToolCall, ToolChoice, ToolSetup, tool_call_id};
use serde_json::{Value, json};

/// How a request's output is shaped (the same for each of its choices).
#[derive(Clone, Debug, Default)]
pub struct OutputPlan {
    /// The reasoning parser, and whether the output starts inside the thinking block.
    pub reasoning: Option<(ReasoningParser, bool)>,
    /// `include_reasoning` (default true): false drops the reasoning from the response.
    pub include_reasoning: bool,
    pub tools: Option<ToolSetup>,
    /// The parser for `tool_choice: "auto"`.
    pub auto_parser: Option<String>,
}

/// A finished choice's message parts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

impl OutputPlan {
    /// The `auto` parser for this request's tools (checked at start-up, so known).
    fn auto_parser(&self) -> Option<Box<dyn ToolParser>> {
        let tools = self.tools.as_ref().map_or(&[][..], |t| t.tools.as_slice());
        self.auto_parser.as_deref().and_then(|n| tool_parsers::by_name(n, tools).ok())
    }

    fn choice(&self) -> &ToolChoice {
        self.tools.as_ref().map_or(&ToolChoice::None, |t| &t.choice)
    }

    /// Whether the output is read as gpt-oss's harmony messages: their markers are special
    /// tokens, which the chat path then keeps in the text (`skip_special_tokens` off).
    pub fn reads_harmony(&self) -> bool {
        matches!(self.reasoning, Some((ReasoningParser::GptOss, _))) || self.harmony_calls()
    }

    /// `auto` calls by the `openai` parser: one reading of the harmony messages gives the
    /// reasoning (with the gpt-oss reasoning parser only, as vLLM), the content and the calls.
    fn harmony_calls(&self) -> bool {
        matches!(self.choice(), ToolChoice::Auto) && self.auto_parser.as_deref() == Some(tool_parsers::HARMONY)
    }

    /// Whether harmony reasoning goes out with the `openai` parser's calls.
    fn harmony_reasoning(&self) -> bool {
        self.include_reasoning && matches!(self.reasoning, Some((ReasoningParser::GptOss, _)))
    }

    /// The message of a finished choice whose whole text is `text`.
    pub fn message(&self, text: &str) -> Message {
        if self.harmony_calls() {
            let p = harmony::parse(text);
            return Message {
                content: p.content,
                reasoning: p.reasoning.filter(|_| self.harmony_reasoning()),
                tool_calls: p.calls.into_iter().map(|c| ToolCall::new(c.name, c.arguments)).collect(),
            };
        }
        let (reasoning, answer) = match self.reasoning {
            Some((p, at_start)) => p.split(text, at_start),
            None => (None, Some(text.to_string())),
        };
        let reasoning = reasoning.filter(|_| self.include_reasoning);
        let answer_text = answer.as_deref().unwrap_or("");
        let (content, tool_calls) = match (self.choice(), &self.tools) {
            (ToolChoice::Named(_) | ToolChoice::Required, Some(setup)) => match setup.constrained_calls(answer_text) {
                Some(calls) => (Some(String::new()), calls),
                None => (answer, Vec::new()), // cut short (length): the text as it is
            },
            (ToolChoice::Auto, _) => match self.auto_parser() {
                Some(p) => {
                    let e = p.extract(answer_text);
                    let calls: Vec<ToolCall> =
                        e.calls.into_iter().map(|c| ToolCall::new(c.name, c.arguments)).collect();
                    if calls.is_empty() { (answer, calls) } else { (e.content, calls) }
                }
                None => (answer, Vec::new()),
            },
            _ => (answer, Vec::new()),
        };
        Message { content, reasoning, tool_calls }
    }

    /// The choice's finish reason: OpenAI's "tool_calls" for `auto` and `required` calls, the
    /// engine's otherwise ("stop" for a named function).
    pub fn finish_reason(&self, called: bool, engine: Option<&'static str>) -> Option<&'static str> {
        let tool_calls = called
            && match self.choice() {
                ToolChoice::Auto => true,
                ToolChoice::Required => engine == Some("stop"),
                _ => false,
            };
        if tool_calls { Some("tool_calls") } else { engine }
    }

    /// A choice's stream state.
    pub fn stream(&self) -> ChoiceStream {
        let harmony_calls = self.harmony_calls();
        let tools = match (self.choice(), &self.tools) {
            _ if harmony_calls => StreamTools::Harmony { stream: Box::default(), reasoning: self.harmony_reasoning() },
            (ToolChoice::Auto, _) => match self.auto_parser() {
                Some(p) => StreamTools::Auto(ToolStream::new(p)),
                None => StreamTools::Plain,
            },
            (ToolChoice::Named(name), _) => StreamTools::Named { name: name.clone(), started: false },
            (ToolChoice::Required, Some(setup)) => StreamTools::Required { setup: setup.clone(), text: String::new() },
            _ => StreamTools::Plain,
        };
        ChoiceStream {
            reasoning: self.reasoning.filter(|_| !harmony_calls).map(|(p, at_start)| p.stream(at_start)),
            include_reasoning: self.include_reasoning,
            tools,
            called: false,
        }
    }
}

enum StreamTools {
    Plain,
    Auto(ToolStream),
    /// Harmony messages: reasoning (when it goes out), content and calls.
    Harmony {
        stream: Box<harmony::Stream>,
        reasoning: bool,
    },
    /// The arguments stream as the model writes them (the grammar keeps them valid).
    Named {
        name: String,
        started: bool,
    },
    /// The calls go out once the list is complete.
    Required {
        setup: ToolSetup,
        text: String,
    },
}

/// One streamed choice: text deltas in, reasoning / content / tool-call deltas out.
pub struct ChoiceStream {
    reasoning: Option<ReasoningStream>,
    include_reasoning: bool,
    tools: StreamTools,
    called: bool,
}

/// What one step of a choice sends: each tool-call delta is a chunk of its own, as vLLM sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeltaParts {
    pub reasoning: String,
    pub content: String,
    pub tool_calls: Vec<Value>,
}

impl ChoiceStream {
    /// Whether a tool call has been sent.
    pub fn called(&self) -> bool {
        self.called
    }

    /// Whether text is split or held back here (a step may then have nothing to send yet).
    pub fn shapes(&self) -> bool {
        self.reasoning.is_some() || !matches!(self.tools, StreamTools::Plain)
    }

    pub fn push(&mut self, text: &str, finished: bool) -> DeltaParts {
        let (reasoning, answer) = match &mut self.reasoning {
            Some(r) => r.push(text, finished),
            None => (String::new(), text.to_string()),
        };
        let mut out = DeltaParts {
            reasoning: if self.include_reasoning { reasoning } else { String::new() },
            ..Default::default()
        };
        match &mut self.tools {
            StreamTools::Plain => out.content = answer,
            StreamTools::Auto(ts) => {
                let d = ts.push(&answer, finished);
                out.content = d.content;
                out.tool_calls.extend(d.calls.iter().map(call_delta_json));
            }
            StreamTools::Harmony { stream, reasoning } => {
                let step = stream.push(&answer, finished);
                if *reasoning {
                    out.reasoning = step.reasoning;
                }
                out.content = step.content;
                out.tool_calls = step.calls;
            }
            StreamTools::Named { name, started } => {
                if !*started && !answer.is_empty() {
                    *started = true;
                    out.tool_calls.push(json!({"index": 0, "id": tool_call_id(), "type": "function",
                        "function": {"name": name, "arguments": answer}}));
                } else if !answer.is_empty() {
                    out.tool_calls.push(json!({"index": 0, "function": {"arguments": answer}}));
                }
            }
            StreamTools::Required { setup, text } => {
                text.push_str(&answer);
                if finished {
                    match setup.constrained_calls(text) {
                        Some(calls) => {
                            for (index, call) in calls.iter().enumerate() {
                                out.tool_calls.extend(call_deltas(index, call));
                            }
                        }
                        None => out.content = std::mem::take(text),
                    }
                }
            }
        }
        self.called |= !out.tool_calls.is_empty();
        out
    }
}

/// A tool-call delta as vLLM writes it: `{"index", "id", "type", "function": {"name",
/// "arguments"}}` the first time (no `arguments` when none are known yet), then
/// `{"index", "function": {"arguments"}}`.
fn call_delta_json(d: &CallDelta) -> Value {
    match &d.header {
        Some((id, name)) => {
            let mut function = json!({"name": name});
            if !d.arguments.is_empty() {
                function["arguments"] = json!(d.arguments);
            }
            json!({"index": d.index, "id": id, "type": "function", "function": function})
        }
        None => json!({"index": d.index, "function": {"arguments": d.arguments}}),
    }
}

/// A whole call as vLLM streams it: id, type and name first, then the arguments.
fn call_deltas(index: usize, call: &ToolCall) -> [Value; 2] {
    [
        json!({"index": index, "id": call.id, "type": "function", "function": {"name": call.name}}),
        json!({"index": index, "function": {"arguments": call.arguments}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(choice: Value) -> OutputPlan {
        let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]);
        OutputPlan {
            reasoning: Some((ReasoningParser::Qwen3, false)),
            include_reasoning: true,
            tools: crate::tools::parse(Some(&tools), Some(&choice), None, true).unwrap(),
            auto_parser: Some("hermes".into()),
        }
    }

    /// The stream's pieces, put back together, against the whole message.
    fn streamed(p: &OutputPlan, text: &str, at: usize) -> (String, String, Vec<(String, String)>) {
        let mut s = p.stream();
        let (mut r, mut c, mut calls) = (String::new(), String::new(), Vec::<(String, String)>::new());
        for (piece, fin) in [(&text[..at], false), (&text[at..], true)] {
            let d = s.push(piece, fin);
            r += &d.reasoning;
            c += &d.content;
            for tc in d.tool_calls {
                let i = tc["index"].as_u64().unwrap() as usize;
                if let Some(name) = tc.pointer("/function/name").and_then(Value::as_str) {
                    assert_eq!(i, calls.len());
                    let id = tc["id"].as_str().unwrap();
                    assert!(id.starts_with("chatcmpl-tool-") || id.starts_with("call_"), "{id}");
                    calls.push((name.to_string(), String::new()));
                }
                calls[i].1 += tc.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
            }
        }
        (r, c, calls)
    }

    #[test]
    fn reasoning_then_auto_calls_stream_as_the_whole_message() {
        let p = plan(json!("auto"));
        let text =
            "<think>need add</think>\n\nOk.<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let m = p.message(text);
        assert_eq!(m.reasoning.as_deref(), Some("need add"));
        assert_eq!(m.content.as_deref(), Some("\n\nOk."));
        assert_eq!((m.tool_calls[0].name.as_str(), m.tool_calls[0].arguments.as_str()), ("add", r#"{"a": 1}"#));
        assert_eq!(p.finish_reason(true, Some("stop")), Some("tool_calls"));
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let (r, c, calls) = streamed(&p, text, at);
            assert_eq!((r.as_str(), c.as_str()), ("need add", "\n\nOk."), "split at {at}");
            assert_eq!(calls, vec![("add".to_string(), r#"{"a": 1}"#.to_string())], "split at {at}");
        }
    }

    #[test]
    fn qwen3_coder_streams_name_with_brace_then_parameters() {
        let p = OutputPlan { auto_parser: Some("qwen3_coder".into()), reasoning: None, ..plan(json!("auto")) };
        let text = "Adding.\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
        let m = p.message(text);
        assert_eq!((m.content.as_deref(), m.tool_calls[0].arguments.as_str()), (Some("Adding.\n"), r#"{"a": "1"}"#));
        let mut s = p.stream();
        let first = s.push(&text[..text.find("<parameter").unwrap()], false);
        assert_eq!(first.content, "Adding.\n");
        let header = &first.tool_calls[0];
        assert_eq!(header["function"], json!({"name": "add", "arguments": "{"}), "{header}");
        assert_eq!((header["index"].clone(), header["type"].clone()), (json!(0), json!("function")));
        let rest = s.push(&text[text.find("<parameter").unwrap()..], true);
        assert_eq!(rest.tool_calls, vec![json!({"index": 0, "function": {"arguments": r#""a": "1"}"#}})]);
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let (_, c, calls) = streamed(&p, text, at);
            assert_eq!((c.as_str(), calls), ("Adding.\n", vec![("add".to_string(), r#"{"a": "1"}"#.to_string())]));
        }
    }

    #[test]
    fn granite_reasoning_then_content_streams_as_the_whole_message() {
        let p = OutputPlan { reasoning: Some((ReasoningParser::Granite, false)), ..plan(json!("none")) };
        let text = "Here is my thought process: add them.\nHere is my response: 3";
        let m = p.message(text);
        assert_eq!((m.reasoning.as_deref(), m.content.as_deref()), (Some(" add them.\n"), Some(" 3")));
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let (r, c, _) = streamed(&p, text, at);
            assert_eq!((r.as_str(), c.as_str()), (" add them.\n", " 3"), "split at {at}");
        }
    }

    /// gpt-oss: thinking, a preamble and a call, read as harmony messages whole and streamed.
    #[test]
    fn harmony_reasoning_preamble_and_call_stream_as_the_whole_message() {
        let text = "<|channel|>analysis<|message|>Need add.<|end|><|start|>assistant<|channel|>commentary<|message|>Adding.<|end|><|start|>assistant to=functions.add<|channel|>commentary <|constrain|>json<|message|>{\"a\":1}<|call|>";
        let harmony = |reasoning: bool, choice: Value| OutputPlan {
            reasoning: reasoning.then_some((ReasoningParser::GptOss, false)),
            auto_parser: Some("openai".into()),
            ..plan(choice)
        };
        let add = |args: &str| vec![("add".to_string(), args.to_string())];
        let p = harmony(true, json!("auto"));
        assert!(p.reads_harmony());
        let m = p.message(text);
        assert_eq!((m.reasoning.as_deref(), m.content.as_deref()), (Some("Need add."), Some("Adding.")));
        assert_eq!((m.tool_calls[0].name.as_str(), m.tool_calls[0].arguments.as_str()), ("add", r#"{"a": 1}"#));
        assert_eq!(p.finish_reason(true, Some("stop")), Some("tool_calls"));
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let (r, c, calls) = streamed(&p, text, at);
            assert_eq!((r.as_str(), c.as_str(), calls), ("Need add.", "Adding.", add(r#"{"a":1}"#)), "split at {at}");
        }
        // No reasoning parser, or `include_reasoning: false`: no reasoning (as vLLM).
        for p in
            [harmony(false, json!("auto")), OutputPlan { include_reasoning: false, ..harmony(true, json!("auto")) }]
        {
            assert_eq!(p.message(text).reasoning, None);
            assert_eq!(streamed(&p, text, 20).0, "");
        }
        // The reasoning parser alone (or `tool_choice: "none"`): no calls, the rest is the same.
        for p in [OutputPlan { auto_parser: None, ..harmony(true, json!("auto")) }, harmony(true, json!("none"))] {
            assert!(p.reads_harmony());
            let m = p.message(text);
            assert_eq!((m.reasoning.as_deref(), m.content.as_deref()), (Some("Need add."), Some("Adding.")));
            assert!(m.tool_calls.is_empty());
            let (r, c, calls) = streamed(&p, text, 30);
            assert_eq!((r.as_str(), c.as_str(), calls.len()), ("Need add.", "Adding.", 0));
        }
        assert!(!harmony(false, json!("none")).reads_harmony(), "the openai parser reads only `auto` outputs");
    }

    #[test]
    fn named_and_required_outputs_are_calls() {
        let p = plan(json!({"type": "function", "function": {"name": "add"}}));
        let m = p.message("{\"a\": 2}");
        assert_eq!((m.content.as_deref(), m.tool_calls[0].arguments.as_str()), (Some(""), "{\"a\": 2}"));
        assert_eq!(p.finish_reason(true, Some("stop")), Some("stop"), "named: OpenAI says stop");
        let (_, c, calls) = streamed(&p, "{\"a\": 2}", 3);
        assert_eq!((c.as_str(), calls), ("", vec![("add".to_string(), "{\"a\": 2}".to_string())]));
        let p = plan(json!("required"));
        let text = "[{\"name\": \"add\", \"parameters\": {\"a\": 3}}]";
        assert_eq!(p.message(text).tool_calls[0].arguments, "{\"a\": 3}");
        assert_eq!(p.finish_reason(true, Some("stop")), Some("tool_calls"));
        assert_eq!(streamed(&p, text, 5).2, vec![("add".to_string(), "{\"a\": 3}".to_string())]);
    }
}
