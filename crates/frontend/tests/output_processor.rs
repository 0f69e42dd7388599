//! [`OutputProcessor`]: engine outputs to text, with stop strings across token boundaries, the
//! finish and stop reasons vLLM reports, and the abort signal for stop strings.

mod common;

use common::hf_tokenizer;
use std::sync::Arc;
use vllm_rs_engine::{FinishReason, RequestOutput};
use vllm_rs_frontend::{OutputOptions, OutputProcessor, StopReason, Tokenizer, token_text};

fn output(ids: &[u32], finish: Option<FinishReason>, stop_token: Option<u32>) -> RequestOutput {
    RequestOutput {
        request_id: "r".into(),
        new_token_ids: ids.to_vec(),
        logprobs: Vec::new(),
        prompt_logprobs: None,
        finish_reason: finish,
        stop_token,
        num_prompt_tokens: 3,
        num_cached_tokens: 0,
    }
}

fn setup() -> (Arc<Tokenizer>, Vec<u32>, Vec<u32>) {
    let tok = Arc::new(hf_tokenizer("smollm2"));
    let prompt = tok.encode("Hello there.", false).unwrap();
    let ids = tok.encode(" The quick brown fox jumps over the lazy dog.", false).unwrap();
    (tok, prompt, ids)
}

fn opts(stop: &[&str], include: bool) -> OutputOptions {
    OutputOptions {
        stop: stop.iter().map(|s| s.to_string()).collect(),
        include_stop_str_in_output: include,
        skip_special_tokens: true,
    }
}

#[test]
fn text_adds_up_and_length_finish_flushes() {
    let (tok, prompt, ids) = setup();
    let mut p = OutputProcessor::new(tok.clone(), &prompt, &opts(&["zzz-not-there"], false)).unwrap();
    let mut text = String::new();
    for (i, &id) in ids.iter().enumerate() {
        let last = i + 1 == ids.len();
        let d = p.process(output(&[id], last.then_some(FinishReason::Length), None)).unwrap();
        assert_eq!(d.token_ids, vec![id]);
        assert!(!d.needs_abort);
        text.push_str(&d.text);
        assert_eq!(d.finish_reason, last.then_some(FinishReason::Length));
    }
    assert_eq!(text, tok.decode(&ids, true).unwrap());
    assert_eq!(p.text, text);
    assert_eq!(p.token_ids, ids);
    assert!(p.is_finished() && p.stop_reason().is_none());
}

#[test]
fn stop_string_across_tokens_cuts_the_text_and_asks_for_an_abort() {
    let (tok, prompt, ids) = setup();
    // "k b" spans " quick" and " brown".
    for (include, want) in [(false, " The quic"), (true, " The quick b")] {
        let mut p = OutputProcessor::new(tok.clone(), &prompt, &opts(&["k b"], include)).unwrap();
        let mut text = String::new();
        let mut stopped_at = None;
        for (i, &id) in ids.iter().enumerate() {
            let d = p.process(output(&[id], None, None)).unwrap();
            text.push_str(&d.text);
            if d.finish_reason.is_some() {
                assert_eq!(d.finish_reason, Some(FinishReason::Stop));
                assert_eq!(d.stop_reason, Some(StopReason::Text("k b".into())));
                assert!(d.needs_abort, "the engine is still running the request");
                stopped_at = Some(i);
                break;
            }
        }
        assert_eq!(text, want);
        let at = stopped_at.expect("stopped");
        assert_eq!(p.token_ids, ids[..=at].to_vec(), "the token that completed the stop string is kept");
        // Outputs that raced the abort add nothing.
        let late = p.process(output(&ids[at + 1..at + 2], Some(FinishReason::Abort), None)).unwrap();
        assert!(late.text.is_empty() && late.token_ids.is_empty() && late.finish_reason.is_none());
        assert_eq!(p.finish_reason(), Some(FinishReason::Stop));
    }
}

#[test]
fn held_back_text_is_released_at_eos_and_stop_tokens_are_reported() {
    let (tok, prompt, ids) = setup();
    // The text ends with "dog." — "g.X" could still start there, so "g." is held back until EOS.
    let mut p = OutputProcessor::new(tok.clone(), &prompt, &opts(&["g.X"], false)).unwrap();
    let mut text = String::new();
    for &id in &ids {
        text.push_str(&p.process(output(&[id], None, None)).unwrap().text);
    }
    assert!(text.ends_with("do"), "{text:?}");
    let eos = tok.eos_token_id().unwrap();
    let d = p.process(output(&[eos], Some(FinishReason::Stop), Some(eos))).unwrap();
    assert_eq!(d.text, "g.");
    assert_eq!(d.stop_reason, Some(StopReason::TokenId(eos)));
    assert!(!d.needs_abort);
}

#[test]
fn an_empty_stop_string_is_rejected() {
    let (tok, prompt, _) = setup();
    assert!(OutputProcessor::new(tok, &prompt, &opts(&[""], false)).is_err());
}

#[test]
fn token_text_is_the_single_token_decoding() {
    let (tok, _, ids) = setup();
    let joined: String = ids.iter().map(|&id| token_text(&tok, id)).collect();
    assert_eq!(joined, " The quick brown fox jumps over the lazy dog.");
}
