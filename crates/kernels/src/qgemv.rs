//! Fused decode kernels (x86 AVX2): quantized weight blocks are expanded to int16 in registers
//! and dotted with the int16 activations straight away, with no panel in memory.
//!
//! They perform exactly the operations of the panel path in [`crate::qmatmul`] — same integer
//! lanes, same scale products, same fused multiply-adds in the same order — so results are
//! bit-identical to it (tested), and a row's output does not depend on which path ran.

#![cfg(target_arch = "x86_64")]

use crate::ggml::{GgmlType, scale_min_k4};
use crate::quant_act::{ActRow, QA_BLOCK};
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

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    f16(unsafe { (p as *const u16).read_unaligned() })
}

/// Accumulator of one output: 8 float lanes plus the scalar minimum term.
#[derive(Clone, Copy)]
struct Acc {
    v: __m256,
    s: f32,
}

/// One 32-element group: `acc += cvt(madd(w0,x0) + madd(w1,x1)) · (vs·dx)`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn group32(acc: &mut Acc, w0: __m256i, w1: __m256i, x0: __m256i, x1: __m256i, vs: f32, dx: f32) {
    let lanes = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
    acc.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(vs * dx), acc.v);
}

/// One 16-element group.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn group16(acc: &mut Acc, w: __m256i, x: __m256i, vs: f32, dx: f32) {
    acc.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(w, x)), _mm256_set1_ps(vs * dx), acc.v);
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

/// `out[r] = dot(x, W row r)` for up to four consecutive weight rows starting at `rows`
/// (raw block bytes, `row_bytes` apart).
///
/// # Safety
/// The tier must support AVX2/FMA/F16C; `rows` must hold `out.len()` rows of `x.q.len()` elements.
pub unsafe fn dot_rows(ty: GgmlType, rows: *const u8, row_bytes: usize, x: ActRow, out: &mut [f32]) {
    macro_rules! go {
        ($f:ident) => {
            unsafe {
                match out.len() {
                    1 => $f::<1>(rows, row_bytes, x, out),
                    2 => $f::<2>(rows, row_bytes, x, out),
                    3 => $f::<3>(rows, row_bytes, x, out),
                    _ => $f::<4>(rows, row_bytes, x, out),
                }
            }
        };
    }
    match ty {
        GgmlType::Q4_0 => go!(dot_q4_0),
        GgmlType::Q4_1 => go!(dot_q4_1),
        GgmlType::Q5_0 => go!(dot_q5_0),
        GgmlType::Q5_1 => go!(dot_q5_1),
        GgmlType::Q8_0 => go!(dot_q8_0),
        GgmlType::Q4K => go!(dot_q4k),
        GgmlType::Q6K => go!(dot_q6k),
        _ => unreachable!("checked by supported()"),
    }
}

/// Stamps out a kernel for one 32-element-block format: `$w` computes the int16 halves of the
/// block at `$blk`, `$min` (if any) the block's minimum coefficient.
macro_rules! kernel32 {
    ($name:ident, $ts:expr, |$blk:ident| $w:expr, $min:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize>(rows: *const u8, rb: usize, x: ActRow, out: &mut [f32]) {
            let k = x.q.len();
            let mut acc = [Acc { v: _mm256_setzero_ps(), s: 0.0 }; R];
            let (xp, dp, sp) = (x.q.as_ptr(), x.d.as_ptr(), x.sum16.as_ptr());
            for b in 0..k / 32 {
                // SAFETY: the caller vouched for R rows of k elements and a k-long activation row.
                unsafe {
                    let x0 = _mm256_loadu_si256(xp.add(32 * b) as *const __m256i);
                    let x1 = _mm256_loadu_si256(xp.add(32 * b + 16) as *const __m256i);
                    let dx = *dp.add(b);
                    let xs = (*sp.add(2 * b) + *sp.add(2 * b + 1)) as f32;
                    for (rr, a) in acc.iter_mut().enumerate() {
                        let $blk = rows.add(rr * rb + b * $ts);
                        let (w0, w1) = $w;
                        group32(a, w0, w1, x0, x1, f16_at($blk), dx);
                        let min: Option<f32> = $min;
                        if let Some(m) = min {
                            a.s = (m * dx).mul_add(xs, a.s);
                        }
                    }
                    let _ = xs;
                }
            }
            finish(&acc, out);
        }
    };
}

