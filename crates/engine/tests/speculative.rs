//! Speculative decoding with n-gram drafts and with a draft model on the real SmolLM2: greedy
//! output is token for token the output without speculation, alone and in a batch of 32 (with a
//! token budget that cuts drafts), drafts really are accepted (else this would test nothing),
//! rejected drafts leave no trace (every block returns), and logprobs come one per token.

use vllm_rs_engine::draft_model::{DraftJob, Drafter};
use vllm_rs_engine::{
    DraftWeights, EngineConfig, EngineCore, EngineRequest, FinalOutput, FinishReason, KvDtype, SamplingParams,
    SpeculativeConfig,
};
use vllm_rs_kernels::ops::log_softmax;
use vllm_rs_kernels::quant_act::{ActBits, with_activation_bits};
use vllm_rs_testutil::{gguf_path, golden, hf_dir};

fn engine(spec: Option<&str>, budget: usize) -> EngineCore {
    engine_with(spec, budget, None, 1024 / 16 * 40, |_| {})
}

/// The draft computes exactly as the target (not the int8 a drafter takes where that is faster).
fn exact_draft(cfg: &mut EngineConfig) {
    cfg.draft_activation_bits = Some(ActBits::Int16);
}

/// The SmolLM2 GGUF as target; `draft`: a model file/folder for `draft_model`; `tune`: any other
/// setting.
fn engine_with(
    spec: Option<&str>,
    budget: usize,
    draft: Option<&std::path::Path>,
    blocks: usize,
    tune: impl FnOnce(&mut EngineConfig),
) -> EngineCore {
    let lm = vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads");
    let mut cfg = EngineConfig::new(1024, blocks);
    tune(&mut cfg);
    cfg.max_num_batched_tokens = budget;
    cfg.speculative_config = spec.map(|s| SpeculativeConfig::parse(s).unwrap());
    let draft = draft.map(|d| vllm_rs_models::load(d).expect("draft loads").model);
    EngineCore::with_draft(lm.model, draft.map(DraftWeights::Model), cfg).expect("engine")
}

/// Prompts that invite copying: each golden prompt twice over, so the model's continuation
/// repeats what it has seen and n-gram drafts get accepted.
fn prompts() -> Vec<Vec<u32>> {
    let g = golden("real/smollm2.json");
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let p: Vec<u32> =
                c["prompt_token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            [p.clone(), p].concat()
        })
        .collect()
}

/// Request `r{i}`: prompt `i` (modulo), 40 greedy tokens.
fn request(prompts: &[Vec<u32>], i: usize, logprobs: bool) -> EngineRequest {
    EngineRequest {
        request_id: format!("r{i}"),
        prompt_token_ids: prompts[i % prompts.len()].clone(),
        params: SamplingParams {
            max_tokens: 40,
            ignore_eos: true,
            logprobs: logprobs.then_some(2),
            ..SamplingParams::greedy()
        },
        priority: 0,
        cache_salt: None,
    }
}

fn run(core: &mut EngineCore, prompts: &[Vec<u32>], n: usize, logprobs: bool) -> Vec<FinalOutput> {
    core.generate((0..n).map(|i| request(prompts, i, logprobs)).collect()).expect("requests run")
}

#[test]
fn ngram_drafts_keep_greedy_output_exact() {
    let prompts = prompts();
    let mut plain = engine(None, 2048);
    let want = run(&mut plain, &prompts, prompts.len(), true);

    let spec = r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}"#;
    let mut alone = engine(Some(spec), 2048);
    for (i, w) in want.iter().enumerate() {
        let got = run(&mut alone, &prompts[i..=i], 1, true);
        assert_eq!(got[0].token_ids, w.token_ids, "prompt {i} alone: speculation changed the greedy tokens");
        assert_eq!(got[0].logprobs.len(), w.token_ids.len(), "one logprobs entry per token");
        let same_lp = got[0].logprobs.iter().zip(&w.logprobs).all(|(a, b)| a.token_id == b.token_id && a.top == b.top);
        assert!(same_lp, "prompt {i}: logprobs differ with speculation");
    }
    let s = &alone.stats;
    eprintln!(
        "alone: {} drafts, {} draft tokens, {} accepted; per position {:?}",
        s.spec_decode_num_drafts,
        s.spec_decode_num_draft_tokens,
        s.spec_decode_num_accepted_tokens,
        s.spec_decode_accepted_per_pos
    );
    assert!(s.spec_decode_num_accepted_tokens > 40, "drafts must be accepted for this test to mean anything");
    assert!(s.spec_decode_num_accepted_tokens < s.spec_decode_num_draft_tokens, "and some rejected");
    // Alone, a request takes one step per token (40); each accepted draft saves one.
    assert_eq!(
        s.num_steps + s.spec_decode_num_accepted_tokens,
        40 * prompts.len() as u64,
        "accepted drafts save steps"
    );

    // 32 at once, with a budget small enough that drafts are cut and requests wait (and no
    // batch-size cut, so drafts are verified in the batch).
    let spec = r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "disable_by_batch_size": null}"#;
    let mut batch = engine(Some(spec), 64);
    let got = run(&mut batch, &prompts, 32, false);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.token_ids, want[i % want.len()].token_ids, "request {i} in a batch of 32");
    }
    assert!(batch.stats.spec_decode_num_accepted_tokens > 0);
    let pool = &batch.scheduler.kv.pool;
    assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "rejected drafts' blocks all returned");
}

