//! Structured outputs and tool calling on the real server with real models (issue 30): every
//! JSON-schema output parses and validates (the `jsonschema` crate), regex / choice / Lark
//! grammars hold, `tool_choice` required and named give calls that validate against the tool's
//! schema (streamed the same as not), and bad inputs are 400s that leave the server healthy.

mod common;

use common::Server;
use serde_json::{Value, json};

fn schemas() -> Vec<Value> {
    vec![
        // Nested objects.
        json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 30},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 30}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": false}},
            "required": ["name", "address"], "additionalProperties": false}),
        // Arrays.
        json!({"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
            "qty": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["name", "qty"],
            "additionalProperties": false}}}, "required": ["items"], "additionalProperties": false}),
        // Enums. (A confidence in [0, 1] as a number: greedy Qwen writes 0.000… until max_tokens,
        // which JSON allows; a percentage keeps this schema about the enum.)
        json!({"type": "object", "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "confidence_percent": {"type": "integer", "minimum": 0, "maximum": 100}},
            "required": ["sentiment", "confidence_percent"], "additionalProperties": false}),
        // Bounded numbers.
        json!({"type": "object", "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "minimum": -180, "maximum": 180},
            "floors": {"type": "integer", "minimum": 0, "maximum": 200}},
            "required": ["lat", "lon", "floors"], "additionalProperties": false}),
        // No extra properties, optional ones, booleans.
        json!({"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 40}, "done": {"type": "boolean"},
            "priority": {"enum": [1, 2, 3]}},
            "required": ["title", "done"], "additionalProperties": false}),
    ]
}

const PROMPTS: [&str; 3] = [
    "Describe the Eiffel Tower as JSON.",
    "Give me an example record for a shopping app, as JSON.",
    "Answer in JSON: how do people feel about Mondays?",
];

/// Every prompt × schema, sent at once (one batch), as chat with `response_format`; and each
/// schema once as a completion with `structured_outputs.json`.
fn check_schemas(s: &Server, prompts: &[&str]) {
    let jobs: Vec<(Value, Value, &str)> = schemas()
        .into_iter()
        .flat_map(|schema| {
            let for_chat = schema.clone();
            let chats = prompts.iter().map(move |p| {
                let body = json!({"messages": [{"role": "user", "content": p}], "max_tokens": 200, "temperature": 0,
                    "response_format": {"type": "json_schema",
                        "json_schema": {"name": "answer", "schema": for_chat, "strict": true}}});
                (for_chat.clone(), body, "/v1/chat/completions")
            });
            let completion = json!({"prompt": format!("{}\nThe record as one line of JSON: ", prompts[0]),
                "max_tokens": 200, "temperature": 0, "structured_outputs": {"json": schema}});
            chats.chain(std::iter::once((schema.clone(), completion, "/v1/completions")))
        })
        .collect();
    let outputs: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(_, body, path)| {
                scope.spawn(move || {
                    let r = s.ok(path, body);
                    let c = &r["choices"][0];
                    let text = c["message"]["content"].as_str().or(c["text"].as_str()).unwrap().to_string();
                    (text, c["finish_reason"].as_str().unwrap().to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((schema, _, path), (text, finish)) in jobs.iter().zip(&outputs) {
        assert_eq!(finish, "stop", "{path}: the grammar ended the output before max_tokens: {text:?}");
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text:?}"));
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{path}: {text} does not validate against {schema}: {errors:?}");
    }
}

#[test]
fn json_schema_outputs_always_parse_and_validate() {
    let qwen = Server::start_model(&vllm_rs_testutil::gguf_path("qwen05"), &[]);
    check_schemas(&qwen, &PROMPTS);
    // json_object: any object.
    let r = qwen.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Name and age of a famous cat, as a JSON object."}],
            "max_tokens": 100, "temperature": 0, "response_format": {"type": "json_object"}}),
    );
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{text}");
    assert!(serde_json::from_str::<Value>(text).unwrap().is_object(), "{text}");
    drop(qwen);
    let smol = Server::start(&[]);
    check_schemas(&smol, &PROMPTS[..2]);
}

fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "calculate", "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 40}},
                "required": ["expression"], "additionalProperties": false}}}
    ])
}

fn tool_schema(tools: &Value, name: &str) -> Value {
    let t = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == name).unwrap();
    t["function"]["parameters"].clone()
}

/// The calls of a response, each checked against its tool's schema.
fn checked_calls(tools: &Value, message: &Value) -> Vec<(String, Value)> {
    let calls = message["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool_calls: {message}"));
    calls
        .iter()
        .map(|c| {
            assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-tool-"), "{c}");
            assert_eq!(c["type"], "function");
            let name = c["function"]["name"].as_str().unwrap().to_string();
            let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            let schema = tool_schema(tools, &name);
            assert!(jsonschema::is_valid(&schema, &args), "{name}({args}) against {schema}");
            (name, args)
        })
        .collect()
}

