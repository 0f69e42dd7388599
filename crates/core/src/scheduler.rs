//! The scheduler: each step, hand out a token budget so every request's computed tokens catch up
//! with its known tokens (vLLM v1's one rule — no separate prefill and decode phases).
//!
//! Running requests are served first (in order), then waiting ones (FCFS or by priority). Long
//! prompts are cut into chunks by the budget; prefix-cache hits advance `num_computed_tokens`
//! for free; when blocks run out the newest running request (or the lowest priority one) is
//! preempted: its blocks are freed and it is recomputed later.

use crate::kv_cache_manager::{GroupBlockIds, KvCacheManager};
use crate::kv_cache_spec::KvCacheLayout;
use crate::request::{FinishReason, Request, RequestStatus};
use std::collections::{HashMap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulingPolicy {
    Fcfs,
    /// Lower `priority` first, then arrival order; preemption takes the lowest priority.
    Priority,
}

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub max_model_len: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    pub enable_prefix_caching: bool,
    /// When false, a prompt that does not fit the remaining budget waits for a later step.
    pub enable_chunked_prefill: bool,
    /// Caps one request's share of a step when others are waiting (0 = no cap).
    pub long_prefill_token_threshold: usize,
    pub policy: SchedulingPolicy,
    /// The model's KV cache groups.
    pub kv_cache_layout: KvCacheLayout,
    /// Slots reserved past a request's scheduled tokens (vLLM's `num_lookahead_tokens`): a
    /// draft model writes its proposals' K/V there at the end of the step.
    pub num_lookahead_tokens: usize,
    /// Recurrent-state snapshots kept for prefix caching (models with recurrent layers; state
    /// slots `max_num_seqs..max_num_seqs + num_state_snapshots`), 0 for none.
    pub num_state_snapshots: usize,
    /// Tokens between periodic state snapshots (vLLM's `mamba_block_size`), whole blocks.
    pub mamba_block_size: usize,
}

/// One request's part of a step, as the runner needs it: full data the first time (and after
/// a preemption), afterwards only what changed (vLLM's `NewRequestData` / `CachedRequestData`).
/// The runner keeps each request's tokens and block tables itself and appends what it samples.
#[derive(Clone, Debug)]
pub struct ScheduledRequest {
    pub request_id: String,
    /// Tokens computed this step, at positions `num_computed_tokens..`.
    pub num_scheduled_tokens: usize,
    /// Tokens already in the cache before this step.
    pub num_computed_tokens: usize,
    /// The prompt, sent once: the request is new to the runner.
    pub new_prompt_token_ids: Option<Vec<u32>>,
    /// The request was preempted and resumes: `new_block_ids` is its whole table again.
    pub resumed_from_preemption: bool,
    /// Blocks appended to each KV cache group's table since the runner last heard (the whole
    /// tables for a new or resumed request).
    pub new_block_ids: GroupBlockIds,
    /// This step reaches the end of the known tokens, so a new token is sampled.
    pub sample: bool,
    /// Draft tokens scheduled after the known ones (their positions follow; the model checks
    /// them and the step returns the accepted ones plus one more).
    pub spec_token_ids: Vec<u32>,
    /// Recurrent layers: the snapshot slot to copy into the request's state before the step
    /// (a prefix-cache hit), and the snapshots to save during it: `(position, slot)`, the
    /// state once the tokens before `position` are in.
    pub state_restore: Option<u32>,
    pub state_saves: Vec<(usize, u32)>,
}

#[derive(Clone, Debug, Default)]
pub struct SchedulerOutput {
    pub scheduled: Vec<ScheduledRequest>,
    pub num_batched_tokens: usize,
    /// Requests preempted in this step (their runner state must be dropped).
    pub preempted: Vec<String>,
}

/// What happened to one request after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestUpdate {
    pub request_id: String,
    pub new_token_ids: Vec<u32>,
    pub finish_reason: Option<FinishReason>,
    /// The stop token id that ended it (not set for EOS, as vLLM).
    pub stop_token: Option<u32>,
}

