//! gpt-oss's harmony format on the real server (`--tool-call-parser openai`, `--reasoning-parser
//! openai_gptoss`): a tiny random model with a tokenizer holding harmony's special tokens
//! (tests/data/gpt_oss, with gpt-oss's chat template and stop tokens) is made to write a harmony
//! output by a grammar over those tokens. The markers are special tokens, skipped from text by
//! default: the response must still carry the thinking as `reasoning`, the preamble or final
//! answer as `content`, and the call as `tool_calls`, streamed and not, as vLLM gives them. The
//! conversation with a tool call and its result renders as transformers renders the template.

mod common;

use common::{Server, parse_sse};
use serde_json::{Value, json};

fn start() -> Server {
    // The tiny Llama with a longer context: one token per byte makes the tool conversation
    // longer than its 512 (rotary positions have no limit of their own).
    let dir = std::env::temp_dir().join(format!("vllm-rs-harmony-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = vllm_rs_testutil::test_data("data/tiny/llama");
    let mut config: Value = serde_json::from_slice(&std::fs::read(tiny.join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = json!(4096);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(tiny.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let data = vllm_rs_testutil::test_data("data/gpt_oss").to_string_lossy().into_owned();
    let model = dir.to_string_lossy().into_owned();
    let args = [model.as_str(), "--tokenizer", &data, "--generation-config", &data, "--max-model-len", "2048"];
    let s = Server::start_args(
        args.iter().map(|s| s.to_string()).collect(),
        &["--enable-auto-tool-choice", "--tool-call-parser", "openai", "--reasoning-parser", "openai_gptoss"],
    );
    std::fs::remove_dir_all(&dir).unwrap(); // loaded (the weights are mapped)
    s
}

/// A Lark grammar whose only sentence is `harmony`: its markers as special tokens, the text
/// between them as string literals.
fn grammar(harmony: &str) -> String {
    let mut parts = Vec::new();
    let mut rest = harmony;
    while !rest.is_empty() {
        let (text, marker) = match rest.find("<|") {
            Some(i) => {
                let end = rest[i..].find("|>").map(|j| i + j + 2).expect("a closed marker");
                (&rest[..i], &rest[i..end])
            }
            None => (rest, ""),
        };
        if !text.is_empty() {
            parts.push(serde_json::to_string(text).unwrap());
        }
        if !marker.is_empty() {
            parts.push(marker.to_string());
        }
        rest = &rest[text.len() + marker.len()..];
    }
    format!("start: {}", parts.join(" "))
}

/// The tool-call conversation of the goldens, and what transformers renders for it.
fn conversation() -> (Value, String) {
    let golden = vllm_rs_testutil::golden("harmony/chat_template.json");
    let case = golden["cases"].as_array().unwrap().iter().find(|c| c["name"] == "tool_call_and_result").unwrap();
    let body = json!({"messages": case["messages"], "tools": case["tools"], "tool_choice": "auto",
        "temperature": 0, "max_tokens": 200, "return_prompt_text": true});
    (body, case["output"].as_str().unwrap().to_string())
}

fn forced(body: &Value, harmony: &str, extra: Value) -> Value {
    let mut body = body.clone();
    body["structured_outputs"] = json!({"grammar": grammar(harmony)});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

const CALL: &str = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
const ANSWER: &str = "<|channel|>analysis<|message|>It is warm.<|end|><|start|>assistant<|channel|>final<|message|>It is 21 °C in Paris.<|return|>";

/// The date the template writes, as `DATE` (as in the goldens).
fn dated(text: &str) -> String {
    const AT: &str = "Current date: ";
    let i = text.find(AT).expect("a date") + AT.len();
    format!("{}DATE{}", &text[..i], &text[i + 10..])
}

/// A stream's reasoning, content, calls (name, arguments put together) and finish reason.
fn collect(chunks: &[Value]) -> (String, String, Vec<(String, String)>, String) {
    let (mut reasoning, mut content, mut calls, mut finish) = (String::new(), String::new(), Vec::new(), String::new());
    for c in chunks.iter().filter_map(|c| c["choices"].get(0)) {
        let d = &c["delta"];
        reasoning += d["reasoning"].as_str().unwrap_or("");
        content += d["content"].as_str().unwrap_or("");
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if let Some(name) = tc["function"]["name"].as_str() {
                assert_eq!(i, calls.len());
                assert!(tc["id"].as_str().unwrap().starts_with("chatcmpl-tool-"), "{tc}");
                assert_eq!(tc["type"], "function");
                calls.push((name.to_string(), String::new()));
            }
            calls[i].1 += tc["function"]["arguments"].as_str().unwrap_or("");
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (reasoning, content, calls, finish)
}

#[test]
fn harmony_outputs_become_reasoning_content_and_tool_calls() {
    let s = start();
    let (body, prompt) = conversation();

    let r = s.ok("/v1/chat/completions", &forced(&body, CALL, json!({})));
    assert_eq!(dated(r["prompt_text"].as_str().unwrap()), prompt, "the history renders as transformers renders it");
    let c = &r["choices"][0];
    let m = &c["message"];
    assert_eq!((m["reasoning"].as_str(), m["content"].as_str()), (Some("Need the weather."), Some("Checking.")), "{r}");
    let call = &m["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("chatcmpl-tool-"), "{call}");
    assert_eq!(call["function"], json!({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}));
    assert_eq!(m["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(c["finish_reason"], "tool_calls");

    let stream = parse_sse(&s.stream_raw("/v1/chat/completions", &forced(&body, CALL, json!({"stream": true}))));
    let (reasoning, content, calls, finish) = collect(&stream);
    assert_eq!(
        (reasoning.as_str(), content.as_str(), finish.as_str()),
        ("Need the weather.", "Checking.", "tool_calls")
    );
    assert_eq!(calls, vec![("get_weather".to_string(), "{\"city\":\"Paris\"}".to_string())], "as written");

    let r = s.ok("/v1/chat/completions", &forced(&body, ANSWER, json!({})));
    let c = &r["choices"][0];
    assert_eq!(c["message"]["reasoning"], "It is warm.");
    assert_eq!(c["message"]["content"], "It is 21 °C in Paris.");
    assert!(c["message"]["tool_calls"].as_array().is_none_or(Vec::is_empty), "{r}");
    assert_eq!(c["finish_reason"], "stop");
    let stream = parse_sse(&s.stream_raw("/v1/chat/completions", &forced(&body, ANSWER, json!({"stream": true}))));
    let got = collect(&stream);
    assert_eq!(
        (got.0.as_str(), got.1.as_str(), got.2.len(), got.3.as_str()),
        ("It is warm.", "It is 21 °C in Paris.", 0, "stop")
    );

    // include_reasoning false drops the thinking; the answer stays.
    let r = s.ok("/v1/chat/completions", &forced(&body, ANSWER, json!({"include_reasoning": false})));
    assert!(r["choices"][0]["message"].get("reasoning").is_none_or(Value::is_null), "{r}");
    assert_eq!(r["choices"][0]["message"]["content"], "It is 21 °C in Paris.");
}

#[test]
fn harmony_parsers_are_listed() {
    let bin = env!("CARGO_BIN_EXE_vllm-rs");
    let help = std::process::Command::new(bin).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("openai (gpt-oss harmony)") && help.contains("openai_gptoss"), "{help}");
    // That both refuse a tokenizer without harmony's markers is checked with the other parsers'
    // start-up checks (serve_structured.rs).
}
