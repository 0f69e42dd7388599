//! The engine on a GPU: [`Cuda`], a [`Backend`] whose weights and K/V cache live in device
//! memory.
//!
//! This first form keeps the activations on the host. The ops that read the big tensors run
//! on the GPU: the matmuls (weights uploaded on first use, in their GGUF bytes) and paged
//! attention with its K/V writes (the cache mirrored in device memory). The host activations go
//! up and the results come back at each of those calls. Everything else (norms, RoPE,
//! activations, recurrent steps, sampling) and the formats without a kernel run on the CPU
//! backend, on the same host buffers. Every kernel keeps its CPU reference's arithmetic (see
//! README.md), so a model gives the CPU's bits either way, and any op may run on either side.
//!
//! What this costs: a round trip per matmul call and per attention call (a few per layer), and
//! the K/V cache held twice (host and device). The next step keeps the activations on the device
//! (buffer handles in the `Backend` trait, README.md "Next step").

use crate::gpu::{Error, Gpu};
use crate::ops::{DeviceActs, DeviceWeight, PagedBatch};
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use vllm_rs_kernels::attention::{AttentionParams, KvCache, SeqAttention};
use vllm_rs_kernels::backend::{Backend, Cpu, DeviceMemory};
use vllm_rs_kernels::encoder_attention::{EncoderAttentionParams, RelativeBias};
use vllm_rs_kernels::ops::{Activation, RopeTable};
use vllm_rs_kernels::{Weight, isa};

/// The CUDA backend on one GPU, with the CPU backend of the tier in use for the rest.
pub struct Cuda {
    /// One caller at a time: the ops share the GPU's one stream.
    gpu: Mutex<Gpu>,
    cpu: &'static Cpu,
    name: &'static str,
    matmuls: AtomicU64,
    attentions: AtomicU64,
}

/// How many weight matmuls and attention calls ran on the GPU (for logs and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    pub matmuls: u64,
    pub attentions: u64,
}

impl std::ops::Sub for GpuCounts {
    type Output = GpuCounts;
    fn sub(self, o: GpuCounts) -> GpuCounts {
        GpuCounts { matmuls: self.matmuls - o.matmuls, attentions: self.attentions - o.attentions }
    }
}

/// The device copy of a K/V cache: per tensor, K and V (absent where the host tensor is empty:
/// no V rows for latent attention, no rows at all for recurrent layers).
struct KvMirror {
    tensors: Vec<[Option<CudaSlice<u8>>; 2]>,
}

/// A CUDA failure inside an op, which the `Backend` trait cannot return: the step cannot go on.
fn fail(e: Error) -> ! {
    panic!("CUDA: {e}")
}

