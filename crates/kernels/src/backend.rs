//! The seam between the models and the hardware: every op a model runs, behind one trait.
//!
//! A model never calls a kernel directly; it calls its [`Backend`] (the runner's workspace holds
//! one), so a second backend (a GPU) plugs in by implementing this trait. Today's kernels are the
//! CPU backend, one instance per ISA tier ([`Cpu`]); the scalar tier is the reference every
//! backend is tested against: the kernel tests compare each backend's ops with it on random
//! data (`tests/backend_ops.rs`), and the model tests decode with every backend [`available`].
//!
//! Buffers are host slices of f32 and weights are [`Weight`]s: the CPU backend's own types. A
//! device backend ([`set_default`]; the CUDA one in `crates/cuda`) keeps its copies of weights
//! and the K/V cache in the slots those types hold for it ([`crate::weight::DeviceCopy`],
//! [`KvCache::device`]) and moves the activations per call. Keeping activations resident needs
//! buffer handles in these signatures; as every computation of a model goes through this trait,
//! that change is confined to it and its callers' buffer types, not to the arithmetic of each
//! layer.

use crate::attention::{AttentionParams, KvCache, SeqAttention, paged_attention_on};
use crate::encoder_attention::{EncoderAttentionParams, RelativeBias, encoder_attention_on};
use crate::isa::Tier;
pub use crate::matmul::MatmulJob;
use crate::ops::{self, Activation, RopeTable};
use crate::weight::Weight;
use crate::{matmul, pool, recurrent};
use std::sync::OnceLock;

/// Every op the models call. All of them are row-wise or batch-invariant: a row's result never
/// depends on the other rows of the batch (see the module docs of each kernel).
pub trait Backend: Send + Sync {
    /// A short name for logs and test messages, e.g. `cpu-avx512`.
    fn name(&self) -> &'static str;

