//! AVX2 kernels over [`crate::packed`] weights (rows across lanes), for CPUs without AVX-512:
//! a block's sixteen rows as two halves of eight, one per 256-bit vector. Per group, a half's
//! rows are widened to int16 vectors, one per value pair, and each activation pair, broadcast,
//! is multiplied with them by `vpmaddwd` and added (AVX2 has no `vpdpwssd`): eight rows' group
//! sums in eight lanes, with no horizontal reduction, for up to eight activation rows at once.
//!
//! The float epilogue is [`crate::qmatmul::chained_reference`]'s, as in
//! [`crate::packed_avx512`]: per group, in order, `acc = fma(isum, vscale·dx, acc)` (and the
//! minimums' own chain), so results have that reference's bits, the AVX-512 tier's, whatever
//! the batch. (The panel kernels of [`crate::qmatmul`] that this tier ran before reduce each
//! group's lanes horizontally per output: 5–10× slower at prefill.)
//!
//! A format's bias (`u = q + bias` is stored) comes off the integer sum as `bias · Σx` of the
//! group (exact), not off every widened value.

#![cfg(target_arch = "x86_64")]

use crate::packed::{
    ACT_ROWS, ActChunk, ActChunks, FORMATS, LANES, Packed, STEP, Scales, by_format, fetch_part, mask_at, step_bytes,
};
use crate::qpanel::group_of;
use std::arch::x86_64::*;

/// Rows in a half block: the 32-bit lanes of a 256-bit vector.
const HALF: usize = LANES / 2;

/// 16 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load16(p: *const u8) -> __m128i {
    // SAFETY: 16 readable bytes (the caller).
    unsafe { _mm_loadu_si128(p as *const __m128i) }
}

/// Vector `t` of half `h` of the stored values of the step at `p` (the layout of
/// [`crate::packed`]'s `encode_step`: lane `i` of a 512-bit vector is byte `i` of a byte plane,
/// bit `i` of a mask; half `h` takes lanes `16h..16h + 16`), unbiased. One vector at a time,
/// each dotted before the next is made: four in registers beside eight rows' sums spilled.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn expand_one<const F: usize>(p: *const u8, h: usize, t: usize) -> __m256i {
    let bits = FORMATS[F].1.bits;
    // SAFETY: the step's bytes (the caller).
    unsafe {
        if bits == 8 {
            return _mm256_cvtepi8_epi16(load16(p.add(32 * t + 16 * h)));
        }
        let (mut v, mut at) = (_mm256_setzero_si256(), 0);
        if matches!(bits, 4..=6) {
            let z = _mm256_cvtepu8_epi16(load16(p.add(32 * (t / 2) + 16 * h)));
            v = if t.is_multiple_of(2) {
                _mm256_and_si256(z, _mm256_set1_epi16(0x0F))
            } else {
                _mm256_srli_epi16::<4>(z)
            };
            at = 16 * STEP;
        }
        if matches!(bits, 2 | 3 | 6) {
            let hb = _mm256_cvtepu8_epi16(load16(p.add(at + 16 * h)));
            v = if bits == 6 {
                // v | (bits 2t..2t+2 of hb) << 4.
                let hs = match t {
                    0 => _mm256_slli_epi16::<4>(hb),
                    1 => _mm256_slli_epi16::<2>(hb),
                    2 => hb,
                    _ => _mm256_srli_epi16::<2>(hb),
                };
                _mm256_or_si256(v, _mm256_and_si256(hs, _mm256_set1_epi16(0x30)))
            } else {
                let two = match t {
                    0 => hb,
                    1 => _mm256_srli_epi16::<2>(hb),
                    2 => _mm256_srli_epi16::<4>(hb),
                    _ => _mm256_srli_epi16::<6>(hb),
                };
                _mm256_and_si256(two, _mm256_set1_epi16(3))
            };
        }
        if matches!(bits, 3 | 5) {
            // Lane i adds 16 (4) where bit i of the half's 16 mask bits is set.
            let sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, i16::MIN);
            let k = (p.add(mask_at(bits, t) + 2 * h) as *const i16).read_unaligned();
            let set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(k), sel), sel);
            v = _mm256_add_epi16(v, _mm256_and_si256(set, _mm256_set1_epi16(if bits == 5 { 16 } else { 4 })));
        }
        v
    }
}

