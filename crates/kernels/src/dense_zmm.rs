//! The AVX-512 dense (f32/f16/bf16 weights) matmul for two or more activation rows.
//!
//! Same reduction per output as [`crate::matmul`]'s other tiers (an 8-lane accumulator over `k`,
//! `hsum8`, the scalar tail), so the same bits. A zmm holds two activation rows' 8-lane
//! accumulators against one weight row's eight elements duplicated into both halves; a call keeps
//! up to six such pairs (twelve rows) against four weight rows in 24 registers.
//!
//! Loop order (why it is fast): a task owns up to 64 weight rows (they stay in L2). Activation
//! rows go in blocks of twelve, which stay in L1 (rows longer than 512 floats go 512 at a time,
//! the accumulators waiting in memory between k-blocks), and each block meets every group of four
//! weight rows: per step of eight `k`, six activation loads from L1 and four broadcast weight
//! loads feed 24 FMAs. The horizontal sums of sixteen outputs are one shuffle network
//! (21 operations) instead of sixteen `hsum`s, and leave each row's four outputs side by side for
//! one 128-bit store. f16/bf16 rows that many blocks meet are converted to f32 once per task.
//! Thousands of rows (embeddings) go to the pool in chunks of about 1 MiB ([`rows_per_chunk`]).
//! On 2026-12-05 (Xeon, no AMX) this took f32 matmuls from ~45 % of the FMA peak to 60–75 %
//! (BENCHMARKS.md).

use crate::ggml::GgmlType;
use crate::matmul::x86::{prefetch_lines, size_of_elem};
use crate::matmul::{DenseTask, load1};
use std::arch::x86_64::*;

/// Activation rows a call takes, in pairs.
const MAX_PAIRS: usize = 6;

/// `x`'s rows two by two, eight elements of each in turn (pair `p`, step `s`: row `2p`'s
/// elements `8s..8s + 8`, then row `2p + 1`'s), over the `k / 8 · 8` elements of the 8-lane
/// reduction: one zmm then carries two rows' reductions, each in its own half. Returned from a
/// 64-byte boundary within `buf`: a zmm load that crosses a cache line costs two.
pub(crate) fn interleave_pairs<'b>(x: &[f32], m: usize, k: usize, buf: &'b mut Vec<f32>) -> &'b [f32] {
    let k8 = k / 8 * 8;
    let len = m / 2 * 2 * k8;
    let out = aligned(buf, len);
    // On every thread: for thousands of rows (embeddings) this copy is megabytes.
    crate::pool::rows_mut(out, 2 * k8.max(1), crate::pool::min_rows(2 * k8.max(1)), |p0, out| {
        for (p, o) in out.chunks_exact_mut(2 * k8).enumerate() {
            let (a, b) = (&x[2 * (p0 + p) * k..][..k8], &x[(2 * (p0 + p) + 1) * k..][..k8]);
            for ((ca, cb), oc) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(o.chunks_exact_mut(16)) {
                oc[..8].copy_from_slice(ca);
                oc[8..].copy_from_slice(cb);
            }
        }
    });
    out
}

/// `len` floats of `buf` from a 64-byte boundary (a zmm load across two cache lines costs two),
/// holding whatever they held: the callers overwrite them all, and zeroing megabytes on one
/// thread first showed in profiles.
fn aligned(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.capacity() < len + 15 {
        *buf = Vec::with_capacity(len + 15);
    }
    let skip = buf.as_ptr().align_offset(64).min(15);
    if buf.len() < skip + len {
        buf.resize(skip + len, 0.0);
    }
    &mut buf[skip..skip + len]
}

/// Activation rows a pool job takes at a time: an even count (the pairs) whose f32 rows fill
/// about 1 MiB, half of a core's L2 here, and at least two blocks.
pub(crate) fn rows_per_chunk(k: usize) -> usize {
    ((1 << 20) / (4 * k.max(1))).max(4 * MAX_PAIRS) / 2 * 2
}

