//! vLLM's engine-core data structures, with no tensors, threads or I/O:
//! requests, the block pool, prefix-cache hashing, the KV cache manager and the scheduler.

pub mod block_hash;
pub mod block_pool;
pub mod kv_cache_manager;
pub mod kv_cache_spec;
pub mod request;
pub mod scheduler;
pub mod single_type_manager;
pub mod state_snapshots;

pub use block_pool::{BlockId, BlockPool};
pub use kv_cache_manager::{GroupBlockIds, KvCacheManager, PrefixCacheStats};
pub use kv_cache_spec::{KvCacheGroup, KvCacheLayout, KvCacheSpec};
pub use request::{FinishReason, Request, RequestStatus, StopParams};
pub use scheduler::{RequestUpdate, ScheduledRequest, Scheduler, SchedulerConfig, SchedulerOutput, SchedulingPolicy};
