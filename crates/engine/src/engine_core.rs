//! The engine core: scheduler + model runner, stepped by its owner (the engine thread, or a
//! caller running an offline batch). No locks, no awaiting: one step is schedule → run → update.

use crate::draft_model::Drafter;
use crate::draft_round::drafter_bits;
use crate::head_drafter::HeadDrafter;
use crate::runner::{ModelRunner, Proposer};
use crate::sampler::TokenLogprobs;
use crate::sampling_params::{LogprobsMode, ParamError, SamplingParams};
use crate::stats::EngineStats;
use std::time::Instant;
use thiserror::Error;
use vllm_rs_core::{
    FinishReason, KvCacheLayout, KvCacheSpec, Request, Scheduler, SchedulerConfig, SchedulingPolicy, StopParams,
};
use vllm_rs_kernels::attention::KvDtype;
use vllm_rs_kernels::quant_act::ActBits;
use vllm_rs_models::{Model, ModelInfo};

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub block_size: usize,
    pub num_blocks: usize,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    pub long_prefill_token_threshold: usize,
    pub policy: SchedulingPolicy,
    pub logprobs_mode: LogprobsMode,
    /// Element type of the KV cache.
    pub kv_cache_dtype: KvDtype,
    /// Speculative decoding (`--speculative-config`), if on.
    pub speculative_config: Option<crate::speculative::SpeculativeConfig>,
    /// Keep every position of sliding-window layers too (one group of full-attention layers;
    /// vLLM's `--disable-hybrid-kv-cache-manager`).
    pub disable_hybrid_kv_cache_manager: bool,
    /// The tokenizer's EOS.
    pub eos_token_id: Option<u32>,
    /// Extra EOS ids from generation_config.json: they stop generation unless `ignore_eos`.
    pub generation_eos_ids: Vec<u32>,
    /// Logits memory one step may spend on a request's prompt logprobs (every prompt row needs
    /// a vocabulary of logits): its prompt runs in chunks of `bytes / (4 · vocab)` rows, so a
    /// long prompt neither holds that memory for good nor stalls the other requests for long.
    pub prompt_logprobs_bytes_per_step: usize,
    /// Models with recurrent layers: state snapshots kept for prefix caching (each as large as
    /// one request's whole recurrent state), and the tokens between periodic ones (a multiple
    /// of `block_size`; vLLM's `--mamba-block-size`).
    pub num_state_snapshots: usize,
    pub mamba_block_size: usize,
    /// Activation bits of the drafter's quantized matmuls (speculative decoding with a draft
    /// model or head). `None`: int8 where the backend dots it faster, since a drafter only
    /// proposes ([`crate::draft_round::drafter_bits`]); tests that need the drafter to compute
    /// exactly as the target set the target's.
    pub draft_activation_bits: Option<ActBits>,
    /// A draft model's head scores its first this many ids and each request's own rarer ids
    /// ([`crate::draft_vocab::DraftVocab`]); 0: the whole head.
    pub draft_head_rows: usize,
}

impl EngineConfig {
    /// Defaults as vLLM's, with `num_blocks` to be filled in by [`kv_blocks_for_bytes`].
    pub fn new(max_model_len: usize, num_blocks: usize) -> Self {
        EngineConfig {
            block_size: 16,
            num_blocks,
            max_model_len,
            max_num_seqs: 256,
            max_num_batched_tokens: 2048,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            long_prefill_token_threshold: 0,
            policy: SchedulingPolicy::Fcfs,
            logprobs_mode: LogprobsMode::RawLogprobs,
            kv_cache_dtype: KvDtype::F32,
            disable_hybrid_kv_cache_manager: false,
            speculative_config: None,
            prompt_logprobs_bytes_per_step: 64 << 20,
            eos_token_id: None,
            generation_eos_ids: Vec::new(),
            num_state_snapshots: 64,
            mamba_block_size: 256,
            draft_activation_bits: None,
            draft_head_rows: crate::draft_vocab::DRAFT_HEAD_ROWS,
        }
    }
}

