//! `mistral`: `[TOOL_CALLS]` then a JSON list of `{"name": ..., "arguments": {...}}` (older
//! tokenizers), or `[TOOL_CALLS]name[ARGS]{...}` per call (tokenizer v11 and later).

use super::{Extracted, ParsedCall, ToolParser, call_from_object, content_before, json_values};

const START: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";

pub struct Mistral;

fn calls(body: &str, finished: bool) -> Option<Vec<ParsedCall>> {
    let trimmed = body.trim_start();
    if trimmed.starts_with('[') {
        // One JSON list; complete once it parses.
        let list = json_values(trimmed, ',').into_iter().next()?;
        return list.as_array()?.iter().map(|v| call_from_object(v, &["arguments"])).collect();
    }
    let parts: Vec<&str> = body.split(START).collect();
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let (name, args) = part.split_once(ARGS)?;
        // The last call's arguments are complete only at the end (or when the next begins).
        if i + 1 == parts.len() && !finished {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(args.trim()).ok()?;
        out.push(ParsedCall { name: name.trim().to_string(), arguments: super::normalized_arguments(&v) });
    }
    Some(out)
}

impl ToolParser for Mistral {
    fn start_markers(&self) -> &[&str] {
        &[START]
    }

    fn extract(&self, text: &str) -> Extracted {
        let Some(at) = text.find(START) else { return Extracted { content: Some(text.to_string()), calls: vec![] } };
        match calls(&text[at + START.len()..], true).filter(|c| !c.is_empty()) {
            Some(calls) => Extracted { content: content_before(text, at), calls },
            None => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        text.find(START).and_then(|at| calls(&text[at + START.len()..], false)).unwrap_or_default()
    }
}
