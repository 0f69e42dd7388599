//! A client-chosen `request_id` names only that client's request: another client sending the
//! same id (and going away at once, or waiting) neither aborts nor blocks the first one.

mod common;

use common::{Server, eventually};
use serde_json::json;
use std::net::Shutdown;
use std::time::Duration;

#[test]
fn a_client_chosen_request_id_never_reaches_another_clients_request() {
    let s = Server::start(&[]);
    let a_req = json!({"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": true, "stream": true,
                       "request_id": "x"});
    let a_chunks = std::thread::scope(|scope| {
        let a = scope.spawn(|| s.stream("/v1/completions", &a_req));
        eventually("A runs", Duration::from_secs(30), || s.metric("vllm:num_requests_running{") == 1.0);
        // B reuses A's id and goes away at once, several times, streaming and not.
        for i in 0..6 {
            let b_req = json!({"prompt": "Hello", "max_tokens": 50, "stream": i % 2 == 0, "request_id": "x"});
            let b = s.raw_post("/v1/completions", &b_req);
            b.shutdown(Shutdown::Both).ok();
            drop(b);
            std::thread::sleep(Duration::from_millis(20));
        }
        // C reuses it and waits: it is served, under the id it asked for.
        let (st, c) = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 3, "request_id": "x"}));
        assert_eq!(st, 200, "{c}");
        assert_eq!(c["id"], "cmpl-x", "{c}");
        a.join().expect("A")
    });
    let last = a_chunks.iter().rev().find(|c| !c["choices"].as_array().unwrap().is_empty()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "A must run to its end: {last}");
    assert_eq!(last["id"], "cmpl-x");
    let tokens = a_chunks.iter().filter(|c| !c["choices"].as_array().unwrap().is_empty()).count();
    assert_eq!(tokens, 300);
}
