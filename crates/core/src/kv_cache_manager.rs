//! Which blocks each request holds in every KV cache group; prefix-cache lookups; allocation
//! for the tokens of a step.
//!
//! The coordinator of vLLM v1 (`kv_cache_coordinator.py` + `kv_cache_manager.py`): one
//! [`SingleTypeManager`] per paged group over one shared [`BlockPool`], and one state slot per
//! request for recurrent groups. A request's blocks cover positions
//! `0..num_computed_tokens + num_new_tokens` in every paged group; full blocks are published in
//! the prefix cache as soon as they are scheduled (their tokens are known), so a request
//! admitted later in the same step can already share them. A prefix hit is the longest prefix
//! every group can serve. Recurrent groups serve a prefix only where a snapshot of the state was
//! saved ([`StateSnapshots`]): with none configured, a model with recurrent layers gets no hits.

use crate::block_pool::{BlockId, BlockPool};
use crate::kv_cache_spec::{KvCacheLayout, KvCacheSpec};
use crate::request::Request;
use crate::single_type_manager::SingleTypeManager;
use crate::state_snapshots::StateSnapshots;
use std::collections::HashMap;

/// Prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` / `prefix_cache_hits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queries: u64,
    pub hits: u64,
}

/// A request's table in each group: block ids (paged groups) or its one state slot (recurrent).
pub type GroupBlockIds = Vec<Vec<BlockId>>;

pub struct KvCacheManager {
    pub pool: BlockPool,
    pub block_size: usize,
    pub enable_caching: bool,
    pub layout: KvCacheLayout,
    max_model_len: usize,
    /// One per group; `None` for recurrent groups.
    managers: Vec<Option<SingleTypeManager>>,
    /// Recurrent state slots: free ones, and each request's (shared by every recurrent group).
    free_slots: Vec<u32>,
    req_to_slot: HashMap<String, Vec<u32>>,
    /// Saved recurrent states, for prefix hits on models with recurrent layers.
    snapshots: Option<StateSnapshots>,
    /// Per admitted request: the snapshot its state starts from, and where its prefix-cache
    /// hit on the paged groups ended (a divergence point worth a snapshot).
    restores: HashMap<String, u32>,
    divergence: HashMap<String, usize>,
    /// Prefix caching asked for (it needs snapshots on models with recurrent layers).
    caching_requested: bool,
    pub stats: PrefixCacheStats,
}

impl KvCacheManager {
    /// `num_state_slots` bounds the requests that can hold recurrent state at once (unused
    /// without recurrent groups).
    pub fn new(
        layout: KvCacheLayout,
        num_blocks: usize,
        block_size: usize,
        enable_caching: bool,
        max_model_len: usize,
        num_state_slots: usize,
    ) -> Self {
        let managers = layout
            .groups
            .iter()
            .enumerate()
            .map(|(g, group)| group.spec.is_paged().then(|| SingleTypeManager::new(group.spec, g as u32, block_size)))
            .collect();
        let has_state = layout.groups.iter().any(|g| !g.spec.is_paged());
        let mut pool = BlockPool::new(num_blocks, enable_caching);
        if layout.groups.iter().any(|g| matches!(g.spec, KvCacheSpec::SlidingWindow { .. })) {
            pool.null_block(); // block 0, before anything is cached
        }
        KvCacheManager {
            pool,
            block_size,
            enable_caching: enable_caching && !has_state,
            layout,
            max_model_len,
            managers,
            free_slots: if has_state { (0..num_state_slots as u32).rev().collect() } else { Vec::new() },
            req_to_slot: HashMap::new(),
            snapshots: None,
            restores: HashMap::new(),
            divergence: HashMap::new(),
            caching_requested: enable_caching,
            stats: PrefixCacheStats::default(),
        }
    }

    /// Keeps up to `count` recurrent-state snapshots (state slots `num_state_slots..`, after the
    /// running requests'), every `interval` tokens and where prompts end or diverge, so models
    /// with recurrent layers get prefix-cache hits too.
    pub fn with_state_snapshots(mut self, num_state_slots: usize, count: usize, interval: usize) -> Self {
        if self.has_state() && count > 0 {
            let first = num_state_slots as u32;
            self.snapshots = Some(StateSnapshots::new(first..first + count as u32, interval, self.block_size));
            self.enable_caching = self.caching_requested;
        }
        self
    }

