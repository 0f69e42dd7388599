//! Fused decode kernels (x86 AVX2): quantized weight blocks are expanded to int16 in registers
//! and dotted with the int16 activations straight away, with no panel in memory.
//!
//! They perform exactly the reduction described in [`crate::qmatmul`] — integer group sums,
//! eight groups per vector, the same scale products and fused multiply-adds in the same order —
//! so results are bit-identical to the panel path (tested), whichever path a row takes.

#![cfg(target_arch = "x86_64")]

use crate::ggml::{GgmlType, scale_min_k4};
use crate::matmul::x86_hsum;
use crate::qmatmul::octet;
use crate::quant_act::ActRow;
use std::arch::x86_64::*;

/// Formats with a fused kernel.
pub fn supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q6K
    )
}

/// `out[r] = dot(x, W row r)` for `out.len()` consecutive weight rows starting at `rows`
/// (raw block bytes, `row_bytes` apart).
///
/// # Safety
/// The tier must support AVX2/FMA/F16C; `rows` must hold `out.len()` rows of `x.q.len()` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows(ty: GgmlType, rows: *const u8, row_bytes: usize, x: ActRow, out: &mut [f32]) {
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: row r exists (caller); each kernel reads exactly one row.
        let w = unsafe { rows.add(r * row_bytes) };
        *o = unsafe {
            match ty {
                GgmlType::Q4_0 => dot32::<0>(w, x),
                GgmlType::Q4_1 => dot32::<1>(w, x),
                GgmlType::Q5_0 => dot32::<2>(w, x),
                GgmlType::Q5_1 => dot32::<3>(w, x),
                GgmlType::Q8_0 => dot32::<4>(w, x),
                GgmlType::Q4K => dot_q4k(w, x),
                GgmlType::Q6K => dot_q6k(w, x),
                _ => unreachable!("checked by supported()"),
            }
        };
    }
}

#[inline]
#[target_feature(enable = "avx2")]
fn widen(v: __m256i, bias: i16) -> (__m256i, __m256i) {
    let b = _mm256_set1_epi16(bias);
    (
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), b),
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v)), b),
    )
}

/// Nibbles of a 32-element block as bytes `[lo nibbles (elements 0..16) | hi nibbles (16..32)]`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    let v = unsafe { _mm_loadu_si128(qs as *const __m128i) };
    let m = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(v), m), _mm_and_si128(v, m))
}

/// The fifth bit of each of 32 elements (Q5_0 / Q5_1), as 0x10 per byte.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fifth_bits(qh_ptr: *const u8) -> __m256i {
    let qh = unsafe { (qh_ptr as *const u32).read_unaligned() } as i32;
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits), _mm256_set1_epi8(0x10))
}

/// Integer lanes of one 32-element group.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn lanes32(w0: __m256i, w1: __m256i, xq: *const i16) -> __m256i {
    unsafe {
        let a = _mm256_madd_epi16(w0, _mm256_loadu_si256(xq as *const __m256i));
        let b = _mm256_madd_epi16(w1, _mm256_loadu_si256(xq.add(16) as *const __m256i));
        _mm256_add_epi32(a, b)
    }
}

/// Eight f16 values read `stride` bytes apart (the first `n`; the rest are zero) as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn gather_f16(p: *const u8, stride: usize, n: usize) -> __m256 {
    let mut h = [0u16; 8];
    for (i, v) in h.iter_mut().enumerate().take(n) {
        // SAFETY: the caller guarantees n blocks.
        *v = unsafe { (p.add(i * stride) as *const u16).read_unaligned() };
    }
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr() as *const __m128i) })
}

/// One row of a 32-element-block format. `F`: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q5_1, 4 = Q8_0.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32<const F: u8>(w: *const u8, x: ActRow) -> f32 {
    let blocks = x.q.len() / 32;
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut b0 = 0;
    // SAFETY: every octet stays within the row and the activation row.
    unsafe {
        while b0 + 8 <= blocks {
            octet32::<F, 8>(w, x, b0, &mut acc);
            b0 += 8;
        }
        crate::with_tail!(blocks - b0, octet32, [F], (w, x, b0, &mut acc));
    }
    x86_hsum(acc[0]) + x86_hsum(acc[1])
}

/// Blocks `b0..b0+N` (`N ≤ 8`) of a 32-element-block format into `acc` (values, minimums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn octet32<const F: u8, const N: usize>(w: *const u8, x: ActRow, b0: usize, acc: &mut [__m256; 2]) {
    let ts: usize = [18, 20, 22, 24, 34][F as usize];
    let mut lanes = [_mm256_setzero_si256(); 8];
    // SAFETY: the caller guarantees blocks b0..b0+N.
    unsafe {
        for (i, l) in lanes.iter_mut().enumerate().take(N) {
            let blk = w.add((b0 + i) * ts);
            let (w0, w1) = match F {
                0 => widen(nibbles(blk.add(2)), 8),
                1 => widen(nibbles(blk.add(4)), 0),
                2 => widen(_mm256_or_si256(nibbles(blk.add(6)), fifth_bits(blk.add(2))), 16),
                3 => widen(_mm256_or_si256(nibbles(blk.add(8)), fifth_bits(blk.add(4))), 0),
                _ => {
                    let v = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                    (
                        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)),
                    )
                }
            };
            *l = lanes32(w0, w1, x.q.as_ptr().add((b0 + i) * 32));
        }
        let blk0 = w.add(b0 * ts);
        let (vs, dx) = if N == 8 {
            (gather_f16_8(blk0, ts), _mm256_loadu_ps(x.d.as_ptr().add(b0)))
        } else {
            (gather_f16(blk0, ts, N), octet::load_partial(x.d.as_ptr().add(b0), N))
        };
        acc[0] = octet::finish(acc[0], octet::reduce8(&lanes), vs, dx);
        if F == 1 || F == 3 {
            let (m, ds) = if N == 8 {
                (gather_f16_8(blk0.add(2), ts), _mm256_loadu_ps(x.dsum32.as_ptr().add(b0)))
            } else {
                (gather_f16(blk0.add(2), ts, N), octet::load_partial(x.dsum32.as_ptr().add(b0), N))
            };
            acc[1] = _mm256_fmadd_ps(m, ds, acc[1]);
        }
    }
}

