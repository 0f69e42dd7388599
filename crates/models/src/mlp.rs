//! Feed-forward blocks: the gated MLP (SwiGLU, GeGLU) of Llama and Gemma, and the plain
//! `fc2(act(fc1(x)))` with biases of GPT-2 and OPT, behind one [`FeedForward`].

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::Linear;
use vllm_rs_kernels::ops;

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))`, as `ops::gelu_tanh_mul` computes it.
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
    Relu,
}

impl Activation {
    /// `x = act(x)` for a feed-forward block without a gate.
    pub fn apply(self, x: &mut [f32]) {
        match self {
            Activation::Silu => x.iter_mut().for_each(|v| *v /= 1.0 + ops::exp(-*v)),
            Activation::GeluTanh => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
            Activation::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Activation::Silu),
            // GPT-2's `gelu_new` is the same tanh approximation.
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" => Some(Activation::GeluTanh),
            "relu" => Some(Activation::Relu),
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
            Activation::Relu => {
                Activation::Relu.apply(gate);
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
}

impl FeedForward {
    /// Writes `m × hidden` into `out`, using `gate` and `up` as scratch.
    pub fn forward(&self, x: &[f32], m: usize, gate: &mut Vec<f32>, up: &mut Vec<f32>, out: &mut Vec<f32>) {
        match self {
            FeedForward::Gated(mlp) => mlp.forward(x, m, gate, up, out),
            FeedForward::Plain(mlp) => mlp.forward(x, m, gate, out),
        }
    }
}
