//! SageMaker's `/invocations` (dispatched on the body's fields, as vLLM does) and ORCA load
//! reports (`endpoint-load-metrics-format` in, `endpoint-load-metrics` out on non-streaming
//! completion and chat answers), and vLLM's `GET /load` (requests in flight).

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

fn server_load(s: &Server) -> u64 {
    let (status, body) = s.get("/load");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["server_load"].as_u64().unwrap()
}

/// `--enable-server-load-tracking`: a stream counts while it runs, and stops counting when its
/// client goes away; without the flag `/load` says 0, as vLLM's does.
#[test]
fn load_counts_requests_in_flight_when_tracking_is_on() {
    let s = Server::start(&["--enable-server-load-tracking"]);
    assert_eq!(server_load(&s), 0);
    let body = json!({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true}).to_string();
    let mut conn = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut first = [0u8; 256];
    assert!(conn.read(&mut first).unwrap() > 0, "the stream started");
    assert_eq!(server_load(&s), 1, "the running stream counts");
    drop(conn);
    let t0 = std::time::Instant::now();
    while server_load(&s) != 0 {
        assert!(t0.elapsed().as_secs() < 10, "a dropped stream still counts after 10 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s.ok("/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2}));
    assert_eq!(server_load(&s), 0, "a finished request no longer counts");

    let off = Server::start(&[]);
    assert_eq!(server_load(&off), 0);
}
