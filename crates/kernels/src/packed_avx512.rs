//! AVX-512 VNNI kernels over [`crate::packed`] weights: a tile of four weight rows against up
//! to four activation rows, values expanded to int16 in registers and multiplied by
//! `vpdpwssd` (32 products a instruction, sixteen group sums in sixteen lanes).
//!
//! The float epilogue is the reduction of [`crate::qmatmul`]: per group, in group order,
//! `acc[g mod 16] = fma(isum, vscale·dx, acc[g mod 16])` (and the minimums) — one fused
//! multiply-add per chunk, as chunks start at multiples of 16 groups — so results have the same
//! bits as the scalar tier whatever the tile, batch or thread.

#![cfg(target_arch = "x86_64")]

use crate::matmul::x86_hsum;
use crate::packed::{Chunk, FORMATS, LANES, Packed, ROW_TILE, Scales, header_bytes, step_bytes};
use crate::quant_act::QuantizedActs;
use std::arch::x86_64::*;

/// How many tiles ahead each band's rows are prefetched.
pub(crate) const PREFETCH_TILES: usize = 4;

/// `$body` with `$F` bound, as a constant, to the format index `$index` ([`FORMATS`]): the
/// kernels are compiled once per format, and a runtime index picks one.
#[rustfmt::skip]
macro_rules! by_format {
    ($index:expr, $F:ident => $body:expr) => {
        match $index {
            0 => { const $F: usize = 0; $body }
            1 => { const $F: usize = 1; $body }
            2 => { const $F: usize = 2; $body }
            3 => { const $F: usize = 3; $body }
            4 => { const $F: usize = 4; $body }
            5 => { const $F: usize = 5; $body }
            6 => { const $F: usize = 6; $body }
            7 => { const $F: usize = 7; $body }
            8 => { const $F: usize = 8; $body }
            _ => { const $F: usize = 9; $body }
        }
    };
}
pub(crate) use by_format;

/// One activation row as the kernels read it: interleaved values, and per group its scale,
/// scaled sum (for minimums) and integer sum (for biases), in natural group order.
#[derive(Clone, Copy)]
pub struct XRow {
    pub q: *const i16,
    pub dx: *const f32,
    pub dsum: *const f32,
    pub isum: *const i32,
}

impl XRow {
    pub fn new(a: &QuantizedActs, qi: &[i16], x_len: usize, group: usize, i: usize) -> XRow {
        let (dx, dsum, isum) = if group == 32 { (&a.d, &a.dsum32, &a.sum32) } else { (&a.d16, &a.dsum16, &a.sum16) };
        let per = a.k / group;
        let at = |v: &[f32]| v[i * per..(i + 1) * per].as_ptr();
        XRow {
            q: qi[i * x_len..(i + 1) * x_len].as_ptr(),
            dx: at(dx),
            dsum: at(dsum),
            isum: isum[i * per..(i + 1) * per].as_ptr(),
        }
    }
}

/// `dst[i] = src[idx[i]]`, 0 where `idx[i] < 0`: sixteen pairs a gather instruction (the
/// interleaved layout puts each of a vector's lanes in a different group, so no wider moves
/// would do; the scalar loop took ~2.5 cycles a value).
///
/// # Safety
/// The CPU must support AVX-512 F; every entry of `idx` is < `src.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn gather_pairs(idx: &[i32], src: &[u32], dst: &mut [u32]) {
    assert!(idx.len() == dst.len() && dst.len().is_multiple_of(16));
    for (d, i) in dst.chunks_exact_mut(16).zip(idx.chunks_exact(16)) {
        // SAFETY: 16 entries each; the lanes gathered hold indices within `src` (the caller).
        unsafe {
            let i = _mm512_loadu_si512(i.as_ptr() as *const __m512i);
            let some = _mm512_cmpge_epi32_mask(i, _mm512_setzero_si512());
            let v = _mm512_mask_i32gather_epi32::<4>(_mm512_setzero_si512(), some, i, src.as_ptr() as *const i32);
            _mm512_storeu_si512(d.as_mut_ptr() as *mut __m512i, v);
        }
    }
}

