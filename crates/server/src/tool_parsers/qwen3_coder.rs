//! `qwen3_coder`: the XML calls of Qwen3-Coder's and Qwen3.5's chat templates,
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Parameter values are raw text, typed by the tool's JSON schema as vLLM's parser types them
//! (integers, numbers, booleans, null, JSON or Python-literal objects and arrays; anything that
//! does not convert stays a string). A closing tag counts only where it is structural (followed
//! by the next parameter, `</function>` or `</tool_call>`), so code in a value may contain the
//! tags themselves. Streaming sends the name once `<function=NAME>` is complete, then `{`, each
//! parameter once it is closed, and `}` at `</function>`, as vLLM does.

use super::{Extracted, ParsedCall, ToolParser, pythonic::python_literal};
use serde_json::{Map, Value};
use std::collections::HashSet;

const CALL: &str = "<tool_call>";
const CALL_END: &str = "</tool_call>";
const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";

pub struct Qwen3Coder {
    /// The request's tools (their schemas type the parameter values).
    tools: Vec<Value>,
}

/// The parameter names a function's schema declares (`None`: no schema to go by).
type Names<'a> = Option<HashSet<&'a str>>;

impl Qwen3Coder {
    pub fn new(tools: &[Value]) -> Self {
        Qwen3Coder { tools: tools.to_vec() }
    }

    /// `parameters.properties` of the tool named `name` (empty when unknown).
    fn properties(&self, name: &str) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.tools
            .iter()
            .filter_map(|t| t.get("function"))
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|f| f.pointer("/parameters/properties")?.as_object())
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    fn names<'a>(&'a self, function: &str) -> Names<'a> {
        let props = self.properties(function);
        (!props.is_empty()).then(|| props.keys().map(String::as_str).collect())
    }

    /// A function string (the text after `<function=`, up to its structural `</function>`).
    fn parse_function(&self, s: &str) -> Option<ParsedCall> {
        let end = s.find('>')?;
        let name = &s[..end];
        if !valid_function_name(name) {
            return None; // e.g. an unrendered `<function={{ name }}>` in prose
        }
        let (props, names) = (self.properties(name), self.names(name));
        let params = &s[end + 1..];
        let mut args = Map::new();
        let mut pos = 0;
        while let Some(start) = next_param_start(params, pos, None) {
            let name_start = start + PARAM.len();
            let Some(name_end) = params[name_start..].find('>').map(|e| name_start + e) else { break };
            let param = &params[name_start..name_end];
            let value = &params[name_end + 1..];
            let (raw, next) = match true_param_end(value, names.as_ref(), false) {
                Some(e) => (&value[..e], name_end + 1 + e + PARAM_END.len()),
                // No closing tag: the next known parameter, else the function's end, ends it.
                None => match next_param_start(value, 0, names.as_ref()) {
                    Some(n) => (&value[..n], name_end + 1 + n),
                    None => (true_function_end(value).map_or(value, |f| &value[..f]), params.len()),
                },
            };
            let raw = raw.strip_prefix('\n').unwrap_or(raw);
            let raw = raw.strip_suffix('\n').unwrap_or(raw);
            args.insert(param.to_string(), convert(raw, param, props));
            pos = next;
        }
        Some(ParsedCall { name: name.to_string(), arguments: super::normalized_arguments(&Value::Object(args)) })
    }

    /// Each call's function string, as vLLM's `_get_function_calls` cuts them.
    fn function_strings<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut out = Vec::new();
        for block in call_blocks(text) {
            let Some(f) = block.find(FUNCTION) else { continue };
            let after = &block[f + FUNCTION.len()..];
            let (names, body_start) = match after.find('>') {
                Some(e) => (self.names(&after[..e]), e + 1),
                None => (None, 0),
            };
            let end = scan_function_end(&after[body_start..], names.as_ref())
                .map(|e| body_start + e)
                .or_else(|| true_function_end(after))
                .unwrap_or(after.len());
            out.push(&after[..end]);
        }
        out
    }

    /// The unfinished function body's arguments so far: `{` and each closed parameter.
    fn open_arguments(&self, function: &str, body: &str) -> String {
        let (props, names) = (self.properties(function), self.names(function));
        let mut args = String::from("{");
        let mut pos = 0;
        while let Some(start) = next_param_start(body, pos, None) {
            let name_start = start + PARAM.len();
            let Some(name_end) = body[name_start..].find('>').map(|e| name_start + e) else { break };
            let param = &body[name_start..name_end];
            let value_start = name_end + 1 + usize::from(body[name_end + 1..].starts_with('\n'));
            let Some(e) = true_param_end(&body[value_start..], names.as_ref(), true) else { break };
            let raw = &body[value_start..value_start + e];
            let raw = raw.strip_suffix('\n').unwrap_or(raw);
            if args.len() > 1 {
                args.push_str(", ");
            }
            let key = super::normalized_arguments(&Value::String(param.to_string()));
            args.push_str(&format!("{key}: {}", super::normalized_arguments(&convert(raw, param, props))));
            pos = value_start + e + PARAM_END.len();
        }
        args
    }
}

