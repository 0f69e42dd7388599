//! Which blocks each request holds; prefix-cache lookups; allocation for the tokens of a step.
//!
//! Follows vLLM v1's `KVCacheManager` for full-attention layers: a request's blocks cover
//! positions `0..num_computed_tokens + num_new_tokens`; full blocks are published in the prefix
//! cache as soon as they are scheduled (their tokens are known), so a request admitted later in
//! the same step can already share them.

use crate::block_pool::{BlockId, BlockPool};
use crate::request::Request;
use std::collections::HashMap;

/// Prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` / `prefix_cache_hits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queries: u64,
    pub hits: u64,
}

pub struct KvCacheManager {
    pub pool: BlockPool,
    pub block_size: usize,
    pub enable_caching: bool,
    max_model_len: usize,
    req_to_blocks: HashMap<String, Vec<BlockId>>,
    /// How many of each request's blocks are already published in the prefix cache.
    num_cached_blocks: HashMap<String, usize>,
    pub stats: PrefixCacheStats,
}

impl KvCacheManager {
    pub fn new(num_blocks: usize, block_size: usize, enable_caching: bool, max_model_len: usize) -> Self {
        KvCacheManager {
            pool: BlockPool::new(num_blocks, enable_caching),
            block_size,
            enable_caching,
            max_model_len,
            req_to_blocks: HashMap::new(),
            num_cached_blocks: HashMap::new(),
            stats: PrefixCacheStats::default(),
        }
    }

    /// The longest run of cached full blocks at the start of the request, and how many tokens
    /// they cover. At least one token is always left to compute (its logits are needed).
    pub fn get_computed_blocks(&mut self, req: &Request) -> (Vec<BlockId>, usize) {
        if !self.enable_caching || req.skip_reading_prefix_cache {
            return (Vec::new(), 0);
        }
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        let mut hit = Vec::new();
        for &h in req.block_hashes.iter().take(max_blocks) {
            match self.pool.get_cached_block(h) {
                Some(b) => hit.push(b),
                None => break,
            }
        }
        let tokens = hit.len() * self.block_size;
        if req.num_preemptions == 0 {
            self.stats.queries += req.num_tokens() as u64;
            self.stats.hits += tokens as u64;
        }
        (hit, tokens)
    }

    /// Reserves blocks so the request can hold `num_computed_tokens + new_computed + num_new`
    /// tokens, adopting `new_computed_blocks` (a prefix hit). Returns the newly allocated blocks,
    /// or `None` (and changes nothing) if the pool is too small.
    pub fn allocate_slots(
        &mut self,
        req: &Request,
        num_new_tokens: usize,
        new_computed_blocks: &[BlockId],
    ) -> Option<Vec<BlockId>> {
        let num_computed = req.num_computed_tokens + new_computed_blocks.len() * self.block_size;
        let need_tokens = (num_computed + num_new_tokens).min(self.max_model_len);
        let have = self.req_to_blocks.get(&req.request_id).map_or(0, Vec::len) + new_computed_blocks.len();
        let num_new_blocks = need_tokens.div_ceil(self.block_size).saturating_sub(have);
        // Hits sitting in the free queue must come out of it, so they count against free space.
        let evictable_hits = new_computed_blocks.iter().filter(|&&b| self.pool.block(b).ref_cnt == 0).count();
        if num_new_blocks + evictable_hits > self.pool.num_free_blocks() {
            return None;
        }
        self.pool.touch(new_computed_blocks);
        let new_blocks = self.pool.get_new_blocks(num_new_blocks).expect("checked free count");
        let blocks = self.req_to_blocks.entry(req.request_id.clone()).or_default();
        blocks.extend_from_slice(new_computed_blocks);
        blocks.extend_from_slice(&new_blocks);
        if self.enable_caching {
            self.cache_full_blocks(req, (num_computed + num_new_tokens).min(req.num_tokens()));
        }
        Some(new_blocks)
    }

    /// Publishes the request's full blocks up to `num_tokens` in the prefix cache.
    fn cache_full_blocks(&mut self, req: &Request, num_tokens: usize) {
        let full = (num_tokens / self.block_size).min(req.block_hashes.len());
        let done = self.num_cached_blocks.entry(req.request_id.clone()).or_insert(0);
        let blocks = &self.req_to_blocks[&req.request_id];
        for (&b, &h) in blocks.iter().zip(&req.block_hashes).take(full).skip(*done) {
            self.pool.cache_block(b, h);
        }
        *done = (*done).max(full);
    }

    /// Releases every block of the request, tail first so that its prefix stays cached longest.
    pub fn free(&mut self, request_id: &str) {
        if let Some(blocks) = self.req_to_blocks.remove(request_id) {
            self.pool.free_blocks(blocks.into_iter().rev());
        }
        self.num_cached_blocks.remove(request_id);
    }

    pub fn block_ids(&self, request_id: &str) -> &[BlockId] {
        self.req_to_blocks.get(request_id).map_or(&[], Vec::as_slice)
    }

    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Live references per block, recomputed from the request tables (for invariant checks).
    pub fn reference_counts(&self) -> Vec<u32> {
        let mut refs = vec![0u32; self.pool.num_blocks()];
        for blocks in self.req_to_blocks.values() {
            for &b in blocks {
                refs[b as usize] += 1;
            }
        }
        refs
    }

    /// Ref counts equal live references, and the pool is consistent.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.pool.check_invariants()?;
        for (b, want) in self.reference_counts().into_iter().enumerate() {
            let got = self.pool.block(b as BlockId).ref_cnt;
            if got != want {
                return Err(format!("block {b}: ref_cnt {got}, but {want} requests hold it"));
            }
        }
        Ok(())
    }

    pub fn num_requests(&self) -> usize {
        self.req_to_blocks.len()
    }
}