/// `out[c][r] = x[c] · row p.row_of(t, r)` for the four rows of tile `t` and `C` activation rows.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI; `x` rows must be interleaved by `p.plan`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn tile<const C: usize>(p: &Packed, t: usize, x: &[XRow; C], prefetch: bool) -> [[f32; ROW_TILE]; C] {
    // SAFETY: as vouched by the caller.
    unsafe { by_format!(p.index, F => tile_f::<F, C>(p, t, x, prefetch)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_f<const F: usize, const C: usize>(
    p: &Packed,
    t: usize,
    x: &[XRow; C],
    prefetch: bool,
) -> [[f32; ROW_TILE]; C] {
    let f = FORMATS[F].1;
    let mut acc = [[_mm512_setzero_ps(); C]; ROW_TILE];
    let mut accm = [[_mm512_setzero_ps(); C]; ROW_TILE];
    assert!(t < p.tiles() && p.data.bytes().len() == ROW_TILE * p.tiles() * p.plan.row_bytes);
    let rows = [0, 1, 2, 3].map(|r| p.row_of(t, r));
    // Each band is a stream; the rows PREFETCH_TILES ahead in each are fetched meanwhile (the
    // hardware prefetcher ramps up too slowly over a task's short streams). Only on the first
    // pass over the tiles: later passes find them cached, and prefetches would only stall.
    let ahead = t + PREFETCH_TILES;
    if prefetch && ahead < p.tiles() {
        for r in 0..ROW_TILE {
            let at = p.row_of(ahead, r) * p.plan.row_bytes;
            crate::matmul::x86::prefetch_lines(p.data.bytes()[at..].as_ptr(), p.plan.row_bytes);
        }
    }
    for ch in &p.plan.chunks {
        let base: [*const u8; ROW_TILE] = std::array::from_fn(|r| p.data.bytes()[p.chunk_at(rows[r], ch)..].as_ptr());
        let hb = header_bytes(f, ch.groups);
        // SAFETY: the chunk's bytes are within the tile (assert above, offsets from the plan);
        // activation rows hold the chunk's `v × 32` values at `x_offset` (the caller).
        unsafe {
            let xq: [*const i16; C] = std::array::from_fn(|c| x[c].q.wrapping_add(ch.x_offset));
            let w: [*const u8; ROW_TILE] = std::array::from_fn(|r| base[r].wrapping_add(hb));
            // One activation row gives only four accumulator chains; two per row hide the
            // latency of vpdpwssd (integer sums: any split is exact).
            let isums = match (ch.v == 2, C == 1) {
                (true, true) => dots::<F, C, 2, 2>(w, xq, ch.v),
                (true, false) => dots::<F, C, 2, 1>(w, xq, ch.v),
                (false, true) => dots::<F, C, 4, 2>(w, xq, ch.v),
                (false, false) => dots::<F, C, 4, 1>(w, xq, ch.v),
            };
            macro_rules! row {
                ($r:literal) => {
                    let sc = scales::<F>(base[$r], ch.groups);
                    for c in 0..C {
                        epilogue::<F>(ch, isums[$r][c], sc.0, &x[c], true, &mut acc[$r][c]);
                        if f.scales.mins() {
                            epilogue_mins(ch, sc.1, &x[c], &mut accm[$r][c]);
                        }
                    }
                };
            }
            row!(0);
            row!(1);
            row!(2);
            row!(3);
        }
    }
    sums(&acc, &accm)
}

/// Each (row, activation) pair's accumulators summed: `hsum16(acc) + hsum16(accm)`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn sums<const C: usize>(
    acc: &[[__m512; C]; ROW_TILE],
    accm: &[[__m512; C]; ROW_TILE],
) -> [[f32; ROW_TILE]; C] {
    let mut out = [[0f32; ROW_TILE]; C];
    if C == 1 {
        for (r, v) in out[0].iter_mut().enumerate() {
            *v = hsum16(acc[r][0]) + hsum16(accm[r][0]);
        }
        return out;
    }
    // All outputs at once: vector 4c + r is output (r, c).
    let pick = |a: &[[__m512; C]; ROW_TILE], i: usize| if i / 4 < C { a[i % 4][i / 4] } else { _mm512_setzero_ps() };
    let sums = _mm512_add_ps(
        hsum16_x16(&std::array::from_fn(|i| pick(acc, i))),
        hsum16_x16(&std::array::from_fn(|i| pick(accm, i))),
    );
    let mut lanes = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sums) };
    for (c, o) in out.iter_mut().enumerate() {
        for (r, v) in o.iter_mut().enumerate() {
            *v = lanes[hsum16_x16_lane(4 * c + r)];
        }
    }
    out
}

