//! Mamba-2's selective state space mixer (Nemotron-H; Falcon-H1 and Granite 4 share it), after
//! transformers' `NemotronHMamba2Mixer`: `in_proj` gives the gate `z`, the convolved stream
//! `xBC` (x, then `n_groups` B and C vectors) and a time step per head; a depthwise causal
//! convolution with SiLU over `xBC`; per head a `head_dim × state_size` state updated token by
//! token (`S ← exp(dt·A)·S + dt·B ⊗ x`, `y = S·C + D·x`, `dt = softplus(dt + dt_bias)` clamped
//! below at `time_step_min`); `y·silu(z)` normalized per group (or Falcon-H1's variants:
//! [`GatedNorm`]); `out_proj`. Falcon-H1 also scales the input and each part of `in_proj`'s
//! output (its µP multipliers).
//!
//! Each request keeps one state slot (its convolution window, then its heads' states) in the
//! recurrent KV cache group (see `recurrent_state.rs`).

use crate::batch::{ForwardBatch, SeqAttention};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::recurrent_state::{HeadLayout, convolve_requests, positive, scan_heads, softplus};
use serde_json::Value;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::ops::Activation;
use vllm_rs_kernels::{ops, pool};

/// Shapes of a Mamba-2 mixer.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2Dims {
    pub num_heads: usize,
    pub head_dim: usize,
    pub state_size: usize,
    pub n_groups: usize,
    pub conv_kernel: usize,
}

impl Mamba2Dims {
    /// From Nemotron-H's config keys.
    pub fn parse(config: &Value) -> Result<Self> {
        Self::parse_keys(config, ["mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel"])
    }

    /// From the config keys named `[heads, head_dim, state_size, n_groups, conv_kernel]`.
    pub fn parse_keys(config: &Value, keys: [&str; 5]) -> Result<Self> {
        let get = |key: &str| positive(config, key);
        let d = Mamba2Dims {
            num_heads: get(keys[0])?,
            head_dim: get(keys[1])?,
            state_size: get(keys[2])?,
            n_groups: get(keys[3])?,
            conv_kernel: get(keys[4])?,
        };
        if !d.num_heads.is_multiple_of(d.n_groups) || d.conv_kernel < 2 {
            return Err(Error::msg(format!(
                "config: {} ({}) must be a multiple of {} ({}) and {} ({}) at least 2",
                keys[0], d.num_heads, keys[3], d.n_groups, keys[4], d.conv_kernel
            )));
        }
        Ok(d)
    }

    fn inner(&self) -> usize {
        self.num_heads * self.head_dim
    }

    fn conv_dim(&self) -> usize {
        self.inner() + 2 * self.n_groups * self.state_size
    }

