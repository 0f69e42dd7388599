//! A draft model's output head cut to its first ids, plus each request's own ids beyond them.
//!
//! The head of a small draft model over a large vocabulary is a big share of its bytes a step
//! (Qwen2.5-Coder-0.5B: 145 of the 384 MB it reads per token, a Q8_0 head of 151,936 rows).
//! Byte-level BPE numbers tokens roughly by how often they occur, so most tokens a draft
//! proposes lie among the first few tens of thousands of ids (the idea of FR-Spec, which ranks
//! ids by counted frequency); the rare ones a request needs are mostly in the request itself (a
//! code-editing answer copies the prompt's identifiers). So the draft scores the first
//! [`DRAFT_HEAD_ROWS`] rows with the matmul and its request's own rarer ids one by one. Drafts
//! are only proposals that the target verifies: a token this head cannot propose costs a
//! rejected draft, never a different output. Where a request's new tokens keep falling outside
//! (a vocabulary whose ids are not ranked by frequency for every script: Qwen's Chinese tokens
//! are ids 96k-120k), it goes back to the whole head.

use vllm_rs_kernels::Backend;
use vllm_rs_kernels::Weight;
use vllm_rs_models::Model;
use vllm_rs_models::layers::gather_rows;

/// Rows of the cut head by default; a vocabulary under twice as large keeps its whole head.
pub const DRAFT_HEAD_ROWS: usize = 32768;

/// At most this many ids beyond the cut a request contributes (its distinct rare ids, in the
/// order they come): bounds the work per step and the memory per request.
pub const MAX_EXTRA_IDS: usize = 1024;

/// A request takes the whole head while more than one in this many of its new tokens were ones
/// the cut head could not have proposed. A miss costs about a cycle of drafts; the cut saves a
/// share of one draft step a token (~16 % of a Qwen2.5-0.5B step on Zen 3), so a few misses
/// in a hundred tokens already cost more than the cut saves.
pub const MISS_RATE: usize = 64;

/// What the cut head knows of one request.
#[derive(Default)]
pub struct RequestIds {
    /// Its distinct ids past the cut, in the order they came.
    extra: Vec<u32>,
    /// Tokens looked at: the first `prompt` at the first look, `seen` in all.
    prompt: usize,
    seen: usize,
    /// New tokens (after the first look) the cut head could not have proposed.
    misses: usize,
}

impl RequestIds {
    /// The ids past the cut that this request's drafts may take, or `None` while its new tokens
    /// miss often enough that the whole head pays ([`MISS_RATE`]).
    pub fn extras(&self) -> Option<&[u32]> {
        (self.misses * MISS_RATE <= self.seen - self.prompt).then_some(&self.extra[..])
    }
}

pub struct DraftVocab {
    /// The head's first rows, made ready for the matmuls.
    head: Weight,
    /// The whole head, whose rows past the cut are read one at a time.
    full: Weight,
    /// Scratch: the rows that need a token, their logits over the cut, rare rows as f32.
    hidden: Vec<f32>,
    logits: Vec<f32>,
    rare: Vec<f32>,
}

impl DraftVocab {
    /// The head of `model` cut to `rows` ids, or `None` where the cut does not pay: no head of
    /// its own, `rows` 0, or a vocabulary under `2 · rows`. A model's logits are an increasing
    /// function of `hidden · head row` ([`Model::lm_head`]), so the argmax over the head's dot
    /// products is the argmax over its logits.
    pub fn new(model: &dyn Model, rows: usize) -> Option<Self> {
        DraftVocab::from_head(model.lm_head()?, rows)
    }

    /// [`DraftVocab::new`] for the head `full`.
    pub fn from_head(full: &Weight, rows: usize) -> Option<Self> {
        if rows == 0 || full.rows < 2 * rows {
            return None;
        }
        let head = full.first_rows(rows).for_matmul();
        Some(DraftVocab { head, full: full.clone(), hidden: Vec::new(), logits: Vec::new(), rare: Vec::new() })
    }

    /// Ids the matmul scores: `0..rows()`.
    pub fn rows(&self) -> usize {
        self.head.rows
    }

    /// Takes in the request's tokens (all of them, each time: the ones not yet seen are new).
    /// Its distinct ids past the cut join `ids.extra` (at most [`MAX_EXTRA_IDS`]); a new token
    /// the cut head could not have proposed counts as a miss, except at the first look (the
    /// prompt).
    pub fn note(&self, tokens: &[u32], ids: &mut RequestIds) {
        let first = ids.seen == 0;
        for &t in tokens[ids.seen.min(tokens.len())..].iter().filter(|&&t| t as usize >= self.rows()) {
            if ids.extra.contains(&t) {
                continue;
            }
            ids.misses += usize::from(!first);
            if ids.extra.len() < MAX_EXTRA_IDS {
                ids.extra.push(t);
            }
        }
        ids.seen = tokens.len();
        if first {
            ids.prompt = ids.seen;
        }
    }

