//! Constrained decoding in the engine on a real model (SmolLM2 GGUF, its tokenizer.json from the
//! HF directory): outputs follow the grammar and end with EOS only where it may end; a request's
//! tokens are the same alone, in a batch, chunked and after forced preemption (its grammar state
//! survives, following the tokens); logprobs are taken after the mask.

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
    let run = |params: SamplingParams| {
        let req = EngineRequest {
            request_id: "t".into(),
            prompt_token_ids: prompt.clone(),
            params,
            priority: 0,
            cache_salt: None,
        };
        core(|_| {}).generate(vec![req]).unwrap().remove(0).token_ids
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
