//! Speculative decoding with draft heads (`scripts/make_tiny_draft_heads.py`): trained MTP layers
//! of the tiny DeepSeek-V3, Qwen3.5, Qwen3.5-MoE and Qwen3-Next (hybrids: rejected drafts roll
//! their recurrent state back), and an EAGLE-3 head for the tiny Llama (reading the inputs of
//! three of its layers) and an EAGLE-1 head for it (on its final hidden states). The drafts
//! proposed after every step equal the plain-torch reference's (so the head, the target hidden states it is fed, its cache catch-up after accepted and
//! rejected drafts and the chained steps are all right), greedy output is the target's alone
//! and in a batch of 32 under chunked prefill and preemption, and checkpoints without MTP
//! weights, or heads that do not fit the target, are refused with a message that says so.

use vllm_rs_engine::{
    DraftWeights, EngineConfig, EngineCore, EngineRequest, FinalOutput, SamplingParams, SpeculativeConfig,
};
use vllm_rs_testutil::{golden, test_data};

struct Case {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    drafts: Vec<Vec<u32>>,
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The EAGLE heads' method, by test model (they are heads for the tiny Llama).
fn eagle_method(model: &str) -> Option<&'static str> {
    match model {
        "llama_eagle3" => Some("eagle3"),
        "llama_eagle" => Some("eagle"),
        _ => None,
    }
}

/// The golden of a head: `<arch>_mtp` for an MTP layer, the model's name for an EAGLE head.
fn golden_name(model: &str) -> String {
    if eagle_method(model).is_some() { model.to_string() } else { format!("{model}_mtp") }
}

fn cases(model: &str) -> (Vec<Case>, usize) {
    let g = golden(&format!("tiny/{}.json", golden_name(model)));
    let cases = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: ids(&c["prompt_token_ids"]),
            tokens: ids(&c["token_ids"]),
            drafts: c["drafts_after_each_step"].as_array().unwrap().iter().map(ids).collect(),
        })
        .collect();
    (cases, g["max_tokens"].as_u64().unwrap() as usize)
}

