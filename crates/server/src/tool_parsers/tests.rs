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

/// The formats whose calls do not depend on the tools' schemas.
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
        (LLAMA_CUT.0, LLAMA_CUT.1, Some(LLAMA_CUT.1), vec![]),
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
        ("pythonic", "Sure: [f()]", Some("Sure: [f()]"), vec![]),
        (PYTHONIC_CUT.0, PYTHONIC_CUT.1, Some(PYTHONIC_CUT.1), vec![]),
        // DeepSeek-V3: the arguments as written (vLLM does not re-serialize them).
        (
            "deepseek_v3",
            "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"tz\":\"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            Some("Let me check."),
            vec![call("get_weather", r#"{"city": "Paris"}"#), call("get_time", r#"{"tz":"CET"}"#)],
        ),
        (DEEPSEEK_CUT.0, DEEPSEEK_CUT.1, Some(DEEPSEEK_CUT.1), vec![]),
        (DEEPSEEK_CODE.0, DEEPSEEK_CODE.1, Some(DEEPSEEK_CODE.1), vec![]),
        ("deepseek_v3", "No tools needed.", Some("No tools needed."), vec![]),
        (
            "granite",
            "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Boston\"}}, {\"name\": \"now\", \"arguments\": {}}]",
            None,
            vec![call("get_weather", r#"{"city": "Boston"}"#), call("now", "{}")],
        ),
        (
            "granite",
            "<tool_call>[{\"name\":\"f\",\"arguments\":{\"a\":[1,2]}}]",
            None,
            vec![call("f", r#"{"a": [1, 2]}"#)],
        ),
        ("granite", "The list is [1, 2].", Some("The list is [1, 2]."), vec![]),
        ("granite", "[{\"name\": \"f\"}]", Some("[{\"name\": \"f\"}]"), vec![]),
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

/// DeepSeek-V3 cut short inside the arguments: no call in the whole parse.
const DEEPSEEK_CUT: (&str, &str) =
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"x\": 1");

/// Llama cut short inside its arguments: no call in the whole parse, but a stream has sent the
/// name and the arguments' final part.
const LLAMA_CUT: (&str, &str) = ("llama3_json", "{\"name\": \"f\", \"parameters\": {\"x\": \"a\\u00e9b");

/// Pythonic cut short in its second call: the whole parse has no calls, the stream has sent
/// the first.
const PYTHONIC_CUT: (&str, &str) = ("pythonic", "[get_weather(city='Oslo'), now(tz='CE");

/// A call type other than `function`: vLLM's response model refuses it, all is content.
const DEEPSEEK_CODE: (&str, &str) = (
    "deepseek_v3",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>code<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
);

/// What vLLM's stream sends where it is not the whole parse: hermes streams the arguments'
/// raw text (spacing as the model wrote it), and the streaming parsers send a call's name and
/// arguments before the call is known to parse. (parser, text, content, calls).
fn streams_differ() -> Vec<(&'static str, &'static str, &'static str, Vec<ParsedCall>)> {
    vec![
        (
            "hermes",
            "Let me check.\n<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":[2.5,\"é\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
            "Let me check.\n",
            vec![call("add", r#"{"a":1,"b":[2.5,"é"]}"#), call("now", "{}")],
        ),
        ("hermes", "<tool_call>\n{\"name\": \"f\", \"argu", "", vec![call("f", "")]),
        (DEEPSEEK_CUT.0, DEEPSEEK_CUT.1, "", vec![call("f", r#"{"x": 1"#)]),
        (DEEPSEEK_CODE.0, DEEPSEEK_CODE.1, "", vec![call("f", "{}")]),
        ("granite", "[{\"name\": \"f\"}]", "", vec![call("f", "")]),
        (LLAMA_CUT.0, LLAMA_CUT.1, "", vec![call("f", r#"{"x": "aéb"#)]),
        (PYTHONIC_CUT.0, PYTHONIC_CUT.1, "", vec![call("get_weather", r#"{"city": "Oslo"}"#)]),
    ]
}

/// What a stream of `text` sends in all: the whole parse's content and calls, but for vLLM's
/// stream where that differs.
fn streamed_expectation(
    name: &str,
    text: &str,
    content: Option<&str>,
    calls: &[ParsedCall],
) -> (String, Vec<ParsedCall>) {
    match streams_differ().into_iter().find(|(p, t, ..)| *p == name && *t == text) {
        Some((_, _, content, calls)) => (content.to_string(), calls),
        None => (content.unwrap_or("").to_string(), calls.to_vec()),
    }
}

#[test]
fn streaming_split_anywhere_gives_the_same_calls_and_content() {
    for (tools, (name, text, content, calls)) in cases() {
        let parser = || by_name(name, tools.as_array().unwrap()).unwrap();
        let want = streamed_expectation(name, text, content, &calls);
        let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &at in &bounds {
            let got = stream(parser(), &[&text[..at], &text[at..]]);
            assert_eq!((got.0, got.1), want, "{name}: split at {at} of {text:?}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let got = stream(parser(), &pieces);
        assert_eq!((got.0, got.1), want, "{name}: char by char {text:?}");
        // Spacing aside, the stream's arguments are the whole parse's.
        for (s, w) in want.1.iter().zip(&calls) {
            let parsed = |a: &str| serde_json::from_str::<Value>(a).ok();
            assert!(s.arguments.is_empty() || parsed(&s.arguments) == parsed(&w.arguments), "{text:?}");
        }
    }
}

#[test]
fn hermes_streams_arguments_as_they_are_written() {
    let text = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"code\": \"if a { b }\", \"n\": 2}}\n</tool_call>";
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    let (_, calls, fragments) = stream(by_name("hermes", &[]).unwrap(), &pieces);
    assert_eq!(calls, vec![call("write", r#"{"code": "if a { b }", "n": 2}"#)]);
    assert!(fragments[0].len() > 10, "the arguments arrive piece by piece: {:?}", fragments[0]);
    assert_eq!(fragments[0][0], "{", "{:?}", fragments[0]);
}

#[test]
fn json_formats_stream_the_final_part_of_the_arguments() {
    for (name, text, want) in [
        (
            "llama3_json",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"days\":3}}",
            r#"{"city": "Oslo", "days": 3}"#,
        ),
        ("mistral", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\", \"days\": 2}", r#"{"city": "Rome", "days": 2}"#),
        (
            "mistral",
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
            r#"{"city": "Rome"}"#,
        ),
        (
            "granite",
            "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Boston\"}}]",
            r#"{"city": "Boston"}"#,
        ),
    ] {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let (_, calls, fragments) = stream(by_name(name, &[]).unwrap(), &pieces);
        assert_eq!(calls, vec![call("get_weather", want)], "{name}");
        assert!(fragments[0].len() >= 8, "{name}: arguments piece by piece: {:?}", fragments[0]);
        assert_eq!(fragments[0][0], "{", "{name}: {:?}", fragments[0]);
    }
}

#[test]
fn parsers_made_of_tokens_need_them_in_the_tokenizer() {
    let qwen = |t: &str| ["<tool_call>", "</tool_call>"].contains(&t);
    assert!(check_tokenizer("qwen3_coder", qwen).is_ok());
    assert!(check_tokenizer("hermes", |_| false).is_ok(), "hermes reads plain text");
    let e = check_tokenizer("deepseek_v3", qwen).unwrap_err();
    assert!(e.contains("<｜tool▁calls▁begin｜>"), "{e}");
}

#[test]
fn unknown_and_unimplemented_parsers_are_named() {
    let e = by_name("nope", &[]).err().unwrap();
    assert!(e.contains("unknown tool call parser") && e.contains("qwen3_coder"), "{e}");
    assert!(by_name("kimi_k2", &[]).err().unwrap().contains("not implemented yet"));
    for name in NAMES {
        assert!(check_name(name).is_ok(), "{name}");
        assert_eq!(by_name(name, &[]).is_ok(), *name != HARMONY, "{name}");
    }
    assert!(check_name("nope").unwrap_err().contains("unknown tool call parser"));
}

mod qwen3_coder_cases;