    fn paged(&self) -> impl Iterator<Item = &SingleTypeManager> {
        self.managers.iter().flatten()
    }

    fn has_state(&self) -> bool {
        self.managers.iter().any(Option::is_none)
    }

    /// The longest prefix of cached full blocks that every group can serve (one table per
    /// group), and how many tokens it covers. At least one token is always left to compute
    /// (its logits are needed).
    pub fn get_computed_blocks(&mut self, req: &Request) -> (GroupBlockIds, usize) {
        let none = vec![Vec::new(); self.managers.len()];
        if !self.enable_caching || req.skip_reading_prefix_cache {
            return (none, 0);
        }
        // Each group's hit bounds the others': ask again with the shorter length until every
        // group serves the same one (a window's hit is not a prefix of a longer one).
        let mut max_blocks = (req.num_tokens() - 1) / self.block_size;
        let mut hits = none;
        loop {
            let mut shrunk = false;
            for (m, hit) in self.managers.iter().zip(hits.iter_mut()) {
                let Some(m) = m else { continue };
                *hit = m.find_longest_cache_hit(&req.block_hashes, max_blocks, &mut self.pool);
                if hit.len() < max_blocks {
                    max_blocks = hit.len();
                    shrunk = true;
                }
            }
            if !shrunk {
                break;
            }
        }
        if self.has_state() {
            // The recurrent groups can resume only where a snapshot was saved.
            self.divergence.insert(req.request_id.clone(), max_blocks * self.block_size);
            let snaps = self.snapshots.as_mut().expect("caching on a recurrent model has snapshots");
            match snaps.lookup(&req.block_hashes, max_blocks) {
                Some((k, slot)) => {
                    max_blocks = k;
                    hits.iter_mut().for_each(|h| h.truncate(k));
                    self.restores.insert(req.request_id.clone(), slot);
                }
                None => {
                    max_blocks = 0;
                    hits.iter_mut().for_each(Vec::clear);
                    self.restores.remove(&req.request_id);
                }
            }
        }
        let tokens = max_blocks * self.block_size;
        if req.num_preemptions == 0 {
            self.stats.queries += req.num_tokens() as u64;
            self.stats.hits += tokens as u64;
        }
        (hits, tokens)
    }

    /// Reserves what the request needs to hold `num_computed_tokens + hit + num_new` tokens in
    /// every group, adopting the `hit` tables of [`KvCacheManager::get_computed_blocks`]. Returns
    /// false (and allocates nothing) if the pool is too small; blocks that left a window are
    /// freed either way.
    pub fn allocate_slots(&mut self, req: &Request, num_new_tokens: usize, hit: &[Vec<BlockId>]) -> bool {
        let id = req.request_id.as_str();
        let hit_tokens = hit.iter().map(Vec::len).max().unwrap_or(0) * self.block_size;
        let num_computed = req.num_computed_tokens + hit_tokens;
        let need_tokens = (num_computed + num_new_tokens).min(self.max_model_len);
        let no_hit = Vec::new();
        let hit_of = |g: usize| hit.get(g).unwrap_or(&no_hit);
        let mut num_new = 0;
        let mut evictable = 0;
        for (g, m) in self.managers.iter_mut().enumerate() {
            let Some(m) = m else { continue };
            m.remove_skipped_blocks(id, req.num_computed_tokens, &mut self.pool);
            num_new += m.num_new_blocks(id, need_tokens, hit_of(g));
            // Hits sitting in the free queue must come out of it, so they count against free space.
            evictable +=
                hit_of(g).iter().filter(|&&b| !self.pool.is_null(b) && self.pool.block(b).ref_cnt == 0).count();
        }
        let needs_slot = self.has_state() && !self.req_to_slot.contains_key(id);
        if num_new + evictable > self.pool.num_free_blocks() || (needs_slot && self.free_slots.is_empty()) {
            return false;
        }
        if needs_slot {
            let slot = self.free_slots.pop().expect("checked");
            self.req_to_slot.insert(id.to_string(), vec![slot]);
        }
        let cache_upto = (num_computed + num_new_tokens).min(req.num_tokens());
        for (g, m) in self.managers.iter_mut().enumerate() {
            let Some(m) = m else { continue };
            self.pool.touch(hit_of(g));
            let n = m.num_new_blocks(id, need_tokens, hit_of(g));
            let new = self.pool.get_new_blocks(n).expect("checked free count");
            m.extend(id, hit_of(g), new);
            if self.enable_caching {
                m.cache_full_blocks(id, &req.block_hashes, cache_upto, &mut self.pool);
            }
        }
        true
    }

