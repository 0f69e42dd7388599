//! `out[m × n] = x[m × k] · Wᵀ` in the bf16 compute mode: `x` rounded to bf16 once per call
//! (nearest even), `W` held as bf16 ([`PackedBf16`]), products accumulated in f32 by
//! `vdpbf16ps` where the CPU has AVX512-BF16, else by an emulation of exactly its arithmetic
//! (AVX-512F, AVX2, scalar): every kernel gives the bits of [`dp_lane`], the scalar reference.
//!
//! Batch invariance: output `(i, j)` is one chain over the pairs of `k` in order, in lane
//! `j mod 16` of its block's accumulator, whatever `m` is and whichever thread or tile computes
//! it. Tiles only decide how many of these independent chains run side by side.

use crate::isa::{self, Tier};
use crate::matmul::SyncPtr;
use crate::packed_bf16::{LANES, PackedBf16, dp_lane, round_rows};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// How dense (f32/f16/bf16) weights are computed: in f32 (exact, the default) or in bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseCompute {
    F32,
    Bf16,
}

static BF16: AtomicBool = AtomicBool::new(false);

/// Sets the mode for weights prepared from now on ([`crate::Weight::for_matmul`]); set it before
/// loading a model.
pub fn set_dense_compute(mode: DenseCompute) {
    BF16.store(mode == DenseCompute::Bf16, Ordering::Relaxed);
}

pub fn dense_compute() -> DenseCompute {
    if BF16.load(Ordering::Relaxed) { DenseCompute::Bf16 } else { DenseCompute::F32 }
}

/// The kernels of this matmul, all with the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Scalar,
    /// The emulation on AVX2 + FMA.
    Avx2,
    /// The emulation on AVX-512F.
    Avx512,
    /// `vdpbf16ps` (AVX512-BF16).
    Avx512Bf16,
}

