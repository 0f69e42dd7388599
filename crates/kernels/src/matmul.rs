//! `out[m × n] = x[m × k] · Wᵀ` for a weight `W[n × k]` in any supported format.
//!
//! Batch invariance: every output element is reduced in one fixed order, whatever `m` is and
//! whichever thread computes it: one 8-lane accumulator over `k` in steps of 8 (lane `l` sums
//! elements `k ≡ l (mod 8)`), then a fixed horizontal sum, then the scalar tail. Tiles only
//! decide how many of these independent reductions run side by side.
//!
//! Work is split over weight rows (`n`); each task dequantizes its rows to f32 once and reuses
//! them for all `m` activation rows.

use crate::ggml;
#[cfg(target_arch = "x86_64")]
use crate::ggml::GgmlType;
use crate::isa::{self, Tier};
use crate::pool;
use crate::quant_act::QuantizedActs;
use crate::weight::Weight;
use std::cell::RefCell;

/// Pointer that may be shared across pool tasks writing disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(pub *mut f32);
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// Method access makes closures capture the whole wrapper (which is `Sync`), not the field.
    #[inline]
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

thread_local! {
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    static ACTS: RefCell<QuantizedActs> = RefCell::new(QuantizedActs::default());
}

/// `out[i*n + j] = Σ_k x[i*k + k'] · W[j, k']`. Quantized weights take int16 activations
/// ([`crate::qmatmul`]); dense weights (f32/f16/bf16) an f32 dot product.
pub fn matmul(x: &[f32], m: usize, w: &Weight, out: &mut [f32]) {
    let tier = isa::tier();
    if w.ty.is_quantized() {
        ACTS.with(|a| {
            let mut a = a.borrow_mut();
            a.quantize_into(x, m, w.cols);
            crate::qmatmul::qmatmul(tier, &a, w, out);
        });
    } else {
        matmul_dense(tier, x, m, w, out)
    }
}

/// f32 matmul for any weight format (quantized ones dequantized to f32 first).
pub fn matmul_dense(tier: Tier, x: &[f32], m: usize, w: &Weight, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), m * k, "matmul: x is not {m} x {k}");
    assert_eq!(out.len(), m * n, "matmul: out is not {m} x {n}");
    let threads = pool::global().n_threads();
    // Rows of W per task: a multiple of 4, small enough to give every thread several tasks.
    let per = (n.div_ceil(threads * 4)).next_multiple_of(4).clamp(4, 64);
    let n_tasks = n.div_ceil(per);
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let fused = m <= FUSED_MAX_M && matches!(tier, Tier::Avx2 | Tier::Avx512) && !w.ty.is_quantized();
    #[cfg(target_arch = "x86_64")]
    let rb = w.row_bytes();
    pool::global().run(n_tasks, &|t| {
        let j0 = t * per;
        let j1 = (j0 + per).min(n);
        if fused {
            #[cfg(target_arch = "x86_64")]
            for i in 0..m {
                let mut j = j0;
                while j < j1 {
                    let r = (j1 - j).min(4);
                    let rows = w.bytes()[j * rb..].as_ptr();
                    // Prefetch the task's next rows (on the first activation row; later ones find them cached).
                    let next = if i == 0 && j + r < j1 { rows.wrapping_add(r * rb) } else { std::ptr::null() };
                    // SAFETY: disjoint output columns per task; rows j..j+r exist; tier checked.
                    unsafe {
                        let o = std::slice::from_raw_parts_mut(out_ptr.get().add(i * n + j), r);
                        x86::dense_dot_rows(w.ty, &x[i * k..(i + 1) * k], rows, rb, o, next);
                    }
                    j += r;
                }
            }
            return;
        }
        PANEL.with(|p| {
            let mut panel = p.borrow_mut();
            let need = (j1 - j0) * k;
            if panel.len() < need {
                panel.resize(need, 0.0);
            }
            let panel = &mut panel[..need];
            dequantize_rows(tier, w, j0, j1, panel);
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(2);
                // SAFETY: this task alone writes columns j0..j1 of every output row.
                let orows: Vec<&mut [f32]> = (i..i + rows)
                    .map(|ii| unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(ii * n + j0), j1 - j0) })
                    .collect();
                dot_rows(tier, &x[i * k..(i + rows) * k], rows, panel, k, orows);
                i += rows;
            }
        });
    });
}

