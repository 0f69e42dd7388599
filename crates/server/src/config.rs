//! What the server is told at start-up (the `vllm-rs serve` flags that are not engine flags).

use std::time::Duration;

/// The routes `--api-key` guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKeyScope {
    /// Every route but `/health` and the static pages (our default).
    All,
    /// Only paths under `/v1`, as vLLM's middleware: `/metrics`, `/tokenize`, `/pooling`,
    /// `/invocations`… are open (a Prometheus scrape needs no key).
    V1,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Names clients may use in `model`; the first is the one responses report.
    pub served_model_names: Vec<String>,
    /// The model as given on the command line (`root` in `/v1/models`).
    pub model_root: String,
    /// Accepted bearer tokens; empty: no authentication.
    pub api_keys: Vec<String>,
    /// Which routes need the key ([`ApiKeyScope`]).
    pub api_key_scope: ApiKeyScope,
    /// Answer every request with an `x-request-id` header (vLLM's
    /// `--enable-request-id-headers`): the client's own, else a new one.
    pub request_id_headers: bool,
    /// Count requests in flight for `GET /load` (vLLM's `--enable-server-load-tracking`).
    pub server_load_tracking: bool,
    pub cors: CorsConfig,
    pub limits: Limits,
    pub connections: ConnectionLimits,
    /// Send `: keep-alive` comments on idle streams this often (`None`: never, as vLLM's default).
    pub sse_keepalive: Option<Duration>,
    /// After SIGINT/SIGTERM, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
    /// Accept a `chat_template` in chat requests (vLLM's `--trust-request-chat-template`).
    pub trust_request_chat_template: bool,
    /// Role of generated chat messages (vLLM's `--response-role`).
    pub response_role: String,
    /// Report `prompt_tokens_details.cached_tokens` in usage.
    pub enable_prompt_tokens_details: bool,
    /// Stream usage on every request, whatever `stream_options` says.
    pub enable_force_include_usage: bool,
    /// Logprob tokens as `token_id:N` by default.
    pub return_tokens_as_token_ids: bool,
    /// The tool parser `tool_choice: "auto"` uses (`--enable-auto-tool-choice` with
    /// `--tool-call-parser`); `None`: auto tool choice is refused.
    pub auto_tool_parser: Option<String>,
    /// `/v1/responses` results kept for `GET` and `previous_response_id`, at most
    /// (`VLLM_RS_MAX_STORED_RESPONSES`; see `response_store.rs`).
    pub max_stored_responses: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            served_model_names: vec!["default".into()],
            model_root: String::new(),
            api_keys: Vec::new(),
            api_key_scope: ApiKeyScope::All,
            request_id_headers: false,
            server_load_tracking: false,
            cors: CorsConfig::default(),
            limits: Limits::default(),
            connections: ConnectionLimits::default(),
            sse_keepalive: None,
            shutdown_grace: Duration::from_secs(30),
            trust_request_chat_template: false,
            response_role: "assistant".into(),
            enable_prompt_tokens_details: false,
            enable_force_include_usage: false,
            auto_tool_parser: None,
            return_tokens_as_token_ids: false,
            max_stored_responses: crate::response_store::MAX_RESPONSES,
        }
    }
}

/// CORS as vLLM's flags set it; no origins: no CORS headers at all.
#[derive(Clone, Debug)]
pub struct CorsConfig {
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub allow_credentials: bool,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            allowed_origins: Vec::new(),
            allowed_methods: vec!["*".into()],
            allowed_headers: vec!["*".into()],
            allow_credentials: false,
        }
    }
}

/// Guards against clients that open connections and do not finish their requests.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// A connection must send a complete request head within this long of opening, or of the
    /// end of its previous response, else it is closed (uvicorn's `--timeout-keep-alive`, which
    /// closes idle keep-alive connections; here it also bounds a slow head). `None`: no limit.
    pub keep_alive_timeout: Option<Duration>,
    /// A request's body must have arrived within this long of its head, else 408. `None`: no
    /// limit.
    pub body_read_timeout: Option<Duration>,
    /// Most connections open at once; one more is answered 503 and closed (uvicorn's
    /// `--limit-concurrency`). 0: no limit.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            keep_alive_timeout: Some(Duration::from_secs(5)),
            body_read_timeout: Some(Duration::from_secs(60)),
            max_connections: 1000,
        }
    }
}

/// Request guards; 0 disables each.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest prompt, in characters, checked before tokenizing.
    pub max_prompt_chars: usize,
    /// Most new tokens one sequence may ask for (and the default when it does not say).
    pub max_new_tokens: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Bytes all request bodies being read or parsed may hold together (0: no limit).
    pub max_body_bytes_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_prompt_chars: 1 << 20,
            max_new_tokens: 0,
            max_body_bytes: 32 << 20,
            max_body_bytes_in_flight: 256 << 20,
        }
    }
}
