//! `bench serve` against a scripted HTTP server: streams timed token by token, and every way a
//! request can go wrong (HTTP error, error event, cut connection, garbage, no stream) counted as a
//! failed request without ending the run; keep-alive connections reused; chat streams.

use clap::Parser;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vllm_rs_bench::serve::{ServeArgs, run};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

/// What the mock does with the n-th generation request.
#[derive(Clone, Copy, Debug)]
enum Script {
    /// `tokens` token chunks 30 ms apart, then usage and `[DONE]`.
    Stream {
        tokens: usize,
    },
    /// A chat stream: the role chunk, then `tokens` content chunks.
    Chat {
        tokens: usize,
    },
    Http500,
    /// One token, then an error event.
    ErrorEvent,
    /// One token, then the connection is closed mid-body.
    Cut,
    /// A chunk that is not JSON.
    Garbage,
    /// A plain JSON answer instead of a stream.
    NotStreamed,
}

type Headers = Vec<(String, String)>;

struct Mock {
    base: String,
    connections: Arc<AtomicUsize>,
    /// Every generation request: path, JSON body, headers (names lowercased).
    bodies: Arc<Mutex<Vec<(String, Value, Headers)>>>,
}

/// One HTTP/1.1 request: path, headers, body.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, Headers, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        if k == "content-length" {
            len = v.parse().ok()?;
        }
        headers.push((k, v));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((path, headers, body))
}

fn chunk(s: &mut TcpStream, data: &str) {
    let _ = write!(s, "{:x}\r\n{data}\r\n", data.len());
    let _ = s.flush();
}

fn event(s: &mut TcpStream, v: &Value) {
    chunk(s, &format!("data: {v}\n\n"));
    std::thread::sleep(Duration::from_millis(30));
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// Answers one request; false when the connection is to be dropped.
fn respond(s: &mut TcpStream, script: Script) -> bool {
    let text = |t: &str| json!({"choices": [{"index": 0, "text": t}]});
    let usage = |n: usize| json!({"choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": n}});
    match script {
        Script::Stream { tokens } | Script::Chat { tokens } => {
            let _ = s.write_all(STREAM_HEAD.as_bytes());
            if matches!(script, Script::Chat { .. }) {
                event(s, &json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}));
            }
            for i in 0..tokens {
                match script {
                    Script::Chat { .. } => {
                        event(s, &json!({"choices": [{"index": 0, "delta": {"content": format!("t{i}")}}]}))
                    }
                    _ => event(s, &text(&format!("t{i}"))),
                }
            }
            event(s, &usage(tokens));
            chunk(s, "data: [DONE]\n\n");
            chunk(s, "");
            true
        }
        Script::Http500 => {
            let body = r#"{"error": {"message": "overloaded", "code": 500}}"#;
            let _ = write!(
                s,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            true
        }
        Script::ErrorEvent => {
            let _ = s.write_all(STREAM_HEAD.as_bytes());
            event(s, &text("a"));
            event(s, &json!({"error": {"message": "engine died", "code": 500}}));
            chunk(s, "data: [DONE]\n\n");
            chunk(s, "");
            true
        }
        Script::Cut => {
            let _ = s.write_all(STREAM_HEAD.as_bytes());
            event(s, &text("a"));
            let _ = s.shutdown(std::net::Shutdown::Both);
            false
        }
        Script::Garbage => {
            let _ = s.write_all(STREAM_HEAD.as_bytes());
            chunk(s, "data: {not json\n\n");
            chunk(s, "");
            true
        }
        Script::NotStreamed => {
            let body = text("whole").to_string();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            true
        }
    }
}

fn mock(script: Vec<Script>) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let (c, b) = (connections.clone(), bodies.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            // Each event leaves at once (with Nagle, the first two tokens would share a segment).
            s.set_nodelay(true).unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let (b, next, script) = (b.clone(), next.clone(), script.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                while let Some((path, headers, body)) = read_request(&mut r) {
                    if !path.ends_with("completions") {
                        let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
                        continue;
                    }
                    let body: Value = serde_json::from_slice(&body).unwrap();
                    b.lock().unwrap().push((path, body, headers));
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if !respond(&mut s, script[i % script.len()]) {
                        break;
                    }
                }
            });
        }
    });
    Mock { base, connections, bodies }
}

