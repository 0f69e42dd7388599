//! Activations quantized to int16 (or, opt-in, int8) for dot products with quantized weights.
//!
//! Each block of 32 values gets its own scale (`x ≈ q · d`, `|q| ≤ 32767`), so the rounding error
//! is at most `max|x_block| / 65534` — about 1.5e-5 of the block's largest value, far below the
//! 8-bit activations llama.cpp uses (≈ 4e-3) and below bf16's own rounding. Integer dot products
//! over a block are exact, so only the per-block float epilogue has an order to fix.
//!
//! The int8 mode ([`ActBits::Int8`], `--activation-bits 8`) quantizes the same way with
//! `|q| ≤ 127`, as llama.cpp's `q8_0` activations (one scale per 32 values): the AVX-512 tier
//! then dots four values an instruction (`vpdpbusd`) instead of two. Every kernel takes either,
//! with the same reduction order.
//!
//! Alongside the values each row keeps what the dot kernels' epilogues read per weight group of
//! 32 or 16 elements: the scale (`d`, `d16`) and the scaled sum `d · Σq` (`dsum32`, `dsum16`).

use crate::pool::Rows;

/// Values per activation block.
pub const QA_BLOCK: usize = 32;

/// How many bits quantized activations keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActBits {
    /// `|q| ≤ 32767`: the default, whose greedy output stays with float32's.
    #[default]
    Int16,
    /// `|q| ≤ 127`: faster on AVX-512 VNNI, about as accurate as llama.cpp.
    Int8,
}

impl ActBits {
    /// The largest `|q|`.
    pub fn limit(self) -> f32 {
        match self {
            ActBits::Int16 => 32767.0,
            ActBits::Int8 => 127.0,
        }
    }
}

static INT8: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets the process's activation bits for quantized weights (`--activation-bits`).
pub fn set_activation_bits(bits: ActBits) {
    INT8.store(bits == ActBits::Int8, std::sync::atomic::Ordering::Relaxed);
}

thread_local! {
    /// This thread's override of the process's bits ([`with_activation_bits`]).
    static SCOPED: std::cell::Cell<Option<ActBits>> = const { std::cell::Cell::new(None) };
}

/// The activation bits quantized matmuls called from this thread take: those of an enclosing
/// [`with_activation_bits`], else the process's ([`set_activation_bits`]).
pub fn activation_bits() -> ActBits {
    SCOPED.get().unwrap_or(if INT8.load(std::sync::atomic::Ordering::Relaxed) { ActBits::Int8 } else { ActBits::Int16 })
}

/// Runs `f` with this thread's quantized matmuls taking `bits` activations, whatever the
/// process's setting: a speculative drafter, whose proposals the target verifies, trades
/// accuracy for speed this way. The matmuls quantize on the calling thread, so the override
/// covers their pool jobs too. The previous setting comes back when `f` returns or unwinds.
pub fn with_activation_bits<R>(bits: ActBits, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<ActBits>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.set(self.0);
        }
    }
    let _restore = Restore(SCOPED.replace(Some(bits)));
    f()
}

/// `m` rows of `k` activations, quantized.
#[derive(Default)]
pub struct QuantizedActs {
    pub m: usize,
    pub k: usize,
    pub bits: ActBits,
    pub q: Vec<i16>,
    /// One scale per 32-block: `m × k/32`.
    pub d: Vec<f32>,
    /// `Σ q` over each 16 values: `m × k/16` (for weight formats with offsets/minimums).
    pub sum16: Vec<i32>,
    /// `Σ q` over each 32 values: `m × k/32` (for weights stored with a bias).
    pub sum32: Vec<i32>,
    /// The 32-block scale repeated per 16 values: `m × k/16`.
    pub d16: Vec<f32>,
    /// `d · Σq` per 32 values (`m × k/32`) and per 16 values (`m × k/16`), in f32.
    pub dsum32: Vec<f32>,
    pub dsum16: Vec<f32>,
}