/// Eight f16 values `stride` bytes apart, as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn gather_f16_8(p: *const u8, stride: usize) -> __m256 {
    // SAFETY: the caller guarantees eight blocks.
    unsafe {
        let r = |i: usize| (p.add(i * stride) as *const u16).read_unaligned() as i16;
        let h = _mm_setr_epi16(r(0), r(1), r(2), r(3), r(4), r(5), r(6), r(7));
        _mm256_cvtph_ps(h)
    }
}

/// Q4_K: one 256-element super-block is exactly one octet of 32-element groups.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4k(w: *const u8, x: ActRow) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    for b in 0..x.q.len() / 256 {
        // SAFETY: super-block b of this row and of the activation row exist.
        unsafe {
            let blk = w.add(b * 144);
            let (d, dmin) = (f16_at(blk), f16_at(blk.add(2)));
            let scales = std::slice::from_raw_parts(blk.add(4), 12);
            let mut vs = [0f32; 8];
            let mut mc = [0f32; 8];
            for j in 0..8 {
                let (sc, m) = scale_min_k4(j, scales);
                vs[j] = d * sc as f32;
                mc[j] = -(dmin * m as f32);
            }
            let mut lanes = [_mm256_setzero_si256(); 8];
            let xq = x.q.as_ptr().add(b * 256);
            for c in 0..4 {
                let v = _mm256_loadu_si256(blk.add(16 + 32 * c) as *const __m256i);
                let (l0, l1) = widen(_mm256_and_si256(v, m4), 0);
                let (h0, h1) = widen(_mm256_and_si256(_mm256_srli_epi16::<4>(v), m4), 0);
                lanes[2 * c] = lanes32(l0, l1, xq.add(64 * c));
                lanes[2 * c + 1] = lanes32(h0, h1, xq.add(64 * c + 32));
            }
            let dx = _mm256_loadu_ps(x.d.as_ptr().add(8 * b));
            acc = octet::finish(acc, octet::reduce8(&lanes), _mm256_loadu_ps(vs.as_ptr()), dx);
            accm = _mm256_fmadd_ps(_mm256_loadu_ps(mc.as_ptr()), _mm256_loadu_ps(x.dsum32.as_ptr().add(8 * b)), accm);
        }
    }
    x86_hsum(acc) + x86_hsum(accm)
}

/// Q6_K: one super-block is 16 groups of 16 elements — two octets.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6k(w: *const u8, x: ActRow) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    for b in 0..x.q.len() / 256 {
        // SAFETY: super-block b of this row and of the activation row exist.
        unsafe {
            let blk = w.add(b * 210);
            let d = f16_at(blk.add(208));
            let sc = blk.add(192);
            for half in 0..2 {
                let ql0 = _mm256_loadu_si256(blk.add(64 * half) as *const __m256i);
                let ql1 = _mm256_loadu_si256(blk.add(64 * half + 32) as *const __m256i);
                let qh = _mm256_loadu_si256(blk.add(128 + 32 * half) as *const __m256i);
                // Elements 128·half + 32·q + (0..32) for q = 0..4.
                let es = [
                    _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30)),
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                    ),
                ];
                let xq = x.q.as_ptr().add(b * 256 + 128 * half);
                let mut lanes = [_mm256_setzero_si256(); 8];
                for (q, e) in es.into_iter().enumerate() {
                    let (w0, w1) = widen(e, 32);
                    lanes[2 * q] = _mm256_madd_epi16(w0, _mm256_loadu_si256(xq.add(32 * q) as *const __m256i));
                    lanes[2 * q + 1] = _mm256_madd_epi16(w1, _mm256_loadu_si256(xq.add(32 * q + 16) as *const __m256i));
                }
                let g0 = 16 * b + 8 * half; // first 16-element group of this octet
                let mut vs = [0f32; 8];
                for (i, v) in vs.iter_mut().enumerate() {
                    *v = d * *sc.add(8 * half + i) as i8 as f32;
                }
                let dx = _mm256_loadu_ps(x.d16.as_ptr().add(g0));
                acc = octet::finish(acc, octet::reduce8(&lanes), _mm256_loadu_ps(vs.as_ptr()), dx);
            }
        }
    }
    x86_hsum(acc) + x86_hsum(_mm256_setzero_ps())
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}
