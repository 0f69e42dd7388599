//! `out = x · Wᵀ` for quantized `W`, with int16 activations ([`QuantizedActs`]) and weights
//! unpacked into a [`Panel`] (or, for decode, expanded in registers by [`crate::qgemv`]).
//!
//! The reduction of one output is fixed, whatever `m`, the thread or the tier. For each weight
//! group `g` (16 or 32 elements) in order:
//!
//! - `isum_g = Σ q_w · q_x` over the group, in integers (exact, so its internal order is free);
//! - `acc[g mod 16] = fma(isum_g as f32, vscale_g · dx_g, acc[g mod 16])`;
//! - with minimums: `accm[g mod 16] = fma(mcoef_g, (dx·Σq_x)_g, accm[g mod 16])`;
//!
//! and the result is `hsum16(acc) + hsum16(accm)` with the fixed horizontal sum
//! ([`crate::matmul::hsum16`]). The AVX2 tier keeps two 8-lane accumulators and alternates
//! octets between them, NEON four 4-lane ones; the scalar tier computes exactly this, so these
//! tiers are bit-identical to it.
//!
//! The AVX2 and AVX-512 tiers' packed kernels ([`crate::packed`], for the formats it lays out)
//! put weight rows in lanes and keep their own order, [`chained_reference`]: one chain per output, `acc =
//! fma(isum_g, vscale_g · dx_g, acc)` over the groups in order (the minimums likewise), `acc +
//! accm`. With rows in lanes that chain costs nothing, where sixteen lane accumulators per row
//! had to live in memory (23 % slower at k = 576); with groups in lanes (this module's AVX2
//! kernels, NEON) it is a serial chain per output (17–42 % slower there). Either order is batch-invariant, and they
//! agree within the per-format error budget (tested).

use crate::isa::Tier;
use crate::matmul::{SyncPtr, hsum16};
use crate::pool;
use crate::qpanel::Panel;
use crate::quant_act::{ActRow, QuantizedActs};
use crate::weight::Weight;
use std::cell::RefCell;

thread_local! {
    static PANEL: RefCell<Panel> = RefCell::new(Panel::default());
}

/// Up to how many activation rows a format's fused kernels (weights expanded in registers, no
/// panel) beat the panel, which amortizes better over many rows (prefill, batched decode).
/// Results are identical either way. Measured with `examples/gemv` (1536 × 576, one thread): the
/// 32-element-block formats and Q4_K expand each block once for a pair of rows, which makes 4
/// rows cheaper fused for the 4- and 8-bit formats (Q4_1 263 → 206 µs, Q8_0 314 → 206 µs, Q4_K
/// 1536 × 768 363 → 280 µs) but not for Q5_0 (328 → 335 µs: its fifth bits make the expansion
/// dear). Other K-quants expand per row.
#[cfg(target_arch = "x86_64")]
fn fused_max_m(ty: crate::ggml::GgmlType) -> usize {
    use crate::ggml::GgmlType::*;
    match ty {
        Q4_0 | Q4_1 | Q8_0 | Q4K => 4,
        _ => 2,
    }
}

/// `out[i·n + j] = Σ_k x[i,k] · W[j,k]` with `x` already quantized.
pub fn qmatmul(tier: Tier, x: &QuantizedActs, w: &Weight, out: &mut [f32]) {
    let (n, k, m) = (w.rows, w.cols, x.m);
    assert_eq!(x.k, k, "qmatmul: activations have {} columns, weight has {k}", x.k);
    assert_eq!(out.len(), m * n);
    assert!(w.ty.is_quantized());
    let threads = pool::global().n_threads();
    let per = (n.div_ceil(threads * 4)).next_multiple_of(4).clamp(4, 64);
    let n_tasks = n.div_ceil(per);
    let rb = w.row_bytes();
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let fused = fused_available(tier, w.ty, m);
    pool::global().run(n_tasks, &|t| {
        let j0 = t * per;
        let j1 = (j0 + per).min(n);
        // SAFETY (all writes below): this task alone writes columns j0..j1 of every output row.
        let out_row = |i: usize| unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(i * n + j0), j1 - j0) };
        if fused {
            #[cfg(target_arch = "x86_64")]
            {
                let rows = w.bytes()[j0 * rb..].as_ptr();
                let mut i = 0;
                // SAFETY: rows j0..j1 exist; the tier supports the kernels.
                while i + 2 <= m && crate::qgemv::supported_pair(w.ty) {
                    let (x2, o2) = ([x.row(i), x.row(i + 1)], [out_row(i), out_row(i + 1)]);
                    unsafe { crate::qgemv::dot_rows_pair(w.ty, rows, rb, x2, o2) };
                    i += 2;
                }
                for i in i..m {
                    unsafe { crate::qgemv::dot_rows(w.ty, rows, rb, x.row(i), out_row(i)) };
                }
            }
            return;
        }
        PANEL.with(|cell| {
            let mut p = cell.borrow_mut();
            p.unpack(tier, w.ty, &w.bytes()[j0 * rb..j1 * rb], j1 - j0, k);
            // Activation rows two at a time share each panel load (same bits as one at a time).
            let mut i = 0;
            while i + 2 <= m {
                dot_rows_pair(tier, &p, [x.row(i), x.row(i + 1)], [out_row(i), out_row(i + 1)]);
                i += 2;
            }
            if i < m {
                dot_rows(tier, &p, x.row(i), out_row(i));
            }
        });
    });
}

