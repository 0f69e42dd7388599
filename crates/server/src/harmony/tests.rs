//! The harmony reader on the outputs vLLM's own tests give its `HarmonyParser`
//! (`tests/parser/test_harmony.py`), written out as gpt-oss generates them (what openai-harmony
//! renders after the prompt's `<|start|>assistant`), against the reasoning, content and calls
//! vLLM expects; and streamed, split at every character boundary and character by character.

use super::*;

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall { name: name.into(), arguments: arguments.into() }
}

/// (output, reasoning, content, calls) of a whole parse.
type Case = (&'static str, Option<&'static str>, Option<&'static str>, Vec<ParsedCall>);

const TOKYO: &str = r#"{"location": "Tokyo"}"#;

fn cases() -> Vec<Case> {
    vec![
        ("<|channel|>analysis<|message|>This is reasoning<|end|>", Some("This is reasoning"), None, vec![]),
        ("<|channel|>final<|message|>This is a test<|return|>", None, Some("This is a test"), vec![]),
        (
            "<|channel|>analysis<|message|>I should think first.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.<|return|>",
            Some("I should think first."),
            Some("The answer is 4."),
            vec![],
        ),
        // A call on either channel; its JSON re-serialized.
        (
            " to=functions.get_current_weather<|channel|>commentary json<|message|>{\n\"location\": \"Tokyo\"\n}<|call|>",
            None,
            None,
            vec![call("get_current_weather", TOKYO)],
        ),
        (
            " to=functions.get_current_weather<|channel|>analysis json<|message|>{\"location\": \"Tokyo\"}<|call|>",
            None,
            None,
            vec![call("get_current_weather", TOKYO)],
        ),
        // Content types: none (JSON assumed), non-JSON text, empty arguments.
        (
            " to=functions.get_current_weather<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|><|start|>assistant to=functions.no_content_type<|channel|>commentary<|message|>{\"location\": \"Tokyo\"}<|call|><|start|>assistant to=functions.not_json_no_content_type<|channel|>commentary<|message|>foo<|call|><|start|>assistant to=functions.empty_args<|channel|>commentary json<|message|>{}<|call|><|start|>assistant to=functions.no_args<|channel|>commentary json<|message|><|call|>",
            None,
            None,
            vec![
                call("get_current_weather", TOKYO),
                call("no_content_type", TOKYO),
                call("not_json_no_content_type", "foo"),
                call("empty_args", "{}"),
                call("no_args", ""),
            ],
        ),
        // Bare and dotted recipients are calls; the assistant is not.
        (
            " to=get_current_weather<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|><|start|>assistant to=math.sum<|channel|>commentary json<|message|>{\"a\": 2, \"b\": 3}<|call|>",
            None,
            None,
            vec![call("get_current_weather", TOKYO), call("math.sum", r#"{"a": 2, "b": 3}"#)],
        ),
        (
            " to=assistant<|channel|>commentary<|message|>Some tool response<|call|><|start|>assistant<|channel|>final<|message|>Here is the answer<|return|>",
            None,
            Some("Here is the answer"),
            vec![],
        ),
        // Built-in tools are not functions.
        (
            "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"query\": \"x\"}<|call|>",
            None,
            None,
            vec![],
        ),
        (
            "<|channel|>analysis<|message|>User asked about the weather.<|end|><|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|><|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|return|>",
            Some("User asked about the weather."),
            Some("This tool call will get the weather."),
            vec![call("get_current_weather", TOKYO)],
        ),
        // Cut short: the open message still counts.
        (
            "<|channel|>final<|message|>I'm in the middle of answering",
            None,
            Some("I'm in the middle of answering"),
            vec![],
        ),
        (
            "<|channel|>analysis<|message|>I'm in the middle of thinking",
            Some("I'm in the middle of thinking"),
            None,
            vec![],
        ),
        (
            "<|channel|>analysis<|message|>I'm thinking.<|end|><|start|>assistant<|channel|>final<|message|>I'm in the middle of answering",
            Some("I'm thinking."),
            Some("I'm in the middle of answering"),
            vec![],
        ),
        // A header that never ends: kept as content, markers and all.
        (
            "<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>commentary<|message|>thinking<|end|><|start|>assistant<|channel|>final {\"answer\": \"hi\"}<|return|>",
            Some("thinking"),
            Some("thinking\n<|start|>assistant<|channel|>final {\"answer\": \"hi\"}<|return|>"),
            vec![],
        ),
        // Preambles (commentary without a recipient) are content, joined by newlines.
        ("<|channel|>commentary<|message|>I'll search for that", None, Some("I'll search for that"), vec![]),
        (
            "<|channel|>commentary<|message|>Let me look that up.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 42.<|end|>",
            None,
            Some("Let me look that up.\nThe answer is 42."),
            vec![],
        ),
        (
            "<|channel|>commentary<|message|>Let me check the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary<|message|>{\"location\": \"SF\"}<|end|>",
            None,
            Some("Let me check the weather."),
            vec![call("get_weather", r#"{"location": "SF"}"#)],
        ),
        // The recipient may follow the channel; `<|constrain|>` marks the content type.
        (
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Zürich\"}<|call|>",
            None,
            None,
            vec![call("get_weather", r#"{"city": "Z\u00fcrich"}"#)],
        ),
        (
            "<|channel|>final <|constrain|>json<|message|>{\"result\":true}<|end|>",
            None,
            Some("{\"result\":true}"),
            vec![],
        ),
        ("", None, None, vec![]),
    ]
}

#[test]
fn whole_outputs_read_as_vllm_reads_them() {
    for (text, reasoning, content, calls) in cases() {
        let p = parse(text);
        assert_eq!((p.reasoning.as_deref(), p.content.as_deref()), (reasoning, content), "{text:?}");
        assert_eq!(p.calls, calls, "{text:?}");
    }
}

#[test]
fn a_header_harmony_refuses_is_content_and_reading_goes_on() {
    let text = "<|channel|>commentary to=functions.get_weather to=functions.get_weather<|message|>{}<|call|>";
    let p = parse(text);
    assert!(p.calls.is_empty());
    assert!(p.content.as_deref().unwrap().starts_with("<|channel|>commentary to=functions.get_weather"), "{p:?}");
    let mut r = Reader::default();
    let events = r.feed("<|channel|>final to=a to=b<|message|>", false);
    assert!(matches!(&events[..], [Event::Text { .. }, Event::Done(_)]), "{events:?}");
    let after = r.feed("<|channel|>final<|message|>hi<|return|>", false);
    let text: String = after
        .iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            Event::Done(_) => None,
        })
        .collect();
    assert_eq!(text, "hi");
}

/// What a stream of `pieces` sent: reasoning, content, and the calls put back together;
/// checks each call opens once, in order, with a fresh id.
fn stream(pieces: &[&str]) -> (String, String, Vec<ParsedCall>) {
    let mut s = Stream::default();
    let (mut reasoning, mut content, mut calls) = (String::new(), String::new(), Vec::<ParsedCall>::new());
    let mut ids = std::collections::HashSet::new();
    for (i, piece) in pieces.iter().enumerate() {
        let step = s.push(piece, i + 1 == pieces.len());
        reasoning += &step.reasoning;
        content += &step.content;
        for d in step.calls {
            let index = d["index"].as_u64().unwrap() as usize;
            let args = d["function"]["arguments"].as_str().unwrap();
            if let Some(name) = d["function"]["name"].as_str() {
                assert_eq!(index, calls.len(), "calls open in order");
                assert_eq!(d["type"], "function");
                assert!(ids.insert(d["id"].as_str().unwrap().to_string()), "a fresh id per call");
                calls.push(call(name, args));
            } else {
                assert_eq!(index + 1, calls.len(), "arguments go to the open call");
                calls[index].arguments += args;
            }
        }
    }
    (reasoning, content, calls)
}

/// What vLLM's stream sends for a case: the arguments as written (not re-serialized), and the
/// content pieces of several messages one after another.
fn streamed(
    text: &str,
    reasoning: Option<&str>,
    content: Option<&str>,
    calls: &[ParsedCall],
) -> (String, String, Vec<ParsedCall>) {
    let mut raw_calls = Vec::new();
    let mut raw_content = String::new();
    for event in Reader::default().feed(text, true) {
        let Event::Done(m) = event else { continue };
        match kind(m.header.channel.as_deref(), m.header.recipient.as_deref()) {
            Kind::Call => raw_calls.push(call(&function_name(m.header.recipient.as_deref().unwrap()), &m.text)),
            Kind::Content => raw_content += &m.text,
            _ => {}
        }
    }
    assert_eq!(raw_calls.len(), calls.len());
    assert_eq!(raw_content.is_empty(), content.is_none());
    (reasoning.unwrap_or("").to_string(), raw_content, raw_calls)
}

#[test]
fn streams_split_anywhere_send_what_the_whole_output_holds() {
    for (text, reasoning, content, calls) in cases() {
        let want = streamed(text, reasoning, content, &calls);
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(stream(&[&text[..at], &text[at..]]), want, "{text:?} split at {at}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(stream(&pieces), want, "{text:?} char by char");
    }
}

/// vLLM's `test_tool_call_split_across_deltas`, `test_multi_tool_interleaved`: a call opens
/// with the arguments of its first piece; later pieces carry the index only.
#[test]
fn calls_open_with_their_first_arguments_and_continue_by_index() {
    let mut s = Stream::default();
    let first = s.push(
        "<|channel|>analysis<|message|>Plan<|end|><|start|>assistant to=functions.tool_a<|channel|>commentary<|constrain|>json<|message|>{\"a\": 1}<|call|><|start|>assistant to=functions.tool_b<|channel|>commentary<|constrain|>json<|message|>{\"b\": ",
        false,
    );
    assert_eq!(first.reasoning, "Plan");
    let entries = |calls: &[Value]| -> Vec<(u64, Option<String>, String)> {
        calls
            .iter()
            .map(|c| {
                let f = &c["function"];
                (
                    c["index"].as_u64().unwrap(),
                    f["name"].as_str().map(String::from),
                    f["arguments"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(
        entries(&first.calls),
        vec![(0, Some("tool_a".into()), "{\"a\": 1}".into()), (1, Some("tool_b".into()), "{\"b\": ".into())]
    );
    assert_eq!(entries(&s.push("2", false).calls), vec![(1, None, "2".into())]);
    let third = s.push(
        "}<|call|><|start|>assistant<|channel|>final<|message|>Done<|end|><|start|>assistant to=functions.tool_c<|channel|>commentary<|constrain|>json<|message|>{\"c\": 3}",
        false,
    );
    assert_eq!(third.content, "Done");
    assert_eq!(entries(&third.calls), vec![(1, None, "}".into()), (2, Some("tool_c".into()), "{\"c\": 3}".into())]);
    // A header read alone opens its call with empty arguments.
    let mut s = Stream::default();
    let open = s.push(" to=functions.f<|channel|>commentary json<|message|>", false);
    assert_eq!(entries(&open.calls), vec![(0, Some("f".into()), String::new())]);
}