    /// `outs[i] = x · ws[i]ᵀ` for every weight (`x` is `m × cols`): one kernel job where the
    /// weights allow (q/k/v, gate/up).
    fn matmul_many(&self, x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]);

    /// `out = x · wᵀ` (`x` is `m × w.cols`, `out` is `m × w.rows`).
    fn matmul(&self, x: &[f32], m: usize, w: &Weight, out: &mut [f32]) {
        self.matmul_many(x, m, &[w], &mut [out]);
    }

    /// Several matmuls, each with its own activations (a MoE layer's experts, each over its
    /// tokens): one kernel job for all of them where the weights allow; each output is
    /// [`Backend::matmul`]'s.
    fn matmul_jobs(&self, jobs: &mut [MatmulJob]) {
        for j in jobs {
            self.matmul(j.x, j.m, j.w, j.out);
        }
    }

    /// Whether quantized matmuls run faster with int8 activations
    /// ([`crate::quant_act::ActBits::Int8`]) than with int16 here.
    fn int8_activations_pay(&self) -> bool {
        false
    }

    /// `a += b` element-wise.
    fn add_assign(&self, a: &mut [f32], b: &[f32]);

    /// `row += b` for every `b.len()`-sized row of `x` (a bias).
    fn add_rows(&self, x: &mut [f32], b: &[f32]) {
        x.chunks_exact_mut(b.len()).for_each(|row| self.add_assign(row, b));
    }

    /// `x *= s` element-wise.
    fn scale(&self, x: &mut [f32], s: f32);

    /// `x = tanh(x / cap) · cap` element-wise (Gemma 2's soft-capping).
    fn softcap(&self, x: &mut [f32], cap: f32);

    /// RMSNorm of every `dim`-sized row of `x` with weights `offset + w`.
    fn rms_norm_rows(&self, x: &mut [f32], dim: usize, w: &[f32], eps: f32, offset: f32);

    /// `h += y`, then `x` = RMSNorm of each row of `h` (resized to `h`).
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm_rows(
        &self,
        h: &mut [f32],
        y: &[f32],
        x: &mut Vec<f32>,
        dim: usize,
        w: &[f32],
        eps: f32,
        offset: f32,
    );

    /// torch's `LayerNorm` of every `w.len()`-sized row of `x` (`bias` optional).
    fn layer_norm_rows(&self, x: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32);

    /// RoPE on the heads (`head_dim` each) of one token row, which takes position `t` of `table`.
    fn rope(&self, row: &mut [f32], head_dim: usize, table: &RopeTable, t: usize, interleaved: bool);

    /// RoPE on the heads (`head_dim` each) of every `row`-sized row of `x`; row `t` takes
    /// position `t` of `table`.
    fn rope_rows(&self, x: &mut [f32], row: usize, head_dim: usize, table: &RopeTable, interleaved: bool);

    /// `x = act(x)` element-wise.
    fn activation(&self, act: Activation, x: &mut [f32]);

    /// `gate = act(gate) · up` (`act`'s gated form: SwiGLU, GeGLU, gpt-oss's clamped SwiGLU).
    fn gated_activation(&self, act: Activation, gate: &mut [f32], up: &[f32]);

    /// `x *= σ(gate)` element-wise.
    fn mul_sigmoid(&self, x: &mut [f32], gate: &[f32]);

    /// Softmax of one row in place.
    fn softmax(&self, x: &mut [f32]);

    /// Rows `ids` of the embedding table `w` into `out` (`ids.len() × w.cols`), each times
    /// `scale` (1 for none).
    fn embedding(&self, w: &Weight, ids: &[u32], scale: f32, out: &mut Vec<f32>);

    /// Writes the K/V rows of a batch into their cache slots (`v` empty for latent caches).
    fn write_kv(&self, kv: &mut KvCache, layer: usize, slot_mapping: &[usize], k: &[f32], v: &[f32]);

    /// Causal attention of the queries `q` over layer `layer`'s paged cache.
    fn paged_attention(
        &self,
        q: &[f32],
        kv: &KvCache,
        layer: usize,
        seqs: &[SeqAttention],
        p: &AttentionParams,
        out: &mut [f32],
    );

    /// Bidirectional attention within each sequence of contiguous q/k/v rows (encoders).
    #[allow(clippy::too_many_arguments)]
    fn encoder_attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        seq_lens: &[usize],
        p: &EncoderAttentionParams,
        bias: Option<RelativeBias>,
        out: &mut [f32],
    );

    /// One token of the gated delta rule for one value head ([`recurrent::gated_delta_step_on`]).
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_step(
        &self,
        state: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        decay: &[f32],
        beta: f32,
        scratch: &mut Vec<f32>,
        out: &mut [f32],
    );

    /// One token of the Mamba-2 state update for one head ([`recurrent::ssm_step_on`]).
    #[allow(clippy::too_many_arguments)]
    fn ssm_step(
        &self,
        state: &mut [f32],
        x: &[f32],
        b: &[f32],
        c: &[f32],
        dt: f32,
        decay: f32,
        d: f32,
        out: &mut [f32],
    );

    /// Depthwise causal convolution in place over a window state ([`recurrent::causal_conv1d`]).
    fn causal_conv1d(&self, x: &mut [f32], state: &mut [f32], weight: &[f32], kernel: usize, row: &mut Vec<f32>);

    /// The index of each `vocab`-sized row's largest logit (the first on ties): greedy sampling.
    fn argmax_rows(&self, logits: &[f32], vocab: usize, out: &mut Vec<u32>) {
        out.clear();
        out.extend(logits.chunks_exact(vocab).map(ops::argmax));
    }

    /// Makes this backend's own copy of `kv`, a fresh (all-zero) cache, now (a device
    /// backend's: the whole cache in its memory), so that a cache it cannot hold fails at
    /// start-up rather than at the first request. The CPU has nothing to do.
    fn prepare_kv(&self, _kv: &mut KvCache) -> Result<(), String> {
        Ok(())
    }

    /// `log_softmax` of one row (an f64 normalizer), for logprobs.
    fn log_softmax(&self, logits: &[f32]) -> Vec<f32> {
        ops::log_softmax(logits)
    }

    /// A model weight at load, made ready for this backend's matmuls ([`Weight::for_matmul`]):
    /// the CPU packs it for its kernels ([`Weight::packed_for_cpu`]); a device backend uploads
    /// the weights it multiplies itself and leaves them unpacked.
    fn prepare_weight(&self, w: Weight) -> Weight {
        w.packed_for_cpu()
    }

    /// The memory of the device this backend computes on, if it is not the host's: what sizes
    /// the K/V cache for `--gpu-memory-utilization`.
    fn device_memory(&self) -> Option<DeviceMemory> {
        None
    }
}