fn fused_available(tier: Tier, ty: crate::ggml::GgmlType, m: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if matches!(tier, Tier::Avx2 | Tier::Avx512) {
        return m <= fused_max_m(ty) && crate::qgemv::supported(ty);
    }
    let _ = (tier, ty, m);
    false
}

/// `out[r] = dot(panel row r, x)` for the first `out.len()` panel rows.
fn dot_rows(tier: Tier, p: &Panel, x: ActRow, out: &mut [f32]) {
    assert!(out.len() <= p.rows);
    match tier {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier supports AVX2/FMA.
        Tier::Avx2 | Tier::Avx512 => unsafe { x86::dot_rows(p, x, out) },
        #[cfg(target_arch = "aarch64")]
        Tier::Neon => crate::neon::panel_dot_rows(p, [x], [out]),
        _ => out.iter_mut().enumerate().for_each(|(r, v)| *v = dot_scalar(p, r, x)),
    }
}

/// [`dot_rows`] for two activation rows at once.
fn dot_rows_pair(tier: Tier, p: &Panel, x: [ActRow; 2], out: [&mut [f32]; 2]) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier supports AVX2/FMA.
        Tier::Avx2 | Tier::Avx512 => unsafe { x86::dot_rows_pair(p, x, out) },
        #[cfg(target_arch = "aarch64")]
        Tier::Neon => crate::neon::panel_dot_rows(p, x, out),
        _ => {
            let [x0, x1] = x;
            let [o0, o1] = out;
            dot_rows(tier, p, x0, o0);
            dot_rows(tier, p, x1, o1);
        }
    }
}

/// The reference reduction for one panel row (see the module docs).
pub fn dot_scalar(p: &Panel, row: usize, x: ActRow) -> f32 {
    let (mut acc, mut accm) = ([0f32; 16], [0f32; 16]);
    for gi in 0..p.k / p.group {
        group_step(p, row, &x, gi, &mut acc, &mut accm);
    }
    hsum16(&acc) + hsum16(&accm)
}

/// Group `gi`'s step of the reference reduction of panel row `row` against `x`: its integer
/// sum into lane `gi mod 16` of `acc`, its minimum term into that of `accm`.
#[inline]
pub(crate) fn group_step(p: &Panel, row: usize, x: &ActRow, gi: usize, acc: &mut [f32; 16], accm: &mut [f32; 16]) {
    let (a, m) = (&mut acc[gi % 16], &mut accm[gi % 16]);
    group_terms(p, row, x, gi, |(isum, scale), mins| {
        *a = isum.mul_add(scale, *a);
        if let Some((mc, dsum)) = mins {
            *m = mc.mul_add(dsum, *m);
        }
    });
}

/// Group `gi`'s factors for panel row `row` against `x`: `(isum_g as f32, vscale_g · dx_g)` and,
/// with minimums, `(mcoef_g, dsum_g)`.
#[inline]
fn group_terms(p: &Panel, row: usize, x: &ActRow, gi: usize, f: impl FnOnce((f32, f32), Option<(f32, f32)>)) {
    let (g, k) = (p.group, p.k);
    let at = row * (k / g) + gi;
    let t = gi * g..(gi + 1) * g;
    let q = &p.q[row * k..(row + 1) * k];
    let isum: i32 = q[t.clone()].iter().zip(&x.q[t]).map(|(&a, &b)| a as i32 * b as i32).sum();
    let mins = p.mcoef.as_ref().map(|mc| (mc[at], x.group_dsum(g)[gi]));
    f((isum as f32, p.vscale[at] * x.group_scale(g)[gi]), mins);
}

