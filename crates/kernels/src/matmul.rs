//! `out[m × n] = x[m × k] · Wᵀ` for a weight `W[n × k]` in any supported format.
//!
//! Batch invariance: every output element is reduced in one fixed order, whatever `m` is and
//! whichever thread computes it: one 8-lane accumulator over `k` in steps of 8 (lane `l` sums
//! elements `k ≡ l (mod 8)`), then a fixed horizontal sum, then the scalar tail. Tiles only
//! decide how many of these independent reductions run side by side.
//!
//! Work is split over weight rows (`n`); each task dequantizes its rows to f32 once and reuses
//! them for all `m` activation rows.

use crate::ggml::{self, GgmlType};
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
    pool::global().run(n_tasks, &|t| {
        let j0 = t * per;
        let j1 = (j0 + per).min(n);
        PANEL.with(|p| {
            let mut panel = p.borrow_mut();
            let need = (j1 - j0) * k;
            if panel.len() < need {
                panel.resize(need, 0.0);
            }
            let panel = &mut panel[..need];
            dequantize_rows(tier, w, j0, j1, panel);
            for i in 0..m {
                let xi = &x[i * k..(i + 1) * k];
                // SAFETY: this task alone writes columns j0..j1 of every output row.
                let orow = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(i * n + j0), j1 - j0) };
                dot_rows(tier, xi, panel, k, orow);
            }
        });
    });
}

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

/// `out[j] = dot(x, panel[j*k..(j+1)*k])` for every row of the panel.
fn dot_rows(tier: Tier, x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 | Tier::Avx512 => unsafe { x86::dot_rows(x, panel, k, out) },
        _ => scalar_dot_rows(x, panel, k, out),
    }
}

/// Scalar reduction with the same lane structure as the SIMD tiers (8 partial sums).
fn scalar_dot_rows(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        *o = scalar_dot(x, &panel[j * k..(j + 1) * k]);
    }
}

pub(crate) fn scalar_dot(x: &[f32], w: &[f32]) -> f32 {
    let k8 = x.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for (xc, wc) in x[..k8].chunks_exact(8).zip(w[..k8].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += xc[l] * wc[l];
        }
    }
    let mut s = hsum8(&acc);
    for i in k8..x.len() {
        s += x[i] * w[i];
    }
    s
}

/// Sum of 8 lanes in the association the SIMD tiers use.
#[inline]
pub(crate) fn hsum8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum as x86_hsum;

#[cfg(target_arch = "x86_64")]
mod x86 {
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

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
        let k8 = k / 8 * 8;
        let xp = x.as_ptr();
        let mut j = 0;
        // Four weight rows at a time: independent accumulators hide FMA latency.
        while j + 4 <= out.len() {
            let w0 = unsafe { panel.as_ptr().add(j * k) };
            let (w1, w2, w3) = unsafe { (w0.add(k), w0.add(2 * k), w0.add(3 * k)) };
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i < k8 {
                unsafe {
                    let xv = _mm256_loadu_ps(xp.add(i));
                    a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w0.add(i)), a0);
                    a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w1.add(i)), a1);
                    a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w2.add(i)), a2);
                    a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w3.add(i)), a3);
                }
                i += 8;
            }
            for (r, a) in [a0, a1, a2, a3].into_iter().enumerate() {
                let w = &panel[(j + r) * k..(j + r + 1) * k];
                out[j + r] = tail(hsum(a), x, w, k8);
            }
            j += 4;
        }
        while j < out.len() {
            let w = &panel[j * k..(j + 1) * k];
            let mut a = _mm256_setzero_ps();
            let mut i = 0;
            while i < k8 {
                unsafe { a = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(w.as_ptr().add(i)), a) };
                i += 8;
            }
            out[j] = tail(hsum(a), x, w, k8);
            j += 1;
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
    fn row_results_do_not_depend_on_batch_size() {
        for tier in Tier::available() {
            let w = quantize_random(GgmlType::Q4K, 70, 256, 3);
            let x = rand_vec(9 * 256, 5);
            let mut all = vec![0f32; 9 * 70];
            matmul_dense(tier, &x, 9, &w, &mut all);
            for i in 0..9 {
                let mut one = vec![0f32; 70];
                matmul_dense(tier, &x[i * 256..(i + 1) * 256], 1, &w, &mut one);
                assert_eq!(one, all[i * 70..(i + 1) * 70], "{tier:?} row {i}");
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
