//! Scheduler and KV cache manager behaviour, in the style of vLLM's tests/v1/core.
//! A deterministic fake "model" stands in for sampling: the core never sees tensors.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vllm_rs_core::*;

fn config(num_blocks: usize, budget: usize) -> SchedulerConfig {
    SchedulerConfig {
        num_lookahead_tokens: 0,
        max_num_seqs: 16,
        max_num_batched_tokens: budget,
        max_model_len: 1024,
        block_size: 16,
        num_blocks,
        enable_prefix_caching: true,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        policy: SchedulingPolicy::Fcfs,
        kv_cache_layout: KvCacheLayout::uniform(1, KvCacheSpec::FullAttention { num_kv_heads: 1, head_dim: 8 }, 16),
        num_state_snapshots: 0,
        mamba_block_size: 16,
    }
}

fn request(id: &str, prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request::new(id, prompt, StopParams { max_tokens, eos_token_id: None, stop_token_ids: vec![] }, 0)
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| 1000 + seed * 7919 + i).collect()
}

/// The fake model: the next token depends only on the request's tokens so far.
fn fake_token(tokens: &[u32]) -> u32 {
    tokens.iter().fold(17u32, |h, &t| h.wrapping_mul(31).wrapping_add(t)) % 5000 + 10
}

/// Runs one step with the fake model; checks invariants; returns the updates.
fn step(s: &mut Scheduler) -> (SchedulerOutput, Vec<RequestUpdate>) {
    let out = s.schedule();
    s.check_invariants().unwrap();
    let sampled: Vec<Vec<u32>> = out
        .scheduled
        .iter()
        .map(|r| {
            let req = s.request(&r.request_id).unwrap();
            if r.sample { vec![fake_token(req.all_token_ids())] } else { vec![] }
        })
        .collect();
    let updates = s.update_from_output(&out, &sampled);
    s.check_invariants().unwrap();
    (out, updates)
}

fn scheduled_tokens(out: &SchedulerOutput) -> Vec<(String, usize)> {
    out.scheduled.iter().map(|r| (r.request_id.clone(), r.num_scheduled_tokens)).collect()
}

#[test]
fn admission_respects_the_token_budget_and_chunks_the_rest() {
    let mut s = Scheduler::new(config(100, 25));
    for i in 0..3 {
        s.add_request(request(&format!("r{i}"), prompt(i, 10), 4));
    }
    let (out, _) = step(&mut s);
    assert_eq!(scheduled_tokens(&out), vec![("r0".into(), 10), ("r1".into(), 10), ("r2".into(), 5)]);
    assert_eq!(out.num_batched_tokens, 25);
    assert!(out.scheduled[0].sample && out.scheduled[1].sample && !out.scheduled[2].sample);
    // Next step: two decodes (running first) and the rest of r2's prompt.
    let (out, _) = step(&mut s);
    assert_eq!(scheduled_tokens(&out), vec![("r0".into(), 1), ("r1".into(), 1), ("r2".into(), 5)]);
    assert!(out.scheduled.iter().all(|r| r.sample));
}

#[test]
fn chunked_prefill_boundaries_and_positions() {
    let mut s = Scheduler::new(config(100, 32));
    s.add_request(request("long", prompt(1, 100), 2));
    let mut starts = vec![];
    for want in [32, 32, 32, 4] {
        let (out, updates) = step(&mut s);
        let r = &out.scheduled[0];
        assert_eq!(r.num_scheduled_tokens, want);
        starts.push(r.num_computed_tokens);
        assert_eq!(r.sample, want == 4, "only the last chunk samples");
        assert_eq!(updates.len(), usize::from(want == 4));
        assert_eq!(s.kv.group_block_ids("long", 0).len(), (r.num_computed_tokens + want).div_ceil(16));
    }
    assert_eq!(starts, vec![0, 32, 64, 96]);
}

#[test]
fn without_chunked_prefill_a_prompt_waits_for_a_whole_budget() {
    let mut cfg = config(100, 40);
    cfg.enable_chunked_prefill = false;
    let mut s = Scheduler::new(cfg);
    s.add_request(request("a", prompt(1, 30), 3));
    s.add_request(request("b", prompt(2, 30), 3));
    let (out, _) = step(&mut s);
    assert_eq!(scheduled_tokens(&out), vec![("a".into(), 30)]);
    let (out, _) = step(&mut s);
    assert_eq!(scheduled_tokens(&out), vec![("a".into(), 1), ("b".into(), 30)]);
}