/// The target and, with `spec` (its `k`; the method is the head's), its draft head.
fn engine(model: &str, spec: Option<&str>, budget: usize, blocks: usize) -> EngineCore {
    let dir = test_data(&format!("data/tiny/{}", golden_name(model)));
    let eagle = eagle_method(model);
    let target = if eagle.is_some() { test_data("data/tiny/llama") } else { dir.clone() };
    let lm = vllm_rs_models::load(&target).expect("model loads");
    let mut cfg = EngineConfig::new(96, blocks);
    cfg.block_size = 4;
    cfg.max_num_batched_tokens = budget;
    let spec = spec.map(|s| match eagle {
        Some(m) => s.replace(r#""mtp""#, &format!(r#""{m}", "model": "head""#)),
        None => s.to_string(),
    });
    cfg.speculative_config = spec.map(|s| SpeculativeConfig::parse(&s).unwrap());
    let target_model = lm.model.as_ref();
    let draft = cfg.speculative_config.as_ref().map(|_| -> DraftWeights {
        match eagle {
            Some("eagle3") => {
                DraftWeights::Head(Box::new(vllm_rs_models::eagle3::load(&dir, target_model).expect("head loads")))
            }
            Some(_) => {
                DraftWeights::Head(Box::new(vllm_rs_models::eagle::load(&dir, target_model).expect("head loads")))
            }
            None => DraftWeights::Head(Box::new(vllm_rs_models::mtp::load(&dir).expect("MTP layer loads"))),
        }
    });
    EngineCore::with_draft(lm.model, draft, cfg).expect("engine")
}

fn request(i: usize, prompt: &[u32], max_tokens: usize) -> EngineRequest {
    EngineRequest {
        request_id: format!("r{i}"),
        prompt_token_ids: prompt.to_vec(),
        params: SamplingParams { max_tokens, ignore_eos: true, ..SamplingParams::greedy() },
        priority: 0,
        cache_salt: None,
    }
}

const MTP3: &str = r#"{"method": "mtp", "num_speculative_tokens": 3}"#;

fn drafts_equal_the_reference_after_every_step(model: &str) {
    let (cases, max_tokens) = cases(model);
    // Whole prompts in one step, and prompts in chunks of 16 tokens (the layer takes in every
    // chunk's rows).
    for (i, c, budget) in cases.iter().enumerate().flat_map(|(i, c)| [(i, c, 512), (i, c, 16)]) {
        let mut core = engine(model, Some(MTP3), budget, 256);
        core.add_request(request(0, &c.prompt, max_tokens)).unwrap();
        let (mut drafts, mut tokens) = (Vec::new(), Vec::new());
        while core.has_unfinished() {
            let before = tokens.len();
            for o in core.step() {
                tokens.extend(o.new_token_ids);
            }
            core.propose_drafts(); // the next step would run it first
            // Drafts follow each step that sampled (not a prefill chunk before the last).
            if let Some(r) = core.scheduler.request("r0").filter(|_| tokens.len() > before) {
                drafts.push(r.spec_token_ids.clone());
            }
        }
        assert_eq!(tokens, c.tokens, "case {i}, budget {budget}: greedy tokens");
        // After the last step the request is gone: the reference lists the drafts after each
        // step but that one.
        assert_eq!(drafts, c.drafts, "case {i}, budget {budget}: drafts after each step");
    }
}

/// 32 requests (the cases over and over) with a budget of `budget` tokens a step, over
/// `blocks` blocks of 4 tokens; no batch-size cut.
fn batch_of_32(model: &str, budget: usize, blocks: usize) -> EngineCore {
    let (cases, max_tokens) = cases(model);
    let spec = r#"{"method": "mtp", "num_speculative_tokens": 3, "disable_by_batch_size": null}"#;
    let mut core = engine(model, Some(spec), budget, blocks);
    let reqs = (0..32).map(|i| request(i, &cases[i % cases.len()].prompt, max_tokens)).collect();
    let got: Vec<FinalOutput> = core.generate(reqs).expect("requests run");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.token_ids, cases[i % cases.len()].tokens, "request {i}");
    }
    let s = &core.stats;
    eprintln!(
        "mtp batch over {blocks} blocks: {} drafts, {} draft tokens, {} accepted, per position {:?}, {} preemptions",
        s.spec_decode_num_drafts,
        s.spec_decode_num_draft_tokens,
        s.spec_decode_num_accepted_tokens,
        s.spec_decode_accepted_per_pos,
        s.num_preemptions_total
    );
    let pool = &core.scheduler.kv.pool;
    assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "every block returned");
    core
}

fn drafts_are_the_same_in_a_batch(model: &str) {
    // With a budget that never cuts drafts, each request drafts what it drafts alone: as many
    // draft tokens, as many accepted (each step but the prefill yields its accepted drafts and
    // one token more).
    let (cases, max_tokens) = cases(model);
    let core = batch_of_32(model, 4096, 1024);
    let (mut drafted, mut accepted) = (0, 0);
    for i in 0..32 {
        let c = &cases[i % cases.len()];
        drafted += c.drafts.iter().map(Vec::len).sum::<usize>() as u64;
        accepted += (max_tokens - 1 - c.drafts.len()) as u64;
    }
    assert_eq!(core.stats.num_preemptions_total, 0);
    assert_eq!(core.stats.spec_decode_num_draft_tokens, drafted);
    assert_eq!(core.stats.spec_decode_num_accepted_tokens, accepted);
}

fn greedy_output_is_exact_under_preemption(model: &str) {
    // 32 blocks hold few requests at once: some are preempted and recomputed, and with them
    // the MTP layer's cache; a 16-token budget chunks prompts and cuts drafts.
    let core = batch_of_32(model, 16, 32);
    assert!(core.stats.num_preemptions_total > 0, "the small cache must preempt for this test to cover it");
    assert!(core.stats.spec_decode_num_accepted_tokens > 0);
}

