//! KV cache groups: layers of several cache specs (full attention, sliding window, MLA,
//! recurrent state) under one scheduler — prefix hits every group can serve, windows freeing
//! what they no longer see, preemption and abort freeing everything, the invariant checker after
//! every step.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use vllm_rs_core::*;

const BS: usize = 16;
const FULL: KvCacheSpec = KvCacheSpec::FullAttention { num_kv_heads: 2, head_dim: 8 };
const SLIDE: KvCacheSpec = KvCacheSpec::SlidingWindow { num_kv_heads: 2, head_dim: 8, window: 32 };
const MLA: KvCacheSpec = KvCacheSpec::Mla { kv_lora_rank: 16, qk_rope_head_dim: 8 };
const STATE: KvCacheSpec = KvCacheSpec::Recurrent { state_elements: 4096 };

fn config(specs: &[KvCacheSpec], num_blocks: usize, budget: usize) -> SchedulerConfig {
    SchedulerConfig {
        num_lookahead_tokens: 0,
        max_num_seqs: 8,
        max_num_batched_tokens: budget,
        max_model_len: 1024,
        block_size: BS,
        num_blocks,
        enable_prefix_caching: true,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        policy: SchedulingPolicy::Fcfs,
        kv_cache_layout: KvCacheLayout::new(specs, BS),
        num_state_snapshots: 0,
        mamba_block_size: 16,
    }
}

/// Gemma-like: a full layer after every two sliding ones (groups of equal size share tensors).
fn gemma_like() -> Vec<KvCacheSpec> {
    vec![SLIDE, SLIDE, FULL, SLIDE, SLIDE, FULL]
}

fn request(id: &str, prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request::new(id, prompt, StopParams { max_tokens, eos_token_id: None, stop_token_ids: vec![] }, 0)
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| 1000 + seed * 7919 + i).collect()
}

/// What the runner rebuilds from the steps' diffs: each request's tables in every group.
type Mirror = HashMap<String, GroupBlockIds>;

/// Applies a step's table diffs as the runner does and checks the result against the
/// scheduler's tables: equal, but where the scheduler now holds the null block (a window's
/// dropped block, which attention never reads again). The prompt is sent exactly once.
fn mirror_step(s: &Scheduler, out: &SchedulerOutput, mirror: &mut Mirror) {
    for r in &out.scheduled {
        let id = &r.request_id;
        assert_eq!(r.new_prompt_token_ids.is_some(), !mirror.contains_key(id), "{id}: the prompt is sent once");
        let tables = mirror.entry(id.clone()).or_default();
        if r.new_prompt_token_ids.is_some() || r.resumed_from_preemption {
            *tables = r.new_block_ids.clone();
        } else {
            tables.iter_mut().zip(&r.new_block_ids).for_each(|(t, new)| t.extend(new));
        }
        for (g, (ours, theirs)) in tables.iter().zip(s.kv.block_ids(id)).enumerate() {
            assert_eq!(ours.len(), theirs.len(), "{id} group {g}");
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(a == b || s.kv.pool.is_null(*b), "{id} group {g}: runner has {a}, scheduler {b}");
            }
        }
    }
}

/// One step with a fake model (the next token depends only on the tokens so far).
fn step(s: &mut Scheduler) -> SchedulerOutput {
    thread_local!(static MIRROR: std::cell::RefCell<Mirror> = Default::default());
    let out = s.schedule();
    s.check_invariants().unwrap();
    MIRROR.with(|m| {
        let mut m = m.borrow_mut();
        mirror_step(s, &out, &mut m);
    });
    MIRROR.with(|m| m.borrow_mut().retain(|id, _| s.request(id).is_some()));
    let sampled: Vec<Vec<u32>> = out
        .scheduled
        .iter()
        .map(|r| {
            let toks = s.request(&r.request_id).unwrap().all_token_ids();
            if r.sample {
                vec![toks.iter().fold(7u32, |h, &t| h.wrapping_mul(31).wrapping_add(t)) % 900 + 10]
            } else {
                vec![]
            }
        })
        .collect();
    s.update_from_output(&out, &sampled);
    s.check_invariants().unwrap();
    out
}

fn run_to_end(s: &mut Scheduler) {
    for _ in 0..10_000 {
        if !s.has_unfinished() {
            return;
        }
        step(s);
    }
    panic!("requests did not finish");
}

/// Real (non-null) blocks a table holds.
fn real_blocks(s: &Scheduler, table: &[BlockId]) -> usize {
    table.iter().filter(|&&b| !s.kv.pool.is_null(b)).count()
}

#[test]
fn gemma_like_layers_form_sliding_and_full_groups_over_shared_tensors() {
    let s = Scheduler::new(config(&gemma_like(), 64, 64));
    let l = &s.kv.layout;
    assert_eq!(l.groups.len(), 3, "two sliding groups of two layers, one full group of two");
    assert_eq!(l.tensor_page_elements.len(), 2);
    assert_eq!(l.groups.iter().filter(|g| g.spec == SLIDE).count(), 2);
}

