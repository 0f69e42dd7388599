//! `hermes`: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call
//! (Qwen2.5, Hermes and many fine-tunes).

use super::{Extracted, ParsedCall, ToolParser, call_from_object, content_before};

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
        blocks(text).into_iter().take_while(|b| b.1).map_while(|(b, _)| parse(b)).collect()
    }
}