#[test]
fn no_drafts_above_the_batch_size_cut() {
    // 16 requests admitted together and finishing together (40 tokens each, EOS ignored): a cut
    // at 4 running requests leaves no step with drafts; one at 16 drafts as usual.
    let prompts = prompts();
    let drafts = |cut: usize| {
        let spec = format!(r#"{{"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": {cut}}}"#);
        let mut core = engine(Some(&spec), 4096);
        run(&mut core, &prompts, 16, false);
        core.stats.spec_decode_num_drafts
    };
    assert_eq!(drafts(4), 0);
    assert!(drafts(16) > 0);
}

/// The target as its own draft: greedy drafts are exactly what the target samples (the draft's
/// cache, kept across steps, must then hold exactly the request's tokens; and its activations
/// the target's, not the int8 a drafter takes by default), so every draft is accepted, and the
/// output is the plain one.
#[test]
fn a_draft_model_identical_to_the_target_gets_every_draft_accepted() {
    let prompts = prompts();
    let want = run(&mut engine(None, 2048), &prompts, 4, true);
    // Always 3 drafts, then drafts that stop at an unsure token (the default `draft_p_min`):
    // the draft's cache must stay right either way, or its drafts would differ from the target.
    let mut counts = Vec::new();
    for spec in [
        r#"{"model": "self", "num_speculative_tokens": 3, "draft_p_min": 0}"#,
        r#"{"model": "self", "num_speculative_tokens": 3}"#,
    ] {
        // A budget of 24 tokens a step: the draft catches up on each prompt over several steps.
        for budget in [2048, 24] {
            let draft = Some(gguf_path("smollm2"));
            let mut core = engine_with(Some(spec), budget, draft.as_deref(), 1024 / 16 * 40, exact_draft);
            let got = run(&mut core, &prompts, 4, true);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.token_ids, w.token_ids, "{spec}, budget {budget}");
                assert_eq!(g.logprobs.len(), w.token_ids.len());
            }
            let s = &core.stats;
            let drafted = s.spec_decode_num_draft_tokens;
            eprintln!("{spec}, budget {budget}: {drafted} draft tokens");
            assert!(drafted > 30, "{drafted} draft tokens");
            assert_eq!(s.spec_decode_num_accepted_tokens, drafted, "{spec}, budget {budget}: all accepted");
            counts.push(drafted);
            let pool = &core.scheduler.kv.pool;
            assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "every block returned");
        }
    }
    assert!(counts[2] < counts[0] && counts[3] < counts[1], "draft_p_min stops drafts: {counts:?}");
}

