//! The engine: scheduler + model runner + sampler, stepped on its own thread.

pub mod draft_model;
pub mod draft_round;
pub mod draft_vocab;
pub mod engine_core;
pub mod handle;
pub mod head_drafter;
pub mod pooling_runner;
pub mod runner;
pub mod sampler;
pub mod sampling_params;
pub mod speculative;
pub mod stat_logger;
pub mod stats;
pub mod structured_output;

pub use engine_core::{
    DraftWeights, EngineConfig, EngineCore, EngineError, EngineRequest, FinalOutput, RequestOutput,
    kv_blocks_per_request, kv_bytes_per_block, kv_cache_layout,
};
pub use handle::{EngineHandle, RequestStream};
pub use pooling_runner::{PoolingHandle, PoolingInput, PoolingLimits, PoolingTask};
pub use runner::draft_state_slots;
pub use sampler::TokenLogprobs;
pub use sampling_params::{LogprobsMode, ParamError, SamplingParams};
pub use speculative::SpeculativeConfig;
pub use stats::EngineStats;
pub use structured_output::{Grammar, GrammarCompiler, GrammarSpec, TagStructure, ThinkingBudget};
pub use vllm_rs_core::{FinishReason, SchedulingPolicy};
pub use vllm_rs_kernels::attention::KvDtype;
pub use vllm_rs_models::pooling::{PoolingConfig, PoolingType, normalize};