/// A device's memory in bytes: free now, and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    pub free: u64,
    pub total: u64,
}

/// The CPU backend on one ISA tier: today's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    tier: Tier,
}

/// One static instance per tier, so a backend is a `&'static dyn Backend` anyone may hold.
static CPU: [Cpu; 4] =
    [Cpu { tier: Tier::Scalar }, Cpu { tier: Tier::Avx2 }, Cpu { tier: Tier::Avx512 }, Cpu { tier: Tier::Neon }];

impl Cpu {
    /// The CPU backend on `tier`, if this CPU can run it.
    pub fn on(tier: Tier) -> Option<&'static Cpu> {
        CPU.iter().find(|c| c.tier == tier && tier.supported())
    }

    pub fn tier(&self) -> Tier {
        self.tier
    }
}

/// A device backend chosen for the process ([`set_default`]).
static DEVICE: OnceLock<&'static dyn Backend> = OnceLock::new();

/// Makes `be` (a GPU's backend, `--device cuda`) the process's backend: every workspace made
/// after this call runs on it. Once per process; a second call is refused.
pub fn set_default(be: &'static dyn Backend) -> Result<(), String> {
    DEVICE.set(be).map_err(|old| format!("the process already runs on {}", old.name()))
}

/// The process's backend: the one given to [`set_default`], else the CPU on the tier in use
/// ([`crate::isa::tier`], `VLLM_RS_ISA`).
pub fn default() -> &'static dyn Backend {
    match DEVICE.get() {
        Some(&be) => be,
        None => Cpu::on(crate::isa::tier()).expect("the tier in use is supported"),
    }
}

/// Every backend this machine can run, the reference (scalar CPU) first, then the CPU's other
/// tiers and the device backend, if one was set.
pub fn available() -> Vec<&'static dyn Backend> {
    let cpus = Tier::available().into_iter().filter_map(Cpu::on).map(|c| c as &dyn Backend);
    cpus.chain(DEVICE.get().copied()).collect()
}

