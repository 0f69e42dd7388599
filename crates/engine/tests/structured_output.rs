//! Constrained decoding in the engine on a real model (SmolLM2 GGUF, its tokenizer.json from the
//! HF directory): outputs follow the grammar and end with EOS only where it may end; a request's
//! tokens are the same alone, in a batch, chunked and after forced preemption (its grammar state
//! survives, following the tokens); logprobs are taken after the mask; speculative drafts keep the
//! tokens and only grammar-allowed drafts are verified.

use std::sync::Arc;
use vllm_rs_engine::structured_output::token_bytes_from_tokenizer_json;
use vllm_rs_engine::*;
use vllm_rs_testutil::{gguf_path, hf_dir};

const EOS: u32 = 2;

fn vocab() -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(hf_dir("smollm2").join("tokenizer.json")).unwrap();
    token_bytes_from_tokenizer_json(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn core(tune: impl FnOnce(&mut EngineConfig)) -> EngineCore {
    let lm = vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads");
    let mut cfg = EngineConfig::new(512, 512);
    cfg.eos_token_id = Some(EOS);
    tune(&mut cfg);
    EngineCore::new(lm.model, cfg).expect("engine")
}

fn text(vocab: &[Vec<u8>], ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().filter(|&&t| t != EOS).flat_map(|&t| vocab[t as usize].clone()).collect();
    String::from_utf8(bytes).unwrap()
}

/// Prompts of different lengths (real text, tokenized by hand-picked ids would be fragile: the
/// byte table is enough to build them greedily).
fn prompts(vocab: &[Vec<u8>]) -> Vec<Vec<u32>> {
    let by_bytes: std::collections::HashMap<&[u8], u32> =
        vocab.iter().enumerate().map(|(i, b)| (b.as_slice(), i as u32)).collect();
    let encode = |s: &str| -> Vec<u32> { s.bytes().map(|b| by_bytes[&[b][..]]).collect() };
    ["A user record:", "Here is the JSON for a small dog named Rex who is three years old and likes balls:", "{"]
        .iter()
        .map(|s| encode(s))
        .collect()
}

#[test]
fn constrained_outputs_follow_the_grammar_in_any_batch() {
    let vocab = vocab();
    let model_vocab = core(|_| {}).model().info().vocab_size;
    let compiler = Arc::new(GrammarCompiler::new(vocab.clone(), model_vocab, &[EOS]).unwrap());
    let schema = serde_json::json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 20},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["name", "age", "tags"], "additionalProperties": false,
        // Compact JSON (`disable_any_whitespace`): after a bare "{" this small model would fill
        // every gap with newlines up to the cap.
        "x-guidance": {"whitespace_flexible": false}});
    let grammar = compiler.compile(&GrammarSpec::Json(schema)).unwrap();
    let regex = compiler.compile(&GrammarSpec::Regex("(yes|no), [0-9]{2}".into())).unwrap();
    let params = |g: &Grammar| SamplingParams {
        max_tokens: 80,
        logprobs: Some(3),
        grammar: Some(g.clone()),
        ..SamplingParams::greedy()
    };
    let requests = |n: usize| -> Vec<EngineRequest> {
        let ps = prompts(&vocab);
        (0..n)
            .map(|i| EngineRequest {
                request_id: format!("r{i}"),
                prompt_token_ids: ps[i % ps.len()].clone(),
                params: params(if i % 2 == 0 { &grammar } else { &regex }),
                priority: 0,
                cache_salt: None,
            })
            .collect()
    };
    let alone: Vec<FinalOutput> =
        requests(6).into_iter().map(|r| core(|_| {}).generate(vec![r]).unwrap().remove(0)).collect();
    for (i, o) in alone.iter().enumerate() {
        let t = text(&vocab, &o.token_ids);
        assert_eq!(o.token_ids.last(), Some(&EOS), "{i}: the grammar ended it with EOS: {t:?}");
        if i % 2 == 0 {
            let v: serde_json::Value = serde_json::from_str(&t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
            assert!(v["age"].as_i64().is_some_and(|a| (0..=20).contains(&a)), "{v}");
        } else {
            let (word, num) = t.split_once(", ").unwrap();
            assert!(["yes", "no"].contains(&word) && num.len() == 2, "{t:?}");
        }
        // Raw logprobs come after the mask (vLLM's order): the greedy token is the top one, and
        // where the grammar forces a token every alternative is -inf.
        for lp in &o.logprobs {
            assert!(lp.logprob.is_finite() && lp.top[0].0 == lp.token_id, "{i}: {lp:?}");
        }
        assert!(o.logprobs.iter().any(|lp| lp.top[1].1 == f32::NEG_INFINITY), "{i}: some token is forced");
    }
    // Batched, chunked by a small budget, and preempted for lack of blocks: the same tokens.
    let mut c = core(|c| {
        c.max_num_batched_tokens = 24;
        c.num_blocks = 12;
        c.max_model_len = 160;
    });
    let batched = c.generate(requests(12)).unwrap();
    assert!(c.stats.num_preemptions_total > 0, "the small cache must force preemption");
    for (a, b) in alone.iter().cycle().zip(&batched) {
        assert_eq!(a.token_ids, b.token_ids, "{}", b.request_id);
    }
}

