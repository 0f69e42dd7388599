//! GGML block formats: the table of sizes and the scalar reference dequantization of each.
//!
//! Layouts follow ggml's `block_*` structs (little-endian, packed). The reference functions
//! here are the ground truth the fast kernels are tested against, and they are themselves tested
//! against the `gguf` Python package's `dequantize` on real tensors.

use half::f16;

/// Tensor element types as numbered in the GGUF file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    /// OCP microscaling FP4: 32 e2m1 values sharing one e8m0 scale (gpt-oss experts).
    MXFP4,
}

/// Super-block size of the k-quants.
pub const QK_K: usize = 256;

impl GgmlType {
    /// Maps a GGUF type id to a supported type; `Err` carries a readable name for the error.
    pub fn from_id(id: u32) -> Result<Self, String> {
        Ok(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::BF16,
            39 => Self::MXFP4,
            other => {
                let name = match other {
                    9 => "Q8_1",
                    15 => "Q8_K",
                    16..=23 | 29 => "an IQ quant",
                    24 => "I8",
                    25 => "I16",
                    26 => "I32",
                    27 => "I64",
                    28 => "F64",
                    34 | 35 => "a ternary TQ quant",
                    _ => "unknown",
                };
                return Err(format!("tensor type {other} ({name})"));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::MXFP4 => "MXFP4",
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::MXFP4 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::MXFP4 => 17,
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes needed for `n` elements, or `None` if `n` is not a whole number of blocks or the
    /// size overflows (a crafted file's element count must not wrap around).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        n.is_multiple_of(self.block_size()).then_some(n / self.block_size())?.checked_mul(self.type_size())
    }

    pub const ALL: [GgmlType; 14] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::MXFP4,
    ];
}

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Scalar reference: dequantize `out.len()` elements stored in `src` (a whole number of blocks).
pub fn dequantize(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    let bs = ty.block_size();
    let ts = ty.type_size();
    assert_eq!(out.len() % bs, 0, "{} rows need a multiple of {bs} elements", ty.name());
    assert!(src.len() >= out.len() / bs * ts, "{} source too short", ty.name());
    for (blk, y) in src.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
        match ty {
            GgmlType::F32 => y[0] = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]),
            GgmlType::F16 => y[0] = f16_at(blk, 0),
            GgmlType::BF16 => y[0] = f32::from_bits((u16::from_le_bytes([blk[0], blk[1]]) as u32) << 16),
            GgmlType::Q4_0 => dequant_q4_0(blk, y),
            GgmlType::Q4_1 => dequant_q4_1(blk, y),
            GgmlType::Q5_0 => dequant_q5_0(blk, y),
            GgmlType::Q5_1 => dequant_q5_1(blk, y),
            GgmlType::Q8_0 => dequant_q8_0(blk, y),
            GgmlType::Q2K => dequant_q2k(blk, y),
            GgmlType::Q3K => dequant_q3k(blk, y),
            GgmlType::Q4K => dequant_q4k(blk, y),
            GgmlType::Q5K => dequant_q5k(blk, y),
            GgmlType::Q6K => dequant_q6k(blk, y),
            GgmlType::MXFP4 => crate::mxfp4::dequantize_block(blk, y),
        }
    }
}

fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0xF) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn dequant_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0xF) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (((qs[j] & 0xF) as u32 | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
    }
}

fn dequant_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = ((qs[j] & 0xF) as u32 | h0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
    }
}

fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = b[2 + j] as i8 as f32 * d;
    }
}

fn dequant_q2k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    let mut is = 0;
    let mut out = 0;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for part in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0xF) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for l in 0..16 {
                    y[out] = dl * ((q[part * 16 + l] >> shift) & 3) as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

/// Unpacks the 12 bytes of Q3_K scales into 16 signed 6-bit scales (already offset by -32).
pub(crate) fn q3k_scales(s: &[u8]) -> [i32; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let a1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let tmp = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i32; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = ((aux[i / 4] >> (8 * (i % 4))) & 0xFF) as i8 as i32 - 32;
    }
    out
}

fn dequant_q3k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = q3k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    let mut is = 0;
    let mut out = 0;
    let mut m = 1u8;
    for half in 0..2 {
        let q = &qs[half * 32..half * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for part in 0..2 {
                let dl = d * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let i = part * 16 + l;
                    let hi = if hmask[i] & m != 0 { 0 } else { 4 };
                    y[out] = dl * (((q[i] >> shift) & 3) as i32 - hi) as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

/// Scale and min of sub-block `j` of a Q4_K / Q5_K super-block (6-bit packed).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn dequant_q4k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for blk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * blk, scales);
        let (sc2, m2) = scale_min_k4(2 * blk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let q = &qs[blk * 32..blk * 32 + 32];
        let y = &mut y[blk * 64..blk * 64 + 64];
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0xF) as f32 - m1;
            y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

fn dequant_q5k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for blk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * blk, scales);
        let (sc2, m2) = scale_min_k4(2 * blk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let (u1, u2) = (1u8 << (2 * blk), 2u8 << (2 * blk));
        let q = &qs[blk * 32..blk * 32 + 32];
        let y = &mut y[blk * 64..blk * 64 + 64];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * ((q[l] & 0xF) + h1) as f32 - m1;
            y[l + 32] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
        }
    }
}

fn dequant_q6k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &ql[half * 64..];
        let qh = &qh[half * 32..];
        let sc = &sc[half * 8..];
        let y = &mut y[half * 128..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8 as f32) * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8 as f32) * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8 as f32) * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8 as f32) * q4 as f32;
        }
    }
}