#[test]
fn max_num_seqs_limits_running_requests() {
    let mut cfg = config(100, 1000);
    cfg.max_num_seqs = 2;
    let mut s = Scheduler::new(cfg);
    for i in 0..3 {
        s.add_request(request(&format!("r{i}"), prompt(i, 5), 2));
    }
    let (out, _) = step(&mut s);
    assert_eq!(out.scheduled.len(), 2);
    assert_eq!(s.num_waiting(), 1);
}

#[test]
fn prefix_hits_share_blocks_and_count_tokens() {
    let mut s = Scheduler::new(config(100, 1000));
    let base = prompt(3, 40);
    s.add_request(request("a", base.clone(), 5));
    step(&mut s);
    let a_blocks = s.kv.group_block_ids("a", 0).to_vec();
    // b shares the first 35 tokens: two full blocks (32 tokens) hit.
    let mut pb = base[..35].to_vec();
    pb.extend([1, 2, 3, 4, 5]);
    s.add_request(request("b", pb, 5));
    let (out, _) = step(&mut s);
    let b = out.scheduled.iter().find(|r| r.request_id == "b").unwrap();
    assert_eq!(b.num_computed_tokens, 32);
    assert_eq!(b.num_scheduled_tokens, 8);
    assert_eq!(&b.new_block_ids[0][..2], &a_blocks[..2]);
    assert_eq!(s.kv.pool.block(a_blocks[0]).ref_cnt, 2);
    assert_eq!(s.kv.pool.block(a_blocks[2]).ref_cnt, 1);
    assert_eq!(s.request("b").unwrap().num_cached_tokens, Some(32));
    assert_eq!(s.kv.stats, PrefixCacheStats { queries: 80, hits: 32 });
}

#[test]
fn a_full_hit_still_leaves_one_token_to_compute() {
    let mut s = Scheduler::new(config(100, 1000));
    let p = prompt(4, 32);
    s.add_request(request("a", p.clone(), 1));
    step(&mut s); // a finishes (max_tokens 1); its blocks stay cached
    assert!(!s.has_unfinished());
    s.add_request(request("b", p, 1));
    let (out, _) = step(&mut s);
    // 32 tokens = 2 full blocks, but only 1 can be reused: the last token must be computed.
    assert_eq!(out.scheduled[0].num_computed_tokens, 16);
    assert_eq!(out.scheduled[0].num_scheduled_tokens, 16);
}

#[test]
fn requests_admitted_in_one_step_share_blocks_cached_that_step() {
    let mut s = Scheduler::new(config(100, 1000));
    let p = prompt(5, 40);
    s.add_request(request("a", p.clone(), 2));
    s.add_request(request("b", p, 2));
    let (out, _) = step(&mut s);
    assert_eq!(out.scheduled[1].num_computed_tokens, 32, "b reuses a's blocks scheduled in the same step");
    assert_eq!(&out.scheduled[0].new_block_ids[0][..2], &out.scheduled[1].new_block_ids[0][..2]);
}

#[test]
fn freed_blocks_are_evicted_least_recently_used_tail_first() {
    let mut s = Scheduler::new(config(6, 1000));
    s.add_request(request("a", prompt(6, 48), 1)); // 3 blocks + 1 for the output slot? no: 48 tokens = 3 blocks
    step(&mut s);
    let a_blocks = {
        // a finished in one step; its blocks were freed tail first.
        let q = s.kv.pool.free_queue();
        assert_eq!(q.len(), 6);
        q
    };
    // The never-used blocks come first, then a's blocks from last to first.
    assert_eq!(&a_blocks[3..], &[2, 1, 0]);
    // A new 64-token request needs 4 blocks: it evicts the unused ones and a's last block.
    s.add_request(request("b", prompt(7, 64), 1));
    let (out, _) = step(&mut s);
    assert_eq!(out.scheduled[0].new_block_ids, vec![vec![3, 4, 5, 2]]);
    // a's first two blocks are still cached: a request with a's prompt hits them.
    s.add_request(request("c", prompt(6, 48), 1));
    let (out, _) = step(&mut s);
    assert_eq!(out.scheduled[0].num_computed_tokens, 32);
}