/// `thinking_token_budget` on a real model: with the prompt inside a thinking block, the end
/// marker is forced right after `budget` thinking tokens (vLLM's count), where the model would
/// have written something else; a grammar waiting for that marker applies from there.
#[test]
fn a_thinking_budget_forces_the_end_marker() {
    let vocab = vocab();
    let id = |s: &str| vocab.iter().position(|b| b == s.as_bytes()).unwrap() as u32;
    let (start, end) = (id("<"), id("!"));
    let mut prompt = prompts(&vocab)[1].clone();
    prompt.push(start);
    let budget = ThinkingBudget { budget: 4, start, end, in_think: true, counted: 0 };
    let ngram = r#"{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}"#;
    let run = |params: SamplingParams| {
        let req = |spec: bool| EngineRequest {
            request_id: format!("t{spec}"),
            prompt_token_ids: prompt.clone(),
            params: params.clone(),
            priority: 0,
            cache_salt: None,
        };
        let plain = core(|_| {}).generate(vec![req(false)]).unwrap().remove(0).token_ids;
        // With n-gram drafts (verified row by row under the budget and the grammar): the same.
        let mut spec = core(|c| c.speculative_config = Some(SpeculativeConfig::parse(ngram).unwrap()));
        assert_eq!(spec.generate(vec![req(true)]).unwrap().remove(0).token_ids, plain, "drafts changed the tokens");
        plain
    };
    let free = run(SamplingParams { max_tokens: 12, ..SamplingParams::greedy() });
    let capped = run(SamplingParams { max_tokens: 12, thinking_budget: Some(budget), ..SamplingParams::greedy() });
    assert_eq!(capped[..4], free[..4], "within the budget the output is the model's");
    assert_ne!(free[4], end, "the model would not have ended its thinking here");
    assert_eq!(capped[4], end, "the fifth token is the forced end: {capped:?}");

    let compiler = GrammarCompiler::new(vocab.clone(), core(|_| {}).model().info().vocab_size, &[EOS]).unwrap();
    let digits = compiler.compile(&GrammarSpec::Regex("[0-9]{3}".into())).unwrap();
    let out = run(SamplingParams {
        max_tokens: 12,
        thinking_budget: Some(budget),
        grammar: Some(digits),
        grammar_after_token: Some(end),
        ..SamplingParams::greedy()
    });
    assert_eq!(out[4], end);
    assert_eq!(
        text(&vocab, &out[5..]),
        text(&vocab, &out[5..]).chars().filter(char::is_ascii_digit).collect::<String>()
    );
    assert_eq!(out.last(), Some(&EOS), "{:?}", text(&vocab, &out[5..]));
}