    /// The best id for each `(row, extras)` of `picks` (a row index into `hidden`, final hidden
    /// states `tokens × cols`, and the ids past the cut its request may take): the largest dot
    /// product over the cut head and `extras` (the earlier on ties), or over the whole head
    /// where `extras` is `None`. Into `out` as `(id, p)`, where `p` is, if `confidence`, the id's
    /// probability under the softmax of the dot products it was chosen from (a model that
    /// scales or caps its logits would give it another one; a draft's confidence needs no more),
    /// else 1.
    pub fn argmax(
        &mut self,
        be: &dyn Backend,
        hidden: &[f32],
        picks: &[(usize, Option<&[u32]>)],
        confidence: bool,
        out: &mut Vec<(u32, f32)>,
    ) {
        out.clear();
        out.resize(picks.len(), (0, 1.0));
        let (cut, whole): (Vec<usize>, Vec<usize>) = (0..picks.len()).partition(|&i| picks[i].1.is_some());
        let mut got = Vec::new();
        for (part, is_cut) in [(&whole, false), (&cut, true)] {
            if part.is_empty() {
                continue;
            }
            let head = if is_cut { &self.head } else { &self.full };
            let (vocab, rows): (usize, Vec<usize>) = (head.rows, part.iter().map(|&i| picks[i].0).collect());
            gather_rows(hidden, head.cols, &rows, &mut self.hidden);
            self.logits.resize(rows.len() * vocab, 0.0);
            be.matmul(&self.hidden, rows.len(), head, &mut self.logits);
            be.argmax_rows(&self.logits, vocab, &mut got);
            for (n, (&i, &t)) in part.iter().zip(&got).enumerate() {
                out[i] = (
                    t,
                    if confidence { top_probability(&mut self.logits[n * vocab..(n + 1) * vocab], t) } else { 1.0 },
                );
                if let Some(ids) = picks[i].1 {
                    self.rare_argmax(be, n, ids, confidence, &mut out[i]);
                }
            }
        }
    }

    /// Raises `best` (the cut head's argmax for the `n`-th gathered row, and its probability
    /// over the cut) to the id of `ids` with a larger dot product, if any (all compared as f32
    /// dot products of dequantized rows); if `confidence`, the probability becomes one over the
    /// cut and `ids` together.
    fn rare_argmax(&mut self, be: &dyn Backend, n: usize, ids: &[u32], confidence: bool, best: &mut (u32, f32)) {
        if ids.is_empty() {
            return;
        }
        let cols = self.head.cols;
        let x = &self.hidden[n * cols..(n + 1) * cols];
        let dot = |w: &[f32]| -> f32 { x.iter().zip(w).map(|(a, b)| a * b).sum() };
        be.embedding(&self.full, &[best.0], 1.0, &mut self.rare);
        let base = dot(&self.rare);
        let (mut top, mut pick) = (base, None);
        // Each rare id's share, relative to the cut's: e^(d - base) times the cut pick's.
        let (p_cut, mut total) = (best.1, 1.0f32);
        be.embedding(&self.full, ids, 1.0, &mut self.rare);
        for (&id, w) in ids.iter().zip(self.rare.chunks_exact(cols)) {
            let d = dot(w);
            let share = if confidence { p_cut * (d - base).min(80.0).exp() } else { 0.0 };
            total += share;
            if d > top {
                (top, pick) = (d, Some((id, share)));
            }
        }
        let (id, share) = pick.unwrap_or((best.0, p_cut));
        *best = (id, if confidence { share / total } else { 1.0 });
    }
}

/// The probability of id `t` under the softmax of `scores` (which it overwrites).
pub fn top_probability(scores: &mut [f32], t: u32) -> f32 {
    vllm_rs_kernels::ops::softmax(scores);
    scores[t as usize]
}

#[cfg(test)]
mod tests {
    use super::{DraftVocab, MAX_EXTRA_IDS, MISS_RATE, RequestIds};
    use vllm_rs_kernels::Weight;
    use vllm_rs_kernels::testing::rand_vec;

    #[test]
    fn a_request_notes_its_distinct_ids_past_the_cut_in_order_up_to_the_cap() {
        let v = DraftVocab::from_head(&Weight::from_f32(5000, 4, &rand_vec(20000, 1)), 100).unwrap();
        let mut ids = RequestIds::default();
        let mut tokens = vec![5, 300, 300, 250, 99, 100, 300];
        v.note(&tokens, &mut ids);
        assert_eq!(ids.extras(), Some(&[300, 250, 100][..]), "the prompt: no misses");
        tokens.extend(100..5000);
        v.note(&tokens, &mut ids);
        assert_eq!(ids.extra.len(), MAX_EXTRA_IDS);
        assert_eq!(ids.extra[..5], [300, 250, 100, 101, 102], "no id twice");
        assert_eq!(ids.misses, 4900 - 3, "every new id past the cut but 100, 250 and 300");
    }

