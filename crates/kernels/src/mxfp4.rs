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

    #[test]
    fn half_scales_match_ggml() {
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }
}