/// Constrained requests speculate: with n-gram drafts and with a draft model their greedy
/// tokens are the ones they get without drafts, drafts are accepted, and a draft the grammar
/// refuses is cut before it is verified (vLLM's `validate_tokens`): every draft scheduled is
/// one the grammar allows after the tokens so far, where the n-gram proposal itself was not
/// always.
#[test]
fn constrained_requests_speculate_and_keep_their_tokens() {
    use vllm_rs_engine::speculative::propose_ngram;
    let vocab = vocab();
    let by_bytes: std::collections::HashMap<&[u8], u32> =
        vocab.iter().enumerate().map(|(i, b)| (b.as_slice(), i as u32)).collect();
    let prompt: Vec<u32> =
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2,".bytes().map(|b| by_bytes[&[b][..]]).collect();
    let compiler = GrammarCompiler::new(vocab.clone(), core(|_| {}).model().info().vocab_size, &[EOS]).unwrap();
    let grammar = compiler.compile(&GrammarSpec::Regex("( [1-8],)+".into())).unwrap();
    let max_tokens = 48;
    let request = || EngineRequest {
        request_id: "r".into(),
        prompt_token_ids: prompt.clone(),
        params: SamplingParams {
            max_tokens,
            ignore_eos: true,
            grammar: Some(grammar.clone()),
            ..SamplingParams::greedy()
        },
        priority: 0,
        cache_salt: None,
    };
    let want = core(|_| {}).generate(vec![request()]).unwrap().remove(0).token_ids;
    let ngram = r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}"#;
    let mut c = core(|c| c.speculative_config = Some(SpeculativeConfig::parse(ngram).unwrap()));
    c.add_request(request()).unwrap();
    let (mut got, mut cut) = (Vec::new(), 0);
    while c.has_unfinished() {
        c.step().iter().for_each(|o| got.extend(&o.new_token_ids));
        let Some(r) = c.scheduler.request("r") else { break };
        let mut g = grammar.start(None);
        got.iter().for_each(|&t| g.accept(t));
        let drafts = &r.spec_token_ids;
        assert_eq!(g.valid_drafts(drafts), drafts.len(), "after {got:?}: a refused draft {drafts:?}");
        let raw = propose_ngram(&[&prompt[..], &got].concat(), 4, 1, 4);
        cut += usize::from(got.len() + raw.len() < max_tokens && raw.len() > drafts.len());
    }
    assert_eq!(got, want, "n-gram drafts changed the tokens");
    let s = &c.stats;
    eprintln!(
        "n-gram: {} drafted, {} accepted, {cut} proposals cut",
        s.spec_decode_num_draft_tokens, s.spec_decode_num_accepted_tokens
    );
    assert!(s.spec_decode_num_accepted_tokens > 0, "drafts are accepted");
    assert!(cut > 0, "the grammar cut some proposal");
    // A draft model (SmolLM2 in bf16, so not the target exactly): the same tokens.
    let spec = r#"{"model": "smollm2-bf16", "num_speculative_tokens": 4, "draft_p_min": 0}"#;
    let lm = vllm_rs_models::load(&gguf_path("smollm2")).expect("model loads");
    let draft = vllm_rs_models::load(&hf_dir("smollm2")).expect("draft loads").model;
    let mut cfg = EngineConfig::new(512, 512);
    (cfg.eos_token_id, cfg.speculative_config) = (Some(EOS), Some(SpeculativeConfig::parse(spec).unwrap()));
    let mut c = EngineCore::with_draft(lm.model, Some(DraftWeights::Model(draft)), cfg).expect("engine");
    assert_eq!(c.generate(vec![request()]).unwrap().remove(0).token_ids, want, "a draft model changed the tokens");
    assert!(c.stats.spec_decode_num_accepted_tokens > 0, "the draft model's drafts are accepted");
}