macro_rules! with_head {
    ($($model:ident),*) => {$(
        mod $model {
            #[test]
            fn drafts_equal_the_reference_after_every_step() {
                super::drafts_equal_the_reference_after_every_step(stringify!($model));
            }

            #[test]
            fn drafts_are_the_same_in_a_batch() {
                super::drafts_are_the_same_in_a_batch(stringify!($model));
            }

            #[test]
            fn greedy_output_is_exact_under_preemption() {
                super::greedy_output_is_exact_under_preemption(stringify!($model));
            }
        }
    )*};
}

with_head!(deepseek_v3, qwen3_5, qwen3_5_moe, qwen3_next, llama_eagle3, llama_eagle);

#[test]
fn a_model_beside_its_mtp_layer_reads_all_its_own_tensors() {
    // The MTP tensors are left to the drafter on purpose: no "unused tensors" warning.
    for arch in ["deepseek_v3", "qwen3_5", "qwen3_5_moe", "qwen3_next"] {
        let lm = vllm_rs_models::load(&test_data(&format!("data/tiny/{arch}_mtp"))).unwrap();
        assert!(lm.unread.is_empty(), "{arch}: {:?}", lm.unread);
    }
}

#[test]
fn checkpoints_without_mtp_layers_are_refused() {
    let e = vllm_rs_models::mtp::load(&test_data("data/tiny/deepseek_v3")).err().expect("no MTP weights");
    assert!(e.to_string().contains("no MTP weights"), "{e}");
    let e = vllm_rs_models::mtp::load(&test_data("data/tiny/qwen3_5")).err().expect("no MTP weights");
    assert!(e.to_string().contains("no MTP weights (mtp.fc.weight)"), "{e}");
    let e = vllm_rs_models::mtp::load(&test_data("data/tiny/llama")).err().expect("no MTP for llama");
    assert!(e.to_string().contains("MTP is implemented for DeepseekV3ForCausalLM"), "{e}");
}

#[test]
fn an_eagle3_head_for_another_model_is_refused() {
    let head = test_data("data/tiny/llama_eagle3");
    // The tiny Qwen3.5 has 320 tokens too, but four layers: the default layer ids (2, 4/2, 4-3)
    // name two distinct ones.
    let target = vllm_rs_models::load(&test_data("data/tiny/qwen3_5")).unwrap();
    let e = vllm_rs_models::eagle3::load(&head, target.model.as_ref()).err().expect("refused");
    assert!(e.to_string().contains("three distinct layers"), "{e}");
    let e = vllm_rs_models::eagle3::load(&test_data("data/tiny/llama"), target.model.as_ref()).err().expect("no head");
    assert!(e.to_string().contains("is not an EAGLE-3 head"), "{e}");
}

#[test]
fn an_eagle_head_for_another_model_is_refused() {
    // The head with a vocabulary of another size (every tiny model has 320 tokens).
    let head = std::env::temp_dir().join(format!("vllm-rs-eagle-{}", std::process::id()));
    std::fs::create_dir_all(&head).unwrap();
    let src = test_data("data/tiny/llama_eagle");
    std::fs::copy(src.join("model.safetensors"), head.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(head.join("config.json"), config.replace(r#""vocab_size": 320"#, r#""vocab_size": 300"#)).unwrap();
    let llama = vllm_rs_models::load(&test_data("data/tiny/llama")).unwrap();
    let e = vllm_rs_models::eagle::load(&head, llama.model.as_ref()).err().expect("refused");
    std::fs::remove_dir_all(&head).unwrap();
    assert!(e.to_string().contains("does not fit the target"), "{e}");
    let e =
        vllm_rs_models::eagle::load(&test_data("data/tiny/llama_eagle3"), llama.model.as_ref()).err().expect("eagle3");
    assert!(e.to_string().contains("use method eagle3"), "{e}");
    // A whole Llama checkpoint is no head: it has no fc.
    let e = vllm_rs_models::eagle::load(&test_data("data/tiny/llama"), llama.model.as_ref()).err().expect("no head");
    assert!(e.to_string().contains("no fc.weight"), "{e}");
}
