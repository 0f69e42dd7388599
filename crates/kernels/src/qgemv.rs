//! Fused decode kernels (x86 AVX2): quantized weight blocks are expanded to int16 in registers
//! and dotted with the int16 activations straight away, with no panel in memory.
//!
//! They perform exactly the reduction described in [`crate::qmatmul`] — integer group sums,
//! eight groups per vector, the same scale products and fused multiply-adds in the same order —
//! so results are bit-identical to the panel path (tested), whichever path a row takes.

#![cfg(target_arch = "x86_64")]

use crate::ggml::GgmlType;
use crate::matmul::x86::prefetch_lines;
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
            | GgmlType::MXFP4
    )
}

/// How far ahead of the row being read its successors are prefetched (tuned on SmolLM2 and Qwen2.5
/// decode: 1–8 KiB are within noise of each other; none is 10–20 % slower).
const PREFETCH_AHEAD: usize = 2048;

/// Before row `r` of a task's rows (`total` bytes from `rows`): prefetches what enters the window
/// `PREFETCH_AHEAD` bytes ahead (for row 0, the window itself), never past the task's rows.
/// Rows are short streams and tasks alternate between threads, so the hardware prefetcher alone
/// left batch-1 decode 10–20 % slower.
#[inline]
fn prefetch_for_row(rows: *const u8, r: usize, row_bytes: usize, total: usize) {
    if r == 0 {
        prefetch_lines(rows, total.min(PREFETCH_AHEAD));
    }
    let (lo, hi) = (r * row_bytes + PREFETCH_AHEAD, ((r + 1) * row_bytes + PREFETCH_AHEAD).min(total));
    if lo < hi {
        prefetch_lines(rows.wrapping_add(lo), hi - lo);
    }
}

/// `out[r] = dot(x, W row r)` for `out.len()` consecutive weight rows starting at `rows`
/// (raw block bytes, `row_bytes` apart).
///
/// # Safety
/// The tier must support AVX2/FMA/F16C; `rows` must hold `out.len()` rows of `x.q.len()` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows(ty: GgmlType, rows: *const u8, row_bytes: usize, x: ActRow, out: &mut [f32]) {
    let total = out.len() * row_bytes;
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: row r exists (caller); each kernel reads exactly one row.
        let w = unsafe { rows.add(r * row_bytes) };
        prefetch_for_row(rows, r, row_bytes, total);
        *o = unsafe {
            match ty {
                GgmlType::Q4_0 => dot32::<0>(w, x),
                GgmlType::Q4_1 => dot32::<1>(w, x),
                GgmlType::Q5_0 => dot32::<2>(w, x),
                GgmlType::Q5_1 => dot32::<3>(w, x),
                GgmlType::Q8_0 => dot32::<4>(w, x),
                GgmlType::MXFP4 => dot32::<5>(w, x),
                GgmlType::Q4K => dot_q4k(w, x),
                GgmlType::Q6K => dot_q6k(w, x),
                _ => unreachable!("checked by supported()"),
            }
        };
    }
}

/// Formats with a two-row fused kernel ([`dot_rows_pair`]): the 32-element-block ones and Q4_K.
pub fn supported_pair(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | MXFP4 | Q4K)
}

