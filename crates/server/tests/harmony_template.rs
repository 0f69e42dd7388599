//! gpt-oss's real chat template (tests/data/gpt_oss) renders through our minijinja setup
//! byte-identical to transformers (goldens from scripts/goldens/harmony_goldens.py): tools,
//! a developer message, reasoning before a tool call, the tool's result, and the analysis dropped
//! once a final answer follows.

use serde_json::Value;
use vllm_rs_frontend::ChatTemplate;

/// The rendering with the date `strftime_now` writes replaced by `DATE`, as in the goldens.
fn dated(text: &str) -> String {
    const AT: &str = "Current date: ";
    match text.find(AT) {
        Some(i) => format!("{}DATE{}", &text[..i + AT.len()], &text[i + AT.len() + 10..]),
        None => text.to_string(),
    }
}

#[test]
fn gpt_oss_template_renders_like_transformers() {
    let source = std::fs::read_to_string(vllm_rs_testutil::test_data("data/gpt_oss/chat_template.jinja")).unwrap();
    let template = ChatTemplate::new(&source, Some("<|startoftext|>".into()), Some("<|return|>".into())).unwrap();
    let golden = vllm_rs_testutil::golden("harmony/chat_template.json");
    let cases = golden["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let mut extra = case["kwargs"].as_object().unwrap().clone();
        if let Some(tools) = case["tools"].as_array() {
            extra.insert("tools".into(), Value::Array(tools.clone()));
        }
        let got = template
            .render(&case["template_messages"], case["add_generation_prompt"].as_bool().unwrap(), &extra)
            .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        assert_eq!(dated(&got), case["output"].as_str().unwrap(), "{}", case["name"]);
    }
}
