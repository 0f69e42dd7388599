//! Feed-forward blocks: the gated MLP (SwiGLU, GeGLU) of Llama and Gemma, and the plain
//! `fc2(act(fc1(x)))` with biases of GPT-2 and OPT, behind one [`FeedForward`].

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::Linear;
use crate::moe::{MoeBuffers, SparseMoe};
use vllm_rs_kernels::ops;

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))`, as `ops::gelu_tanh_mul` computes it.
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Silu,
    GeluTanh,
    /// Exact GELU (erf).
    Gelu,
    Relu,
    /// `relu(x)²` (Nemotron-H).
    Relu2,
    /// gpt-oss's experts, gated only: `g = min(gate, limit)`, `u = clamp(up, ±limit)`,
    /// `(u + 1) · g · σ(alpha · g)`.
    ClampedSwiglu {
        alpha: f32,
        limit: f32,
    },
}

impl Activation {
    /// `x = act(x)` for a feed-forward block without a gate.
    pub fn apply(self, x: &mut [f32]) {
        match self {
            Activation::Silu => x.iter_mut().for_each(|v| *v /= 1.0 + ops::exp(-*v)),
            Activation::GeluTanh => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
            Activation::Gelu => ops::gelu_erf(x),
            Activation::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
            Activation::Relu2 => x.iter_mut().for_each(|v| *v = v.max(0.0) * v.max(0.0)),
            // Only gpt-oss's expert MLPs (always gated) are built with it; no config names it.
            Activation::ClampedSwiglu { .. } => unreachable!("the clamped SwiGLU needs its up projection"),
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Activation::Silu),
            // GPT-2's `gelu_new` is the same tanh approximation.
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" => Some(Activation::GeluTanh),
            "gelu" => Some(Activation::Gelu),
            "relu" => Some(Activation::Relu),
            "relu2" => Some(Activation::Relu2),
            _ => None,
        }
    }
}

/// `down(act(gate(x)) * up(x))`.
pub struct GatedMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    pub act: Activation,
}

impl GatedMlp {
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, inter: usize, act: Activation) -> Result<Self> {
        Ok(GatedMlp {
            gate_proj: Linear::load(ck, &format!("{prefix}.gate_proj"), inter, hidden, false)?,
            up_proj: Linear::load(ck, &format!("{prefix}.up_proj"), inter, hidden, false)?,
            down_proj: Linear::load(ck, &format!("{prefix}.down_proj"), hidden, inter, false)?,
            act,
        })
    }

    /// Writes `m × hidden` into `out`, using `gate` and `up` as scratch.
    pub fn forward(&self, x: &[f32], m: usize, gate: &mut Vec<f32>, up: &mut Vec<f32>, out: &mut Vec<f32>) {
        Linear::forward_many([&self.gate_proj, &self.up_proj], x, m, [gate, up]);
        match self.act {
            Activation::Silu => ops::silu_mul(gate, up),
            Activation::GeluTanh => ops::gelu_tanh_mul(gate, up),
            Activation::ClampedSwiglu { alpha, limit } => {
                for (g, u) in gate.iter_mut().zip(up.iter()) {
                    let (x, u) = (g.min(limit), u.clamp(-limit, limit));
                    *g = (u + 1.0) * (x / (1.0 + ops::exp(-alpha * x)));
                }
            }
            act @ (Activation::Gelu | Activation::Relu | Activation::Relu2) => {
                act.apply(gate);
                gate.iter_mut().zip(up.iter()).for_each(|(g, u)| *g *= u);
            }
        }
        self.down_proj.forward(gate, m, out);
    }
}

/// `fc2(act(fc1(x)))`, each projection with its bias.
pub struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
    pub act: Activation,
}

impl Mlp {
    /// Writes `m × hidden` into `out`, using `inner` as scratch.
    pub fn forward(&self, x: &[f32], m: usize, inner: &mut Vec<f32>, out: &mut Vec<f32>) {
        self.fc1.forward(x, m, inner);
        self.act.apply(inner);
        self.fc2.forward(inner, m, out);
    }
}

pub enum FeedForward {
    Gated(GatedMlp),
    Plain(Mlp),
    Moe(Box<SparseMoe>),
    /// The block has no feed-forward half (Nemotron-H's blocks hold one mixer or one MLP).
    None,
}

impl FeedForward {
    /// Writes `m × hidden` into `out`, using `gate` and `up` (and `moe`) as scratch.
    pub fn forward(
        &self,
        x: &[f32],
        m: usize,
        [gate, up]: [&mut Vec<f32>; 2],
        moe: &mut MoeBuffers,
        out: &mut Vec<f32>,
    ) {
        match self {
            FeedForward::Gated(mlp) => mlp.forward(x, m, gate, up, out),
            FeedForward::Plain(mlp) => mlp.forward(x, m, gate, out),
            FeedForward::Moe(block) => block.forward(x, m, moe, out),
            FeedForward::None => unreachable!("the decoder skips absent halves"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gelu(x: f32) -> f32 {
        let mut v = [x];
        ops::gelu_erf(&mut v);
        v[0]
    }

    /// The error function, Abramowitz & Stegun 7.1.26 in f64: absolute error below 1.5e-7, about
    /// one f32 ulp of `erf` near 1 (std has no `erf`).
    fn erf(x: f64) -> f64 {
        const P: f64 = 0.327_591_1;
        const A: [f64; 5] = [0.254_829_592, -0.284_496_736, 1.421_413_741, -1.453_152_027, 1.061_405_429];
        let t = 1.0 / (1.0 + P * x.abs());
        let poly = A.iter().rev().fold(0.0, |acc, a| (acc + a) * t);
        (1.0 - poly * (-x * x).exp()).copysign(x)
    }

    #[test]
    fn erf_and_gelu_match_reference_values() {
        // math.erf / torch.nn.functional.gelu in float64.
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-0.3, -0.328_626_759_459_127_4),
            (2.5, 0.999_593_047_982_555),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}, want {want}", erf(x));
        }
        // f32 rounding of the result (half an ulp: 1.2e-7 near 3) plus the erf error.
        for (x, want) in
            [(1.0f32, 0.841_344_746_068_543f64), (-1.5, -0.100_210_801_903_287), (3.0, 2.995_950_305_905_11)]
        {
            assert!((gelu(x) as f64 - want).abs() < 5e-7, "gelu({x}) = {}, want {want}", gelu(x));
        }
        // Over a range, against the f64 formula (an f32 ulp near 10 is 1e-6).
        for i in -800..=800 {
            let x = i as f32 / 80.0;
            let want = 0.5 * x as f64 * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2));
            let tol = 3e-7 * (x as f64).abs().max(1.0);
            assert!((gelu(x) as f64 - want).abs() < tol, "gelu({x}) = {}, want {want}", gelu(x));
        }
        let mut x = [-2.0f32, 0.25];
        Activation::parse("gelu").unwrap().apply(&mut x);
        assert_eq!(x, [gelu(-2.0), gelu(0.25)]);
    }
}