/// Vector `t` of both halves at once, as [`expand_one`] makes each, for the formats with a mask
/// (3 and 5 bits): the step's bytes combined at byte width (both halves' 32 lanes in one
/// vector, so the mask costs a few byte operations for 32 lanes, not five 16-bit ones per
/// half), widened last.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn expand_pair<const F: usize>(p: *const u8, t: usize) -> [__m256i; 2] {
    let bits = FORMATS[F].1.bits;
    debug_assert!(matches!(bits, 3 | 5));
    // SAFETY: 32 bytes of the step at `q` (the caller).
    let load32 = |q: *const u8| unsafe { _mm256_loadu_si256(q as *const __m256i) };
    let low = |v: __m256i, m: i8| _mm256_and_si256(v, _mm256_set1_epi8(m));
    // SAFETY: the step's bytes (the caller).
    unsafe {
        let v = if bits == 5 {
            // (16-bit shifts move bits across bytes; the masks take them off.)
            let z = load32(p.add(32 * (t / 2)));
            low(if t.is_multiple_of(2) { z } else { _mm256_srli_epi16::<4>(z) }, 0x0F)
        } else {
            let hb = load32(p);
            let two = match t {
                0 => hb,
                1 => _mm256_srli_epi16::<2>(hb),
                2 => _mm256_srli_epi16::<4>(hb),
                _ => _mm256_srli_epi16::<6>(hb),
            };
            low(two, 3)
        };
        // Byte i gets mask byte i / 8, keeps bit i % 8 (every other bit set), and is all ones
        // where that bit was set.
        let k = _mm256_set1_epi32((p.add(mask_at(bits, t)) as *const i32).read_unaligned());
        let spread = _mm256_shuffle_epi8(
            k,
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            ),
        );
        let others = _mm256_set1_epi64x(0x7FBF_DFEF_F7FB_FDFE);
        let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
        let v = _mm256_or_si256(v, low(set, if bits == 5 { 16 } else { 4 }));
        [_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v))]
    }
}

/// Half `h`'s eight rows' `(vscale, mcoef)` of group `g` of the block at `blk`, as the scalar
/// tier computes them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales<const F: usize>(blk: *const u8, l: &crate::packed::Layout, g: usize, h: usize) -> (__m256, __m256) {
    // SAFETY: the headers hold these fields (the layout).
    unsafe {
        let h16 = |p: *const u8| _mm256_cvtph_ps(load16(p.add(2 * HALF * h)));
        let hdr = blk.add(l.group_at(g));
        match FORMATS[F].1.scales {
            Scales::PerGroup { mins } => (h16(hdr), if mins { h16(hdr.add(2 * LANES)) } else { _mm256_setzero_ps() }),
            Scales::Super { signed, mins, .. } => {
                let sb = blk.add(l.sb_at(g));
                let ints = |p: *const u8| {
                    let b = _mm_loadl_epi64(p.add(HALF * h) as *const __m128i);
                    _mm256_cvtepi32_ps(if signed { _mm256_cvtepi8_epi32(b) } else { _mm256_cvtepu8_epi32(b) })
                };
                let vs = _mm256_mul_ps(h16(sb), ints(hdr));
                let mc = if mins {
                    let m = _mm256_mul_ps(h16(sb.add(2 * LANES)), ints(hdr.add(LANES)));
                    _mm256_xor_ps(m, _mm256_set1_ps(-0.0))
                } else {
                    _mm256_setzero_ps()
                };
                (vs, mc)
            }
        }
    }
}