    fn conv_state(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    fn head_state(&self) -> usize {
        self.head_dim * self.state_size
    }

    pub fn state_elements(&self) -> usize {
        self.conv_state() + self.num_heads * self.head_state()
    }
}

/// How the scan's output `y` meets the gate `z` and the group RMSNorm.
pub enum GatedNorm {
    /// `rmsnorm(y·silu(z))·w` (Nemotron-H, Granite 4; Falcon-H1 unless `mamba_norm_before_gate`).
    AfterGate(Vec<f32>),
    /// `rmsnorm(y)·w·silu(z)` (Falcon-H1's `mamba_norm_before_gate`).
    BeforeGate(Vec<f32>),
    /// `y·silu(z)`, no norm (Falcon-H1 without `mamba_rms_norm`).
    None,
}

/// What differs between the families' Mamba-2 blocks at load.
pub struct Mamba2Options {
    pub in_bias: bool,
    pub out_bias: bool,
    pub conv_bias: bool,
    pub time_step_min: f32,
    /// Whether there is a norm and where it goes: `Some(before_gate)`.
    pub norm: Option<bool>,
    pub eps: f32,
}

/// The floor of `time_step_limit` (`[min, max]`; transformers writes ∞ as
/// `{"__float__": "Infinity"}`), 0 when absent. A finite ceiling is refused: it is never set.
pub fn time_step_min(config: &Value) -> Result<f32> {
    let Some(limit) = config.get("time_step_limit").filter(|v| !v.is_null()) else {
        return Ok(0.0);
    };
    let bad = || Error::msg(format!("config: time_step_limit {limit} is not supported (only [min, Infinity])"));
    let list = limit.as_array().filter(|l| l.len() == 2).ok_or_else(bad)?;
    let min = list[0].as_f64().ok_or_else(bad)?;
    if list[1]["__float__"] != "Infinity" {
        return Err(bad());
    }
    Ok(min as f32)
}

pub struct Mamba2 {
    pub dims: Mamba2Dims,
    /// Multiplies the input before `in_proj` (Falcon-H1's `ssm_in_multiplier`; 1 for none).
    pub in_scale: f32,
    pub in_proj: Linear,
    /// Multiply `in_proj`'s output by part: z, x, B, C, dt (Falcon-H1's `ssm_multipliers`).
    pub proj_scales: Option<[f32; 5]>,
    /// `conv_dim × kernel`, and its bias.
    pub conv_weight: Vec<f32>,
    pub conv_bias: Option<Vec<f32>>,
    /// `−exp(A_log)` per head.
    pub neg_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub d: Vec<f32>,
    pub time_step_min: f32,
    pub norm: GatedNorm,
    pub eps: f32,
    pub out_proj: Linear,
}

/// Scratch of a Mamba-2 mixer.
#[derive(Default)]
pub struct Mamba2Buffers {
    proj: Vec<f32>,
    scaled: Vec<f32>,
    xbc: Vec<f32>,
    dt: Vec<f32>,
    y: Vec<f32>,
    row: Vec<f32>,
}

impl Mamba2 {
    /// Loads `{prefix}.in_proj`, `conv1d`, `A_log` (or `A`, already `−exp(A_log)`, as llama.cpp
    /// stores it), `dt_bias`, `D`, `norm` (where `o.norm` has one), `out_proj`.
    pub fn load(ck: &Checkpoint, prefix: &str, hidden: usize, dims: Mamba2Dims, o: &Mamba2Options) -> Result<Self> {
        let (nh, conv) = (dims.num_heads, dims.conv_dim());
        let vec = |name: &str, n: usize| ck.vector(&format!("{prefix}.{name}"), n);
        let norm = match o.norm {
            None => GatedNorm::None,
            Some(false) => GatedNorm::AfterGate(vec("norm.weight", dims.inner())?),
            Some(true) => GatedNorm::BeforeGate(vec("norm.weight", dims.inner())?),
        };
        Ok(Mamba2 {
            dims,
            in_scale: 1.0,
            in_proj: Linear::load(ck, &format!("{prefix}.in_proj"), dims.inner() + conv + nh, hidden, o.in_bias)?,
            proj_scales: None,
            conv_weight: vec("conv1d.weight", conv * dims.conv_kernel)?,
            conv_bias: if o.conv_bias { Some(vec("conv1d.bias", conv)?) } else { None },
            neg_a: match ck.optional_vector(&format!("{prefix}.A"), nh)? {
                Some(a) => a,
                None => vec("A_log", nh)?.iter().map(|a| -a.exp()).collect(),
            },
            dt_bias: vec("dt_bias", nh)?,
            d: vec("D", nh)?,
            time_step_min: o.time_step_min,
            norm,
            eps: o.eps,
            out_proj: Linear::load(ck, &format!("{prefix}.out_proj"), hidden, dims.inner(), o.out_bias)?,
        })
    }

    pub fn kv_cache_spec(&self) -> KvCacheSpec {
        KvCacheSpec::Recurrent { state_elements: self.dims.state_elements() }
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
        ws: &mut Mamba2Buffers,
        out: &mut Vec<f32>,
    ) {
        let (n, d) = (batch.num_tokens(), self.dims);
        let (inner, conv, nh) = (d.inner(), d.conv_dim(), d.num_heads);
        let Mamba2Buffers { proj, scaled, xbc, dt, y, row } = ws;
        let x = if self.in_scale == 1.0 {
            x
        } else {
            scaled.clear();
            scaled.extend_from_slice(x);
            be.scale(scaled, self.in_scale);
            &scaled[..]
        };
        self.in_proj.forward(be, x, n, proj);
        let width = inner + conv + nh;
        if let Some(m) = self.proj_scales {
            self.scale_parts(proj, m);
        }
        // z stays in `proj`; xBC and dt are copied out.
        xbc.clear();
        dt.clear();
        for r in proj.chunks_exact(width) {
            xbc.extend_from_slice(&r[inner..inner + conv]);
            dt.extend(
                r[inner + conv..].iter().zip(&self.dt_bias).map(|(v, b)| softplus(v + b).max(self.time_step_min)),
            );
        }
        convolve_requests(be, kv, layer, batch, xbc, conv, (&self.conv_weight, d.conv_kernel), row);
        if let Some(bias) = &self.conv_bias {
            be.add_rows(xbc, bias);
        }
        be.activation(Activation::Silu, xbc);
        y.resize(n * inner, 0.0);
        let seqs = &batch.groups[kv.group_of(layer)].seqs;
        let (states, per_slot) = kv.states_mut(layer);
        self.scan(be, xbc, dt, (seqs, batch.state_saves), states, per_slot, y);
        self.gated_norm(y, proj);
        self.out_proj.forward(be, y, n, out);
    }