impl Cuda {
    /// The backend on `gpu`; lives as long as the process (workspaces hold `&'static` backends).
    pub fn leak(gpu: Gpu) -> &'static Cuda {
        let name = Box::leak(format!("cuda ({})", gpu.info.name).into_boxed_str());
        let cpu = Cpu::on(isa::tier()).expect("the tier in use is supported");
        let (matmuls, attentions) = (AtomicU64::new(0), AtomicU64::new(0));
        Box::leak(Box::new(Cuda { gpu: Mutex::new(gpu), cpu, name, matmuls, attentions }))
    }

    pub fn counts(&self) -> GpuCounts {
        GpuCounts { matmuls: self.matmuls.load(Ordering::Relaxed), attentions: self.attentions.load(Ordering::Relaxed) }
    }

    fn gpu(&self) -> MutexGuard<'_, Gpu> {
        // A panic in another op (a CUDA failure) leaves nothing half-written on the host side.
        self.gpu.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the GPU multiplies by `w`: a format with a kernel, computed in f32 (the bf16
    /// compute mode's rounded copies are the CPU's).
    fn on_gpu(w: &Weight) -> bool {
        DeviceWeight::supports(w.ty) && w.bf16.is_none()
    }

    /// [`Cuda::on_gpu`] for a weight not yet prepared: the bf16 compute mode will give dense
    /// weights their CPU copies.
    fn will_be_on_gpu(w: &Weight) -> bool {
        Self::on_gpu(w) && !w.computes_in_bf16()
    }

    fn matmuls_on_gpu(&self, x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]) -> Result<(), Error> {
        let gpu = self.gpu();
        let dx = gpu.upload(x)?;
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            let dw = w.device.get_or_try_init(|| DeviceWeight::upload(&gpu, w))?;
            let mut acts = if w.ty.is_quantized() { Some(DeviceActs::new(&gpu, m, w.cols)?) } else { None };
            let mut dout = gpu.zeros(m * w.rows)?;
            gpu.matmul(&dx, m, dw, acts.as_mut(), &mut dout)?;
            out.copy_from_slice(&gpu.download(&dout)?);
        }
        self.matmuls.fetch_add(ws.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_kv_on_gpu(
        &self,
        kv: &mut KvCache,
        layer: usize,
        slots: &[usize],
        k: &[f32],
        v: &[f32],
    ) -> Result<(), Error> {
        let gpu = self.gpu();
        mirror(&gpu, kv)?;
        let (dtype, t) = (kv.dtype, kv.tensor_of(layer));
        let mirror = kv.device.as_mut().and_then(|d| d.downcast_mut::<KvMirror>()).expect("a CUDA mirror");
        let [Some(kc), vc] = &mut mirror.tensors[t] else { return Err(Error(format!("layer {layer} has no K rows"))) };
        let dslots = gpu.upload(&slots.iter().map(|&s| s as u32).collect::<Vec<_>>())?;
        let dk = gpu.upload(k)?;
        let dv = if v.is_empty() { None } else { Some(gpu.upload(v)?) };
        // SAFETY: the host write above indexed the same slots in a tensor of the same size
        // (it panics on a slot outside the cache), so every slot lies in the device tensor.
        unsafe { gpu.write_kv(dtype, kc, vc.as_mut(), &dslots, &dk, dv.as_ref(), k.len() / slots.len()) }
    }

    #[allow(clippy::too_many_arguments)]
    fn attention_on_gpu(
        &self,
        q: &[f32],
        kv: &KvCache,
        cache: (&CudaSlice<u8>, &CudaSlice<u8>),
        seqs: &[SeqAttention],
        p: &AttentionParams,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let gpu = self.gpu();
        let mut batch = PagedBatch::upload(&gpu, seqs, p.num_heads, kv.block_size)?;
        let sinks = p.sinks.as_ref().map(|s| gpu.upload(s)).transpose()?;
        let mut dout = gpu.zeros(out.len())?;
        gpu.paged_attention(&gpu.upload(q)?, kv.dtype, cache.0, cache.1, &mut batch, p, sinks.as_ref(), &mut dout)?;
        out.copy_from_slice(&gpu.download(&dout)?);
        self.attentions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Makes `kv`'s device copy unless it has one: the whole cache, host bytes included (a cache
/// written before, by another backend, stays whole).
fn mirror(gpu: &Gpu, kv: &mut KvCache) -> Result<(), Error> {
    make_mirror(kv, |bytes| gpu.upload(bytes))
}

/// Makes `kv`'s device copy unless it has one, each non-empty host tensor's by `make`.
fn make_mirror(kv: &mut KvCache, make: impl Fn(&[u8]) -> Result<CudaSlice<u8>, Error>) -> Result<(), Error> {
    if kv.device.is_none() {
        let nonempty = |bytes: &[u8]| if bytes.is_empty() { Ok(None) } else { make(bytes).map(Some) };
        let tensors =
            kv.tensors.iter().map(|t| Ok([nonempty(&t.k)?, nonempty(&t.v)?])).collect::<Result<_, Error>>()?;
        kv.device = Some(Box::new(KvMirror { tensors }));
    }
    Ok(())
}

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        self.name
    }

    fn matmul_many(&self, x: &[f32], m: usize, ws: &[&Weight], outs: &mut [&mut [f32]]) {
        let (gpu, cpu): (Vec<usize>, Vec<usize>) = (0..ws.len()).partition(|&i| Self::on_gpu(ws[i]));
        if m == 0 || gpu.is_empty() {
            return self.cpu.matmul_many(x, m, ws, outs);
        }
        // Each output row depends on its input row and the weight only, so the weights may be
        // split between the two sides in any way.
        let mut outs: Vec<Option<&mut [f32]>> = outs.iter_mut().map(|o| Some(&mut **o)).collect();
        let mut take = |ids: &[usize]| -> (Vec<&Weight>, Vec<&mut [f32]>) {
            ids.iter().map(|&i| (ws[i], outs[i].take().expect("each output once"))).unzip()
        };
        let (gpu_ws, mut gpu_outs) = take(&gpu);
        let (cpu_ws, mut cpu_outs) = take(&cpu);
        if !cpu_ws.is_empty() {
            self.cpu.matmul_many(x, m, &cpu_ws, &mut cpu_outs);
        }
        self.matmuls_on_gpu(x, m, &gpu_ws, &mut gpu_outs).unwrap_or_else(|e| fail(e));
    }

    fn add_assign(&self, a: &mut [f32], b: &[f32]) {
        self.cpu.add_assign(a, b)
    }

    fn scale(&self, x: &mut [f32], s: f32) {
        self.cpu.scale(x, s)
    }

    fn softcap(&self, x: &mut [f32], cap: f32) {
        self.cpu.softcap(x, cap)
    }

    fn rms_norm_rows(&self, x: &mut [f32], dim: usize, w: &[f32], eps: f32, offset: f32) {
        self.cpu.rms_norm_rows(x, dim, w, eps, offset)
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
        self.cpu.add_rms_norm_rows(h, y, x, dim, w, eps, offset)
    }

    fn layer_norm_rows(&self, x: &mut [f32], w: &[f32], bias: Option<&[f32]>, eps: f32) {
        self.cpu.layer_norm_rows(x, w, bias, eps)
    }

    fn rope(&self, row: &mut [f32], head_dim: usize, table: &RopeTable, t: usize, interleaved: bool) {
        self.cpu.rope(row, head_dim, table, t, interleaved)
    }

    fn rope_rows(&self, x: &mut [f32], row: usize, head_dim: usize, table: &RopeTable, interleaved: bool) {
        self.cpu.rope_rows(x, row, head_dim, table, interleaved)
    }

    fn activation(&self, act: Activation, x: &mut [f32]) {
        self.cpu.activation(act, x)
    }

    fn gated_activation(&self, act: Activation, gate: &mut [f32], up: &[f32]) {
        self.cpu.gated_activation(act, gate, up)
    }

    fn mul_sigmoid(&self, x: &mut [f32], gate: &[f32]) {
        self.cpu.mul_sigmoid(x, gate)
    }

    fn softmax(&self, x: &mut [f32]) {
        self.cpu.softmax(x)
    }

    fn embedding(&self, w: &Weight, ids: &[u32], scale: f32, out: &mut Vec<f32>) {
        self.cpu.embedding(w, ids, scale, out)
    }

    fn write_kv(&self, kv: &mut KvCache, layer: usize, slot_mapping: &[usize], k: &[f32], v: &[f32]) {
        // The host tensor too: the ops without a kernel (soft-capped attention) read it.
        self.cpu.write_kv(kv, layer, slot_mapping, k, v);
        if !slot_mapping.is_empty() && !k.is_empty() {
            self.write_kv_on_gpu(kv, layer, slot_mapping, k, v).unwrap_or_else(|e| fail(e));
        }
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
        let mirror = kv.device.as_ref().and_then(|d| d.downcast_ref::<KvMirror>());
        let cache = match mirror.map(|m| &m.tensors[kv.tensor_of(layer)]) {
            Some([Some(k), v]) => Some((k, v.as_ref().unwrap_or(k))),
            _ => None,
        };
        match cache {
            // The kernel reads values as long as the queries; soft-capping has no kernel yet.
            Some(cache) if p.softcap.is_none() && !q.is_empty() && q.len() == out.len() => {
                self.attention_on_gpu(q, kv, cache, seqs, p, out).unwrap_or_else(|e| fail(e))
            }
            _ => self.cpu.paged_attention(q, kv, layer, seqs, p, out),
        }
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
        self.cpu.encoder_attention(q, k, v, seq_lens, p, bias, out)
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
        self.cpu.gated_delta_step(state, q, k, v, decay, beta, scratch, out)
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
        self.cpu.ssm_step(state, x, b, c, dt, decay, d, out)
    }

    fn causal_conv1d(&self, x: &mut [f32], state: &mut [f32], weight: &[f32], kernel: usize, row: &mut Vec<f32>) {
        self.cpu.causal_conv1d(x, state, weight, kernel, row)
    }

    /// The engine's cache is fresh here (zeros), so the device's is zeroed on the GPU rather
    /// than copied: a cache of tens of GB would otherwise be as many GB of copies at start-up.
    fn prepare_kv(&self, kv: &mut KvCache) -> Result<(), String> {
        let gpu = self.gpu();
        make_mirror(kv, |bytes| gpu.zeros::<u8>(bytes.len())).map_err(|e| e.to_string())
    }

    /// Weights the GPU multiplies are uploaded now, so the K/V cache is sized after them (and
    /// a model that does not fit shows at load), and are not packed for the CPU (their host
    /// bytes stay for row lookups: a tied embedding). One that does not fit in GPU memory
    /// stays on the CPU, saying so.
    fn prepare_weight(&self, w: Weight) -> Weight {
        if !Self::will_be_on_gpu(&w) {
            return self.cpu.prepare_weight(w);
        }
        match w.device.get_or_try_init(|| DeviceWeight::upload(&self.gpu(), &w)) {
            Ok(_) => w,
            Err(e) => {
                tracing::warn!("a {} x {} {} weight stays on the CPU: {e}", w.rows, w.cols, w.ty.name());
                self.cpu.prepare_weight(w)
            }
        }
    }

    fn device_memory(&self) -> Option<DeviceMemory> {
        let (free, total) = self.gpu().memory().ok()?;
        Some(DeviceMemory { free, total })
    }
}
