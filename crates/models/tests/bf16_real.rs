//! The bf16 compute mode (`--dtype bfloat16`) on a real model: its logits stay close to the
//! float32 path's, and its greedy choices equal transformers' float32 ones wherever transformers'
//! own top-2 margin is wide enough that bf16 rounding cannot flip them.
//!
//! Teacher-forced: each golden case (prompt + transformers' 32 greedy ids) runs as one prefill,
//! and the logits at every position that predicts a golden id are compared, so one flip does not
//! change the inputs of the later steps. The mode is process-wide (it decides how weights are
//! prepared at load), hence this test binary of its own.

mod common;

use common::{argmax, ids, rel_max_diff};
use vllm_rs_kernels::attention::{KvDtype, SeqAttention};
use vllm_rs_kernels::bf16_matmul::{DenseCompute, set_dense_compute};
use vllm_rs_models::{ForwardBatch, GroupBatch, Model, Workspace};
use vllm_rs_testutil::{golden, hf_dir};

/// Relative top-2 margin (of the logit scale) above which bf16 must choose transformers' token.
/// bf16 keeps 8 significant bits (relative rounding 2^-9 per value). Measured on smollm2 (Zen 5,
/// 2026-12-04): 1 flip in 320 steps, at margin 0.0009; logits within 0.015 of the scale.
const SAFE_MARGIN: f64 = 0.02;

/// Logits of every position of `ids` from `from` on, `[(ids.len() - from) × vocab]`.
fn teacher_forced(model: &dyn Model, ids: &[u32], from: usize) -> Vec<f32> {
    let n = ids.len();
    let blocks = n.div_ceil(16);
    let mut kv = model.info().contiguous_kv_cache(blocks, 16, KvDtype::F32, 1);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let state = [0u32];
    let positions: Vec<u32> = (0..n as u32).collect();
    let slots: Vec<usize> = (0..n).collect();
    let rows: Vec<usize> = (from..n).collect();
    let batch = ForwardBatch {
        input_ids: ids,
        positions: &positions,
        groups: [&table[..], &state[..]]
            .map(|t| GroupBatch {
                slot_mapping: &slots,
                seqs: vec![SeqAttention { query_start: 0, query_len: n, seq_len: n, block_table: t }],
            })
            .into(),
        logits_indices: &rows,
        state_saves: &[],
    };
    let mut logits = Vec::new();
    model.forward_with(&batch, &mut kv, &mut Workspace::default(), &mut logits);
    logits
}

#[test]
fn smollm2_in_bf16_keeps_transformers_choices_where_the_margin_is_clear() {
    let g = golden("real/smollm2.json");
    let f32_model = vllm_rs_models::load(&hf_dir("smollm2")).unwrap().model;
    set_dense_compute(DenseCompute::Bf16);
    let bf16_model = vllm_rs_models::load(&hf_dir("smollm2")).unwrap().model;
    set_dense_compute(DenseCompute::F32);
    assert!(vllm_rs_kernels::packed_bf16::packed_bf16_bytes() > 0, "the bf16 load packed no weights");
    let vocab = f32_model.info().vocab_size;
    let (mut checked, mut flips, mut worst_diff) = (0, vec![], 0f64);
    for (c, case) in g["cases"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt_token_ids"]);
        let want = ids(&case["token_ids"]);
        let all: Vec<u32> = prompt.iter().chain(&want[..want.len() - 1]).copied().collect();
        let ours = teacher_forced(bf16_model.as_ref(), &all, prompt.len() - 1);
        let exact = teacher_forced(f32_model.as_ref(), &all, prompt.len() - 1);
        assert_ne!(ours, exact, "case {c}: bf16 logits are the float32 ones: the bf16 path did not run");
        for (step, (o, e)) in ours.chunks_exact(vocab).zip(exact.chunks_exact(vocab)).enumerate() {
            worst_diff = worst_diff.max(rel_max_diff(o, e));
            let margin = case["rel_margins"][step].as_f64().unwrap();
            if argmax(o) != want[step] {
                flips.push((c, step, margin));
            }
            checked += (margin > SAFE_MARGIN) as usize;
        }
    }
    eprintln!(
        "smollm2 bf16: {checked} clear steps; flips (case, step, margin): {flips:?}; worst rel logit diff {worst_diff:.4}"
    );
    assert!(checked > 100, "too few steps with a clear margin: {checked}");
    assert!(flips.iter().all(|f| f.2 <= SAFE_MARGIN), "bf16 flipped a clear choice: {flips:?}");
    assert!(worst_diff < 0.04, "bf16 logits are {worst_diff:.4} of the logit scale from float32's");
}
