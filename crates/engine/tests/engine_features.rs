//! Engine features on a real model (SmolLM2 GGUF, the fastest): shared prompt blocks, logprobs,
//! prompt logprobs, seeded sampling, and no leaks through the threaded handle.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vllm_rs_engine::*;
use vllm_rs_testutil::gguf_path;

fn core(tune: impl FnOnce(&mut EngineConfig)) -> EngineCore {
    let lm = vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads");
    let mut cfg = EngineConfig::new(512, 512);
    cfg.eos_token_id = Some(2);
    tune(&mut cfg);
    EngineCore::new(lm.model, cfg).expect("engine")
}

fn req(id: &str, prompt: Vec<u32>, params: SamplingParams) -> EngineRequest {
    EngineRequest { request_id: id.into(), prompt_token_ids: prompt, params, priority: 0, cache_salt: None }
}

fn prompt(len: usize, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(100..40000)).collect()
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams { max_tokens, ignore_eos: true, ..SamplingParams::greedy() }
}

#[test]
fn parallel_requests_with_one_prompt_share_its_blocks() {
    let mut c = core(|_| {});
    let p = prompt(40, 1);
    let reqs = (0..4).map(|i| req(&format!("n{i}"), p.clone(), greedy(4))).collect();
    let outs = c.generate(reqs).unwrap();
    // The first copy computes the prompt; the other three reuse its two full blocks.
    assert_eq!(c.stats.prefix_cache_hits_total, 3 * 32);
    assert!(outs.iter().skip(1).all(|o| o.num_cached_tokens == 32 && o.token_ids == outs[0].token_ids));
}

#[test]
fn logprobs_of_greedy_tokens_are_the_maximum() {
    let mut c = core(|_| {});
    let params = SamplingParams { logprobs: Some(3), ..greedy(8) };
    let out = c.generate(vec![req("lp", prompt(12, 2), params)]).unwrap().remove(0);
    assert_eq!(out.logprobs.len(), out.token_ids.len());
    for (lp, &t) in out.logprobs.iter().zip(&out.token_ids) {
        assert_eq!(lp.token_id, t);
        assert_eq!(lp.rank, 1, "the greedy token is the most likely");
        assert_eq!(lp.top.len(), 3);
        assert_eq!(lp.top[0], (t, lp.logprob));
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(lp.logprob <= 0.0);
    }
}

#[test]
fn prompt_logprobs_cover_the_prompt_and_do_not_depend_on_chunking() {
    let p = prompt(37, 3);
    let run = |budget: usize| {
        let mut c = core(|cfg| cfg.max_num_batched_tokens = budget);
        let params = SamplingParams { prompt_logprobs: Some(2), ..greedy(2) };
        c.generate(vec![req("plp", p.clone(), params)]).unwrap().remove(0)
    };
    let whole = run(2048);
    let chunked = run(5);
    let plp = whole.prompt_logprobs.clone().expect("prompt logprobs");
    assert_eq!(plp.len(), p.len());
    assert!(plp[0].is_none(), "the first prompt token has no logprob");
    for (i, lp) in plp.iter().enumerate().skip(1) {
        let lp = lp.as_ref().expect("every later position has one");
        assert_eq!(lp.token_id, p[i]);
        assert!(lp.rank >= 1 && lp.top.len() == 2);
    }
    assert_eq!(whole, chunked, "prompt logprobs, tokens and logprobs are chunking-invariant");
    // Logits memory for prompt logprobs is capped per step: 4 rows here, so the 37-token prompt
    // runs in 10 steps even with a large token budget, with the same output.
    let mut c = core(|cfg| cfg.max_num_batched_tokens = 2048);
    c.config.prompt_logprobs_bytes_per_step = 4 * 4 * c.model().info().vocab_size;
    let params = SamplingParams { prompt_logprobs: Some(2), ..greedy(2) };
    let capped = c.generate(vec![req("plp", p.clone(), params)]).unwrap().remove(0);
    assert_eq!(capped, whole);
    assert!(c.stats.num_steps > 10, "prompt in chunks of 4 rows: {} steps", c.stats.num_steps);
}