/// Output columns `t.j0..t.j1` of all `t.m` rows. Groups of fewer than four weight rows and an
/// odd last activation row take the ymm kernel ([`crate::matmul::x86::ymm_rows`]).
///
/// # Safety
/// No other thread writes these columns of the output; the CPU has AVX-512 F/BW, AVX2, FMA and
/// F16C; `pairs` is `t.x` by [`interleave_pairs`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(crate) unsafe fn dense_task_zmm(t: &DenseTask, pairs: &[f32]) {
    let (w, k) = (t.w, t.w.cols);
    assert!(t.x.len() == t.m * k && pairs.len() == t.m / 2 * 2 * (k / 8 * 8));
    // f16/bf16 rows met by several blocks are converted once (exactly) rather than in every block:
    // the conversion's two operations per weight vector would otherwise take a third of the FMA
    // ports. Runs of rows small enough to stay in L2 as f32.
    if w.ty != GgmlType::F32 && t.m >= 4 * MAX_PAIRS {
        let run = (CONVERTED_MAX / (4 * k) / 4 * 4).max(4);
        return F32_ROWS.with(|cell| {
            let mut buf = cell.borrow_mut();
            for j0 in (t.j0..t.j1).step_by(run) {
                let part = DenseTask { j0, j1: (j0 + run).min(t.j1), ..*t };
                let f32_rows = to_f32(w.ty, &w.bytes()[part.j0 * w.row_bytes()..part.j1 * w.row_bytes()], &mut buf);
                let src = Src { rows: f32_rows.as_ptr() as *const u8, rb: 4 * k, ty: GgmlType::F32 };
                // SAFETY: as vouched by the caller; the rows are the part's, as f32.
                unsafe { blocks(&part, pairs, src) };
            }
        });
    }
    let src = Src { rows: w.bytes()[t.j0 * w.row_bytes()..].as_ptr(), rb: w.row_bytes(), ty: w.ty };
    // SAFETY: as vouched by the caller.
    unsafe { blocks(t, pairs, src) }
}

/// Elements of `k` a block of activation rows covers at a time: twelve rows of 512 floats
/// (24 KiB) stay in L1 beside the weights; longer rows go block by block, the accumulators
/// waiting in `CARRY` between blocks (the same chains, so the same bits).
const K_BLOCK: usize = 512;

/// Bytes of f32 rows a task may convert its weights into.
const CONVERTED_MAX: usize = 1 << 20;

thread_local! {
    /// The accumulators of a block of activation rows between k-blocks, per group of weight rows.
    static CARRY: std::cell::RefCell<Vec<__m512>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A task's f16/bf16 weight rows as f32.
    static F32_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// f16 or bf16 `rows` as f32 (exact), from a 64-byte boundary within `buf`.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
fn to_f32<'b>(ty: GgmlType, rows: &[u8], buf: &'b mut Vec<f32>) -> &'b [f32] {
    let n = rows.len() / 2;
    let (p, out) = (rows.as_ptr(), aligned(buf, n));
    let n16 = n / 16 * 16;
    for i in (0..n16).step_by(16) {
        // SAFETY: elements i..i + 16 exist in `rows` and in `out`.
        unsafe {
            let h = _mm256_loadu_si256(p.add(2 * i) as *const __m256i);
            let v = match ty {
                GgmlType::F16 => _mm512_cvtph_ps(h),
                _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h))),
            };
            _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
        }
    }
    for (i, o) in out.iter_mut().enumerate().skip(n16) {
        *o = if ty == GgmlType::F16 { load1::<1>(p, i) } else { load1::<2>(p, i) };
    }
    out
}

/// The weight rows a task reads: row `t.j0` at `rows`, `rb` bytes apart, of type `ty`.
#[derive(Clone, Copy)]
struct Src {
    rows: *const u8,
    rb: usize,
    ty: GgmlType,
}

