//! The blocks of one KV cache group: a block table per request, prefix-cache lookups by that
//! group's rule, and (for sliding windows) freeing what left the window. After vLLM v1's
//! `single_type_kv_cache_manager.py`; the coordinator ([`crate::KvCacheManager`]) runs one per
//! paged group over the shared [`BlockPool`].

use crate::block_hash::BlockHash;
use crate::block_pool::{BlockId, BlockPool};
use crate::kv_cache_spec::KvCacheSpec;
use std::collections::HashMap;

pub struct SingleTypeManager {
    pub spec: KvCacheSpec,
    /// This group's index: part of its blocks' prefix-cache keys.
    pub group: u32,
    block_size: usize,
    req_to_blocks: HashMap<String, Vec<BlockId>>,
    /// How many of each request's blocks are already published in the prefix cache.
    num_cached_blocks: HashMap<String, usize>,
}

impl SingleTypeManager {
    pub fn new(spec: KvCacheSpec, group: u32, block_size: usize) -> Self {
        debug_assert!(spec.is_paged());
        SingleTypeManager { spec, group, block_size, req_to_blocks: HashMap::new(), num_cached_blocks: HashMap::new() }
    }

    fn window(&self) -> Option<usize> {
        match self.spec {
            KvCacheSpec::SlidingWindow { window, .. } => Some(window),
            _ => None,
        }
    }

    /// The cached blocks this group can serve for the first `max_blocks` blocks of `hashes`:
    /// a table of at most `max_blocks` entries whose length is the hit in blocks.
    ///
    /// Full attention needs every block of the prefix: the longest run from the start.
    /// A window needs only the blocks its last position sees: scanning from the end, the first
    /// run of `⌈(window − 1) / block_size⌉` cached blocks ends the hit, and the blocks before it
    /// become the null block (vLLM's `SlidingWindowManager.find_longest_cache_hit`).
    pub fn find_longest_cache_hit(
        &self,
        hashes: &[BlockHash],
        max_blocks: usize,
        pool: &mut BlockPool,
    ) -> Vec<BlockId> {
        let max_blocks = max_blocks.min(hashes.len());
        let Some(window) = self.window() else {
            return hashes[..max_blocks].iter().map_while(|&h| pool.get_cached_block(h, self.group)).collect();
        };
        let need = (window - 1).div_ceil(self.block_size);
        let mut run = 0;
        for i in (0..max_blocks).rev() {
            match pool.get_cached_block(hashes[i], self.group) {
                Some(_) => run += 1,
                None => run = 0,
            }
            if run >= need.max(1) || (i == 0 && run > 0) {
                let end = i + run;
                // A run from the start serves even when shorter than the window.
                let null = if i > 0 { pool.null_block() } else { 0 };
                return (0..end).map(|j| if j < i { null } else { cached(pool, hashes[j], self.group) }).collect();
            }
        }
        Vec::new()
    }

    /// Drops the blocks no position from `num_computed_tokens` on can see (windows only),
    /// putting the null block in their place.
    pub fn remove_skipped_blocks(&mut self, request_id: &str, num_computed_tokens: usize, pool: &mut BlockPool) {
        let Some(window) = self.window() else { return };
        let Some(blocks) = self.req_to_blocks.get_mut(request_id) else { return };
        let skipped = (num_computed_tokens + 1).saturating_sub(window) / self.block_size;
        let null = pool.null_block();
        // Last first, as vLLM, so the earlier (more shared) blocks stay cached longest.
        for b in blocks.iter_mut().take(skipped).rev() {
            if *b == null {
                break;
            }
            pool.free_blocks([std::mem::replace(b, null)]);
        }
    }

    /// New blocks needed to hold `num_tokens` tokens after adopting `hit` blocks.
    pub fn num_new_blocks(&self, request_id: &str, num_tokens: usize, hit: &[BlockId]) -> usize {
        let have = self.req_to_blocks.get(request_id).map_or(0, Vec::len) + hit.len();
        num_tokens.div_ceil(self.block_size).saturating_sub(have)
    }

    /// Appends `hit` (already referenced) and `new` blocks to the request's table.
    pub fn extend(&mut self, request_id: &str, hit: &[BlockId], new: Vec<BlockId>) {
        let blocks = self.req_to_blocks.entry(request_id.to_string()).or_default();
        if !hit.is_empty() {
            // Hit blocks are published already (or the null block).
            self.num_cached_blocks.insert(request_id.to_string(), blocks.len() + hit.len());
        }
        blocks.extend_from_slice(hit);
        blocks.extend(new);
    }

    /// Publishes the request's full blocks up to `num_tokens` in the prefix cache.
    pub fn cache_full_blocks(
        &mut self,
        request_id: &str,
        hashes: &[BlockHash],
        num_tokens: usize,
        pool: &mut BlockPool,
    ) {
        let full = (num_tokens / self.block_size).min(hashes.len());
        let done = self.num_cached_blocks.entry(request_id.to_string()).or_insert(0);
        let blocks = &self.req_to_blocks[request_id];
        for (&b, &h) in blocks.iter().zip(hashes).take(full).skip(*done) {
            pool.cache_block(b, h, self.group);
        }
        *done = (*done).max(full);
    }

    /// Releases every block of the request, tail first so its prefix stays cached longest.
    pub fn free(&mut self, request_id: &str, pool: &mut BlockPool) {
        if let Some(blocks) = self.req_to_blocks.remove(request_id) {
            pool.free_blocks(blocks.into_iter().rev());
        }
        self.num_cached_blocks.remove(request_id);
    }

    pub fn block_ids(&self, request_id: &str) -> &[BlockId] {
        self.req_to_blocks.get(request_id).map_or(&[], Vec::as_slice)
    }

    /// Every request's table, for reference counting.
    pub fn tables(&self) -> impl Iterator<Item = &[BlockId]> {
        self.req_to_blocks.values().map(Vec::as_slice)
    }

    pub fn request_ids(&self) -> impl Iterator<Item = &str> {
        self.req_to_blocks.keys().map(String::as_str)
    }
}

fn cached(pool: &BlockPool, hash: BlockHash, group: u32) -> BlockId {
    pool.get_cached_block(hash, group).expect("found in this scan")
}