/// What drafts with weights of its own (`--speculative-config` methods `draft_model`, `mtp`,
/// `eagle3`).
pub enum DraftWeights {
    /// A smaller model of the target's vocabulary.
    Model(Box<dyn Model>),
    /// A head on the target's hidden states: its checkpoint's multi-token-prediction layer, or
    /// an EAGLE-3 head.
    Head(Box<dyn vllm_rs_models::draft_head::DraftHead>),
}

impl DraftWeights {
    /// The drafter's shape: its vocabulary and the cache layers of its own K/V.
    pub fn info(&self) -> &ModelInfo {
        match self {
            DraftWeights::Model(m) => m.info(),
            DraftWeights::Head(h) => h.info(),
        }
    }
}

/// The KV cache group whose block tables a drafter shares: one that keeps every position (a
/// window's blocks are freed as it moves, the drafter attends over everything). The drafter
/// must speak the target's vocabulary.
fn draft_group(target: &dyn Model, draft: &ModelInfo, layout: &KvCacheLayout) -> Result<usize, EngineError> {
    let t = target.info();
    if t.vocab_size != draft.vocab_size {
        return Err(EngineError::InvalidRequest(format!(
            "draft_model: the draft's vocabulary ({} tokens, {}) differs from the target's ({}, {}); use a draft \
             of the same family",
            draft.vocab_size, draft.architecture, t.vocab_size, t.architecture
        )));
    }
    let keeps_all = |s: &KvCacheSpec| matches!(s, KvCacheSpec::FullAttention { .. } | KvCacheSpec::Mla { .. });
    layout.groups.iter().position(|g| keeps_all(&g.spec)).ok_or_else(|| {
        EngineError::InvalidRequest(
            "speculative decoding: the target has no full-attention layers whose block tables the drafter can \
             share; add --disable-hybrid-kv-cache-manager"
                .into(),
        )
    })
}

/// How the model's layers group into KV cache groups with blocks of `block_size` tokens
/// (every layer keeping all positions when `hybrid` is off).
pub fn kv_cache_layout(model: &dyn Model, block_size: usize, hybrid: bool) -> KvCacheLayout {
    let specs = &model.info().kv_cache_specs;
    match hybrid {
        true => KvCacheLayout::new(specs, block_size),
        false => KvCacheLayout::new(&specs.iter().map(|s| s.without_window()).collect::<Vec<_>>(), block_size),
    }
}

/// Bytes one block id takes over every cache tensor (K and V of `dtype`).
pub fn kv_bytes_per_block(layout: &KvCacheLayout, dtype: KvDtype) -> u64 {
    (layout.block_elements() * dtype.size()) as u64
}

/// Blocks one request of `max_model_len` tokens can hold at once over all groups (a window
/// holds only its span plus a step's tokens), and the null block windows need.
pub fn kv_blocks_per_request(
    layout: &KvCacheLayout,
    block_size: usize,
    max_model_len: usize,
    step_tokens: usize,
) -> usize {
    let windows = layout.groups.iter().any(|g| matches!(g.spec, KvCacheSpec::SlidingWindow { .. }));
    layout.max_blocks_per_request(block_size, max_model_len, step_tokens) + usize::from(windows)
}

/// A request as the engine takes it: token ids and sampling parameters.
#[derive(Clone, Debug)]
pub struct EngineRequest {
    pub request_id: String,
    pub prompt_token_ids: Vec<u32>,
    pub params: SamplingParams,
    /// Lower is served first under the priority policy.
    pub priority: i32,
    pub cache_salt: Option<String>,
}

/// New results of one request after a step.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOutput {
    pub request_id: String,
    pub new_token_ids: Vec<u32>,
    /// One entry per new token when `logprobs` was requested.
    pub logprobs: Vec<TokenLogprobs>,
    /// Sent once, with the first token, when `prompt_logprobs` was requested.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    pub finish_reason: Option<FinishReason>,
    /// The stop token that ended the request (not for EOS).
    pub stop_token: Option<u32>,
    pub num_prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub num_cached_tokens: usize,
}