/// Up to this many activation rows, dense weights are converted in registers (decode); more
/// rows share a converted f32 panel (prefill). Both reduce in the same order.
const FUSED_MAX_M: usize = 4;

/// Dequantizes rows `j0..j1` of `w` into `panel` (row-major f32).
fn dequantize_rows(tier: Tier, w: &Weight, j0: usize, j1: usize, panel: &mut [f32]) {
    let rb = w.row_bytes();
    let src = &w.bytes()[j0 * rb..j1 * rb];
    match (tier, w.ty) {
        #[cfg(target_arch = "x86_64")]
        (Tier::Avx2 | Tier::Avx512, GgmlType::F16) => unsafe { x86::f16_to_f32(src, panel) },
        #[cfg(target_arch = "x86_64")]
        (Tier::Avx2 | Tier::Avx512, GgmlType::BF16) => unsafe { x86::bf16_to_f32(src, panel) },
        _ => ggml::dequantize(w.ty, src, panel),
    }
}

/// `outs[i][j] = dot(x row i, panel row j)` for `rows` (1 or 2) activation rows.
fn dot_rows(tier: Tier, x: &[f32], rows: usize, panel: &[f32], k: usize, mut outs: Vec<&mut [f32]>) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 | Tier::Avx512 => unsafe { x86::dot_rows(x, rows, panel, k, outs) },
        _ => {
            for (i, out) in outs.iter_mut().enumerate() {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = scalar_dot(&x[i * k..(i + 1) * k], &panel[j * k..(j + 1) * k]);
                }
            }
            let _ = rows;
        }
    }
}

pub(crate) fn scalar_dot(x: &[f32], w: &[f32]) -> f32 {
    assert!(w.len() >= x.len());
    scalar_dot_of::<0>(x, w.as_ptr() as *const u8)
}

/// `x · w` for a row `w` of `x.len()` f32/f16/bf16 values (`T` as in [`load1`]), in the reduction
/// order of the SIMD tiers: eight lanes over `k` in steps of 8, [`hsum8`], then the tail.
pub(crate) fn scalar_dot_of<const T: u8>(x: &[f32], w: *const u8) -> f32 {
    let k8 = x.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for i in (0..k8).step_by(8) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a = x[i + l].mul_add(load1::<T>(w, i + l), *a);
        }
    }
    let mut s = hsum8(&acc);
    for (i, xi) in x.iter().enumerate().skip(k8) {
        s += xi * load1::<T>(w, i);
    }
    s
}

/// Element `i` of a row of f32 (`T` = 0), f16 (1) or bf16 (2) values at `p`, as f32 (exact).
#[inline]
pub(crate) fn load1<const T: u8>(p: *const u8, i: usize) -> f32 {
    // SAFETY: the caller vouches that element i exists.
    unsafe {
        match T {
            0 => (p as *const f32).add(i).read_unaligned(),
            1 => half::f16::from_bits((p as *const u16).add(i).read_unaligned()).to_f32(),
            _ => f32::from_bits(((p as *const u16).add(i).read_unaligned() as u32) << 16),
        }
    }
}