/// [`dot_rows`] for two activation rows: every block is expanded once for both, and each row's
/// result has the same bits as from [`dot_rows`].
///
/// # Safety
/// As for [`dot_rows`], and `ty` must be [`supported_pair`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows_pair(ty: GgmlType, rows: *const u8, row_bytes: usize, x: [ActRow; 2], out: [&mut [f32]; 2]) {
    let total = out[0].len() * row_bytes;
    assert!(out[1].len() == out[0].len() && x[1].q.len() == x[0].q.len());
    let [o0, o1] = out;
    for (r, (a, b)) in o0.iter_mut().zip(o1.iter_mut()).enumerate() {
        // SAFETY: row r exists (caller); each kernel reads exactly one row.
        let w = unsafe { rows.add(r * row_bytes) };
        prefetch_for_row(rows, r, row_bytes, total);
        [*a, *b] = unsafe {
            match ty {
                GgmlType::Q4_0 => dot32_pair::<0>(w, x),
                GgmlType::Q4_1 => dot32_pair::<1>(w, x),
                GgmlType::Q5_0 => dot32_pair::<2>(w, x),
                GgmlType::Q5_1 => dot32_pair::<3>(w, x),
                GgmlType::Q8_0 => dot32_pair::<4>(w, x),
                GgmlType::MXFP4 => dot32_pair::<5>(w, x),
                GgmlType::Q4K => dot_q4k_pair(w, x),
                _ => unreachable!("checked by supported_pair()"),
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

/// 16 bytes at `p`, zero-extended to int16.
///
/// Inline assembly because LLVM, knowing the high bytes are zero, would move a mask or shift
/// that follows onto the narrow bytes: three more instructions for every nibble split below.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn zext16(p: *const u8) -> __m256i {
    let v: __m256i;
    // SAFETY: reads the 16 bytes at p (the caller's block); no other effect.
    unsafe {
        std::arch::asm!("vpmovzxbw {v}, xmmword ptr [{p}]", v = out(ymm_reg) v, p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags));
    }
    v
}

/// The 32 4-bit elements of a block as int16 (elements 0..16, 16..32) minus `bias`: the 16 bytes
/// are widened once, then masked (low nibbles) or shifted (high nibbles).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles_i16(qs: *const u8, bias: i16) -> (__m256i, __m256i) {
    let v = unsafe { zext16(qs) };
    let b = _mm256_set1_epi16(bias);
    (_mm256_sub_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x0F)), b), _mm256_sub_epi16(_mm256_srli_epi16::<4>(v), b))
}

/// Q5_0 (`bias` 16) / Q5_1 (`bias` 0) elements as int16: `(nibble | 16·h) − bias`, where bit j
/// of the 32-bit `qh` is element j's fifth bit `h`. The bits are tested in int16 lanes (each
/// 16-bit half of `qh` broadcast from memory), so nothing is widened after the nibbles.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q5_i16<const BIAS: i16>(qh: *const u8, qs: *const u8) -> (__m256i, __m256i) {
    let (lo, hi) = unsafe { nibbles_i16(qs, 0) };
    // SAFETY: qh holds 4 bytes (the caller's block).
    let half = |i: usize| _mm256_set1_epi16(unsafe { (qh.add(2 * i) as *const i16).read_unaligned() });
    let bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, i16::MIN);
    let sixteen = _mm256_set1_epi16(16);
    let apply = |nib: __m256i, halfword: __m256i| {
        let set = _mm256_cmpeq_epi16(_mm256_and_si256(halfword, bit), bit);
        if BIAS == 16 {
            _mm256_sub_epi16(nib, _mm256_andnot_si256(set, sixteen))
        } else {
            _mm256_add_epi16(nib, _mm256_and_si256(set, sixteen))
        }
    };
    (apply(lo, half(0)), apply(hi, half(1)))
}

/// The 32 int8 elements of a Q8_0 block as int16 (elements 0..16, 16..32), widened from memory.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bytes_i16(qs: *const u8) -> (__m256i, __m256i) {
    unsafe {
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(qs as *const __m128i)),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(qs.add(16) as *const __m128i)),
        )
    }
}

/// Elements 0..16 and 16..32 of block `blk` of a 32-element-block format (`F` as in [`dot32`]) as int16.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn block_i16<const F: u8>(blk: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller's block holds these fields at these offsets.
    unsafe {
        match F {
            0 => nibbles_i16(blk.add(2), 8),
            1 => nibbles_i16(blk.add(4), 0),
            2 => q5_i16::<16>(blk.add(2), blk.add(6)),
            3 => q5_i16::<0>(blk.add(4), blk.add(8)),
            4 => bytes_i16(blk.add(2)),
            _ => crate::mxfp4::x86::values_i16(blk.add(1)),
        }
    }
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

/// One row of a 32-element-block format. `F`: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q5_1, 4 = Q8_0,
/// 5 = MXFP4.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32<const F: u8>(w: *const u8, x: ActRow) -> f32 {
    let blocks = x.q.len() / 32;
    let mut acc = octet::ZERO;
    let mut b0 = 0;
    // SAFETY: every octet stays within the row and the activation row.
    unsafe {
        while b0 + 8 <= blocks {
            octet32::<F, 8>(w, x, b0, &mut acc[b0 / 8 % 2]);
            b0 += 8;
        }
        let a = &mut acc[b0 / 8 % 2];
        crate::with_tail!(blocks - b0, octet32, [F], (w, x, b0, a));
    }
    octet::total(&acc)
}