    /// A request whose new tokens keep missing the cut head takes the whole head; once they
    /// stop missing, the cut head again.
    #[test]
    fn a_request_takes_the_whole_head_while_its_new_tokens_miss() {
        let v = DraftVocab::from_head(&Weight::from_f32(5000, 4, &rand_vec(20000, 1)), 100).unwrap();
        let mut ids = RequestIds::default();
        let mut tokens = vec![1, 2, 3];
        v.note(&tokens, &mut ids);
        tokens.extend([4, 700, 5]);
        v.note(&tokens, &mut ids);
        assert_eq!(ids.extras(), None, "one miss in 3 new tokens");
        tokens.extend([700, 6].repeat(MISS_RATE / 2));
        v.note(&tokens, &mut ids);
        assert_eq!(ids.extras(), Some(&[700][..]), "one miss in {} new tokens", MISS_RATE + 3);
    }

    #[test]
    fn a_cut_that_does_not_pay_keeps_the_whole_head() {
        let head = Weight::from_f32(300, 4, &rand_vec(1200, 3));
        assert!(DraftVocab::from_head(&head, 151).is_none(), "under twice the cut");
        assert!(DraftVocab::from_head(&head, 0).is_none(), "0: the whole head");
        assert!(DraftVocab::from_head(&head, 150).is_some());
    }
    /// Ids past the cut win only where the row's request noted them; inside the cut the
    /// largest logit wins, as over the whole head.
    #[test]
    fn the_argmax_covers_the_cut_and_each_rows_own_ids_only() {
        let (vocab, cols, cut) = (600, 64, 200);
        let hidden = rand_vec(3 * cols, 4);
        let mut w = rand_vec(vocab * cols, 5);
        // Rows 450 and 500 point along hidden row 0, 500 the most: the whole head's argmax.
        for (id, s) in [(450, 10.0), (500, 20.0)] {
            for c in 0..cols {
                w[id * cols + c] = s * hidden[c];
            }
        }
        let full = Weight::from_f32(vocab, cols, &w).for_matmul();
        let mut v = DraftVocab::from_head(&full, cut).unwrap();
        let want = |r: usize, extra: &[u32]| {
            let x = &hidden[r * cols..(r + 1) * cols];
            let dot = |id: u32| -> f32 { x.iter().zip(&w[id as usize * cols..]).map(|(a, b)| a * b).sum() };
            (0..cut as u32).chain(extra.iter().copied()).max_by(|&a, &b| dot(a).total_cmp(&dot(b))).unwrap()
        };
        let extras: [&[u32]; 3] = [&[450, 599], &[450], &[]];
        let picks = [(0, Some(extras[0])), (2, Some(extras[1])), (1, None), (0, Some(extras[2])), (0, None)];
        let mut out = vec![];
        v.argmax(vllm_rs_kernels::backend::default(), &hidden, &picks, false, &mut out);
        let out: Vec<u32> = out.iter().map(|p| p.0).collect();
        let whole: Vec<u32> = (0..vocab as u32).collect();
        let expected = [want(0, extras[0]), want(2, extras[1]), want(1, &whole[cut..]), want(0, extras[2]), 500];
        assert_eq!(out, expected, "None: the whole head");
        assert_eq!(out[0], 450, "500 scores more but was not noted");
        assert!((out[3] as usize) < cut);
        // With confidence: each pick's softmax probability over the ids it was chosen from.
        let mut with_p = vec![];
        v.argmax(vllm_rs_kernels::backend::default(), &hidden, &picks, true, &mut with_p);
        for (&(r, extra), &(id, p)) in picks.iter().zip(&with_p) {
            let x = &hidden[r * cols..(r + 1) * cols];
            let dot = |id: u32| -> f64 { x.iter().zip(&w[id as usize * cols..]).map(|(a, b)| (a * b) as f64).sum() };
            let ids: Vec<u32> = match extra {
                Some(e) => (0..cut as u32).chain(e.iter().copied()).collect(),
                None => whole.clone(),
            };
            let top = ids.iter().map(|&i| dot(i)).fold(f64::MIN, f64::max);
            let want = (dot(id) - top).exp() / ids.iter().map(|&i| (dot(i) - top).exp()).sum::<f64>();
            assert!((p as f64 - want).abs() < 1e-4 * want.max(1e-3), "row {r}: p {p}, want {want}");
        }
        assert_eq!(with_p.iter().map(|p| p.0).collect::<Vec<_>>(), out, "the same picks");
    }
}
