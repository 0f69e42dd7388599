//! Tiny random encoders made by transformers (`scripts/make_tiny_encoders.py`): our last hidden
//! states (bare encoders) and classification logits (heads) against transformers float32, one
//! sequence at a time and all in one batch (bit-identical); token type ids of text pairs; a
//! padding id inside a sequence (RoBERTa/MPNet positions skip it); ModernBERT's sliding window
//! layers on inputs longer than the window. The batch runs on every backend this machine has,
//! which must give the same bits.

use vllm_rs_models::PoolingWorkspace;
use vllm_rs_testutil::{golden, test_data};

fn ids(v: &serde_json::Value) -> Option<Vec<u32>> {
    v.as_array().map(|a| a.iter().map(|x| x.as_u64().unwrap() as u32).collect())
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// Largest difference relative to the largest reference magnitude.
fn rel_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale
}

fn check(name: &str) {
    let dir = test_data(&format!("data/tiny-encoders/{name}"));
    // What `serve` asks to pick the pooling runner.
    assert!(vllm_rs_models::is_encoder(&dir), "{name} is not taken for an encoder");
    let enc = vllm_rs_models::load_encoder(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(enc.unread.is_empty(), "{name}: tensors left unread: {:?}", enc.unread);
    let g = golden(&format!("tiny-encoders/{name}.json"));
    let cases = g["cases"].as_array().unwrap();
    let (mut all_ids, mut all_types, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    let mut alone_outs = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let tok = ids(&c["token_ids"]).unwrap();
        let types = ids(&c["token_type_ids"]).unwrap_or_else(|| vec![0; tok.len()]);
        let mut ws = PoolingWorkspace::default();
        let h = enc.forward(&tok, Some(&types), &[tok.len()], &mut ws).to_vec();
        let got = match &enc.classifier {
            Some(head) => {
                let (mut scratch, mut logits) = (Vec::new(), Vec::new());
                head.logits(ws.backend(), &h, &mut scratch, &mut logits);
                logits
            }
            None => h.clone(),
        };
        let want = floats(if enc.classifier.is_some() { &c["logits"] } else { &c["hidden"] });
        let err = rel_diff(&got, &want);
        assert!(err < 1e-4, "{name} case {i} (len {}): relative error {err}", tok.len());
        lens.push(tok.len());
        all_ids.extend(tok);
        all_types.extend(types);
        alone_outs.push(h);
    }
    for be in vllm_rs_kernels::backend::available() {
        let mut ws = PoolingWorkspace::on(be);
        let batch = enc.forward(&all_ids, Some(&all_types), &lens, &mut ws);
        assert_eq!(
            batch,
            alone_outs.concat().as_slice(),
            "{name}: batch on {} differs from sequences alone",
            be.name()
        );
    }
}

#[test]
fn bert() {
    check("bert");
}

#[test]
fn roberta() {
    check("roberta");
}

#[test]
fn xlm_roberta() {
    check("xlm_roberta");
}

#[test]
fn mpnet() {
    check("mpnet");
}

/// Pre-norm, rotary, GLU, no biases; layers 1 and 2 attend within ±4 tokens, which the
/// longer cases exceed.
#[test]
fn modernbert() {
    check("modernbert");
}

#[test]
fn bert_sequence_classification() {
    check("bert_cls");
}

#[test]
fn xlm_roberta_sequence_classification() {
    check("xlm_roberta_cls");
}

/// Every optional bias, tanh GELU, and a ReLU head over the mean of the tokens.
#[test]
fn modernbert_sequence_classification() {
    check("modernbert_cls");
}

/// A decoder run as a pooling model (`--runner pooling`): the final hidden states of whole
/// sequences equal transformers' (the tiny Qwen3 of `tests/data/tiny`), alone and batched.
#[test]
fn qwen3_as_a_pooling_model() {
    let m = vllm_rs_models::load_decoder_for_pooling(&test_data("data/tiny/qwen3")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.pooling.pooling_type, vllm_rs_models::pooling::PoolingType::Last);
    let g = golden("tiny-encoders/qwen3_pooled.json");
    let (mut all, mut lens, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
        let tok = ids(&c["token_ids"]).unwrap();
        let mut ws = PoolingWorkspace::default();
        let h = m.forward(&tok, None, &[tok.len()], &mut ws).to_vec();
        let err = rel_diff(&h, &floats(&c["hidden"]));
        assert!(err < 1e-4, "case {i}: relative error {err}");
        lens.push(tok.len());
        all.extend(tok);
        alone.push(h);
    }
    let mut ws = PoolingWorkspace::default();
    assert_eq!(m.forward(&all, None, &lens, &mut ws), alone.concat().as_slice());
}

/// A model without a token type table (ModernBERT) ignores the type ids a tokenizer's pair
/// template gives (the cross-encoder `/score` path sends them), as transformers never feeds them.
#[test]
fn modernbert_ignores_token_types() {
    let enc = vllm_rs_models::load_encoder(&test_data("data/tiny-encoders/modernbert_cls")).unwrap();
    let ids = [1, 17, 33, 2, 50, 61, 2];
    let types = [0, 0, 0, 0, 1, 1, 1];
    let mut ws = PoolingWorkspace::default();
    let plain = enc.forward(&ids, None, &[ids.len()], &mut ws).to_vec();
    assert_eq!(enc.forward(&ids, Some(&types), &[ids.len()], &mut ws), plain.as_slice());
}