/// The lane of [`hsum16_x16`]'s result that holds vector `i`'s sum.
const fn hsum16_x16_lane(i: usize) -> usize {
    4 * (i % 4) + i / 4
}

/// [`hsum16`] of sixteen vectors at once, by a transposing reduction that performs the same
/// additions in the same association: `b = lo + hi` halves, `c_l = b_l + b_{l+4}`,
/// `d = (c0 + c2, c1 + c3)`, `d0 + d1`. Vector `i`'s sum lands in lane [`hsum16_x16_lane`]`(i)`.
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum16_x16(v: &[__m512; 16]) -> __m512 {
    // b: vector pairs' 256-bit halves added; w[i] holds b of v[2i] (low half) and v[2i+1].
    let w: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        _mm512_add_ps(_mm512_shuffle_f32x4::<0b01_00_01_00>(a, b), _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b))
    });
    // c: 128-bit quarters added; u[j]'s quarter k holds c0..c3 of v[4j + k].
    let u: [__m512; 4] = std::array::from_fn(|j| {
        let (a, b) = (w[2 * j], w[2 * j + 1]);
        _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(a, b), _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b))
    });
    // d: within quarters, (c0 + c2, c1 + c3) of two vectors side by side.
    let z: [__m512; 2] = std::array::from_fn(|k| {
        let (a, b) = (u[2 * k], u[2 * k + 1]);
        _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b))
    });
    _mm512_add_ps(_mm512_shuffle_ps::<0x88>(z[0], z[1]), _mm512_shuffle_ps::<0xDD>(z[0], z[1]))
}

/// The integer lanes of one chunk: `Σ_v vpdpwssd(w_v, x_v)` for each of the four rows and
/// `C` activation rows, `STEP` vectors expanded at a time, over `S` accumulators each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dots<const F: usize, const C: usize, const STEP: usize, const S: usize>(
    w: [*const u8; ROW_TILE],
    x: [*const i16; C],
    v: usize,
) -> [[__m512i; C]; ROW_TILE] {
    let bits = FORMATS[F].1.bits;
    let sb = step_bytes(bits, STEP);
    let mut acc = [[[_mm512_setzero_si512(); S]; C]; ROW_TILE];
    for st in 0..v / STEP {
        // Rows unrolled by hand: as a loop, LLVM kept the accumulators on the stack.
        macro_rules! row {
            ($r:literal) => {
                // SAFETY: step st of row r's chunk and of every activation row (the caller).
                unsafe {
                    let wv = expand::<F, STEP>(w[$r].add(st * sb));
                    for (i, wi) in wv.iter().enumerate() {
                        for (a, xc) in acc[$r].iter_mut().zip(&x) {
                            dpwssd(&mut a[i % S], *wi, xc.add((st * STEP + i) * 32));
                        }
                    }
                }
            };
        }
        row!(0);
        row!(1);
        row!(2);
        row!(3);
    }
    // (Loops, not `map`: closures would not inherit the target features, and stay calls.)
    let mut sums = [[_mm512_setzero_si512(); C]; ROW_TILE];
    for (sr, ar) in sums.iter_mut().zip(&acc) {
        for (s, a) in sr.iter_mut().zip(ar) {
            for part in a {
                *s = _mm512_add_epi32(*s, *part);
            }
        }
    }
    sums
}

