//! `/v1/responses` and `/v1/messages` on the real server (SmolLM2), checked from Rust: bad
//! input answered 4xx in each API's own error shape, stored responses (GET, DELETE, the store's
//! bound, `store: false`, a bad bound at start-up), count_tokens against the chat template's token
//! count, and output formats (`text.format`, `output_config.format`) constraining the output.

mod common;

use common::Server;
use serde_json::{Value, json};

/// The `data:` JSON of each `event:` of a named-event SSE body, with its event name.
fn named_events(raw: &str) -> Vec<(String, Value)> {
    raw.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (head, data) = e.split_once('\n').unwrap_or_else(|| panic!("not a named event: {e:?}"));
            let name = head.strip_prefix("event: ").unwrap_or_else(|| panic!("no event name: {e:?}"));
            let data = data.strip_prefix("data: ").unwrap_or_else(|| panic!("no data: {e:?}"));
            (name.to_string(), serde_json::from_str(data).unwrap_or_else(|err| panic!("{data}: {err}")))
        })
        .collect()
}

/// An OpenAI-shaped 4xx naming `param`.
fn openai_error(s: &Server, path: &str, body: Value, status: u16, param: &str, words: &str) {
    let (code, v) = s.post(path, &body);
    assert_eq!(code, status, "{body} -> {v}");
    let e = &v["error"];
    assert_eq!(e["code"], json!(status), "{v}");
    assert_eq!(e["param"].as_str(), Some(param), "{body} -> {v}");
    assert!(e["message"].as_str().is_some_and(|m| m.contains(words)), "{body} -> {v}");
}

/// An Anthropic-shaped 4xx: `{"type": "error", "error": {"type", "message"}}`.
fn anthropic_error(s: &Server, path: &str, body: Value, status: u16, kind: &str, words: &str) {
    let (code, v) = s.post(path, &body);
    assert_eq!(code, status, "{body} -> {v}");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{body} -> {v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(words)), "{body} -> {v}");
    assert!(v.get("detail").is_none() && v["error"].get("code").is_none(), "{v}");
}

#[test]
fn bad_input_is_4xx_in_each_apis_error_shape() {
    let s = Server::start(&[]);
    let r = "/v1/responses";
    openai_error(&s, r, json!({"max_output_tokens": 2}), 400, "body.input", "input");
    openai_error(&s, r, json!({"input": 5}), 400, "body.input", "input");
    let image = json!([{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]);
    openai_error(&s, r, json!({"input": image}), 400, "input", "input_image");
    openai_error(&s, r, json!({"input": "x", "tools": [{"type": "web_search"}]}), 400, "tools", "web_search");
    openai_error(&s, r, json!({"input": "x", "background": true}), 400, "background", "not supported");
    openai_error(&s, r, json!({"input": "x", "max_output_tokens": 0}), 400, "max_output_tokens", "max_output_tokens");
    openai_error(&s, r, json!({"input": "x", "temperature": -1}), 400, "temperature", "temperature");
    openai_error(&s, r, json!({"input": "x", "model": "nope"}), 404, "model", "nope");
    openai_error(&s, r, json!({"input": "x", "previous_response_id": "resp_0"}), 404, "previous_response_id", "resp_0");
    let (code, v) = s.post(r, &json!({"input": "x", "max_output_tokens": 1, "some_other_servers_field": 1}));
    assert_eq!(code, 200, "unknown fields are accepted with a warning, as vLLM does: {v}");

    let m = "/v1/messages";
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    anthropic_error(&s, m, json!({"messages": msgs}), 400, "invalid_request_error", "max_tokens");
    anthropic_error(&s, m, json!({"max_tokens": 2}), 400, "invalid_request_error", "messages");
    anthropic_error(&s, m, json!({"max_tokens": 0, "messages": msgs}), 400, "invalid_request_error", "max_tokens");
    let robot = json!([{"role": "robot", "content": "Hi"}]);
    anthropic_error(&s, m, json!({"max_tokens": 2, "messages": robot}), 400, "invalid_request_error", "robot");
    let image = json!([{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}]);
    anthropic_error(&s, m, json!({"max_tokens": 2, "messages": image}), 400, "invalid_request_error", "Image");
    let stops = json!(["a", "b", "c", "d", "e"]);
    anthropic_error(
        &s,
        m,
        json!({"max_tokens": 2, "messages": msgs, "stop_sequences": stops}),
        400,
        "invalid_request_error",
        "stop_sequences",
    );
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    anthropic_error(
        &s,
        m,
        json!({"max_tokens": 2, "messages": msgs, "tools": tools}),
        400,
        "invalid_request_error",
        "auto",
    );
    anthropic_error(&s, m, json!({"max_tokens": 2, "messages": msgs, "model": "nope"}), 404, "not_found_error", "nope");
    let c = "/v1/messages/count_tokens";
    anthropic_error(&s, c, json!({"system": "x"}), 400, "invalid_request_error", "messages");
    anthropic_error(&s, c, json!({"messages": robot}), 400, "invalid_request_error", "robot");
    let (code, text) = s.post_raw(m, "{", &[("Content-Type", "application/json")]);
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("\"type\":\"error\"") && text.contains("invalid_request_error"), "{text}");
}

