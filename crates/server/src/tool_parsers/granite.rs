//! `granite`: IBM Granite 3.0's `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]` and
//! Granite 3.1's `<tool_call>[...]`: a JSON list of calls that must be the whole output
//! (anything else is content, as vLLM reads it).

use super::{Extracted, ParsedCall, ToolParser, call_from_object, json_calls_so_far};

const BOT_TOKEN: &str = "<|tool_call|>";
const BOT_STRING: &str = "<tool_call>";

pub struct Granite;

/// Where the list starts: after leading whitespace and either marker; `None` when the output
/// does not start with one.
fn list_start(text: &str) -> Option<usize> {
    let mut rest = text.trim_start();
    for marker in [BOT_TOKEN, BOT_STRING] {
        rest = rest.strip_prefix(marker).unwrap_or(rest).trim_start();
    }
    rest.starts_with('[').then(|| text.len() - rest.len())
}

impl ToolParser for Granite {
    fn start_markers(&self) -> &[&str] {
        &[BOT_TOKEN, BOT_STRING, "["]
    }

    fn extract(&self, text: &str) -> Extracted {
        let calls = list_start(text)
            .and_then(|at| serde_json::from_str::<serde_json::Value>(&text[at..]).ok())
            .and_then(|list| list.as_array()?.iter().map(|c| call_from_object(c, &["arguments"])).collect());
        match calls {
            Some(calls) => Extracted { content: None, calls },
            None => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let Some(at) = list_start(text) else { return vec![] };
        json_calls_so_far(&text[at + 1..], ',', &["arguments"])
    }
}
