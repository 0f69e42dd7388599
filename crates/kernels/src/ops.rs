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
    crate::pool::rows_mut(x, dim, crate::pool::min_rows(dim), |_, rows| {
        for row in rows.chunks_exact_mut(dim) {
            rms_norm(row, w, eps, offset);
        }
    });
}

/// `h += y`, then `x` = RMSNorm of each `dim`-sized row of `h` (the residual add and the next
/// sub-layer's norm row by row, while the row is in cache, on the pool's threads).
pub fn add_rms_norm_rows(h: &mut [f32], y: &[f32], x: &mut Vec<f32>, dim: usize, w: &[f32], eps: f32, offset: f32) {
    assert_eq!(h.len(), y.len());
    x.resize(h.len(), 0.0);
    crate::pool::rows_mut2(h, dim, x, dim, crate::pool::min_rows(dim), |r0, hs, xs| {
        for (i, (hr, xr)) in hs.chunks_exact_mut(dim).zip(xs.chunks_exact_mut(dim)).enumerate() {
            let yr = &y[(r0 + i) * dim..(r0 + i + 1) * dim];
            hr.iter_mut().zip(yr).for_each(|(a, b)| *a += b);
            xr.copy_from_slice(hr);
            rms_norm(xr, w, eps, offset);
        }
    });
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

/// `gate = silu(gate) * up` (SwiGLU), with [`exp`]; the same bits on every tier (and split
/// over the pool's threads in runs of 64 values, where the tiers' vector loops take them whole).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    silu_mul_pooled(crate::isa::tier(), gate, up)
}

/// [`silu_mul`] on a given tier.
fn silu_mul_pooled(tier: crate::isa::Tier, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    if !gate.len().is_multiple_of(64) {
        return silu_mul_on(tier, gate, up);
    }
    crate::pool::rows_mut(gate, 64, crate::pool::min_rows(64), |r0, g| {
        silu_mul_on(tier, g, &up[64 * r0..64 * r0 + g.len()])
    });
}