    /// The state update over every request's tokens in order, one task per (request, head).
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        be: &dyn Backend,
        xbc: &[f32],
        dt: &[f32],
        (seqs, saves): (&[SeqAttention], &[(usize, u32)]),
        states: &mut [f32],
        per_slot: usize,
        y: &mut [f32],
    ) {
        let d = self.dims;
        let (conv, nh, p, ns) = (d.conv_dim(), d.num_heads, d.head_dim, d.state_size);
        let heads_per_group = nh / d.n_groups;
        let l = HeadLayout { heads: nh, conv_state: d.conv_state(), head_state: d.head_state(), head_out: p };
        scan_heads((seqs, saves), (states, per_slot), l, y, |t, h, state, out, _| {
            let g = h / heads_per_group;
            let r = &xbc[t * conv..(t + 1) * conv];
            let x = &r[h * p..(h + 1) * p];
            let b = &r[d.inner() + g * ns..d.inner() + (g + 1) * ns];
            let c = &r[d.inner() + (d.n_groups + g) * ns..d.inner() + (d.n_groups + g + 1) * ns];
            let step = dt[t * nh + h];
            be.ssm_step(state, x, b, c, step, (step * self.neg_a[h]).exp(), self.d[h], out);
        });
    }

    /// Each `in_proj` output row's parts z, x, B, C, dt times their multipliers.
    fn scale_parts(&self, proj: &mut [f32], m: [f32; 5]) {
        let d = self.dims;
        let (inner, gs) = (d.inner(), d.n_groups * d.state_size);
        let ends = [inner, 2 * inner, 2 * inner + gs, 2 * inner + 2 * gs, 2 * inner + 2 * gs + d.num_heads];
        for row in proj.chunks_exact_mut(ends[4]) {
            let mut start = 0;
            for (&end, &f) in ends.iter().zip(&m) {
                row[start..end].iter_mut().for_each(|v| *v *= f);
                start = end;
            }
        }
    }

    /// `y` meets the gate `z` (the first `inner` values of each `proj` row) and the norm
    /// ([`GatedNorm`]); the norm is per group of `inner / n_groups`.
    fn gated_norm(&self, y: &mut [f32], proj: &[f32]) {
        let inner = self.dims.inner();
        let (group, width) = (inner / self.dims.n_groups, proj.len() / (y.len() / inner));
        let gate = |row: &mut [f32], z: &[f32]| {
            for (v, &g) in row.iter_mut().zip(z) {
                *v *= g / (1.0 + (-g).exp());
            }
        };
        let norm = |row: &mut [f32], weight: &[f32]| {
            for (part, w) in row.chunks_exact_mut(group).zip(weight.chunks_exact(group)) {
                let inv = ops::inv_rms(part, self.eps);
                part.iter_mut().zip(w).for_each(|(v, w)| *v = w * (*v * inv));
            }
        };
        pool::rows_mut(y, inner, pool::min_rows(inner), |r0, rows| {
            for (i, row) in rows.chunks_exact_mut(inner).enumerate() {
                let z = &proj[(r0 + i) * width..(r0 + i) * width + inner];
                match &self.norm {
                    GatedNorm::AfterGate(w) => {
                        gate(row, z);
                        norm(row, w);
                    }
                    GatedNorm::BeforeGate(w) => {
                        norm(row, w);
                        gate(row, z);
                    }
                    GatedNorm::None => gate(row, z),
                }
            }
        });
    }
}