impl Backend for Cpu {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Scalar => "cpu-scalar",
            Tier::Avx2 => "cpu-avx2",
            Tier::Avx512 => "cpu-avx512",
            Tier::Neon => "cpu-neon",
        }
    }

    fn matmul_many(&self, x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]) {
        matmul::matmul_many_on(self.tier, x, m, ws, outs)
    }

    fn int8_activations_pay(&self) -> bool {
        self.tier == Tier::Avx512 // vpdpbusd dots four values an instruction, vpdpwssd two
    }

    fn matmul_jobs(&self, jobs: &mut [MatmulJob]) {
        matmul::matmul_jobs_on(self.tier, jobs)
    }

    fn add_assign(&self, a: &mut [f32], b: &[f32]) {
        ops::add_assign(a, b)
    }

    fn scale(&self, x: &mut [f32], s: f32) {
        x.iter_mut().for_each(|v| *v *= s);
    }

    fn softcap(&self, x: &mut [f32], cap: f32) {
        x.iter_mut().for_each(|v| *v = (*v / cap).tanh() * cap);
    }

    fn rms_norm_rows(&self, x: &mut [f32], dim: usize, w: &[f32], eps: f32, offset: f32) {
        ops::rms_norm_rows(x, dim, w, eps, offset)
    }

    fn add_rms_norm_rows(
        &self,
        h: &mut [f32],
        y: &[f32],
        x: &mut Vec<f32>,
        dim: usize,
        w: &[f32],
        eps: f32,
        offset: f32,
    ) {
        ops::add_rms_norm_rows(h, y, x, dim, w, eps, offset)
    }

    fn layer_norm_rows(&self, x: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
        ops::layer_norm_rows(x, w, bias, eps)
    }

    fn rope(&self, row: &mut [f32], head_dim: usize, table: &RopeTable, t: usize, interleaved: bool) {
        ops::rope(row, head_dim, table, t, interleaved)
    }

    fn rope_rows(&self, x: &mut [f32], row: usize, head_dim: usize, table: &RopeTable, interleaved: bool) {
        // Split over the pool's threads from 16 rows (the rotations are row-wise).
        pool::rows_mut(x, row, 16, |t0, rows| {
            for (i, r) in rows.chunks_exact_mut(row).enumerate() {
                ops::rope(r, head_dim, table, t0 + i, interleaved);
            }
        });
    }

    fn activation(&self, act: Activation, x: &mut [f32]) {
        ops::activation_on(self.tier, act, x)
    }

    fn gated_activation(&self, act: Activation, gate: &mut [f32], up: &[f32]) {
        ops::gated_activation_on(self.tier, act, gate, up)
    }

    fn mul_sigmoid(&self, x: &mut [f32], gate: &[f32]) {
        ops::mul_sigmoid_on(self.tier, x, gate)
    }

    fn softmax(&self, x: &mut [f32]) {
        ops::softmax_on(self.tier, x)
    }

    fn embedding(&self, w: &Weight, ids: &[u32], scale: f32, out: &mut Vec<f32>) {
        let d = w.cols;
        out.resize(ids.len() * d, 0.0);
        for (row, &id) in out.chunks_exact_mut(d).zip(ids) {
            w.dequantize_row(id as usize, row);
            if scale != 1.0 {
                self.scale(row, scale);
            }
        }
    }

    fn write_kv(&self, kv: &mut KvCache, layer: usize, slot_mapping: &[usize], k: &[f32], v: &[f32]) {
        kv.write(layer, slot_mapping, k, v)
    }

    fn paged_attention(
        &self,
        q: &[f32],
        kv: &KvCache,
        layer: usize,
        seqs: &[SeqAttention],
        p: &AttentionParams,
        out: &mut [f32],
    ) {
        paged_attention_on(self.tier, q, kv.layer(layer), kv.block_size, seqs, p, out)
    }

    fn encoder_attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        seq_lens: &[usize],
        p: &EncoderAttentionParams,
        bias: Option<RelativeBias>,
        out: &mut [f32],
    ) {
        encoder_attention_on(self.tier, q, k, v, seq_lens, p, bias, out)
    }

    fn gated_delta_step(
        &self,
        state: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        decay: &[f32],
        beta: f32,
        scratch: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        recurrent::gated_delta_step_on(self.tier, state, q, k, v, decay, beta, scratch, out)
    }

    fn ssm_step(
        &self,
        state: &mut [f32],
        x: &[f32],
        b: &[f32],
        c: &[f32],
        dt: f32,
        decay: f32,
        d: f32,
        out: &mut [f32],
    ) {
        recurrent::ssm_step_on(self.tier, state, x, b, c, dt, decay, d, out)
    }

    fn causal_conv1d(&self, x: &mut [f32], state: &mut [f32], weight: &[f32], kernel: usize, row: &mut Vec<f32>) {
        recurrent::causal_conv1d(x, state, weight, kernel, row)
    }
}