impl ToolParser for Qwen3Coder {
    fn start_markers(&self) -> &[&str] {
        &[CALL, FUNCTION]
    }

    fn extract(&self, text: &str) -> Extracted {
        let calls: Vec<ParsedCall> = if text.contains(FUNCTION) {
            self.function_strings(text).into_iter().filter_map(|f| self.parse_function(f)).collect()
        } else {
            Vec::new()
        };
        if calls.is_empty() {
            return Extracted { content: Some(text.to_string()), calls };
        }
        Extracted { content: super::content_before(text, content_end(text)), calls }
    }

    /// Calls inside `<tool_call>` blocks: each finished one whole, the open one with its closed
    /// parameters; a next block counts once the previous one's `</tool_call>` is there.
    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(s) = text[pos..].find(CALL) {
            let block_start = pos + s + CALL.len();
            let Some(f) = text[block_start..].find(FUNCTION) else { break };
            let name_start = block_start + f + FUNCTION.len();
            let Some(name_end) = text[name_start..].find('>').map(|e| name_start + e) else { break };
            let name = &text[name_start..name_end];
            if !valid_function_name(name) {
                break;
            }
            let body = &text[name_end + 1..];
            let Some(end) = scan_function_end(body, self.names(name).as_ref()) else {
                out.push(ParsedCall { name: name.to_string(), arguments: self.open_arguments(name, body) });
                break;
            };
            let Some(call) = self.parse_function(&text[name_start..name_end + 1 + end]) else { break };
            out.push(call);
            let after = name_end + 1 + end + FUNCTION_END.len();
            let rest = text[after..].trim_start_matches([' ', '\t', '\n', '\r']);
            if !rest.starts_with(CALL_END) {
                break;
            }
            pos = text.len() - rest.len() + CALL_END.len();
        }
        out
    }

    /// At the end the whole parse: a value cut short ends with the text, and a bare
    /// `<function=...>` counts.
    fn streamed_calls(&self, text: &str, finished: bool) -> Vec<ParsedCall> {
        if finished { self.extract(text).calls } else { self.calls_so_far(text) }
    }

    fn stream_call_id(&self) -> String {
        format!("call_{:024x}", rand::random::<u128>() >> 32)
    }

    fn name_with_arguments(&self) -> bool {
        true
    }
}

/// Where the content ends: at the first `<tool_call>` holding a `<function=`, else at the
/// first bare `<function=`.
fn content_end(text: &str) -> usize {
    let mut pos = 0;
    while let Some(s) = text[pos..].find(CALL) {
        let start = pos + s;
        let inner = start + CALL.len();
        let limit = text[inner..].find(CALL_END).map_or(text.len(), |e| inner + e);
        if text[inner..limit].contains(FUNCTION) {
            return start;
        }
        pos = if limit < text.len() { limit + CALL_END.len() } else { limit };
        if pos >= text.len() {
            break;
        }
    }
    text.find(FUNCTION).unwrap_or(0)
}