/// Group `g`'s integer sums of halves `h0..h0 + H` of the block at `blk` and the chunk's `C`
/// rows: step by step, a half's four weight vectors in registers, each activation pair
/// broadcast and multiplied with them. The sums start at `−bias · Σx` of the group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sums<const F: usize, const C: usize, const H: usize>(
    blk: *const u8,
    l: &crate::packed::Layout,
    x: &ActChunk,
    g: usize,
    h0: usize,
) -> [[__m256i; C]; H] {
    let group = group_of(FORMATS[F].0);
    let bias = FORMATS[F].1.bias as i32;
    // SAFETY: the chunk has the group's sums and pairs of its C rows; the block has group g.
    unsafe {
        let start: [__m256i; C] = std::array::from_fn(|c| _mm256_set1_epi32(-bias * *x.sum.add(g * C + c)));
        let mut s = [start; H];
        let xg = x.q.add(group / 2 * g * C);
        let at = blk.add(l.group_at(g) + l.header_bytes);
        for st in 0..group / 2 / STEP {
            let at = at.add(st * step_bytes(FORMATS[F].1.bits));
            if H == 2 {
                // Both halves from one expansion, each broadcast serving both.
                for j in 0..STEP {
                    // (Masks pay for combining at byte width; other formats widen a half's bytes
                    // in one instruction from memory, fewer than widening a combined vector.)
                    let w = match FORMATS[F].1.bits {
                        3 | 5 => expand_pair::<F>(at, j),
                        _ => [expand_one::<F>(at, 0, j), expand_one::<F>(at, 1, j)],
                    };
                    for c in 0..C {
                        let t = _mm256_set1_epi32(*xg.add((STEP * st + j) * C + c) as i32);
                        for (s, w) in s.iter_mut().zip(w) {
                            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(w, t));
                        }
                    }
                }
                continue;
            }
            for (hi, s) in s.iter_mut().enumerate() {
                for j in 0..STEP {
                    let w = expand_one::<F>(at, h0 + hi, j);
                    for (c, s) in s.iter_mut().enumerate() {
                        let t = _mm256_set1_epi32(*xg.add((STEP * st + j) * C + c) as i32);
                        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(w, t));
                    }
                }
            }
        }
        s
    }
}

/// Blocks to fetch while computing: `share` bytes of each of `blocks` per group, from `start`.
#[derive(Clone, Copy)]
struct Ahead<'a> {
    blocks: Option<(&'a Packed, [usize; 2])>,
    start: usize,
    share: usize,
}

/// Halves `h0..h0 + H` of the block at `blk` against the chunk's `C` rows: the reference's
/// chains, each row's accumulator carried through the groups in order. Group `g` fetches its
/// share of blocks `ahead` (one stream of weights left the core waiting on memory between its
/// dots: Q4_0 decode at ~60 % of one core's DRAM speed).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn by_group<const F: usize, const C: usize, const H: usize>(
    blk: *const u8,
    l: &crate::packed::Layout,
    x: &ActChunk,
    h0: usize,
    ahead: Ahead,
) -> [[__m256; C]; H] {
    let mins = FORMATS[F].1.scales.mins();
    let (mut acc, mut accm) = ([[_mm256_setzero_ps(); C]; H], [[_mm256_setzero_ps(); C]; H]);
    for g in 0..l.groups {
        if let Some((q, blocks)) = ahead.blocks {
            blocks.iter().for_each(|&a| fetch_part(q, a, ahead.start + g * ahead.share, ahead.share));
        }
        // SAFETY: group g exists; the chunk has C rows with a scale and scaled sum per group.
        unsafe {
            let s = sums::<F, C, H>(blk, l, x, g, h0);
            for hi in 0..H {
                let (vs, mc) = scales::<F>(blk, l, g, h0 + hi);
                for c in 0..C {
                    let at = g * C + c;
                    let dx = _mm256_set1_ps(*x.d.add(at));
                    acc[hi][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[hi][c]), _mm256_mul_ps(vs, dx), acc[hi][c]);
                    if mins {
                        accm[hi][c] = _mm256_fmadd_ps(mc, _mm256_set1_ps(*x.dsum.add(at)), accm[hi][c]);
                    }
                }
            }
        }
    }
    // (Without minimums theirs is +0, as the reference's.)
    std::array::from_fn(|hi| std::array::from_fn(|c| _mm256_add_ps(acc[hi][c], accm[hi][c])))
}

