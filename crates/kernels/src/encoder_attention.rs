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
    let rows = Rows { q, k, v, seq_lens, starts: &starts, p, bias, tier };
    pool::rows_mut(out, width, 4, |t0, out| {
        #[cfg(target_arch = "x86_64")]
        if matches!(tier, Tier::Avx2 | Tier::Avx512) {
            // SAFETY: the tier says the CPU has AVX2 and FMA.
            return unsafe { rows_avx2(&rows, t0, out) };
        }
        rows.run(t0, out)
    });
}

/// What every output row needs: the inputs, where each sequence starts, the shape.
struct Rows<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    seq_lens: &'a [usize],
    starts: &'a [usize],
    p: &'a EncoderAttentionParams,
    bias: Option<RelativeBias<'a>>,
    tier: Tier,
}

/// [`Rows::run`] compiled for AVX2: the same operations (Rust never fuses a multiply and an
/// add by itself), so the same bits, eight lanes at a time rather than SSE's four.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_avx2(rows: &Rows, t0: usize, out: &mut [f32]) {
    rows.run(t0, out)
}

impl Rows<'_> {
    /// Output rows `t0..` into `out`.
    #[inline(always)]
    fn run(&self, t0: usize, out: &mut [f32]) {
        let (p, width) = (self.p, self.p.num_heads * self.p.head_dim);
        let mut scores = Vec::new();
        for (r, o) in out.chunks_exact_mut(width).enumerate() {
            let t = t0 + r;
            let s = self.starts.partition_point(|&st| st <= t) - 1;
            let (start, len) = (self.starts[s], self.seq_lens[s]);
            let i = t - start;
            let keys = p.keys(i, len);
            for h in 0..p.num_heads {
                let cols = h * p.head_dim..(h + 1) * p.head_dim;
                let qh = &self.q[t * width..][cols.clone()];
                // Plain loops, not iterator adapters: an adapter's `fold` may stay out of line,
                // compiled without this function's AVX2.
                scores.clear();
                let mut j = keys.start;
                #[cfg(target_arch = "x86_64")]
                if matches!(self.tier, Tier::Avx2 | Tier::Avx512) && p.head_dim.is_multiple_of(8) {
                    while j + 8 <= keys.end {
                        let ks = &self.k[(start + j) * width + h * p.head_dim..][..7 * width + p.head_dim];
                        // SAFETY: the tier says the CPU has AVX2.
                        scores.extend_from_slice(&unsafe { x86::dots8(qh, ks, width) });
                        j += 8;
                    }
                }
                for j in j..keys.end {
                    scores.push(dot(qh, &self.k[(start + j) * width..][cols.clone()]));
                }
                for (j, s) in keys.clone().zip(scores.iter_mut()) {
                    *s = *s * p.scale + self.bias.as_ref().map_or(0.0, |b| b.get(h, i, j));
                }
                ops::softmax_on(self.tier, &mut scores);
                let vs = &self.v[start * width + h * p.head_dim..];
                weighted_sum(&scores, vs, keys.start, width, &mut o[cols.clone()]);
            }
        }
    }
}

/// `out = Σ_j w[j] · v_j` with `v_j = v[(j0 + j) · stride..][..out.len()]`, each element summed
/// from 0 over `j` in order. Whole octets of `out` keep their sums in registers (eight lanes
/// each) rather than adding into memory once per `j`.
#[inline(always)]
fn weighted_sum(w: &[f32], v: &[f32], j0: usize, stride: usize, out: &mut [f32]) {
    match out.len() {
        32 => weighted_sum_n::<4>(w, v, j0, stride, out),
        64 => weighted_sum_n::<8>(w, v, j0, stride, out),
        128 => weighted_sum_n::<16>(w, v, j0, stride, out),
        _ => {
            out.fill(0.0);
            for (j, &wj) in w.iter().enumerate() {
                let vj = &v[(j0 + j) * stride..][..out.len()];
                for (a, b) in out.iter_mut().zip(vj) {
                    *a += wj * b;
                }
            }
        }
    }
}

