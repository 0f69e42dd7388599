//! Bidirectional attention for encoders (BERT, MPNet, ModernBERT): every position of a sequence
//! attends to every position of the same sequence (or, with a window, to those near it), over
//! contiguous q/k/v rows, with no KV cache.
//!
//! Each output row is computed on its own (its scores, softmax and weighted sum), so the split
//! of rows over threads and the other sequences of the batch never change its bits.

use crate::isa::Tier;
use crate::{ops, pool};

/// Shape of one encoder attention layer.
#[derive(Clone, Copy, Debug)]
pub struct EncoderAttentionParams {
    pub num_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q · k` (`1/sqrt(head_dim)`).
    pub scale: f32,
    /// Bidirectional sliding window: position `i` attends to the `j` with `|i - j| <= w`
    /// (ModernBERT's local layers, `w = local_attention / 2`); `None` attends to all.
    pub window: Option<usize>,
}

impl EncoderAttentionParams {
    /// The key positions query `i` of a sequence of `len` attends to.
    fn keys(&self, i: usize, len: usize) -> std::ops::Range<usize> {
        match self.window {
            Some(w) => i.saturating_sub(w)..(i + w + 1).min(len),
            None => 0..len,
        }
    }
}

/// An additive score bias that depends on the head and on `j - i` (MPNet's relative position
/// buckets): `values[h * (2 * span - 1) + (j - i + span - 1)]`, for `|j - i| < span`.
#[derive(Clone, Copy, Debug)]
pub struct RelativeBias<'a> {
    pub values: &'a [f32],
    pub span: usize,
}

impl RelativeBias<'_> {
    fn get(&self, head: usize, i: usize, j: usize) -> f32 {
        let width = 2 * self.span - 1;
        self.values[head * width + j + self.span - 1 - i]
    }
}

/// `out[t] = softmax(q[t] · K_s * scale + bias) V_s` per head, where `s` is the sequence of row
/// `t` (its keys within the window, if any). `q`, `k`, `v` and `out` are
/// `tokens × (num_heads · head_dim)`, sequences laid out one after another with lengths `seq_lens`.
pub fn encoder_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_lens: &[usize],
    p: &EncoderAttentionParams,
    bias: Option<RelativeBias>,
    out: &mut [f32],
) {
    encoder_attention_on(crate::isa::tier(), q, k, v, seq_lens, p, bias, out)
}

/// [`encoder_attention`] on a given tier (the softmax's); every tier gives the same bits.
#[allow(clippy::too_many_arguments)]
pub fn encoder_attention_on(
    tier: Tier,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_lens: &[usize],
    p: &EncoderAttentionParams,
    bias: Option<RelativeBias>,
    out: &mut [f32],
) {
    let width = p.num_heads * p.head_dim;
    let tokens: usize = seq_lens.iter().sum();
    assert!(q.len() == tokens * width && k.len() == q.len() && v.len() == q.len() && out.len() == q.len());
    let starts: Vec<usize> = seq_lens
        .iter()
        .scan(0, |acc, &l| {
            *acc += l;
            Some(*acc - l)
        })
        .collect();
    if let Some(b) = &bias {
        let longest = seq_lens.iter().copied().max().unwrap_or(0);
        assert!(longest <= b.span && b.values.len() == p.num_heads * (2 * b.span - 1), "bias too short");
    }
    pool::rows_mut(out, width, 4, |t0, rows| {
        let mut scores = Vec::new();
        for (r, o) in rows.chunks_exact_mut(width).enumerate() {
            let t = t0 + r;
            let s = starts.partition_point(|&st| st <= t) - 1;
            let (start, len) = (starts[s], seq_lens[s]);
            let i = t - start;
            let keys = p.keys(i, len);
            for h in 0..p.num_heads {
                let cols = h * p.head_dim..(h + 1) * p.head_dim;
                let qh = &q[t * width..][cols.clone()];
                scores.clear();
                scores.extend(keys.clone().map(|j| {
                    let b = bias.as_ref().map_or(0.0, |b| b.get(h, i, j));
                    dot(qh, &k[(start + j) * width..][cols.clone()]) * p.scale + b
                }));
                ops::softmax_on(tier, &mut scores);
                let oh = &mut o[cols.clone()];
                oh.fill(0.0);
                for (j, &w) in keys.clone().zip(&scores) {
                    let vj = &v[(start + j) * width..][cols.clone()];
                    oh.iter_mut().zip(vj).for_each(|(a, b)| *a += w * b);
                }
            }
        }
    });
}

/// `a · b` with eight partial sums (vectorizes; a fixed order for every caller).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    /// The textbook formula in f64, one sequence and head at a time; keys out of the window are
    /// masked (score -inf).
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        lens: &[usize],
        p: &EncoderAttentionParams,
        bias: Option<RelativeBias>,
    ) -> Vec<f32> {
        let (hd, width) = (p.head_dim, p.num_heads * p.head_dim);
        let mut out = vec![0f32; q.len()];
        let mut start = 0;
        for &len in lens {
            for h in 0..p.num_heads {
                for i in 0..len {
                    let row = |m: &[f32], t: usize| m[(start + t) * width + h * hd..][..hd].to_vec();
                    let qi = row(q, i);
                    let s: Vec<f64> = (0..len)
                        .map(|j| {
                            if p.window.is_some_and(|w| i.abs_diff(j) > w) {
                                return f64::NEG_INFINITY;
                            }
                            let d: f64 = qi.iter().zip(row(k, j)).map(|(a, b)| *a as f64 * b as f64).sum();
                            d * p.scale as f64 + bias.as_ref().map_or(0.0, |b| b.get(h, i, j) as f64)
                        })
                        .collect();
                    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..hd {
                        let acc: f64 = (0..len).map(|j| e[j] / z * row(v, j)[d] as f64).sum();
                        out[(start + i) * width + h * hd + d] = acc as f32;
                    }
                }
            }
            start += len;
        }
        out
    }

    #[test]
    fn matches_reference_on_every_tier_with_and_without_bias_and_window() {
        let lens = [5, 1, 17, 9];
        let n = lens.iter().sum::<usize>() * 60;
        let (q, k, v) = (rand_vec(n, 1), rand_vec(n, 2), rand_vec(n, 3));
        let span = 17;
        let values = rand_vec(3 * (2 * span - 1), 4);
        // Windows: only itself, narrower than most sequences, wider than all.
        for window in [None, Some(0), Some(3), Some(20)] {
            let p = EncoderAttentionParams { num_heads: 3, head_dim: 20, scale: 1.0 / 20f32.sqrt(), window };
            for bias in [None, Some(RelativeBias { values: &values, span })] {
                let want = reference(&q, &k, &v, &lens, &p, bias);
                let mut first: Option<Vec<f32>> = None;
                for tier in Tier::available() {
                    let mut out = vec![f32::NAN; n];
                    encoder_attention_on(tier, &q, &k, &v, &lens, &p, bias, &mut out);
                    let err = out.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                    assert!(err < 1e-5, "{tier:?} window {window:?}: max error {err}");
                    let first = first.get_or_insert_with(|| out.clone());
                    assert_eq!(&out, first, "{tier:?} window {window:?}: differs from the scalar tier");
                }
            }
        }
    }

    #[test]
    fn a_sequence_gives_the_same_bits_alone_and_in_a_batch() {
        let lens = [7, 30, 3];
        let width = 32;
        let n = 40 * width;
        let (q, k, v) = (rand_vec(n, 5), rand_vec(n, 6), rand_vec(n, 7));
        for window in [None, Some(4)] {
            let p = EncoderAttentionParams { num_heads: 2, head_dim: 16, scale: 0.25, window };
            let mut all = vec![0f32; n];
            encoder_attention(&q, &k, &v, &lens, &p, None, &mut all);
            let r = 7 * width..37 * width;
            let mut alone = vec![0f32; 30 * width];
            encoder_attention(&q[r.clone()], &k[r.clone()], &v[r.clone()], &[30], &p, None, &mut alone);
            assert_eq!(alone, all[r], "window {window:?}");
        }
    }
}