/// [`dense_task_zmm`] from the weight rows `src`: activation rows in blocks of up to twelve, each
/// against every group of four weight rows.
///
/// # Safety
/// As [`dense_task_zmm`]; `src` holds rows `t.j0..t.j1`.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn blocks(t: &DenseTask, pairs: &[f32], src: Src) {
    let k8 = t.w.cols / 8 * 8;
    let even = t.m / 2 * 2;
    let groups = (t.j1 - t.j0) / 4;
    CARRY.with(|cell| {
        let mut carry = cell.borrow_mut();
        if k8 > K_BLOCK {
            carry.resize(groups * 4 * MAX_PAIRS, _mm512_setzero_ps());
        }
        let mut i = 0;
        while i < even {
            let np = ((even - i) / 2).min(MAX_PAIRS);
            for s0 in (0..k8.max(1)).step_by(K_BLOCK) {
                for g in 0..groups {
                    let j = t.j0 + 4 * g;
                    let rows = src.rows.wrapping_add(4 * g * src.rb);
                    // The first block reads the weights from memory: fetch the next group meanwhile.
                    let next = if i == 0 && g + 2 <= groups { rows.wrapping_add(4 * src.rb) } else { std::ptr::null() };
                    let call = Call {
                        t,
                        px: pairs[i / 2 * 2 * k8..].as_ptr(),
                        i,
                        j,
                        rows,
                        rb: src.rb,
                        next,
                        s0,
                        s1: (s0 + K_BLOCK).min(k8),
                        carry: carry.as_mut_ptr().wrapping_add(g * 4 * MAX_PAIRS),
                    };
                    // SAFETY: rows j..j + 4 exist, pairs i/2..i/2 + np are interleaved; outputs
                    // of this task; `carry` has room for this group when there are k-blocks.
                    unsafe { dispatch(&call, src.ty, np) };
                }
            }
            let j = t.j0 + 4 * groups;
            if j < t.j1 {
                // SAFETY: as above, for the last group's r < 4 rows.
                unsafe { ymm_block(t, i, i + 2 * np, j) };
            }
            i += 2 * np;
        }
    });
    if even < t.m {
        let mut j = t.j0;
        while j < t.j1 {
            // SAFETY: as above, for the odd last row.
            unsafe { ymm_block(t, even, t.m, j) };
            j += 4;
        }
    }
}

/// Rows `i0..i1` against weight rows `j..min(j + 4, j1)` with the ymm kernel.
///
/// # Safety
/// As [`dense_task_zmm`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ymm_block(t: &DenseTask, i0: usize, i1: usize, j: usize) {
    let r = (t.j1 - j).min(4);
    let rows = t.w.bytes()[j * t.w.row_bytes()..].as_ptr();
    let mut i = i0;
    while i < i1 {
        // SAFETY: as vouched by the caller.
        i += unsafe { crate::matmul::x86::ymm_rows(t, i, i1, j, r, rows, std::ptr::null()) };
    }
}

/// One call of [`pairs_r4`]: activation rows `i..` (interleaved from `px`), weight rows `j..j + 4`
/// (at `rows`, `rb` bytes apart), and the next rows to prefetch (or null).
struct Call<'a, 'b> {
    t: &'a DenseTask<'b>,
    px: *const f32,
    i: usize,
    j: usize,
    rows: *const u8,
    rb: usize,
    next: *const u8,
    /// The k-block: steps `s0..s1` of the `k / 8 · 8` elements.
    s0: usize,
    s1: usize,
    /// Where the accumulators wait between k-blocks (`4 × P` zmm).
    carry: *mut __m512,
}

/// [`pairs_r4`] for the weights' type and `np` pairs (constants keep the accumulators in registers).
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dispatch(c: &Call, ty: GgmlType, np: usize) {
    macro_rules! by_pairs {
        ($t:literal) => {
            match np {
                6 => pairs_r4::<$t, 6>(c),
                5 => pairs_r4::<$t, 5>(c),
                4 => pairs_r4::<$t, 4>(c),
                3 => pairs_r4::<$t, 3>(c),
                2 => pairs_r4::<$t, 2>(c),
                _ => pairs_r4::<$t, 1>(c),
            }
        };
    }
    // SAFETY: as vouched by the caller.
    unsafe {
        match ty {
            GgmlType::F32 => by_pairs!(0),
            GgmlType::F16 => by_pairs!(1),
            GgmlType::BF16 => by_pairs!(2),
            _ => unreachable!("quantized weights take the int16 path"),
        }
    }
}

