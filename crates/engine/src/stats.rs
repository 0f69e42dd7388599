//! Engine-side counters and gauges, named after vLLM's Prometheus metrics.

use std::time::Duration;
use vllm_rs_core::{FinishReason, Scheduler, SchedulerOutput};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// `vllm:num_requests_running`
    pub num_running: usize,
    /// `vllm:num_requests_waiting`
    pub num_waiting: usize,
    /// `vllm:kv_cache_usage_perc` (0..=1)
    pub kv_cache_usage: f64,
    /// `vllm:prompt_tokens_total`: prompt tokens of requests whose prefill completed
    pub prompt_tokens_total: u64,
    /// `vllm:prompt_tokens_cached_total`: of those, served from the prefix cache
    pub prompt_tokens_cached_total: u64,
    /// `vllm:generation_tokens_total`
    pub generation_tokens_total: u64,
    /// `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` (tokens)
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    /// `vllm:num_preemptions_total`
    pub num_preemptions_total: u64,
    /// `vllm:request_success_total{finished_reason=...}`: stop, length, abort
    pub finished_stop: u64,
    pub finished_length: u64,
    pub finished_abort: u64,
    pub num_steps: u64,
    pub busy_seconds: f64,
    /// `vllm:spec_decode_num_drafts` (steps in which a request had drafts verified),
    /// `vllm:spec_decode_num_draft_tokens`, `vllm:spec_decode_num_accepted_tokens`.
    pub spec_decode_num_drafts: u64,
    pub spec_decode_num_draft_tokens: u64,
    pub spec_decode_num_accepted_tokens: u64,
    /// `vllm:spec_decode_num_accepted_tokens_per_pos`: accepted drafts at each draft position.
    pub spec_decode_accepted_per_pos: Vec<u64>,
    /// Whether speculative decoding is on (its metrics are shown then, as vLLM).
    pub spec_decode_enabled: bool,
}

impl EngineStats {
    pub fn record_step(&mut self, out: &SchedulerOutput, sched: &Scheduler, generated: usize, took: Duration) {
        self.record_gauges(sched);
        self.generation_tokens_total += generated as u64;
        self.prefix_cache_queries_total = sched.kv.stats.queries;
        self.prefix_cache_hits_total = sched.kv.stats.hits;
        self.num_preemptions_total = sched.num_preemptions;
        if !out.scheduled.is_empty() {
            self.num_steps += 1;
            self.busy_seconds += took.as_secs_f64();
        }
    }

    /// Counts drafts and accepted drafts: a request's step returns the accepted drafts plus
    /// one token of the model's own.
    pub fn record_spec_decode(&mut self, out: &SchedulerOutput, sampled: &[Vec<u32>]) {
        for (s, toks) in out.scheduled.iter().zip(sampled) {
            let drafts = s.spec_token_ids.len();
            if drafts == 0 || toks.is_empty() {
                continue;
            }
            let accepted = toks.len() - 1;
            self.spec_decode_num_drafts += 1;
            self.spec_decode_num_draft_tokens += drafts as u64;
            self.spec_decode_num_accepted_tokens += accepted as u64;
            if self.spec_decode_accepted_per_pos.len() < drafts {
                self.spec_decode_accepted_per_pos.resize(drafts, 0);
            }
            self.spec_decode_accepted_per_pos.iter_mut().take(accepted).for_each(|c| *c += 1);
        }
    }

    /// The gauges (running, waiting, KV usage) as the scheduler has them now: after a step, and
    /// after requests were added or aborted between steps.
    pub fn record_gauges(&mut self, sched: &Scheduler) {
        self.num_running = sched.num_running();
        self.num_waiting = sched.num_waiting();
        self.kv_cache_usage = sched.kv.usage();
    }

    pub fn record_prefill(&mut self, prompt_tokens: usize, cached_tokens: usize) {
        self.prompt_tokens_total += prompt_tokens as u64;
        self.prompt_tokens_cached_total += cached_tokens as u64;
    }

    pub fn record_finished(&mut self, reason: FinishReason) {
        match reason {
            FinishReason::Stop => self.finished_stop += 1,
            FinishReason::Length => self.finished_length += 1,
            FinishReason::Abort => self.finished_abort += 1,
        }
    }
}