fn tokenizer() -> String {
    vllm_rs_testutil::hf_dir("smollm2").to_string_lossy().into_owned()
}

fn bench(base: &str, extra: &[&str]) -> Value {
    let tok = tokenizer();
    let mut argv = vec![
        "bench-serve",
        "--base-url",
        base,
        "--model",
        "mock",
        "--tokenizer",
        &tok,
        "--random-input-len",
        "32",
        "--random-output-len",
        "4",
        "--max-concurrency",
        "1",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-detailed",
        "--disable-tqdm",
        "--request-id-prefix",
        "req-",
    ];
    argv.extend_from_slice(extra);
    run(Cli::try_parse_from(argv).unwrap().args).expect("the run completes")
}

#[test]
fn every_failure_is_counted_and_the_run_completes() {
    let m = mock(vec![
        Script::Stream { tokens: 4 },
        Script::Http500,
        Script::ErrorEvent,
        Script::Cut,
        Script::Garbage,
        Script::NotStreamed,
        Script::Stream { tokens: 4 },
    ]);
    let r = bench(&m.base, &["--num-prompts", "7"]);
    assert_eq!(r["completed"], 2, "{r}");
    assert_eq!(r["failed"], 5);
    assert_eq!(r["total_output_tokens"], 8, "failed requests count no tokens");
    assert_eq!(r["output_lens"], json!([4, 0, 0, 0, 0, 0, 4]));
    let errors: Vec<&str> = r["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(errors[0], "");
    assert!(errors[1].contains("500") && errors[1].contains("overloaded"), "{errors:?}");
    assert!(errors[2].contains("engine died"), "{errors:?}");
    assert!(!errors[3].is_empty(), "{errors:?}");
    assert!(errors[4].contains("not JSON"), "{errors:?}");
    assert!(errors[5].contains("Never received a valid chunk"), "{errors:?}");
    // Timing: the mock sends tokens 30 ms apart.
    let itls = r["itls"][0].as_array().unwrap();
    assert_eq!(itls.len(), 3);
    let span: f64 = itls.iter().map(|g| g.as_f64().unwrap()).sum();
    assert!(span >= 0.085, "three 30 ms gaps: {itls:?}");
    // TPOT = (latency - TTFT) / (4 - 1) over the one successful request.
    assert!(r["mean_tpot_ms"].as_f64().unwrap() >= 28.0, "{}", r["mean_tpot_ms"]);
    // Connections are reused (a request abandoned mid-stream or cut costs its connection).
    assert!(m.connections.load(Ordering::SeqCst) < 7, "{} connections", m.connections.load(Ordering::SeqCst));
    // vLLM's request body and headers.
    let bodies = m.bodies.lock().unwrap();
    let (path, body, headers) = &bodies[0];
    assert_eq!(path, "/v1/completions");
    assert_eq!(body["model"], "mock");
    assert_eq!(body["max_tokens"], 4);
    assert_eq!(body["ignore_eos"], true, "always for the random dataset");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(headers.contains(&("x-request-id".to_string(), "req-0".to_string())), "{headers:?}");
}

#[test]
fn chat_backend_and_request_rate() {
    let m = mock(vec![Script::Chat { tokens: 3 }]);
    let r = bench(
        &m.base,
        &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--num-prompts",
            "4",
            "--request-rate",
            "20",
            "--temperature",
            "0",
        ],
    );
    assert_eq!(r["completed"], 4, "{r}");
    assert_eq!(r["total_output_tokens"], 12);
    assert_eq!(r["request_rate"], 20.0);
    assert_eq!(r["generated_texts"][0], "t0t1t2");
    // TTFT is taken at the first content chunk, 30 ms after the role chunk.
    assert!(r["ttfts"][0].as_f64().unwrap() > 0.025, "{}", r["ttfts"][0]);
    // Request after request on one keep-alive connection (a second one at most, if a request
    // starts before the previous connection is back in the pool).
    assert!(m.connections.load(Ordering::SeqCst) <= 2, "{} connections", m.connections.load(Ordering::SeqCst));
    let bodies = m.bodies.lock().unwrap();
    let body = &bodies[0].1;
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["max_completion_tokens"], 4);
    assert_eq!(body["temperature"], 0.0);
    assert!(r.get("p99_e2el_including_client_queue_ms").is_none(), "not selected");
}