#[derive(Clone, Debug, Error, PartialEq)]
pub enum EngineError {
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("the engine has stopped")]
    Stopped,
    /// A step failed (a device error, or a bug): the engine stopped with it.
    #[error("the engine failed and has stopped: {0}")]
    Failed(String),
}

pub struct EngineCore {
    pub config: EngineConfig,
    pub scheduler: Scheduler,
    pub runner: ModelRunner,
    pub stats: EngineStats,
}

impl EngineCore {
    pub fn new(model: Box<dyn Model>, config: EngineConfig) -> Result<Self, EngineError> {
        Self::with_draft(model, None, config)
    }

    /// An engine whose `draft_model` or `mtp` speculative decoding proposes with `draft`.
    pub fn with_draft(
        model: Box<dyn Model>,
        draft: Option<DraftWeights>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let layout = kv_cache_layout(model.as_ref(), config.block_size, !config.disable_hybrid_kv_cache_manager);
        let blocks_needed =
            kv_blocks_per_request(&layout, config.block_size, config.max_model_len, config.max_num_batched_tokens);
        if config.num_blocks < blocks_needed {
            return Err(EngineError::InvalidRequest(format!(
                "the KV cache holds {} blocks of {} tokens, fewer than the {blocks_needed} one request of \
                 max_model_len = {} tokens needs; give it more memory (--kv-cache-memory or --gpu-memory-utilization) or lower --max-model-len",
                config.num_blocks, config.block_size, config.max_model_len
            )));
        }
        let scheduler = Scheduler::new(SchedulerConfig {
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_model_len: config.max_model_len,
            block_size: config.block_size,
            num_blocks: config.num_blocks,
            enable_prefix_caching: config.enable_prefix_caching,
            enable_chunked_prefill: config.enable_chunked_prefill,
            long_prefill_token_threshold: config.long_prefill_token_threshold,
            policy: config.policy,
            kv_cache_layout: layout.clone(),
            num_state_snapshots: config.num_state_snapshots,
            mamba_block_size: config.mamba_block_size,
            num_lookahead_tokens: match &config.speculative_config {
                Some(c) if c.has_weights() => c.num_speculative_tokens,
                _ => 0,
            },
        });
        let mut runner = ModelRunner::new(model, &config, &layout);
        let backend = vllm_rs_kernels::backend::default();
        backend.prepare_kv(&mut runner.kv).map_err(|e| {
            EngineError::InvalidRequest(format!(
                "the KV cache ({} blocks of {} tokens) cannot be placed on {}: {e}; give it less memory \
                 (--kv-cache-memory or --gpu-memory-utilization)",
                config.num_blocks,
                config.block_size,
                backend.name()
            ))
        })?;
        if let Some(c) = config.speculative_config.as_ref().filter(|c| c.has_weights()) {
            let draft =
                draft.ok_or_else(|| EngineError::InvalidRequest(format!("{}: no draft weights given", c.method)))?;
            let (k, blocks, bs, dtype) =
                (c.num_speculative_tokens, config.num_blocks, config.block_size, config.kv_cache_dtype);
            let bits =
                config.draft_activation_bits.unwrap_or_else(|| drafter_bits(vllm_rs_kernels::backend::default()));
            if let DraftWeights::Model(m) = &draft
                && m.info().has_recurrent_layers()
            {
                // Its own rejected drafts would need its state rolled back too.
                return Err(EngineError::InvalidRequest(format!(
                    "draft_model: the draft ({}) has recurrent (linear-attention or state-space) layers; use a \
                     draft with attention layers only",
                    m.info().architecture
                )));
            }
            let group = draft_group(runner.model.as_ref(), draft.info(), &layout)?;
            let proposer = match draft {
                DraftWeights::Model(m) => {
                    let budget = config.max_num_batched_tokens;
                    let drafter = Drafter::new(m, k, blocks, bs, dtype, bits, budget);
                    let drafter = drafter.cut_head(config.draft_head_rows).stop_below(c.draft_p_min());
                    Proposer::Model(Box::new(drafter))
                }
                DraftWeights::Head(h) => Proposer::Head(Box::new(HeadDrafter::new(h, k, blocks, bs, dtype, bits))),
            };
            runner.set_drafter(proposer, group);
        }
        let stats = EngineStats { spec_decode_enabled: config.speculative_config.is_some(), ..Default::default() };
        Ok(EngineCore { config, scheduler, runner, stats })
    }

