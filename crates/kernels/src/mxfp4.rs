//! MXFP4 (OCP microscaling FP4), the format of gpt-oss's expert weights: blocks of 32 e2m1
//! values (sign, 2 exponent bits, 1 mantissa bit: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}) sharing one
//! e8m0 scale `2^(e - 127)`.
//!
//! ggml's block (GGUF type 39, 17 bytes) is the scale byte, then 16 bytes of nibbles: byte `j`
//! holds element `j` (low nibble) and element `j + 16` (high nibble), as Q4_0. The values are
//! stored doubled (`kvalues`, integers −12..12) with the scale halved, so a block is
//! `2^(e - 128) · kvalue`: integer values and one float scale per 32, which is what the panel
//! of the quantized matmul takes ([`crate::qpanel`]), on every tier.
//!
//! Hugging Face checkpoints keep the two parts apart (`*_blocks`: 16 bytes per 32 values, byte
//! `i` holding elements `2i` (low) and `2i + 1` (high); `*_scales`: the e8m0 bytes):
//! [`from_hf`] rewrites them into ggml's blocks, the same values bit for bit.

/// The e2m1 values doubled, by nibble (ggml's `kvalues_mxfp4`).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^(e - 128)`: half the e8m0 scale, as ggml's `ggml_e8m0_to_fp32_half` builds it (the two
/// smallest exponents are f32 subnormals; 255 is `2^127`, not NaN).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { (e as u32 - 1) << 23 };
    f32::from_bits(bits)
}

/// Scalar reference: the 32 values of one 17-byte block (gguf-py's `MXFP4.dequantize_blocks`:
/// `d * kvalue` in f32).
pub fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = e8m0_to_f32_half(b[0]);
    for j in 0..16 {
        y[j] = d * KVALUES[(b[1 + j] & 0xF) as usize] as f32;
        y[j + 16] = d * KVALUES[(b[1 + j] >> 4) as usize] as f32;
    }
}

/// The integer values of one block, for the panel.
pub fn block_values(b: &[u8], q: &mut [i16]) {
    for j in 0..16 {
        q[j] = KVALUES[(b[1 + j] & 0xF) as usize] as i16;
        q[j + 16] = KVALUES[(b[1 + j] >> 4) as usize] as i16;
    }
}

/// ggml blocks from a Hugging Face checkpoint's `blocks` (16 bytes per 32 values, pairs of
/// consecutive values per byte) and `scales` (one e8m0 byte per 32 values), in the same order.
pub fn from_hf(blocks: &[u8], scales: &[u8]) -> Vec<u8> {
    assert_eq!(blocks.len(), 16 * scales.len(), "MXFP4: 16 bytes of values per scale");
    let mut out = Vec::with_capacity(17 * scales.len());
    for (vals, &e) in blocks.chunks_exact(16).zip(scales) {
        let nibble = |t: usize| (vals[t / 2] >> (4 * (t % 2))) & 0xF;
        out.push(e);
        out.extend((0..16).map(|j| nibble(j) | nibble(j + 16) << 4));
    }
    out
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// The 32 values of a block's 16 nibble bytes as int16 (elements 0..16, 16..32): each
    /// nibble looked up in [`super::KVALUES`] and widened with its sign.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn values_i16(qs: *const u8) -> (__m256i, __m256i) {
        let k = super::KVALUES;
        let table = _mm_setr_epi8(
            k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13], k[14], k[15],
        );
        // SAFETY: the caller's block holds 16 bytes at qs.
        let v = unsafe { _mm_loadu_si128(qs as *const __m128i) };
        let m = _mm_set1_epi8(0x0F);
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(v, m));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(v), m));
        (_mm256_cvtepi8_epi16(lo), _mm256_cvtepi8_epi16(hi))
    }

    /// [`super::e8m0_to_f32_half`] of the scale bytes of blocks `0..N` (`N ≤ 8`, 17 bytes
    /// apart from `blk0`); lanes from `N` on hold the scale of a zero byte.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn half_scales<const N: usize>(blk0: *const u8) -> __m256 {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let idx = _mm256_mullo_epi32(lane, _mm256_set1_epi32(17));
        // SAFETY: blocks 0..N hold at least 4 bytes each (the caller); lanes ≥ N are masked.
        let words = unsafe {
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(N as i32), lane);
            _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), blk0 as *const i32, idx, mask)
        };
        let e = _mm256_and_si256(words, _mm256_set1_epi32(0xFF));
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// transformers' `convert_moe_packed_tensors`: the e2m1 value of each nibble (`FP4_VALUES`),
    /// low nibble first, times `2^(scale - 127)` (`ldexp`), here in f64.
    fn hf_dequantize(blocks: &[u8], scales: &[u8]) -> Vec<f64> {
        const FP4: [f64; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
        let mut out = Vec::new();
        for (vals, &e) in blocks.chunks_exact(16).zip(scales) {
            for &b in vals {
                for nib in [b & 0xF, b >> 4] {
                    out.push(FP4[nib as usize] * 2f64.powi(e as i32 - 127));
                }
            }
        }
        out
    }

    /// Every scale byte (subnormal halves included) and random nibbles: the rewritten blocks
    /// dequantize to exactly transformers' values (inf where those overflow f32, in both).
    #[test]
    fn hf_blocks_rewrite_to_the_same_values() {
        let mut rng = StdRng::seed_from_u64(39);
        let scales: Vec<u8> = (0..=255).collect();
        let blocks: Vec<u8> = (0..16 * scales.len()).map(|_| rng.random()).collect();
        let ggml = from_hf(&blocks, &scales);
        let mut got = vec![0f32; 32 * scales.len()];
        crate::ggml::dequantize(crate::GgmlType::MXFP4, &ggml, &mut got);
        for (i, (g, w)) in got.iter().zip(hf_dequantize(&blocks, &scales)).enumerate() {
            // (Nibble 8 is −0 there and +0 in ggml's table: equal as values.)
            assert_eq!(*g, w as f32, "element {i} (scale byte {})", i / 32);
        }
    }

    /// The AVX2 scale conversion gives the scalar bits for every scale byte, the subnormal
    /// halves included (too small to show in a matmul's sums), and any octet length.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_half_scales_equal_the_scalar_ones() {
        if !crate::isa::Tier::Avx2.supported() {
            return;
        }
        let mut blocks = vec![0u8; 17 * 264];
        for (i, b) in blocks.chunks_exact_mut(17).enumerate() {
            b[0] = (i % 256) as u8;
            b[1..].fill(0xA5);
        }
        for b0 in (0..256).step_by(8) {
            let mut got = [0f32; 8];
            // SAFETY: AVX2 is available; eight blocks from b0.
            unsafe {
                std::arch::x86_64::_mm256_storeu_ps(got.as_mut_ptr(), x86::half_scales::<8>(blocks[17 * b0..].as_ptr()))
            };
            let want: Vec<f32> = (b0..b0 + 8).map(|e| e8m0_to_f32_half(e as u8)).collect();
            assert_eq!(
                got.map(f32::to_bits)[..],
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()[..],
                "bytes {b0}.."
            );
        }
        let mut got = [0f32; 8];
        // SAFETY: as above; three blocks from 1.
        unsafe { std::arch::x86_64::_mm256_storeu_ps(got.as_mut_ptr(), x86::half_scales::<3>(blocks[17..].as_ptr())) };
        assert_eq!(got[..3], [1, 2, 3].map(e8m0_to_f32_half));
    }

    #[test]
    fn half_scales_match_ggml() {
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }
}
