//! The pool of KV cache blocks: reference counts, an LRU free queue, and the prefix-cache index.
//!
//! A block with `ref_cnt == 0` sits in the free queue but keeps its hash, so a later request with
//! the same prefix can take it back ("touch") instead of recomputing. New blocks come from the
//! front of the queue (least recently freed), evicting their cached hash.
//!
//! One pool serves every KV cache group; a cached block is keyed by its hash and its group (the
//! same prefix has other contents in another group's layers). Groups that drop blocks from a
//! table (sliding windows) put the pool's null block in their place: it is never allocated,
//! freed or written.

use crate::block_hash::BlockHash;
use std::collections::HashMap;

pub type BlockId = u32;

/// A prefix-cache key: the block's hash within one KV cache group.
pub type CacheKey = (BlockHash, u32);

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct KvCacheBlock {
    pub ref_cnt: u32,
    pub block_hash: Option<CacheKey>,
    prev: u32,
    next: u32,
    in_free_queue: bool,
}

pub struct BlockPool {
    blocks: Vec<KvCacheBlock>,
    head: u32,
    tail: u32,
    num_free: usize,
    cached: HashMap<CacheKey, Vec<BlockId>>,
    enable_caching: bool,
    null_block: Option<BlockId>,
}

impl BlockPool {
    pub fn new(num_blocks: usize, enable_caching: bool) -> Self {
        assert!(num_blocks < NIL as usize, "too many blocks");
        let mut pool = BlockPool {
            blocks: (0..num_blocks)
                .map(|_| KvCacheBlock { ref_cnt: 0, block_hash: None, prev: NIL, next: NIL, in_free_queue: false })
                .collect(),
            head: NIL,
            tail: NIL,
            num_free: 0,
            cached: HashMap::new(),
            enable_caching,
            null_block: None,
        };
        for b in 0..num_blocks as u32 {
            pool.push_back(b);
        }
        pool
    }

    /// The placeholder for blocks a table no longer holds (taken from the pool on first use,
    /// which should come before any block is handed out; it then counts as used for good, as
    /// vLLM's).
    pub fn null_block(&mut self) -> BlockId {
        if let Some(b) = self.null_block {
            return b;
        }
        let id = self.head;
        assert!(id != NIL, "no block left for the null block");
        self.unlink(id);
        self.evict(id);
        self.blocks[id as usize].ref_cnt = 1;
        self.null_block = Some(id);
        id
    }

    pub fn has_null_block(&self) -> bool {
        self.null_block.is_some()
    }

    pub fn is_null(&self, id: BlockId) -> bool {
        self.null_block == Some(id)
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn num_free_blocks(&self) -> usize {
        self.num_free
    }

    /// Fraction of blocks in use (vLLM's `kv_cache_usage_perc`, in 0..=1; the null block is
    /// not counted).
    pub fn usage(&self) -> f64 {
        let usable = self.blocks.len() - usize::from(self.null_block.is_some());
        if usable == 0 { 0.0 } else { 1.0 - self.num_free as f64 / usable as f64 }
    }

    pub fn block(&self, id: BlockId) -> &KvCacheBlock {
        &self.blocks[id as usize]
    }

    /// Takes `n` blocks from the front of the free queue (evicting their cache entries), each
    /// with `ref_cnt = 1`. `None` if fewer than `n` are free; nothing changes then.
    pub fn get_new_blocks(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.head;
            self.unlink(id);
            self.evict(id);
            self.blocks[id as usize].ref_cnt = 1;
            out.push(id);
        }
        Some(out)
    }

    /// Takes a reference on blocks found in the prefix cache (pulling free ones out of the queue).
    pub fn touch(&mut self, ids: &[BlockId]) {
        for &id in ids {
            if self.is_null(id) {
                continue;
            }
            if self.blocks[id as usize].ref_cnt == 0 {
                self.unlink(id);
            }
            self.blocks[id as usize].ref_cnt += 1;
        }
    }

    /// Drops one reference per block, in the given order; blocks reaching zero join the back of
    /// the free queue (so the first ones given are evicted first).
    pub fn free_blocks(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        for id in ids {
            if self.is_null(id) {
                continue;
            }
            let b = &mut self.blocks[id as usize];
            assert!(b.ref_cnt > 0, "double free of block {id}");
            b.ref_cnt -= 1;
            if b.ref_cnt == 0 {
                self.push_back(id);
            }
        }
    }

    /// A cached block holding exactly this prefix in `group`, if any.
    pub fn get_cached_block(&self, hash: BlockHash, group: u32) -> Option<BlockId> {
        self.cached.get(&(hash, group)).and_then(|v| v.first().copied())
    }

