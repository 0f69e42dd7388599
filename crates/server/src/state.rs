//! Shared server state: configuration, and the model once it has loaded.

use crate::config::ServerConfig;
use crate::errors::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::reasoning::{ReasoningParser, ThinkTokens};
use crate::response_store::ResponseStore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use vllm_rs_engine::structured_output::token_bytes_from_tokenizer_json;
use vllm_rs_engine::{EngineHandle, GrammarCompiler, PoolingHandle};
use vllm_rs_frontend::{ChatTemplate, GenerationConfig, Tokenizer};

/// Sampling defaults from the model's generation config, applied when a request leaves a field
/// unset (vLLM's `--generation-config auto`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplingDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// `max_new_tokens`: the default `max_tokens`.
    pub max_tokens: Option<usize>,
}

impl SamplingDefaults {
    pub fn from_generation_config(g: Option<&GenerationConfig>) -> Self {
        let Some(g) = g else { return Self::default() };
        SamplingDefaults {
            temperature: g.temperature.map(|v| v as f32),
            top_p: g.top_p.map(|v| v as f32),
            top_k: g.top_k.map(|v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            min_p: g.min_p.map(|v| v as f32),
            repetition_penalty: g.repetition_penalty.map(|v| v as f32),
            max_tokens: g.max_new_tokens.map(|v| v as usize),
        }
    }

    /// vLLM's `--override-generation-config`: these keys of a JSON object replace (or set) the
    /// generation config's values; other keys are refused, naming the ones that apply.
    pub fn with_overrides(mut self, o: &serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        for (k, v) in o {
            let num = || v.as_f64().ok_or_else(|| format!("{k}: expected a number, got {v}"));
            let int = || v.as_i64().ok_or_else(|| format!("{k}: expected an integer, got {v}"));
            match k.as_str() {
                "temperature" => self.temperature = Some(num()? as f32),
                "top_p" => self.top_p = Some(num()? as f32),
                "top_k" => self.top_k = Some(int()?.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
                "min_p" => self.min_p = Some(num()? as f32),
                "repetition_penalty" => self.repetition_penalty = Some(num()? as f32),
                "max_new_tokens" => {
                    self.max_tokens = Some(usize::try_from(int()?).map_err(|_| format!("{k}: {v} < 0"))?)
                }
                _ => {
                    return Err(format!(
                        "{k} is not a default this server applies (temperature, top_p, top_k, min_p, \
                         repetition_penalty, max_new_tokens)"
                    ));
                }
            }
        }
        Ok(self)
    }
}

/// What runs the model: the generating engine, or the pooling runner of an encoder
/// (vLLM's `--runner generate` / `--runner pooling`).
pub enum Runner {
    Generate(Arc<EngineHandle>),
    Pooling(Arc<PoolingHandle>),
}

impl Runner {
    pub fn is_alive(&self) -> bool {
        match self {
            Runner::Generate(e) => e.is_alive(),
            Runner::Pooling(p) => p.is_alive(),
        }
    }

    pub fn shutdown(&self) {
        match self {
            Runner::Generate(e) => e.shutdown(),
            Runner::Pooling(p) => p.shutdown(),
        }
    }
}

/// The loaded model and everything requests need from it.
pub struct ModelContext {
    pub runner: Runner,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub defaults: SamplingDefaults,
    /// Largest `logprobs` / `prompt_logprobs` a request may ask for.
    pub max_logprobs: usize,
    /// `--seed`: requests without a seed get `seed + k` for the k-th sequence served.
    pub default_seed: Option<u64>,
    pub metrics: Metrics,
    /// `--reasoning-parser`, with its marker tokens in this vocabulary (none for `granite`).
    pub reasoning: Option<(ReasoningParser, Option<ThinkTokens>)>,
    /// Structured output's view of the vocabulary, built on first use (it walks every token).
    pub grammar_compiler: OnceLock<Result<Arc<GrammarCompiler>, String>>,
}

impl ModelContext {
    /// The grammar compiler for this model's vocabulary, or why there is none.
    pub fn grammar_compiler(&self) -> Result<Arc<GrammarCompiler>, String> {
        self.grammar_compiler.get_or_init(|| build_grammar_compiler(self).map(Arc::new)).clone()
    }

    pub fn max_model_len(&self) -> usize {
        match &self.runner {
            Runner::Generate(e) => e.config.max_model_len,
            Runner::Pooling(p) => p.limits.max_model_len,
        }
    }

    pub fn vocab_size(&self) -> usize {
        match &self.runner {
            Runner::Generate(e) => e.model_info.vocab_size,
            Runner::Pooling(p) => p.info.vocab_size,
        }
    }

    /// The generating engine; a pooling model answers generation requests with a 400.
    pub fn engine(&self) -> ApiResult<&Arc<EngineHandle>> {
        match &self.runner {
            Runner::Generate(e) => Ok(e),
            Runner::Pooling(p) => Err(ApiError::bad_request(format!(
                "This model ({}) is an embedding model: it serves /v1/embeddings, /pooling, /score and \
                 /rerank, not text generation.",
                p.info.architecture
            ))),
        }
    }

    /// The pooling runner; a generative model answers pooling requests with a 400.
    pub fn pooler(&self) -> ApiResult<&Arc<PoolingHandle>> {
        match &self.runner {
            Runner::Pooling(p) => Ok(p),
            Runner::Generate(e) => Err(ApiError::bad_request(format!(
                "This model ({}) generates text: embeddings, pooling, score and rerank need an embedding \
                 model (for example a BERT or MPNet sentence-transformers folder).",
                e.model_info.architecture
            ))),
        }
    }
}

/// Token bytes from the tokenizer's own JSON (byte-level BPE and SentencePiece-style vocabularies,
/// HF and GGUF alike), EOS and the generation config's extra EOS ids as the stops.
fn build_grammar_compiler(model: &ModelContext) -> Result<GrammarCompiler, String> {
    let text = model.tokenizer.inner().to_string(false).map_err(|e| e.to_string())?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let bytes = token_bytes_from_tokenizer_json(&json)?;
    let cfg = &model.engine().map_err(|e| e.message)?.config;
    let stops: Vec<u32> = cfg.eos_token_id.into_iter().chain(cfg.generation_eos_ids.iter().copied()).collect();
    GrammarCompiler::new(bytes, model.vocab_size(), &stops)
}

pub struct AppState {
    pub config: ServerConfig,
    model: OnceLock<Arc<ModelContext>>,
    pub started: Instant,
    pub started_unix: f64,
    /// True once shutdown has begun.
    shutting_down: watch::Sender<bool>,
    sequences_started: AtomicU64,
    /// One permit per byte of request body being read or parsed (`--max-request-bytes-in-flight`).
    pub body_budget: Option<Arc<tokio::sync::Semaphore>>,
    /// `/v1/responses` results kept for `GET` and `previous_response_id`.
    pub responses: ResponseStore,
    /// Requests in flight, for `GET /load` ([`crate::server_load`]).
    pub server_load: crate::server_load::ServerLoad,
}

impl AppState {
    pub fn new(config: ServerConfig) -> Arc<Self> {
        let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let budget = config.limits.max_body_bytes_in_flight.min(tokio::sync::Semaphore::MAX_PERMITS);
        let body_budget = (budget > 0).then(|| Arc::new(tokio::sync::Semaphore::new(budget)));
        Arc::new(AppState {
            responses: ResponseStore::new(config.max_stored_responses, crate::response_store::MAX_BYTES),
            config,
            body_budget,
            server_load: Default::default(),
            model: OnceLock::new(),
            started: Instant::now(),
            started_unix,
            shutting_down: watch::Sender::new(false),
            sequences_started: AtomicU64::new(0),
        })
    }

    /// Marks the model loaded: `/health` answers 200 from now on.
    pub fn set_ready(&self, model: ModelContext) {
        let _ = self.model.set(Arc::new(model));
    }

    pub fn model(&self) -> Option<&Arc<ModelContext>> {
        self.model.get()
    }

    /// The model, or the 503 a request gets while it loads or the server drains.
    pub fn ready_model(&self) -> ApiResult<Arc<ModelContext>> {
        if self.is_shutting_down() {
            return Err(ApiError::shutting_down());
        }
        self.model.get().cloned().ok_or_else(ApiError::not_ready)
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutting_down.borrow()
    }

    /// Turns true when shutdown begins.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutting_down.subscribe()
    }

    /// The name responses report.
    pub fn model_name(&self) -> &str {
        &self.config.served_model_names[0]
    }

    /// Checks the request's `model` against the served names (absent or empty: the default).
    pub fn check_model(&self, requested: Option<&str>) -> ApiResult<()> {
        match requested {
            None | Some("") => Ok(()),
            Some(m) if self.config.served_model_names.iter().any(|n| n == m) => Ok(()),
            Some(m) => Err(ApiError::model_not_found(m, &self.config.served_model_names)),
        }
    }

    /// A seed for a sequence whose request gave none: `--seed + k`, or `None` without `--seed`.
    pub fn next_default_seed(&self, model: &ModelContext) -> Option<u64> {
        let k = self.sequences_started.fetch_add(1, Ordering::Relaxed);
        model.default_seed.map(|s| s.wrapping_add(k))
    }
}
