//! `llama3_json`: Llama 3.x's JSON calls, `{"name": ..., "parameters": {...}}` (or
//! `"arguments"`), optionally after `<|python_tag|>`, several separated by `;`.

use super::{Extracted, ParsedCall, ToolParser, call_from_object, content_before, json_calls_so_far, json_values};

const PYTHON_TAG: &str = "<|python_tag|>";
/// Where a call's arguments are (Llama 3.x writes `parameters`).
const KEYS: &[&str] = &["parameters", "arguments"];

pub struct Llama3Json;

/// Where the calls start: after the python tag, else at the first `{`.
fn start(text: &str) -> Option<(usize, usize)> {
    match text.find(PYTHON_TAG) {
        Some(i) => Some((i, i + PYTHON_TAG.len())),
        None => text.find('{').map(|i| (i, i)),
    }
}

fn calls(body: &str) -> Option<Vec<ParsedCall>> {
    let values = json_values(body, ';');
    if values.is_empty() {
        return None;
    }
    values.iter().map(|v| call_from_object(v, KEYS)).collect()
}

impl ToolParser for Llama3Json {
    fn start_markers(&self) -> &[&str] {
        &[PYTHON_TAG, "{"]
    }

    fn extract(&self, text: &str) -> Extracted {
        let found = start(text).and_then(|(at, body)| Some((at, calls(&text[body..])?)));
        match found {
            Some((at, calls)) => Extracted { content: content_before(text, at), calls },
            None => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let Some((_, body)) = start(text) else { return vec![] };
        json_calls_so_far(&text[body..], ';', KEYS)
    }
}
