//! Shared by the model-level tests: greedy decoding over the paged KV cache, the way the engine
//! drives a model (flat batch, block tables, slot mapping), and logit comparisons.
#![allow(dead_code)] // each test binary uses its own subset

use serde_json::Value;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::{KvCache, KvDtype, SeqAttention};
use vllm_rs_models::{ForwardBatch, GroupBatch, Model, Workspace};

/// Tokens per cache block in these tests: small, so sequences span several blocks.
pub const BLOCK_SIZE: usize = 16;

/// What one greedy run produced.
pub struct Greedy {
    pub token_ids: Vec<u32>,
    /// Logits the first generated token was chosen from (end of the prompt).
    pub first_logits: Vec<f32>,
    /// Logits the last generated token was chosen from.
    pub final_logits: Vec<f32>,
}

/// Index of the largest value; the first one on ties, as `torch.argmax`.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Physical block ids for `seq` (of `n_seqs`) needing `blocks` blocks: interleaved and reversed, so
/// no sequence's blocks are contiguous or in order and a paging bug cannot hide.
fn block_table(seq: usize, n_seqs: usize, blocks: usize) -> Vec<u32> {
    (0..blocks).rev().map(|b| (b * n_seqs + seq) as u32).collect()
}

fn slot(table: &[u32], pos: usize) -> usize {
    table[pos / BLOCK_SIZE] as usize * BLOCK_SIZE + pos % BLOCK_SIZE
}

/// A cache of `blocks` blocks and `slots` recurrent state slots.
fn new_cache(model: &dyn Model, blocks: usize, slots: usize) -> KvCache {
    let info = model.info();
    info.contiguous_kv_cache(blocks, BLOCK_SIZE, KvDtype::F32, slots)
}

/// Recurrent state slot of each of `n` sequences (reversed, so slot and index differ), as the
/// one-entry tables of the recurrent group (group 1 of a contiguous cache).
fn state_slots(n: usize) -> Vec<[u32; 1]> {
    (0..n).map(|s| [(n - 1 - s) as u32]).collect()
}

/// Greedy-decodes `n_new` tokens after `prompt` (EOS ignored). The prompt is prefilled in chunks of
/// `prefill_chunk` tokens (`usize::MAX`: all at once), then one token per step.
pub fn greedy(model: &dyn Model, prompt: &[u32], n_new: usize, prefill_chunk: usize) -> Greedy {
    greedy_on(vllm_rs_kernels::backend::default(), model, prompt, n_new, prefill_chunk)
}

/// [`greedy`] with every op on backend `be`.
pub fn greedy_on(
    be: &'static dyn Backend,
    model: &dyn Model,
    prompt: &[u32],
    n_new: usize,
    prefill_chunk: usize,
) -> Greedy {
    let mut ws = Workspace::on(be);
    let mut logits = Vec::new();
    assert!(!prompt.is_empty() && n_new > 0);
    let vocab = model.info().vocab_size;
    let blocks = (prompt.len() + n_new).div_ceil(BLOCK_SIZE);
    let table = block_table(0, 1, blocks);
    let mut kv = new_cache(model, blocks, 1);
    let state = state_slots(1);
    let mut ids = prompt.to_vec();
    let mut done = 0; // tokens whose K/V are in the cache
    let mut out = Greedy { token_ids: vec![], first_logits: vec![], final_logits: vec![] };
    while out.token_ids.len() < n_new {
        let end = if done < prompt.len() { prompt.len().min(done.saturating_add(prefill_chunk)) } else { ids.len() };
        let new = &ids[done..end];
        let positions: Vec<u32> = (done as u32..end as u32).collect();
        let slots: Vec<usize> = (done..end).map(|p| slot(&table, p)).collect();
        let last = [new.len() - 1];
        let batch = ForwardBatch {
            input_ids: new,
            positions: &positions,
            groups: [&table[..], &state[0]]
                .map(|t| GroupBatch {
                    slot_mapping: &slots,
                    seqs: vec![SeqAttention { query_start: 0, query_len: new.len(), seq_len: end, block_table: t }],
                })
                .into(),
            logits_indices: &last,
            state_saves: &[],
        };
        model.forward_with(&batch, &mut kv, &mut ws, &mut logits);
        assert_eq!(logits.len(), vocab);
        done = end;
        if done < prompt.len() {
            continue; // a prefill chunk that does not reach the end of the prompt samples nothing
        }
        let next = argmax(&logits);
        if out.token_ids.is_empty() {
            out.first_logits = logits.clone();
        }
        out.final_logits = logits.clone();
        ids.push(next);
        out.token_ids.push(next);
    }
    out
}

