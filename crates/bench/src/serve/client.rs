//! One streamed request, timed as `vllm bench serve` times it: TTFT from sending the request to
//! the first event that carries a token, ITL between token events, latency to the last token
//! event; `usage.completion_tokens` from the final chunk is the output length.

use super::sse::{SseEvent, SseParser};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `--backend`: which API the prompts go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// `/v1/completions` (vLLM's default backend).
    Openai,
    /// `/v1/chat/completions`, the prompt as one user message.
    #[value(name = "openai-chat")]
    OpenaiChat,
    /// `/v1/completions`, as `openai`.
    Vllm,
    /// `/v1/responses` (OpenAI's Responses API), the prompt as `input` (not in vLLM's tool).
    #[value(name = "openai-responses")]
    OpenaiResponses,
    /// `/v1/messages` (Anthropic's Messages API), the prompt as one user message (not in
    /// vLLM's tool).
    #[value(name = "anthropic-messages")]
    AnthropicMessages,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Openai => "openai",
            Backend::OpenaiChat => "openai-chat",
            Backend::Vllm => "vllm",
            Backend::OpenaiResponses => "openai-responses",
            Backend::AnthropicMessages => "anthropic-messages",
        }
    }

    /// vLLM refuses an endpoint that does not end like this for the backend.
    pub fn check_url(self, api_url: &str) -> Result<(), String> {
        let (api, suffix) = match self {
            Backend::Openai | Backend::Vllm => ("OpenAI Completions API", "completions"),
            Backend::OpenaiChat => ("OpenAI Chat Completions API", "chat/completions"),
            Backend::OpenaiResponses => ("OpenAI Responses API", "responses"),
            Backend::AnthropicMessages => ("Anthropic Messages API", "messages"),
        };
        if api_url.ends_with(suffix) { Ok(()) } else { Err(format!("{api} URL must end with one of: {{'{suffix}'}}.")) }
    }
}

/// Seconds on the benchmark's monotonic clock (its origin is arbitrary, like `perf_counter`).
pub fn clock() -> f64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// What to send.
#[derive(Clone, Debug)]
pub struct RequestInput {
    pub backend: Backend,
    pub api_url: String,
    pub prompt: String,
    pub prompt_len: usize,
    pub output_len: usize,
    /// The `model` field of the request.
    pub model: String,
    pub logprobs: Option<i64>,
    pub ignore_eos: bool,
    /// Merged into the body last (sampling parameters, `--extra-body`).
    pub extra_body: Map<String, Value>,
    /// `--header` pairs (after the API key and content type).
    pub extra_headers: Vec<(String, String)>,
    /// Sent as `x-request-id`.
    pub request_id: Option<String>,
}

impl RequestInput {
    /// The JSON body, with vLLM's fields in vLLM's order.
    pub fn body(&self) -> Value {
        let mut body = match self.backend {
            Backend::Openai | Backend::Vllm => json!({
                "model": self.model,
                "prompt": self.prompt,
                "repetition_penalty": 1.0,
                "max_tokens": self.output_len,
                "logprobs": self.logprobs,
                "stream": true,
                "stream_options": {"include_usage": true},
            }),
            Backend::OpenaiChat => json!({
                "model": self.model,
                "messages": [{"role": "user", "content": [{"type": "text", "text": self.prompt}]}],
                "max_completion_tokens": self.output_len,
                "stream": true,
                "stream_options": {"include_usage": true},
            }),
            // Usage comes in the final event of these two APIs.
            Backend::OpenaiResponses => json!({
                "model": self.model,
                "input": self.prompt,
                "max_output_tokens": self.output_len,
                "stream": true,
            }),
            Backend::AnthropicMessages => json!({
                "model": self.model,
                "messages": [{"role": "user", "content": self.prompt}],
                "max_tokens": self.output_len,
                "stream": true,
            }),
        };
        let obj = body.as_object_mut().expect("object");
        if self.ignore_eos {
            obj.insert("ignore_eos".into(), Value::Bool(true));
        }
        for (k, v) in &self.extra_body {
            obj.insert(k.clone(), v.clone());
        }
        body
    }
}

/// What happened, in vLLM's `RequestFuncOutput` terms (seconds).
#[derive(Clone, Debug, Default)]
pub struct RequestOutput {
    pub generated_text: String,
    pub success: bool,
    pub latency: f64,
    /// `usage.completion_tokens` when the server sent it.
    pub output_tokens: Option<usize>,
    pub ttft: f64,
    pub itl: Vec<f64>,
    pub prompt_len: usize,
    pub error: String,
    /// [`clock`] when the request was sent.
    pub start_time: f64,
    /// Time spent waiting for a `--max-concurrency` slot.
    pub client_queue_time: f64,
}