    pub fn model(&self) -> &dyn Model {
        self.runner.model.as_ref()
    }

    /// Validates and queues a request.
    pub fn add_request(&mut self, r: EngineRequest) -> Result<(), EngineError> {
        let vocab = self.model().info().vocab_size;
        r.params.validate(vocab)?;
        let n = r.prompt_token_ids.len();
        if n == 0 {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if let Some(&bad) = r.prompt_token_ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::InvalidRequest(format!("token id {bad} is out of vocabulary (size {vocab})")));
        }
        if n >= self.config.max_model_len {
            return Err(EngineError::InvalidRequest(format!(
                "This model's maximum context length is {} tokens. However, your request has {n} input tokens. \
                 Please reduce the length of the input messages.",
                self.config.max_model_len
            )));
        }
        if self.scheduler.request(&r.request_id).is_some() {
            return Err(EngineError::InvalidRequest(format!("request id {} is already in use", r.request_id)));
        }
        let p = &r.params;
        let eos = self.config.eos_token_id;
        // vLLM's update_from_generation_config: generation EOS ids stop unless ignore_eos.
        let mut stop_token_ids = p.stop_token_ids.clone();
        if !p.ignore_eos {
            stop_token_ids.extend(self.config.generation_eos_ids.iter().filter(|&&t| Some(t) != eos));
        }
        let mut all_stop: Vec<u32> = eos.into_iter().chain(self.config.generation_eos_ids.iter().copied()).collect();
        all_stop.extend(&p.stop_token_ids);
        let stop = StopParams {
            max_tokens: p.max_tokens,
            eos_token_id: if p.ignore_eos { None } else { eos },
            stop_token_ids,
        };
        let mut req = Request::new(r.request_id.clone(), r.prompt_token_ids, stop, 0);
        req.priority = r.priority;
        req.cache_salt = r.cache_salt;
        req.skip_reading_prefix_cache = p.prompt_logprobs.is_some();
        if p.prompt_logprobs.is_some() {
            let row = 4 * self.model().info().vocab_size;
            req.max_tokens_per_step = Some((self.config.prompt_logprobs_bytes_per_step / row).max(1));
        }
        self.runner.add_request(&r.request_id, r.params, all_stop);
        self.scheduler.add_request(req);
        self.stats.record_gauges(&self.scheduler);
        Ok(())
    }

    /// Ends requests early (client gone, or a stop string matched); frees their blocks.
    pub fn abort(&mut self, ids: &[String], reason: FinishReason) -> Vec<String> {
        let live = self.scheduler.finish_requests(ids, reason);
        for id in &live {
            self.runner.remove_request(id);
            self.stats.record_finished(reason);
        }
        self.stats.record_gauges(&self.scheduler);
        live
    }

    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// Runs the drafter with weights (draft model, draft head) for the requests of the last
    /// step, giving the scheduler their drafts. [`EngineCore::step`] does this at its end, or,
    /// when the step brought a prompt the draft model must go over, at the start of the next
    /// step, so the prompt's first token goes out first
    /// ([`crate::runner::ModelRunner::drafts_wait`]). n-gram drafts come with the step.
    pub fn propose_drafts(&mut self) {
        for (id, drafts) in self.runner.propose_drafts() {
            self.scheduler.set_spec_token_ids(&id, drafts);
        }
    }

    /// One engine step. Returns the new output of every request that produced any.
    pub fn step(&mut self) -> Vec<RequestOutput> {
        let t0 = Instant::now();
        self.propose_drafts();
        let out = self.scheduler.schedule();
        let mut results = self.runner.execute(&out);
        // Read before the update: finished requests leave the scheduler.
        let meta: std::collections::HashMap<String, (usize, usize, bool)> = out
            .scheduled
            .iter()
            .filter_map(|s| self.scheduler.request(&s.request_id))
            .map(|r| {
                (r.request_id.clone(), (r.prompt_len, r.num_cached_tokens.unwrap_or(0), r.num_output_tokens() == 0))
            })
            .collect();
        let sampled: Vec<Vec<u32>> = results.iter_mut().map(|r| std::mem::take(&mut r.tokens)).collect();
        self.stats.record_spec_decode(&out, &sampled);
        let updates = self.scheduler.update_from_output(&out, &sampled);
        let mut outputs = Vec::with_capacity(updates.len());
        let mut results: std::collections::HashMap<&str, _> =
            out.scheduled.iter().map(|s| s.request_id.as_str()).zip(results).collect();
        let mut generated = 0;
        for u in updates {
            let mut r = results.remove(u.request_id.as_str()).unwrap_or_default();
            generated += u.new_token_ids.len();
            // A stop inside the accepted tokens drops the rest, and their logprobs with them.
            r.logprobs.truncate(u.new_token_ids.len());
            if u.finish_reason.is_none() {
                self.scheduler.set_spec_token_ids(&u.request_id, std::mem::take(&mut r.spec_token_ids));
            }
            let (num_prompt_tokens, num_cached_tokens, first) = meta.get(&u.request_id).copied().unwrap_or_default();
            if first {
                self.stats.record_prefill(num_prompt_tokens, num_cached_tokens);
            }
            if let Some(reason) = u.finish_reason {
                self.runner.remove_request(&u.request_id);
                self.stats.record_finished(reason);
            }
            outputs.push(RequestOutput {
                new_token_ids: u.new_token_ids,
                logprobs: r.logprobs,
                prompt_logprobs: r.prompt_logprobs,
                finish_reason: u.finish_reason,
                stop_token: u.stop_token,
                num_prompt_tokens,
                num_cached_tokens,
                request_id: u.request_id,
            });
        }
        if !self.runner.drafts_wait() {
            self.propose_drafts();
        }
        self.stats.record_step(&out, &self.scheduler, generated, t0.elapsed());
        outputs
    }

    /// Runs requests to completion (the offline batch API behind `vllm-rs generate`).
    pub fn generate(&mut self, requests: Vec<EngineRequest>) -> Result<Vec<FinalOutput>, EngineError> {
        let ids: Vec<String> = requests.iter().map(|r| r.request_id.clone()).collect();
        let mut finals: std::collections::HashMap<String, FinalOutput> = Default::default();
        for r in requests {
            finals.insert(r.request_id.clone(), FinalOutput::new(&r));
            self.add_request(r)?;
        }
        while self.has_unfinished() {
            for o in self.step() {
                if let Some(f) = finals.get_mut(&o.request_id) {
                    f.absorb(o);
                }
            }
        }
        Ok(ids.into_iter().map(|id| finals.remove(&id).expect("every request has a final output")).collect())
    }
}

