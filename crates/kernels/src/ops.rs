//! Row-wise ops: normalization, rotary embeddings, activations, softmax.
//!
//! Each works on one row at a time, so a row's result never depends on the batch around it.
//! They are a small share of the time next to matmul and attention; plain loops the compiler
//! vectorizes are enough until a profile says otherwise.

/// RMSNorm in place: `x = x / sqrt(mean(x²) + eps) * (offset + w)`.
/// `offset` is 1 for Gemma's `(1 + w)` weights, 0 otherwise.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32, offset: f32) {
    let inv = inv_rms(x, eps);
    for (v, g) in x.iter_mut().zip(w) {
        *v = (*v * inv) * (offset + g);
    }
}

/// `1 / sqrt(mean(x²) + eps)` with a fixed 8-lane reduction order.
pub fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let mut acc = [0f32; 8];
    let k8 = x.len() / 8 * 8;
    for c in x[..k8].chunks_exact(8) {
        for l in 0..8 {
            acc[l] += c[l] * c[l];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for v in &x[k8..] {
        s += v * v;
    }
    1.0 / (s / x.len() as f32 + eps).sqrt()
}

/// RMSNorm of every `dim`-sized row of `x` in place.
pub fn rms_norm_rows(x: &mut [f32], dim: usize, w: &[f32], eps: f32, offset: f32) {
    for row in x.chunks_exact_mut(dim) {
        rms_norm(row, w, eps, offset);
    }
}

/// Rotary-embedding tables for a set of positions: `cos`/`sin` are `[positions × dim/2]`.
#[derive(Default)]
pub struct RopeTable {
    pub half: usize,
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

/// Inverse frequencies `1 / base^(2i/dim)` computed in f32 as transformers does.
pub fn rope_inv_freq(base: f32, dim: usize) -> Vec<f32> {
    (0..dim / 2).map(|i| 1.0 / base.powf((2 * i) as f32 / dim as f32)).collect()
}

impl RopeTable {
    pub fn new(inv_freq: &[f32], positions: &[u32]) -> Self {
        let mut t = RopeTable::default();
        t.fill(inv_freq, positions);
        t
    }

    /// Recomputes the table for `positions`, reusing its buffers.
    pub fn fill(&mut self, inv_freq: &[f32], positions: &[u32]) {
        self.half = inv_freq.len();
        self.cos.clear();
        self.sin.clear();
        for &p in positions {
            for &f in inv_freq {
                // The angle is an f32 product as in transformers; cos/sin rounded from f64.
                let a = (p as f32 * f) as f64;
                self.cos.push(a.cos() as f32);
                self.sin.push(a.sin() as f32);
            }
        }
    }
}

/// Applies RoPE to the heads of one token row (`heads × head_dim`), token index `t` in `table`.
/// `interleaved`: pairs are `(2i, 2i+1)` (llama.cpp's GGUF layout for llama) instead of
/// `(i, i + dim/2)` (transformers' rotate-half).
pub fn rope(row: &mut [f32], head_dim: usize, table: &RopeTable, t: usize, interleaved: bool) {
    let h = table.half;
    let cos = &table.cos[t * h..(t + 1) * h];
    let sin = &table.sin[t * h..(t + 1) * h];
    for head in row.chunks_exact_mut(head_dim) {
        for i in 0..h {
            let (a, b) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + h) };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x1 * cos[i] + x0 * sin[i];
        }
    }
}

/// `gate = silu(gate) * up` (SwiGLU).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `gate = gelu_tanh(gate) * up` (GeGLU with the tanh approximation, `gelu_pytorch_tanh`).
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = 0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh()) * u;
    }
}

/// In-place softmax; returns nothing, leaves a probability vector.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `a += b`.
pub fn add_assign(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    #[test]
    fn rms_norm_matches_f64() {
        let x = rand_vec(96, 1);
        let w = rand_vec(96, 2);
        let mut y = x.clone();
        rms_norm(&mut y, &w, 1e-6, 1.0);
        let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 96.0;
        for i in 0..96 {
            let want = x[i] as f64 / (ms + 1e-6).sqrt() * (1.0 + w[i] as f64);
            assert!((y[i] as f64 - want).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn rope_rotates_pairs_and_keeps_norm() {
        let inv = rope_inv_freq(10000.0, 8);
        let table = RopeTable::new(&inv, &[0, 5]);
        let x = rand_vec(16, 3);
        for interleaved in [false, true] {
            let mut y = x.clone();
            rope(&mut y, 8, &table, 0, interleaved);
            assert_eq!(y, x, "position 0 is the identity");
            rope(&mut y, 8, &table, 1, interleaved);
            for (i, &f) in inv.iter().enumerate() {
                let (a, b) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + 4) };
                let ang = 5.0 * f as f64;
                let want_a = x[a] as f64 * ang.cos() - x[b] as f64 * ang.sin();
                assert!((y[a] as f64 - want_a).abs() < 1e-6);
                let n0 = x[a].hypot(x[b]);
                assert!((y[a].hypot(y[b]) - n0).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn activations_match_formulas() {
        let g = rand_vec(64, 4);
        let u = rand_vec(64, 5);
        let mut s = g.clone();
        silu_mul(&mut s, &u);
        let mut ge = g.clone();
        gelu_tanh_mul(&mut ge, &u);
        for i in 0..64 {
            let x = g[i] as f64;
            let silu = x / (1.0 + (-x).exp()) * u[i] as f64;
            let gelu = 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
            assert!((s[i] as f64 - silu).abs() < 1e-6);
            assert!((ge[i] as f64 - gelu * u[i] as f64).abs() < 1e-6);
        }
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut x = rand_vec(50, 6);
        let orig = x.clone();
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        let am = |v: &[f32]| v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(am(&x), am(&orig));
    }
}
