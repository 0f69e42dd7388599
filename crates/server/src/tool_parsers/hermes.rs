//! `hermes`: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call
//! (Qwen2.5, Hermes and many fine-tunes).
//!
//! A stream sends each call's name as soon as `"name": "..."` is complete, then the arguments
//! value's text as the model writes it (vLLM's streaming sends this raw text, while a whole
//! response carries `json.dumps` of the parsed arguments: the same JSON value, spacing aside).

use super::{Extracted, ParsedCall, ToolParser, call_from_object, content_before, partial_marker_len};

const START: &str = "<tool_call>";
const END: &str = "</tool_call>";

pub struct Hermes;

/// Each block's body, and whether it was closed.
fn blocks(text: &str) -> Vec<(&str, bool)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(START) {
        let body = &rest[i + START.len()..];
        match body.find(END) {
            Some(j) => {
                out.push((&body[..j], true));
                rest = &body[j + END.len()..];
            }
            None => {
                out.push((body, false));
                break;
            }
        }
    }
    out
}

fn parse(body: &str) -> Option<ParsedCall> {
    call_from_object(&serde_json::from_str(body.trim()).ok()?, &["arguments"])
}

impl ToolParser for Hermes {
    fn start_markers(&self) -> &[&str] {
        &[START]
    }

    fn extract(&self, text: &str) -> Extracted {
        let Some(at) = text.find(START) else { return Extracted { content: Some(text.to_string()), calls: vec![] } };
        let calls: Option<Vec<ParsedCall>> = blocks(text).into_iter().map(|(b, _)| parse(b)).collect();
        match calls {
            Some(calls) => Extracted { content: content_before(text, at), calls },
            None => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let mut out = Vec::new();
        for (body, closed) in blocks(text) {
            // An unclosed block may end in part of `</tool_call>`.
            let body = if closed { body } else { &body[..body.len() - partial_marker_len(body, END)] };
            let body = body.trim();
            let complete = closed || serde_json::from_str::<serde_json::Value>(body).is_ok();
            let Some(name) = name_in(body) else { break }; // the next call waits for this name
            out.push(ParsedCall { name: name.to_string(), arguments: arguments_in(body, complete).to_string() });
        }
        out
    }
}

/// The text after the first `"key"` followed by `\s*:\s*` (vLLM's regex search).
fn after_key<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    body.match_indices(key).find_map(|(i, _)| {
        let rest = body[i + key.len()..].trim_start().strip_prefix(':')?;
        Some(rest.trim_start())
    })
}

/// The call's name once its closing quote is there (`"name"\s*:\s*"([^"]+)"`).
fn name_in(body: &str) -> Option<&str> {
    body.match_indices("\"name\"").find_map(|(i, _)| {
        let rest = body[i + 6..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
        let end = rest.find('"').filter(|&e| e > 0)?;
        Some(&rest[..end])
    })
}

/// The arguments value's text so far: up to its matching bracket once that is written (strings
/// skipped), else all there is; a scalar value as it is (without the object's closing brace
/// once the call is complete).
fn arguments_in(body: &str, complete: bool) -> &str {
    let Some(raw) = after_key(body, "\"arguments\"") else { return "" };
    let (open, close) = match raw.chars().next() {
        Some('{') => ('{', '}'),
        Some('[') => ('[', ']'),
        _ if complete => {
            let raw = raw.trim_end();
            return raw.strip_suffix('}').map_or(raw, str::trim_end);
        }
        _ => return raw,
    };
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in raw.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return &raw[..i + 1];
            }
        }
    }
    raw
}
