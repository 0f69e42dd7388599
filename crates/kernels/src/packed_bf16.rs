//! Dense weights as bf16 for the bf16 compute mode ([`crate::bf16_matmul`]), *rows across
//! lanes*: sixteen rows make a block, and within a block 32-bit word `16p + r` holds pair `p`
//! (values `2p` in the low half, `2p + 1` in the high half) of row `r`. One activation pair,
//! broadcast, times such a vector by `vdpbf16ps` adds to sixteen rows' dot products at once, so
//! every output is one chain over its pairs in order, whatever the number of activation rows:
//! no horizontal sums, no tails (an odd last column is paired with a zero).
//!
//! The arithmetic is the instruction's ([`dp_lane`], Intel SDM `VDPBF16PS`): per lane, the odd
//! product is added first, then the even one, each by a fused multiply-add rounded to nearest
//! even, with denormal inputs read as zero (DAZ) and denormal results flushed to zero (FTZ).

use crate::aligned::Aligned;
use crate::weight::Weight;

/// Rows in a block: the 32-bit lanes of a 512-bit vector.
pub const LANES: usize = 16;

/// f32 → bf16 rounded to nearest even, as PyTorch rounds; NaN stays a (quiet) NaN, and a result
/// that is a bf16 denormal is flushed to a signed zero (`vdpbf16ps` reads it as zero anyway).
pub fn round_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if x.is_nan() {
        return ((u >> 16) | 0x40) as u16;
    }
    let r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) as u16;
    if r & 0x7F80 == 0 { r & 0x8000 } else { r }
}

/// A denormal f32 as the zero of its sign (DAZ on inputs, FTZ on results).
#[inline]
fn flush(x: f32) -> f32 {
    if x.to_bits() & 0x7F80_0000 == 0 { f32::from_bits(x.to_bits() & 0x8000_0000) } else { x }
}

/// One lane of `vdpbf16ps`: `acc` plus the products of the bf16 pairs `x` and `w` (low half =
/// even element, high half = odd), odd product first, each step fused and flushed.
#[inline]
pub fn dp_lane(acc: f32, x: u32, w: u32) -> f32 {
    let hi = |v: u32| flush(f32::from_bits(v & 0xFFFF_0000));
    let lo = |v: u32| flush(f32::from_bits(v << 16));
    let t = flush(hi(x).mul_add(hi(w), flush(acc)));
    flush(lo(x).mul_add(lo(w), t))
}

/// Rows of `x` (`m × k`) rounded to bf16 ([`round_bf16`]) as pairs: row `i`'s pair `p` is
/// `out[i · pairs + p]`, with `pairs = ⌈k / 2⌉` (an odd last column paired with zero). Rows are
/// split over the pool: for a prefill's hundreds of rows the rounding took a fifth of the matmul
/// on one thread.
pub fn round_rows(x: &[f32], m: usize, k: usize, out: &mut Vec<u32>) {
    assert_eq!(x.len(), m * k);
    let pairs = k.div_ceil(2);
    out.clear();
    out.resize(m * pairs, 0);
    crate::pool::rows_mut(out, pairs.max(1), crate::pool::min_rows(pairs), |i0, o| {
        for (row, o) in x[i0 * k..].chunks_exact(k.max(1)).zip(o.chunks_exact_mut(pairs.max(1))) {
            let done = round_row_simd(row, o);
            for (v, o) in row[2 * done..].chunks(2).zip(&mut o[done..]) {
                let odd = v.get(1).map_or(0, |&b| round_bf16(b));
                *o = round_bf16(v[0]) as u32 | (odd as u32) << 16;
            }
        }
    });
}