/// One row's view.
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub q: &'a [i16],
    pub d: &'a [f32],
    pub sum16: &'a [i32],
    pub sum32: &'a [i32],
    pub d16: &'a [f32],
    pub dsum32: &'a [f32],
    pub dsum16: &'a [f32],
}

impl ActRow<'_> {
    /// Scale of weight group `g` of `group` (16 or 32) elements.
    #[inline]
    pub fn group_scale(&self, group: usize) -> &[f32] {
        if group == 32 { self.d } else { self.d16 }
    }

    /// `d · Σq` of weight group `g`.
    #[inline]
    pub fn group_dsum(&self, group: usize) -> &[f32] {
        if group == 32 { self.dsum32 } else { self.dsum16 }
    }
}

impl QuantizedActs {
    /// Quantizes `x` (`m × k`, `k` a multiple of 32) into `self` with `bits`, reusing its
    /// buffers. Rounding is to nearest, ties to even, on every tier (so all tiers agree bit for
    /// bit).
    pub fn quantize_into(&mut self, tier: crate::isa::Tier, bits: ActBits, x: &[f32], m: usize, k: usize) {
        assert_eq!(k % QA_BLOCK, 0, "activation length {k} is not a multiple of {QA_BLOCK}");
        assert_eq!(x.len(), m * k);
        self.m = m;
        self.k = k;
        self.bits = bits;
        let limit = bits.limit();
        let blocks = k / QA_BLOCK;
        self.q.resize(m * k, 0);
        self.d.resize(m * blocks, 0.0);
        self.sum16.resize(2 * m * blocks, 0);
        self.d16.resize(2 * m * blocks, 0.0);
        self.dsum16.resize(2 * m * blocks, 0.0);
        self.dsum32.resize(m * blocks, 0.0);
        self.sum32.resize(m * blocks, 0);
        if k == 0 {
            return;
        }
        let simd = cfg!(target_arch = "x86_64") && matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512);
        let (q, d, sum16) =
            (Rows::new(&mut self.q, k), Rows::new(&mut self.d, blocks), Rows::new(&mut self.sum16, 2 * blocks));
        let derived = (
            Rows::new(&mut self.d16, 2 * blocks),
            Rows::new(&mut self.dsum16, 2 * blocks),
            Rows::new(&mut self.dsum32, blocks),
            Rows::new(&mut self.sum32, blocks),
        );
        // Rows are quantized independently: from 8 of them (and `PARALLEL_VALUES` at least)
        // split over the pool's threads.
        crate::pool::split(m, 8.max(crate::pool::min_rows(k)), &|r| {
            let x = &x[r.start * k..r.end * k];
            // SAFETY: `split`'s ranges are disjoint.
            let (q, d, sum16) = unsafe { (q.part(r.clone()), d.part(r.clone()), sum16.part(r.clone())) };
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: the tier guarantees AVX2; the parts hold these rows' blocks.
                unsafe { x86::quantize(x, limit, q, d, sum16) };
            }
            if !simd {
                quantize_scalar(x, limit, q, d, sum16);
            }
            // SAFETY: as above.
            unsafe {
                derive(
                    d,
                    sum16,
                    derived.0.part(r.clone()),
                    derived.1.part(r.clone()),
                    derived.2.part(r.clone()),
                    derived.3.part(r),
                )
            };
        });
    }

    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        Self::quantize_bits(ActBits::Int16, x, m, k)
    }

    pub fn quantize_bits(bits: ActBits, x: &[f32], m: usize, k: usize) -> Self {
        let mut a = QuantizedActs::default();
        a.quantize_into(crate::isa::tier(), bits, x, m, k);
        a
    }

    pub fn row(&self, i: usize) -> ActRow<'_> {
        let k = self.k;
        ActRow {
            q: &self.q[i * k..(i + 1) * k],
            d: &self.d[i * k / QA_BLOCK..(i + 1) * k / QA_BLOCK],
            sum16: &self.sum16[i * k / 16..(i + 1) * k / 16],
            sum32: &self.sum32[i * k / QA_BLOCK..(i + 1) * k / QA_BLOCK],
            d16: &self.d16[i * k / 16..(i + 1) * k / 16],
            dsum32: &self.dsum32[i * k / QA_BLOCK..(i + 1) * k / QA_BLOCK],
            dsum16: &self.dsum16[i * k / 16..(i + 1) * k / 16],
        }
    }

    /// The values the quantized row stands for (tests and error budgets).
    pub fn dequantize_row(&self, i: usize) -> Vec<f32> {
        let r = self.row(i);
        r.q.iter().enumerate().map(|(t, &q)| q as f32 * r.d[t / QA_BLOCK]).collect()
    }
}

