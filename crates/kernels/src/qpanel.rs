//! Quantized weight rows unpacked into a format-independent "panel": int16 values per element
//! plus, per group of 16 or 32 elements, a float scale and (for formats with minimums or
//! offsets) a float coefficient of the activation sum. Every GGML format reduces to
//!
//! `w[t] = vscale[g] · q16[t] + mcoef[g] · 1` over group `g`,
//!
//! so one dot kernel serves them all: `Σ w·x ≈ Σ_g dx·(vscale[g]·Σ q16·xq + mcoef[g]·Σ xq)`.

use crate::ggml::{GgmlType, scale_min_k4};
use crate::isa::Tier;
use half::f16;

/// Unpacked rows of one weight tile.
#[derive(Default)]
pub struct Panel {
    /// Elements per group: 32, or 16 for Q2_K / Q3_K / Q6_K.
    pub group: usize,
    pub k: usize,
    pub rows: usize,
    pub q: Vec<i16>,
    pub vscale: Vec<f32>,
    /// Present for Q4_1, Q5_1, Q2_K, Q4_K, Q5_K.
    pub mcoef: Option<Vec<f32>>,
}

/// Group size of a quantized format in the panel.
pub const fn group_of(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q6K => 16,
        _ => 32,
    }
}

pub fn has_mins(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q2K | GgmlType::Q4K | GgmlType::Q5K)
}

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

impl Panel {
    /// Unpacks `rows` consecutive rows of `k` elements (their raw bytes in `src`).
    pub fn unpack(&mut self, tier: Tier, ty: GgmlType, src: &[u8], rows: usize, k: usize) {
        assert!(ty.is_quantized(), "{} is not a block format", ty.name());
        let g = group_of(ty);
        self.group = g;
        self.k = k;
        self.rows = rows;
        self.q.resize(rows * k, 0);
        self.vscale.resize(rows * k / g, 0.0);
        let mins = has_mins(ty);
        match (&mut self.mcoef, mins) {
            (Some(m), true) => m.resize(rows * k / g, 0.0),
            (None, true) => self.mcoef = Some(vec![0.0; rows * k / g]),
            (_, false) => self.mcoef = None,
        }
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let nblocks = rows * k / bs;
        assert!(src.len() >= nblocks * ts, "panel source too short");
        #[cfg(target_arch = "x86_64")]
        if matches!(tier, Tier::Avx2 | Tier::Avx512) {
            // SAFETY: the tier supports AVX2/F16C; the buffers were sized above.
            let done = unsafe {
                x86::unpack_blocks(ty, src, nblocks, &mut self.q, &mut self.vscale, self.mcoef.as_deref_mut())
            };
            if done {
                return;
            }
        }
        #[cfg(target_arch = "aarch64")]
        if tier == Tier::Neon
            && crate::neon::unpack_blocks(ty, src, nblocks, &mut self.q, &mut self.vscale, self.mcoef.as_deref_mut())
        {
            return;
        }
        let _ = tier;
        let groups_per_block = bs / g;
        for (bi, blk) in src.chunks_exact(ts).take(nblocks).enumerate() {
            let q = &mut self.q[bi * bs..(bi + 1) * bs];
            let vs = &mut self.vscale[bi * groups_per_block..(bi + 1) * groups_per_block];
            let mc = self.mcoef.as_mut().map(|m| &mut m[bi * groups_per_block..(bi + 1) * groups_per_block]);
            unpack_block(ty, blk, q, vs, mc);
        }
    }
}

/// Scalar unpacking of one block (the reference; SIMD versions must produce identical output).
pub fn unpack_block(ty: GgmlType, b: &[u8], q: &mut [i16], vs: &mut [f32], mc: Option<&mut [f32]>) {
    block_scales(ty, b, vs, mc);
    block_values(ty, b, q);
}

