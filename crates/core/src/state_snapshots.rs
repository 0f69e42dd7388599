//! Prefix caching for recurrent state: snapshots of a request's whole recurrent state (every
//! recurrent layer) at block-aligned positions, keyed by the hash of the block that ends there,
//! kept in a fixed pool of state slots and evicted least recently used.
//!
//! A recurrent layer's state at position `p` sums up the whole prefix, so a later request can
//! resume at `p` only from a state saved exactly there (vLLM's "align" mode). Which positions
//! are saved (see [`StateSnapshots::plan_saves`]):
//! - every `interval` tokens (`--mamba-block-size`): a long shared prefix (a system prompt)
//!   is found again at the last such position before the requests diverge;
//! - the last block boundary of the prompt: the next turn of a chat or an agent extends the
//!   prompt, and resumes there;
//! - where the attention layers' prefix cache ended when the request was admitted: two prompts
//!   diverge there, so a third one sharing that prefix resumes exactly at the divergence.
//!
//! A snapshot is written while its step runs; it becomes visible to lookups after the step
//! ([`StateSnapshots::commit`]), so nothing reads a slot before it is filled. The runner copies
//! restored snapshots into the request's own slot before the forward pass, so evicting (and
//! overwriting) a snapshot in the same step that restores it is safe.

use crate::block_hash::BlockHash;
use std::collections::HashMap;

pub struct StateSnapshots {
    /// Tokens between periodic snapshots (a multiple of the block size).
    interval: usize,
    block_size: usize,
    free: Vec<u32>,
    /// Committed snapshots: the slot and the tick of last use.
    by_hash: HashMap<BlockHash, (u32, u64)>,
    /// Written by the step being planned; committed after it.
    pending: Vec<(BlockHash, u32)>,
    clock: u64,
}

impl StateSnapshots {
    /// Snapshots in slots `slots` (state slots after the running requests' ones).
    pub fn new(slots: std::ops::Range<u32>, interval: usize, block_size: usize) -> Self {
        assert!(interval > 0 && interval.is_multiple_of(block_size), "interval must be whole blocks");
        StateSnapshots {
            interval,
            block_size,
            free: slots.rev().collect(),
            by_hash: HashMap::new(),
            pending: Vec::new(),
            clock: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.free.len() + self.by_hash.len() + self.pending.len()
    }

    /// The longest saved prefix of at most `max_blocks` blocks of `hashes`: its length in
    /// blocks and the slot holding the state there (marked used).
    pub fn lookup(&mut self, hashes: &[BlockHash], max_blocks: usize) -> Option<(usize, u32)> {
        let k = (1..=max_blocks.min(hashes.len())).rev().find(|k| self.by_hash.contains_key(&hashes[k - 1]))?;
        self.clock += 1;
        let entry = self.by_hash.get_mut(&hashes[k - 1]).expect("found");
        entry.1 = self.clock;
        Some((k, entry.0))
    }

    /// Snapshots to write while a request computes positions `start..end` (`hashes` are its
    /// full blocks' hashes, `prompt_len` its prompt length, `divergence` where its prefix-cache
    /// hit ended at admission): `(position, slot)` pairs, the state after position − 1.
    pub fn plan_saves(
        &mut self,
        hashes: &[BlockHash],
        (start, end): (usize, usize),
        prompt_len: usize,
        divergence: Option<usize>,
    ) -> Vec<(usize, u32)> {
        let bs = self.block_size;
        let mut saves = Vec::new();
        let first = start / bs + 1;
        let last = (end / bs).min(hashes.len());
        for k in first..=last {
            let p = k * bs;
            let wanted = p.is_multiple_of(self.interval) || p == prompt_len / bs * bs || Some(p) == divergence;
            let h = hashes[k - 1];
            if !wanted || self.by_hash.contains_key(&h) || self.pending.iter().any(|(ph, _)| *ph == h) {
                continue;
            }
            let Some(slot) = self.take_slot() else { break };
            self.pending.push((h, slot));
            saves.push((p, slot));
        }
        saves
    }

    /// A free slot, or the least recently used snapshot's.
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        let (&h, &(slot, _)) = self.by_hash.iter().min_by_key(|(_, (_, used))| *used)?;
        self.by_hash.remove(&h);
        Some(slot)
    }

    /// Makes the snapshots written by the last step visible.
    pub fn commit(&mut self) {
        for (h, slot) in self.pending.drain(..) {
            self.clock += 1;
            self.by_hash.insert(h, (slot, self.clock));
        }
    }

    /// Every slot is free, pending or held by one snapshot.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut slots: Vec<u32> = self.free.to_vec();
        slots.extend(self.by_hash.values().map(|(s, _)| *s));
        slots.extend(self.pending.iter().map(|(_, s)| *s));
        let n = slots.len();
        slots.sort_unstable();
        slots.dedup();
        if slots.len() != n {
            return Err("a state snapshot slot is used twice".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_hash::hash_block_tokens;

    fn hashes(tokens: &[u32], bs: usize) -> Vec<BlockHash> {
        let mut out: Vec<BlockHash> = Vec::new();
        for chunk in tokens.chunks_exact(bs) {
            out.push(hash_block_tokens(out.last().copied(), chunk, None));
        }
        out
    }

    #[test]
    fn saves_at_intervals_prompt_end_and_divergence_then_finds_the_longest() {
        let mut s = StateSnapshots::new(10..20, 8, 4);
        let toks: Vec<u32> = (0..30).collect();
        let h = hashes(&toks, 4); // 7 full blocks
        // Prompt of 30 tokens computed in one step: interval (8, 16, 24), prompt end (28),
        // divergence at 12.
        let saves = s.plan_saves(&h, (0, 30), 30, Some(12));
        let positions: Vec<usize> = saves.iter().map(|(p, _)| *p).collect();
        assert_eq!(positions, [8, 12, 16, 24, 28]);
        assert_eq!(s.lookup(&h, 7), None, "nothing is visible before the step ends");
        s.commit();
        assert_eq!(s.lookup(&h, 7).map(|(k, _)| k), Some(7));
        assert_eq!(s.lookup(&h, 5).map(|(k, _)| k), Some(4), "the longest saved prefix within the limit");
        // Another prompt sharing 13 tokens: its 4th block differs, so the hit is 3 blocks.
        let mut other = toks.clone();
        other[13] = 999;
        assert_eq!(s.lookup(&hashes(&other, 4), 7).map(|(k, _)| k), Some(3));
        assert!(s.plan_saves(&h, (0, 30), 30, None).is_empty(), "saved once");
        s.check_invariants().unwrap();
    }

    #[test]
    fn a_full_pool_evicts_the_least_recently_used() {
        let mut s = StateSnapshots::new(0..2, 4, 4);
        let a = hashes(&[1, 2, 3, 4], 4);
        let b = hashes(&[5, 6, 7, 8], 4);
        let c = hashes(&[9, 10, 11, 12], 4);
        for h in [&a, &b] {
            assert_eq!(s.plan_saves(h, (0, 4), 4, None).len(), 1);
            s.commit();
        }
        assert!(s.lookup(&a, 1).is_some()); // a is now the most recent
        assert_eq!(s.plan_saves(&c, (0, 4), 4, None).len(), 1);
        s.commit();
        assert!(s.lookup(&b, 1).is_none(), "b was least recently used");
        assert!(s.lookup(&a, 1).is_some() && s.lookup(&c, 1).is_some());
        assert_eq!(s.capacity(), 2);
        s.check_invariants().unwrap();
    }
}