/// A keep-alive connection pool shared by all requests.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClient {
    pub fn new() -> Self {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        conn.set_keepalive(Some(Duration::from_secs(60)));
        let inner = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(conn);
        HttpClient { inner }
    }

    /// A plain request: (status, body). For `/v1/models`, `/tokenize`, `/metrics`.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(String, String)],
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), String> {
        let req = build_request(method, url, headers, body)?;
        let resp = self.inner.request(req).await.map_err(|e| describe(&e))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, bytes.to_vec()))
    }

    /// Sends one streamed generation request and times it.
    pub async fn generate(&self, input: &RequestInput, on_done: impl FnOnce()) -> RequestOutput {
        let mut out = RequestOutput { prompt_len: input.prompt_len, ..Default::default() };
        let mut headers = Vec::new();
        if let Ok(key) = std::env::var("OPENAI_API_KEY")
            && !key.is_empty()
        {
            headers.push(("Authorization".to_string(), format!("Bearer {key}")));
        }
        headers.extend(input.extra_headers.iter().cloned());
        if let Some(id) = &input.request_id {
            headers.push(("x-request-id".to_string(), id.clone()));
        }
        let body = input.body();
        let st = clock();
        out.start_time = st;
        if let Err(e) = self.stream(input.backend, &input.api_url, &headers, &body, st, &mut out).await {
            out.success = false;
            out.error = e;
        }
        on_done();
        out
    }

    async fn stream(
        &self,
        backend: Backend,
        url: &str,
        headers: &[(String, String)],
        body: &Value,
        st: f64,
        out: &mut RequestOutput,
    ) -> Result<(), String> {
        let req = build_request(Method::POST, url, headers, Some(body))?;
        let resp = self.inner.request(req).await.map_err(|e| describe(&e))?;
        let status = resp.status();
        if status != hyper::StatusCode::OK {
            let text = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let reason = status.canonical_reason().unwrap_or("");
            return Err(format!("HTTP {} {reason}: {}", status.as_u16(), String::from_utf8_lossy(&text).trim()));
        }
        let mut body = resp.into_body();
        let mut parser = SseParser::new();
        let mut state = StreamState { st, most_recent: st, first: false };
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the response: {e}"))?;
            let Some(chunk) = frame.data_ref() else { continue };
            if chunk.is_empty() {
                continue;
            }
            let now = clock();
            for ev in parser.feed(chunk)? {
                if let SseEvent::Data { data, .. } = ev {
                    state.on_data(backend, &data, now, out)?;
                }
            }
        }
        if state.first {
            out.success = true;
        } else {
            out.success = false;
            out.error = "Never received a valid chunk to calculate TTFT.This response will be marked as failed!".into();
        }
        out.latency = state.most_recent - st;
        Ok(())
    }
}

struct StreamState {
    st: f64,
    most_recent: f64,
    first: bool,
}

impl StreamState {
    /// One `data:` payload: a token chunk (timed), the usage chunk, or an error.
    fn on_data(&mut self, backend: Backend, data: &str, now: f64, out: &mut RequestOutput) -> Result<(), String> {
        let v: Value = serde_json::from_str(data).map_err(|e| format!("not JSON ({e}): {data}"))?;
        if matches!(backend, Backend::OpenaiResponses | Backend::AnthropicMessages) {
            return self.on_typed_event(&v, now, out);
        }
        let choice = v.get("choices").and_then(Value::as_array).and_then(|c| c.first());
        let token = match (backend, choice) {
            (Backend::Openai | Backend::Vllm, Some(c)) => Some(c.get("text").and_then(Value::as_str).unwrap_or("")),
            (Backend::OpenaiChat, Some(c)) if chat_choice_has_output(c) => {
                Some(c["delta"].get("content").and_then(Value::as_str).unwrap_or(""))
            }
            _ => None,
        };
        if let Some(text) = token {
            self.on_token(text, now, out);
        } else if let Some(usage) = v.get("usage").filter(|u| u.as_object().is_some_and(|o| !o.is_empty())) {
            out.output_tokens = usage.get("completion_tokens").and_then(Value::as_u64).map(|n| n as usize);
            if let Some(pt) = usage.get("prompt_tokens").and_then(Value::as_u64) {
                out.prompt_len = pt as usize;
            }
        } else if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            // vLLM's client ignores an error event after the first token; a request that ends in
            // one did not complete, so it is counted as failed here.
            let msg = err.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| err.to_string());
            return Err(format!("error event in the stream: {msg}"));
        }
        Ok(())
    }
}

