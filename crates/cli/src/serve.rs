//! `vllm-rs serve [MODEL]`: the OpenAI-compatible server, with `vllm serve`'s flags.

use crate::args::{EngineArgs, ToolArgs, parse_bytes};
use crate::setup::{self, LoadedPooling, LoadedRunner};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;
use vllm_rs_engine::{EngineHandle, PoolingHandle};
use vllm_rs_server::metrics::Metrics;
use vllm_rs_server::reasoning::ReasoningParser;
use vllm_rs_server::{
    ApiKeyScope, AppState, ConnectionLimits, CorsConfig, Limits, ModelContext, Runner, SamplingDefaults, ServerConfig,
};

#[derive(Args)]
pub struct ServeArgs {
    /// Model: local HF directory, .gguf file, catalog name (smollm2, qwen05, qwen15, gemma3) or
    /// Hugging Face repo id (org/name). Default: SmolLM2-135M-Instruct.
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,

    /// The model, as a flag (vLLM's older spelling); same as the positional MODEL.
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    pub model_flag: Option<String>,

    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,

    /// Port to listen on (0: any free port; the log says which).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,

    /// Names clients may use in `model` (the first is the one responses report). Default: MODEL
    /// as given.
    #[arg(long, num_args = 1..)]
    pub served_model_name: Vec<String>,

    /// Require `Authorization: Bearer KEY` (one of these keys) on every route except /health.
    /// An empty key is refused. Default: $VLLM_API_KEY when set and not empty; else no
    /// authentication.
    #[arg(long, num_args = 1..)]
    pub api_key: Vec<String>,

    /// Routes the --api-key guards: `all` (every route but /health and the static pages) or
    /// `v1` (only paths under /v1, as vLLM: /metrics, /tokenize, /pooling… need no key, e.g.
    /// for Prometheus scrapes).
    #[arg(long, value_enum, default_value = "all")]
    pub api_key_scope: KeyScope,

    /// JSON object of sampling defaults that replace the model's generation config values
    /// (vLLM's flag), e.g. '{"temperature": 0.5, "max_new_tokens": 256}': temperature, top_p,
    /// top_k, min_p, repetition_penalty, max_new_tokens. Request values still win.
    #[arg(long)]
    pub override_generation_config: Option<String>,

    /// CORS: allowed origins, as a JSON list (vLLM's form, e.g. '["*"]') or plain values.
    /// Default: none (no cross-origin browser access).
    #[arg(long, num_args = 1..)]
    pub allowed_origins: Vec<String>,

    /// CORS: allowed methods (JSON list or plain values).
    #[arg(long, num_args = 1.., default_value = "[\"*\"]")]
    pub allowed_methods: Vec<String>,

    /// CORS: allowed headers (JSON list or plain values).
    #[arg(long, num_args = 1.., default_value = "[\"*\"]")]
    pub allowed_headers: Vec<String>,

    /// CORS: allow credentials.
    #[arg(long)]
    pub allow_credentials: bool,

    /// Role of generated chat messages.
    #[arg(long, default_value = "assistant")]
    pub response_role: String,

    /// Accept a `chat_template` field in chat requests.
    #[arg(long)]
    pub trust_request_chat_template: bool,

    /// Report `prompt_tokens_details.cached_tokens` in usage.
    #[arg(long)]
    pub enable_prompt_tokens_details: bool,

    /// Stream usage on every streaming request, whatever `stream_options` says.
    #[arg(long)]
    pub enable_force_include_usage: bool,

    /// Name logprob tokens `token_id:N` unless a request says otherwise.
    #[arg(long)]
    pub return_tokens_as_token_ids: bool,

    /// Do not log the engine's statistics (throughput, requests running and waiting, KV cache
    /// usage, prefix cache hits, speculative acceptance), which are otherwise logged every
    /// $VLLM_LOG_STATS_INTERVAL seconds (10) while requests run, as vLLM logs them.
    #[arg(long)]
    pub disable_log_stats: bool,

    /// Send a `: keep-alive` SSE comment after this many idle seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub sse_keep_alive_interval: u64,

    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are aborted.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,

    /// Longest prompt accepted, in characters, checked before tokenizing (0: no limit).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_prompt_chars: usize,

    /// Most new tokens one sequence may ask for, and the default cap when it does not say
    /// (0: only the context length limits it).
    #[arg(long, default_value_t = 0)]
    pub max_new_tokens: usize,

    /// Largest request body accepted, e.g. 32MiB (0: no limit).
    #[arg(long, default_value = "32MiB", value_parser = parse_bytes)]
    pub max_request_body_bytes: u64,

    /// Bytes all request bodies being read and parsed may hold at once; past it a request gets
    /// 503 (retry later) instead of taking the memory others need (0: no limit).
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub max_request_bytes_in_flight: u64,

