//! vLLM's OpenAI-compatible HTTP server on top of the vllm.rs engine: `/v1/completions`,
//! `/v1/chat/completions` (streaming and not), `/v1/responses`, Anthropic's `/v1/messages`
//! (both over the chat path, see [`turn`]), `/v1/models`, `/tokenize`, `/detokenize`,
//! `/health`, `/version` and `/metrics`; on embedding models `/v1/embeddings`, `/pooling`,
//! `/score` and `/rerank`; with vLLM's request fields, defaults, response shapes,
//! error bodies and metric names.
//!
//! [`serve`] listens at once, loads the model on a blocking thread (`/health` answers 503 until
//! it is ready), and on SIGINT/SIGTERM stops accepting, lets in-flight requests finish within the
//! grace period, stops the engine and returns.

pub mod app;
pub mod auth;
pub mod beam_search;
pub mod chat_output;
pub mod config;
pub mod connections;
pub mod errors;
pub mod generation;
pub mod harmony;
pub mod json_body;
pub mod logit_bias;
pub mod metrics;
pub mod orca;
pub mod pooling;
pub mod prompt;
pub mod protocol;
pub mod reasoning;
pub mod response_store;
pub mod routes;
pub mod sampling;
pub mod server_load;
pub mod shutdown;
pub mod sse;
pub mod state;
pub mod structured;
pub mod tool_parsers;
pub mod tools;
pub mod turn;
pub mod ui;

pub use config::{ApiKeyScope, ConnectionLimits, CorsConfig, Limits, ServerConfig};
pub use shutdown::serve;
pub use state::{AppState, ModelContext, Runner, SamplingDefaults};