impl StreamState {
    /// A token event: the first sets TTFT, the others add an inter-token latency.
    fn on_token(&mut self, text: &str, now: f64, out: &mut RequestOutput) {
        if !self.first {
            self.first = true;
            out.ttft = now - self.st;
        } else {
            out.itl.push(now - self.most_recent);
        }
        self.most_recent = now;
        out.generated_text.push_str(text);
    }

    /// An event of the Responses or Messages stream, told apart by its `type`: text deltas are
    /// tokens; the final event (`response.completed`, or `response.incomplete` when
    /// `max_output_tokens` cut it; `message_delta`) carries the usage.
    fn on_typed_event(&mut self, v: &Value, now: f64, out: &mut RequestOutput) -> Result<(), String> {
        let count = |u: &Value, k: &str| u.get(k).and_then(Value::as_u64).map(|n| n as usize);
        match v["type"].as_str().unwrap_or("") {
            "response.output_text.delta" => self.on_token(v["delta"].as_str().unwrap_or(""), now, out),
            "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                self.on_token(v["delta"]["text"].as_str().unwrap_or(""), now, out)
            }
            "response.completed" | "response.incomplete" => {
                let u = &v["response"]["usage"];
                out.output_tokens = count(u, "output_tokens");
                out.prompt_len = count(u, "input_tokens").unwrap_or(out.prompt_len);
            }
            "message_start" => out.prompt_len = count(&v["message"]["usage"], "input_tokens").unwrap_or(out.prompt_len),
            "message_delta" => out.output_tokens = count(&v["usage"], "output_tokens"),
            "error" | "response.failed" => return Err(format!("error event in the stream: {v}")),
            _ => {}
        }
        Ok(())
    }
}

/// vLLM 0.33's `_choice_has_streamed_output`: a delta with content (or reasoning / tool calls);
/// an empty content counts (a special token) unless it is the opening `role` chunk.
fn chat_choice_has_output(choice: &Value) -> bool {
    let Some(delta) = choice.get("delta").and_then(Value::as_object) else { return false };
    let truthy = |k: &str| match delta.get(k) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    if ["content", "reasoning", "tool_calls", "function_call"].iter().any(|k| truthy(k)) {
        return true;
    }
    delta.get("content").and_then(Value::as_str) == Some("") && !delta.contains_key("role")
}

fn build_request(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<&Value>,
) -> Result<Request<Full<Bytes>>, String> {
    let uri: Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(s) => return Err(format!("{url}: only http:// URLs are supported (not {s}://)")),
        None => return Err(format!("{url}: not an absolute http:// URL")),
    }
    let mut req = Request::builder().method(method).uri(uri);
    let bytes = match body {
        Some(b) => {
            req = req.header("Content-Type", "application/json");
            Bytes::from(serde_json::to_vec(b).expect("JSON"))
        }
        None => Bytes::new(),
    };
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    req.body(Full::new(bytes)).map_err(|e| format!("bad request: {e}"))
}