/// A stream's tool calls put back together: (name, arguments text) per index.
fn streamed_calls(chunks: &[Value]) -> (Vec<(String, String)>, Option<String>) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = None;
    for c in chunks.iter().filter_map(|c| c["choices"].get(0)) {
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        for tc in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if let Some(name) = tc["function"]["name"].as_str() {
                assert_eq!(i, calls.len(), "a new call's name comes once, in order");
                calls.push((name.to_string(), String::new()));
            }
            calls[i].1 += tc["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    (calls, finish)
}

#[test]
fn grammars_and_tool_choices_constrain_the_output() {
    let s = Server::start_model(
        &vllm_rs_testutil::gguf_path("qwen05"),
        &["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    );
    let complete = |extra: Value| {
        let mut body = json!({"prompt": "My favourite thing is", "max_tokens": 24, "temperature": 0});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s.ok("/v1/completions", &body)
    };
    let r = complete(json!({"structured_outputs": {"regex": "[A-Z][a-z]{2,8} [0-9]{2}"}}));
    let t = r["choices"][0]["text"].as_str().unwrap();
    let (word, num) = t.split_once(' ').unwrap();
    assert!(word.chars().next().unwrap().is_ascii_uppercase() && word[1..].chars().all(|c| c.is_ascii_lowercase()));
    assert!(num.len() == 2 && num.chars().all(|c| c.is_ascii_digit()), "{t:?}");
    // n > 1: each sequence has its own grammar state.
    let r = complete(json!({"structured_outputs": {"choice": ["red", "green", "blue"]}, "n": 4, "temperature": 1.0,
        "seed": 3}));
    for c in r["choices"].as_array().unwrap() {
        assert!(["red", "green", "blue"].contains(&c["text"].as_str().unwrap()), "{c}");
    }
    let r =
        complete(json!({"structured_outputs": {"grammar": "start: \"yes\" | \"no\" \" \" NUM\nNUM: /[1-9][0-9]?/"},
        "logprobs": 2}));
    let t = r["choices"][0]["text"].as_str().unwrap();
    let ok = t == "yes" || t.strip_prefix("no ").is_some_and(|n| n.parse::<u32>().is_ok_and(|n| (1..100).contains(&n)));
    assert!(ok, "{t:?}");
    // Masked tokens have -inf raw logprobs: the chosen ones are finite, as in vLLM.
    for lp in r["choices"][0]["logprobs"]["token_logprobs"].as_array().unwrap() {
        assert!(lp.as_f64().unwrap().is_finite());
    }

    let tools = weather_tools();
    let ask = |content: &str, choice: Value, stream: bool| {
        json!({"messages": [{"role": "user", "content": content}], "tools": tools, "tool_choice": choice,
            "max_tokens": 120, "temperature": 0, "stream": stream})
    };
    let mut product_call = Value::Null;
    for q in ["What's the weather like in Paris today?", "What is 17 times 23?", "Is it raining in Tokyo?"] {
        let r = s.ok("/v1/chat/completions", &ask(q, json!("required"), false));
        let c = &r["choices"][0];
        if q.contains("17") {
            product_call = c["message"]["tool_calls"][0].clone();
        }
        assert_eq!(c["finish_reason"], "tool_calls", "{r}");
        let calls = checked_calls(&tools, &c["message"]);
        assert!(!calls.is_empty());
        let (streamed, finish) = streamed_calls(&s.stream("/v1/chat/completions", &ask(q, json!("required"), true)));
        let want: Vec<(String, String)> = c["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (t["function"]["name"].as_str().unwrap().into(), t["function"]["arguments"].as_str().unwrap().into())
            })
            .collect();
        assert_eq!((streamed, finish.as_deref()), (want, Some("tool_calls")), "{q}");
    }
    let named = json!({"type": "function", "function": {"name": "calculate"}});
    let r = s.ok("/v1/chat/completions", &ask("Weather in Rome?", named.clone(), false));
    let c = &r["choices"][0];
    assert_eq!(c["finish_reason"], "stop", "a named function finishes with stop, as OpenAI");
    assert_eq!(checked_calls(&tools, &c["message"])[0].0, "calculate");
    let (streamed, _) = streamed_calls(&s.stream("/v1/chat/completions", &ask("Weather in Rome?", named, true)));
    assert_eq!(streamed[0].1, c["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap());

    // Round trip: the call, its result as a `tool` message, then the answer in words.
    let call = product_call;
    assert_eq!(call["function"]["name"], "calculate", "{call}");
    let history = json!([
        {"role": "user", "content": "What is 17 times 23?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "391"}
    ]);
    let r = s.ok(
        "/v1/chat/completions",
        &json!({"messages": history, "tools": tools, "max_tokens": 40,
        "temperature": 0}),
    );
    let answer = r["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    assert!(answer.contains("391"), "{r}");
}

#[test]
fn bad_inputs_are_400s_and_the_server_stays_healthy() {
    let s = Server::start(&["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]);
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s.post("/v1/chat/completions", &body)
    };
    let tools = weather_tools();
    for (extra, param, says) in [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "colour"}}}}),
            "response_format",
            "Invalid grammar",
        ),
        (json!({"structured_outputs": {"regex": "(unclosed"}}), "structured_outputs", "Invalid grammar"),
        (json!({"structured_outputs": {"regex": "a", "choice": ["a"]}}), "structured_outputs", "one kind"),
        (json!({"structured_outputs": {"grammar": "start: missing_rule"}}), "structured_outputs", "Invalid grammar"),
        (
            json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
            "has not been passed",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]}),
            "body.tools.0.function.parameters",
            "dictionary",
        ),
        (json!({"tool_choice": "required"}), "tool_choice", "`tools` must be set"),
        (json!({"guided_json": {"type": "object"}}), "guided_json", "not supported"),
        (json!({"priority": 5}), "priority", "Priority scheduling is not enabled"),
        (json!({"thinking_token_budget": 5}), "thinking_token_budget", "--reasoning-parser"),
        (json!({"thinking_token_budget": 1.5}), "thinking_token_budget", "non-negative integer"),
    ] {
        let (status, body) = chat(extra.clone());
        assert_eq!(status, 400, "{extra}: {body}");
        assert_eq!(body["error"]["param"], param, "{extra}: {body}");
        assert_eq!(body["error"]["code"], 400);
        assert!(body["error"]["message"].as_str().unwrap().contains(says), "{extra}: {body}");
    }
    // Unsatisfiable: an empty choice list compiles to nothing.
    let (status, body) = s.post("/v1/completions", &json!({"prompt": "x", "structured_outputs": {"choice": []}}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(s.get("/health").0, 200);
    let r = chat(json!({"structured_outputs": {"choice": ["ok"]}}));
    assert_eq!((r.0, r.1["choices"][0]["message"]["content"].as_str()), (200, Some("ok")));
    let (status, body) = chat(json!({"response_format": {"type": "structural_tag", "format": {"type": "any_text"}}}));
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("response_format")), "{body}");

    // A structural tag whose trigger is a space: the words are free, and every space goes on
    // into `<n>digit</n>`.
    let tag = json!({"type": "structural_tag", "triggers": [" "],
        "structures": [{"begin": " <n>", "schema": {"type": "integer", "minimum": 0, "maximum": 9}, "end": "</n>"}]});
    let (status, r) = chat(json!({"response_format": tag, "max_tokens": 40, "temperature": 0}));
    assert_eq!(status, 200, "{r}");
    let text = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let mut rest = text.as_str();
    let mut structures = 0;
    while let Some(i) = rest.find(' ') {
        if " <n>".starts_with(&rest[i..]) {
            break; // cut by max_tokens inside a begin
        }
        let tag =
            rest[i..].strip_prefix(" <n>").unwrap_or_else(|| panic!("a space not starting a structure: {text:?}"));
        let Some(end) = tag.find("</n>") else { break }; // or inside one
        assert!(tag[..end].trim().parse::<u8>().is_ok_and(|d| d <= 9), "{text:?}");
        structures += 1;
        rest = &tag[end + 4..];
    }
    assert!(structures > 0, "the model wrote no space at all: {text:?}");
}

