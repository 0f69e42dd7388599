//! OpenAI / vLLM request and response bodies (vLLM's field names, defaults and shapes).

pub mod chat;
pub mod common;
pub mod completion;
pub mod fields;
pub mod logprobs;
pub mod messages;
pub mod models;
pub mod pooling;
pub mod responses;
pub mod sampling_fields;
pub mod tokenize;