/// Blocks `b0..b0+N` (`N ≤ 8`) of a 32-element-block format into `acc` (values, minimums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn octet32<const F: u8, const N: usize>(w: *const u8, x: ActRow, b0: usize, acc: &mut [__m256; 2]) {
    let ts: usize = [18, 20, 22, 24, 34, 17][F as usize];
    let mut lanes = [_mm256_setzero_si256(); 8];
    // SAFETY: the caller guarantees blocks b0..b0+N.
    unsafe {
        // Pointers to the octet's first block and group, so per-block offsets are constants.
        let (w, xq) = (w.add(b0 * ts), x.q.as_ptr().add(b0 * 32));
        for (i, l) in lanes.iter_mut().enumerate().take(N) {
            let blk = w.add(i * ts);
            let (w0, w1) = block_i16::<F>(blk);
            *l = lanes32(w0, w1, xq.add(i * 32));
        }
        let (vs, m) = scales::<F, N>(w, ts);
        let dx =
            if N == 8 { _mm256_loadu_ps(x.d.as_ptr().add(b0)) } else { octet::load_partial(x.d.as_ptr().add(b0), N) };
        acc[0] = octet::finish(acc[0], octet::reduce8(&lanes), vs, dx);
        if F == 1 || F == 3 {
            let ds = if N == 8 {
                _mm256_loadu_ps(x.dsum32.as_ptr().add(b0))
            } else {
                octet::load_partial(x.dsum32.as_ptr().add(b0), N)
            };
            acc[1] = _mm256_fmadd_ps(m, ds, acc[1]);
        }
    }
}

/// [`dot32`] for two activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32_pair<const F: u8>(w: *const u8, x: [ActRow; 2]) -> [f32; 2] {
    let blocks = x[0].q.len() / 32;
    let mut acc = [octet::ZERO; 2];
    let mut b0 = 0;
    // SAFETY: every octet stays within the row and the activation rows.
    unsafe {
        while b0 + 8 <= blocks {
            octet32_pair::<F, 8>(w, &x, b0, &mut acc);
            b0 += 8;
        }
        crate::with_tail!(blocks - b0, octet32_pair, [F], (w, &x, b0, &mut acc));
    }
    [octet::total(&acc[0]), octet::total(&acc[1])]
}

/// [`octet32`] for two activation rows: each block is expanded once, and the integer lanes of
/// both rows are reduced by [`octet::reduce8_pair`] (two rows' eight lanes would not fit in the
/// registers).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn octet32_pair<const F: u8, const N: usize>(
    w: *const u8,
    x: &[ActRow; 2],
    b0: usize,
    acc: &mut [octet::Acc; 2],
) {
    let ts: usize = [18, 20, 22, 24, 34, 17][F as usize];
    // SAFETY (all loads): the caller guarantees blocks b0..b0+N of the row and both activation rows.
    let (w, xq) = unsafe { (w.add(b0 * ts), [x[0].q.as_ptr().add(b0 * 32), x[1].q.as_ptr().add(b0 * 32)]) };
    let lanes = |i: usize| -> [__m256i; 2] {
        if i >= N {
            return [_mm256_setzero_si256(); 2];
        }
        unsafe {
            let blk = w.add(i * ts);
            let (w0, w1) = block_i16::<F>(blk);
            [lanes32(w0, w1, xq[0].add(i * 32)), lanes32(w0, w1, xq[1].add(i * 32))]
        }
    };
    let isums = octet::reduce8_pair(lanes);
    // SAFETY: as above; lanes from N on are zero.
    unsafe {
        let (vs, m) = scales::<F, N>(w, ts);
        let load = |p: *const f32| if N == 8 { _mm256_loadu_ps(p) } else { octet::load_partial(p, N) };
        for r in 0..2 {
            let dx = load(x[r].d.as_ptr().add(b0));
            let a = &mut acc[r][b0 / 8 % 2];
            a[0] = octet::finish(a[0], isums[r], vs, dx);
            if F == 1 || F == 3 {
                a[1] = _mm256_fmadd_ps(m, load(x[r].dsum32.as_ptr().add(b0)), a[1]);
            }
        }
    }
}