#[test]
fn tool_and_reasoning_flags_are_checked_at_start() {
    let bin = env!("CARGO_BIN_EXE_vllm-rs");
    let model = vllm_rs_testutil::gguf_path("smollm2");
    for (flags, says) in [
        (vec!["--enable-auto-tool-choice"], "`--tool-call-parser` must be set"),
        (vec!["--tool-call-parser", "nope"], "unknown tool call parser"),
        (vec!["--tool-parser-plugin", "p.py"], "Python"),
        (vec!["--reasoning-parser", "nope"], "--reasoning-parser"),
        // SmolLM2 has no <think> token: a reasoning parser cannot work on it.
        (vec!["--reasoning-parser", "qwen3"], "no <think> token"),
        // Nor the <tool_call> tokens qwen3_coder's format is made of.
        (vec!["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"], "needs the <tool_call> token"),
        // Nor harmony's markers (gpt-oss).
        (vec!["--enable-auto-tool-choice", "--tool-call-parser", "openai"], "needs the <|start|> token"),
        (vec!["--reasoning-parser", "gpt_oss"], "needs the <|start|> token"),
    ] {
        let out = std::process::Command::new(bin)
            .args(["serve", model.to_str().unwrap(), "--port", "0", "--host", "127.0.0.1"])
            .args(["--max-model-len", "512", "--kv-cache-memory", "64MiB"])
            .args(&flags)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

#[test]
fn priority_is_taken_under_the_priority_policy() {
    let s = Server::start(&["--scheduling-policy", "priority"]);
    let r = s.ok("/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2, "priority": -3}));
    assert_eq!(r["choices"][0]["finish_reason"], "length");
}
