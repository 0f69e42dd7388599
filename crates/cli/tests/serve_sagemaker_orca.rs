//! SageMaker's `/invocations` (dispatched on the body's fields, as vLLM does) and ORCA load
//! reports (`endpoint-load-metrics-format` in, `endpoint-load-metrics` out on non-streaming
//! completion and chat answers).

mod common;

use common::Server;
use serde_json::json;
use std::io::{Read, Write};

#[test]
fn invocations_dispatch_on_the_request_fields() {
    let s = Server::start(&[]);
    let chat = s.ok("/invocations", &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}));
    assert_eq!(chat["object"], "chat.completion");
    let text = s.ok("/invocations", &json!({"prompt": "Hello", "max_tokens": 3}));
    assert_eq!(text["object"], "text_completion");
    let (status, r) = s.post("/invocations", &json!({"input": "x"}));
    assert_eq!(status, 400, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("Cannot find suitable handler"), "{r}");

    let minilm = vllm_rs_testutil::hf_dir("minilm").to_string_lossy().into_owned();
    let e = Server::start_args(vec![minilm], &[]);
    let emb = e.ok("/invocations", &json!({"input": ["a b c"]}));
    assert_eq!(emb["data"][0]["object"], "embedding");
    let rerank = e.ok("/invocations", &json!({"query": "q", "documents": ["a", "b"]}));
    assert_eq!(rerank["results"].as_array().unwrap().len(), 2);
}

/// The raw response head of a POST (headers lower-cased).
fn head_of(s: &Server, path: &str, body: &str, extra: &str) -> String {
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out.split("\r\n\r\n").next().unwrap().to_ascii_lowercase()
}

#[test]
fn orca_load_reports_follow_the_requested_format() {
    let s = Server::start(&[]);
    let body = r#"{"prompt": "Hello", "max_tokens": 2}"#;
    let text = head_of(&s, "/v1/completions", body, "endpoint-load-metrics-format: text\r\n");
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(
        text.contains(
            "endpoint-load-metrics: text named_metrics.kv_cache_usage_perc=0.0, named_metrics.num_requests_waiting=0.0"
        ),
        "{text}"
    );
    let chat = r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#;
    let json = head_of(&s, "/v1/chat/completions", chat, "endpoint-load-metrics-format: JSON\r\n");
    assert!(json.contains(r#"endpoint-load-metrics: json {"named_metrics": {"kv_cache_usage_perc": "#), "{json}");
    assert!(!head_of(&s, "/v1/completions", body, "").contains("endpoint-load-metrics"));
    let stream = r#"{"prompt": "Hello", "max_tokens": 2, "stream": true}"#;
    assert!(
        !head_of(&s, "/v1/completions", stream, "endpoint-load-metrics-format: text\r\n")
            .contains("endpoint-load-metrics:")
    );
}