/// The scales of blocks `b0..b0+N` of format `F` and, for Q4_1 / Q5_1, their minimums.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn scales<const F: u8, const N: usize>(blk0: *const u8, ts: usize) -> (__m256, __m256) {
    // SAFETY: as vouched by the caller.
    unsafe {
        match F {
            5 => (crate::mxfp4::x86::half_scales::<N>(blk0), _mm256_setzero_ps()),
            _ => block_scales::<N>(blk0, ts),
        }
    }
}

/// The two f16 values at the start of blocks `b0..b0+N` (`ts` bytes apart) as f32: each block's
/// scale `d`, and the f16 after it (the minimum of Q4_1 / Q5_1; ignored for other formats).
/// Lanes from `N` on are zero. One gather of 32-bit words replaces sixteen 16-bit inserts.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn block_scales<const N: usize>(blk0: *const u8, ts: usize) -> (__m256, __m256) {
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let idx = _mm256_mullo_epi32(lane, _mm256_set1_epi32(ts as i32));
    // SAFETY: the caller guarantees blocks b0..b0+N, each at least 4 bytes; lanes ≥ N are masked.
    let words = unsafe {
        if N == 8 {
            _mm256_i32gather_epi32::<1>(blk0 as *const i32, idx)
        } else {
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(N as i32), lane);
            _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), blk0 as *const i32, idx, mask)
        }
    };
    // Per 128-bit lane: low halves (d) to bytes 0..8, high halves to bytes 8..16; then qwords
    // 0, 2 (all d) and 1, 3 (all second values).
    let split = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
    );
    let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(words, split));
    (_mm256_cvtph_ps(_mm256_castsi256_si128(p)), _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(p)))
}

/// Q4_K: one 256-element super-block is exactly one octet of 32-element groups.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4k(w: *const u8, x: ActRow) -> f32 {
    let mut acc = octet::ZERO;
    for b in 0..x.q.len() / 256 {
        // SAFETY: super-block b of this row and of the activation row exist.
        unsafe {
            let blk = w.add(b * 144);
            let (vs, mc) = q4k_scales(blk);
            let mut lanes = [_mm256_setzero_si256(); 8];
            let xq = x.q.as_ptr().add(b * 256);
            let m4 = _mm256_set1_epi16(0x0F);
            // Chunk c: 32 bytes whose low nibbles are group 2c and high nibbles group 2c + 1.
            for c in 0..4 {
                let (v0, v1) = (zext16(blk.add(16 + 32 * c)), zext16(blk.add(32 + 32 * c)));
                let (l0, l1) = (_mm256_and_si256(v0, m4), _mm256_and_si256(v1, m4));
                let (h0, h1) = (_mm256_srli_epi16::<4>(v0), _mm256_srli_epi16::<4>(v1));
                lanes[2 * c] = lanes32(l0, l1, xq.add(64 * c));
                lanes[2 * c + 1] = lanes32(h0, h1, xq.add(64 * c + 32));
            }
            let dx = _mm256_loadu_ps(x.d.as_ptr().add(8 * b));
            let a = &mut acc[b % 2]; // a super-block is one octet
            a[0] = octet::finish(a[0], octet::reduce8(&lanes), vs, dx);
            a[1] = _mm256_fmadd_ps(mc, _mm256_loadu_ps(x.dsum32.as_ptr().add(8 * b)), a[1]);
        }
    }
    octet::total(&acc)
}