/// `acc += Σ pairs of w · x` (`vpdpwssd`) with `x` the 32 int16 values at `p`.
///
/// Inline assembly because LLVM, for a generic x86-64 target, splits the intrinsic into
/// `vpmaddwd` + `vpaddd` — twice the instructions of the kernels' inner loop.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpwssd(acc: &mut __m512i, w: __m512i, p: *const i16) {
    // SAFETY: reads the 64 bytes at p (the caller's activation vector); no other effect.
    unsafe {
        std::arch::asm!("vpdpwssd {a}, {w}, zmmword ptr [{p}]", a = inout(zmm_reg) *acc, w = in(zmm_reg) w,
            p = in(reg) p, options(pure, readonly, nostack, preserves_flags));
    }
}

/// 32 bytes at `p`, zero-extended to 32 int16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn zext(p: *const u8) -> __m512i {
    unsafe { _mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i)) }
}

/// The `STEP` vectors of stored values of one step (layout of [`crate::packed::encode_step`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn expand<const F: usize, const STEP: usize>(p: *const u8) -> [__m512i; STEP] {
    let bits = FORMATS[F].1.bits;
    let mut v = [_mm512_setzero_si512(); STEP];
    // SAFETY: the step's bytes (the caller).
    unsafe {
        if bits == 8 {
            for (t, vt) in v.iter_mut().enumerate() {
                *vt = _mm512_cvtepi8_epi16(_mm256_loadu_si256(p.add(32 * t) as *const __m256i));
            }
            return v;
        }
        let mut at = 0;
        if matches!(bits, 4..=6) {
            let m4 = _mm512_set1_epi16(0x0F);
            for e in 0..STEP / 2 {
                let z = zext(p.add(32 * e));
                v[2 * e] = _mm512_and_si512(z, m4);
                v[2 * e + 1] = _mm512_srli_epi16::<4>(z);
            }
            at = 16 * STEP;
        }
        if matches!(bits, 2 | 3 | 6) {
            let h = zext(p.add(at));
            let m3 = _mm512_set1_epi16(3);
            let two = |t: usize| match t {
                0 => h,
                1 => _mm512_srli_epi16::<2>(h),
                2 => _mm512_srli_epi16::<4>(h),
                _ => _mm512_srli_epi16::<6>(h),
            };
            for (t, vt) in v.iter_mut().enumerate() {
                if bits == 6 {
                    // vt | (bits 2t..2t+2 of h) << 4, by one ternary-logic op on (h shifted into place) & 0x30.
                    let hs = match t {
                        0 => _mm512_slli_epi16::<4>(h),
                        1 => _mm512_slli_epi16::<2>(h),
                        2 => h,
                        _ => _mm512_srli_epi16::<2>(h),
                    };
                    *vt = _mm512_ternarylogic_epi32::<0xF8>(*vt, hs, _mm512_set1_epi16(0x30));
                } else {
                    *vt = _mm512_and_si512(two(t), m3);
                }
            }
            at += 32;
        }
        if matches!(bits, 3 | 5) {
            let add = _mm512_set1_epi16(if bits == 5 { 16 } else { 4 });
            for (t, vt) in v.iter_mut().enumerate() {
                let k: __mmask32 = (p.add(at + 4 * t) as *const u32).read_unaligned();
                add_masked(vt, k, add);
            }
        }
    }
    v
}

/// `v += c` in the int16 lanes selected by `k` (one merge-masked `vpaddw`; LLVM makes the
/// intrinsic an OR and a masked move, two instructions per vector of the Q5/Q3 expansion).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn add_masked(v: &mut __m512i, k: __mmask32, c: __m512i) {
    // SAFETY: register-only arithmetic.
    unsafe {
        std::arch::asm!("vpaddw {v}{{{k}}}, {v}, {c}", v = inout(zmm_reg) *v, k = in(kreg) k, c = in(zmm_reg) c,
            options(pure, nomem, nostack, preserves_flags));
    }
}