/// With `draft_p_min`, a request's drafts are the ones it gets without, up to (not including)
/// the first that the draft gives a probability under it; checked against the draft's
/// probabilities from a plain forward pass over the prompt and the drafts, on the real SmolLM2
/// with its whole head.
#[test]
fn drafts_stop_before_the_first_token_under_draft_p_min() {
    let (prompts, p_min) = (prompts(), 0.75);
    let blocks = prompts.iter().map(Vec::len).max().unwrap() / 16 + 2;
    let load = || vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads").model;
    let drafter = |p: f32| Drafter::new(load(), 4, blocks, 16, KvDtype::F32, ActBits::Int16, 4096).stop_below(p);
    let (mut all, mut sure, reference) = (drafter(0.0), drafter(p_min), load());
    let table: Vec<u32> = (0..blocks as u32).collect();
    let (mut stops, mut full) = (0, 0);
    for (i, p) in prompts.iter().enumerate() {
        for len in p.len() - (p.len() / 2).min(24)..=p.len() {
            let job = [DraftJob { request_id: &i.to_string(), tokens: &p[..len], block_table: &table, limit: 4 }];
            let (a, s) = (all.propose(&job)[0].clone(), sure.propose(&job)[0].clone());
            assert_eq!(s[..], a[..s.len()], "prompt {i}, {len} tokens: a prefix of the drafts without p_min");
            let ids = [&p[..len], &a].concat();
            let probs = with_activation_bits(ActBits::Int16, || draft_probabilities(reference.as_ref(), &ids, len));
            // Tokens within 1e-3 of p_min could fall on either side through rounding.
            let sure_of =
                |m: usize| (probs[m] > p_min + 1e-3).then_some(true).or((probs[m] < p_min - 1e-3).then_some(false));
            for (m, prob) in probs.iter().enumerate().take(s.len()) {
                assert_ne!(sure_of(m), Some(false), "prompt {i}, {len} tokens: draft {m} at p {prob}");
            }
            if s.len() < a.len() {
                assert_ne!(sure_of(s.len()), Some(true), "prompt {i}, {len}: stopped at p {}", probs[s.len()]);
                stops += 1;
            } else {
                full += 1;
            }
        }
    }
    eprintln!("{stops} proposals stopped early, {full} full");
    assert!(stops > 0 && full > 0, "both cases: {stops} stopped, {full} full");
}

/// The probability `model` gives each of `ids[from..]` after the ids before it: one forward over
/// all of `ids`, logits of rows `from - 1..`.
fn draft_probabilities(model: &dyn vllm_rs_models::Model, ids: &[u32], from: usize) -> Vec<f32> {
    use vllm_rs_kernels::attention::SeqAttention;
    use vllm_rs_models::{ForwardBatch, GroupBatch, Workspace};
    let bs = 16;
    let table: Vec<u32> = (0..ids.len().div_ceil(bs) as u32).collect();
    let mut kv = model.info().contiguous_kv_cache(table.len(), bs, KvDtype::F32, 0);
    let (positions, slots): (Vec<u32>, Vec<usize>) = (0..ids.len()).map(|p| (p as u32, p)).unzip();
    let rows: Vec<usize> = (from - 1..ids.len() - 1).collect();
    let seq = SeqAttention { query_start: 0, query_len: ids.len(), seq_len: ids.len(), block_table: &table };
    let batch = ForwardBatch {
        input_ids: ids,
        positions: &positions,
        groups: vec![GroupBatch { slot_mapping: &slots, seqs: vec![seq] }],
        logits_indices: &rows,
        state_saves: &[],
    };
    let mut logits = Vec::new();
    model.forward_with(&batch, &mut kv, &mut Workspace::default(), &mut logits);
    let vocab = model.info().vocab_size;
    logits.chunks_exact(vocab).zip(&ids[from..]).map(|(row, &t)| log_softmax(row)[t as usize].exp()).collect()
}

/// A draft head cut to its first 256 ids ([`vllm_rs_engine::draft_vocab`]) proposes what the
/// whole head proposes wherever that is among them or among the request's own tokens, and
/// differs only where it is not; on the real SmolLM2, after each of the last 48 tokens of the
/// doubled prompts (in their second halves), as decode feeds them (most of SmolLM2's ids lie past 256, so the request's
/// own ids do the work).
#[test]
fn a_cut_draft_head_proposes_as_the_whole_head_within_its_ids() {
    let prompts = prompts();
    let blocks = prompts.iter().map(Vec::len).max().unwrap() / 16 + 2;
    let drafter = |cut: usize| {
        let model = vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads").model;
        Drafter::new(model, 4, blocks, 16, KvDtype::F32, ActBits::Int16, 4096).cut_head(cut)
    };
    let (mut whole, mut cut) = (drafter(0), drafter(256));
    let table: Vec<u32> = (0..blocks as u32).collect();
    let (mut own, mut differ) = (0, 0);
    for (i, p) in prompts.iter().enumerate() {
        for len in p.len() - (p.len() / 2).min(48)..=p.len() {
            let job = [DraftJob { request_id: &i.to_string(), tokens: &p[..len], block_table: &table, limit: 4 }];
            let (w, c) = (&whole.propose(&job)[0], &cut.propose(&job)[0]);
            let n = w.iter().zip(c).take_while(|(a, b)| a == b).count();
            own += w[..n].iter().filter(|&&t| t >= 256).count();
            if n < w.len() {
                differ += 1;
                assert!(w[n] >= 256 && !p[..len].contains(&w[n]), "prompt {i}, {len} tokens: {w:?} but {c:?}");
            }
        }
    }
    eprintln!("{own} drafts past the cut from the requests' own ids; {differ} proposals differ");
    assert!(own > 50, "the requests' own ids are proposed");
    assert!(differ > 0, "the cut is in effect");
}