/// [`dot_q4k`] for two activation rows: each super-block is expanded once for both, and the
/// integer lanes reduced pairwise as made (the same exact sums as [`octet::reduce8`]).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4k_pair(w: *const u8, x: [ActRow; 2]) -> [f32; 2] {
    let mut acc = [octet::ZERO; 2];
    let m4 = _mm256_set1_epi16(0x0F);
    for b in 0..x[0].q.len() / 256 {
        // SAFETY: super-block b of this row and of both activation rows exist.
        unsafe {
            let blk = w.add(b * 144);
            let (vs, mc) = q4k_scales(blk);
            let xq = x.map(|r| r.q.as_ptr().add(b * 256));
            // Chunk c: groups 2c (low nibbles) and 2c + 1 (high nibbles), each row's sums added
            // pairwise at once.
            let chunk = |c: usize| -> [[__m256i; 2]; 2] {
                let (v0, v1) = (zext16(blk.add(16 + 32 * c)), zext16(blk.add(32 + 32 * c)));
                let (l0, l1) = (_mm256_and_si256(v0, m4), _mm256_and_si256(v1, m4));
                let (h0, h1) = (_mm256_srli_epi16::<4>(v0), _mm256_srli_epi16::<4>(v1));
                xq.map(|q| [lanes32(l0, l1, q.add(64 * c)), lanes32(h0, h1, q.add(64 * c + 32))])
            };
            let pair = |c: usize| chunk(c).map(|[lo, hi]| _mm256_hadd_epi32(lo, hi));
            let (c0, c1, c2, c3) = (pair(0), pair(1), pair(2), pair(3));
            for r in 0..2 {
                let u0 = _mm256_hadd_epi32(c0[r], c1[r]);
                let u1 = _mm256_hadd_epi32(c2[r], c3[r]);
                let dx = _mm256_loadu_ps(x[r].d.as_ptr().add(8 * b));
                let a = &mut acc[r][b % 2];
                a[0] = octet::finish(a[0], octet::combine_halves(u0, u1), vs, dx);
                let ds = _mm256_loadu_ps(x[r].dsum32.as_ptr().add(8 * b));
                a[1] = _mm256_fmadd_ps(mc, ds, a[1]);
            }
        }
    }
    [octet::total(&acc[0]), octet::total(&acc[1])]
}

/// The eight group scales `d·sc` and minimum coefficients `-(dmin·m)` of a Q4_K super-block, as
/// [`crate::ggml::scale_min_k4`] computes them one at a time: the 6-bit fields are cut out of the 12 scale
/// bytes as 32-bit words (bytes 0..4: scales 0..4, 4..8: mins 0..4, 8..12: low 4 bits of scales
/// and mins 4..8, whose top 2 bits are the top bits of bytes 0..8).
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4k_scales(blk: *const u8) -> (__m256, __m256) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    // SAFETY: a Q4_K block holds d, dmin and 12 scale bytes at these offsets.
    let (d, dmin, u) = unsafe {
        let w = |i: usize| (blk.add(4 + 4 * i) as *const u32).read_unaligned();
        (f16_at(blk), f16_at(blk.add(2)), [w(0), w(1), w(2)])
    };
    let sc = [u[0] & LOW6, (u[2] & LOW4) | (((u[0] >> 6) & LOW2) << 4)];
    let m = [u[1] & LOW6, ((u[2] >> 4) & LOW4) | (((u[1] >> 6) & LOW2) << 4)];
    let f = |v: [u32; 2]| {
        let bytes = _mm_set_epi64x(0, (v[0] as u64 | (v[1] as u64) << 32) as i64);
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))
    };
    let vs = _mm256_mul_ps(_mm256_set1_ps(d), f(sc));
    let mc = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), f(m)), _mm256_set1_ps(-0.0));
    (vs, mc)
}

/// Q6_K: one super-block is 16 groups of 16 elements — two octets.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6k(w: *const u8, x: ActRow) -> f32 {
    let mut acc = octet::ZERO;
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    for b in 0..x.q.len() / 256 {
        // SAFETY: super-block b of this row and of the activation row exist.
        unsafe {
            let blk = w.add(b * 210);
            let d = f16_at(blk.add(208));
            let sc = blk.add(192);
            // Octet 2b + half: its parity is `half`.
            for (half, acc_h) in acc.iter_mut().enumerate() {
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
                let scales = _mm_loadl_epi64(sc.add(8 * half) as *const __m128i);
                let vs = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(scales)));
                let dx = _mm256_loadu_ps(x.d16.as_ptr().add(g0));
                acc_h[0] = octet::finish(acc_h[0], octet::reduce8(&lanes), vs, dx);
            }
        }
    }
    octet::total(&acc)
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}
