//! The normalizations a decoder layer can use: RMSNorm (Llama, Gemma) or LayerNorm with a
//! bias (GPT-2, OPT), behind one [`Norm`] so the decoder skeleton does not care which.

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::RmsNorm;
use vllm_rs_kernels::{ops, pool};

/// `y = (x - mean(x)) / sqrt(var(x) + eps) * w + b` per row (torch's `nn.LayerNorm`).
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `{name}.weight` and `{name}.bias`.
    pub fn load(ck: &Checkpoint, name: &str, dim: usize, eps: f32) -> Result<Self> {
        Ok(LayerNorm {
            weight: ck.vector(&format!("{name}.weight"), dim)?,
            bias: ck.vector(&format!("{name}.bias"), dim)?,
            eps,
        })
    }

    /// Normalizes one row in place. Mean and variance are summed in f64: one order for every
    /// row (batch invariance) and closer to the exact value than any f32 order.
    fn row(&self, x: &mut [f32]) {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let inv = (1.0 / (var + self.eps as f64).sqrt()) as f32;
        let mean = mean as f32;
        for ((v, w), b) in x.iter_mut().zip(&self.weight).zip(&self.bias) {
            *v = (*v - mean) * inv * w + b;
        }
    }

    /// Normalizes every `weight.len()`-sized row in place.
    pub fn forward(&self, x: &mut [f32]) {
        let d = self.weight.len();
        pool::rows_mut(x, d, pool::min_rows(d), |_, rows| rows.chunks_exact_mut(d).for_each(|r| self.row(r)));
    }
}

pub enum Norm {
    Rms(RmsNorm),
    Layer(LayerNorm),
    /// No normalization (before an absent half of a block; see `decoder.rs`).
    Identity,
    /// Multiplies by a constant (Granite's `residual_multiplier` on each sub-layer's output).
    Scale(f32),
}

impl Norm {
    /// Normalizes every row of `x` in place.
    pub fn forward(&self, x: &mut [f32]) {
        match self {
            Norm::Rms(n) => n.forward(x),
            Norm::Layer(n) => n.forward(x),
            Norm::Identity => {}
            Norm::Scale(m) => x.iter_mut().for_each(|v| *v *= m),
        }
    }

    /// The residual add and this norm: `h += y`, then `x` = `h` normalized.
    pub fn add_forward(&self, h: &mut [f32], y: &[f32], x: &mut Vec<f32>) {
        match self {
            Norm::Rms(n) => n.add_forward(h, y, x),
            Norm::Layer(_) | Norm::Identity | Norm::Scale(_) => {
                ops::add_assign(h, y);
                x.clear();
                x.extend_from_slice(h);
                self.forward(x);
            }
        }
    }
}