#[test]
fn a_window_frees_the_blocks_it_no_longer_sees() {
    let mut s = Scheduler::new(config(&gemma_like(), 200, 32));
    s.add_request(request("long", prompt(1, 300), 40));
    let full = 2; // the full-attention group comes after both sliding groups
    let mut max_sliding = 0;
    while s.has_unfinished() {
        let out = step(&mut s);
        let Some(r) = out.scheduled.first().filter(|_| s.request("long").is_some()) else { continue };
        let computed = r.num_computed_tokens + r.num_scheduled_tokens;
        for (g, table) in s.kv.block_ids("long").iter().enumerate() {
            assert_eq!(table.len(), computed.div_ceil(BS), "group {g}: a table covers every position");
            if g == full {
                assert_eq!(real_blocks(&s, table), table.len());
            } else {
                max_sliding = max_sliding.max(real_blocks(&s, table));
                // The window (32) plus a step's tokens (32) span at most 5 blocks.
                assert!(real_blocks(&s, table) <= 5, "group {g} holds {} blocks", real_blocks(&s, table));
            }
        }
    }
    assert!(max_sliding >= 3);
    assert_eq!(s.kv.pool.num_free_blocks(), 199, "all but the null block free again");
}

#[test]
fn prefix_hits_are_what_every_group_can_serve() {
    let mut s = Scheduler::new(config(&gemma_like(), 200, 512));
    let p = prompt(3, 150);
    s.add_request(request("a", p.clone(), 1));
    run_to_end(&mut s);
    // All 9 full blocks are cached in every group: the hit is 9 blocks; the sliding groups hold
    // only the blocks the window sees from position 144 on (the 2 before it), null before.
    s.add_request(request("b", p.clone(), 4));
    let out = step(&mut s);
    let b = &out.scheduled[0];
    assert_eq!(b.num_computed_tokens, 144);
    assert_eq!(s.request("b").unwrap().num_cached_tokens, Some(144));
    for (g, table) in b.new_block_ids.iter().enumerate() {
        let expect = if g == 2 { 10 } else { 3 };
        assert_eq!(real_blocks(&s, table), expect, "group {g}");
    }
    run_to_end(&mut s);

    // Evict the first sliding group's last blocks of that prefix: `a` held 3 × 10 blocks of the
    // 39 usable, freed tail first and group by group, so a 64-token filler (3 × 4 blocks) takes
    // the 9 never used and then blocks 9, 8 and 7 of sliding group 0. The full group could
    // serve 9 blocks, but that window now sees blocks 5 and 6 at the latest: the hit is 7
    // blocks in every group.
    let mut t = Scheduler::new(config(&gemma_like(), 40, 512));
    t.add_request(request("a", p.clone(), 1));
    run_to_end(&mut t);
    t.add_request(request("filler", prompt(9, 64), 1));
    run_to_end(&mut t);
    t.add_request(request("c", p, 1));
    let out = step(&mut t);
    let c = &out.scheduled[0];
    assert_eq!(c.num_computed_tokens, 7 * BS);
    assert_eq!(t.kv.stats.hits, 7 * 16);
    run_to_end(&mut t);
}

#[test]
fn recurrent_state_takes_one_slot_per_request_and_no_prefix_hits() {
    let specs = [STATE, FULL, STATE, FULL];
    let mut s = Scheduler::new(config(&specs, 100, 256));
    let p = prompt(4, 64);
    s.add_request(request("a", p.clone(), 2));
    let out = step(&mut s);
    let state_group = s.kv.layout.layer_group[0];
    assert_eq!(out.scheduled[0].new_block_ids[state_group].len(), 1, "one state slot");
    run_to_end(&mut s);
    s.add_request(request("b", p, 2));
    let out = step(&mut s);
    assert_eq!(out.scheduled[0].num_computed_tokens, 0, "no snapshots of the state: no prefix hit");
    run_to_end(&mut s);
    // More requests than slots (max_num_seqs = 8 slots): the rest wait, none is lost.
    for i in 0..12 {
        s.add_request(request(&format!("r{i}"), prompt(10 + i, 20), 3));
    }
    let out = step(&mut s);
    assert!(out.scheduled.len() <= 8);
    run_to_end(&mut s);
    assert_eq!(s.kv.num_requests(), 0);
}

#[test]
fn mixed_specs_under_preemption_and_aborts_leak_nothing() {
    let specs = [FULL, SLIDE, MLA, STATE, SLIDE, FULL, MLA, STATE];
    let mut rng = StdRng::seed_from_u64(7);
    let mut s = Scheduler::new(config(&specs, 48, 96));
    let free0 = s.kv.pool.num_free_blocks();
    let mut next = 0;
    for round in 0..400 {
        if rng.random_bool(0.3) {
            let len = rng.random_range(1..120);
            // Shared prefixes now and then, so hits happen across groups.
            let seed = if rng.random_bool(0.5) { 1 } else { 100 + next };
            s.add_request(request(&format!("q{next}"), prompt(seed, len), rng.random_range(1..30)));
            next += 1;
        }
        if round % 17 == 0 && next > 0 {
            let victim = format!("q{}", rng.random_range(0..next));
            s.finish_requests(&[victim], FinishReason::Abort);
            s.check_invariants().unwrap();
        }
        step(&mut s);
    }
    run_to_end(&mut s);
    assert!(s.num_preemptions > 0, "the pool is small enough to preempt");
    assert_eq!(s.kv.num_requests(), 0);
    assert!(s.kv.reference_counts().iter().all(|&r| r == 0));
    assert_eq!(s.kv.pool.num_free_blocks(), free0, "every block but the null block is free again");
}
