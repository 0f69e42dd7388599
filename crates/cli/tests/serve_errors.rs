//! Every rejected request gets the right 4xx in vLLM's error shape, names the offending field,
//! and leaves the server healthy.

mod common;

use common::Server;
use serde_json::{Value, json};

const KEY: &str = "test-key";

/// Asserts vLLM's `{"error": {"message", "type", "param", "code"}}` with this status and param.
fn assert_error(what: &str, got: (u16, Value), status: u16, param: Option<&str>) {
    let (st, body) = got;
    assert_eq!(st, status, "{what}: {body}");
    let e = &body["error"];
    assert_eq!(e["code"], status, "{what}: {body}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
    assert!(e["type"].as_str().is_some_and(|t| !t.is_empty()), "{what}: {body}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{what}: {body}");
    }
}

#[test]
fn errors_have_vllm_shape_and_leave_the_server_healthy() {
    let s = Server::start(&[
        "--api-key",
        KEY,
        "--max-prompt-chars",
        "2000",
        "--max-new-tokens",
        "500",
        "--max-request-body-bytes",
        "100000",
        "--served-model-name",
        "smol",
    ]);
    let post = |path: &str, body: Value| s.post_auth(path, &body, Some(KEY));
    let ok_body = json!({"prompt": "Hello", "max_tokens": 2});

    // Authentication: every route but /health.
    // A missing or wrong key: the OpenAI error object, as every other error.
    assert_error("no key", s.post("/v1/completions", &ok_body), 401, None);
    assert_error("wrong key", s.post_auth("/v1/completions", &ok_body, Some("wrong")), 401, None);
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(s.get("/metrics").0, 401);
    assert_eq!(s.get("/v1/models").0, 401);
    let auth = format!("Bearer {KEY}");
    assert_eq!(s.get_with("/v1/models", &[("Authorization", &auth)]).0, 200);
    assert_eq!(post("/v1/completions", ok_body.clone()).0, 200);
    // Anthropic's SDKs send the key as `x-api-key`; a 401 on /v1/messages is in Anthropic's shape.
    let body = json!({"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}).to_string();
    let json_ct = ("Content-Type", "application/json");
    assert_eq!(s.post_raw("/v1/messages", &body, &[json_ct, ("x-api-key", KEY)]).0, 200);
    assert_eq!(s.post_raw("/v1/completions", &ok_body.to_string(), &[json_ct, ("x-api-key", KEY)]).0, 200);
    let (status, text) = s.post_raw("/v1/messages", &body, &[json_ct, ("x-api-key", "wrong")]);
    let err: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
    assert_eq!(
        (status, err["type"].as_str(), err["error"]["type"].as_str()),
        (401, Some("error"), Some("authentication_error"))
    );

    // Body problems.
    let raw = |body: &str, ct: &str| {
        let (st, text) = s.post_raw("/v1/completions", body, &[("Content-Type", ct), ("Authorization", &auth)]);
        (st, serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{st}: {text}")))
    };
    assert_error("bad JSON", raw("{\"prompt\": ", "application/json"), 400, Some("body"));
    assert_error("not an object", raw("[1, 2]", "application/json"), 400, Some("body"));
    assert_error("text/plain", raw("{\"prompt\": \"x\"}", "text/plain"), 400, None);
    let huge = json!({"prompt": "x".repeat(150_000)}).to_string();
    assert_error("oversize body", raw(&huge, "application/json"), 413, None);

    // Wrong types name the field, as pydantic's loc.
    assert_error(
        "temperature type",
        post("/v1/completions", json!({"prompt": "x", "temperature": "hot"})),
        400,
        Some("body.temperature"),
    );
    assert_error(
        "max_tokens type",
        post("/v1/completions", json!({"prompt": "x", "max_tokens": "5"})),
        400,
        Some("body.max_tokens"),
    );
    assert_error("prompt type", post("/v1/completions", json!({"prompt": {"a": 1}})), 400, Some("body.prompt"));
    assert_error("messages type", post("/v1/chat/completions", json!({"messages": "hi"})), 400, Some("body.messages"));
    assert_error(
        "missing messages",
        post("/v1/chat/completions", json!({"model": "smol"})),
        400,
        Some("body.messages"),
    );

    // Unknown and unsupported fields are never silently ignored.
    // An unknown field is accepted (and logged), as vLLM does.
    let ignored = |s: &Server| {
        let (_, text) = s.get_with("/metrics", &[("Authorization", &auth)]);
        let line = text.lines().find(|l| l.starts_with("vllm_rs:request_ignored_fields_total")).expect("the counter");
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    let before = ignored(&s);
    assert_eq!(post("/v1/completions", json!({"prompt": "x", "max_tokens": 1, "max_token": 5, "mx": 1})).0, 200);
    assert_eq!(ignored(&s), before + 2.0, "each ignored field counts in /metrics");
    assert!(s.log().contains("ignored: [\"max_token\", \"mx\"]"), "{}", s.log());
    assert_error(
        "response_format",
        post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}),
        ),
        400,
        Some("response_format"),
    );
    // Tools without a tool_choice mean "auto", which needs --enable-auto-tool-choice (vLLM's rule).
    assert_error(
        "tools",
        post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
              "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ),
        400,
        Some("tool_choice"),
    );
    assert_error(
        "guided_json",
        post("/v1/completions", json!({"prompt": "x", "guided_json": {}})),
        400,
        Some("guided_json"),
    );
    assert_error(
        "watermarking",
        post("/v1/completions", json!({"prompt": "x", "watermarking": true})),
        400,
        Some("watermarking"),
    );
    // ...but their "off" values, which clients send by default, are fine.
    let neutral = post(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "tools": null, "tool_choice": "none",
               "response_format": {"type": "text"}, "user": "u", "store": false, "parallel_tool_calls": true}),
    );
    assert_eq!(neutral.0, 200, "{}", neutral.1);

    // Unknown model.
    let (st, body) = post("/v1/completions", json!({"model": "gpt-4", "prompt": "x"}));
    assert_error("unknown model", (st, body.clone()), 404, Some("model"));
    assert_eq!(body["error"]["type"], "NotFoundError");

    // Lengths: prompt over the context, max_tokens over the context, the guards.
    let long_ids: Vec<u32> = vec![28; 2100];
    assert_error(
        "prompt > max_model_len",
        post("/v1/completions", json!({"prompt": long_ids})),
        400,
        Some("input_tokens"),
    );
    let long_text = "hello ".repeat(330); // 1980 characters: under the guard, fine
    assert_eq!(post("/v1/completions", json!({"prompt": long_text, "max_tokens": 1})).0, 200);
    assert_error(
        "max_tokens > max_model_len",
        post("/v1/completions", json!({"prompt": "x", "max_tokens": 3000})),
        400,
        Some("max_tokens"),
    );
    assert_error(
        "max_tokens > --max-new-tokens",
        post("/v1/completions", json!({"prompt": "x", "max_tokens": 501})),
        400,
        Some("max_tokens"),
    );
    assert_error(
        "max_completion_tokens > max_model_len",
        post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 4096}),
        ),
        400,
        Some("max_completion_tokens"),
    );
    assert_error(
        "--max-prompt-chars",
        post("/v1/completions", json!({"prompt": "y".repeat(2001)})),
        400,
        Some("prompt"),
    );
    assert_error(
        "--max-prompt-chars chat",
        post("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "y".repeat(2001)}]})),
        400,
        Some("messages"),
    );
    assert_error(
        "max_tokens 0",
        post("/v1/completions", json!({"prompt": "x", "max_tokens": 0})),
        400,
        Some("max_tokens"),
    );

    // Values out of range, with vLLM's messages.
    let (st, body) = post("/v1/completions", json!({"prompt": "x", "temperature": 3}));
    assert_error("temperature range", (st, body.clone()), 400, Some("temperature"));
    assert!(body["error"]["message"].as_str().unwrap().contains("temperature must be in [0, 2], got 3"), "{body}");
    assert_error("top_p", post("/v1/completions", json!({"prompt": "x", "top_p": 0})), 400, Some("top_p"));
    assert_error("n greedy", post("/v1/completions", json!({"prompt": "x", "n": 2, "temperature": 0})), 400, Some("n"));
    assert_error("n zero", post("/v1/completions", json!({"prompt": "x", "n": 0})), 400, Some("n"));
    assert_error("empty prompt", post("/v1/completions", json!({"prompt": ""})), 400, Some("prompt"));
    assert_error("no prompt", post("/v1/completions", json!({"max_tokens": 3})), 400, Some("prompt"));
    assert_error("empty token prompt", post("/v1/completions", json!({"prompt": [[]]})), 400, Some("prompt"));
    assert_error("out-of-vocab prompt", post("/v1/completions", json!({"prompt": [99999999]})), 400, Some("prompt"));
    assert_error(
        "stream_options",
        post("/v1/completions", json!({"prompt": "x", "stream_options": {"include_usage": true}})),
        400,
        Some("stream_options"),
    );
    assert_error(
        "logprobs > max",
        post("/v1/completions", json!({"prompt": "x", "logprobs": 50})),
        400,
        Some("logprobs"),
    );
    assert_error(
        "top_logprobs without logprobs",
        post("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})),
        400,
        Some("top_logprobs"),
    );
    assert_error(
        "prompt_logprobs with stream",
        post("/v1/completions", json!({"prompt": "x", "prompt_logprobs": 1, "stream": true})),
        400,
        Some("prompt_logprobs"),
    );
    assert_error("empty stop", post("/v1/completions", json!({"prompt": "x", "stop": [""]})), 400, Some("stop"));
    assert_error(
        "logit_bias key",
        post("/v1/completions", json!({"prompt": "x", "logit_bias": {"abc": 1}})),
        400,
        Some("logit_bias"),
    );
    assert_error(
        "stop_token_ids vocab",
        post("/v1/completions", json!({"prompt": "x", "stop_token_ids": [99999999]})),
        400,
        Some("stop_token_ids"),
    );
    assert_error(
        "image content",
        post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ),
        400,
        Some("messages"),
    );
    assert_error(
        "request chat template",
        post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"}),
        ),
        400,
        Some("chat_template"),
    );
    assert_error("detokenize vocab", post("/detokenize", json!({"tokens": [99999999]})), 400, Some("tokens"));

    // Unknown paths and methods, as FastAPI answers them.
    let (st, body) = s.get_with("/v1/nope", &[("Authorization", &auth)]);
    assert_eq!((st, serde_json::from_str::<Value>(&body).unwrap()), (404, json!({"detail": "Not Found"})));
    let (st, _) = s.get_with("/v1/completions", &[("Authorization", &auth)]);
    assert_eq!(st, 405);

    // Still healthy and serving; nothing left running.
    assert_eq!(s.get("/health").0, 200);
    let (st, body) = post("/v1/completions", json!({"prompt": "Hello", "max_tokens": 3, "ignore_eos": true}));
    assert_eq!(st, 200);
    assert_eq!(body["usage"]["completion_tokens"], 3);
    let (_, metrics) = s.get_with("/metrics", &[("Authorization", &auth)]);
    assert!(metrics.contains("vllm:num_requests_running{engine=\"0\",model_name=\"smol\"} 0.0"), "{metrics}");
}

/// `--api-key-scope v1`: vLLM's narrower scope, where only `/v1/...` needs the key.
#[test]
fn api_key_scope_v1_guards_only_the_v1_paths() {
    let s = Server::start(&["--api-key", KEY, "--api-key-scope", "v1"]);
    assert_eq!(s.get("/metrics").0, 200, "a Prometheus scrape needs no key");
    assert_eq!(s.post("/tokenize", &json!({"prompt": "Hello"})).0, 200);
    assert_eq!(s.get("/v1/models").0, 401);
    assert_error("no key", s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 1})), 401, None);
    let auth = format!("Bearer {KEY}");
    assert_eq!(s.get_with("/v1/models", &[("Authorization", &auth)]).0, 200);
}
