//! Feed-forward blocks: the gated MLP (SwiGLU, GeGLU) of Llama and Gemma, and the plain
//! `fc2(act(fc1(x)))` with biases of GPT-2 and OPT, behind one [`FeedForward`].

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::Linear;
use crate::moe::{MoeBuffers, SparseMoe};
use vllm_rs_kernels::Backend;

pub use vllm_rs_kernels::ops::Activation;

/// `down(act(gate(x)) * up(x))`.
pub struct GatedMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    pub act: Activation,
    /// Multiply the gate projection (before the activation) and the output (Falcon-H1's
    /// `mlp_multipliers`); `[1, 1]` for none.
    pub scales: [f32; 2],
}

impl GatedMlp {
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, inter: usize, act: Activation) -> Result<Self> {
        Ok(GatedMlp {
            gate_proj: Linear::load(ck, &format!("{prefix}.gate_proj"), inter, hidden, false)?,
            up_proj: Linear::load(ck, &format!("{prefix}.up_proj"), inter, hidden, false)?,
            down_proj: Linear::load(ck, &format!("{prefix}.down_proj"), hidden, inter, false)?,
            act,
            scales: [1.0, 1.0],
        })
    }

    /// Writes `m × hidden` into `out`, using `gate` and `up` as scratch.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        m: usize,
        gate: &mut Vec<f32>,
        up: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) {
        Linear::matmul_many(be, [&self.gate_proj, &self.up_proj], x, m, [gate, up]);
        self.activate(be, gate, up);
        Linear::matmul_many(be, [&self.down_proj], gate, m, [out]);
        self.finish(be, out);
    }

    /// What follows the gate and up matmuls (theirs alone, without biases): their biases, the
    /// gate's scale and the activation, leaving the down projection's input in `gate`. A MoE
    /// layer's experts, whose matmuls run as one job, call it too.
    pub fn activate(&self, be: &dyn Backend, gate: &mut [f32], up: &mut [f32]) {
        self.gate_proj.add_bias(be, gate);
        self.up_proj.add_bias(be, up);
        if self.scales[0] != 1.0 {
            be.scale(gate, self.scales[0]);
        }
        be.gated_activation(self.act, gate, up);
    }

    /// What follows the down matmul: its bias and the output scale.
    pub fn finish(&self, be: &dyn Backend, out: &mut [f32]) {
        self.down_proj.add_bias(be, out);
        if self.scales[1] != 1.0 {
            be.scale(out, self.scales[1]);
        }
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
    pub fn forward(&self, be: &dyn Backend, x: &[f32], m: usize, inner: &mut Vec<f32>, out: &mut Vec<f32>) {
        Linear::matmul_many(be, [&self.fc1], x, m, [inner]);
        self.activate(be, inner);
        self.fc2.forward(be, inner, m, out);
    }

    /// What follows the `fc1` matmul (without its bias): the bias and the activation.
    pub fn activate(&self, be: &dyn Backend, inner: &mut [f32]) {
        self.fc1.add_bias(be, inner);
        be.activation(self.act, inner);
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
        be: &dyn Backend,
        x: &[f32],
        m: usize,
        [gate, up]: [&mut Vec<f32>; 2],
        moe: &mut MoeBuffers,
        out: &mut Vec<f32>,
    ) {
        match self {
            FeedForward::Gated(mlp) => mlp.forward(be, x, m, gate, up, out),
            FeedForward::Plain(mlp) => mlp.forward(be, x, m, gate, out),
            FeedForward::Moe(block) => block.forward(be, x, m, moe, out),
            FeedForward::None => unreachable!("the decoder skips absent halves"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vllm_rs_kernels::ops;

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
        vllm_rs_kernels::backend::default().activation(Activation::parse("gelu").unwrap(), &mut x);
        assert_eq!(x, [gelu(-2.0), gelu(0.25)]);
    }
}