/// Mask of the first `n` (≤ 16) lanes.
#[inline]
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// `(vscale, mcoef)` of a chunk's groups from its header, zero beyond `hg` groups.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(crate) unsafe fn scales<const F: usize>(hdr: *const u8, hg: usize) -> (__m512, __m512) {
    let k = lanes(hg);
    let h16 = |p: *const u8| unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p as *const i16)) };
    // SAFETY: the header holds these fields (`header_bytes`); masked loads read no further.
    unsafe {
        match FORMATS[F].1.scales {
            Scales::PerGroup { mins } => {
                let mc = if mins { h16(hdr.add(2 * hg)) } else { _mm512_setzero_ps() };
                (h16(hdr), mc)
            }
            Scales::Super { per_sb, signed, mins } => {
                let nsb = hg.div_ceil(per_sb);
                let ints = hg * (1 + mins as usize);
                let int_lanes = |p: *const u8| {
                    let b = _mm_maskz_loadu_epi8(k, p as *const i8);
                    _mm512_cvtepi32_ps(if signed { _mm512_cvtepi8_epi32(b) } else { _mm512_cvtepu8_epi32(b) })
                };
                // Lane l takes its super-block's d: l / per_sb.
                let sb_of_lane = if per_sb == 8 {
                    _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                } else {
                    _mm512_setzero_si512()
                };
                let per_sb_f16 = |p: *const u8| {
                    let d = _mm_cvtph_ps(_mm_maskz_loadu_epi16(lanes(nsb) as __mmask8, p as *const i16));
                    _mm512_permutexvar_ps(sb_of_lane, _mm512_castps128_ps512(d))
                };
                let vs = _mm512_mul_ps(per_sb_f16(hdr.add(ints)), int_lanes(hdr));
                let mc = if mins {
                    let m = _mm512_mul_ps(per_sb_f16(hdr.add(ints + 2 * nsb)), int_lanes(hdr.add(hg)));
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m), _mm512_set1_epi32(i32::MIN)))
                } else {
                    _mm512_setzero_ps()
                };
                (vs, mc)
            }
        }
    }
}

/// Adds each group's `S` adjacent lanes and moves group `g`'s sum to lane `g`.
#[inline]
#[target_feature(enable = "avx512f")]
fn gather_groups<const S: usize>(v: __m512i) -> __m512i {
    let mut v = v;
    if S >= 2 {
        v = _mm512_add_epi32(v, _mm512_shuffle_epi32::<0b10_11_00_01>(v));
    }
    if S >= 4 {
        v = _mm512_add_epi32(v, _mm512_shuffle_epi32::<0b01_00_11_10>(v));
    }
    if S >= 8 {
        v = _mm512_add_epi32(v, _mm512_shuffle_i32x4::<0b10_11_00_01>(v, v));
    }
    let idx = match S {
        2 => _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0),
        4 => _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        _ => _mm512_setr_epi32(0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    };
    _mm512_permutexvar_epi32(idx, v)
}

/// [`crate::matmul::hsum16`] of a vector.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn hsum16(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    x86_hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
}

/// One chunk's groups of one (weight row, activation row) into the accumulator (group `g` in
/// lane `g mod 16`). `biased`: the integer sums are of stored values `u = q + bias`, so
/// `bias · Σ x` is taken off (exactly, in integers). The minimums' term is [`epilogue_mins`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
pub(crate) unsafe fn epilogue<const F: usize>(
    ch: &Chunk,
    isum: __m512i,
    vs: __m512,
    x: &XRow,
    biased: bool,
    acc: &mut __m512,
) {
    let f = FORMATS[F].1;
    let (k, g) = window(ch);
    let mut isum = place(ch, isum);
    if biased && f.bias != 0 {
        // SAFETY: the activation row has an integer sum per group; the masked load reads only
        // this chunk's groups.
        let xs = unsafe { _mm512_maskz_loadu_epi32(k, x.isum.add(g)) };
        let shift = _mm_cvtsi32_si128(f.bias.trailing_zeros() as i32);
        isum = _mm512_sub_epi32(isum, _mm512_sll_epi32(xs, shift));
    }
    // SAFETY: as vouched by the caller.
    unsafe { epilogue_placed(ch, _mm512_cvtepi32_ps(isum), vs, x, acc) }
}