#[test]
fn seeded_sampling_is_reproducible_in_any_batch() {
    let sampled =
        SamplingParams { temperature: 1.0, seed: Some(42), max_tokens: 16, ignore_eos: true, ..Default::default() };
    let alone = core(|_| {}).generate(vec![req("s", prompt(10, 4), sampled.clone())]).unwrap().remove(0);
    let mut reqs: Vec<EngineRequest> =
        (0..5).map(|i| req(&format!("o{i}"), prompt(5 + i, 10 + i as u64), greedy(16))).collect();
    reqs.insert(2, req("s", prompt(10, 4), sampled.clone()));
    let batched = core(|c| c.max_num_batched_tokens = 7).generate(reqs).unwrap();
    assert_eq!(batched[2].token_ids, alone.token_ids);
    let other_seed = SamplingParams { seed: Some(43), ..sampled };
    let different = core(|_| {}).generate(vec![req("s", prompt(10, 4), other_seed)]).unwrap().remove(0);
    assert_ne!(different.token_ids, alone.token_ids, "another seed samples differently");
}

#[test]
fn dropped_streams_and_aborts_through_the_handle_leave_nothing_behind() {
    let handle = EngineHandle::spawn(core(|c| c.num_blocks = 96));
    let mut rng = StdRng::seed_from_u64(9);
    let mut kept = Vec::new();
    for i in 0..60 {
        let r = req(&format!("h{i}"), prompt(rng.random_range(1..60), i), greedy(rng.random_range(1..40)));
        let stream = handle.add_request(r).unwrap();
        match i % 3 {
            0 => drop(stream), // client gone at once
            1 => kept.push((stream, true)),
            _ => kept.push((stream, false)),
        }
    }
    for (mut s, read_all) in kept {
        if read_all {
            let mut last = None;
            while let Some(o) = s.blocking_next() {
                last = Some(o.unwrap());
            }
            assert!(last.is_some_and(|o| o.finish_reason.is_some()));
        } else {
            let _ = s.blocking_next(); // one output, then go away mid-stream
        }
    }
    // The engine processes the aborts on its next loop; wait for it to go idle.
    let t0 = std::time::Instant::now();
    loop {
        let st = handle.stats();
        if st.num_running == 0 && st.num_waiting == 0 && st.kv_cache_usage == 0.0 {
            break;
        }
        assert!(t0.elapsed().as_secs() < 60, "engine did not release everything: {st:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(handle.stats().finished_abort > 0);
    handle.shutdown();
    assert!(!handle.is_alive());
}

#[test]
fn sixteen_bit_kv_caches_stay_close_to_float32_and_chunking_invariant() {
    let p = prompt(37, 5);
    let run = |dtype: KvDtype, budget: usize| {
        let mut c = core(|cfg| {
            cfg.kv_cache_dtype = dtype;
            cfg.max_num_batched_tokens = budget;
        });
        let params = SamplingParams { prompt_logprobs: Some(1), ..greedy(8) };
        c.generate(vec![req("kv", p.clone(), params)]).unwrap().remove(0)
    };
    let exact = run(KvDtype::F32, 2048);
    let logprobs = |o: &FinalOutput| -> Vec<f32> {
        o.prompt_logprobs.as_ref().unwrap().iter().flatten().map(|lp| lp.logprob).collect()
    };
    // Largest change of a prompt token's logprob (nats) that each rounding may cause.
    for (dtype, budget) in [(KvDtype::F16, 0.01), (KvDtype::Bf16, 0.1)] {
        let out = run(dtype, 2048);
        assert_eq!(out, run(dtype, 5), "{dtype:?}: chunking changed the output");
        let diff = logprobs(&exact).iter().zip(logprobs(&out)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!("{dtype:?}: largest prompt logprob change {diff}");
        assert!(diff > 0.0, "{dtype:?}: the cache must store rounded values");
        assert!(diff < budget, "{dtype:?}: prompt logprobs moved by {diff} (budget {budget})");
        assert_eq!(out.token_ids[..4], exact.token_ids[..4], "{dtype:?}: greedy tokens left float32's");
    }
}
