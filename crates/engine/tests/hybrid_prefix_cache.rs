//! Prefix caching on hybrid models (the tiny Qwen3.5: gated delta-net layers with a recurrent
//! state beside full attention; the tiny Falcon-H1: Mamba-2 and attention side by side in every
//! layer, so each layer has a cache layer in either group): a request resumes from a saved state
//! snapshot where its prefix was cached, for the recurrent and the attention layers alike, and
//! its output is exactly that of a cold run. Snapshots are saved where a prompt ends and where
//! two prompts diverged.

use vllm_rs_engine::{EngineConfig, EngineCore, EngineRequest, FinalOutput, SamplingParams};
use vllm_rs_testutil::test_data;

fn engine(model: &str, caching: bool) -> EngineCore {
    let lm = vllm_rs_models::load(&test_data(&format!("data/tiny/{model}"))).expect("model loads");
    assert!(lm.model.info().has_recurrent_layers());
    let mut cfg = EngineConfig::new(512, 512);
    cfg.enable_prefix_caching = caching;
    EngineCore::new(lm.model, cfg).expect("engine")
}

fn request(id: &str, prompt: Vec<u32>) -> EngineRequest {
    let params = SamplingParams { max_tokens: 12, ignore_eos: true, ..SamplingParams::greedy() };
    EngineRequest { request_id: id.into(), prompt_token_ids: prompt, params, priority: 0, cache_salt: None }
}

/// A shared prefix of `prefix` tokens, then `suffix` tokens particular to `seed`.
fn prompt(prefix: usize, suffix: usize, seed: u32) -> Vec<u32> {
    let shared = (0..prefix as u32).map(|i| 3 + (i * 37) % 300);
    shared.chain((0..suffix as u32).map(|i| 3 + (i * 53 + seed * 101) % 300)).collect()
}

fn run(core: &mut EngineCore, id: &str, prompt: Vec<u32>) -> FinalOutput {
    core.generate(vec![request(id, prompt)]).expect("generate").remove(0)
}

fn cold(model: &str, prompt: Vec<u32>) -> Vec<u32> {
    run(&mut engine(model, false), "cold", prompt).token_ids
}

/// The tests below for each model.
macro_rules! hybrid {
    ($($model:ident),*) => {$(
        mod $model {
            #[test]
            fn a_shared_three_block_prefix_resumes_from_the_saved_state() {
                super::a_shared_three_block_prefix_resumes_from_the_saved_state(stringify!($model));
            }

            #[test]
            fn a_divergence_point_is_saved_for_the_next_request() {
                super::a_divergence_point_is_saved_for_the_next_request(stringify!($model));
            }

            #[test]
            fn without_prefix_caching_nothing_is_saved_or_restored() {
                super::without_prefix_caching_nothing_is_saved_or_restored(stringify!($model));
            }
        }
    )*};
}

hybrid!(qwen3_5, falcon_h1);

fn a_shared_three_block_prefix_resumes_from_the_saved_state(model: &str) {
    let mut core = engine(model, true);
    // The first prompt ends 10 tokens after the 3-block prefix: its state is saved at the last
    // block boundary, position 48.
    let first = run(&mut core, "first", prompt(48, 10, 1));
    assert_eq!(first.num_cached_tokens, 0);
    let hits_before = core.stats.prefix_cache_hits_total;
    let p2 = prompt(48, 7, 2);
    let second = run(&mut core, "second", p2.clone());
    assert_eq!(second.num_cached_tokens, 48, "both the attention blocks and the recurrent state hit at 48");
    assert_eq!(core.stats.prefix_cache_hits_total - hits_before, 48);
    assert_eq!(second.token_ids, cold(model, p2), "a resumed request computes what a cold one does");
}

fn a_divergence_point_is_saved_for_the_next_request(model: &str) {
    let mut core = engine(model, true);
    // The first prompt runs 40 tokens past the shared 48: no snapshot at 48 yet (the periodic
    // ones are 256 apart), so the second request recomputes but saves one where they diverged.
    run(&mut core, "first", prompt(48, 40, 1));
    let second = run(&mut core, "second", prompt(48, 40, 2));
    assert_eq!(second.num_cached_tokens, 0, "no state was saved at 48 to resume from");
    let p3 = prompt(48, 25, 3);
    let third = run(&mut core, "third", p3.clone());
    assert_eq!(third.num_cached_tokens, 48);
    assert_eq!(third.token_ids, cold(model, p3));
    core.scheduler.check_invariants().unwrap();
}

fn without_prefix_caching_nothing_is_saved_or_restored(model: &str) {
    let mut core = engine(model, false);
    run(&mut core, "first", prompt(48, 10, 1));
    assert_eq!(run(&mut core, "second", prompt(48, 7, 2)).num_cached_tokens, 0);
}