#[test]
fn preemption_takes_the_newest_and_resumes_with_identical_output() {
    // Reference: plenty of blocks.
    let run = |num_blocks: usize| {
        let mut s = Scheduler::new(config(num_blocks, 1000));
        for i in 0..4 {
            s.add_request(request(&format!("r{i}"), prompt(10 + i, 20), 30));
        }
        let mut outputs: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        let mut preempted = vec![];
        while s.has_unfinished() {
            let (out, updates) = step(&mut s);
            preempted.extend(out.preempted.clone());
            for u in updates {
                outputs.entry(u.request_id).or_default().extend(u.new_token_ids);
            }
        }
        (outputs, preempted, s.num_preemptions)
    };
    let (want, none, _) = run(100);
    assert!(none.is_empty());
    // 4 requests x 50 tokens need 16 blocks; with 10 they cannot all run at once.
    let (got, preempted, n) = run(10);
    assert!(n > 0, "the small pool must force preemption");
    assert_eq!(preempted[0], "r3", "the newest running request goes first");
    assert_eq!(got, want, "recomputation after preemption changes nothing");
}

#[test]
fn priority_policy_admits_by_priority_and_preempts_the_lowest() {
    let mut cfg = config(100, 1000);
    cfg.policy = SchedulingPolicy::Priority;
    cfg.max_num_seqs = 1;
    let mut s = Scheduler::new(cfg);
    let mut lo = request("lo", prompt(1, 5), 3);
    lo.priority = 5;
    let mut hi = request("hi", prompt(2, 5), 3);
    hi.priority = -1;
    s.add_request(lo);
    s.add_request(hi);
    let (out, _) = step(&mut s);
    assert_eq!(out.scheduled[0].request_id, "hi");

    let mut cfg = config(3, 1000);
    cfg.policy = SchedulingPolicy::Priority;
    let mut s = Scheduler::new(cfg);
    let mut a = request("a", prompt(3, 16), 20);
    a.priority = 0;
    let mut b = request("b", prompt(4, 16), 20);
    b.priority = 9;
    s.add_request(a);
    s.add_request(b);
    let mut victims = vec![];
    while s.has_unfinished() && victims.is_empty() {
        victims = step(&mut s).0.preempted;
    }
    assert_eq!(victims, vec!["b".to_string()]);
}

#[test]
fn stop_conditions() {
    let mut s = Scheduler::new(config(100, 1000));
    let p = prompt(8, 8);
    let first = fake_token(&p);
    let params =
        |eos: Option<u32>, stops: Vec<u32>| StopParams { max_tokens: 10, eos_token_id: eos, stop_token_ids: stops };
    s.add_request(Request::new("eos", p.clone(), params(Some(first), vec![]), 0));
    s.add_request(Request::new("stop", p.clone(), params(None, vec![first]), 0));
    s.add_request(Request::new("ignore", p.clone(), params(None, vec![]), 0));
    let (_, updates) = step(&mut s);
    let get = |id: &str| updates.iter().find(|u| u.request_id == id).unwrap().clone();
    assert_eq!(get("eos").finish_reason, Some(FinishReason::Stop));
    assert_eq!(get("eos").stop_token, None);
    assert_eq!(get("stop").finish_reason, Some(FinishReason::Stop));
    assert_eq!(get("stop").stop_token, Some(first));
    assert_eq!(get("ignore").finish_reason, None);
    let mut n = 1;
    while s.has_unfinished() {
        step(&mut s);
        n += 1;
    }
    assert_eq!(n, 10, "max_tokens ends it");

    // max_model_len caps prompt + output.
    let mut cfg = config(100, 1000);
    cfg.max_model_len = 12;
    let mut s = Scheduler::new(cfg);
    s.add_request(request("m", prompt(9, 8), 100));
    let mut outs = 0;
    let mut last = None;
    while s.has_unfinished() {
        for u in step(&mut s).1 {
            outs += 1;
            last = u.finish_reason;
        }
    }
    assert_eq!((outs, last), (4, Some(FinishReason::Length)));
}