/// A prompt's first token comes out before the draft model's pass over the prompt (which
/// would delay it): the drafts come when the next step starts, and a request that ends in
/// between gets none. Later steps end with their drafts.
#[test]
fn a_step_returns_its_tokens_before_the_draft_model_runs() {
    let prompts = prompts();
    let spec = r#"{"model": "self", "num_speculative_tokens": 3, "draft_p_min": 0}"#;
    let mut core = engine_with(Some(spec), 2048, Some(&gguf_path("smollm2")), 1024 / 16 * 40, exact_draft);
    for i in 0..2 {
        core.add_request(request(&prompts, i, false)).unwrap();
    }
    let drafts = |core: &EngineCore, id: &str| core.scheduler.request(id).map(|r| r.spec_token_ids.clone());
    let first = core.step();
    assert!(first.len() == 2 && first.iter().all(|o| o.new_token_ids.len() == 1), "the prompts' first tokens");
    assert_eq!(drafts(&core, "r0"), Some(vec![]), "no drafts before the next step");
    assert_eq!(core.abort(&["r1".to_string()], FinishReason::Abort), ["r1"]);
    core.propose_drafts();
    assert_eq!(drafts(&core, "r0").map(|d| d.len()), Some(3), "drafts for the next step");
    let second = core.step();
    // The draft is the target itself: all three accepted, and one token more.
    assert!(second.len() == 1 && second[0].new_token_ids.len() == 4, "{second:?}");
    assert_eq!(drafts(&core, "r0").map(|d| d.len()), Some(3), "a decode step ends with its drafts");
    let plain = run(&mut engine(None, 2048), &prompts[..1], 1, false);
    let got: Vec<u32> = [first[0].new_token_ids.clone(), second[0].new_token_ids.clone()].concat();
    assert_eq!(got, plain[0].token_ids[..5], "the plain run's first five tokens");
}

/// A draft that differs from the target (the same model rounded to bf16, an HF folder): most
/// drafts accepted, some rejected; greedy output unchanged in a batch of 32 with a budget that
/// cuts drafts and a cache small enough to preempt (resumed requests recompute the draft's cache).
#[test]
fn a_different_draft_model_keeps_greedy_output_exact_under_preemption() {
    let prompts = prompts();
    let want = run(&mut engine(None, 2048), &prompts, 32, false);
    // Always 4 drafts: with `draft_p_min` this draft proposes only what the target accepts.
    let spec = r#"{"method": "draft_model", "model": "smollm2-bf16", "num_speculative_tokens": 4, "draft_p_min": 0}"#;
    let mut core = engine_with(Some(spec), 96, Some(&hf_dir("smollm2")), 80, |_| {});
    let got = run(&mut core, &prompts, 32, false);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.token_ids, w.token_ids, "request {i}");
    }
    let s = &core.stats;
    eprintln!(
        "draft model: {} drafts, {} draft tokens, {} accepted, {} preemptions",
        s.spec_decode_num_drafts,
        s.spec_decode_num_draft_tokens,
        s.spec_decode_num_accepted_tokens,
        s.num_preemptions_total
    );
    assert!(s.num_preemptions_total > 0, "the small cache must preempt for this test to cover it");
    assert!(s.spec_decode_num_accepted_tokens * 2 > s.spec_decode_num_draft_tokens, "most drafts accepted");
    assert!(s.spec_decode_num_accepted_tokens < s.spec_decode_num_draft_tokens, "some rejected");
    let pool = &core.scheduler.kv.pool;
    assert_eq!(pool.num_free_blocks(), pool.num_blocks(), "every block returned");
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let lm = vllm_rs_models::load(&gguf_path("smollm2")).unwrap();
    let draft = vllm_rs_models::load(&gguf_path("qwen05")).unwrap();
    let mut cfg = EngineConfig::new(1024, 1024);
    cfg.speculative_config = Some(SpeculativeConfig::parse(r#"{"model": "q", "num_speculative_tokens": 2}"#).unwrap());
    let e = EngineCore::with_draft(lm.model, Some(DraftWeights::Model(draft.model)), cfg).err().expect("refused");
    assert!(e.to_string().contains("vocabulary"), "{e}");
}