impl Kernel {
    pub fn supported(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => Tier::Avx2.supported(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => Tier::Avx512.supported(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 => Tier::Avx512.supported() && is_x86_feature_detected!("avx512bf16"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every kernel this CPU can run, best last.
    pub fn available() -> Vec<Kernel> {
        [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512, Kernel::Avx512Bf16]
            .into_iter()
            .filter(|k| k.supported())
            .collect()
    }

    /// The best kernel within tier `t` (NEON has none of its own yet: scalar).
    pub fn for_tier(t: Tier) -> Kernel {
        match t {
            Tier::Avx512 if Kernel::Avx512Bf16.supported() => Kernel::Avx512Bf16,
            Tier::Avx512 => Kernel::Avx512,
            Tier::Avx2 => Kernel::Avx2,
            _ => Kernel::Scalar,
        }
    }

    /// Activation rows a tile takes at most (AVX2 has half the registers, each half the width).
    fn max_rows(self) -> usize {
        if matches!(self, Kernel::Avx2 | Kernel::Scalar) { 4 } else { 8 }
    }
}

thread_local! {
    /// The activations rounded to bf16 pairs ([`round_rows`]).
    static ROUNDED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// `out[i·n + j] = x[i,·] · W[j,·]` on the tier in use.
pub fn matmul(p: &PackedBf16, x: &[f32], m: usize, out: &mut [f32]) {
    matmul_many(&[p], x, m, &mut [out]);
}

/// [`matmul`] of one `x` by several weights of its width (q/k/v, gate/up): one rounding.
pub fn matmul_many(ps: &[&PackedBf16], x: &[f32], m: usize, outs: &mut [&mut [f32]]) {
    matmul_many_on(Kernel::for_tier(isa::tier()), ps, x, m, outs);
}

/// [`matmul_many`] with a given kernel (it must be supported).
pub fn matmul_many_on(kernel: Kernel, ps: &[&PackedBf16], x: &[f32], m: usize, outs: &mut [&mut [f32]]) {
    assert!(kernel.supported(), "bf16 matmul: {kernel:?} is not supported by this CPU");
    assert_eq!(ps.len(), outs.len());
    let k = ps[0].cols;
    assert_eq!(x.len(), m * k, "bf16 matmul: x is not {m} x {k}");
    ROUNDED.with_borrow_mut(|xr| {
        round_rows(x, m, k, xr);
        for (p, out) in ps.iter().zip(outs.iter_mut()) {
            assert!(p.cols == k && out.len() == m * p.rows, "bf16 matmul: shapes");
            run(kernel, p, xr, m, out);
        }
    });
}

/// The pool job. Many rows on `vdpbf16ps` take [`run_wide`]; otherwise tasks take runs of units
/// (two blocks, 32 output columns), and within a task activation rows go in blocks that stay in
/// L2 while each unit's weights (in L2) meet them a tile of up to eight rows at a time.
fn run(kernel: Kernel, p: &PackedBf16, xr: &[u32], m: usize, out: &mut [f32]) {
    const ACT_BLOCK: usize = 64;
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512Bf16 && m >= WIDE_MIN_ROWS {
        return run_wide(p, xr, m, out);
    }
    let units = p.blocks().div_ceil(2);
    let threads = crate::pool::global().n_threads();
    let per = units.div_ceil(threads * 4).max(1);
    let out = SyncPtr(out.as_mut_ptr());
    crate::pool::global().run(units.div_ceil(per), &|t| {
        for i0 in (0..m).step_by(ACT_BLOCK) {
            let i1 = (i0 + ACT_BLOCK).min(m);
            for u in t * per..((t + 1) * per).min(units) {
                let mut i = i0;
                while i < i1 {
                    let c = [8, 4, 2, 1].into_iter().find(|&c| c <= (i1 - i).min(kernel.max_rows())).unwrap_or(1);
                    let tile = Tile::new(p, 2 * u, 2, &xr[i * p.pairs..], c, out, i);
                    // SAFETY: this task alone writes the unit's columns; the kernel is supported.
                    unsafe { tile.run(kernel) };
                    i += c;
                }
            }
        }
    });
}

/// Rows from which [`run_wide`] pays: two of its tiles.
#[cfg(target_arch = "x86_64")]
const WIDE_MIN_ROWS: usize = 12;

/// Many rows on `vdpbf16ps`: tiles of four blocks (64 columns) by six rows, whose 24
/// accumulators, four weight vectors and one broadcast fill 29 of the 32 zmm registers, so
/// each step's ten loads feed 24 `vdpbf16ps` (the two-block tile: ten loads, 16). Tasks take a
/// chunk of up to 64 rows (in L2) against a run of whole groups of four blocks, so that prefill's
/// hundreds of rows give both threads equal work whatever the matrix's width.
#[cfg(target_arch = "x86_64")]
fn run_wide(p: &PackedBf16, xr: &[u32], m: usize, out: &mut [f32]) {
    const ROW_CHUNK: usize = 64;
    let groups = p.blocks().div_ceil(4);
    let chunks = m.div_ceil(ROW_CHUNK);
    let threads = crate::pool::global().n_threads();
    let per = (groups * chunks).div_ceil(threads * 4).clamp(1, groups);
    let runs = groups.div_ceil(per);
    let out = SyncPtr(out.as_mut_ptr());
    crate::pool::global().run(runs * chunks, &|t| {
        let (i0, g0) = (t / runs * ROW_CHUNK, t % runs * per);
        let i1 = (i0 + ROW_CHUNK).min(m);
        for g in g0..(g0 + per).min(groups) {
            let mut i = i0;
            while i < i1 {
                let c = [6, 4, 2, 1].into_iter().find(|&c| c <= i1 - i).unwrap_or(1);
                let tile = Tile::new(p, 4 * g, 4, &xr[i * p.pairs..], c, out, i);
                // SAFETY: this task alone writes these rows of the group's columns; AVX512-BF16
                // was checked by the caller.
                unsafe { x86::wide(&tile) };
                i += c;
            }
        }
    });
}

/// Blocks `b..b + width` (those past the matrix absent) against `c` rounded activation rows
/// from `x` (`pairs` words apart), into output rows from `i` (`n` values apart).
pub(crate) struct Tile<'a> {
    p: &'a PackedBf16,
    b: usize,
    /// Blocks in the tile (1 to its width).
    nb: usize,
    x: &'a [u32],
    c: usize,
    out: SyncPtr,
    i: usize,
}

impl<'a> Tile<'a> {
    fn new(p: &'a PackedBf16, b: usize, width: usize, x: &'a [u32], c: usize, out: SyncPtr, i: usize) -> Self {
        let nb = (p.blocks() - b).min(width);
        assert!(x.len() >= c * p.pairs);
        Tile { p, b, nb, x, c, out, i }
    }

    /// Weight words of tile block `k` (the last present one again for a missing one).
    fn w(&self, k: usize) -> *const u32 {
        self.p.block(self.b + k.min(self.nb - 1)).as_ptr()
    }

    /// Pair `q` of the tile's activation row `c`.
    fn xp(&self, c: usize, q: usize) -> u32 {
        self.x[c * self.p.pairs + q]
    }

    /// Output columns of tile block `k` that exist.
    fn valid(&self, k: usize) -> usize {
        (self.p.rows - (self.b + k) * LANES).min(LANES)
    }

    /// Where row `c`, column `r` of tile block `k` goes.
    fn dst(&self, k: usize, c: usize, r: usize) -> *mut f32 {
        self.out.get().wrapping_add((self.i + c) * self.p.rows + (self.b + k) * LANES + r)
    }

    /// # Safety
    /// The kernel is supported; no other view of the tile's outputs is alive.
    unsafe fn run(&self, kernel: Kernel) {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as vouched by the caller.
            Kernel::Avx512Bf16 | Kernel::Avx512 | Kernel::Avx2 => unsafe { x86::tile(kernel, self) },
            _ => unsafe { self.scalar() },
        }
    }

    /// The reference: [`dp_lane`] over the pairs in order, per output.
    unsafe fn scalar(&self) {
        for k in 0..self.nb {
            let w = self.p.block(self.b + k);
            for c in 0..self.c {
                for r in 0..self.valid(k) {
                    let acc = (0..self.p.pairs).fold(0.0, |acc, q| dp_lane(acc, self.xp(c, q), w[LANES * q + r]));
                    // SAFETY: an output of this tile (the caller).
                    unsafe { *self.dst(k, c, r) = acc };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Kernel, LANES, Tile};
    use std::arch::x86_64::*;

    /// # Safety
    /// The kernel is supported (not scalar); no other view of the tile's outputs is alive.
    pub(super) unsafe fn tile(kernel: Kernel, t: &Tile) {
        // SAFETY: as vouched by the caller. A constant row count keeps the accumulators in registers.
        unsafe {
            match (kernel, t.c) {
                (Kernel::Avx512Bf16, 8) => zmm::<true, 8>(t),
                (Kernel::Avx512Bf16, 4) => zmm::<true, 4>(t),
                (Kernel::Avx512Bf16, 2) => zmm::<true, 2>(t),
                (Kernel::Avx512Bf16, _) => zmm::<true, 1>(t),
                (Kernel::Avx512, 8) => zmm::<false, 8>(t),
                (Kernel::Avx512, 4) => zmm::<false, 4>(t),
                (Kernel::Avx512, 2) => zmm::<false, 2>(t),
                (Kernel::Avx512, _) => zmm::<false, 1>(t),
                (_, 4) => ymm::<4>(t),
                (_, 2) => ymm::<2>(t),
                _ => ymm::<1>(t),
            }
        }
    }

    /// `C` rows against both blocks, sixteen lanes (rows of a block) a vector: `vdpbf16ps`
    /// (`NATIVE`) or its emulation.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn zmm<const NATIVE: bool, const C: usize>(t: &Tile) {
        let mut acc = [[_mm512_setzero_ps(); C]; 2];
        let (w0, w1) = (t.w(0), t.w(1));
        for q in 0..t.p.pairs {
            // SAFETY: both blocks have `pairs` vectors of sixteen words, 64-byte aligned.
            let w = unsafe { [_mm512_load_si512(w0.add(LANES * q) as _), _mm512_load_si512(w1.add(LANES * q) as _)] };
            for c in 0..C {
                let x = _mm512_set1_epi32(t.xp(c, q) as i32);
                for (a, w) in acc.iter_mut().zip(w) {
                    a[c] = if NATIVE { dpbf16(a[c], w, x) } else { dpbf16_emulated(a[c], w, x) };
                }
            }
        }
        for (k, acc) in acc.iter().enumerate().take(t.nb) {
            let mask = ((1u32 << t.valid(k)) - 1) as u16;
            for (c, a) in acc.iter().enumerate() {
                // SAFETY: the unmasked lanes are this tile's outputs (the caller).
                unsafe { _mm512_mask_storeu_ps(t.dst(k, c, 0), mask, *a) };
            }
        }
    }

    /// [`super::run_wide`]'s tile: four blocks against up to six rows by `vdpbf16ps`, each
    /// output one chain over the pairs in order, as in [`zmm`].
    ///
    /// # Safety
    /// The CPU has AVX512-BF16; no other view of the tile's outputs is alive.
    pub(super) unsafe fn wide(t: &Tile) {
        // SAFETY: as vouched by the caller. A constant row count keeps the accumulators in registers.
        unsafe {
            match t.c {
                6 => wide_rows::<6>(t),
                4 => wide_rows::<4>(t),
                2 => wide_rows::<2>(t),
                _ => wide_rows::<1>(t),
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn wide_rows<const C: usize>(t: &Tile) {
        let mut acc = [[_mm512_setzero_ps(); 4]; C];
        let w = [t.w(0), t.w(1), t.w(2), t.w(3)];
        let (x, pairs) = (t.x.as_ptr(), t.p.pairs);
        assert!(t.c == C && t.x.len() >= C * pairs);
        for q in 0..pairs {
            // SAFETY: each block has `pairs` vectors of sixteen words, 64-byte aligned.
            let wv = w.map(|b| unsafe { _mm512_load_si512(b.add(LANES * q) as _) });
            for (c, acc) in acc.iter_mut().enumerate() {
                // SAFETY: row `c < C` of the tile's rows (checked above).
                let xv = _mm512_set1_epi32(unsafe { *x.add(c * pairs + q) } as i32);
                for (a, w) in acc.iter_mut().zip(wv) {
                    *a = dpbf16(*a, w, xv);
                }
            }
        }
        for (c, acc) in acc.iter().enumerate() {
            for (k, a) in acc.iter().enumerate().take(t.nb) {
                let mask = ((1u32 << t.valid(k)) - 1) as u16;
                // SAFETY: the unmasked lanes are this tile's outputs (the caller).
                unsafe { _mm512_mask_storeu_ps(t.dst(k, c, 0), mask, *a) };
            }
        }
    }

    /// `acc += x · w` by `vdpbf16ps` on registers (inline assembly: the intrinsic's bf16 vector
    /// types buy nothing here).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn dpbf16(mut acc: __m512, w: __m512i, x: __m512i) -> __m512 {
        // SAFETY: register-only arithmetic; the caller checked AVX512-BF16.
        unsafe {
            std::arch::asm!("vdpbf16ps {a}, {w}, {x}", a = inout(zmm_reg) acc, w = in(zmm_reg) w, x = in(zmm_reg) x,
                options(pure, nomem, nostack, preserves_flags));
        }
        acc
    }

    /// [`dpbf16`] by two FMAs, odd halves first, each result flushed. (No DAZ on the inputs:
    /// rounded activations and packed weights hold no denormals, and the sums are flushed.)
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn dpbf16_emulated(acc: __m512, w: __m512i, x: __m512i) -> __m512 {
        let hi = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        let odd = |v| _mm512_castsi512_ps(_mm512_and_si512(v, hi));
        let even = |v| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
        let ftz = |v: __m512| {
            let v = _mm512_castps_si512(v);
            let normal = _mm512_test_epi32_mask(v, _mm512_set1_epi32(0x7F80_0000));
            _mm512_castsi512_ps(_mm512_mask_blend_epi32(normal, _mm512_and_si512(v, _mm512_set1_epi32(i32::MIN)), v))
        };
        let t = ftz(_mm512_fmadd_ps(odd(x), odd(w), acc));
        ftz(_mm512_fmadd_ps(even(x), even(w), t))
    }

    /// The AVX2 emulation: one block at a time, its sixteen lanes in two halves.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn ymm<const C: usize>(t: &Tile) {
        let hi = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
        let odd = |v| _mm256_castsi256_ps(_mm256_and_si256(v, hi));
        let even = |v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
        let ftz = |v: __m256| {
            let e = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F80_0000)));
            let tiny = _mm256_cmp_ps::<_CMP_EQ_OQ>(e, _mm256_setzero_ps());
            _mm256_blendv_ps(v, _mm256_and_ps(v, _mm256_set1_ps(-0.0)), tiny)
        };
        for k in 0..t.nb {
            let w = t.w(k);
            let mut acc = [[_mm256_setzero_ps(); C]; 2];
            for q in 0..t.p.pairs {
                for (h, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: the block has `pairs` vectors of sixteen words.
                    let wv = unsafe { _mm256_loadu_si256(w.add(LANES * q + 8 * h) as _) };
                    for (c, a) in acc.iter_mut().enumerate() {
                        let x = _mm256_set1_epi32(t.xp(c, q) as i32);
                        let s = ftz(_mm256_fmadd_ps(odd(x), odd(wv), *a));
                        *a = ftz(_mm256_fmadd_ps(even(x), even(wv), s));
                    }
                }
            }
            let mut lanes = [0f32; LANES];
            #[allow(clippy::needless_range_loop)] // c indexes the inner arrays of acc
            for c in 0..C {
                for (h, half) in lanes.chunks_exact_mut(8).enumerate() {
                    // SAFETY: eight floats.
                    unsafe { _mm256_storeu_ps(half.as_mut_ptr(), acc[h][c]) };
                }
                for (r, v) in lanes.iter().enumerate().take(t.valid(k)) {
                    // SAFETY: an output of this tile (the caller).
                    unsafe { *t.dst(k, c, r) = *v };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::GgmlType;
    use crate::testing::{quantize_random, rand_vec};

    fn run_on(kernel: Kernel, p: &PackedBf16, x: &[f32], m: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * p.rows];
        matmul_many_on(kernel, &[p], x, m, &mut [&mut out]);
        out
    }

    /// Every kernel gives the scalar reference's bits (odd sizes: a zero-padded last pair, a
    /// short last block, a unit of one block, tiles of 8, 4, 2 and 1 rows), and a row's bits do
    /// not depend on the rows computed with it.
    #[test]
    fn kernels_are_bit_identical_to_the_reference_and_batch_invariant() {
        eprintln!("bf16 kernels here: {:?}", Kernel::available());
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for (n, k, m) in [(37, 95, 15), (16, 64, 3), (70, 260, 70), (5, 1, 2), (130, 33, 140)] {
                let p = PackedBf16::pack(&quantize_random(ty, n, k, 7));
                // Activations of mixed magnitudes, so sums cancel and round.
                let x: Vec<f32> =
                    rand_vec(m * k, 11).iter().enumerate().map(|(i, v)| v * (1 + i % 97) as f32).collect();
                let want = run_on(Kernel::Scalar, &p, &x, m);
                for kernel in Kernel::available() {
                    let all = run_on(kernel, &p, &x, m);
                    let first_diff =
                        |a: &[f32], b: &[f32]| a.iter().zip(b).position(|(a, b)| a.to_bits() != b.to_bits());
                    assert_eq!(first_diff(&all, &want), None, "{kernel:?} {} {n}x{k}, m = {m}", ty.name());
                    for i in 0..m {
                        let one = run_on(kernel, &p, &x[i * k..(i + 1) * k], 1);
                        assert_eq!(
                            first_diff(&one, &all[i * n..(i + 1) * n]),
                            None,
                            "{kernel:?} {} row {i}",
                            ty.name()
                        );
                    }
                }
            }
        }
    }

    /// The reference is a dot product of the bf16-rounded values: within f32 summation error of
    /// the f64 sum, and within bf16 rounding of the exact f32 product.
    #[test]
    fn reference_is_the_dot_product_of_the_rounded_values() {
        let (n, k, m) = (20, 300, 3);
        let w = quantize_random(GgmlType::F32, n, k, 1);
        let p = PackedBf16::pack(&w);
        let x = rand_vec(m * k, 2);
        let got = run_on(Kernel::Scalar, &p, &x, m);
        let r = |v: f32| f32::from_bits((crate::packed_bf16::round_bf16(v) as u32) << 16) as f64;
        let wf = w.to_f32();
        for i in 0..m {
            for j in 0..n {
                let (xi, wj) = (&x[i * k..(i + 1) * k], &wf[j * k..(j + 1) * k]);
                let rounded: f64 = xi.iter().zip(wj).map(|(&a, &b)| r(a) * r(b)).sum();
                let exact: f64 = xi.iter().zip(wj).map(|(&a, &b)| a as f64 * b as f64).sum();
                let scale: f64 = xi.iter().zip(wj).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                let g = got[i * n + j] as f64;
                assert!((g - rounded).abs() <= 1e-5 * scale, "({i}, {j}): {g} vs {rounded}");
                assert!((g - exact).abs() <= 1e-2 * scale, "({i}, {j}): {g} vs {exact}");
            }
        }
    }

    /// A weight prepared for the bf16 mode takes this matmul through [`crate::matmul::matmul`]
    /// and [`crate::matmul::matmul_many`] (one rounding for several weights).
    #[test]
    fn matmul_entry_points_take_the_bf16_weights() {
        let (k, m) = (64, 5);
        let ws: Vec<crate::Weight> = (0..2)
            .map(|i| {
                let mut w = quantize_random(GgmlType::BF16, 24 + i, k, i as u64);
                w.bf16 = Some(std::sync::Arc::new(PackedBf16::pack(&w)));
                w
            })
            .collect();
        let x = rand_vec(m * k, 4);
        let want: Vec<Vec<f32>> = ws.iter().map(|w| run_on(Kernel::Scalar, w.bf16.as_ref().unwrap(), &x, m)).collect();
        let mut one = vec![0f32; m * ws[0].rows];
        crate::matmul::matmul(&x, m, &ws[0], &mut one);
        assert_eq!(one, want[0]);
        let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; m * w.rows]).collect();
        let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        crate::matmul::matmul_many(&x, m, &[&ws[0], &ws[1]], &mut slices);
        assert_eq!(outs, want);
    }
}
