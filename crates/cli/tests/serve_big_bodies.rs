//! Large bodies near the size limit: parsing one costs a small multiple of its size in memory,
//! and runs off the threads that answer other requests (`/health` stays fast meanwhile).

mod common;

use common::Server;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Peak resident memory of the process so far, in bytes (Linux `VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

#[test]
fn a_31_mib_token_id_prompt_costs_little_memory_and_does_not_stall_other_routes() {
    let s = Server::start(&[]);
    // Warm up the paths a request takes.
    let (st, _) = s.post_raw(
        "/v1/completions",
        r#"{"prompt": [1, 2, 3], "max_tokens": 2}"#,
        &[("Content-Type", "application/json")],
    );
    assert_eq!(st, 200);
    // 16 million small token ids: just under the default 32 MiB limit.
    let n = 16_000_000;
    let mut body = String::with_capacity(2 * n + 64);
    body.push_str(r#"{"max_tokens": 4, "prompt": ["#);
    for i in 0..n {
        body.push_str(if i + 1 < n { "1," } else { "1" });
    }
    body.push_str("]}");
    assert!(body.len() < 32 << 20);
    let before = peak_rss(s.pid());
    let (answers, worst_health) = std::thread::scope(|scope| {
        let posts: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| s.post_raw("/v1/completions", &body, &[("Content-Type", "application/json")])))
            .collect();
        let mut worst = Duration::ZERO;
        while !posts.iter().all(|p| p.is_finished()) {
            let t0 = Instant::now();
            assert_eq!(s.get("/health").0, 200);
            worst = worst.max(t0.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        (posts.into_iter().map(|p| p.join().unwrap()).collect::<Vec<_>>(), worst)
    });
    let grown = peak_rss(s.pid()).saturating_sub(before);
    eprintln!("peak RSS +{} MiB; slowest /health {worst_health:?}", grown >> 20);
    for (st, text) in answers {
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{st}: {text}"));
        assert_eq!(st, 400, "a prompt longer than the context: {v}");
        assert_eq!(v["error"]["code"], 400, "{v}");
    }
    // Two bodies of 32 MB each in flight: the body bytes plus the ids as u32 (4 bytes each)
    // and some slack; the old Value-based parse took 1.7 GB for one.
    assert!(grown < 600 << 20, "peak RSS grew by {} MiB for two 31 MiB bodies", grown >> 20);
    assert!(worst_health < Duration::from_millis(1500), "/health took {worst_health:?} while bodies were parsed");
}

/// Bodies read at once share `--max-request-bytes-in-flight`: while one slow client holds most
/// of it, another large body gets 503 at once (small ones still pass); once the first is in,
/// the budget is back.
#[test]
fn large_bodies_in_flight_share_one_budget() {
    use std::io::{Read, Write};
    let s = Server::start(&["--max-request-body-bytes", "1MiB", "--max-request-bytes-in-flight", "1MiB"]);
    let big = format!(r#"{{"prompt": "{}"}}"#, "a ".repeat(350 << 10));
    // A client that declares the big body and sends only its first half, then waits.
    let mut slow = std::net::TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    slow.write_all(head.as_bytes()).unwrap();
    slow.write_all(&big.as_bytes()[..big.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let json = [("Content-Type", "application/json")];
    let (status, text) = s.post_raw("/tokenize", &big, &json);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("max-request-bytes-in-flight"), "{text}");
    assert_eq!(s.post_raw("/tokenize", r#"{"prompt": "small"}"#, &json).0, 200);
    // The slow client finishes: its answer comes, and its share is given back.
    slow.write_all(&big.as_bytes()[big.len() / 2..]).unwrap();
    let mut answer = [0u8; 12];
    slow.read_exact(&mut answer).unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    drop(slow);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(s.post_raw("/tokenize", &big, &json).0, 200);
}