/// The insides of the `<tool_call>` blocks (the last may be unclosed); the whole text when
/// there is none (a bare `<function=...>`).
fn call_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(s) = text[pos..].find(CALL) {
        let inner = pos + s + CALL.len();
        match true_end(&text[inner..], CALL_END, CALL) {
            Some(e) => {
                out.push(&text[inner..inner + e]);
                pos = inner + e + CALL_END.len();
            }
            None => {
                out.push(&text[inner..]);
                break;
            }
        }
    }
    if out.is_empty() {
        out.push(text);
    }
    out
}

/// The first `tag` followed (after whitespace) by `next` or by the end of the text.
fn true_end(text: &str, tag: &str, next: &str) -> Option<usize> {
    let mut pos = 0;
    loop {
        let at = pos + text[pos..].find(tag)?;
        let after = text[at + tag.len()..].trim_start();
        if after.is_empty() || after.starts_with(next) {
            return Some(at);
        }
        pos = at + tag.len();
    }
}

/// The structural `</function>`: followed by `</tool_call>` or the end.
fn true_function_end(text: &str) -> Option<usize> {
    true_end(text, FUNCTION_END, CALL_END)
}

/// The next `<parameter=` from `from` that starts a line (or the text), with a name in `names`
/// when given.
fn next_param_start(text: &str, from: usize, names: Option<&HashSet<&str>>) -> Option<usize> {
    let mut pos = from;
    loop {
        let at = pos + text.get(pos..)?.find(PARAM)?;
        if at == 0 || text.as_bytes()[at - 1] == b'\n' {
            let rest = &text[at + PARAM.len()..];
            match names {
                None => return Some(at),
                Some(n) if rest.find('>').is_some_and(|e| n.contains(&rest[..e])) => return Some(at),
                Some(_) => {}
            }
        }
        pos = at + 1;
    }
}

/// The `</parameter>` that ends a value: at nesting depth 0 (a literal `<parameter=..>` inside
/// the value opens a level) and followed by a known parameter, `</function>`, `</tool_call>`,
/// or (unless `lookahead`, i.e. the text may still grow) the end of the text.
fn true_param_end(value: &str, names: Option<&HashSet<&str>>, lookahead: bool) -> Option<usize> {
    let mut depth = 0usize;
    let mut pos = 0;
    while pos < value.len() {
        let close = pos + value[pos..].find(PARAM_END)?;
        match next_param_start(value, pos, None) {
            Some(open) if open < close => {
                depth += 1;
                pos = open + PARAM.len();
            }
            _ if depth > 0 => {
                depth -= 1;
                pos = close + PARAM_END.len();
            }
            _ => {
                let after = value[close + PARAM_END.len()..].trim_start();
                let next_param = after.strip_prefix(PARAM).is_some_and(|rest| match names {
                    None => true,
                    Some(n) => rest.find('>').is_some_and(|e| n.contains(&rest[..e])),
                });
                if (after.is_empty() && !lookahead)
                    || next_param
                    || after.starts_with(FUNCTION_END)
                    || after.starts_with(CALL_END)
                {
                    return Some(close);
                }
                pos = close + PARAM_END.len();
            }
        }
    }
    None
}

/// Walks a function body (after `<function=NAME>`) parameter by parameter to its structural
/// `</function>`; `None` while the body is unfinished. A parameter missing its `</parameter>`
/// ends where the next not-yet-seen parameter starts.
fn scan_function_end(body: &str, names: Option<&HashSet<&str>>) -> Option<usize> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut pos = 0;
    loop {
        pos += body[pos..].len() - body[pos..].trim_start_matches([' ', '\t', '\n', '\r']).len();
        let rest = &body[pos..];
        if rest.is_empty() {
            return None;
        }
        if rest.starts_with(FUNCTION_END) {
            return Some(pos);
        }
        if !rest.starts_with(PARAM) {
            return true_function_end(rest).map(|e| pos + e);
        }
        let name_end = pos + PARAM.len() + rest[PARAM.len()..].find('>')?;
        let name = &body[pos + PARAM.len()..name_end];
        let value_start = name_end + 1 + usize::from(body[name_end + 1..].starts_with('\n'));
        let value = &body[value_start..];
        pos = match true_param_end(value, names, true) {
            Some(e) => value_start + e + PARAM_END.len(),
            None => {
                let unseen: Names =
                    names.map(|n| n.iter().copied().filter(|k| *k != name && !seen.contains(k)).collect());
                value_start + next_param_start(value, 0, unseen.as_ref())?
            }
        };
        seen.insert(name);
    }
}