    /// Close a connection that has not sent a complete request head this many seconds after it
    /// opened or after its previous response: idle keep-alive connections, and clients that
    /// never finish their headers (uvicorn's flag; 0: never).
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    pub timeout_keep_alive: u64,

    /// Seconds a request body may take to arrive in full after its head; then 408 (0: no limit).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub timeout_body_read: u64,

    /// Most connections open at once; one more is answered 503 and closed (uvicorn's flag; 0: no
    /// limit).
    #[arg(long, default_value_t = 1000)]
    pub limit_concurrency: usize,

    #[command(flatten)]
    pub tools: ToolArgs,

    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `["a", "b"]` (vLLM's JSON form) or plain values.
fn list_arg(values: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for v in values {
        let t = v.trim();
        if t.starts_with('[') {
            let list: Vec<String> =
                serde_json::from_str(t).with_context(|| format!("{v:?} is not a JSON list of strings"))?;
            out.extend(list);
        } else {
            out.push(t.to_string());
        }
    }
    Ok(out)
}

/// `secs` seconds; 0: none.
fn seconds(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

pub fn run(a: ServeArgs, started: Instant) -> Result<()> {
    if a.max_request_bytes_in_flight > 0 && a.max_request_bytes_in_flight < a.max_request_body_bytes {
        anyhow::bail!(
            "--max-request-bytes-in-flight ({}) must be at least --max-request-body-bytes ({}), or no body that large could ever be read",
            a.max_request_bytes_in_flight,
            a.max_request_body_bytes
        );
    }
    let model_arg = a.model.clone().or_else(|| a.model_flag.clone());
    let shown = model_arg.clone().unwrap_or_else(|| vllm_rs_hub::DEFAULT_MODEL.to_string());
    let served_model_names =
        if a.served_model_name.is_empty() { vec![shown.clone()] } else { a.served_model_name.clone() };
    if a.api_key.iter().any(|k| k.trim().is_empty()) {
        anyhow::bail!(
            "--api-key is empty: give the key clients must send, or leave the flag out to serve without \
             authentication"
        );
    }
    a.tools.check().map_err(anyhow::Error::msg)?;
    let overrides = generation_overrides(a.override_generation_config.as_deref())?;
    let mut api_keys: Vec<String> = a.api_key.clone();
    if api_keys.is_empty()
        && let Ok(k) = std::env::var("VLLM_API_KEY")
        && !k.is_empty()
    {
        api_keys.push(k);
    }
    let config = ServerConfig {
        served_model_names: served_model_names.clone(),
        model_root: shown,
        api_keys,
        api_key_scope: match a.api_key_scope {
            KeyScope::All => ApiKeyScope::All,
            KeyScope::V1 => ApiKeyScope::V1,
        },
        request_id_headers: a.engine.vllm.enable_request_id_headers,
        server_load_tracking: a.engine.vllm.enable_server_load_tracking,
        cors: CorsConfig {
            allowed_origins: list_arg(&a.allowed_origins).context("--allowed-origins")?,
            allowed_methods: list_arg(&a.allowed_methods).context("--allowed-methods")?,
            allowed_headers: list_arg(&a.allowed_headers).context("--allowed-headers")?,
            allow_credentials: a.allow_credentials,
        },
        limits: Limits {
            max_prompt_chars: a.max_prompt_chars,
            max_new_tokens: a.max_new_tokens,
            max_body_bytes: usize::try_from(a.max_request_body_bytes).unwrap_or(usize::MAX),
            max_body_bytes_in_flight: usize::try_from(a.max_request_bytes_in_flight).unwrap_or(usize::MAX),
        },
        connections: ConnectionLimits {
            keep_alive_timeout: seconds(a.timeout_keep_alive),
            body_read_timeout: seconds(a.timeout_body_read),
            max_connections: a.limit_concurrency,
        },
        sse_keepalive: seconds(a.sse_keep_alive_interval),
        shutdown_grace: Duration::from_secs(a.shutdown_timeout),
        trust_request_chat_template: a.trust_request_chat_template,
        response_role: a.response_role.clone(),
        enable_prompt_tokens_details: a.enable_prompt_tokens_details,
        enable_force_include_usage: a.enable_force_include_usage,
        return_tokens_as_token_ids: a.return_tokens_as_token_ids,
        auto_tool_parser: a.tools.tool_call_parser.clone().filter(|_| a.tools.enable_auto_tool_choice),
        max_stored_responses: vllm_rs_server::response_store::ResponseStore::max_from_env()
            .map_err(anyhow::Error::msg)?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("vllm-rs-http")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        let addr = listener.local_addr()?;
        info!("listening on http://{addr} ({:.3} s after start); loading the model", started.elapsed().as_secs_f64());
        let state = AppState::new(config);
        let engine_args = a.engine.clone();
        let name = served_model_names[0].clone();
        let tools = a.tools.clone();
        let log_stats = (!a.disable_log_stats).then(log_stats_interval).transpose()?;
        vllm_rs_server::serve(listener, state, move || {
            load(model_arg, &engine_args, &name, &tools, overrides, log_stats).map_err(|e| format!("{e:#}"))
        })
        .await
        .map_err(anyhow::Error::msg)
    })
}

fn load(
    model: Option<String>,
    args: &EngineArgs,
    served_name: &str,
    tools: &ToolArgs,
    overrides: Option<serde_json::Map<String, serde_json::Value>>,
    log_stats: Option<Duration>,
) -> Result<ModelContext> {
    // A testing aid: hold the model back so tests can see the server before it is ready.
    if let Some(ms) = std::env::var("VLLM_RS_SERVE_LOAD_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let l = match setup::load_any(model.as_deref(), args)? {
        LoadedRunner::Generate(l) => l,
        LoadedRunner::Pooling(p) => return Ok(pooling_context(*p, served_name, log_stats)),
    };
    info!("serving {} as {served_name:?}", l.model_arg);
    let max_model_len = l.core.config.max_model_len;
    let mut defaults = SamplingDefaults::from_generation_config(l.generation.as_ref());
    if let Some(o) = &overrides {
        defaults = defaults.with_overrides(o).map_err(|e| anyhow::anyhow!("--override-generation-config: {e}"))?;
    }
    let reasoning = (tools.reasoning_parser.as_deref())
        .map(|n| ReasoningParser::by_name(n, &l.tokenizer).map_err(|e| anyhow::anyhow!("--reasoning-parser: {e}")))
        .transpose()?;
    if let Some(p) = tools.tool_call_parser.as_deref() {
        vllm_rs_server::tool_parsers::check_tokenizer(p, |t| l.tokenizer.token_to_id(t).is_some())
            .map_err(|e| anyhow::anyhow!("--tool-call-parser: {e}"))?;
    }
    if defaults != SamplingDefaults::default() {
        info!("default sampling parameters (generation config and its overrides): {defaults:?}");
    }
    let engine = EngineHandle::spawn(l.core);
    if let Some(interval) = log_stats {
        vllm_rs_engine::stat_logger::spawn(&engine, interval);
    }
    Ok(ModelContext {
        runner: Runner::Generate(engine),
        defaults,
        tokenizer: l.tokenizer,
        chat_template: l.chat_template.map(|t| Arc::clone(&t)),
        max_logprobs: l.max_logprobs,
        default_seed: l.default_seed,
        metrics: Metrics::new(served_name, max_model_len),
        reasoning,
        grammar_compiler: Default::default(),
    })
}

/// How often engine statistics are logged: $VLLM_LOG_STATS_INTERVAL seconds, as vLLM reads it.
fn log_stats_interval() -> Result<Duration> {
    match std::env::var("VLLM_LOG_STATS_INTERVAL") {
        Err(_) => Ok(vllm_rs_engine::stat_logger::DEFAULT_INTERVAL),
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .with_context(|| format!("VLLM_LOG_STATS_INTERVAL={v:?}: give a number of seconds above 0")),
    }
}

/// An embedding model's context: the pooling runner, no chat template or sampling defaults.
/// `--override-generation-config`, parsed and checked at start-up (before the model loads).
fn generation_overrides(arg: Option<&str>) -> Result<Option<serde_json::Map<String, serde_json::Value>>> {
    let Some(text) = arg else { return Ok(None) };
    let o = match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(o)) => o,
        _ => anyhow::bail!("--override-generation-config: expected a JSON object, got {text:?}"),
    };
    SamplingDefaults::default().with_overrides(&o).map_err(|e| anyhow::anyhow!("--override-generation-config: {e}"))?;
    Ok(Some(o))
}

fn pooling_context(p: LoadedPooling, served_name: &str, log_stats: Option<Duration>) -> ModelContext {
    info!("serving {} as {served_name:?} (embeddings: /v1/embeddings, /pooling, /score, /rerank)", p.model_arg);
    let max_model_len = p.limits.max_model_len;
    let handle = PoolingHandle::spawn(p.model, p.limits);
    if let Some(interval) = log_stats {
        vllm_rs_engine::stat_logger::spawn_pooling(&handle, interval);
    }
    ModelContext {
        runner: Runner::Pooling(handle),
        defaults: SamplingDefaults::default(),
        tokenizer: p.tokenizer,
        chat_template: None,
        max_logprobs: 0,
        default_seed: None,
        metrics: Metrics::new(served_name, max_model_len),
        reasoning: None,
        grammar_compiler: Default::default(),
    }
}

/// `--api-key-scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeyScope {
    All,
    V1,
}
