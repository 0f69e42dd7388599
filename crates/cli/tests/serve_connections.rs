//! Connections from careless or hostile clients: unfinished request heads time out, a body
//! declared too large is answered at once from its `Content-Length`, a body that stops coming
//! times out, the number of open connections is capped, and shutdown does not wait for any of
//! them.

mod common;

use common::{Server, eventually};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// Reads until the server closes the connection (`Ok` with what came), or the read timeout.
fn read_until_closed(c: &mut TcpStream) -> Result<String, std::io::Error> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match c.read(&mut chunk) {
            Ok(0) => return Ok(String::from_utf8_lossy(&buf).into_owned()),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            Err(e) => return Err(e),
        }
    }
}

/// The OpenAI error object of a raw HTTP response with this status.
fn assert_error_response(what: &str, raw: &str, status: u16) {
    assert!(raw.starts_with(&format!("HTTP/1.1 {status}")), "{what}: {raw}");
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: body not JSON ({e}): {raw}"));
    assert_eq!(v["error"]["code"], status, "{what}: {raw}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {raw}");
}

const HEAD: &str = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";

#[test]
fn unfinished_heads_and_bodies_time_out_and_oversize_bodies_are_refused_at_once() {
    let s = Server::start(&["--timeout-keep-alive", "1", "--timeout-body-read", "2"]);

    // 100 connections that never finish their request head are closed.
    let mut half_open: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut c = connect(&s);
            c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n").unwrap();
            c
        })
        .collect();
    let t0 = Instant::now();
    for c in &mut half_open {
        let r = read_until_closed(c);
        assert!(r.is_ok(), "a half-open connection stayed open {:?}: {r:?}", t0.elapsed());
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    // An idle keep-alive connection is closed after the same time.
    let mut c = connect(&s);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let raw = read_until_closed(&mut c).expect("the idle connection closes");
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");

    // A body declared larger than the limit: 413 at once, nothing read.
    let mut c = connect(&s);
    let t0 = Instant::now();
    c.write_all(format!("{HEAD}Content-Length: 100000000000\r\n\r\n").as_bytes()).unwrap();
    let raw = read_until_closed(&mut c).expect("an answer");
    assert_error_response("100 GB Content-Length", &raw, 413);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());

    // A body that stops coming: 408 after --timeout-body-read.
    let mut c = connect(&s);
    let t0 = Instant::now();
    c.write_all(format!("{HEAD}Content-Length: 1000\r\n\r\n{{\"prompt\": ").as_bytes()).unwrap();
    let raw = read_until_closed(&mut c).expect("an answer");
    assert_error_response("stalled body", &raw, 408);
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_secs(5), "{took:?}");

    // The server is fine.
    let (st, body) = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 2}));
    assert_eq!(st, 200, "{body}");
}

#[test]
fn open_connections_are_capped() {
    let s = Server::start(&["--limit-concurrency", "4", "--timeout-keep-alive", "30"]);
    let idle: Vec<TcpStream> = (0..4).map(|_| connect(&s)).collect();
    // The accept loop sees them before the next one.
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = connect(&s);
    extra.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").ok();
    let raw = read_until_closed(&mut extra).expect("an answer");
    assert_error_response("over the cap", &raw, 503);
    drop(idle);
    eventually("connections are accepted again", Duration::from_secs(10), || {
        let mut c = connect(&s);
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok();
        read_until_closed(&mut c).is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
    });
}

#[test]
fn shutdown_does_not_wait_for_idle_or_unfinished_connections() {
    // Default limits (5 s for a head, 60 s for a body): longer than this test waits.
    let mut s = Server::start(&[]);
    // Idle after one request (keep-alive).
    let mut idle = connect(&s);
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 1024];
    assert!(idle.read(&mut buf).unwrap() > 0);
    // Half a request head.
    let mut head = connect(&s);
    head.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n").unwrap();
    // A head whose body never comes.
    let mut body = connect(&s);
    body.write_all(format!("{HEAD}Content-Length: 1000\r\n\r\n{{").as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.signal("TERM");
    let status = s.wait_exit(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "{}", s.log());
    assert!(t0.elapsed() < Duration::from_secs(5), "shutdown took {:?} with no request running", t0.elapsed());
    for c in [&mut idle, &mut head, &mut body] {
        assert!(read_until_closed(c).is_ok());
    }
}
