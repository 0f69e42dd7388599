//! Speculative decoding on hybrid models (the tiny checkpoints with gated delta-net, Mamba-2,
//! short-convolution or Kimi delta layers beside attention): a rejected draft's tokens are in the
//! recurrent state after verification, so the runner saves the state after every draft row and
//! restores the one after the last accepted token. Greedy output must stay transformers' (the
//! tiny goldens), alone and in a batch of 32 with a budget that cuts drafts, with prefix
//! caching on.
//!
//! Random tiny models rarely repeat themselves, so n-gram drafts and a tiny Llama draft model
//! (both run here) are mostly rejected. To cover every outcome, "oracle" drafts are set on the
//! scheduler between steps: the golden's next tokens with one of them made wrong, in turn the
//! first, second, third or none, so verification accepts 0, 1, 2 or all 3.

use vllm_rs_engine::{
    DraftWeights, EngineConfig, EngineCore, EngineRequest, FinalOutput, SamplingParams, SpeculativeConfig,
};
use vllm_rs_testutil::{golden, test_data};

fn cases(model: &str) -> Vec<(Vec<u32>, Vec<u32>)> {
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let g = golden(&format!("tiny/{model}.json"));
    g["cases"].as_array().unwrap().iter().map(|c| (ids(&c["prompt_token_ids"]), ids(&c["token_ids"]))).collect()
}

fn engine(model: &str, spec: &str, budget: usize) -> EngineCore {
    let lm = vllm_rs_models::load(&test_data(&format!("data/tiny/{model}"))).expect("model loads");
    assert!(lm.model.info().has_recurrent_layers());
    let mut cfg = EngineConfig::new(512, 1024);
    cfg.max_num_batched_tokens = budget;
    let spec = SpeculativeConfig::parse(spec).unwrap();
    let draft = spec.is_draft_model().then(|| {
        let d = vllm_rs_models::load(&test_data("data/tiny/llama")).expect("draft loads");
        DraftWeights::Model(d.model)
    });
    cfg.speculative_config = Some(spec);
    EngineCore::with_draft(lm.model, draft, cfg).expect("engine")
}

/// `n` greedy requests for the cases in turn, each as long as its golden.
fn run_requests(cases: &[(Vec<u32>, Vec<u32>)], n: usize) -> Vec<EngineRequest> {
    (0..n)
        .map(|i| {
            let (prompt, want) = &cases[i % cases.len()];
            let params = SamplingParams { max_tokens: want.len(), ignore_eos: true, ..SamplingParams::greedy() };
            EngineRequest {
                request_id: format!("r{i}"),
                prompt_token_ids: prompt.clone(),
                params,
                priority: 0,
                cache_salt: None,
            }
        })
        .collect()
}

fn run(core: &mut EngineCore, cases: &[(Vec<u32>, Vec<u32>)], n: usize) -> Vec<FinalOutput> {
    core.generate(run_requests(cases, n)).expect("requests run")
}

/// Greedy tokens equal the goldens with `spec` drafts, one request at a time and 32 at once;
/// returns (draft tokens, accepted) over both runs.
fn greedy_output_is_exact(model: &str, spec: &str) -> (u64, u64) {
    let cases = cases(model);
    let mut alone = engine(model, spec, 2048);
    for (i, (prompt, want)) in cases.iter().enumerate() {
        let got = run(&mut alone, &[(prompt.clone(), want.clone())], 1);
        assert_eq!(&got[0].token_ids, want, "{model}, case {i} alone");
    }
    // 32 at once (the cases again and again: prefix-cache hits, and snapshots saved while
    // requests have drafts), a budget that cuts drafts, no batch-size cut.
    let unbounded = spec.replacen('{', r#"{"disable_by_batch_size": null, "#, 1);
    let mut batch = engine(model, &unbounded, 48);
    for (i, g) in run(&mut batch, &cases, 32).iter().enumerate() {
        assert_eq!(g.token_ids, cases[i % cases.len()].1, "{model}, request {i} in a batch of 32");
    }
    let pool = &batch.scheduler.kv.pool;
    assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "{model}: every block returned");
    let (a, b) = (&alone.stats, &batch.stats);
    let drafted = a.spec_decode_num_draft_tokens + b.spec_decode_num_draft_tokens;
    let accepted = a.spec_decode_num_accepted_tokens + b.spec_decode_num_accepted_tokens;
    eprintln!("{model} {spec}: {drafted} draft tokens, {accepted} accepted");
    (drafted, accepted)
}

/// Oracle drafts (see the top) for `n` requests at once with a budget of `budget` tokens a
/// step; greedy output must be the golden's, and the accepted drafts per position show that
/// every outcome happened.
fn oracle_drafts(model: &str, n: usize, budget: usize) {
    let cases = cases(model);
    // n-gram drafts that never match: the test sets the drafts itself.
    let spec = r#"{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 99, "prompt_lookup_max": 99,
        "disable_by_batch_size": null}"#;
    let mut core = engine(model, spec, budget);
    let mut reqs = run_requests(&cases, n);
    for r in reqs.drain(..) {
        core.add_request(r).unwrap();
    }
    let mut got: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut step = 0;
    while core.has_unfinished() {
        for o in core.step() {
            got[o.request_id[1..].parse::<usize>().unwrap()].extend(o.new_token_ids);
        }
        step += 1;
        for (i, g) in got.iter().enumerate().filter(|(_, g)| !g.is_empty()) {
            let want = &cases[i % cases.len()].1;
            let room = (want.len() - g.len()).saturating_sub(1);
            let mut drafts: Vec<u32> = want[g.len()..].iter().take(room.min(3)).copied().collect();
            if let Some(d) = drafts.get_mut((step + i) % 4) {
                *d = (*d + 1) % 320;
            }
            core.scheduler.set_spec_token_ids(&format!("r{i}"), drafts);
        }
    }
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &cases[i % cases.len()].1, "{model}: request {i} of {n} with oracle drafts");
    }
    // Accepted drafts by position: first ones more often than second, second than third, and
    // all three sometimes.
    let per_pos = &core.stats.spec_decode_accepted_per_pos;
    assert!(per_pos.len() == 3 && per_pos[0] > per_pos[1] && per_pos[1] > per_pos[2] && per_pos[2] > 0, "{per_pos:?}");
    let pool = &core.scheduler.kv.pool;
    assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "{model}: every block returned");
}

fn check(model: &str) {
    oracle_drafts(model, 1, 2048);
    oracle_drafts(model, 32, 48);
    let ngram = r#"{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}"#;
    let (drafted, accepted) = greedy_output_is_exact(model, ngram);
    assert!(drafted > accepted, "{model}: n-gram drafts proposed and some rejected");
    // `draft_p_min` 0: the tiny random draft is never sure of a token.
    let spec = r#"{"model": "llama", "num_speculative_tokens": 3, "draft_p_min": 0}"#;
    let (drafted, accepted) = greedy_output_is_exact(model, spec);
    assert!(drafted > accepted, "{model}: draft-model drafts proposed and some rejected");
}

macro_rules! hybrid {
    ($($model:ident),*) => {$(
        #[test]
        fn $model() {
            check(stringify!($model));
        }
    )*};
}

hybrid!(qwen3_5, qwen3_5_moe, qwen3_next, falcon_h1, lfm2, nemotron_h, granite_hybrid, kimi_linear);
