//! Each parser on texts its models write, against what vLLM's parser returns for the same text
//! (arguments re-serialized as `json.dumps(.., ensure_ascii=False)`), and streamed split at
//! every character boundary: the same calls and the same content.

use super::*;

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall { name: name.into(), arguments: arguments.into() }
}

/// (parser, model text, content vLLM returns, calls vLLM returns).
fn cases() -> Vec<(&'static str, &'static str, Option<&'static str>, Vec<ParsedCall>)> {
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
    for (name, text, content, calls) in cases() {
        let p = by_name(name).unwrap();
        let got = p.extract(text);
        assert_eq!(got.content.as_deref(), content, "{name}: {text:?}");
        assert_eq!(got.calls, calls, "{name}: {text:?}");
    }
}

/// Streams `text` in two pieces split at `at` (and then in single characters), collecting
/// content and calls.
fn stream(name: &str, pieces: &[&str]) -> (String, Vec<ParsedCall>) {
    let mut s = ToolStream::new(by_name(name).unwrap());
    let (mut content, mut calls) = (String::new(), Vec::new());
    for (i, piece) in pieces.iter().enumerate() {
        let d = s.push(piece, i + 1 == pieces.len());
        content.push_str(&d.content);
        for (index, c) in d.calls {
            assert_eq!(index, calls.len(), "calls arrive in order, each once");
            calls.push(ParsedCall { name: c.name, arguments: c.arguments });
        }
    }
    (content, calls)
}

#[test]
fn streaming_split_anywhere_gives_the_same_calls_and_content() {
    for (name, text, content, calls) in cases() {
        let want_content = content.unwrap_or("");
        let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &at in &bounds {
            let got = stream(name, &[&text[..at], &text[at..]]);
            assert_eq!((got.0.as_str(), &got.1), (want_content, &calls), "{name}: split at {at} of {text:?}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let got = stream(name, &pieces);
        assert_eq!((got.0.as_str(), &got.1), (want_content, &calls), "{name}: char by char {text:?}");
    }
}

#[test]
fn unknown_and_unimplemented_parsers_are_named() {
    assert!(by_name("nope").err().unwrap().contains("unknown tool call parser"));
    assert!(by_name("qwen3_coder").err().unwrap().contains("not implemented yet"));
}