/// The packed kernels' reference (module docs): `out[i·n + j]` with one FMA chain per output.
pub fn chained_reference(x: &QuantizedActs, w: &Weight, out: &mut [f32]) {
    let (n, m) = (w.rows, x.m);
    assert_eq!(out.len(), m * n);
    let mut p = Panel::default();
    p.unpack(Tier::Scalar, w.ty, w.bytes(), n, w.cols);
    for i in 0..m {
        let xr = x.row(i);
        for (j, o) in out[i * n..(i + 1) * n].iter_mut().enumerate() {
            let (mut acc, mut accm) = (0f32, 0f32);
            for gi in 0..p.k / p.group {
                group_terms(&p, j, &xr, gi, |(isum, scale), mins| {
                    acc = isum.mul_add(scale, acc);
                    if let Some((mc, dsum)) = mins {
                        accm = mc.mul_add(dsum, accm);
                    }
                });
            }
            *o = acc + accm;
        }
    }
}

/// Shared by the panel and fused x86 kernels: eight groups' integer lanes → one vector of their
/// eight sums, and the per-octet epilogue.
/// `$f::<$g…, N>($args)` with the runtime tail length `$n` (0..8) turned into the const `N`, so
/// each tail length gets straight-line code (a runtime-length tail cost as much as two full
/// octets).
#[macro_export]
#[doc(hidden)]
macro_rules! with_tail {
    ($n:expr, $f:ident, [$($g:expr),*], ($($a:expr),*)) => {
        match $n {
            0 => {}
            1 => $f::<$($g,)* 1>($($a),*),
            2 => $f::<$($g,)* 2>($($a),*),
            3 => $f::<$($g,)* 3>($($a),*),
            4 => $f::<$($g,)* 4>($($a),*),
            5 => $f::<$($g,)* 5>($($a),*),
            6 => $f::<$($g,)* 6>($($a),*),
            7 => $f::<$($g,)* 7>($($a),*),
            n => unreachable!("a tail of {n} groups"),
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod octet {
    use std::arch::x86_64::*;

    /// `[Σ l[0], …, Σ l[7]]` (each vector's 8 lanes summed; exact integer arithmetic).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn reduce8(l: &[__m256i; 8]) -> __m256i {
        let t0 = _mm256_hadd_epi32(l[0], l[1]);
        let t1 = _mm256_hadd_epi32(l[2], l[3]);
        let t2 = _mm256_hadd_epi32(l[4], l[5]);
        let t3 = _mm256_hadd_epi32(l[6], l[7]);
        let u0 = _mm256_hadd_epi32(t0, t1); // [g0 g1 g2 g3 | g0 g1 g2 g3] halves
        let u1 = _mm256_hadd_epi32(t2, t3); // [g4 g5 g6 g7 | g4 g5 g6 g7] halves
        combine_halves(u0, u1)
    }

    /// [`reduce8`] for two activation rows: `lanes(g)` gives group `g`'s integer lanes of each
    /// row, and they are reduced pairwise as they are made (the same `hadd` tree), so two rows'
    /// eight lanes never need to be live at once.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn reduce8_pair(lanes: impl Fn(usize) -> [__m256i; 2]) -> [__m256i; 2] {
        let hadd2 = |a: [__m256i; 2], b: [__m256i; 2]| [_mm256_hadd_epi32(a[0], b[0]), _mm256_hadd_epi32(a[1], b[1])];
        let u0 = {
            let t0 = hadd2(lanes(0), lanes(1));
            hadd2(t0, hadd2(lanes(2), lanes(3)))
        };
        let u1 = {
            let t2 = hadd2(lanes(4), lanes(5));
            hadd2(t2, hadd2(lanes(6), lanes(7)))
        };
        [combine_halves(u0[0], u1[0]), combine_halves(u0[1], u1[1])]
    }

    /// The last step of [`reduce8`]: the two 128-bit halves of groups 0..4 (`u0`) and 4..8 (`u1`)
    /// added into `[g0 … g7]`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn combine_halves(u0: __m256i, u1: __m256i) -> __m256i {
        let lo = _mm256_permute2x128_si256::<0x20>(u0, u1);
        let hi = _mm256_permute2x128_si256::<0x31>(u0, u1);
        _mm256_add_epi32(lo, hi)
    }

    /// `acc = fma(isums as f32, vs · dx, acc)` for eight groups.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn finish(acc: __m256, isums: __m256i, vs: __m256, dx: __m256) -> __m256 {
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(isums), _mm256_mul_ps(vs, dx), acc)
    }

    /// Accumulators of one output: `[octet parity][values, minimums]` (lanes `g mod 16`).
    pub type Acc = [[__m256; 2]; 2];

    pub const ZERO: Acc = unsafe { std::mem::transmute([0f32; 32]) };

    /// The result from the accumulators: `hsum16(values) + hsum16(minimums)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn total(a: &Acc) -> f32 {
        use crate::matmul::x86_hsum;
        x86_hsum(_mm256_add_ps(a[0][0], a[1][0])) + x86_hsum(_mm256_add_ps(a[0][1], a[1][1]))
    }

    /// Loads `n ≤ 8` floats into the low lanes, zeros above (zero lanes leave accumulators as
    /// they are: `fma(0, 0, a) = a`).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn load_partial(p: *const f32, n: usize) -> __m256 {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lane);
        // SAFETY: the caller guarantees n readable floats; masked-off lanes are not read.
        unsafe { _mm256_maskload_ps(p, mask) }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// The first `out.len()` panel rows against one activation row, eight groups at a time.
    /// (One call per row block, not per row: the checks and dispatch are paid once.)
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(p: &Panel, x: ActRow, out: &mut [f32]) {
        match (p.group, p.mcoef.is_some()) {
            (32, false) => unsafe { dot_rows_g::<32, false>(p, x, out) },
            (32, true) => unsafe { dot_rows_g::<32, true>(p, x, out) },
            (_, false) => unsafe { dot_rows_g::<16, false>(p, x, out) },
            (_, true) => unsafe { dot_rows_g::<16, true>(p, x, out) },
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_rows_g<const G: usize, const MINS: bool>(p: &Panel, x: ActRow, out: &mut [f32]) {
        let k = p.k;
        let groups = k / G;
        let rows = out.len();
        assert!(rows * k <= p.q.len() && rows * groups <= p.vscale.len() && x.q.len() == k);
        let (dx, dsum) = (x.group_scale(G), x.group_dsum(G));
        assert!(dx.len() == groups && dsum.len() == groups);
        let mc = match &p.mcoef {
            Some(m) if MINS => {
                assert!(rows * groups <= m.len());
                m.as_ptr()
            }
            _ => std::ptr::null(),
        };
        let (dx, dsum, xq) = (dx.as_ptr(), dsum.as_ptr(), x.q.as_ptr());
        for (row, o) in out.iter_mut().enumerate() {
            // SAFETY: rows and groups are within the panel and the activation row (asserts above).
            unsafe {
                let q = p.q.as_ptr().add(row * k);
                let vs = p.vscale.as_ptr().add(row * groups);
                let mc = if MINS { mc.add(row * groups) } else { mc };
                let mut acc = octet::ZERO;
                let mut g0 = 0;
                while g0 + 8 <= groups {
                    octet_g::<G, MINS, 8>(q, xq, vs, mc, dx, dsum, g0, &mut acc[g0 / 8 % 2]);
                    g0 += 8;
                }
                let a = &mut acc[g0 / 8 % 2];
                crate::with_tail!(groups - g0, octet_g, [G, MINS], (q, xq, vs, mc, dx, dsum, g0, a));
                *o = octet::total(&acc);
            }
        }
    }

    /// [`dot_rows`] for two activation rows: each panel vector is loaded once for both.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows_pair(p: &Panel, x: [ActRow; 2], out: [&mut [f32]; 2]) {
        match (p.group, p.mcoef.is_some()) {
            (32, false) => unsafe { pair_g::<32, false>(p, x, out) },
            (32, true) => unsafe { pair_g::<32, true>(p, x, out) },
            (_, false) => unsafe { pair_g::<16, false>(p, x, out) },
            (_, true) => unsafe { pair_g::<16, true>(p, x, out) },
        }
    }

    /// Pointers of one activation row for a group size: values, group scales, scaled sums.
    type RowPtrs = (*const i16, *const f32, *const f32);

    fn row_ptrs(x: &ActRow, g: usize, k: usize) -> RowPtrs {
        let (dx, dsum) = (x.group_scale(g), x.group_dsum(g));
        assert!(x.q.len() == k && dx.len() == k / g && dsum.len() == k / g);
        (x.q.as_ptr(), dx.as_ptr(), dsum.as_ptr())
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn pair_g<const G: usize, const MINS: bool>(p: &Panel, x: [ActRow; 2], out: [&mut [f32]; 2]) {
        let k = p.k;
        let groups = k / G;
        let rows = out[0].len();
        assert!(out[1].len() == rows && rows * k <= p.q.len() && rows * groups <= p.vscale.len());
        let xs = [row_ptrs(&x[0], G, k), row_ptrs(&x[1], G, k)];
        let mc = match &p.mcoef {
            Some(m) if MINS => {
                assert!(rows * groups <= m.len());
                m.as_ptr()
            }
            _ => std::ptr::null(),
        };
        let [o0, o1] = out;
        for (row, (a, b)) in o0.iter_mut().zip(o1.iter_mut()).enumerate() {
            // SAFETY: rows and groups are within the panel and the activation rows (asserts above).
            unsafe {
                let q = p.q.as_ptr().add(row * k);
                let vs = p.vscale.as_ptr().add(row * groups);
                let mc = if MINS { mc.add(row * groups) } else { mc };
                let mut acc = [octet::ZERO; 2];
                let mut g0 = 0;
                while g0 + 8 <= groups {
                    pair_octet::<G, MINS, 8>(q, vs, mc, &xs, g0, &mut acc);
                    g0 += 8;
                }
                crate::with_tail!(groups - g0, pair_octet, [G, MINS], (q, vs, mc, &xs, g0, &mut acc));
                *a = octet::total(&acc[0]);
                *b = octet::total(&acc[1]);
            }
        }
    }

    /// Groups `g0..g0+N` of one panel row against two activation rows ([`octet::reduce8_pair`]).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pair_octet<const G: usize, const MINS: bool, const N: usize>(
        q: *const i16,
        vs: *const f32,
        mc: *const f32,
        xs: &[RowPtrs; 2],
        g0: usize,
        acc: &mut [octet::Acc; 2],
    ) {
        // SAFETY (all loads): the caller guarantees groups g0..g0+N of the panel row and both rows.
        let lanes = |g: usize| -> [__m256i; 2] {
            if g >= N {
                return [_mm256_setzero_si256(); 2];
            }
            let base = (g0 + g) * G;
            unsafe {
                let w0 = _mm256_loadu_si256(q.add(base) as *const __m256i);
                let w1 = if G == 32 { _mm256_loadu_si256(q.add(base + 16) as *const __m256i) } else { w0 };
                xs.map(|(xq, _, _)| {
                    let a = _mm256_madd_epi16(w0, _mm256_loadu_si256(xq.add(base) as *const __m256i));
                    if G == 32 {
                        _mm256_add_epi32(
                            a,
                            _mm256_madd_epi16(w1, _mm256_loadu_si256(xq.add(base + 16) as *const __m256i)),
                        )
                    } else {
                        a
                    }
                })
            }
        };
        let isums = octet::reduce8_pair(lanes);
        let load = |p: *const f32| unsafe { if N == 8 { _mm256_loadu_ps(p) } else { octet::load_partial(p, N) } };
        let v = load(unsafe { vs.add(g0) });
        let m = if MINS { load(unsafe { mc.add(g0) }) } else { _mm256_setzero_ps() };
        for r in 0..2 {
            let (_, dx, dsum) = xs[r];
            let a = &mut acc[r][g0 / 8 % 2];
            a[0] = octet::finish(a[0], isums[r], v, load(unsafe { dx.add(g0) }));
            if MINS {
                a[1] = _mm256_fmadd_ps(m, load(unsafe { dsum.add(g0) }), a[1]);
            }
        }
    }

    /// Groups `g0..g0+N` (`N ≤ 8`) of one panel row into `acc` (values, minimums).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn octet_g<const G: usize, const MINS: bool, const N: usize>(
        q: *const i16,
        xq: *const i16,
        vs: *const f32,
        mc: *const f32,
        dx: *const f32,
        dsum: *const f32,
        g0: usize,
        acc: &mut [__m256; 2],
    ) {
        let mut lanes = [_mm256_setzero_si256(); 8];
        // SAFETY: the caller guarantees groups g0..g0+N.
        unsafe {
            for (gi, l) in lanes.iter_mut().enumerate().take(N) {
                let base = (g0 + gi) * G;
                let a = _mm256_madd_epi16(
                    _mm256_loadu_si256(q.add(base) as *const __m256i),
                    _mm256_loadu_si256(xq.add(base) as *const __m256i),
                );
                *l = if G == 32 {
                    let b = _mm256_madd_epi16(
                        _mm256_loadu_si256(q.add(base + 16) as *const __m256i),
                        _mm256_loadu_si256(xq.add(base + 16) as *const __m256i),
                    );
                    _mm256_add_epi32(a, b)
                } else {
                    a
                };
            }
            let load = |p: *const f32| if N == 8 { _mm256_loadu_ps(p) } else { octet::load_partial(p, N) };
            acc[0] = octet::finish(acc[0], octet::reduce8(&lanes), load(vs.add(g0)), load(dx.add(g0)));
            if MINS {
                acc[1] = _mm256_fmadd_ps(load(mc.add(g0)), load(dsum.add(g0)), acc[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::GgmlType;
    use crate::testing::{quantize_random, rand_vec};

    /// f64 reference on the dequantized weights and the *unquantized* activations.
    fn reference(x: &[f32], m: usize, w: &Weight) -> Vec<f64> {
        let wf = w.to_f32();
        let k = w.cols;
        let mut out = vec![0f64; m * w.rows];
        for i in 0..m {
            for j in 0..w.rows {
                out[i * w.rows + j] = (0..k).map(|t| x[i * k + t] as f64 * wf[j * k + t] as f64).sum();
            }
        }
        out
    }

    #[test]
    fn every_format_matches_the_f64_reference_within_the_activation_error() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
            let (n, k, m) = (9, 512, 3);
            let w = quantize_random(ty, n, k, 21);
            let x = rand_vec(m * k, 22);
            let xq = QuantizedActs::quantize(&x, m, k);
            let want = reference(&x, m, &w);
            // Budget: Σ|w|·(max|x_block|/65534) from activation rounding, plus f32 accumulation.
            let wf = w.to_f32();
            // Every tier, and (None) the packed kernels' chained reference.
            for tier in Tier::available().into_iter().map(Some).chain([None]) {
                let mut out = vec![0f32; m * n];
                match tier {
                    Some(tier) => qmatmul(tier, &xq, &w, &mut out),
                    None => chained_reference(&xq, &w, &mut out),
                }
                for i in 0..m {
                    for j in 0..n {
                        let budget: f64 = (0..k)
                            .map(|t| {
                                let b = &x[i * k + t / 32 * 32..i * k + t / 32 * 32 + 32];
                                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                                wf[j * k + t].abs() as f64 * amax / 65534.0
                            })
                            .sum::<f64>()
                            + 1e-5 * (1.0 + want[i * n + j].abs());
                        let got = out[i * n + j] as f64;
                        assert!(
                            (got - want[i * n + j]).abs() <= budget,
                            "{tier:?} {}: {got} vs {} (budget {budget})",
                            ty.name(),
                            want[i * n + j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tiers_are_bit_identical_and_rows_are_batch_invariant() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
            // 32-element blocks: one full octet and a tail of every length 1..=7 groups.
            let ks: Vec<usize> = if ty.block_size() == 256 { vec![768] } else { (9..=16).map(|g| 32 * g).collect() };
            for k in ks {
                tiers_agree_and_rows_are_invariant(ty, k);
            }
        }
    }

    fn tiers_agree_and_rows_are_invariant(ty: GgmlType, k: usize) {
        let n = 13;
        let w = quantize_random(ty, n, k, 3);
        let x = rand_vec(7 * k, 4);
        let xq = QuantizedActs::quantize(&x, 7, k);
        let mut reference_out = vec![0f32; 7 * n];
        qmatmul(Tier::Scalar, &xq, &w, &mut reference_out);
        for tier in Tier::available() {
            let mut all = vec![0f32; 7 * n];
            qmatmul(tier, &xq, &w, &mut all);
            assert_eq!(all, reference_out, "{tier:?} {} k={k} differs from scalar", ty.name());
            for i in 0..7 {
                let one = QuantizedActs::quantize(&x[i * k..(i + 1) * k], 1, k);
                let mut o = vec![0f32; n];
                qmatmul(tier, &one, &w, &mut o);
                assert_eq!(o, all[i * n..(i + 1) * n], "{tier:?} {} row {i}", ty.name());
            }
            // 2–6 rows: fused kernels in pairs (and one last row) or the panel, by format and count.
            for m in 2..=6 {
                let few = QuantizedActs::quantize(&x[k..(1 + m) * k], m, k);
                let mut o = vec![0f32; m * n];
                qmatmul(tier, &few, &w, &mut o);
                assert_eq!(o, all[n..(1 + m) * n], "{tier:?} {} {m} rows", ty.name());
            }
        }
    }
}
