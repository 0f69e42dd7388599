//! Activations quantized to int16 for dot products with quantized weights.
//!
//! Each block of 32 values gets its own scale (`x ≈ q · d`, `|q| ≤ 32767`), so the rounding error
//! is at most `max|x_block| / 65534` — about 1.5e-5 of the block's largest value, far below the
//! 8-bit activations llama.cpp uses (≈ 4e-3) and below bf16's own rounding. Integer dot products
//! over a block are exact, so only the per-block float epilogue has an order to fix.

/// Values per activation block.
pub const QA_BLOCK: usize = 32;

/// `m` rows of `k` activations, quantized.
#[derive(Default)]
pub struct QuantizedActs {
    pub m: usize,
    pub k: usize,
    pub q: Vec<i16>,
    /// One scale per 32-block: `m × k/32`.
    pub d: Vec<f32>,
    /// `Σ q` over each 16 values: `m × k/16` (for weight formats with offsets/minimums).
    pub sum16: Vec<i32>,
}

/// One row's view.
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub q: &'a [i16],
    pub d: &'a [f32],
    pub sum16: &'a [i32],
}

impl QuantizedActs {
    /// Quantizes `x` (`m × k`, `k` a multiple of 32) into `self`, reusing its buffers.
    pub fn quantize_into(&mut self, x: &[f32], m: usize, k: usize) {
        assert_eq!(k % QA_BLOCK, 0, "activation length {k} is not a multiple of {QA_BLOCK}");
        assert_eq!(x.len(), m * k);
        self.m = m;
        self.k = k;
        self.q.resize(m * k, 0);
        self.d.resize(m * k / QA_BLOCK, 0.0);
        self.sum16.resize(m * k / 16, 0);
        for (b, xb) in x.chunks_exact(QA_BLOCK).enumerate() {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let (d, id) = if amax > 0.0 { (amax / 32767.0, 32767.0 / amax) } else { (0.0, 0.0) };
            self.d[b] = d;
            let qb = &mut self.q[b * QA_BLOCK..(b + 1) * QA_BLOCK];
            for (q, v) in qb.iter_mut().zip(xb) {
                *q = (v * id).round().clamp(-32767.0, 32767.0) as i16;
            }
            self.sum16[2 * b] = qb[..16].iter().map(|&v| v as i32).sum();
            self.sum16[2 * b + 1] = qb[16..].iter().map(|&v| v as i32).sum();
        }
    }

    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        let mut a = QuantizedActs::default();
        a.quantize_into(x, m, k);
        a
    }

    pub fn row(&self, i: usize) -> ActRow<'_> {
        let k = self.k;
        ActRow {
            q: &self.q[i * k..(i + 1) * k],
            d: &self.d[i * k / QA_BLOCK..(i + 1) * k / QA_BLOCK],
            sum16: &self.sum16[i * k / 16..(i + 1) * k / 16],
        }
    }

    /// The values the quantized row stands for (tests and error budgets).
    pub fn dequantize_row(&self, i: usize) -> Vec<f32> {
        let r = self.row(i);
        r.q.iter().enumerate().map(|(t, &q)| q as f32 * r.d[t / QA_BLOCK]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    #[test]
    fn error_is_within_half_a_step_and_sums_are_exact() {
        let mut x = rand_vec(4 * 64, 9);
        x[5] = 40.0; // an outlier only affects its own block
        x[70..102].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        let a = QuantizedActs::quantize(&x, 4, 64);
        for i in 0..4 {
            let y = a.dequantize_row(i);
            for t in 0..64 {
                let blk = &x[i * 64 + t / 32 * 32..i * 64 + t / 32 * 32 + 32];
                let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!((y[t] - x[i * 64 + t]).abs() <= amax / 65534.0 * 1.0001 + 1e-12);
            }
            let r = a.row(i);
            for h in 0..4 {
                assert_eq!(r.sum16[h], r.q[h * 16..h * 16 + 16].iter().map(|&v| v as i32).sum::<i32>());
            }
        }
    }
}
