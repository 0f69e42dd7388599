//! Concurrency and disconnects: 32 streams at once all complete (with the tokens each gets
//! alone), and a client that goes away aborts its request and frees its KV blocks — seen
//! through `/metrics`.

mod common;

use common::{Server, eventually, read_events};
use serde_json::{Value, json};
use std::time::Duration;

const PROMPTS: [&str; 4] = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"];

#[test]
fn concurrent_streams_and_disconnects() {
    let s = Server::start(&[]);
    let solo: Vec<String> = PROMPTS
        .iter()
        .map(|p| {
            let r =
                s.ok("/v1/completions", &json!({"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": true}));
            r["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();

    // 32 concurrent streams.
    let results: Vec<(usize, Vec<Value>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    let req = json!({"prompt": PROMPTS[i % 4], "max_tokens": 16, "temperature": 0, "ignore_eos": true,
                                     "stream": true, "stream_options": {"include_usage": true}});
                    (i, s.stream("/v1/completions", &req))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("stream thread")).collect()
    });
    for (i, chunks) in results {
        let text: String = chunks
            .iter()
            .flat_map(|c| c["choices"].as_array().unwrap().clone())
            .map(|ch| ch["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, solo[i % 4], "stream {i}: greedy tokens must not change with concurrency");
        let last = chunks.last().unwrap();
        assert_eq!(last["usage"]["completion_tokens"], 16, "stream {i}");
    }
    let running = || s.metric("vllm:num_requests_running{");
    assert_eq!(running(), 0.0);
    assert_eq!(s.metric("vllm:kv_cache_usage_perc{"), 0.0);
    let aborts = || {
        s.metrics()
            .iter()
            .find(|(k, _)| k.starts_with("vllm:request_success_total{") && k.contains("finished_reason=\"abort\""))
            .map(|(_, v)| *v)
            .unwrap()
    };
    assert_eq!(aborts(), 0.0);

    // A streaming client disconnects mid-generation.
    let long = json!({"prompt": "Once upon a time", "max_tokens": 1800, "ignore_eos": true, "stream": true});
    let mut conn = s.raw_post("/v1/completions", &long);
    let head = read_events(&mut conn, 3);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(running(), 1.0);
    assert!(s.metric("vllm:kv_cache_usage_perc{") > 0.0);
    drop(conn);
    eventually("the aborted stream frees its blocks", Duration::from_secs(20), || {
        running() == 0.0 && s.metric("vllm:kv_cache_usage_perc{") == 0.0
    });
    assert_eq!(aborts(), 1.0);

    // A non-streaming client disconnects while its request runs.
    let conn = s.raw_post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 1800, "ignore_eos": true}));
    eventually("the request runs", Duration::from_secs(20), || running() == 1.0);
    conn.shutdown(std::net::Shutdown::Both).ok();
    drop(conn);
    eventually("the abandoned request frees its blocks", Duration::from_secs(20), || {
        running() == 0.0 && s.metric("vllm:kv_cache_usage_perc{") == 0.0
    });
    assert_eq!(aborts(), 2.0);

    // The server carries on.
    let r =
        s.ok("/v1/completions", &json!({"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0, "ignore_eos": true}));
    assert_eq!(r["choices"][0]["text"].as_str().unwrap(), solo[0]);
}