pub struct Scheduler {
    pub config: SchedulerConfig,
    pub kv: KvCacheManager,
    requests: HashMap<String, Request>,
    /// Per live request: how many of each group's blocks the runner has been sent (absent:
    /// the runner has not seen the request since it arrived or was preempted).
    sent_blocks: HashMap<String, Vec<usize>>,
    waiting: VecDeque<String>,
    running: Vec<String>,
    next_arrival: u64,
    pub num_preemptions: u64,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        let kv = KvCacheManager::new(
            config.kv_cache_layout.clone(),
            config.num_blocks,
            config.block_size,
            config.enable_prefix_caching,
            config.max_model_len,
            config.max_num_seqs,
        )
        .with_state_snapshots(config.max_num_seqs, config.num_state_snapshots, config.mamba_block_size);
        Scheduler {
            config,
            kv,
            requests: HashMap::new(),
            sent_blocks: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_arrival: 0,
            num_preemptions: 0,
        }
    }

    /// Queues a request. Its `arrival` is assigned here; ids must be unique among live requests.
    pub fn add_request(&mut self, mut req: Request) {
        assert!(!self.requests.contains_key(&req.request_id), "duplicate request id {}", req.request_id);
        req.arrival = self.next_arrival;
        self.next_arrival += 1;
        req.status = RequestStatus::Waiting;
        req.update_block_hashes(self.config.block_size);
        let id = req.request_id.clone();
        self.requests.insert(id.clone(), req);
        self.enqueue_waiting(id, false);
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn has_unfinished(&self) -> bool {
        !self.requests.is_empty()
    }

    pub fn request(&self, id: &str) -> Option<&Request> {
        self.requests.get(id)
    }

    /// Puts a request in the waiting queue: at the front if preempted (FCFS), else in order.
    fn enqueue_waiting(&mut self, id: String, preempted: bool) {
        match self.config.policy {
            SchedulingPolicy::Fcfs if preempted => self.waiting.push_front(id),
            SchedulingPolicy::Fcfs => self.waiting.push_back(id),
            SchedulingPolicy::Priority => {
                let key = |r: &Request| (r.priority, r.arrival);
                let k = key(&self.requests[&id]);
                let pos = self.waiting.partition_point(|w| key(&self.requests[w]) <= k);
                self.waiting.insert(pos, id);
            }
        }
    }

    /// Plans one step.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut budget = self.config.max_num_batched_tokens;
        let mut planned: Vec<(String, usize)> = Vec::new();
        let mut preempted = Vec::new();
        let threshold = if self.requests.len() > 1 { self.config.long_prefill_token_threshold } else { 0 };

        // Running requests first.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i].clone();
            let req = &self.requests[&id];
            // Draft tokens count in the budget like any other (vLLM's rule); a cut drops the tail.
            let mut n = req.num_tokens() + req.spec_token_ids.len() - req.num_computed_tokens;
            if threshold > 0 {
                n = n.min(threshold);
            }
            n = n.min(req.max_tokens_per_step.unwrap_or(usize::MAX));
            n = n.min(budget).min(self.config.max_model_len.saturating_sub(req.num_computed_tokens));
            if n == 0 {
                i += 1;
                continue;
            }
            let mut scheduled = false;
            loop {
                if self.kv.allocate_slots(&self.requests[&id], n + self.config.num_lookahead_tokens, &[]) {
                    scheduled = true;
                    break;
                }
                let victim_idx = self.pick_victim();
                let victim = self.running.remove(victim_idx);
                if victim_idx < i {
                    i -= 1;
                }
                if let Some(p) = planned.iter().position(|(pid, _)| *pid == victim) {
                    budget += planned.remove(p).1;
                }
                self.preempt(&victim);
                let was_self = victim == id;
                preempted.push(victim);
                if was_self {
                    break;
                }
            }
            if !scheduled {
                if self.config.policy == SchedulingPolicy::Priority {
                    continue; // it was the lowest priority; later ones may still fit
                }
                break;
            }
            planned.push((id, n));
            budget -= n;
            i += 1;
        }

        // Then waiting requests, unless this step had to preempt.
        if preempted.is_empty() {
            while budget > 0 && self.running.len() < self.config.max_num_seqs {
                let Some(id) = self.waiting.front().cloned() else { break };
                let req = &self.requests[&id];
                let (hit_blocks, hit_tokens) = if req.num_computed_tokens == 0 {
                    self.kv.get_computed_blocks(&self.requests[&id])
                } else {
                    (Vec::new(), 0)
                };
                let req = &self.requests[&id];
                let computed = req.num_computed_tokens + hit_tokens;
                let mut n = req.num_tokens() - computed;
                if threshold > 0 {
                    n = n.min(threshold);
                }
                n = n.min(req.max_tokens_per_step.unwrap_or(usize::MAX));
                if !self.config.enable_chunked_prefill && n > budget {
                    break;
                }
                n = n.min(budget);
                if !self.kv.allocate_slots(req, n + self.config.num_lookahead_tokens, &hit_blocks) {
                    break;
                }
                self.waiting.pop_front();
                let req = self.requests.get_mut(&id).expect("waiting request exists");
                if req.num_cached_tokens.is_none() {
                    req.num_cached_tokens = Some(hit_tokens);
                }
                req.num_computed_tokens = computed;
                req.status = RequestStatus::Running;
                self.running.push(id.clone());
                planned.push((id, n));
                budget -= n;
            }
        }

        // Build the step and advance `num_computed_tokens` (vLLM's `_update_after_schedule`).
        let mut out = SchedulerOutput { preempted, ..Default::default() };
        for (id, n) in planned {
            let req = self.requests.get_mut(&id).expect("planned request exists");
            let start = req.num_computed_tokens;
            req.num_computed_tokens += n;
            out.num_batched_tokens += n;
            let num_drafts = (start + n).saturating_sub(req.num_tokens());
            let mut spec_token_ids = std::mem::take(&mut req.spec_token_ids);
            spec_token_ids.truncate(num_drafts);
            let num_groups = self.kv.layout.groups.len();
            let (new_prompt_token_ids, resumed_from_preemption, sent) = match self.sent_blocks.get_mut(&id) {
                Some(sent) => (None, false, sent),
                None => {
                    let first = req.num_preemptions == 0;
                    let sent = self.sent_blocks.entry(id.clone()).or_insert_with(|| vec![0; num_groups]);
                    (first.then(|| req.prompt_token_ids().to_vec()), !first, sent)
                }
            };
            // Only the ids the runner has not seen yet are copied.
            let new_block_ids = sent
                .iter_mut()
                .enumerate()
                .map(|(g, n)| {
                    let table = self.kv.group_block_ids(&id, g);
                    table[std::mem::replace(n, table.len())..].to_vec()
                })
                .collect();
            let state_restore = self.kv.take_state_restore(&id);
            let req = &self.requests[&id];
            // Snapshots hold verified tokens only: none within the drafts.
            let state_saves = self.kv.plan_state_saves(req, start, start + n - num_drafts);
            out.scheduled.push(ScheduledRequest {
                state_restore,
                state_saves,
                num_scheduled_tokens: n,
                num_computed_tokens: start,
                new_prompt_token_ids,
                resumed_from_preemption,
                new_block_ids,
                sample: req.num_computed_tokens >= req.num_tokens(),
                spec_token_ids,
                request_id: id,
            });
        }
        out
    }

    fn pick_victim(&self) -> usize {
        match self.config.policy {
            SchedulingPolicy::Fcfs => self.running.len() - 1,
            SchedulingPolicy::Priority => {
                let key = |id: &String| {
                    let r = &self.requests[id];
                    (r.priority, r.arrival)
                };
                (0..self.running.len()).max_by_key(|&j| key(&self.running[j])).expect("running is not empty")
            }
        }
    }

    fn preempt(&mut self, id: &str) {
        self.kv.free(id);
        self.sent_blocks.remove(id);
        let req = self.requests.get_mut(id).expect("preempted request exists");
        req.status = RequestStatus::Preempted;
        req.num_computed_tokens = 0;
        req.spec_token_ids.clear();
        req.num_preemptions += 1;
        self.num_preemptions += 1;
        self.enqueue_waiting(id.to_string(), true);
    }

    /// Applies a step's new tokens (`sampled[i]` for `output.scheduled[i]`: none, one, or
    /// several accepted at once), checking the stop conditions after each as vLLM does (tokens
    /// after a stop are dropped), and frees finished requests. Tokens whose K/V this step did
    /// not compute are simply not counted in `num_computed_tokens`: the next step catches up.
    pub fn update_from_output(&mut self, output: &SchedulerOutput, sampled: &[Vec<u32>]) -> Vec<RequestUpdate> {
        assert_eq!(output.scheduled.len(), sampled.len());
        self.kv.commit_state_snapshots();
        let mut updates = Vec::new();
        for (s, toks) in output.scheduled.iter().zip(sampled) {
            if toks.is_empty() {
                continue;
            }
            let Some(req) = self.requests.get_mut(&s.request_id) else { continue };
            if req.is_finished() {
                continue;
            }
            // Rejected drafts' positions were computed for nothing: their K/V is overwritten later.
            let rejected = s.spec_token_ids.len() + 1 - toks.len().min(s.spec_token_ids.len() + 1);
            req.num_computed_tokens -= rejected;
            let mut new_token_ids = Vec::with_capacity(toks.len());
            let mut finish = None;
            for &tok in toks {
                req.append_output_token(tok, self.config.block_size);
                new_token_ids.push(tok);
                finish = req.check_stop(self.config.max_model_len);
                if finish.is_some() {
                    break;
                }
            }
            let stop_token = if finish.is_some() { req.stop_token } else { None };
            updates.push(RequestUpdate {
                request_id: s.request_id.clone(),
                new_token_ids,
                finish_reason: finish,
                stop_token,
            });
            if let Some(reason) = finish {
                self.finish(&s.request_id, reason);
            }
        }
        updates
    }

    /// Sets the draft tokens a request will have verified in the next step (dropped for
    /// requests no longer running).
    pub fn set_spec_token_ids(&mut self, request_id: &str, drafts: Vec<u32>) {
        if let Some(req) = self.requests.get_mut(request_id).filter(|r| r.status == RequestStatus::Running) {
            req.spec_token_ids = drafts;
        }
    }

    /// Ends requests (abort, or a stop string found by the frontend); frees their blocks.
    /// Returns the ids that were still live.
    pub fn finish_requests(&mut self, ids: &[String], reason: FinishReason) -> Vec<String> {
        let live: Vec<String> = ids.iter().filter(|id| self.requests.contains_key(*id)).cloned().collect();
        for id in &live {
            self.finish(id, reason);
        }
        live
    }

    fn finish(&mut self, id: &str, reason: FinishReason) {
        self.running.retain(|r| r != id);
        self.waiting.retain(|r| r != id);
        self.kv.free(id);
        self.sent_blocks.remove(id);
        if let Some(mut req) = self.requests.remove(id) {
            req.status = RequestStatus::Finished(reason);
        }
    }

    /// Full consistency check (tests run it after every step).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.kv.check_invariants()?;
        let free = self.kv.pool.num_free_blocks();
        let used = self.kv.reference_counts().iter().filter(|&&r| r > 0).count();
        let null = usize::from(self.kv.pool.has_null_block());
        if free + used + null != self.kv.pool.num_blocks() {
            return Err(format!("free {free} + used {used} + null {null} != total {}", self.kv.pool.num_blocks()));
        }
        if self.running.len() + self.waiting.len() != self.requests.len() {
            return Err("a live request is neither running nor waiting".into());
        }
        let paged: Vec<usize> =
            (0..self.kv.layout.groups.len()).filter(|&g| self.kv.layout.groups[g].spec.is_paged()).collect();
        for id in &self.running {
            let r = &self.requests[id];
            for &g in &paged {
                let blocks = self.kv.group_block_ids(id, g).len();
                if blocks * self.config.block_size < r.num_computed_tokens {
                    return Err(format!(
                        "{id}: {blocks} blocks of group {g} cannot hold {} computed tokens",
                        r.num_computed_tokens
                    ));
                }
            }
        }
        for id in &self.waiting {
            if self.kv.block_ids(id).iter().any(|t| !t.is_empty()) {
                return Err(format!("waiting request {id} holds blocks"));
            }
        }
        Ok(())
    }
}
