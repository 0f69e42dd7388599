//! The many-row path of the AVX-512 VNNI tier (prefill, batched decode): a tile's four weight
//! rows are expanded once to int16 (bias taken off) with their scales, then every activation
//! row of the block is dotted against the expanded values four at a time.
//!
//! [`crate::packed_avx512::tile`] expands the weights in registers for each group of up to four
//! activation rows, so 2–4 vector operations of expansion share the ports with every four
//! `vpdpwssd`. Expanded once per tile and block of activation rows, the inner loop is loads and
//! `vpdpwssd` only. The integer sums are the same exact integers and the float epilogue is the
//! same, in the same order, so the bits equal the scalar tier's.

#![cfg(target_arch = "x86_64")]

use crate::packed::{FORMATS, Packed, ROW_TILE, header_bytes, step_bytes};
use crate::packed_avx512::{
    XRow, by_format, epilogue, epilogue_mins, epilogue_placed, expand, place_x16, scales, sums,
};
use std::arch::x86_64::*;

/// A tile's four rows expanded: `vals[r · nv + i]` is int16 vector `i` of row `r`'s interleaved
/// layout (`nv = x_len / 32`), `scales[chunk][r]` the row's `(vscale, mcoef)` of that chunk.
#[derive(Default)]
pub struct Expanded {
    vals: Vec<__m512i>,
    scales: Vec<[(__m512, __m512); ROW_TILE]>,
    nv: usize,
    /// Results of a task's tiles for one block of activation rows, tile by tile
    /// ([`tile_rows`]'s layout), before they are written out in runs.
    pub staged: Vec<f32>,
}

