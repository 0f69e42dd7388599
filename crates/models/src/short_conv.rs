//! LFM2's gated short convolution, after transformers' `Lfm2ShortConv`: `in_proj` gives `B`, `C`
//! and `x` (`hidden` each); `y = C ⊙ conv(B ⊙ x)` with a depthwise causal convolution of
//! `conv_L_cache` taps (optional bias); `out_proj`. Its state is the convolution window, one slot
//! per request in the recurrent KV cache group (see `recurrent_state.rs`).

use crate::batch::ForwardBatch;
use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::layers::Linear;
use crate::recurrent_state::convolve_requests;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;

pub struct ShortConv {
    pub hidden: usize,
    pub kernel: usize,
    pub in_proj: Linear,
    /// `hidden × kernel`.
    pub conv_weight: Vec<f32>,
    pub conv_bias: Option<Vec<f32>>,
    pub out_proj: Linear,
}

/// Scratch of a short-convolution layer.
#[derive(Default)]
pub struct ShortConvBuffers {
    bcx: Vec<f32>,
    y: Vec<f32>,
    row: Vec<f32>,
}

impl ShortConv {
    /// Loads `{prefix}.in_proj`, `{prefix}.conv` and `{prefix}.out_proj` (biases if `bias`).
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, kernel: usize, bias: bool) -> Result<Self> {
        let lin = |name: &str, out: usize| Linear::load(ck, &format!("{prefix}.{name}"), out, hidden, bias);
        Ok(ShortConv {
            hidden,
            kernel,
            in_proj: lin("in_proj", 3 * hidden)?,
            conv_weight: ck.vector(&format!("{prefix}.conv.weight"), hidden * kernel)?,
            conv_bias: if bias { Some(ck.vector(&format!("{prefix}.conv.bias"), hidden)?) } else { None },
            out_proj: lin("out_proj", hidden)?,
        })
    }

    pub fn kv_cache_spec(&self) -> KvCacheSpec {
        KvCacheSpec::Recurrent { state_elements: (self.kernel - 1) * self.hidden }
    }

    /// `x` is the normed hidden state (`tokens × hidden`); writes `tokens × hidden` into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        batch: &ForwardBatch,
        kv: &mut KvCache,
        layer: usize,
        ws: &mut ShortConvBuffers,
        out: &mut Vec<f32>,
    ) {
        let (n, h) = (batch.num_tokens(), self.hidden);
        let ShortConvBuffers { bcx, y, row } = ws;
        self.in_proj.forward(be, x, n, bcx);
        // y = B ⊙ x per token, then convolved in place, then gated by C.
        y.clear();
        for t in bcx.chunks_exact(3 * h) {
            y.extend(t[..h].iter().zip(&t[2 * h..]).map(|(b, x)| b * x));
        }
        convolve_requests(be, kv, layer, batch, y, h, (&self.conv_weight, self.kernel), row);
        for (yt, t) in y.chunks_exact_mut(h).zip(bcx.chunks_exact(3 * h)) {
            for (i, v) in yt.iter_mut().enumerate() {
                let conv = *v + self.conv_bias.as_ref().map_or(0.0, |b| b[i]);
                *v = t[h + i] * conv;
            }
        }
        self.out_proj.forward(be, y, n, out);
    }
}
