//! The normalizations a decoder layer can use: RMSNorm (Llama, Gemma) or LayerNorm with a
//! bias (GPT-2, OPT), behind one [`Norm`] so the decoder skeleton does not care which.

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::RmsNorm;
use vllm_rs_kernels::Backend;

/// `y = (x - mean(x)) / sqrt(var(x) + eps) * w (+ b)` per row (torch's `nn.LayerNorm`; the
/// bias is optional, as `bias=False` in torch: ModernBERT's `norm_bias`).
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `{name}.weight` and `{name}.bias`.
    pub fn load(ck: &Checkpoint, name: &str, dim: usize, eps: f32) -> Result<Self> {
        LayerNorm::load_with(ck, name, dim, eps, true)
    }

    /// Loads `{name}.weight` and, if `bias`, `{name}.bias`.
    pub fn load_with(ck: &Checkpoint, name: &str, dim: usize, eps: f32, bias: bool) -> Result<Self> {
        Ok(LayerNorm {
            weight: ck.vector(&format!("{name}.weight"), dim)?,
            bias: if bias { Some(ck.vector(&format!("{name}.bias"), dim)?) } else { None },
            eps,
        })
    }

    /// Normalizes every `weight.len()`-sized row in place.
    pub fn forward(&self, be: &dyn Backend, x: &mut [f32]) {
        be.layer_norm_rows(x, &self.weight, self.bias.as_deref(), self.eps);
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
    pub fn forward(&self, be: &dyn Backend, x: &mut [f32]) {
        match self {
            Norm::Rms(n) => n.forward(be, x),
            Norm::Layer(n) => n.forward(be, x),
            Norm::Identity => {}
            Norm::Scale(m) => be.scale(x, *m),
        }
    }

    /// The residual add and this norm: `h += y`, then `x` = `h` normalized.
    pub fn add_forward(&self, be: &dyn Backend, h: &mut [f32], y: &[f32], x: &mut Vec<f32>) {
        match self {
            Norm::Rms(n) => n.add_forward(be, h, y, x),
            Norm::Layer(_) | Norm::Identity | Norm::Scale(_) => {
                be.add_assign(h, y);
                x.clear();
                x.extend_from_slice(h);
                self.forward(be, x);
            }
        }
    }
}
