pub mod client;
pub mod dataset;
pub mod metrics;
pub mod rng;
pub mod sse;
pub mod tokenizer;