/// [`weighted_sum`] for `out` of `8 · N` elements.
#[inline(always)]
fn weighted_sum_n<const N: usize>(w: &[f32], v: &[f32], j0: usize, stride: usize, out: &mut [f32]) {
    let mut acc = [[0f32; 8]; N];
    for (j, &wj) in w.iter().enumerate() {
        let vj: &[f32] = &v[(j0 + j) * stride..][..8 * N];
        for (c, a) in acc.iter_mut().enumerate() {
            for l in 0..8 {
                a[l] += wj * vj[8 * c + l];
            }
        }
    }
    for (o, a) in out.chunks_exact_mut(8).zip(acc) {
        o.copy_from_slice(&a);
    }
}

/// `a · b` with eight partial sums (vectorizes; a fixed order for every caller).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    // (-0.0 as `Iterator::sum` starts: the same bits as summing the iterators did.)
    let mut tail = -0.0f32;
    for (x, y) in ac.remainder().iter().zip(bc.remainder()) {
        tail += x * y;
    }
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = -0.0f32;
    for a in acc {
        s += a;
    }
    s + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::dot`] of `q` with eight keys at once (key `kk` at `ks[kk · stride..]`, `q.len()`
    /// a multiple of 8): eight lanes a key as there, then the lanes of each key added in the same
    /// order, after an 8 × 8 transpose, so that eight keys' sums are one vector add at a time.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dots8(q: &[f32], ks: &[f32], stride: usize) -> [f32; 8] {
        let d = q.len();
        assert!(d.is_multiple_of(8) && ks.len() >= 7 * stride + d);
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in (0..d).step_by(8) {
            // SAFETY: in bounds, as asserted.
            unsafe {
                let qv = _mm256_loadu_ps(q.as_ptr().add(c));
                for (kk, a) in acc.iter_mut().enumerate() {
                    // A multiply, then an add, as `dot` (Rust never fuses them).
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(qv, _mm256_loadu_ps(ks.as_ptr().add(kk * stride + c))));
                }
            }
        }
        let t = transpose8(acc);
        // -0.0 + t[0] is t[0]: `dot` starts its sum at -0.0.
        let mut s = t[0];
        for v in &t[1..] {
            s = _mm256_add_ps(s, *v);
        }
        let mut out = [0f32; 8];
        // SAFETY: eight floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
        out
    }

    /// `out[l]` lane `k` = `a[k]` lane `l`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn transpose8(a: [__m256; 8]) -> [__m256; 8] {
        let lo = |x, y| _mm256_unpacklo_ps(x, y);
        let hi = |x, y| _mm256_unpackhi_ps(x, y);
        // Pairs of rows interleaved: [a0l0 a1l0 a0l1 a1l1 | a0l4 a1l4 a0l5 a1l5], ...
        let (t0, t1, t2, t3) = (lo(a[0], a[1]), hi(a[0], a[1]), lo(a[2], a[3]), hi(a[2], a[3]));
        let (t4, t5, t6, t7) = (lo(a[4], a[5]), hi(a[4], a[5]), lo(a[6], a[7]), hi(a[6], a[7]));
        // Four rows' lane l in each 128-bit half: [a0..a3 at l0 | at l4], ...
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ]
    }
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
        let span = 17;
        let values = rand_vec(3 * (2 * span - 1), 4);
        // Head sizes: one the SIMD paths leave to the scalar loops, and ones they take (keys
        // eight at a time, sums in registers).
        // Windows: only itself, narrower than most sequences, wider than all.
        for (head_dim, window) in
            [20, 32, 64].into_iter().flat_map(|d| [None, Some(0), Some(3), Some(20)].map(|w| (d, w)))
        {
            let n = lens.iter().sum::<usize>() * 3 * head_dim;
            let (q, k, v) = (rand_vec(n, 1), rand_vec(n, 2), rand_vec(n, 3));
            let p = EncoderAttentionParams { num_heads: 3, head_dim, scale: 1.0 / (head_dim as f32).sqrt(), window };
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