/// The leading pairs of `row` that the tier's vector rounding does; returns how many.
fn round_row_simd(row: &[f32], out: &mut [u32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::tier() == crate::isa::Tier::Avx512 {
        // SAFETY: the tier is AVX-512.
        return unsafe { x86::round_row(row, out) };
    }
    let _ = (row, out);
    0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::round_bf16`] sixteen values at a time, two to a word of `out`; returns the words
    /// written (the pairs of `row`'s whole sixteens).
    #[target_feature(enable = "avx512f")]
    pub(super) fn round_row(row: &[f32], out: &mut [u32]) -> usize {
        let n = row.len() / 16;
        assert!(out.len() >= 8 * n);
        let one = _mm512_set1_epi32(1);
        for i in 0..n {
            // SAFETY: sixteen values of `row` from `16i`.
            let v = unsafe { _mm512_loadu_si512(row.as_ptr().add(16 * i) as _) };
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(v), one);
            let r = _mm512_srli_epi32::<16>(_mm512_add_epi32(v, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))));
            let vf = _mm512_castsi512_ps(v);
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(vf, vf);
            let r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32::<16>(v), _mm512_set1_epi32(0x40));
            // A result that is a bf16 denormal (a denormal input) keeps its sign only.
            let tiny = _mm512_testn_epi32_mask(r, _mm512_set1_epi32(0x7F80));
            let r = _mm512_mask_and_epi32(r, tiny, r, _mm512_set1_epi32(0x8000));
            // SAFETY: eight words of `out` from `8i`.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(8 * i) as _, _mm512_cvtepi32_epi16(r)) };
        }
        8 * n
    }
}

static PACKED_BF16_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes of bf16-packed weights made so far in this process (for the load log).
pub fn packed_bf16_bytes() -> usize {
    PACKED_BF16_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// A dense weight rounded to bf16 in the rows-across-lanes layout.
pub struct PackedBf16 {
    pub rows: usize,
    pub cols: usize,
    /// Pairs per row: `⌈cols / 2⌉`.
    pub pairs: usize,
    /// `blocks()` blocks of `16 · pairs` words (rows past `rows` are zero), 64-byte aligned.
    data: Aligned,
}

impl PackedBf16 {
    pub fn blocks(&self) -> usize {
        self.rows.div_ceil(LANES)
    }

    /// Block `b`: word `16p + r` is pair `p` of its row `r`.
    pub fn block(&self, b: usize) -> &[u32] {
        let words = LANES * self.pairs;
        // SAFETY: the bytes are 64-byte aligned and hold `blocks()` blocks of `words` words.
        let all: &[u32] = unsafe {
            std::slice::from_raw_parts(self.data.bytes().as_ptr() as *const u32, self.data.bytes().len() / 4)
        };
        &all[b * words..(b + 1) * words]
    }

    /// Pair `p` of row `j`.
    pub fn pair(&self, j: usize, p: usize) -> u32 {
        self.block(j / LANES)[LANES * p + j % LANES]
    }

    /// Rounds the dense (f32/f16/bf16) weight `w` to bf16 ([`round_bf16`]: bf16 values stay as
    /// they are but for denormals, which the instruction reads as zero anyway) and repacks it,
    /// blocks in parallel on the global pool.
    pub fn pack(w: &Weight) -> PackedBf16 {
        assert!(!w.ty.is_quantized(), "PackedBf16: {} weights are quantized", w.ty.name());
        let (rows, cols, pairs) = (w.rows, w.cols, w.cols.div_ceil(2));
        let bb = 4 * LANES * pairs;
        let blocks = rows.div_ceil(LANES);
        let mut data = Aligned::zeroed(blocks * bb);
        crate::pool::rows_mut(data.bytes_mut(), bb, 1, |b0, bytes| {
            let mut row = vec![0f32; cols];
            let mut rounded = Vec::new();
            for (i, blk) in bytes.chunks_exact_mut(bb).enumerate() {
                let r0 = (b0 + i) * LANES;
                for r in 0..(rows - r0).min(LANES) {
                    w.dequantize_row(r0 + r, &mut row);
                    round_rows(&row, 1, cols, &mut rounded);
                    for (p, v) in rounded.iter().enumerate() {
                        let at = 4 * (LANES * p + r);
                        blk[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
        });
        PACKED_BF16_BYTES.fetch_add(data.bytes().len(), std::sync::atomic::Ordering::Relaxed);
        PackedBf16 { rows, cols, pairs, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::GgmlType;
    use crate::testing::quantize_random;
    use half::bf16;

    #[test]
    fn rounding_is_nearest_even_with_denormals_flushed() {
        for x in crate::testing::rand_vec(10_000, 3).into_iter().map(|v| v * 1e3) {
            assert_eq!(round_bf16(x), bf16::from_f32(x).to_bits(), "{x}");
        }
        // Ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), bf16::from_f32(1.0).to_bits());
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), bf16::from_f32(1.0 + 2f32.powi(-6)).to_bits());
        assert_eq!(round_bf16(-1e-39), 0x8000);
        assert_eq!(round_bf16(f32::MAX), 0x7F80, "rounds up to infinity");
        assert!(f32::from_bits((round_bf16(f32::NAN) as u32) << 16).is_nan());
    }

    /// The scalar lane follows the SDM's order and flushes (cases checked against `vdpbf16ps`
    /// on a Zen 5; the SIMD tiers are compared with it on random data in `bf16_matmul`).
    #[test]
    fn dp_lane_adds_the_odd_product_first_and_flushes_denormals() {
        let b = |x: f32| round_bf16(x) as u32;
        let pair = |even: f32, odd: f32| b(even) | b(odd) << 16;
        // 2^24 + (−2^24) + 1 is 1 with the odd product first; even first, 2^24 + 1 rounds to 2^24.
        let big = 2f32.powi(24);
        assert_eq!(dp_lane(big, pair(1.0, -big), pair(1.0, 1.0)), 1.0);
        // A denormal input reads as zero; a denormal result is flushed.
        let den = 0x0040u32;
        assert_eq!(dp_lane(1e-30, den, b(2.0)), 1e-30);
        assert_eq!(dp_lane(0.0, b(1e-20), b(1e-20)).to_bits(), 0);
        assert_eq!(dp_lane(0.0, b(-1e-20), b(1e-20)).to_bits(), 0x8000_0000);
        assert_eq!(dp_lane(1e-40, 0, 0), 0.0);
    }

    /// The rows' rounding (sixteen at a time on AVX-512, split over threads) gives
    /// [`round_bf16`]'s bits for every kind of value, odd widths included.
    #[test]
    fn rounded_rows_are_round_bf16_of_each_value() {
        let nans = [0x7F80_0001, 0xFFFF_FFFF, 0x7FFF_8000].map(f32::from_bits);
        let specials = [f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e-40, -1e-40, f32::MAX, -f32::MAX];
        let specials: Vec<f32> = nans.into_iter().chain(specials).collect();
        for (m, k) in [(3, 37), (40, 160), (1, 1), (2, 33)] {
            let mut x: Vec<f32> = crate::testing::rand_vec(m * k, 5).into_iter().map(|v| v * 1e3).collect();
            for (i, s) in specials.iter().enumerate() {
                let at = (3 + i * 7919) % x.len();
                x[at] = *s;
            }
            // Ties to even, both ways.
            x[0] = 1.0 + 2f32.powi(-8);
            if x.len() > 2 {
                x[2] = 1.0 + 3.0 * 2f32.powi(-8);
            }
            let mut got = Vec::new();
            round_rows(&x, m, k, &mut got);
            let pairs = k.div_ceil(2);
            for i in 0..m {
                for p in 0..pairs {
                    let even = round_bf16(x[i * k + 2 * p]) as u32;
                    let odd = if 2 * p + 1 < k { round_bf16(x[i * k + 2 * p + 1]) as u32 } else { 0 };
                    assert_eq!(got[i * pairs + p], even | odd << 16, "{m}x{k}: row {i} pair {p}");
                }
            }
        }
    }

    #[test]
    fn packed_pairs_read_back_as_the_rounded_rows() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for (rows, cols) in [(1, 1), (17, 33), (40, 64)] {
                let w = quantize_random(ty, rows, cols, 9);
                let p = PackedBf16::pack(&w);
                let mut want = Vec::new();
                round_rows(&w.to_f32(), rows, cols, &mut want);
                for j in 0..p.blocks() * LANES {
                    for q in 0..p.pairs {
                        let v = if j < rows { want[j * p.pairs + q] } else { 0 };
                        assert_eq!(p.pair(j, q), v, "{} {rows}x{cols} row {j} pair {q}", ty.name());
                    }
                }
            }
        }
    }
}
