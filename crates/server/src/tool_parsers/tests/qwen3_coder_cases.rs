//! `qwen3_coder` on texts written in the Qwen3-Coder / Qwen3.5 chat templates' call format,
//! with the values vLLM's parser gives (typed by the tools' schemas).

use super::*;

/// The tools offered: strings, integers, numbers, booleans, objects, arrays and nullables.
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "threshold": {"type": "number"}, "exact": {"type": "boolean"}, "filters": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}}, "note": {"type": ["string", "null"]}}}}}
    ])
}

const WEATHER: &str = "I'll check the weather in Paris.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

pub(super) fn cases() -> Vec<(Value, Case)> {
    let cases: Vec<Case> = vec![
        (
            "qwen3_coder",
            WEATHER,
            Some("I'll check the weather in Paris.\n\n"),
            vec![call("get_weather", r#"{"city": "Paris", "days": 3}"#)],
        ),
        // Two calls; a value holding the tags themselves; text after the calls is dropped (as
        // vLLM drops it).
        (
            "qwen3_coder",
            "<tool_call>\n<function=write_file>\n<parameter=path>\nnotes.md\n</parameter>\n<parameter=content>\nUse </parameter> and <tool_call> literally.\nDone.\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\nHope that helps.",
            None,
            vec![
                call(
                    "write_file",
                    r#"{"path": "notes.md", "content": "Use </parameter> and <tool_call> literally.\nDone."}"#,
                ),
                call("get_weather", r#"{"city": "São Paulo", "unit": "celsius"}"#),
            ],
        ),
        // Values typed by the schema: nullable integer, number, boolean, JSON object, Python
        // list literal, a null for a `["string", "null"]` type.
        (
            "qwen3_coder",
            "<tool_call>\n<function=search>\n<parameter=query>\nrust async\n</parameter>\n<parameter=limit>\nNone\n</parameter>\n<parameter=threshold>\n0.75\n</parameter>\n<parameter=exact>\nTrue\n</parameter>\n<parameter=filters>\n{\"lang\": \"en\", \"year\": 2024}\n</parameter>\n<parameter=tags>\n['web', 'docs']\n</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>",
            None,
            vec![call(
                "search",
                r#"{"query": "rust async", "limit": null, "threshold": 0.75, "exact": true, "filters": {"lang": "en", "year": 2024}, "tags": ["web", "docs"], "note": null}"#,
            )],
        ),
        // A missing `</parameter>`: the next declared parameter ends the value.
        (
            "qwen3_coder",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
            None,
            vec![call("get_weather", r#"{"city": "Berlin", "days": 2}"#)],
        ),
        // Cut off by max_tokens inside a value: what is there is the call.
        (
            "qwen3_coder",
            "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n1",
            Some("Let me look.\n"),
            vec![call("get_weather", r#"{"city": "Oslo", "days": 1}"#)],
        ),
        // No parameters; a function the tools do not declare: its values stay strings.
        ("qwen3_coder", "<tool_call>\n<function=now>\n</function>\n</tool_call>", None, vec![call("now", "{}")]),
        (
            "qwen3_coder",
            "<tool_call>\n<function=lookup>\n<parameter=id>\n7\n</parameter>\n<parameter=verbose>\ntrue\n</parameter>\n</function>\n</tool_call>",
            None,
            vec![call("lookup", r#"{"id": "7", "verbose": "true"}"#)],
        ),
        // A bare `<function=...>` (no `<tool_call>`) is still a call.
        (
            "qwen3_coder",
            "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>",
            None,
            vec![call("get_weather", r#"{"city": "Rome"}"#)],
        ),
        // Template syntax in prose is not a call: all content.
        (
            "qwen3_coder",
            "Call it like <tool_call>\n<function={{ name }}>\n</function>\n</tool_call> in your template.",
            Some("Call it like <tool_call>\n<function={{ name }}>\n</function>\n</tool_call> in your template."),
            vec![],
        ),
        ("qwen3_coder", "The weather is fine.", Some("The weather is fine."), vec![]),
    ];
    cases.into_iter().map(|c| (tools(), c)).collect()
}

/// As vLLM streams it: the name with `{` once `<function=NAME>` is complete, each parameter once
/// it is closed, and the last one with `}` at `</function>`.
#[test]
fn arguments_stream_in_fragments_as_parameters_close() {
    let chars: Vec<String> = WEATHER.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    let parser = by_name("qwen3_coder", tools().as_array().unwrap()).unwrap();
    let (_, calls, fragments) = stream(parser, &pieces);
    assert_eq!(calls.len(), 1);
    assert_eq!(fragments[0], vec!["{", r#""city": "Paris""#, r#", "days": 3}"#]);
}

#[test]
fn streamed_ids_are_vllm_s_call_ids() {
    let mut s = ToolStream::new(by_name("qwen3_coder", &[]).unwrap());
    let d = s.push("<tool_call>\n<function=now>\n", false);
    let (id, name) = d.calls[0].header.clone().unwrap();
    assert_eq!((name.as_str(), d.calls[0].arguments.as_str()), ("now", "{"));
    assert!(id.len() == 29 && id.starts_with("call_") && id[5..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
}