#[test]
fn abort_frees_everything() {
    let mut s = Scheduler::new(config(20, 1000));
    s.add_request(request("a", prompt(1, 40), 50));
    s.add_request(request("b", prompt(2, 40), 50));
    step(&mut s);
    s.add_request(request("c", prompt(3, 10), 50));
    assert_eq!(s.finish_requests(&["a".into(), "c".into(), "zzz".into()], FinishReason::Abort), vec!["a", "c"]);
    s.check_invariants().unwrap();
    assert_eq!(s.finish_requests(&["b".into()], FinishReason::Abort), vec!["b"]);
    assert!(!s.has_unfinished());
    assert_eq!(s.kv.pool.num_free_blocks(), 20);
    assert_eq!(s.kv.num_requests(), 0);
}

#[test]
fn a_thousand_random_requests_with_aborts_leave_no_leaks() {
    let mut rng = StdRng::seed_from_u64(42);
    let mut cfg = config(64, 96);
    cfg.max_num_seqs = 12;
    let mut s = Scheduler::new(cfg);
    let shared = prompt(99, 64);
    let (mut added, mut done) = (0, 0);
    while done < 1000 {
        while added < 1000 && rng.random_bool(0.5) {
            // Half the prompts share a prefix so the cache is exercised.
            let len = rng.random_range(1..120);
            let p = if rng.random_bool(0.5) {
                let mut p = shared[..rng.random_range(1..64)].to_vec();
                p.extend(prompt(added, len));
                p
            } else {
                prompt(added, len)
            };
            let mut r = request(&format!("r{added}"), p, rng.random_range(1..40));
            r.params.eos_token_id = rng.random_bool(0.3).then(|| rng.random_range(10..5010));
            s.add_request(r);
            added += 1;
        }
        if rng.random_bool(0.2) {
            let victim = format!("r{}", rng.random_range(0..added));
            done += s.finish_requests(&[victim], FinishReason::Abort).len();
        }
        let (_, updates) = step(&mut s);
        done += updates.iter().filter(|u| u.finish_reason.is_some()).count();
    }
    assert!(!s.has_unfinished());
    assert_eq!(s.kv.pool.num_free_blocks(), 64);
    assert!(s.kv.reference_counts().iter().all(|&r| r == 0));
    for b in 0..64 {
        assert_eq!(s.kv.pool.block(b).ref_cnt, 0);
    }
    assert!(s.num_preemptions > 0, "the pool is small enough to preempt");
}

#[test]
fn draft_tokens_are_scheduled_verified_and_rolled_back() {
    let mut s = Scheduler::new(config(100, 6));
    s.add_request(request("a", prompt(1, 5), 50));
    step(&mut s); // the prompt and the first token
    let before = s.request("a").unwrap().num_tokens();
    s.set_spec_token_ids("a", vec![5, 6, 7]);
    let out = s.schedule();
    let r = &out.scheduled[0];
    assert_eq!((r.num_scheduled_tokens, r.spec_token_ids.clone(), r.sample), (4, vec![5, 6, 7], true));
    // One draft accepted, then the model's own next token: the two rejected drafts' positions
    // no longer count as computed.
    let ups = s.update_from_output(&out, &[vec![5, 9]]);
    assert_eq!(ups[0].new_token_ids, vec![5, 9]);
    let req = s.request("a").unwrap();
    assert_eq!(req.num_tokens(), before + 2);
    assert_eq!(req.num_computed_tokens, req.num_tokens() - 1);
    assert!(req.spec_token_ids.is_empty(), "drafts are used once");
    s.check_invariants().unwrap();
    // A budget of 6 tokens keeps the known token and the first five drafts of eight.
    s.set_spec_token_ids("a", (0..8).collect());
    let out = s.schedule();
    assert_eq!(out.scheduled[0].spec_token_ids, vec![0, 1, 2, 3, 4]);
    // All drafts rejected: the step still yields the model's token.
    s.update_from_output(&out, &[vec![42]]);
    let req = s.request("a").unwrap();
    assert_eq!(req.num_computed_tokens, req.num_tokens() - 1);
    assert_eq!(req.output_token_ids().last(), Some(&42));
    s.check_invariants().unwrap();
}