/// Eight weight elements from `i` (type `T` as in [`load1`]) in both halves of a zmm.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
unsafe fn load8x2<const T: u8>(p: *const u8, i: usize) -> __m512 {
    // SAFETY: elements i..i + 8 exist (the caller).
    unsafe {
        match T {
            0 => _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(p.add(4 * i) as *const f64))),
            1 => _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(2 * i) as *const __m128i))),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_broadcastsi128_si256(
                _mm_loadu_si128(p.add(2 * i) as *const __m128i),
            )))),
        }
    }
}

/// `2P` activation rows against four weight rows of type `T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn pairs_r4<const T: u8, const P: usize>(c: &Call) {
    let (k, rb) = (c.t.w.cols, c.rb);
    let k8 = k / 8 * 8;
    let esize = size_of_elem::<T>();
    let carry = c.carry as *mut [[__m512; P]; 4];
    // SAFETY: P pairs of k8 interleaved elements at px, four rows of k elements at rows; `carry`
    // holds this call's accumulators from the previous k-block when `s0 > 0`.
    unsafe {
        let mut acc = if c.s0 == 0 { [[_mm512_setzero_ps(); P]; 4] } else { carry.read() };
        let mut s = c.s0;
        while s < c.s1 {
            if !c.next.is_null() {
                prefetch_lines(c.next.wrapping_add(s * 4 * esize), 8 * 4 * esize);
            }
            let xv: [__m512; P] = std::array::from_fn(|q| _mm512_loadu_ps(c.px.add(q * 2 * k8 + 2 * s)));
            for (rr, acc_r) in acc.iter_mut().enumerate() {
                let wv = load8x2::<T>(c.rows.add(rr * rb), s);
                for (a, xq) in acc_r.iter_mut().zip(xv) {
                    *a = _mm512_fmadd_ps(xq, wv, *a);
                }
            }
            s += 8;
        }
        if c.s1 < k8 {
            return carry.write(acc);
        }
        let mut q = 0;
        while q < P {
            // An odd last pair goes with itself; only its own two rows are stored.
            let q1 = (q + 1).min(P - 1);
            let sums = hsum_4x4(std::array::from_fn(|r| [acc[r][q], acc[r][q1]]));
            let rows = [c.i + 2 * q, c.i + 2 * q + 1, c.i + 2 * q1, c.i + 2 * q1 + 1];
            let n_rows = if q1 == q { 2 } else { 4 };
            for (h, &row) in rows.iter().enumerate().take(n_rows) {
                let o = c.t.out_row(row, c.j, 4);
                _mm_storeu_ps(o.as_mut_ptr(), sums[h]);
                if k8 < k {
                    let xrow = c.t.x_row(row);
                    for (rr, v) in o.iter_mut().enumerate() {
                        for (t, &xt) in xrow.iter().enumerate().skip(k8) {
                            *v += xt * load1::<T>(c.rows.add(rr * rb), t);
                        }
                    }
                }
            }
            q += 2;
        }
    }
}

/// The horizontal sums, in [`crate::matmul::hsum8`]'s association, of two pairs' accumulators
/// against four weight rows (`acc[r] = [pair a, pair b]`, each zmm two rows' 8 lanes): returns, for
/// the rows `2a, 2a + 1, 2b, 2b + 1`, each row's four outputs.
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum_4x4(acc: [[__m512; 2]; 4]) -> [__m128; 4] {
    // Per 128-bit chunk (one row, one weight row): lanes l + (l + 4), l = 0..3.
    let s: [__m512; 4] = std::array::from_fn(|r| {
        let [x, y] = acc[r];
        _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(x, y), _mm512_shuffle_f32x4::<0xDD>(x, y))
    });
    // (p0 + p2), (p1 + p3) for weight rows 0 and 1 side by side, then 2 and 3.
    let u = |a: __m512, b: __m512| _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b));
    let (u01, u23) = (u(s[0], s[1]), u(s[2], s[3]));
    let f = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(u01, u23), _mm512_shuffle_ps::<0xDD>(u01, u23));
    [
        _mm512_castps512_ps128(f),
        _mm512_extractf32x4_ps::<1>(f),
        _mm512_extractf32x4_ps::<2>(f),
        _mm512_extractf32x4_ps::<3>(f),
    ]
}