fn silu_mul_on(tier: crate::isa::Tier, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    let done = if matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
        // SAFETY: the tier guarantees AVX2 and FMA.
        unsafe { x86::silu_mul(gate, up) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = tier;
        0
    };
    for (g, u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// `x = silu(x)`, and with `gate`, `x *= sigmoid(gate)`: [`silu_mul`]'s arithmetic (the
/// same bits on every tier), split over the pool's threads in runs of 64 values.
pub fn silu(x: &mut [f32]) {
    silu_on(crate::isa::tier(), x)
}

fn silu_on(tier: crate::isa::Tier, x: &mut [f32]) {
    crate::pool::rows_mut(x, 1, crate::pool::PARALLEL_VALUES, |_, x| sigmoid_on(tier, x, None));
}

/// `x *= sigmoid(gate)` (gated attention outputs).
pub fn mul_sigmoid(x: &mut [f32], gate: &[f32]) {
    mul_sigmoid_on(crate::isa::tier(), x, gate)
}

/// [`mul_sigmoid`] on a given tier.
pub(crate) fn mul_sigmoid_on(tier: crate::isa::Tier, x: &mut [f32], gate: &[f32]) {
    assert_eq!(x.len(), gate.len());
    crate::pool::rows_mut(x, 1, crate::pool::PARALLEL_VALUES, |i0, x| {
        sigmoid_on(tier, x, Some(&gate[i0..i0 + x.len()]))
    });
}

/// `x = x·σ(x)` (no gate) or `x = x·σ(gate)`.
fn sigmoid_on(tier: crate::isa::Tier, x: &mut [f32], gate: Option<&[f32]>) {
    #[cfg(target_arch = "x86_64")]
    let done = if matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
        // SAFETY: the tier guarantees AVX2 and FMA.
        unsafe { x86::sigmoid_mul(x, gate) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = tier;
        0
    };
    for (i, v) in x.iter_mut().enumerate().skip(done) {
        let g = gate.map_or(*v, |g| g[i]);
        *v /= 1.0 + exp(-g);
    }
}

/// Abramowitz & Stegun 7.1.26 for `erfc(z)`, `z ≥ 0`: `poly(t) e^{-z²}`, `t = 1/(1 + p z)`.
const ERFC_P: f32 = 0.327_591_1;
const ERFC_A: [f32; 5] = [1.061_405_4, -1.453_152_1, 1.421_413_7, -0.284_496_74, 0.254_829_6];

/// `x = gelu(x)`, torch's exact (erf) GELU: `0.5 x (1 + erf(x/√2))`, with `1 + erf(-z)` taken
/// as the complement `erfc(z)` for negative x so nothing cancels (|error| < 1.5e-7 from A&S
/// 7.1.26). The same bits on every tier; split over the pool's threads in runs of 64.
pub fn gelu_erf(x: &mut [f32]) {
    gelu_erf_pooled(crate::isa::tier(), x)
}

fn gelu_erf_pooled(tier: crate::isa::Tier, x: &mut [f32]) {
    crate::pool::rows_mut(x, 1, crate::pool::PARALLEL_VALUES, |_, x| gelu_erf_on(tier, x));
}

fn gelu_erf_on(tier: crate::isa::Tier, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let done = if matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
        // SAFETY: the tier guarantees AVX2 and FMA.
        unsafe { x86::gelu_erf(x) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = tier;
        0
    };
    for v in &mut x[done..] {
        let z = v.abs() * std::f32::consts::FRAC_1_SQRT_2;
        let t = 1.0 / ERFC_P.mul_add(z, 1.0);
        let poly = ERFC_A.iter().fold(0.0f32, |acc, a| acc.mul_add(t, *a)) * t;
        let q = poly * exp(-z * z);
        *v = 0.5 * *v * if *v >= 0.0 { 2.0 - q } else { q };
    }
}

/// `gate = gelu_tanh(gate) * up` (GeGLU with the tanh approximation, `gelu_pytorch_tanh`).
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))`.
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

/// The activation functions of feed-forward blocks, by their config names ([`Activation::parse`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Silu,
    GeluTanh,
    /// Exact GELU (erf).
    Gelu,
    Relu,
    /// `relu(x)²` (Nemotron-H).
    Relu2,
    Tanh,
    /// gpt-oss's experts, gated only: `g = min(gate, limit)`, `u = clamp(up, ±limit)`,
    /// `(u + 1) · g · σ(alpha · g)`.
    ClampedSwiglu {
        alpha: f32,
        limit: f32,
    },
}

impl Activation {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Activation::Silu),
            // GPT-2's `gelu_new` is the same tanh approximation.
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" => Some(Activation::GeluTanh),
            "gelu" => Some(Activation::Gelu),
            "relu" => Some(Activation::Relu),
            "relu2" => Some(Activation::Relu2),
            "tanh" => Some(Activation::Tanh),
            _ => None,
        }
    }
}

/// `x = act(x)` on a given tier (a feed-forward block without a gate).
pub(crate) fn activation_on(tier: crate::isa::Tier, act: Activation, x: &mut [f32]) {
    match act {
        // `x / (1 + e^-x)`, the same bits on every tier.
        Activation::Silu => silu_on(tier, x),
        Activation::GeluTanh => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        Activation::Gelu => gelu_erf_pooled(tier, x),
        Activation::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
        Activation::Relu2 => x.iter_mut().for_each(|v| *v = v.max(0.0) * v.max(0.0)),
        Activation::Tanh => x.iter_mut().for_each(|v| *v = v.tanh()),
        // Only gpt-oss's expert MLPs (always gated) are built with it; no config names it.
        Activation::ClampedSwiglu { .. } => unreachable!("the clamped SwiGLU needs its up projection"),
    }
}

/// `gate = act(gate) · up` on a given tier.
pub(crate) fn gated_activation_on(tier: crate::isa::Tier, act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => silu_mul_pooled(tier, gate, up),
        Activation::GeluTanh => gelu_tanh_mul(gate, up),
        Activation::ClampedSwiglu { alpha, limit } => {
            for (g, u) in gate.iter_mut().zip(up.iter()) {
                let (x, u) = (g.min(limit), u.clamp(-limit, limit));
                *g = (u + 1.0) * (x / (1.0 + exp(-alpha * x)));
            }
        }
        Activation::Gelu | Activation::Relu | Activation::Relu2 | Activation::Tanh => {
            activation_on(tier, act, gate);
            gate.iter_mut().zip(up.iter()).for_each(|(g, u)| *g *= u);
        }
    }
}

/// torch's `nn.LayerNorm` of every `w.len()`-sized row of `x` in place, `bias` optional. Mean
/// and variance are summed in f64 over eight lanes ([`sum_f64`]): one order for every row (batch
/// invariance) and closer to the exact value than any f32 order.
pub fn layer_norm_rows(x: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
    layer_norm_rows_on(crate::isa::tier(), x, w, bias, eps)
}

/// [`layer_norm_rows`] on a given tier; every tier gives the same bits.
pub fn layer_norm_rows_on(tier: crate::isa::Tier, x: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
    let d = w.len();
    crate::pool::rows_mut(x, d, crate::pool::min_rows(d), |_, rows| {
        #[cfg(target_arch = "x86_64")]
        if matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
            // SAFETY: the tier says the CPU has AVX2.
            return unsafe { x86::layer_norm_avx2(rows, w, bias, eps) };
        }
        layer_norm(rows, w, bias, eps)
    });
}

/// [`layer_norm_rows`] of these rows, on this thread.
#[inline(always)]
fn layer_norm(rows: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
    for x in rows.chunks_exact_mut(w.len()) {
        let n = x.len() as f64;
        let mean = sum_f64(x, |v| v as f64) / n;
        let var = sum_f64(x, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
        let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
        let mean = mean as f32;
        match bias {
            Some(b) => x.iter_mut().zip(w).zip(b).for_each(|((v, w), b)| *v = (*v - mean) * inv * w + b),
            None => x.iter_mut().zip(w).for_each(|(v, w)| *v = (*v - mean) * inv * w),
        }
    }
}

/// `Σ f(x_i)` in f64: eight lanes (lane `l` sums the `i ≡ l mod 8` in order), added as
/// [`crate::matmul::hsum8`] adds, then the tail. Eight independent chains vectorize, where one
/// chain waits on every add.
#[inline(always)]
fn sum_f64(x: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += f(c[l]);
        }
    }
    let mut s = crate::matmul::hsum8(&acc);
    for &v in tail {
        s += f(v);
    }
    s
}

/// Index of the largest value (the first one on ties, as `torch.argmax`).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// `log_softmax` with an f64 normalizer.
pub fn log_softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    x.iter().map(|&v| (v as f64 - lse) as f32).collect()
}

/// In-place softmax; returns nothing, leaves a probability vector.
pub fn softmax(x: &mut [f32]) {
    softmax_on(crate::isa::tier(), x)
}

/// [`softmax`] on a given tier; every tier gives the same bits (the same [`exp`] arithmetic,
/// then one sequential sum).
pub(crate) fn softmax_on(tier: crate::isa::Tier, x: &mut [f32]) {
    softmax_sink_on(tier, x, None)
}

/// [`softmax_on`] over `x` and one more logit, `sink`, that takes its share of the denominator
/// but yields no output (gpt-oss's attention sinks): the probabilities of `x` sum to less than 1.
/// Without a sink, exactly [`softmax_on`]'s arithmetic; with one, its term is added to the sum
/// last.
pub(crate) fn softmax_sink_on(tier: crate::isa::Tier, x: &mut [f32], sink: Option<f32>) {
    let max = exp_from_max(tier, x, sink);
    let sum = x.iter().fold(0.0, |s, v| s + v);
    normalize(x, sum, sink.map(|s| (s, max)));
}

/// [`softmax_sink_on`] of each row (row `i` with sink `sinks(i)`), with the same bits: the
/// rows' sequential sums run side by side, eight at a time (a row's sum alone is a chain of
/// dependent adds as long as the row, bound by the add's latency: at 3,000 keys a fifth of a
/// speculative verification's attention).
pub(crate) fn softmax_rows_on(tier: crate::isa::Tier, rows: &mut [&mut [f32]], sinks: impl Fn(usize) -> Option<f32>) {
    for (c, chunk) in rows.chunks_mut(8).enumerate() {
        let sink = |r: usize| sinks(8 * c + r);
        let mut max = [0f32; 8];
        for (r, x) in chunk.iter_mut().enumerate() {
            max[r] = exp_from_max(tier, x, sink(r));
        }
        let sums = sums8(chunk);
        for (r, x) in chunk.iter_mut().enumerate() {
            normalize(x, sums[r], sink(r).map(|s| (s, max[r])));
        }
    }
}

/// The sequential sums of up to eight rows, in lockstep over the positions all of them have.
fn sums8(rows: &[&mut [f32]]) -> [f32; 8] {
    let common = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    // Missing rows repeat the first (their sums are dropped): one loop for any count.
    let p: [&[f32]; 8] = std::array::from_fn(|r| &rows[if r < rows.len() { r } else { 0 }][..common]);
    let mut s = [0f32; 8];
    for j in 0..common {
        for (sr, pr) in s.iter_mut().zip(&p) {
            *sr += pr[j];
        }
    }
    for (sr, row) in s.iter_mut().zip(rows) {
        *sr = row[common..].iter().fold(*sr, |s, v| s + v);
    }
    s
}

/// `x[i] = exp(x[i] - max)`, where `max` (returned) is that of `x` and the sink.
fn exp_from_max(tier: crate::isa::Tier, x: &mut [f32], sink: Option<f32>) -> f32 {
    let max = x.iter().copied().fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
    #[cfg(target_arch = "x86_64")]
    let done = if matches!(tier, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
        // SAFETY: the tier guarantees AVX2 and FMA.
        unsafe { x86::exp_shifted(x, max) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = tier;
        0
    };
    x[done..].iter_mut().for_each(|v| *v = exp(*v - max));
    max
}

/// `x /= sum`, where the sum also holds the sink's term `exp(sink - max)`, added last.
fn normalize(x: &mut [f32], mut sum: f32, sink_max: Option<(f32, f32)>) {
    if let Some((sink, max)) = sink_max {
        sum += exp(sink - max);
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n · LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients 1/k! for k = 7 down to 2 (then 1 and 1).
const EXP_C: [f32; 6] = [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5];

/// `e^x` within 2 ulp over [-87, 88] (inputs are clamped to it): `x = n·ln2 + r` with
/// `|r| ≤ ln2/2`, a degree-7 polynomial for `e^r`, and `2^n` put in the exponent bits. Written
/// with the same fused operations as the SIMD version, so both give the same bits. About 15
/// instructions per 8 values where libm's `expf` costs ~48 per value.
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p = EXP_C[0];
    for c in &EXP_C[1..] {
        p = p.mul_add(r, *c);
    }
    p = p.mul_add(r, 1.0).mul_add(r, 1.0);
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{ERFC_A, ERFC_P, EXP_C, LN2_HI, LN2_LO, LOG2E};
    use std::arch::x86_64::*;

    /// [`super::layer_norm`] compiled for AVX2: the same operations, so the same bits.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn layer_norm_avx2(rows: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
        super::layer_norm(rows, w, bias, eps)
    }

    /// [`super::gelu_erf`] for the whole octets, the scalar arithmetic lane by lane; returns
    /// how many elements were done.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gelu_erf(x: &mut [f32]) -> usize {
        let n8 = x.len() / 8 * 8;
        let (one, two, half) = (_mm256_set1_ps(1.0), _mm256_set1_ps(2.0), _mm256_set1_ps(0.5));
        let sign = _mm256_set1_ps(-0.0);
        for i in (0..n8).step_by(8) {
            // SAFETY: i + 8 ≤ n8 ≤ x.len().
            unsafe {
                let p = x.as_mut_ptr().add(i);
                let v = _mm256_loadu_ps(p);
                let z = _mm256_mul_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
                let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(ERFC_P), z, one));
                let mut poly = _mm256_setzero_ps();
                for a in ERFC_A {
                    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(a));
                }
                poly = _mm256_mul_ps(poly, t);
                let q = _mm256_mul_ps(poly, exp8(_mm256_mul_ps(_mm256_xor_ps(z, sign), z)));
                let pos = _mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_setzero_ps());
                let f = _mm256_blendv_ps(q, _mm256_sub_ps(two, q), pos);
                _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_mul_ps(half, v), f));
            }
        }
        n8
    }

    /// `x[i] = exp(x[i] - max)` for all of `x` (the tail through a padded copy); returns x.len().
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted(x: &mut [f32], max: f32) -> usize {
        let m = _mm256_set1_ps(max);
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: c holds 8 floats.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m))) };
        }
        let tail = chunks.into_remainder();
        let mut pad = [0f32; 8];
        pad[..tail.len()].copy_from_slice(tail);
        // SAFETY: pad holds 8 floats.
        unsafe { _mm256_storeu_ps(pad.as_mut_ptr(), exp8(_mm256_sub_ps(_mm256_loadu_ps(pad.as_ptr()), m))) };
        let n = tail.len();
        tail.copy_from_slice(&pad[..n]);
        x.len()
    }

    /// `gate = silu(gate) * up` for the whole octets; returns how many elements were done.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) -> usize {
        let n8 = gate.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        for i in (0..n8).step_by(8) {
            // SAFETY: i + 8 ≤ n8 ≤ both lengths (asserted equal by the caller).
            unsafe {
                let p = gate.as_mut_ptr().add(i);
                let g = _mm256_loadu_ps(p);
                let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
                let s = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up.as_ptr().add(i)));
                _mm256_storeu_ps(p, s);
            }
        }
        n8
    }

    /// [`super::sigmoid_on`] for the whole octets; returns how many elements were done.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sigmoid_mul(x: &mut [f32], gate: Option<&[f32]>) -> usize {
        let n8 = x.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        for i in (0..n8).step_by(8) {
            // SAFETY: i + 8 ≤ n8 ≤ x.len() = gate.len() (asserted by the caller).
            unsafe {
                let p = x.as_mut_ptr().add(i);
                let v = _mm256_loadu_ps(p);
                let g = gate.map_or(v, |g| _mm256_loadu_ps(g.as_ptr().add(i)));
                let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
                _mm256_storeu_ps(p, _mm256_div_ps(v, _mm256_add_ps(one, e)));
            }
        }
        n8
    }

    /// [`super::exp`] on eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(LOG2E),
        ));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_C[0]);
        for c in &EXP_C[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let one = _mm256_set1_ps(1.0);
        p = _mm256_fmadd_ps(_mm256_fmadd_ps(p, r, one), r, one);
        let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
        _mm256_mul_ps(p, _mm256_castsi256_ps(scale))
    }
}

#[cfg(test)]
mod gelu_tests {
    use super::*;
    use crate::testing::rand_vec;

    #[test]
    fn silu_and_sigmoid_gates_give_the_same_bits_on_every_tier() {
        let x: Vec<f32> = rand_vec(1003, 8).iter().map(|v| v * 8.0).collect();
        let g: Vec<f32> = rand_vec(1003, 9).iter().map(|v| v * 8.0).collect();
        let want_silu: Vec<f32> = x.iter().map(|&v| (v as f64 / (1.0 + (-v as f64).exp())) as f32).collect();
        for tier in crate::isa::Tier::available() {
            let mut s = x.clone();
            sigmoid_on(tier, &mut s, None);
            for (a, b) in s.iter().zip(&want_silu) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{tier:?}: {a} vs {b}");
            }
            let mut scalar = x.clone();
            sigmoid_on(crate::isa::Tier::Scalar, &mut scalar, Some(&g));
            let mut got = x.clone();
            sigmoid_on(tier, &mut got, Some(&g));
            assert_eq!(got, scalar, "{tier:?}");
        }
        let mut pooled = x.clone();
        silu(&mut pooled);
        let mut scalar = x;
        sigmoid_on(crate::isa::Tier::Scalar, &mut scalar, None);
        assert_eq!(pooled, scalar);
    }

    #[test]
    fn gelu_erf_gives_the_same_bits_on_every_tier() {
        let x: Vec<f32> = rand_vec(1003, 7).iter().map(|v| v * 8.0).collect();
        let mut scalar = x.clone();
        gelu_erf_on(crate::isa::Tier::Scalar, &mut scalar);
        for tier in crate::isa::Tier::available() {
            let mut got = x.clone();
            gelu_erf_on(tier, &mut got);
            assert_eq!(got, scalar, "{tier:?}");
        }
        let mut pooled = x;
        gelu_erf(&mut pooled);
        assert_eq!(pooled, scalar);
    }
}

/// `a += b`.
pub fn add_assign(a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    crate::pool::rows_mut(a, 1, crate::pool::PARALLEL_VALUES, |i0, a| {
        a.iter_mut().zip(&b[i0..]).for_each(|(x, y)| *x += y);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    /// Rows side by side (any count, lengths differing, with and without sinks) give each row
    /// the bits of its softmax alone, on every tier.
    #[test]
    fn softmax_rows_give_each_row_s_own_softmax_bits() {
        for tier in crate::isa::Tier::available() {
            for count in [1, 3, 7, 8, 11] {
                let data: Vec<Vec<f32>> =
                    (0..count).map(|r| rand_vec(300 + 13 * r, r as u64).iter().map(|x| 8.0 * x).collect()).collect();
                for sinks in [false, true] {
                    let sink = |r: usize| sinks.then_some(r as f32 - 3.0);
                    let mut got = data.clone();
                    let mut rows: Vec<&mut [f32]> = got.iter_mut().map(|r| &mut r[..]).collect();
                    softmax_rows_on(tier, &mut rows, sink);
                    for (r, (row, x)) in got.iter().zip(&data).enumerate() {
                        let mut want = x.clone();
                        softmax_sink_on(tier, &mut want, sink(r));
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(row), bits(&want), "{tier:?} {count} rows, row {r}, sinks {sinks}");
                    }
                }
            }
        }
    }

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

    /// LayerNorm against f64 on rows with an 8-lane tail, the same bits on every tier, each row
    /// as alone.
    #[test]
    fn layer_norm_matches_f64_and_gives_the_same_bits_on_every_tier() {
        let (rows, d) = (37, 389);
        let (x, w, b) = (rand_vec(rows * d, 1), rand_vec(d, 2), rand_vec(d, 3));
        let mut first: Option<Vec<f32>> = None;
        for tier in crate::isa::Tier::available() {
            for bias in [None, Some(&b[..])] {
                let mut y = x.clone();
                layer_norm_rows_on(tier, &mut y, &w, bias, 1e-5);
                for (r, (xr, yr)) in x.chunks_exact(d).zip(y.chunks_exact(d)).enumerate() {
                    let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                    let var = xr.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
                    for i in 0..d {
                        let want = (xr[i] as f64 - mean) / (var + 1e-5).sqrt() * w[i] as f64
                            + bias.map_or(0.0, |b| b[i] as f64);
                        assert!((yr[i] as f64 - want).abs() < 1e-5, "{tier:?} row {r} {i}");
                    }
                    let mut alone = xr.to_vec();
                    layer_norm_rows_on(tier, &mut alone, &w, bias, 1e-5);
                    assert_eq!(alone, yr, "{tier:?} row {r} alone");
                }
                if bias.is_some() {
                    assert_eq!(&y, first.get_or_insert_with(|| y.clone()), "{tier:?} differs from the scalar tier");
                }
            }
        }
    }

    /// Row-wise ops split over the pool's threads for many rows: each row as it is alone.
    #[test]
    fn split_row_ops_give_each_row_its_own_result() {
        let (rows, dim) = (40, 576);
        let (h0, y, w) = (rand_vec(rows * dim, 5), rand_vec(rows * dim, 6), rand_vec(dim, 7));
        let (mut h, mut x) = (h0.clone(), Vec::new());
        add_rms_norm_rows(&mut h, &y, &mut x, dim, &w, 1e-5, 0.0);
        let mut silu = h0.clone();
        silu_mul(&mut silu, &y);
        for r in 0..rows {
            let at = r * dim..(r + 1) * dim;
            let mut hr = h0[at.clone()].to_vec();
            hr.iter_mut().zip(&y[at.clone()]).for_each(|(a, b)| *a += b);
            assert_eq!(hr, h[at.clone()], "row {r}: the add");
            rms_norm(&mut hr, &w, 1e-5, 0.0);
            assert_eq!(hr, x[at.clone()], "row {r}: the norm");
            let mut sr = h0[at.clone()].to_vec();
            silu_mul_on(crate::isa::tier(), &mut sr, &y[at.clone()]);
            assert_eq!(sr, silu[at], "row {r}: silu");
        }
        let mut normed = h0.clone();
        rms_norm_rows(&mut normed, dim, &w, 1e-5, 1.0);
        for (r, row) in h0.chunks_exact(dim).enumerate() {
            let mut one = row.to_vec();
            rms_norm(&mut one, &w, 1e-5, 1.0);
            assert_eq!(one, normed[r * dim..(r + 1) * dim], "row {r}: rms_norm_rows");
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
    fn exp_is_within_two_ulp_and_softmax_is_the_same_on_every_tier() {
        let mut x: Vec<f32> = rand_vec(4099, 7).iter().map(|v| v * 87.0).collect();
        x.extend([0.0, -0.0, -87.0, 88.0, -1e-8, 1e-8, 0.3465, -0.3466]);
        for &v in &x {
            let (got, want) = (exp(v) as f64, (v as f64).exp());
            assert!((got - want).abs() <= 2.0 * want * f32::EPSILON as f64, "exp({v}) = {got}, want {want}");
        }
        let mut outs = Vec::new();
        for tier in crate::isa::Tier::available() {
            let mut y = x[..1000].to_vec();
            softmax_on(tier, &mut y);
            outs.push(y);
        }
        assert!(outs.windows(2).all(|w| w[0] == w[1]), "softmax: tiers differ");
        let up = rand_vec(1003, 8);
        let silu: Vec<Vec<f32>> = crate::isa::Tier::available()
            .into_iter()
            .map(|tier| {
                let mut g: Vec<f32> = x[..1003].iter().map(|v| v / 8.0).collect();
                silu_mul_on(tier, &mut g, &up);
                g
            })
            .collect();
        assert!(silu.windows(2).all(|w| w[0] == w[1]), "silu: tiers differ");
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