#[test]
fn stored_responses_get_delete_and_the_bound() {
    let s = Server::start_with_env(&[], &[("VLLM_RS_MAX_STORED_RESPONSES", "2")]);
    let ask = |store: Option<bool>| {
        let mut body = json!({"input": "Say hi.", "max_output_tokens": 3, "temperature": 0});
        if let Some(st) = store {
            body["store"] = json!(st);
        }
        s.ok("/v1/responses", &body)
    };
    let first = ask(None);
    let id = first["id"].as_str().unwrap().to_string();
    let (code, got) = s.get(&format!("/v1/responses/{id}"));
    assert_eq!(code, 200);
    assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), first, "GET returns the stored response");

    // A stream is stored too, as its last event's response.
    let raw = s.stream_raw("/v1/responses", &json!({"input": "Say hi.", "max_output_tokens": 3, "stream": true}));
    let events = named_events(&raw);
    let (name, last) = events.last().unwrap();
    assert!(name == "response.completed" || name == "response.incomplete", "{raw}");
    let streamed_id = last["response"]["id"].as_str().unwrap();
    let (code, got) = s.get(&format!("/v1/responses/{streamed_id}"));
    assert_eq!((code, serde_json::from_str::<Value>(&got).unwrap()), (200, last["response"].clone()));
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!((data["type"].as_str(), data["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)));
    }

    // The bound (2): a third stored response pushes out the first.
    let third = ask(Some(true));
    assert_eq!(s.get(&format!("/v1/responses/{id}")).0, 404, "the oldest went");
    assert_eq!(s.get(&format!("/v1/responses/{streamed_id}")).0, 200);
    let third_id = third["id"].as_str().unwrap();
    let unstored = ask(Some(false));
    assert_eq!(s.get(&format!("/v1/responses/{}", unstored["id"].as_str().unwrap())).0, 404, "store: false");
    assert_eq!(s.get(&format!("/v1/responses/{streamed_id}")).0, 200, "an unstored response evicts nothing");

    let (code, body) = s.post_raw(&format!("/v1/responses/{third_id}/cancel"), "", &[]);
    assert!(code == 400 && body.contains("Cannot cancel a synchronous response."), "{code} {body}");
    let (code, body) = s.delete(&format!("/v1/responses/{third_id}"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"id": third_id, "object": "response", "deleted": true})
    );
    let (code, body) = s.get(&format!("/v1/responses/{third_id}"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((code, v["error"]["code"].clone()), (404, json!(404)), "{body}");
    assert!(v["error"]["message"].as_str().unwrap().contains(third_id), "{body}");
    assert_eq!(s.delete(&format!("/v1/responses/{third_id}")).0, 404);
    assert_eq!(s.post_raw(&format!("/v1/responses/{third_id}/cancel"), "", &[]).0, 404);
    openai_error(
        &s,
        "/v1/responses",
        json!({"input": "x", "previous_response_id": third_id}),
        404,
        "previous_response_id",
        third_id,
    );
}

#[test]
fn count_tokens_is_the_chat_templates_token_count() {
    let s = Server::start(&[]);
    let system = "You answer in one word.";
    let messages = json!([
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris"}]},
        {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "Italy?"}]},
    ]);
    let counted = s.ok("/v1/messages/count_tokens", &json!({"system": system, "messages": messages}));
    let chat = json!([
        {"role": "system", "content": system},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And Italy?"},
    ]);
    let tokenized = s.ok("/tokenize", &json!({"messages": chat}));
    assert_eq!(counted["input_tokens"], tokenized["count"], "{counted} vs {tokenized}");
    assert!(counted["input_tokens"].as_u64().unwrap() > 10);
    let created = s.ok("/v1/messages", &json!({"system": system, "messages": messages, "max_tokens": 1}));
    assert_eq!(created["usage"]["input_tokens"], counted["input_tokens"]);

    // A final assistant message is a prefill: the prompt ends inside it, and the reply continues it.
    let prefill =
        json!([{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "The capital is"}]);
    let counted = s.ok("/v1/messages/count_tokens", &json!({"messages": prefill}));
    let body = json!({"messages": prefill, "continue_final_message": true, "add_generation_prompt": false});
    let tokenized = s.ok("/tokenize", &body);
    assert_eq!(counted["input_tokens"], tokenized["count"], "{counted} vs {tokenized}");
    let ids = tokenized["tokens"].as_array().unwrap();
    let (_, tail) = s.post("/detokenize", &json!({"tokens": ids[ids.len() - 3..]}));
    assert!(tail["prompt"].as_str().unwrap().ends_with("capital is"), "{tail}");
    let created = s.ok("/v1/messages", &json!({"messages": prefill, "max_tokens": 2, "temperature": 0}));
    assert_eq!(created["usage"]["input_tokens"], counted["input_tokens"]);
}