/// The per-group scales (and minimum coefficients) of one block.
pub fn block_scales(ty: GgmlType, b: &[u8], vs: &mut [f32], mc: Option<&mut [f32]>) {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => vs[0] = f16_at(b, 0),
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            vs[0] = f16_at(b, 0);
            mc.expect("Q4_1/Q5_1 have mins")[0] = f16_at(b, 2);
        }
        GgmlType::Q2K => {
            let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
            let mc = mc.expect("Q2_K has mins");
            for (i, &sc) in b[..16].iter().enumerate() {
                vs[i] = d * (sc & 0xF) as f32;
                mc[i] = -(dmin * (sc >> 4) as f32);
            }
        }
        GgmlType::Q3K => {
            let d = f16_at(b, 108);
            let scales = crate::ggml::q3k_scales(&b[96..108]);
            for i in 0..16 {
                vs[i] = d * scales[i] as f32;
            }
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let mc = mc.expect("K-quants have mins");
            for j in 0..8 {
                let (sc, m) = scale_min_k4(j, &b[4..16]);
                vs[j] = d * sc as f32;
                mc[j] = -(dmin * m as f32);
            }
        }
        GgmlType::Q6K => {
            let d = f16_at(b, 208);
            for (i, &s) in b[192..208].iter().enumerate() {
                vs[i] = d * s as i8 as f32;
            }
        }
        GgmlType::MXFP4 => vs[0] = crate::mxfp4::e8m0_to_f32_half(b[0]),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => unreachable!("dense formats are not unpacked"),
    }
}