/// Sum of 8 lanes in the association the SIMD tiers use.
#[inline]
pub(crate) fn hsum8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum as x86_hsum;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::GgmlType;
    use std::arch::x86_64::*;

    /// Horizontal sum in the same association as `scalar_dot`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)); // l0+l4 ..
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4)); // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }

    const fn size_of_elem<const T: u8>() -> usize {
        if T == 0 { 4 } else { 2 }
    }

    #[inline]
    pub(crate) fn prefetch_lines(p: *const u8, len: usize) {
        let mut off = 0;
        while off < len {
            // SAFETY: a prefetch is only a hint and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
            off += 64;
        }
    }

    /// Panel rows against one or two activation rows: a 2×4 tile of 8-lane accumulators,
    /// each (row, column) reduced exactly as in the 1×1 case.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(x: &[f32], rows: usize, panel: &[f32], k: usize, mut outs: Vec<&mut [f32]>) {
        let k8 = k / 8 * 8;
        let n = outs[0].len();
        assert!(panel.len() >= n * k && x.len() >= rows * k && outs.len() == rows);
        let x0 = x.as_ptr();
        let x1 = if rows == 2 { unsafe { x0.add(k) } } else { x0 };
        let mut j = 0;
        while j < n {
            let r = (n - j).min(4);
            let w0 = unsafe { panel.as_ptr().add(j * k) };
            let mut a = [[_mm256_setzero_ps(); 4]; 2];
            let mut i = 0;
            while i < k8 {
                // SAFETY: i + 8 ≤ k8 ≤ k; rows j..j+r of the panel exist.
                unsafe {
                    let xv0 = _mm256_loadu_ps(x0.add(i));
                    let xv1 = _mm256_loadu_ps(x1.add(i));
                    let [a0, a1] = &mut a;
                    for (rr, (c0, c1)) in a0.iter_mut().zip(a1.iter_mut()).enumerate().take(r) {
                        let wv = _mm256_loadu_ps(w0.add(rr * k + i));
                        *c0 = _mm256_fmadd_ps(xv0, wv, *c0);
                        *c1 = _mm256_fmadd_ps(xv1, wv, *c1);
                    }
                }
                i += 8;
            }
            for (ii, out) in outs.iter_mut().enumerate() {
                for rr in 0..r {
                    let w = &panel[(j + rr) * k..(j + rr + 1) * k];
                    out[j + rr] = tail(hsum(a[ii][rr]), &x[ii * k..(ii + 1) * k], w, k8);
                }
            }
            j += r;
        }
    }

    /// One activation row against up to four weight rows stored as f32/f16/bf16, converted in
    /// registers; the same reduction as the panel path.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dense_dot_rows(
        ty: GgmlType,
        x: &[f32],
        w: *const u8,
        rb: usize,
        out: &mut [f32],
        next: *const u8,
    ) {
        match ty {
            GgmlType::F32 => unsafe { dense::<0>(x, w, rb, out, next) },
            GgmlType::F16 => unsafe { dense::<1>(x, w, rb, out, next) },
            GgmlType::BF16 => unsafe { dense::<2>(x, w, rb, out, next) },
            _ => unreachable!("quantized weights take the int16 path"),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn load8<const T: u8>(p: *const u8, i: usize) -> __m256 {
        unsafe {
            match T {
                0 => _mm256_loadu_ps((p as *const f32).add(i)),
                1 => _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i)),
                _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                    p.add(2 * i) as *const __m128i
                )))),
            }
        }
    }

    /// `out[r] = x · row r` for `out.len() ≤ 4` rows of `x.len()` elements of type `T`, `rb`
    /// bytes apart from `w`, in the reduction order of [`super::scalar_dot_of`]. Unless null,
    /// `next` is where the caller's next `out.len()` contiguous rows start: they are prefetched
    /// meanwhile (the hardware prefetcher alone left batch-1 bf16 decode at half of DRAM speed).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn dense<const T: u8>(x: &[f32], w: *const u8, rb: usize, out: &mut [f32], next: *const u8) {
        let k = x.len();
        let k8 = k / 8 * 8;
        let r = out.len();
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < k8 {
            // SAFETY: the caller vouched for r rows of k elements.
            unsafe {
                if !next.is_null() {
                    // The next rows stream in at the rate these are consumed: 8·r elements a step.
                    prefetch_lines(next.wrapping_add(i * r * size_of_elem::<T>()), 8 * r * size_of_elem::<T>());
                }
                let xv = _mm256_loadu_ps(x.as_ptr().add(i));
                for (rr, acc) in a.iter_mut().enumerate().take(r) {
                    *acc = _mm256_fmadd_ps(xv, load8::<T>(w.add(rr * rb), i), *acc);
                }
            }
            i += 8;
        }
        for (rr, o) in out.iter_mut().enumerate() {
            let mut s = hsum(a[rr]);
            for (t, &xt) in x.iter().enumerate().skip(k8) {
                s += xt * super::load1::<T>(unsafe { w.add(rr * rb) }, t);
            }
            *o = s;
        }
    }

    #[inline]
    fn tail(mut s: f32, x: &[f32], w: &[f32], k8: usize) -> f32 {
        for i in k8..x.len() {
            s += x[i] * w[i];
        }
        s
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[u8], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(2 * i) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for j in i..n {
            out[j] = half::f16::from_bits(u16::from_le_bytes([src[2 * j], src[2 * j + 1]])).to_f32();
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn bf16_to_f32(src: &[u8], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(2 * i) as *const __m128i);
                let w = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_castsi256_ps(w));
            }
            i += 8;
        }
        for j in i..n {
            out[j] = f32::from_bits((u16::from_le_bytes([src[2 * j], src[2 * j + 1]]) as u32) << 16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(not(target_arch = "x86_64"))]
    use crate::ggml::GgmlType;
    use crate::testing::{quantize_random, rand_vec};

    /// Reference: f64 accumulation of the scalar-dequantized weights.
    fn reference(x: &[f32], m: usize, w: &Weight) -> Vec<f64> {
        let wf = w.to_f32();
        let k = w.cols;
        let mut out = vec![0f64; m * w.rows];
        for i in 0..m {
            for j in 0..w.rows {
                out[i * w.rows + j] = (0..k).map(|t| x[i * k + t] as f64 * wf[j * k + t] as f64).sum::<f64>();
            }
        }
        out
    }

    #[test]
    fn matches_reference_for_every_format() {
        for tier in Tier::available() {
            for ty in GgmlType::ALL {
                let (n, k, m) = (37, if ty.block_size() == 256 { 512 } else { 96 }, 5);
                let w = quantize_random(ty, n, k, 7);
                let x = rand_vec(m * k, 11);
                let mut out = vec![0f32; m * n];
                matmul_dense(tier, &x, m, &w, &mut out);
                let want = reference(&x, m, &w);
                for (o, r) in out.iter().zip(&want) {
                    let tol = 1e-4 * (1.0 + r.abs());
                    assert!((*o as f64 - r).abs() <= tol, "{tier:?} {}: {o} vs {r}", ty.name());
                }
            }
        }
    }

    #[test]
    fn row_results_do_not_depend_on_batch_size_and_tiers_agree() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4K] {
            // k = 260 has a tail after the last full 8-lane step.
            let k = if ty.is_quantized() { 256 } else { 260 };
            let w = quantize_random(ty, 70, k, 3);
            let x = rand_vec(9 * k, 5);
            let mut reference_out = vec![0f32; 9 * 70];
            matmul_dense(Tier::Scalar, &x, 9, &w, &mut reference_out);
            for tier in Tier::available() {
                let mut all = vec![0f32; 9 * 70];
                matmul_dense(tier, &x, 9, &w, &mut all);
                assert_eq!(all, reference_out, "{tier:?} {} differs from scalar", ty.name());
                for i in 0..9 {
                    let mut one = vec![0f32; 70];
                    matmul_dense(tier, &x[i * k..(i + 1) * k], 1, &w, &mut one);
                    assert_eq!(one, all[i * 70..(i + 1) * 70], "{tier:?} {} row {i}", ty.name());
                }
            }
        }
    }

    #[test]
    fn k_tail_is_handled() {
        let w = quantize_random(GgmlType::F32, 9, 13, 1);
        let x = rand_vec(2 * 13, 2);
        let mut out = vec![0f32; 18];
        matmul(&x, 2, &w, &mut out);
        for (o, r) in out.iter().zip(reference(&x, 2, &w)) {
            assert!((*o as f64 - r).abs() < 1e-5);
        }
    }
}