/// Fills the per-group epilogue inputs from `d` and `sum16`.
fn derive(d: &[f32], sum16: &[i32], d16: &mut [f32], dsum16: &mut [f32], dsum32: &mut [f32], sum32: &mut [i32]) {
    for b in 0..d.len() {
        let (d, s0, s1) = (d[b], sum16[2 * b], sum16[2 * b + 1]);
        d16[2 * b] = d;
        d16[2 * b + 1] = d;
        dsum16[2 * b] = d * s0 as f32;
        dsum16[2 * b + 1] = d * s1 as f32;
        dsum32[b] = d * (s0 + s1) as f32;
        sum32[b] = s0 + s1;
    }
}

fn quantize_scalar(x: &[f32], limit: f32, q: &mut [i16], d: &mut [f32], sum16: &mut [i32]) {
    for (b, xb) in x.chunks_exact(QA_BLOCK).enumerate() {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let (db, id) = if amax > 0.0 { (amax / limit, limit / amax) } else { (0.0, 0.0) };
        d[b] = db;
        let qb = &mut q[b * QA_BLOCK..(b + 1) * QA_BLOCK];
        for (q, v) in qb.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even().clamp(-limit, limit) as i16;
        }
        sum16[2 * b] = qb[..16].iter().map(|&v| v as i32).sum();
        sum16[2 * b + 1] = qb[16..].iter().map(|&v| v as i32).sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::QA_BLOCK;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize(x: &[f32], limit: f32, q: &mut [i16], d: &mut [f32], sum16: &mut [i32]) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        for (b, xb) in x.chunks_exact(QA_BLOCK).enumerate() {
            // SAFETY: xb has 32 values; q/d/sum16 were sized for every block.
            unsafe {
                let p = xb.as_ptr();
                let v = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ];
                let mut m = _mm256_and_ps(v[0], abs_mask);
                for vi in &v[1..] {
                    m = _mm256_max_ps(m, _mm256_and_ps(*vi, abs_mask));
                }
                let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
                let (db, id) = if amax > 0.0 { (amax / limit, limit / amax) } else { (0.0, 0.0) };
                *d.get_unchecked_mut(b) = db;
                let idv = _mm256_set1_ps(id);
                // cvtps rounds to nearest-even (default MXCSR), as round_ties_even does. |v·id|
                // ≤ limit but for the rounding of v·id itself: clamped to it, as the scalar code.
                let (lo, hi) = (_mm256_set1_ps(-limit), _mm256_set1_ps(limit));
                let clamp = |v: __m256| _mm256_min_ps(_mm256_max_ps(v, lo), hi);
                let i: [__m256i; 4] = [0, 1, 2, 3].map(|t| _mm256_cvtps_epi32(clamp(_mm256_mul_ps(v[t], idv))));
                let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(i[0], i[1]));
                let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(i[2], i[3]));
                let out = q.as_mut_ptr().add(b * QA_BLOCK);
                _mm256_storeu_si256(out as *mut __m256i, lo);
                _mm256_storeu_si256(out.add(16) as *mut __m256i, hi);
                let ones = _mm256_set1_epi16(1);
                for (h, half) in [lo, hi].into_iter().enumerate() {
                    let s = _mm256_madd_epi16(half, ones);
                    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
                    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
                    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2));
                    *sum16.get_unchecked_mut(2 * b + h) = _mm_cvtsi128_si32(s1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    #[test]
    fn scoped_bits_apply_to_this_thread_and_come_back() {
        let process = activation_bits();
        let other = if process == ActBits::Int8 { ActBits::Int16 } else { ActBits::Int8 };
        with_activation_bits(other, || {
            assert_eq!(activation_bits(), other);
            let elsewhere = std::thread::spawn(activation_bits).join().unwrap();
            assert_eq!(elsewhere, process, "another thread keeps the process's bits");
            with_activation_bits(process, || assert_eq!(activation_bits(), process));
            assert_eq!(activation_bits(), other, "an inner scope restores the outer one");
        });
        assert_eq!(activation_bits(), process);
        let unwound = std::panic::catch_unwind(|| with_activation_bits(other, || panic!("in scope")));
        assert!(unwound.is_err());
        assert_eq!(activation_bits(), process, "an unwinding scope restores the bits too");
    }

    #[test]
    fn simd_and_scalar_quantization_agree_exactly() {
        let mut x = rand_vec(8 * 96, 3);
        x[40] = 0.5 / 32767.0 * 3.0; // values landing on .5 steps exercise ties
        x[100..132].iter_mut().for_each(|v| *v = 0.0);
        let simd = QuantizedActs::quantize(&x, 8, 96);
        let mut scalar = QuantizedActs {
            m: 8,
            k: 96,
            q: vec![0; 8 * 96],
            d: vec![0.0; 8 * 3],
            sum16: vec![0; 8 * 6],
            ..Default::default()
        };
        quantize_scalar(&x, 32767.0, &mut scalar.q, &mut scalar.d, &mut scalar.sum16);
        assert_eq!(simd.q, scalar.q);
        assert_eq!(simd.d, scalar.d);
        assert_eq!(simd.sum16, scalar.sum16);
        // int8: values landing on .5 steps of 1/127 too.
        x[41] = 0.5 / 127.0 * 5.0;
        let simd = QuantizedActs::quantize_bits(ActBits::Int8, &x, 8, 96);
        quantize_scalar(&x, 127.0, &mut scalar.q, &mut scalar.d, &mut scalar.sum16);
        assert_eq!(simd.q, scalar.q);
        assert_eq!(simd.d, scalar.d);
        assert_eq!(simd.sum16, scalar.sum16);
        assert!(simd.q.iter().all(|q| q.abs() <= 127) && simd.q.iter().any(|q| q.abs() == 127));
    }

    /// Many rows are quantized in parts on the pool's threads: each row as it is alone.
    #[test]
    fn a_row_is_quantized_the_same_in_a_large_batch_as_alone() {
        let (m, k) = (37, 576);
        let x = rand_vec(m * k, 4);
        let all = QuantizedActs::quantize(&x, m, k);
        for i in 0..m {
            let one = QuantizedActs::quantize(&x[i * k..(i + 1) * k], 1, k);
            let (a, b) = (all.row(i), one.row(0));
            assert_eq!((a.q, a.d, a.sum16, a.sum32), (b.q, b.d, b.sum16, b.sum32), "row {i}");
            assert_eq!((a.d16, a.dsum16, a.dsum32), (b.d16, b.dsum16, b.dsum32), "row {i}");
        }
    }

    #[test]
    fn error_is_within_half_a_step_and_sums_are_exact() {
        let mut x = rand_vec(4 * 64, 9);
        x[5] = 40.0; // an outlier only affects its own block
        x[70..102].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        for bits in [ActBits::Int16, ActBits::Int8] {
            check_error(&x, bits);
        }
    }

    fn check_error(x: &[f32], bits: ActBits) {
        let a = QuantizedActs::quantize_bits(bits, x, 4, 64);
        for i in 0..4 {
            let y = a.dequantize_row(i);
            for t in 0..64 {
                let blk = &x[i * 64 + t / 32 * 32..i * 64 + t / 32 * 32 + 32];
                let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!((y[t] - x[i * 64 + t]).abs() <= amax / (2.0 * bits.limit()) * 1.0001 + 1e-12, "{bits:?}");
            }
            let r = a.row(i);
            for h in 0..4 {
                assert_eq!(r.sum16[h], r.q[h * 16..h * 16 + 16].iter().map(|&v| v as i32).sum::<i32>());
            }
        }
    }
}
