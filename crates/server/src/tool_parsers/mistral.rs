//! `mistral`: `[TOOL_CALLS]` then a JSON list of `{"name": ..., "arguments": {...}}` (older
//! tokenizers), or `[TOOL_CALLS]name[ARGS]{...}` per call (tokenizer v11 and later).

use super::partial_json::stable_dumps_prefix;
use super::{Extracted, ParsedCall, ToolParser, call_from_object, content_before, json_calls_so_far, json_values};

const START: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";

pub struct Mistral;

/// The calls of a finished output's `[TOOL_CALLS]...` part.
fn calls(body: &str) -> Option<Vec<ParsedCall>> {
    let trimmed = body.trim_start();
    if trimmed.starts_with('[') {
        let list = json_values(trimmed, ',').into_iter().next()?;
        return list.as_array()?.iter().map(|v| call_from_object(v, &["arguments"])).collect();
    }
    body.split(START)
        .map(|part| {
            let (name, args) = part.split_once(ARGS)?;
            let v: serde_json::Value = serde_json::from_str(args.trim()).ok()?;
            Some(ParsedCall { name: name.trim().to_string(), arguments: super::normalized_arguments(&v) })
        })
        .collect()
}

impl ToolParser for Mistral {
    fn start_markers(&self) -> &[&str] {
        &[START]
    }

    fn extract(&self, text: &str) -> Extracted {
        let Some(at) = text.find(START) else { return Extracted { content: Some(text.to_string()), calls: vec![] } };
        match calls(&text[at + START.len()..]).filter(|c| !c.is_empty()) {
            Some(calls) => Extracted { content: content_before(text, at), calls },
            None => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    /// The list's calls as far as they are written; or each `name[ARGS]` call with the final
    /// part of its arguments.
    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let Some(at) = text.find(START) else { return vec![] };
        let body = &text[at + START.len()..];
        if let Some(list) = body.trim_start().strip_prefix('[') {
            return json_calls_so_far(list, ',', &["arguments"]);
        }
        body.split(START)
            .map_while(|part| {
                let (name, args) = part.split_once(ARGS)?;
                Some(ParsedCall { name: name.trim().to_string(), arguments: stable_dumps_prefix(args) })
            })
            .collect()
    }
}