/// The int16 values of one block's elements.
pub fn block_values(ty: GgmlType, b: &[u8], q: &mut [i16]) {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let (off, bias) = if ty == GgmlType::Q4_0 { (2, 8) } else { (4, 0) };
            for j in 0..16 {
                q[j] = (b[off + j] & 0xF) as i16 - bias;
                q[j + 16] = (b[off + j] >> 4) as i16 - bias;
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let off = if ty == GgmlType::Q5_0 { 2 } else { 4 };
            let qh = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
            let qs = &b[off + 4..off + 20];
            let bias = if ty == GgmlType::Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                q[j] = ((qs[j] & 0xF) as u32 | h0) as i16 - bias;
                q[j + 16] = ((qs[j] >> 4) as u32 | h1) as i16 - bias;
            }
        }
        GgmlType::Q8_0 => {
            for j in 0..32 {
                q[j] = b[2 + j] as i8 as i16;
            }
        }
        GgmlType::Q2K => {
            let qs = &b[16..80];
            let mut out = 0;
            for half in 0..2 {
                for shift in [0u32, 2, 4, 6] {
                    for part in 0..2 {
                        for l in 0..16 {
                            q[out] = ((qs[half * 32 + part * 16 + l] >> shift) & 3) as i16;
                            out += 1;
                        }
                    }
                }
            }
        }
        GgmlType::Q3K => {
            let (hmask, qs) = (&b[0..32], &b[32..96]);
            let mut out = 0;
            let mut m = 1u8;
            for half in 0..2 {
                for shift in [0u32, 2, 4, 6] {
                    for part in 0..2 {
                        for l in 0..16 {
                            let i = part * 16 + l;
                            let hi = if hmask[i] & m != 0 { 0 } else { 4 };
                            q[out] = ((qs[half * 32 + i] >> shift) & 3) as i16 - hi;
                            out += 1;
                        }
                    }
                    m <<= 1;
                }
            }
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            let (qh, qs) = if ty == GgmlType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for blk in 0..4 {
                for l in 0..32 {
                    let byte = qs[blk * 32 + l];
                    let (mut lo, mut hi) = ((byte & 0xF) as i16, (byte >> 4) as i16);
                    if let Some(qh) = qh {
                        lo += if qh[l] & (1 << (2 * blk)) != 0 { 16 } else { 0 };
                        hi += if qh[l] & (2 << (2 * blk)) != 0 { 16 } else { 0 };
                    }
                    q[blk * 64 + l] = lo;
                    q[blk * 64 + 32 + l] = hi;
                }
            }
        }
        GgmlType::Q6K => {
            let (ql, qh) = (&b[0..128], &b[128..192]);
            for half in 0..2 {
                let (ql, qh) = (&ql[half * 64..], &qh[half * 32..]);
                let q = &mut q[half * 128..];
                for l in 0..32 {
                    q[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i16 - 32;
                    q[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i16 - 32;
                    q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i16 - 32;
                    q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i16 - 32;
                }
            }
        }
        GgmlType::MXFP4 => crate::mxfp4::block_values(b, q),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => unreachable!("dense formats are not unpacked"),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{GgmlType, scale_min_k4};
    use std::arch::x86_64::*;

    /// Unpacks `nblocks` consecutive blocks (values, scales, minimums) exactly as the scalar
    /// [`super::unpack_block`] does; false if this format has no SIMD version. One call per
    /// panel, so the per-block helpers inline and f16 scales convert with F16C.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn unpack_blocks(
        ty: GgmlType,
        src: &[u8],
        nblocks: usize,
        q: &mut [i16],
        vs: &mut [f32],
        mc: Option<&mut [f32]>,
    ) -> bool {
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let gpb = bs / super::group_of(ty);
        assert!(src.len() >= nblocks * ts && q.len() >= nblocks * bs && vs.len() >= nblocks * gpb);
        let mp = match mc {
            Some(m) => {
                assert!(m.len() >= nblocks * gpb);
                m.as_mut_ptr()
            }
            None => {
                assert!(!super::has_mins(ty), "{} needs minimums", ty.name());
                std::ptr::null_mut()
            }
        };
        let (sp, qp, vp) = (src.as_ptr(), q.as_mut_ptr(), vs.as_mut_ptr());
        // SAFETY (every block below): block i's bytes, values, scales and minimums are in
        // bounds by the asserts above.
        for i in 0..nblocks {
            unsafe {
                let (b, q) = (sp.add(i * ts), qp.add(i * bs));
                match ty {
                    GgmlType::Q4_0 => nibbles32(b.add(2), q, 8),
                    GgmlType::Q4_1 => nibbles32(b.add(4), q, 0),
                    GgmlType::Q5_0 => q5(b.add(2), q, 16),
                    GgmlType::Q5_1 => q5(b.add(4), q, 0),
                    GgmlType::Q8_0 => q8(b.add(2), q),
                    GgmlType::Q4K => qk(b.add(16), None, q),
                    GgmlType::Q5K => qk(b.add(48), Some(b.add(16)), q),
                    GgmlType::Q6K => q6k(b, q),
                    GgmlType::MXFP4 => mxfp4(b.add(1), q),
                    _ => return false,
                }
                match ty {
                    GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => *vp.add(i) = f16_at(b),
                    GgmlType::MXFP4 => *vp.add(i) = crate::mxfp4::e8m0_to_f32_half(*b),
                    GgmlType::Q4_1 | GgmlType::Q5_1 => {
                        *vp.add(i) = f16_at(b);
                        *mp.add(i) = f16_at(b.add(2));
                    }
                    GgmlType::Q4K | GgmlType::Q5K => {
                        let (d, dmin) = (f16_at(b), f16_at(b.add(2)));
                        let scales = std::slice::from_raw_parts(b.add(4), 12);
                        for j in 0..8 {
                            let (sc, m) = scale_min_k4(j, scales);
                            *vp.add(8 * i + j) = d * sc as f32;
                            *mp.add(8 * i + j) = -(dmin * m as f32);
                        }
                    }
                    _ => {
                        let d = f16_at(b.add(208));
                        for j in 0..16 {
                            *vp.add(16 * i + j) = d * *b.add(192 + j) as i8 as f32;
                        }
                    }
                }
            }
        }
        true
    }

    /// The little-endian f16 at `p`, as f32 (exact, like the scalar conversion).
    #[inline]
    #[target_feature(enable = "f16c")]
    unsafe fn f16_at(p: *const u8) -> f32 {
        let bits = unsafe { (p as *const u16).read_unaligned() };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_bytes_as_i16(v: __m256i, bias: i16, q: *mut i16) {
        let b = _mm256_set1_epi16(bias);
        let lo = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), b);
        let hi = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v)), b);
        unsafe {
            _mm256_storeu_si256(q as *mut __m256i, lo);
            _mm256_storeu_si256(q.add(16) as *mut __m256i, hi);
        }
    }

    /// 16 bytes of nibbles: low nibbles are elements 0..16, high nibbles 16..32.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn nibbles32(qs: *const u8, q: *mut i16, bias: i16) {
        let v = unsafe { _mm_loadu_si128(qs as *const __m128i) };
        let m = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(v, m);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
        unsafe { store_bytes_as_i16(_mm256_set_m128i(hi, lo), bias, q) };
    }

    /// MXFP4: its values looked up ([`crate::mxfp4::x86::values_i16`]) and stored.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mxfp4(qs: *const u8, q: *mut i16) {
        unsafe {
            let (lo, hi) = crate::mxfp4::x86::values_i16(qs);
            _mm256_storeu_si256(q as *mut __m256i, lo);
            _mm256_storeu_si256(q.add(16) as *mut __m256i, hi);
        }
    }

    /// Q5_0 / Q5_1: nibbles plus a fifth bit per element from a 32-bit mask.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn q5(p: *const u8, q: *mut i16, bias: i16) {
        let qh = unsafe { (p as *const u32).read_unaligned() } as i32;
        // Byte j of `spread` holds byte j/8 of qh; select bit j%8 of it.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh),
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            ),
        );
        let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
        let high = _mm256_and_si256(set, _mm256_set1_epi8(0x10));
        let v = unsafe { _mm_loadu_si128(p.add(4) as *const __m128i) };
        let m = _mm_set1_epi8(0x0F);
        let nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(v), m), _mm_and_si128(v, m));
        unsafe { store_bytes_as_i16(_mm256_or_si256(nib, high), bias, q) };
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn q8(p: *const u8, q: *mut i16) {
        unsafe {
            let v = _mm256_loadu_si256(p as *const __m256i);
            _mm256_storeu_si256(q as *mut __m256i, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)));
            _mm256_storeu_si256(q.add(16) as *mut __m256i, _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)));
        }
    }

    /// Q4_K / Q5_K values: four chunks of 32 bytes, low nibbles then high nibbles, plus (Q5_K)
    /// bits `2j` and `2j+1` of `qh` as the fifth bit of chunk `j`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn qk(qs: *const u8, qh: Option<*const u8>, q: *mut i16) {
        let m = _mm256_set1_epi8(0x0F);
        let one = _mm256_set1_epi8(1);
        let h = qh.map(|p| unsafe { _mm256_loadu_si256(p as *const __m256i) });
        for j in 0..4 {
            let v = unsafe { _mm256_loadu_si256(qs.add(32 * j) as *const __m256i) };
            let mut lo = _mm256_and_si256(v, m);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
            if let Some(h) = h {
                let shift = _mm_cvtsi32_si128(2 * j as i32);
                let b0 = _mm256_and_si256(_mm256_srl_epi16(h, shift), one);
                let b1 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * j as i32 + 1)), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(b0));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(b1));
            }
            unsafe {
                store_bytes_as_i16(lo, 0, q.add(64 * j));
                store_bytes_as_i16(hi, 0, q.add(64 * j + 32));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn q6k(b: *const u8, q: *mut i16) {
        let m4 = _mm256_set1_epi8(0x0F);
        let m30 = _mm256_set1_epi8(0x30);
        for half in 0..2 {
            unsafe {
                let ql0 = _mm256_loadu_si256(b.add(64 * half) as *const __m256i);
                let ql1 = _mm256_loadu_si256(b.add(64 * half + 32) as *const __m256i);
                let qh = _mm256_loadu_si256(b.add(128 + 32 * half) as *const __m256i);
                let e0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30));
                let e1 = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30));
                let e2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m30));
                let e3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                );
                let out = q.add(128 * half);
                store_bytes_as_i16(e0, 32, out);
                store_bytes_as_i16(e1, 32, out.add(32));
                store_bytes_as_i16(e2, 32, out.add(64));
                store_bytes_as_i16(e3, 32, out.add(96));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::quantize_random;

    /// vscale·q + mcoef equals the scalar dequantization, element by element.
    #[test]
    fn panel_reproduces_dequantization() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
            let k = 512;
            let w = quantize_random(ty, 3, k, 5);
            let want = w.to_f32();
            let mut p = Panel::default();
            p.unpack(Tier::Scalar, ty, w.bytes(), 3, k);
            for (t, &want) in want.iter().enumerate() {
                let g = t / p.group;
                let m = p.mcoef.as_ref().map_or(0.0, |m| m[g]);
                let got = p.vscale[g] * p.q[t] as f32 + m;
                let tol = 1e-6 * (1.0 + want.abs());
                assert!((got - want).abs() <= tol, "{} element {t}: {got} vs {want}", ty.name());
            }
            for tier in Tier::available() {
                let mut other = Panel::default();
                other.unpack(tier, ty, w.bytes(), 3, k);
                assert_eq!(other.q, p.q, "{tier:?} {} values", ty.name());
                assert_eq!(other.vscale, p.vscale, "{tier:?} {} scales", ty.name());
                assert_eq!(other.mcoef, p.mcoef, "{tier:?} {} mins", ty.name());
            }
        }
    }
}
