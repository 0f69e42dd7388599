//! Deterministic random data for kernel tests (never zeros, never NaN).

use crate::ggml::GgmlType;
use crate::weight::{Storage, Weight};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// `n` values uniform in [-1, 1).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Byte offsets of the f16 scale fields inside one block of `ty` (MXFP4's scale is one byte).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::MXFP4 => &[],
    }
}

/// A random `rows × cols` weight of type `ty`: random quant bits with small, finite scales.
pub fn quantize_random(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Weight {
    let mut rng = StdRng::seed_from_u64(seed);
    let bytes: Vec<u8> = match ty {
        GgmlType::F32 => (0..rows * cols).flat_map(|_| rng.random_range(-1.0f32..1.0).to_le_bytes()).collect(),
        GgmlType::F16 => {
            (0..rows * cols).flat_map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes()).collect()
        }
        GgmlType::BF16 => {
            (0..rows * cols).flat_map(|_| bf16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes()).collect()
        }
        _ => {
            let n = ty.bytes_for(rows * cols).expect("whole blocks");
            let mut b: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            for blk in b.chunks_exact_mut(ty.type_size()) {
                for &off in scale_offsets(ty) {
                    let s = f16::from_f32(rng.random_range(0.001f32..0.05));
                    blk[off..off + 2].copy_from_slice(&s.to_le_bytes());
                }
                if ty == GgmlType::MXFP4 {
                    // e8m0 scale byte: values up to 12 · 2^(e - 128), here at most 3; one block
                    // in eight gets a subnormal scale (e 0 or 1), ggml's special case.
                    blk[0] =
                        if rng.random_range(0..8) == 0 { rng.random_range(0..2) } else { rng.random_range(118..=126) };
                }
            }
            b
        }
    };
    Weight::new(ty, rows, cols, Storage::Owned(Arc::new(bytes))).expect("consistent shape")
}
