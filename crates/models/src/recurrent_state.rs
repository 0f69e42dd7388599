//! How recurrent layers (gated delta-net, short convolutions) use their state slots: each
//! request's state lives in its slot (the one entry of its table in the recurrent KV cache
//! group), starts from zeros when the request's step starts at position 0, and is copied into
//! prefix-cache snapshot slots at the rows the batch names (`ForwardBatch::state_saves`).

use crate::batch::{ForwardBatch, SeqAttention};
use crate::error::{Error, Result};
use serde_json::Value;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::pool;

/// Where request `s`'s state starts in a layer's states (`per_slot` values a slot); zeroed
/// first when nothing was computed before this step.
pub fn request_state(states: &mut [f32], per_slot: usize, s: &SeqAttention) -> usize {
    let at = s.block_table[0] as usize * per_slot;
    if s.seq_len == s.query_len {
        states[at..at + per_slot].fill(0.0);
    }
    at
}

/// The saves of `saves` that fall in `s`'s rows, in row order.
pub fn saves_in<'a>(saves: &'a [(usize, u32)], s: &'a SeqAttention) -> impl Iterator<Item = (usize, u32)> + 'a {
    let rows = s.query_start..s.query_start + s.query_len;
    saves.iter().copied().filter(move |(r, _)| rows.contains(r))
}

/// [`Backend::causal_conv1d`] over request `s`'s rows of `x` (`channels` wide) with the convolution
/// window at `states[at..at + window]`, in pieces ending at the rows whose state is saved (the
/// same bits as one piece), the window copied to the start of each snapshot slot.
#[allow(clippy::too_many_arguments)]
pub fn conv_with_saves(
    be: &dyn Backend,
    x: &mut [f32],
    channels: usize,
    (states, at, per_slot): (&mut [f32], usize, usize),
    (weight, kernel): (&[f32], usize),
    s: &SeqAttention,
    saves: &[(usize, u32)],
    row: &mut Vec<f32>,
) {
    let window = (kernel - 1) * channels;
    let mut from = s.query_start;
    let ends = saves_in(saves, s).map(|(r, slot)| (r + 1, Some(slot))).chain([(s.query_start + s.query_len, None)]);
    for (end, snapshot) in ends {
        if end > from {
            // (Two saves after one row make an empty piece.)
            be.causal_conv1d(
                &mut x[from * channels..end * channels],
                &mut states[at..at + window],
                weight,
                kernel,
                row,
            );
        }
        if let Some(slot) = snapshot {
            states.copy_within(at..at + window, slot as usize * per_slot);
        }
        from = end;
    }
}

/// The depthwise causal convolution of every request's rows of `x` (`channels` wide), each
/// over the window at the start of its state slot in layer `layer` (see [`conv_with_saves`]).
#[allow(clippy::too_many_arguments)]
pub fn convolve_requests(
    be: &dyn Backend,
    kv: &mut KvCache,
    layer: usize,
    batch: &ForwardBatch,
    x: &mut [f32],
    channels: usize,
    weight: (&[f32], usize),
    row: &mut Vec<f32>,
) {
    let seqs = &batch.groups[kv.group_of(layer)].seqs;
    let (states, per_slot) = kv.states_mut(layer);
    for s in seqs {
        let at = request_state(states, per_slot, s);
        conv_with_saves(be, x, channels, (states, at, per_slot), weight, s, batch.state_saves, row);
    }
}

/// Where a layer's per-head states and outputs sit: in every slot, `heads` states of
/// `head_state` values after the `conv_state` window; `head_out` output values per row and head.
#[derive(Clone, Copy)]
pub struct HeadLayout {
    pub heads: usize,
    pub conv_state: usize,
    pub head_state: usize,
    pub head_out: usize,
}

/// Runs `step(row, head, state, out, scratch)` over every request's rows in order, one task per
/// (request, head) — on the pool's threads when the work is large — with `state` the head's state
/// in the request's slot and `out` the row's output for that head. After a row the batch saves
/// (`saves`, in row order; a row may have several), the head's state is copied into the
/// snapshot's slot.
pub fn scan_heads(
    (seqs, saves): (&[SeqAttention], &[(usize, u32)]),
    (states, per_slot): (&mut [f32], usize),
    l: HeadLayout,
    out: &mut [f32],
    step: impl Fn(usize, usize, &mut [f32], &mut [f32], &mut Vec<f32>) + Sync,
) {
    let states = pool::Disjoint::new(states);
    let out = pool::Disjoint::new(out);
    let task = |i: usize| {
        let (s, h) = (&seqs[i / l.heads], i % l.heads);
        let head_at = |slot: usize| slot * per_slot + l.conv_state + h * l.head_state;
        // SAFETY: tasks own distinct (slot, head) states — their request's and its snapshots' —
        // and distinct (row, head) outputs.
        let state = unsafe { states.range(head_at(s.block_table[0] as usize), l.head_state) };
        let mut saves = saves_in(saves, s).peekable();
        let mut scratch = Vec::new();
        for t in s.query_start..s.query_start + s.query_len {
            // SAFETY: as above.
            let o = unsafe { out.range((t * l.heads + h) * l.head_out, l.head_out) };
            step(t, h, state, o, &mut scratch);
            while let Some((_, slot)) = saves.next_if(|(r, _)| *r == t) {
                // SAFETY: as above.
                unsafe { states.range(head_at(slot as usize), l.head_state) }.copy_from_slice(state);
            }
        }
    };
    let n_tasks = seqs.len() * l.heads;
    let tokens: usize = seqs.iter().map(|s| s.query_len).sum();
    if n_tasks > 1 && tokens * l.heads * l.head_state >= 1 << 16 {
        pool::global().run(n_tasks, &task);
    } else {
        (0..n_tasks).for_each(task);
    }
}

/// A config key that must be a positive integer (the recurrent layers' shapes).
pub fn positive(config: &Value, key: &str) -> Result<usize> {
    config[key]
        .as_u64()
        .filter(|&v| v > 0)
        .map(|v| v as usize)
        .ok_or_else(|| Error::msg(format!("config: {key} must be a positive integer")))
}

/// torch's `softplus` (β = 1, threshold 20): `ln(1 + eˣ)`, or `x` above 20.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}