#[test]
fn output_formats_constrain_both_apis() {
    let s = Server::start(&[]);
    // A bounded name and greedy decoding: the object always closes within the token limit.
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}},
        "required": ["name"], "additionalProperties": false});
    let ask = json!([{"role": "user", "content": "Give a user record."}]);
    let body = json!({"max_tokens": 80, "temperature": 0, "messages": ask,
        "output_config": {"format": {"type": "json_schema", "schema": schema}}});
    let m = s.ok("/v1/messages", &body);
    let text = m["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {m}"));
    assert!(v["name"].is_string() && v.as_object().unwrap().len() == 1, "{m}");
    let format = json!({"type": "json_schema", "name": "user", "schema": schema});
    let r = s.ok(
        "/v1/responses",
        &json!({"input": "Give a user record.", "max_output_tokens": 80, "temperature": 0, "text": {"format": format}}),
    );
    let text = r["output"][0]["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {r}"));
    assert!(v["name"].is_string() && v.as_object().unwrap().len() == 1, "{r}");
    assert_eq!(r["text"]["format"], format, "the response repeats the format");
}

#[test]
fn a_store_bound_that_is_not_a_count_stops_start_up_naming_it() {
    let model = vllm_rs_testutil::gguf_path("smollm2");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-rs"))
        .args(["serve", model.to_str().unwrap(), "--host", "127.0.0.1", "--port", "0"])
        .env("VLLM_RS_MAX_STORED_RESPONSES", "lots")
        .output()
        .expect("run vllm-rs serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("VLLM_RS_MAX_STORED_RESPONSES=\"lots\" is not a count"), "{stderr}");
}