    /// Releases every block and state slot of the request.
    pub fn free(&mut self, request_id: &str) {
        for m in self.managers.iter_mut().flatten() {
            m.free(request_id, &mut self.pool);
        }
        if let Some(slot) = self.req_to_slot.remove(request_id) {
            self.free_slots.extend(slot);
        }
        self.restores.remove(request_id);
        self.divergence.remove(request_id);
    }

    /// The snapshot a request admitted this step starts from (once).
    pub fn take_state_restore(&mut self, request_id: &str) -> Option<u32> {
        self.restores.remove(request_id)
    }

    /// Snapshots the request writes while computing positions `start..end`: `(position, slot)`.
    pub fn plan_state_saves(&mut self, req: &Request, start: usize, end: usize) -> Vec<(usize, u32)> {
        match self.snapshots.as_mut().filter(|_| self.enable_caching) {
            Some(s) => {
                let divergence = self.divergence.get(&req.request_id).copied();
                s.plan_saves(&req.block_hashes, (start, end), req.prompt_len, divergence)
            }
            None => Vec::new(),
        }
    }

    /// Makes the snapshots written by the step just run visible to lookups.
    pub fn commit_state_snapshots(&mut self) {
        if let Some(s) = &mut self.snapshots {
            s.commit();
        }
    }

    /// The request's table in each group (a state slot for recurrent groups).
    pub fn block_ids(&self, request_id: &str) -> GroupBlockIds {
        (0..self.managers.len()).map(|g| self.group_block_ids(request_id, g).to_vec()).collect()
    }

    pub fn group_block_ids(&self, request_id: &str, group: usize) -> &[BlockId] {
        match &self.managers[group] {
            Some(m) => m.block_ids(request_id),
            None => self.req_to_slot.get(request_id).map_or(&[], Vec::as_slice),
        }
    }

    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Live references per block, recomputed from the request tables (for invariant checks;
    /// the null block is not counted).
    pub fn reference_counts(&self) -> Vec<u32> {
        let mut refs = vec![0u32; self.pool.num_blocks()];
        for table in self.paged().flat_map(SingleTypeManager::tables) {
            for &b in table.iter().filter(|&&b| !self.pool.is_null(b)) {
                refs[b as usize] += 1;
            }
        }
        refs
    }

    /// Ref counts equal live references, the pool is consistent, and no state slot is lost.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.pool.check_invariants()?;
        for (b, want) in self.reference_counts().into_iter().enumerate() {
            if self.pool.is_null(b as BlockId) {
                continue;
            }
            let got = self.pool.block(b as BlockId).ref_cnt;
            if got != want {
                return Err(format!("block {b}: ref_cnt {got}, but {want} requests hold it"));
            }
        }
        if self.has_state() {
            let mut slots: Vec<u32> = self.req_to_slot.values().flatten().chain(&self.free_slots).copied().collect();
            let n = slots.len();
            slots.sort_unstable();
            slots.dedup();
            if slots.len() != n {
                return Err("a state slot is held twice".into());
            }
        }
        if let Some(s) = &self.snapshots {
            s.check_invariants()?;
        }
        Ok(())
    }

    /// Requests holding anything.
    pub fn num_requests(&self) -> usize {
        let mut ids: Vec<&str> = Vec::new();
        for m in self.paged() {
            ids.extend(m.request_ids());
        }
        ids.extend(self.req_to_slot.keys().map(String::as_str));
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}