    /// Records that `id` holds the full block with `hash` in `group`.
    pub fn cache_block(&mut self, id: BlockId, hash: BlockHash, group: u32) {
        if !self.enable_caching || self.is_null(id) {
            return;
        }
        let hash = (hash, group);
        let b = &mut self.blocks[id as usize];
        if b.block_hash.is_some() {
            return;
        }
        b.block_hash = Some(hash);
        self.cached.entry(hash).or_default().push(id);
    }

    /// Forgets every cached hash (vLLM's `reset_prefix_cache`); only valid when nothing runs.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.num_free + usize::from(self.null_block.is_some()) != self.blocks.len() {
            return false;
        }
        self.cached.clear();
        self.blocks.iter_mut().for_each(|b| b.block_hash = None);
        true
    }

    pub fn num_cached_blocks(&self) -> usize {
        self.cached.values().map(Vec::len).sum()
    }

    fn evict(&mut self, id: BlockId) {
        if let Some(h) = self.blocks[id as usize].block_hash.take() {
            let ids = self.cached.get_mut(&h).expect("cached hash is indexed");
            ids.retain(|&b| b != id);
            if ids.is_empty() {
                self.cached.remove(&h);
            }
        }
    }

    fn push_back(&mut self, id: BlockId) {
        let tail = self.tail;
        let b = &mut self.blocks[id as usize];
        debug_assert!(!b.in_free_queue);
        b.prev = tail;
        b.next = NIL;
        b.in_free_queue = true;
        if tail == NIL {
            self.head = id;
        } else {
            self.blocks[tail as usize].next = id;
        }
        self.tail = id;
        self.num_free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = &mut self.blocks[id as usize];
            assert!(b.in_free_queue, "block {id} is not free");
            b.in_free_queue = false;
            (std::mem::replace(&mut b.prev, NIL), std::mem::replace(&mut b.next, NIL))
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        self.num_free -= 1;
    }

    /// Free-queue order, front first (for tests and invariant checks).
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.num_free);
        let mut cur = self.head;
        while cur != NIL {
            out.push(cur);
            cur = self.blocks[cur as usize].next;
        }
        out
    }

    /// Checks the pool's internal consistency; returns a description of the first problem.
    pub fn check_invariants(&self) -> Result<(), String> {
        let q = self.free_queue();
        if q.len() != self.num_free {
            return Err(format!("free queue has {} entries, counter says {}", q.len(), self.num_free));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            if self.is_null(i as BlockId) {
                if b.in_free_queue || b.block_hash.is_some() {
                    return Err(format!("null block {i} is free or cached"));
                }
                continue;
            }
            if b.in_free_queue != (b.ref_cnt == 0) {
                return Err(format!("block {i}: ref_cnt {} but in_free_queue {}", b.ref_cnt, b.in_free_queue));
            }
            if let Some(h) = b.block_hash
                && !self.cached.get(&h).is_some_and(|v| v.contains(&(i as u32)))
            {
                return Err(format!("block {i} has a hash missing from the index"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_hash::hash_block_tokens;

    #[test]
    fn allocation_takes_the_front_and_frees_to_the_back() {
        let mut p = BlockPool::new(4, true);
        let a = p.get_new_blocks(2).unwrap();
        assert_eq!(a, vec![0, 1]);
        assert_eq!(p.free_queue(), vec![2, 3]);
        p.free_blocks([1, 0]);
        assert_eq!(p.free_queue(), vec![2, 3, 1, 0]);
        assert!(p.get_new_blocks(5).is_none());
        assert_eq!(p.num_free_blocks(), 4, "a failed allocation changes nothing");
        p.check_invariants().unwrap();
    }

    #[test]
    fn touch_removes_from_the_middle_and_eviction_drops_the_hash() {
        let mut p = BlockPool::new(3, true);
        let ids = p.get_new_blocks(3).unwrap();
        let h = hash_block_tokens(None, &[1, 2], None);
        p.cache_block(ids[1], h, 0);
        p.free_blocks(ids.iter().copied());
        assert_eq!(p.get_cached_block(h, 0), Some(1));
        assert_eq!(p.get_cached_block(h, 1), None, "another group's layers hold other data");
        p.touch(&[1]);
        assert_eq!(p.free_queue(), vec![0, 2]);
        assert_eq!(p.block(1).ref_cnt, 1);
        p.free_blocks([1]);
        // 0, 2, 1 in the queue: taking three evicts block 1's hash.
        p.get_new_blocks(3).unwrap();
        assert_eq!(p.get_cached_block(h, 0), None);
        p.check_invariants().unwrap();
    }
}