/// Blocks `b` of `p` (the first `n` of them real) against activation rows `xs` of `a` (from a
/// multiple of [`ACT_ROWS`], laid out as pairs), a chunk at a time: output row `i` gets block
/// `b[k]`'s sixteen values at `out + i · p.rows + 16 · b[k]`, those at or past `p.rows` left
/// alone. Blocks `ahead` are fetched a share per group computed, over all chunks.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C; no other thread writes these outputs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_rows(
    p: &Packed,
    (b, n): ([usize; 2], usize),
    ahead: Option<(&Packed, [usize; 2])>,
    a: &ActChunks,
    xs: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: as vouched by the caller.
    unsafe { by_format!(p.index, F => block_rows_f::<F>(p, (b, n), ahead, a, xs, out)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_rows_f<const F: usize>(
    p: &Packed,
    (b, n): ([usize; 2], usize),
    ahead: Option<(&Packed, [usize; 2])>,
    a: &ActChunks,
    xs: std::ops::Range<usize>,
    out: *mut f32,
) {
    let (l, group) = (&p.layout, group_of(FORMATS[F].0));
    // (One division per call: per group it would cost as much as the group's dots.)
    let passes = xs.len().div_ceil(ACT_ROWS);
    let share = ahead.map_or(0, |(q, _)| q.layout.block_bytes.div_ceil(n * passes * l.groups));
    for (k, &bk) in b[..n].iter().enumerate() {
        let blk = p.block(bk).as_ptr();
        for (pass, c0) in xs.clone().step_by(ACT_ROWS).enumerate() {
            let x = a.chunk(c0, group);
            // Stores half h's results of the chunk's rows (lanes at or past p.rows left alone).
            let store = |h: usize, i: usize, v: __m256| {
                let row0 = bk * LANES + h * HALF;
                let valid = p.rows.saturating_sub(row0).min(HALF);
                // SAFETY: the valid lanes are outputs of row c0 + i within `p.rows`.
                unsafe {
                    let at = out.add((c0 + i) * p.rows + row0);
                    if valid == HALF {
                        _mm256_storeu_ps(at, v);
                    } else if valid > 0 {
                        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                        _mm256_maskstore_ps(at, _mm256_cmpgt_epi32(_mm256_set1_epi32(valid as i32), lane), v);
                    }
                }
            };
            macro_rules! go {
                ($C:literal, $H:literal) => {{
                    for h0 in (0..2).step_by($H) {
                        // (The second half's pass fetches nothing.)
                        let blocks = ahead.filter(|_| h0 == 0);
                        let start = (k * passes + pass) * l.groups * share;
                        let ahead = Ahead { blocks, start, share };
                        // SAFETY: block bk and its groups exist; the chunk has C rows.
                        let r = unsafe { by_group::<F, $C, $H>(blk, l, &x, h0, ahead) };
                        for (hi, r) in r.iter().enumerate() {
                            r.iter().enumerate().for_each(|(i, v)| store(h0 + hi, i, *v));
                        }
                    }
                }};
            }
            // Up to four rows both halves together (2·C sums in registers), more one half at a
            // time. (Eight rows as two fours, both halves each, measured no faster.)
            match x.c {
                8 => go!(8, 1),
                7 => go!(7, 1),
                6 => go!(6, 1),
                5 => go!(5, 1),
                4 => go!(4, 2),
                3 => go!(3, 2),
                2 => go!(2, 2),
                _ => go!(1, 2),
            }
        }
    }
}