/// A real function name, not template syntax or prose.
fn valid_function_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['{', '}', '<', '>', '"', '\'', ' ', '\t', '\n', '\r'])
}

/// A parameter's raw text as the value its schema types it to (vLLM's `_convert_param_value`).
fn convert(raw: &str, param: &str, props: &Map<String, Value>) -> Value {
    let text = || Value::String(raw.to_string());
    let Some(schema) = props.get(param) else { return text() };
    let type_name = |t: &Value| t.as_str().map_or(String::new(), |s| s.trim().to_lowercase());
    let (kind, nullable) = if let Some(t) = schema.get("type") {
        (type_name(t), type_name(t) == "null")
    } else if let Some(Value::Array(options)) = schema.get("anyOf") {
        let types: Vec<String> = options.iter().filter_map(|o| o.get("type")).map(type_name).collect();
        let first = types.iter().find(|t| *t != "null").cloned().unwrap_or_else(|| "string".into());
        (first, types.iter().any(|t| t == "null"))
    } else {
        ("string".into(), false)
    };
    let is_null = matches!(raw.to_lowercase().as_str(), "null" | "none");
    if nullable && is_null {
        return Value::Null;
    }
    if ["string", "str", "text", "varchar", "char", "enum"].contains(&kind.as_str()) {
        return text();
    }
    if is_null {
        return Value::Null;
    }
    if ["int", "uint", "long", "short", "unsigned"].iter().any(|p| kind.starts_with(p)) {
        return py_int(raw).unwrap_or_else(text);
    }
    if kind.starts_with("num") || kind.starts_with("float") {
        return py_float(raw).unwrap_or_else(text);
    }
    if ["boolean", "bool", "binary"].contains(&kind.as_str()) {
        return Value::Bool(raw.to_lowercase() == "true");
    }
    let container =
        ["object", "array", "arr"].contains(&kind.as_str()) || kind.starts_with("dict") || kind.starts_with("list");
    if container && let Ok(v) = serde_json::from_str::<Value>(raw) {
        // A JSON string holding a Python repr (a template that wrote `str(dict)`): once more.
        return match &v {
            Value::String(s) => python_literal(s).unwrap_or(v),
            _ => v,
        };
    }
    match python_literal(raw) {
        Some(Value::String(s)) if container => python_literal(&s).unwrap_or(Value::String(s)),
        Some(v) => v,
        None => text(),
    }
}

/// Python's `int(text)`: surrounding whitespace, a sign, `_` between digits.
fn py_int(raw: &str) -> Option<Value> {
    let digits = py_digits(raw.trim())?;
    digits.parse::<i64>().ok().map(Value::from).or_else(|| digits.parse::<u64>().ok().map(Value::from))
}

/// Python's `float(text)`, written back as an integer when it has no fraction (vLLM does so).
fn py_float(raw: &str) -> Option<Value> {
    let f: f64 = py_digits(raw.trim())?.parse().ok().filter(|f: &f64| f.is_finite())?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Some(Value::from(f as i64));
    }
    serde_json::Number::from_f64(f).map(Value::Number)
}

/// `text` without the `_` Python allows between digits (`None` when one is misplaced).
fn py_digits(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let ok = b.iter().enumerate().all(|(i, &c)| {
        c != b'_' || (i > 0 && i + 1 < b.len() && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit())
    });
    ok.then(|| text.replace('_', ""))
}