/// Greedy-decodes every prompt side by side in one flat batch per step, as the engine batches
/// requests: step 0 prefills all prompts together, then each step decodes one token of each.
/// Returns each prompt's `n_new` tokens (EOS ignored).
pub fn greedy_batch(model: &dyn Model, prompts: &[Vec<u32>], n_new: usize) -> Vec<Vec<u32>> {
    greedy_batch_on(vllm_rs_kernels::backend::default(), model, prompts, n_new)
}

/// [`greedy_batch`] with every op on backend `be`.
pub fn greedy_batch_on(
    be: &'static dyn Backend,
    model: &dyn Model,
    prompts: &[Vec<u32>],
    n_new: usize,
) -> Vec<Vec<u32>> {
    let (mut ws, mut logits) = (Workspace::on(be), Vec::new());
    let n = prompts.len();
    let vocab = model.info().vocab_size;
    let per_seq: Vec<usize> = prompts.iter().map(|p| (p.len() + n_new).div_ceil(BLOCK_SIZE)).collect();
    let max_blocks = *per_seq.iter().max().unwrap();
    let tables: Vec<Vec<u32>> = per_seq.iter().enumerate().map(|(s, &b)| block_table(s, n, b)).collect();
    let mut kv = new_cache(model, max_blocks * n, n);
    let states = state_slots(n);
    let mut ids: Vec<Vec<u32>> = prompts.to_vec();
    let mut done = vec![0usize; n];
    let mut out = vec![Vec::with_capacity(n_new); n];
    for _ in 0..n_new {
        let (mut input, mut positions, mut slots, mut last) = (vec![], vec![], vec![], vec![]);
        let mut ranges = vec![];
        for s in 0..n {
            let start = input.len();
            for (p, &id) in ids[s].iter().enumerate().skip(done[s]) {
                input.push(id);
                positions.push(p as u32);
                slots.push(slot(&tables[s], p));
            }
            ranges.push((start, input.len() - start, ids[s].len()));
            last.push(input.len() - 1);
        }
        let batch = ForwardBatch {
            input_ids: &input,
            positions: &positions,
            groups: vec![
                GroupBatch { slot_mapping: &slots, seqs: seq_list(&ranges, tables.iter().map(|t| &t[..])) },
                GroupBatch { slot_mapping: &slots, seqs: seq_list(&ranges, states.iter().map(|s| &s[..])) },
            ],
            logits_indices: &last,
            state_saves: &[],
        };
        model.forward_with(&batch, &mut kv, &mut ws, &mut logits);
        assert_eq!(logits.len(), n * vocab);
        for s in 0..n {
            let next = argmax(&logits[s * vocab..(s + 1) * vocab]);
            done[s] = ids[s].len();
            ids[s].push(next);
            out[s].push(next);
        }
    }
    out
}

/// Each `(query_start, query_len, seq_len)` with its table.
fn seq_list<'a>(ranges: &[(usize, usize, usize)], tables: impl Iterator<Item = &'a [u32]>) -> Vec<SeqAttention<'a>> {
    ranges
        .iter()
        .zip(tables)
        .map(|(&(query_start, query_len, seq_len), block_table)| SeqAttention {
            query_start,
            query_len,
            seq_len,
            block_table,
        })
        .collect()
}

/// Largest |a - b| over the largest |b|: the relative error of a logit vector.
pub fn rel_max_diff(ours: &[f32], want: &[f32]) -> f64 {
    assert_eq!(ours.len(), want.len(), "logit vectors differ in length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
    let diff = ours.iter().zip(want).fold(0f64, |m, (a, b)| m.max((*a as f64 - *b as f64).abs()));
    diff / scale
}

/// A JSON array of numbers as `u32` token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array of token ids").iter().map(|x| x.as_u64().expect("token id") as u32).collect()
}

/// A JSON array of numbers as `f32`.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("array of numbers").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

/// Where two id sequences first differ, for failure messages.
pub fn first_mismatch(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

pub mod files;
