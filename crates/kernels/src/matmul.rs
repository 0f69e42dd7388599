//! `out[m × n] = x[m × k] · Wᵀ` for a weight `W[n × k]` in any supported format.
//!
//! Batch invariance: every output element is reduced in one fixed order, whatever `m` is and
//! whichever thread computes it: one 8-lane accumulator over `k` in steps of 8 (lane `l` sums
//! elements `k ≡ l (mod 8)`), then a fixed horizontal sum, then the scalar tail. Tiles only
//! decide how many of these independent reductions run side by side.
//!
//! Dense weights (f32/f16/bf16) are converted to f32 as they are read; work is split over weight
//! rows (`n`), and each task reads its rows from memory once for all `m` activation rows (on
//! AVX-512, [`crate::dense_zmm`]; thousands of rows go in chunks). Quantized weights take int16
//! activations ([`crate::qmatmul`]).

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

/// One pool task of a dense matmul: output columns `j0..j1` (weight rows) of all `m` rows of `x`.
#[derive(Clone, Copy)]
pub(crate) struct DenseTask<'a> {
    pub w: &'a Weight,
    pub x: &'a [f32],
    pub m: usize,
    pub j0: usize,
    pub j1: usize,
    pub out: SyncPtr,
}

impl DenseTask<'_> {
    pub(crate) fn x_row(&self, i: usize) -> &[f32] {
        &self.x[i * self.w.cols..(i + 1) * self.w.cols]
    }

    /// Columns `j..j + r` of output row `i`.
    ///
    /// # Safety
    /// Within the task's columns; no other view of these elements is alive.
    #[allow(clippy::mut_from_ref)] // disjoint elements of the shared output, as SyncPtr promises
    pub(crate) unsafe fn out_row(&self, i: usize, j: usize, r: usize) -> &mut [f32] {
        // SAFETY: as vouched by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.out.get().add(i * self.w.rows + j), r) }
    }

    /// The tiling: activation rows in chunks of 32 (they stay in L2) and, within a chunk, the
    /// task's weight rows four at a time (they stay in L1): `f(c0, c1, j, r, rows, next)` with
    /// `rows` the bytes of weight row `j` and `next` the following rows to prefetch on the first
    /// chunk (when the rows come from memory), else null.
    pub(crate) fn for_each_tile(&self, mut f: impl FnMut(usize, usize, usize, usize, *const u8, *const u8)) {
        const CHUNK: usize = 32;
        let rb = self.w.row_bytes();
        for c0 in (0..self.m).step_by(CHUNK) {
            let c1 = (c0 + CHUNK).min(self.m);
            let mut j = self.j0;
            while j < self.j1 {
                let r = (self.j1 - j).min(4);
                let rows = self.w.bytes()[j * rb..].as_ptr();
                let next = if c0 == 0 && j + r < self.j1 { rows.wrapping_add(r * rb) } else { std::ptr::null() };
                f(c0, c1, j, r, rows, next);
                j += r;
            }
        }
    }
}

