//! Each parser on texts its models write, against what vLLM's parser returns for the same text
//! (arguments re-serialized as `json.dumps(.., ensure_ascii=False)`), and streamed split at
//! every character boundary: the same calls and the same content, each call's id, type and name
//! exactly once.

use super::*;
use serde_json::json;

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall { name: name.into(), arguments: arguments.into() }
}

type Case = (&'static str, &'static str, Option<&'static str>, Vec<ParsedCall>);

/// (parser, model text, content vLLM returns, calls vLLM returns), with the request's tools.
fn cases() -> Vec<(Value, Case)> {
    let no_tools = || json!([]);
    let mut all: Vec<(Value, Case)> = json_format_cases().into_iter().map(|c| (no_tools(), c)).collect();
    all.extend(qwen3_coder_cases::cases());
    all
}

/// The formats whose arguments are JSON text (the tools' schemas play no part).
fn json_format_cases() -> Vec<Case> {
    vec![
        (
            "hermes",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
            None,
            vec![call("get_weather", r#"{"city": "Paris", "unit": "celsius"}"#)],
        ),
        (
            "hermes",
            "Let me check.\n<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":[2.5,\"é\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
            Some("Let me check.\n"),
            vec![call("add", r#"{"a": 1, "b": [2.5, "é"]}"#), call("now", "{}")],
        ),
        // Unclosed at the end (max_tokens hit right after the object): still a call.
        (
            "hermes",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": true}}",
            None,
            vec![call("f", r#"{"x": true}"#)],
        ),
        // Malformed: the whole text is content.
        ("hermes", "<tool_call>\n{\"name\": \"f\", \"argu", Some("<tool_call>\n{\"name\": \"f\", \"argu"), vec![]),
        ("hermes", "Paris is sunny.", Some("Paris is sunny."), vec![]),
        (
            "llama3_json",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"now\", \"parameters\": {}}",
            None,
            vec![call("get_weather", r#"{"city": "Oslo"}"#), call("now", "{}")],
        ),
        (
            "llama3_json",
            "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"n\": 3}}",
            None,
            vec![call("f", r#"{"n": 3}"#)],
        ),
        ("llama3_json", "No tools needed.", Some("No tools needed."), vec![]),
        (
            "mistral",
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
            None,
            vec![call("get_weather", r#"{"city": "Rome"}"#)],
        ),
        (
            "mistral",
            "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]now[ARGS]{}",
            Some("Sure."),
            vec![call("get_weather", r#"{"city": "Rome"}"#), call("now", "{}")],
        ),
        (
            "pythonic",
            "[get_weather(city='San Francisco', metric=\"celsius\"), get_time(), \nadd(a=1, b=-2.5, opts={'x': [True, None]})]",
            None,
            vec![
                call("get_weather", r#"{"city": "San Francisco", "metric": "celsius"}"#),
                call("get_time", "{}"),
                call("add", r#"{"a": 1, "b": -2.5, "opts": {"x": [true, null]}}"#),
            ],
        ),
        ("pythonic", "The weather is [unknown].", Some("The weather is [unknown]."), vec![]),
        ("pythonic", "[f(x='unclosed)]", Some("[f(x='unclosed)]"), vec![]),
    ]
}

#[test]
fn whole_texts_parse_as_vllm_parses_them() {
    for (tools, (name, text, content, calls)) in cases() {
        let p = by_name(name, tools.as_array().unwrap()).unwrap();
        let got = p.extract(text);
        assert_eq!(got.content.as_deref(), content, "{name}: {text:?}");
        assert_eq!(got.calls, calls, "{name}: {text:?}");
    }
}

/// What a stream of `pieces` sent: its content, its calls put back together, and each call's
/// argument fragments. Checks that each call's header (id, name) comes once, first, in order.
fn stream(parser: Box<dyn ToolParser>, pieces: &[&str]) -> (String, Vec<ParsedCall>, Vec<Vec<String>>) {
    let mut s = ToolStream::new(parser);
    let (mut content, mut calls, mut fragments) = (String::new(), Vec::new(), Vec::<Vec<String>>::new());
    let mut ids = std::collections::HashSet::new();
    for (i, piece) in pieces.iter().enumerate() {
        let d = s.push(piece, i + 1 == pieces.len());
        content.push_str(&d.content);
        for c in d.calls {
            match c.header {
                Some((id, name)) => {
                    assert_eq!(c.index, calls.len(), "calls start in order, each once");
                    assert!(ids.insert(id), "a fresh id per call");
                    calls.push(ParsedCall { name, arguments: String::new() });
                    fragments.push(Vec::new());
                }
                None => assert!(c.index + 1 == calls.len(), "arguments go to the latest call"),
            }
            calls[c.index].arguments.push_str(&c.arguments);
            if !c.arguments.is_empty() {
                fragments[c.index].push(c.arguments);
            }
        }
    }
    assert_eq!(s.called(), !calls.is_empty());
    (content, calls, fragments)
}

#[test]
fn streaming_split_anywhere_gives_the_same_calls_and_content() {
    for (tools, (name, text, content, calls)) in cases() {
        let parser = || by_name(name, tools.as_array().unwrap()).unwrap();
        let want_content = content.unwrap_or("");
        let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &at in &bounds {
            let got = stream(parser(), &[&text[..at], &text[at..]]);
            assert_eq!((got.0.as_str(), &got.1), (want_content, &calls), "{name}: split at {at} of {text:?}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let got = stream(parser(), &pieces);
        assert_eq!((got.0.as_str(), &got.1), (want_content, &calls), "{name}: char by char {text:?}");
    }
}

#[test]
fn unknown_and_unimplemented_parsers_are_named() {
    let e = by_name("nope", &[]).err().unwrap();
    assert!(e.contains("unknown tool call parser") && e.contains("qwen3_coder"), "{e}");
    assert!(by_name("openai", &[]).err().unwrap().contains("not implemented yet"));
    for name in NAMES {
        assert!(by_name(name, &[]).is_ok(), "{name}");
    }
}

mod qwen3_coder_cases;