/// Expands tile `t` of `p` into `e` (reusing its storage).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn expand_tile(p: &Packed, t: usize, e: &mut Expanded, prefetch: bool) {
    // SAFETY: as vouched by the caller.
    unsafe { by_format!(p.index, F => expand_tile_f::<F>(p, t, e, prefetch)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn expand_tile_f<const F: usize>(p: &Packed, t: usize, e: &mut Expanded, prefetch: bool) {
    let f = FORMATS[F].1;
    let plan = &p.plan;
    assert!(t < p.tiles() && p.data.bytes().len() == ROW_TILE * p.tiles() * plan.row_bytes);
    let nv = plan.x_len / 32;
    e.nv = nv;
    e.vals.resize(ROW_TILE * nv, _mm512_setzero_si512());
    e.scales.resize(plan.chunks.len(), [(_mm512_setzero_ps(), _mm512_setzero_ps()); ROW_TILE]);
    let bias = _mm512_set1_epi16(f.bias);
    let ahead = t + crate::packed_avx512::PREFETCH_TILES;
    for r in 0..ROW_TILE {
        let row = p.row_of(t, r);
        if prefetch && ahead < p.tiles() {
            let at = p.row_of(ahead, r) * plan.row_bytes;
            crate::matmul::x86::prefetch_lines(p.data.bytes()[at..].as_ptr(), plan.row_bytes);
        }
        for (ci, ch) in plan.chunks.iter().enumerate() {
            let base = p.data.bytes()[p.chunk_at(row, ch)..].as_ptr();
            let (step, first) = (ch.step(), r * nv + ch.x_offset / 32);
            let sb = step_bytes(f.bits, step);
            // SAFETY: the chunk's header and steps are within the row (offsets from the plan).
            unsafe {
                e.scales[ci][r] = scales::<F>(base, ch.groups);
                let w = base.add(header_bytes(f, ch.groups));
                for st in 0..ch.v / step {
                    let out = &mut e.vals[first + st * step..first + (st + 1) * step];
                    let mut v = [_mm512_setzero_si512(); 4];
                    if step == 4 {
                        v = expand::<F, 4>(w.add(st * sb));
                    } else {
                        v[..2].copy_from_slice(&expand::<F, 2>(w.add(st * sb)));
                    }
                    for (o, v) in out.iter_mut().zip(v) {
                        // (Q4_1, Q8_0, most k-quants store values unbiased.)
                        *o = if f.bias == 0 { v } else { _mm512_sub_epi16(v, bias) };
                    }
                }
            }
        }
    }
}

/// The tile expanded in `e` against every row of `xs`: `out[4·i + r]` is row `i` of `xs` times
/// the tile's row `r` (a contiguous block, so a call stores whole vectors into a staging
/// buffer rather than sixteen floats into sixteen output rows).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI; `e` holds a tile of `p` ([`expand_tile`]); `xs`
/// rows must be interleaved by `p.plan`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn tile_rows(p: &Packed, e: &Expanded, xs: &[XRow], out: &mut [f32]) {
    // SAFETY: as vouched by the caller.
    unsafe { by_format!(p.index, F => rows_f::<F>(p, e, xs, out)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_f<const F: usize>(p: &Packed, e: &Expanded, xs: &[XRow], out: &mut [f32]) {
    assert_eq!(out.len(), ROW_TILE * xs.len());
    let mut i = 0;
    while i < xs.len() {
        let c = (xs.len() - i).min(4);
        let (x, o) = (&xs[i..i + c], &mut out[ROW_TILE * i..ROW_TILE * (i + c)]);
        // SAFETY: as vouched by the caller.
        unsafe {
            match c {
                4 => o.copy_from_slice(tile_f::<F, 4>(p, e, x.try_into().expect("4")).as_flattened()),
                3 => o.copy_from_slice(tile_f::<F, 3>(p, e, x.try_into().expect("3")).as_flattened()),
                2 => o.copy_from_slice(tile_f::<F, 2>(p, e, x.try_into().expect("2")).as_flattened()),
                _ => o.copy_from_slice(tile_f::<F, 1>(p, e, x.try_into().expect("1")).as_flattened()),
            }
        }
        i += c;
    }
}

/// `out[c][r] = x[c] · row p.row_of(t, r)` for the tile expanded in `e` and `C` activation rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_f<const F: usize, const C: usize>(p: &Packed, e: &Expanded, x: &[XRow; C]) -> [[f32; ROW_TILE]; C] {
    let mut acc = [[_mm512_setzero_ps(); C]; ROW_TILE];
    let mut accm = [[_mm512_setzero_ps(); C]; ROW_TILE];
    assert!(e.nv == p.plan.x_len / 32 && e.scales.len() == p.plan.chunks.len());
    for (ch, sc) in p.plan.chunks.iter().zip(&e.scales) {
        // SAFETY: vectors x_offset/32 .. + v of every expanded row and activation row exist.
        unsafe {
            let w = e.vals.as_ptr().add(ch.x_offset / 32);
            let xq: [*const i16; C] = std::array::from_fn(|c| x[c].q.wrapping_add(ch.x_offset));
            let isums = dots::<C>(w, e.nv, xq, ch.v);
            if ch.s > 1 && C == 4 {
                // A tail chunk: its lanes are gathered for all sixteen pairs at once.
                let v = std::array::from_fn(|p| isums[p % ROW_TILE][p / ROW_TILE]);
                let fs = match ch.s {
                    2 => place_x16::<2>(ch, v),
                    4 => place_x16::<4>(ch, v),
                    _ => place_x16::<8>(ch, v),
                };
                for r in 0..ROW_TILE {
                    for c in 0..C {
                        epilogue_placed(ch, fs[ROW_TILE * c + r], sc[r].0, &x[c], &mut acc[r][c]);
                    }
                }
            } else {
                for r in 0..ROW_TILE {
                    for c in 0..C {
                        epilogue::<F>(ch, isums[r][c], sc[r].0, &x[c], false, &mut acc[r][c]);
                    }
                }
            }
        }
    }
    // The minimums' terms apart: their accumulators need not be live beside the dots'.
    if FORMATS[F].1.scales.mins() {
        for (ch, sc) in p.plan.chunks.iter().zip(&e.scales) {
            for r in 0..ROW_TILE {
                for c in 0..C {
                    // SAFETY: as above.
                    unsafe { epilogue_mins(ch, sc[r].1, &x[c], &mut accm[r][c]) };
                }
            }
        }
    }
    sums(&acc, &accm)
}

/// The integer lanes of one chunk's `v` vectors for the four expanded rows (`nv` vectors apart
/// from `w`) and `C` activation rows: register operands only, so each step is `4 + C` loads and
/// `4·C` `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dots<const C: usize>(w: *const __m512i, nv: usize, x: [*const i16; C], v: usize) -> [[__m512i; C]; ROW_TILE] {
    let mut acc = [[_mm512_setzero_si512(); C]; ROW_TILE];
    for i in 0..v {
        let mut xv = [_mm512_setzero_si512(); C];
        for c in 0..C {
            // SAFETY: vector i of the chunk in activation row c (64-byte aligned: `Interleaved`).
            xv[c] = unsafe { _mm512_load_si512(x[c].add(32 * i) as *const __m512i) };
        }
        // Rows unrolled by hand, as in the register-expanding kernel.
        macro_rules! row {
            ($r:literal) => {
                // SAFETY: vector i of the chunk in expanded row r.
                let wr = unsafe { _mm512_load_si512(w.add($r * nv + i)) };
                for c in 0..C {
                    dpwssd(&mut acc[$r][c], wr, xv[c]);
                }
            };
        }
        row!(0);
        row!(1);
        row!(2);
        row!(3);
    }
    acc
}

/// `acc += Σ pairs of w · x` by `vpdpwssd` on registers (inline assembly: LLVM splits the
/// intrinsic into `vpmaddwd` + `vpaddd` for a generic x86-64 target).
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn dpwssd(acc: &mut __m512i, w: __m512i, x: __m512i) {
    // SAFETY: register-only arithmetic.
    unsafe {
        std::arch::asm!("vpdpwssd {a}, {w}, {x}", a = inout(zmm_reg) *acc, w = in(zmm_reg) w, x = in(zmm_reg) x,
            options(pure, nomem, nostack, preserves_flags));
    }
}

/// A task's staged results for `nb` activation rows written out: `staged[i·4·nb + 4c + r]`
/// (tile `i` of the task, activation row `c`, band `r`) goes to
/// `out[c · rows + starts[r] + i]`, outputs at or past `rows` dropped (the last band's padding).
///
/// Each band's run of tiles is consecutive in the output, so 16 tiles × 4 activation rows are
/// moved at once by a 16 × 16 transposition (64 shuffles for 256 values, against two scalar
/// memory operations each).
///
/// # Safety
/// The CPU must support AVX-512 F; `out` holds `nb` rows of `rows` values, which no other
/// thread writes at the runs' places.
#[target_feature(enable = "avx512f")]
pub unsafe fn write_runs(staged: &[f32], nb: usize, starts: [usize; ROW_TILE], rows: usize, out: *mut f32) {
    let per_tile = ROW_TILE * nb;
    let nt = staged.len() / per_tile;
    assert_eq!(staged.len(), nt * per_tile);
    // How many of the 16 outputs from tile i0 on are in the matrix, per band.
    let len = |r: usize, i0: usize| (nt - i0).min(16).min(rows.saturating_sub(starts[r] + i0));
    let whole = nb / 4 * 4;
    for c0 in (0..whole).step_by(4) {
        for i0 in (0..nt).step_by(16) {
            let n = (nt - i0).min(16);
            let tiles: [__m512; 16] = std::array::from_fn(|k| {
                let at = (i0 + k) * per_tile + ROW_TILE * c0;
                // SAFETY: 16 values of tile i0 + k (k < n) within `staged`.
                if k < n { unsafe { _mm512_loadu_ps(staged.as_ptr().add(at)) } } else { _mm512_setzero_ps() }
            });
            let runs = transpose16(&tiles);
            for (l, run) in runs.into_iter().enumerate() {
                let (c, r) = (c0 + l / ROW_TILE, l % ROW_TILE);
                let mask = ((1u32 << len(r, i0)) - 1) as u16;
                // SAFETY: the unmasked lanes are outputs of row c within `rows` (the caller).
                unsafe { _mm512_mask_storeu_ps(out.add(c * rows + starts[r] + i0), mask, run) };
            }
        }
    }
    for c in whole..nb {
        for (r, &start) in starts.iter().enumerate() {
            for i in 0..nt.min(rows.saturating_sub(start)) {
                // SAFETY: as above.
                unsafe { *out.add(c * rows + start + i) = staged[i * per_tile + ROW_TILE * c + r] };
            }
        }
    }
}

/// `out[l]` lane `k` = `v[k]` lane `l`: pairs of 32-bit lanes, then of 64-bit lanes, then a
/// 4 × 4 transposition of 128-bit quarters.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(v: &[__m512; 16]) -> [__m512; 16] {
    // s1[2j], s1[2j+1]: quarter q holds (v[2j], v[2j+1]) at elements (q,0),(q,1) and (q,2),(q,3).
    let s1: [__m512; 16] = std::array::from_fn(|i| {
        let (a, b) = (v[i & !1], v[i | 1]);
        if i % 2 == 0 { _mm512_unpacklo_ps(a, b) } else { _mm512_unpackhi_ps(a, b) }
    });
    // s2[4j + e]: quarter q holds element (q, e) of v[4j..4j + 4].
    let s2: [__m512; 16] = std::array::from_fn(|i| {
        let (j, e) = (i / 4, i % 4);
        let (x, y) = (_mm512_castps_pd(s1[4 * j + e / 2]), _mm512_castps_pd(s1[4 * j + 2 + e / 2]));
        _mm512_castpd_ps(if e % 2 == 0 { _mm512_unpacklo_pd(x, y) } else { _mm512_unpackhi_pd(x, y) })
    });
    // Per element e, quarter j of out[4q + e] is quarter q of s2[4j + e].
    let mut out = [_mm512_setzero_ps(); 16];
    for e in 0..4 {
        let p = [s2[e], s2[4 + e], s2[8 + e], s2[12 + e]];
        let t0 = _mm512_shuffle_f32x4::<0x44>(p[0], p[1]);
        let t1 = _mm512_shuffle_f32x4::<0xEE>(p[0], p[1]);
        let t2 = _mm512_shuffle_f32x4::<0x44>(p[2], p[3]);
        let t3 = _mm512_shuffle_f32x4::<0xEE>(p[2], p[3]);
        out[e] = _mm512_shuffle_f32x4::<0x88>(t0, t2);
        out[4 + e] = _mm512_shuffle_f32x4::<0xDD>(t0, t2);
        out[8 + e] = _mm512_shuffle_f32x4::<0x88>(t1, t3);
        out[12 + e] = _mm512_shuffle_f32x4::<0xDD>(t1, t3);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs written by [`write_runs`] equal the plain copy, for partial blocks of tiles and
    /// activation rows and a clipped last band.
    #[test]
    fn write_runs_is_the_scalar_copy() {
        if !crate::isa::Tier::Avx512.supported() {
            return;
        }
        let mut seed = 7u32;
        for (nt, nb, rows) in
            [(1usize, 1usize, 4usize), (5, 3, 20), (16, 4, 64), (17, 5, 65), (32, 8, 126), (33, 9, 130)]
        {
            let per_tile = ROW_TILE * nb;
            let staged: Vec<f32> = (0..nt * per_tile)
                .map(|_| {
                    seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                    (seed >> 8) as f32 / 65536.0 - 128.0
                })
                .collect();
            let bands = rows.div_ceil(ROW_TILE);
            let starts = [0, 1, 2, 3].map(|r| r * bands + bands.saturating_sub(nt));
            let mut want = vec![f32::NAN; nb * rows];
            for c in 0..nb {
                for (r, &s) in starts.iter().enumerate() {
                    for i in (0..nt).take_while(|&i| s + i < rows) {
                        want[c * rows + s + i] = staged[i * per_tile + ROW_TILE * c + r];
                    }
                }
            }
            let mut got = vec![f32::NAN; nb * rows];
            // SAFETY: checked above; `got` holds nb rows of `rows`.
            unsafe { write_runs(&staged, nb, starts, rows, got.as_mut_ptr()) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "nt {nt} nb {nb} rows {rows}");
        }
    }
}
