//! What a chat choice's generated text becomes, whole and streamed: the model's text is
//! arbitrary, so every reasoning parser and every tool parser (with `auto`, `required` and a
//! named tool) must take any text, in any split into deltas, without a panic. Where nothing
//! shapes the text, the streamed content must be the text itself.
//!
//! Input: the first byte picks the reasoning parser, whether thinking is open at the start, the
//! tool choice and `include_reasoning`; the second the `auto` parser; the rest is the text,
//! deltas separated by \u{2}.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use vllm_rs_server::chat_output::OutputPlan;
use vllm_rs_server::reasoning::ReasoningParser;
use vllm_rs_server::tool_parsers;

const REASONING: [Option<ReasoningParser>; 5] = [
    None,
    Some(ReasoningParser::Qwen3),
    Some(ReasoningParser::DeepSeekR1),
    Some(ReasoningParser::Granite),
    Some(ReasoningParser::GptOss),
];

fn plan(pick: u8, parser: u8) -> OutputPlan {
    let reasoning = REASONING[pick as usize % REASONING.len()].map(|p| (p, pick & 0x08 != 0));
    let choice = match (pick >> 4) & 3 {
        0 => json!("none"),
        1 => json!("auto"),
        2 => json!("required"),
        _ => json!({"type": "function", "function": {"name": "get_weather"}}),
    };
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
    ]);
    let setup = vllm_rs_server::tools::parse(Some(&tools), Some(&choice), None, true).expect("valid tools");
    let auto_parser = tool_parsers::NAMES[parser as usize % tool_parsers::NAMES.len()].to_string();
    OutputPlan { reasoning, include_reasoning: pick & 0x40 == 0, tools: setup, auto_parser: Some(auto_parser) }
}

fuzz_target!(|data: &[u8]| {
    let [pick, parser, rest @ ..] = data else { return };
    let text = String::from_utf8_lossy(rest);
    let plan = plan(*pick, *parser);
    let deltas: Vec<&str> = text.split('\u{2}').collect();
    let whole: String = deltas.concat();
    let _ = plan.message(&whole);
    let mut stream = plan.stream();
    let shapes = stream.shapes();
    let mut content = String::new();
    for (i, d) in deltas.iter().enumerate() {
        let parts = stream.push(d, i + 1 == deltas.len());
        content.push_str(&parts.content);
    }
    if !shapes {
        assert_eq!(content, whole);
    }
});
