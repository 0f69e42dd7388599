//! `vllm-rs bench serve`: a load generator for any OpenAI-compatible server with the options,
//! report and result JSON of vLLM's `vllm bench serve`.

pub mod serve;