kernel32!(dot_q4_0, 18, |blk| widen(nibbles(blk.add(2)), 8), None);
kernel32!(dot_q4_1, 20, |blk| widen(nibbles(blk.add(4)), 0), Some(f16_at(blk.add(2))));
kernel32!(dot_q5_0, 22, |blk| widen(_mm256_or_si256(nibbles(blk.add(6)), fifth_bits(blk.add(2))), 16), None);
kernel32!(
    dot_q5_1,
    24,
    |blk| widen(_mm256_or_si256(nibbles(blk.add(8)), fifth_bits(blk.add(4))), 0),
    Some(f16_at(blk.add(2)))
);
kernel32!(
    dot_q8_0,
    34,
    |blk| {
        let v = _mm256_loadu_si256(blk.add(2) as *const __m256i);
        (_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)))
    },
    None
);

/// Stamps out a kernel for one 256-element super-block format with a per-block function.
macro_rules! kernel256 {
    ($name:ident, $ts:expr, $block:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize>(rows: *const u8, rb: usize, x: ActRow, out: &mut [f32]) {
            let k = x.q.len();
            let mut acc = [Acc { v: _mm256_setzero_ps(), s: 0.0 }; R];
            let (xp, dp, sp) = (x.q.as_ptr(), x.d.as_ptr(), x.sum16.as_ptr());
            for b in 0..k / 256 {
                for (rr, a) in acc.iter_mut().enumerate() {
                    // SAFETY: as for the 32-element kernels.
                    unsafe { $block(a, rows.add(rr * rb + b * $ts), xp.add(256 * b), dp.add(8 * b), sp.add(16 * b)) };
                }
            }
            finish(&acc, out);
        }
    };
}

kernel256!(dot_q4k, 144, q4k_block);
kernel256!(dot_q6k, 210, q6k_block);

#[inline]
#[target_feature(enable = "avx2,fma")]
fn finish(acc: &[Acc], out: &mut [f32]) {
    for (o, a) in out.iter_mut().zip(acc) {
        *o = crate::matmul::x86_hsum(a.v) + a.s;
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_block(a: &mut Acc, blk: *const u8, xq: *const i16, dx: *const f32, s16: *const i32) {
    unsafe {
        let (d, dmin) = (f16_at(blk), f16_at(blk.add(2)));
        let scales = std::slice::from_raw_parts(blk.add(4), 12);
        let m = _mm256_set1_epi8(0x0F);
        for c in 0..4 {
            let v = _mm256_loadu_si256(blk.add(16 + 32 * c) as *const __m256i);
            let halves = [_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16::<4>(v), m)];
            for (h, bytes) in halves.into_iter().enumerate() {
                let g = 2 * c + h; // group = 32 elements = one activation block
                let (sc, mn) = scale_min_k4(g, scales);
                let (w0, w1) = widen(bytes, 0);
                let x0 = _mm256_loadu_si256(xq.add(32 * g) as *const __m256i);
                let x1 = _mm256_loadu_si256(xq.add(32 * g + 16) as *const __m256i);
                let dxg = *dx.add(g);
                group32(a, w0, w1, x0, x1, d * sc as f32, dxg);
                let xs = (*s16.add(2 * g) + *s16.add(2 * g + 1)) as f32;
                a.s = (-(dmin * mn as f32) * dxg).mul_add(xs, a.s);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_block(a: &mut Acc, blk: *const u8, xq: *const i16, dx: *const f32, _s16: *const i32) {
    unsafe {
        let d = f16_at(blk.add(208));
        let sc = blk.add(192);
        let m4 = _mm256_set1_epi8(0x0F);
        let m30 = _mm256_set1_epi8(0x30);
        for half in 0..2 {
            let ql0 = _mm256_loadu_si256(blk.add(64 * half) as *const __m256i);
            let ql1 = _mm256_loadu_si256(blk.add(64 * half + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(blk.add(128 + 32 * half) as *const __m256i);
            let es = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                ),
            ];
            for (q, e) in es.into_iter().enumerate() {
                // 32 elements starting at 128·half + 32·q: two 16-element groups.
                let e0 = 128 * half + 32 * q;
                let (w0, w1) = widen(e, 32);
                let dxb = *dx.add(e0 / QA_BLOCK);
                let x0 = _mm256_loadu_si256(xq.add(e0) as *const __m256i);
                let x1 = _mm256_loadu_si256(xq.add(e0 + 16) as *const __m256i);
                let g = e0 / 16;
                group16(a, w0, x0, d * *sc.add(g) as i8 as f32, dxb);
                group16(a, w1, x1, d * *sc.add(g + 1) as i8 as f32, dxb);
            }
        }
    }
}
