//! Starts the real `vllm-rs serve` binary on a free loopback port with a real model, and talks
//! to it over HTTP.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub base: String,
    pub addr: String,
    log: Arc<Mutex<String>>,
    agent: ureq::Agent,
}

/// The flags every test server gets: the smollm2 GGUF, a small context and KV cache.
pub fn default_args() -> Vec<String> {
    let model = vllm_rs_testutil::gguf_path("smollm2");
    let mut a: Vec<String> = vec![model.to_string_lossy().into_owned()];
    a.extend(["--max-model-len", "2048", "--kv-cache-memory", "256MiB"].map(String::from));
    a
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into()
}

impl Server {
    /// Starts the server with [`default_args`] plus `extra`, and waits until it is ready.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_with_env(extra, &[])
    }

    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let s = Self::spawn(extra, env);
        s.wait_ready(Duration::from_secs(120));
        s
    }

    /// Starts the server on another model (`default_args` with its model replaced).
    pub fn start_model(model: &std::path::Path, extra: &[&str]) -> Server {
        let mut args = default_args();
        args[0] = model.to_string_lossy().into_owned();
        Self::start_args(args, extra)
    }

    /// Starts the server and returns once it listens (the model may still be loading).
    pub fn spawn(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::spawn_args(default_args(), extra, env)
    }

    /// Starts `serve` on `model_args` (the model and its flags) instead of [`default_args`] and
    /// waits until it is ready.
    pub fn start_args(model_args: Vec<String>, extra: &[&str]) -> Server {
        Self::start_args_with_env(model_args, extra, &[])
    }

    pub fn start_args_with_env(model_args: Vec<String>, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let s = Self::spawn_args(model_args, extra, env);
        s.wait_ready(Duration::from_secs(120));
        s
    }

    fn spawn_args(model_args: Vec<String>, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["serve".to_string()];
        args.extend(model_args);
        args.extend(["--host", "127.0.0.1", "--port", "0"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vllm-rs"));
        cmd.args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).env("NO_COLOR", "1");
        cmd.env_remove("VLLM_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start vllm-rs serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let log_w = log.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && let Some(i) = line.find("listening on http://") {
                    let rest = &line[i + "listening on http://".len()..];
                    let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                    let _ = tx.send(addr);
                    sent = true;
                }
                let mut l = log_w.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("the server did not start listening; log:\n{}", log.lock().unwrap());
            }
        };
        Server { child, base: format!("http://{addr}"), addr, log, agent: agent() }
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if self.get("/health").0 == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("not healthy after {timeout:?}; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.get_with(path, &[])
    }

    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = self.agent.get(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.call().unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    pub fn delete(&self, path: &str) -> (u16, String) {
        let mut resp = self.agent.delete(self.url(path)).call().unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// POSTs `body` (raw text) with these headers; (status, body text).
    pub fn post_raw(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = self.agent.post(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.send(body).unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.body_mut().with_config().limit(64 << 20).read_to_string().unwrap_or_default())
    }

    /// POSTs JSON; (status, parsed JSON body).
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_auth(path, body, None)
    }

    pub fn post_auth(&self, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        let (status, text) = self.post_raw(path, &body.to_string(), &headers);
        let json =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {path} -> {status}: not JSON ({e}): {text}"));
        (status, json)
    }

    /// POSTs a 200-expected JSON request and returns the body.
    pub fn ok(&self, path: &str, body: &Value) -> Value {
        let (status, json) = self.post(path, body);
        assert_eq!(status, 200, "POST {path} {body} -> {json}");
        json
    }

    /// A streaming request: every `data:` JSON chunk, in order (the `[DONE]` marker checked).
    pub fn stream(&self, path: &str, body: &Value) -> Vec<Value> {
        let raw = self.stream_raw(path, body);
        parse_sse(&raw)
    }

    pub fn stream_raw(&self, path: &str, body: &Value) -> String {
        let (status, text) = self.post_raw(path, &body.to_string(), &[("Content-Type", "application/json")]);
        assert_eq!(status, 200, "stream {path} {body} -> {text}");
        text
    }

    /// `/metrics` parsed into `name{labels} -> value`.
    pub fn metrics(&self) -> Vec<(String, f64)> {
        let (status, text) = self.get("/metrics");
        assert_eq!(status, 200);
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    /// The value of the first series whose name (with labels) starts with `prefix`.
    pub fn metric(&self, prefix: &str) -> f64 {
        let m = self.metrics();
        m.iter().find(|(k, _)| k.starts_with(prefix)).map(|(_, v)| *v).unwrap_or_else(|| panic!("no metric {prefix}"))
    }

    /// Opens a raw connection and sends a JSON POST (for disconnect tests).
    pub fn raw_post(&self, path: &str, body: &Value) -> TcpStream {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        let body = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        s.write_all(req.as_bytes()).expect("send");
        s
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill").args([format!("-{sig}"), self.pid().to_string()]).status().expect("kill");
        assert!(st.success());
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            if t0.elapsed() > timeout {
                panic!("the server did not exit within {timeout:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON chunks of an SSE body; asserts it ends with `data: [DONE]`.
pub fn parse_sse(raw: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut done = false;
    for event in raw.split("\n\n").filter(|e| !e.trim().is_empty()) {
        assert!(!done, "data after [DONE]: {raw}");
        let data = event.strip_prefix("data: ").unwrap_or_else(|| panic!("not an SSE data event: {event:?}"));
        if data == "[DONE]" {
            done = true;
            continue;
        }
        out.push(serde_json::from_str(data).unwrap_or_else(|e| panic!("bad chunk {data}: {e}")));
    }
    assert!(done, "no [DONE] at the end: {raw}");
    out
}

/// Reads from `s` until `n` SSE data events have arrived (or EOF); returns what was read.
pub fn read_events(s: &mut TcpStream, n: usize) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    while String::from_utf8_lossy(&buf).matches("data: ").count() < n {
        let k = s.read(&mut chunk).expect("read");
        if k == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..k]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Polls `f` until it is true.
pub fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}