/// [`epilogue`] of group sums already in their lanes, as floats ([`place`], [`place_x16`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
pub(crate) unsafe fn epilogue_placed(ch: &Chunk, fsum: __m512, vs: __m512, x: &XRow, acc: &mut __m512) {
    let (k, g) = window(ch);
    let vs = if ch.g0.is_multiple_of(LANES) { vs } else { _mm512_maskz_expand_ps(k, vs) };
    // SAFETY: the activation row has a scale per group; the masked load reads only this chunk's
    // groups.
    let scl = _mm512_mul_ps(vs, unsafe { _mm512_maskz_loadu_ps(k, x.dx.add(g)) });
    // Masked: lanes outside the chunk's groups keep their accumulators exactly.
    *acc = _mm512_mask3_fmadd_ps(fsum, scl, *acc, k);
}

/// A chunk's integer lanes as group sums in their accumulator lanes ([`window`]).
#[inline]
#[target_feature(enable = "avx512f")]
fn place(ch: &Chunk, isum: __m512i) -> __m512i {
    let isum = match ch.s {
        1 => isum,
        2 => gather_groups::<2>(isum),
        4 => gather_groups::<4>(isum),
        _ => gather_groups::<8>(isum),
    };
    if ch.g0.is_multiple_of(LANES) { isum } else { _mm512_maskz_expand_epi32(window(ch).0, isum) }
}

/// [`place`] of sixteen (row, activation) pairs' integer lanes of a tail chunk (`S` = `s` = 2,
/// 4 or 8 lanes a group), as floats: the lanes are added by a transposing reduction over all sixteen
/// (each step adds adjacent lanes of two vectors into one), so the additions and the
/// conversion are shared; one permutation a pair then moves its sums to their lanes. Integer
/// sums: any association is exact.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn place_x16<const S: usize>(ch: &Chunk, mut v: [__m512i; 16]) -> [__m512; 16] {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    // After log2(S) steps, pair p's 16 / S group sums are lanes (p % S)·(16 / S) + j of v[p / S].
    let mut n = 16;
    while n > 16 / S {
        n /= 2;
        for i in 0..n {
            let (a, b) = (v[2 * i], v[2 * i + 1]);
            v[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
        }
    }
    let z: [__m512; 16] = std::array::from_fn(|i| if i < n { _mm512_cvtepi32_ps(v[i]) } else { _mm512_setzero_ps() });
    // Lane off + j takes sum j (the other lanes are masked off by the epilogue).
    let iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let off = (ch.g0 % LANES) as i32;
    let idx: [__m512i; S] =
        std::array::from_fn(|q| _mm512_add_epi32(iota, _mm512_set1_epi32((q * 16 / S) as i32 - off)));
    std::array::from_fn(|p| _mm512_permutexvar_ps(idx[p % S], z[p / S]))
}

/// One chunk's minimums term of one (weight row, activation row): `mcoef · Σ x` per group, into
/// its own accumulator (so it needs no integer sums and can run apart from the dots).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
pub(crate) unsafe fn epilogue_mins(ch: &Chunk, mc: __m512, x: &XRow, accm: &mut __m512) {
    let (k, g) = window(ch);
    let mc = if ch.g0.is_multiple_of(LANES) { mc } else { _mm512_maskz_expand_ps(k, mc) };
    // SAFETY: the activation row has a scaled sum per group; the masked load reads only this
    // chunk's groups.
    unsafe { *accm = _mm512_mask3_fmadd_ps(mc, _mm512_maskz_loadu_ps(k, x.dsum.add(g)), *accm, k) };
}

/// A chunk's accumulator lanes and the first group of their 16-group window. Group `g0 + l`
/// belongs in lane `(g0 + l) mod 16`: a tail piece after an 8-group one starts at lane 8, so its
/// lanes move up (and the activation's per-group values are read from the window holding them).
#[inline]
fn window(ch: &Chunk) -> (__mmask16, usize) {
    let off = ch.g0 % LANES;
    (lanes(ch.groups) << off, ch.g0 - off)
}