/// Everything a finished request produced.
#[derive(Clone, Debug, PartialEq)]
pub struct FinalOutput {
    pub request_id: String,
    pub prompt_token_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<TokenLogprobs>,
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    pub finish_reason: Option<FinishReason>,
    pub stop_token: Option<u32>,
    pub num_cached_tokens: usize,
}

impl FinalOutput {
    fn new(r: &EngineRequest) -> Self {
        FinalOutput {
            request_id: r.request_id.clone(),
            prompt_token_ids: r.prompt_token_ids.clone(),
            token_ids: Vec::new(),
            logprobs: Vec::new(),
            prompt_logprobs: None,
            finish_reason: None,
            stop_token: None,
            num_cached_tokens: 0,
        }
    }

    /// Folds one step's output into the running total.
    pub fn absorb(&mut self, o: RequestOutput) {
        if self.token_ids.is_empty() {
            self.num_cached_tokens = o.num_cached_tokens;
        }
        self.token_ids.extend(o.new_token_ids);
        self.logprobs.extend(o.logprobs);
        if o.prompt_logprobs.is_some() {
            self.prompt_logprobs = o.prompt_logprobs;
        }
        self.finish_reason = o.finish_reason.or(self.finish_reason);
        self.stop_token = o.stop_token.or(self.stop_token);
    }
}