thread_local! {
    static ACTS: RefCell<QuantizedActs> = RefCell::new(QuantizedActs::default());
    /// The activation sets of [`matmul_jobs_on`].
    static JOB_ACTS: RefCell<Vec<QuantizedActs>> = const { RefCell::new(Vec::new()) };
    /// Activation rows interleaved in pairs for the AVX-512 dense kernel.
    static PAIRS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[i*n + j] = Σ_k x[i*k + k'] · W[j, k']`. Quantized weights take int16 activations
/// ([`crate::qmatmul`]); dense weights (f32/f16/bf16) an f32 dot product, or in the bf16 mode
/// a bf16 one ([`crate::bf16_matmul`]).
pub fn matmul(x: &[f32], m: usize, w: &Weight, out: &mut [f32]) {
    matmul_many_on(isa::tier(), x, m, &[w], &mut [out])
}

/// [`matmul`] of the same `x` by several weights (q/k/v, gate/up): quantized weights share one
/// quantization of `x`, and packed weights one pool job.
pub fn matmul_many(x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]) {
    matmul_many_on(isa::tier(), x, m, ws, outs)
}

/// [`matmul_many`] on a given tier (the backends call this).
pub fn matmul_many_on(tier: Tier, x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), outs.len());
    let cols = ws[0].cols;
    if let Some(ps) = ws.iter().map(|w| w.bf16.as_deref().filter(|p| p.cols == cols)).collect::<Option<Vec<_>>>() {
        return crate::bf16_matmul::matmul_many_on(crate::bf16_matmul::Kernel::for_tier(tier), &ps, x, m, outs);
    }
    if !ws.iter().all(|w| w.ty.is_quantized() && w.cols == cols) {
        for (w, o) in ws.iter().zip(outs.iter_mut()) {
            if w.ty.is_quantized() || w.bf16.is_some() {
                matmul_many_on(tier, x, m, &[w], &mut [o]);
            } else {
                matmul_dense(tier, x, m, w, o);
            }
        }
        return;
    }
    assert_eq!(x.len(), m * cols, "matmul: x is not {m} x {cols}");
    ACTS.with(|a| {
        let mut a = a.borrow_mut();
        a.quantize_into(tier, crate::quant_act::activation_bits(), x, m, cols);
        #[cfg(target_arch = "x86_64")]
        if crate::packed::packs_for(tier)
            && let Some(ps) = ws.iter().map(|w| w.packed.as_deref()).collect::<Option<Vec<_>>>()
        {
            crate::packed::matmul_many(tier, &ps, &a, outs);
            return;
        }
        for (w, o) in ws.iter().zip(outs.iter_mut()) {
            #[cfg(target_arch = "x86_64")]
            if let (true, Some(p)) = (crate::packed::packs_for(tier), &w.packed) {
                crate::packed::matmul(tier, p, &a, o);
                continue;
            }
            crate::qmatmul::qmatmul(tier, &a, w, o);
        }
    });
}

/// One product of a batch with different activations ([`matmul_jobs_on`]): `out = x · wᵀ`, `x`
/// being `m × w.cols`.
pub struct MatmulJob<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub w: &'a Weight,
    pub out: &'a mut [f32],
}

/// Several matmuls, each with its own activations (a MoE layer's experts over their tokens);
/// each output is [`matmul_many_on`]'s. Packed weights (AVX2, AVX-512) go as one pool job for all of
/// them, with one quantization per distinct `x` (jobs that follow each other with the same `x`,
/// as an expert's gate and up, share it); anything else runs job by job.
pub fn matmul_jobs_on(tier: Tier, jobs: &mut [MatmulJob]) {
    #[cfg(target_arch = "x86_64")]
    if crate::packed::packs_for(tier) && jobs.iter().all(|j| j.w.packed.is_some() && j.w.bf16.is_none()) {
        return JOB_ACTS.with_borrow_mut(|acts| {
            let (mut n, mut prev) = (0, None);
            let mut ps = Vec::with_capacity(jobs.len());
            for j in jobs.iter_mut() {
                let w = j.w;
                assert_eq!(j.x.len(), j.m * w.cols, "matmul: x is not {} x {}", j.m, w.cols);
                let key = (j.x.as_ptr(), j.x.len(), j.m);
                if prev != Some(key) {
                    if acts.len() == n {
                        acts.push(QuantizedActs::default());
                    }
                    acts[n].quantize_into(tier, crate::quant_act::activation_bits(), j.x, j.m, w.cols);
                    (n, prev) = (n + 1, Some(key));
                }
                ps.push((w.packed.as_deref().expect("checked above"), n - 1, &mut *j.out));
            }
            crate::packed::matmul_jobs(tier, &acts[..n], &mut ps);
        });
    }
    for j in jobs {
        matmul_many_on(tier, j.x, j.m, &[j.w], &mut [&mut *j.out]);
    }
}

/// f32 matmul for dense weights (f32/f16/bf16), converted to f32 as they are read.
pub fn matmul_dense(tier: Tier, x: &[f32], m: usize, w: &Weight, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    assert!(!w.ty.is_quantized(), "matmul_dense: {} weights take the int16 path", w.ty.name());
    assert_eq!(x.len(), m * k, "matmul: x is not {m} x {k}");
    assert_eq!(out.len(), m * n, "matmul: out is not {m} x {n}");
    #[cfg(target_arch = "x86_64")]
    if tier == Tier::Avx512 && m >= 2 && k >= 8 {
        return PAIRS.with(|cell| {
            let mut pairs = cell.borrow_mut();
            let pairs = crate::dense_zmm::interleave_pairs(x, m, k, &mut pairs);
            // Thousands of rows (embeddings) go in chunks that stay in L2 while every task
            // meets them, rather than each task streaming all of them from L3.
            let (chunk, k8) = (crate::dense_zmm::rows_per_chunk(k), k / 8 * 8);
            for i0 in (0..m).step_by(chunk) {
                let rows = chunk.min(m - i0);
                let (xs, ps) = (&x[i0 * k..(i0 + rows) * k], &pairs[i0 * k8..][..rows / 2 * 2 * k8]);
                dense_tasks(tier, xs, rows, w, &mut out[i0 * n..(i0 + rows) * n], ps);
            }
        });
    }
    dense_tasks(tier, x, m, w, out, &[])
}

/// The pool job of [`matmul_dense`]; `pairs` is `x` interleaved for the AVX-512 kernel (or empty).
fn dense_tasks(tier: Tier, x: &[f32], m: usize, w: &Weight, out: &mut [f32], pairs: &[f32]) {
    let (n, k) = (w.rows, w.cols);
    let threads = pool::global().n_threads();
    // Rows of W per task: a multiple of 4, small enough to give every thread several tasks.
    let per = (n.div_ceil(threads * 4)).next_multiple_of(4).clamp(4, 64);
    let n_tasks = n.div_ceil(per);
    let out_ptr = SyncPtr(out.as_mut_ptr());
    pool::global().run(n_tasks, &|t| {
        let j0 = t * per;
        let j1 = (j0 + per).min(n);
        let task = DenseTask { w, x, m, j0, j1, out: out_ptr };
        match tier {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: this task alone writes columns j0..j1 of every output row; the tier is checked.
            Tier::Avx512 if !pairs.is_empty() => unsafe { crate::dense_zmm::dense_task_zmm(&task, pairs) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Tier::Avx2 | Tier::Avx512 => unsafe { x86::dense_task(&task) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: this task alone writes columns j0..j1 of every output row.
            Tier::Neon => unsafe { crate::neon::dense_task(&task) },
            _ => {
                let rb = w.row_bytes();
                for i in 0..m {
                    for j in j0..j1 {
                        let (xi, row) = (&x[i * k..(i + 1) * k], w.bytes()[j * rb..].as_ptr());
                        let v = match w.ty {
                            GgmlType::F32 => scalar_dot_of::<0>(xi, row),
                            GgmlType::F16 => scalar_dot_of::<1>(xi, row),
                            _ => scalar_dot_of::<2>(xi, row),
                        };
                        // SAFETY: as above.
                        unsafe { *out_ptr.get().add(i * n + j) = v };
                    }
                }
            }
        }
    });
    let _ = pairs;
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

/// Sum of 16 lanes as the quantized matmul's tiers add them: lane `l` and `l + 8` first, then
/// [`hsum8`].
#[inline]
pub(crate) fn hsum16(a: &[f32; 16]) -> f32 {
    hsum8(&std::array::from_fn(|l| a[l] + a[l + 8]))
}

/// Sum of 8 lanes in the association the SIMD tiers use (f32 here, f64 in LayerNorm's sums).
#[inline]
pub(crate) fn hsum8<T: Copy + std::ops::Add<Output = T>>(a: &[T; 8]) -> T {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum as x86_hsum;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::GgmlType;
    use std::arch::x86_64::*;

    /// Horizontal sum in the same association as [`super::hsum8`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)); // l0+l4 ..
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4)); // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }

    /// Bytes of an element of type `T` (as in [`super::load1`]).
    pub(crate) const fn size_of_elem<const T: u8>() -> usize {
        if T == 0 { 4 } else { 2 }
    }

    /// The lines of `len` bytes from `p` fetched into this core's L2. (Weights streamed from
    /// DRAM: into L1 (T0) each fetch holds one of the core's few L1 miss buffers until DRAM
    /// answers, and decode ran 10-15 % slower on Zen 4 than with T1; the kernels' loads then
    /// find the lines in L2. BENCHMARKS, 2026-12-07 late.)
    #[inline]
    pub(crate) fn prefetch_lines(p: *const u8, len: usize) {
        for off in (0..len).step_by(64) {
            // SAFETY: a prefetch is only a hint and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off) as *const i8) };
        }
    }

    /// Output columns `j0..j1` (weight rows) of all `m` activation rows. Activation rows go in
    /// chunks that stay in L2 and, within a chunk, in pairs against each group of four weight
    /// rows (which stays in L1): every weight is read from memory once, converted once per pair.
    ///
    /// # Safety
    /// No other thread writes columns `j0..j1` of `out`; the CPU has AVX2/FMA/F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dense_task(t: &super::DenseTask) {
        t.for_each_tile(|c0, c1, j, r, rows, mut next| {
            let mut i = c0;
            while i < c1 {
                // SAFETY: rows j..j + r exist; the tier was checked by the caller.
                i += unsafe { ymm_rows(t, i, c1, j, r, rows, next) };
                next = std::ptr::null();
            }
        });
    }

    /// Activation rows `i` and `i + 1` (or only `i`, the chunk's last) against weight rows
    /// `j..j + r` at `rows`; returns how many activation rows it did.
    ///
    /// # Safety
    /// Rows `j..j + r` exist; the CPU has AVX2/FMA/F16C; no other view of these outputs is alive.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn ymm_rows(
        t: &super::DenseTask,
        i: usize,
        c1: usize,
        j: usize,
        r: usize,
        rows: *const u8,
        next: *const u8,
    ) -> usize {
        let (xr, rb) = (|i| t.x_row(i), t.w.row_bytes());
        // SAFETY: as vouched by the caller; each output view is taken once.
        unsafe {
            let o = |i| t.out_row(i, j, r);
            if i + 2 <= c1 {
                dense_dot_rows(t.w.ty, [xr(i), xr(i + 1)], rows, rb, [o(i), o(i + 1)], next);
                2
            } else {
                dense_dot_rows(t.w.ty, [xr(i)], rows, rb, [o(i)], next);
                1
            }
        }
    }

    /// `N` activation rows against up to four weight rows stored as f32/f16/bf16, converted in
    /// registers; the same reduction as the panel path.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dense_dot_rows<const N: usize>(
        ty: GgmlType,
        x: [&[f32]; N],
        w: *const u8,
        rb: usize,
        out: [&mut [f32]; N],
        next: *const u8,
    ) {
        match ty {
            GgmlType::F32 => unsafe { dense::<0, N>(x, w, rb, out, next) },
            GgmlType::F16 => unsafe { dense::<1, N>(x, w, rb, out, next) },
            GgmlType::BF16 => unsafe { dense::<2, N>(x, w, rb, out, next) },
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

    /// `out[a][r] = x[a] · row r` for `N` (1 or 2) activation rows and up to four rows of
    /// `x[a].len()` elements of type `T`, `rb` bytes apart from `w`, in the reduction order of
    /// [`super::scalar_dot_of`]; each weight vector is converted once for all `N` rows. Unless
    /// null, `next` is where the caller's next four contiguous rows start: they are prefetched
    /// meanwhile (the hardware prefetcher alone left batch-1 bf16 decode at half of DRAM speed).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn dense<const T: u8, const N: usize>(
        x: [&[f32]; N],
        w: *const u8,
        rb: usize,
        out: [&mut [f32]; N],
        next: *const u8,
    ) {
        let r = out[0].len();
        assert!((0..N).all(|a| x[a].len() == x[0].len() && out[a].len() == r));
        // SAFETY: as vouched by the caller. A constant row count keeps the accumulators in registers.
        unsafe {
            match r {
                4 => dense_r::<T, N, 4>(x, w, rb, out, next),
                3 => dense_r::<T, N, 3>(x, w, rb, out, next),
                2 => dense_r::<T, N, 2>(x, w, rb, out, next),
                1 => dense_r::<T, N, 1>(x, w, rb, out, next),
                _ => panic!("dense: {r} rows (at most four)"),
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dense_r<const T: u8, const N: usize, const R: usize>(
        x: [&[f32]; N],
        w: *const u8,
        rb: usize,
        out: [&mut [f32]; N],
        next: *const u8,
    ) {
        let k = x[0].len();
        let k8 = k / 8 * 8;
        let esize = size_of_elem::<T>();
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        let mut i = 0;
        while i < k8 {
            // SAFETY: the caller vouched for R rows of k elements.
            unsafe {
                if !next.is_null() {
                    // The next rows stream in at the rate these are consumed: 8·R elements a step.
                    prefetch_lines(next.wrapping_add(i * R * esize), 8 * R * esize);
                }
                let xv: [__m256; N] = std::array::from_fn(|a| _mm256_loadu_ps(x[a].as_ptr().add(i)));
                for (rr, acc_r) in acc.iter_mut().enumerate() {
                    let wv = load8::<T>(w.add(rr * rb), i);
                    for (c, xa) in acc_r.iter_mut().zip(xv) {
                        *c = _mm256_fmadd_ps(xa, wv, *c);
                    }
                }
            }
            i += 8;
        }
        for (a, out) in out.into_iter().enumerate() {
            for (rr, o) in out.iter_mut().enumerate() {
                let mut s = hsum(acc[rr][a]);
                for (t, &xt) in x[a].iter().enumerate().skip(k8) {
                    s += xt * super::load1::<T>(unsafe { w.add(rr * rb) }, t);
                }
                *o = s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn matches_reference_for_every_dense_format() {
        for tier in Tier::available() {
            for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
                for (n, k, m) in [(37, 96, 5), (9, 300, 70)] {
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
    }

    #[test]
    fn row_results_do_not_depend_on_batch_size_and_tiers_agree() {
        // k = 260 and 1100 have a tail after the last full 8-lane step; 1100 also takes the
        // AVX-512 kernel's k-blocks, and 4100 its chunks of rows (62 at a time).
        let sizes = [260, 1100, 4100];
        for (ty, k) in [GgmlType::F32, GgmlType::F16, GgmlType::BF16].into_iter().flat_map(|t| sizes.map(|k| (t, k))) {
            let w = quantize_random(ty, 70, k, 3);
            // 70 activation rows: two full chunks of 32 and a part, an even and an odd count.
            let x = rand_vec(70 * k, 5);
            let mut reference_out = vec![0f32; 70 * 70];
            matmul_dense(Tier::Scalar, &x, 70, &w, &mut reference_out);
            for tier in Tier::available() {
                let mut all = vec![0f32; 70 * 70];
                matmul_dense(tier, &x, 70, &w, &mut all);
                assert_eq!(all, reference_out, "{tier:?} {} differs from scalar", ty.name());
                for i in 0..70 {
                    let mut one = vec![0f32; 70];
                    matmul_dense(tier, &x[i * k..(i + 1) * k], 1, &w, &mut one);
                    assert_eq!(one, all[i * 70..(i + 1) * 70], "{tier:?} {} row {i}", ty.name());
                }
                // Rows go in pairs (and a single last row), up to six pairs a block; f16/bf16
                // weights are converted from 24 rows on.
                for m in [2, 3, 4, 11, 13, 23, 24, 25, 37] {
                    let mut few = vec![0f32; m * 70];
                    matmul_dense(tier, &x[3 * k..(3 + m) * k], m, &w, &mut few);
                    assert_eq!(few, all[3 * 70..(3 + m) * 70], "{tier:?} {} {m} rows", ty.name());
                }
            }
        }
    }

    /// Several weights on one input (one quantization, one packed job where layouts agree) give
    /// each weight's scalar-reference bits, whatever runs of units the job's threads take: same
    /// layout (Q5_0 + Q8_0, as Qwen's q/k/v), different layouts (Q6_K's 16-element groups
    /// beside Q4_K), and dense weights among them.
    #[test]
    fn matmul_many_equals_each_weight_alone() {
        use crate::quant_act::QuantizedActs;
        let sets: [(&[GgmlType], usize); 3] = [
            (&[GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0], 896),
            (&[GgmlType::Q4K, GgmlType::Q6K], 512),
            (&[GgmlType::BF16, GgmlType::Q4_1], 96),
        ];
        for (types, k) in sets {
            let ws: Vec<Weight> = types
                .iter()
                .enumerate()
                .map(|(i, &t)| quantize_random(t, 9 + 61 * i, k, i as u64).for_matmul())
                .collect();
            // (Packed jobs cut the weights' units into runs of up to four at one chunk of
            // activation rows, of one from two chunks on.)
            for m in [1, 5, 20] {
                let x = rand_vec(m * k, 8);
                let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0; m * w.rows]).collect();
                let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                matmul_many(&x, m, &ws.iter().collect::<Vec<_>>(), &mut slices);
                let a = QuantizedActs::quantize(&x, m, k);
                for (w, got) in ws.iter().zip(&outs) {
                    let mut want = vec![0f32; m * w.rows];
                    if w.packed.is_some() {
                        crate::qmatmul::chained_reference(&a, w, &mut want);
                    } else if w.ty.is_quantized() {
                        crate::qmatmul::qmatmul(Tier::Scalar, &a, w, &mut want);
                    } else {
                        matmul_dense(Tier::Scalar, &x, m, w, &mut want);
                    }
                    assert_eq!(got, &want, "{} among {types:?}, m = {m}", w.ty.name());
                }
            }
        }
    }

    #[test]
    fn matmul_jobs_equal_each_job_alone() {
        // Experts over their own tokens: gate and up share each x; one set has 20 rows (several
        // chunks), one a dense weight among them (job by job).
        let k = 512;
        let xs = [rand_vec(k, 1), rand_vec(3 * k, 2), rand_vec(20 * k, 3)];
        let ms = [1, 3, 20];
        for types in [[GgmlType::Q4K, GgmlType::Q8_0, GgmlType::Q6K], [GgmlType::Q4K, GgmlType::F16, GgmlType::Q8_0]] {
            let ws: Vec<[Weight; 2]> = (0..3)
                .map(|e| [0, 1].map(|i| quantize_random(types[e], 40 + 8 * e, k, (2 * e + i) as u64).for_matmul()))
                .collect();
            let mut outs: Vec<Vec<f32>> = (0..6).map(|j| vec![f32::NAN; ms[j / 2] * ws[j / 2][j % 2].rows]).collect();
            let mut jobs: Vec<MatmulJob> = outs
                .iter_mut()
                .enumerate()
                .map(|(j, out)| MatmulJob { x: &xs[j / 2], m: ms[j / 2], w: &ws[j / 2][j % 2], out })
                .collect();
            matmul_jobs_on(isa::tier(), &mut jobs);
            for (j, got) in outs.iter().enumerate() {
                let mut want = vec![0f32; got.len()];
                matmul(&xs[j / 2], ms[j / 2], &ws[j / 2][j % 2], &mut want);
                assert_eq!(got, &want, "job {j} of {types:?}");
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