/// A connection error with its causes (hyper's top-level message alone says little).
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(backend: Backend, events: &[Value]) -> (RequestOutput, Result<(), String>) {
        let mut out = RequestOutput { prompt_len: 7, ..Default::default() };
        let mut s = StreamState { st: 10.0, most_recent: 10.0, first: false };
        let mut res = Ok(());
        for (i, e) in events.iter().enumerate() {
            res = s.on_data(backend, &e.to_string(), 10.5 + i as f64, &mut out);
            if res.is_err() {
                break;
            }
        }
        out.latency = s.most_recent - s.st;
        out.success = s.first && res.is_ok();
        (out, res)
    }

    #[test]
    fn completion_stream_timing_and_usage() {
        let (out, res) = run(
            Backend::Openai,
            &[
                json!({"choices": [{"index": 0, "text": "Hel"}]}),
                json!({"choices": [{"index": 0, "text": ""}]}),
                json!({"choices": [{"index": 0, "text": "lo", "finish_reason": "length"}]}),
                json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}),
            ],
        );
        res.unwrap();
        assert!(out.success);
        assert_eq!(out.generated_text, "Hello");
        assert_eq!(out.ttft, 0.5);
        assert_eq!(out.itl, [1.0, 1.0]);
        assert_eq!(out.latency, 2.5, "ends at the last token chunk, not the usage chunk");
        assert_eq!(out.output_tokens, Some(3));
        assert_eq!(out.prompt_len, 9);
    }

    #[test]
    fn responses_and_messages_streams_time_the_text_deltas() {
        let (out, res) = run(
            Backend::OpenaiResponses,
            &[
                json!({"type": "response.created", "response": {"status": "in_progress"}}),
                json!({"type": "response.output_text.delta", "delta": "Hi"}),
                json!({"type": "response.output_text.delta", "delta": " there"}),
                json!({"type": "response.output_text.done", "text": "Hi there"}),
                json!({"type": "response.completed", "response": {"usage": {"input_tokens": 4, "output_tokens": 2}}}),
            ],
        );
        res.unwrap();
        assert_eq!((out.generated_text.as_str(), out.ttft, out.itl.as_slice()), ("Hi there", 1.5, &[1.0][..]));
        assert_eq!((out.output_tokens, out.prompt_len, out.latency), (Some(2), 4, 2.5));
        // Cut by max_output_tokens: the final event is `response.incomplete`, with the usage.
        let (out, res) = run(
            Backend::OpenaiResponses,
            &[
                json!({"type": "response.output_text.delta", "delta": "Hi"}),
                json!({"type": "response.incomplete", "response": {"usage": {"input_tokens": 4, "output_tokens": 1}}}),
            ],
        );
        res.unwrap();
        assert_eq!((out.output_tokens, out.prompt_len), (Some(1), 4));
        let (out, res) = run(
            Backend::AnthropicMessages,
            &[
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 6, "output_tokens": 0}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Yo"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 1}}),
                json!({"type": "message_stop"}),
            ],
        );
        res.unwrap();
        assert_eq!((out.generated_text.as_str(), out.ttft, out.output_tokens, out.prompt_len), ("Yo", 2.5, Some(1), 6));
        let (_, res) =
            run(Backend::AnthropicMessages, &[json!({"type": "error", "error": {"type": "overloaded_error"}})]);
        assert!(res.unwrap_err().contains("overloaded_error"));
    }

    #[test]
    fn chat_stream_skips_the_role_chunk() {
        let (out, res) = run(
            Backend::OpenaiChat,
            &[
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": ""}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
                json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
            ],
        );
        res.unwrap();
        assert_eq!(out.generated_text, "Hi");
        assert_eq!(out.ttft, 1.5, "the first content chunk, not the role chunk");
        assert_eq!(out.itl, [1.0]);
        assert_eq!(out.output_tokens, Some(2));
    }

    #[test]
    fn error_event_and_garbage_fail_the_request() {
        let (out, res) = run(
            Backend::Openai,
            &[
                json!({"choices": [{"index": 0, "text": "a"}]}),
                json!({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
            ],
        );
        assert!(!out.success);
        assert!(res.unwrap_err().contains("boom"));
        let mut out = RequestOutput::default();
        let mut s = StreamState { st: 0.0, most_recent: 0.0, first: false };
        assert!(s.on_data(Backend::Openai, "{not json", 1.0, &mut out).is_err());
    }

    #[test]
    fn bodies_carry_vllm_fields_in_order() {
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0.0));
        extra.insert("max_tokens".into(), json!(5));
        let input = RequestInput {
            backend: Backend::Vllm,
            api_url: "http://h/v1/completions".into(),
            prompt: "p".into(),
            prompt_len: 1,
            output_len: 3,
            model: "m".into(),
            logprobs: None,
            ignore_eos: true,
            extra_body: extra,
            extra_headers: vec![],
            request_id: None,
        };
        let keys: Vec<String> = input.body().as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "model",
                "prompt",
                "repetition_penalty",
                "max_tokens",
                "logprobs",
                "stream",
                "stream_options",
                "ignore_eos",
                "temperature"
            ]
        );
        assert_eq!(input.body()["max_tokens"], 5, "--extra-body wins");
        let chat = RequestInput { backend: Backend::OpenaiChat, ignore_eos: false, extra_body: Map::new(), ..input };
        let b = chat.body();
        assert_eq!(b["messages"][0]["content"][0]["text"], "p");
        assert_eq!(b["max_completion_tokens"], 3);
        assert!(b.get("ignore_eos").is_none());
        assert!(Backend::OpenaiChat.check_url("http://h/v1/completions").is_err());
        assert!(Backend::Openai.check_url("http://h/v1/chat/completions").is_ok());
    }
}
