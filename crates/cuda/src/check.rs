//! Every CUDA kernel against the CPU scalar reference on random data (never zeros), and the
//! batch invariance of the matmuls and attention. Run on a GPU by `examples/cuda_check.rs`
//! (`scripts/gpu_check.sh`) and by `tests/kernels.rs`, which skips where there is no GPU.
//!
//! A check passes when the largest difference is within `tolerance · max(1, max |reference|)`.
//! The kernels follow the CPU's operations, so equal bits are expected too: each result says
//! how many values differ in their bits, for the record (a difference there within the
//! tolerance is not a failure, but worth a look). Batch invariance is a bit-for-bit check.

use crate::gpu::{Error, Gpu};
use crate::ops::{DeviceActs, DeviceWeight, PagedBatch};
use vllm_rs_kernels::attention::{AttentionParams, KvCache, KvDtype, SeqAttention};
use vllm_rs_kernels::backend::{Backend, Cpu};
use vllm_rs_kernels::isa::Tier;
use vllm_rs_kernels::ops::{self, Activation, RopeTable};
use vllm_rs_kernels::quant_act::{ActBits, QuantizedActs};
use vllm_rs_kernels::testing::{quantize_random, rand_vec};
use vllm_rs_kernels::{GgmlType, Weight};

/// The outcome of one comparison.
#[derive(Clone, Debug)]
pub struct CheckResult {
    pub name: String,
    pub values: usize,
    pub max_abs_diff: f64,
    pub max_abs_ref: f64,
    /// Values whose bits differ from the reference's.
    pub bits_differ: usize,
    pub tolerance: f64,
    pub passed: bool,
}

impl CheckResult {
    /// One line of `results.tsv`.
    pub fn tsv(&self) -> String {
        format!(
            "{}\t{}\t{}\t{:.3e}\t{:.3e}\t{}\t{:.0e}",
            if self.passed { "PASS" } else { "FAIL" },
            self.name,
            self.values,
            self.max_abs_diff,
            self.max_abs_ref,
            self.bits_differ,
            self.tolerance
        )
    }

    pub const TSV_HEADER: &str = "result\tcheck\tvalues\tmax_abs_diff\tmax_abs_ref\tbits_differ\ttolerance";
}

type Result<T> = std::result::Result<T, Error>;

fn scalar() -> &'static Cpu {
    Cpu::on(Tier::Scalar).expect("the scalar tier runs everywhere")
}

/// Compares `got` with `want` (f32 values) within `tol`.
fn compare(name: String, got: &[f32], want: &[f32], tol: f64) -> CheckResult {
    let mut r = CheckResult {
        name,
        values: want.len(),
        max_abs_diff: 0.0,
        max_abs_ref: 0.0,
        bits_differ: 0,
        tolerance: tol,
        passed: false,
    };
    let mut finite = got.len() == want.len();
    for (&g, &w) in got.iter().zip(want) {
        r.max_abs_ref = r.max_abs_ref.max((w as f64).abs());
        if g.to_bits() != w.to_bits() {
            r.bits_differ += 1;
            finite &= g.is_finite() && w.is_finite();
            r.max_abs_diff = r.max_abs_diff.max((g as f64 - w as f64).abs());
        }
    }
    r.passed = finite && r.max_abs_diff <= tol * r.max_abs_ref.max(1.0);
    r
}

/// Exact comparison of integers or bytes.
fn compare_exact<T: PartialEq>(name: String, got: &[T], want: &[T]) -> CheckResult {
    let differ = got.iter().zip(want).filter(|(a, b)| a != b).count() + got.len().abs_diff(want.len());
    CheckResult {
        name,
        values: want.len(),
        max_abs_diff: differ as f64,
        max_abs_ref: 0.0,
        bits_differ: differ,
        tolerance: 0.0,
        passed: differ == 0,
    }
}

/// Runs every check (a few seconds on a GPU).
pub fn run(gpu: &Gpu) -> Result<Vec<CheckResult>> {
    let mut out = Vec::new();
    norms(gpu, &mut out)?;
    rope(gpu, &mut out)?;
    silu(gpu, &mut out)?;
    embedding(gpu, &mut out)?;
    argmax(gpu, &mut out)?;
    quantize(gpu, &mut out)?;
    matmuls(gpu, &mut out)?;
    attention(gpu, &mut out)?;
    refusals(gpu, &mut out)?;
    Ok(out)
}

fn norms(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    for (rows, dim, offset) in [(5, 576, 0.0), (3, 4096, 1.0), (7, 1003, 0.0)] {
        let (x, w, y) = (rand_vec(rows * dim, 1), rand_vec(dim, 2), rand_vec(rows * dim, 3));
        let mut want = x.clone();
        ops::rms_norm_rows(&mut want, dim, &w, 1e-6, offset);
        let (mut dx, dw) = (gpu.upload(&x)?, gpu.upload(&w)?);
        gpu.rms_norm_rows(&mut dx, dim, &dw, 1e-6, offset)?;
        out.push(compare(format!("rms_norm {rows}x{dim} offset {offset}"), &gpu.download(&dx)?, &want, 1e-5));

        let (mut h, mut xn) = (x.clone(), Vec::new());
        ops::add_rms_norm_rows(&mut h, &y, &mut xn, dim, &w, 1e-5, offset);
        let (mut dh, dy, mut dxn) = (gpu.upload(&x)?, gpu.upload(&y)?, gpu.zeros(rows * dim)?);
        gpu.add_rms_norm_rows(&mut dh, &dy, &mut dxn, dim, &dw, 1e-5, offset)?;
        out.push(compare(format!("add_rms_norm {rows}x{dim}: residual"), &gpu.download(&dh)?, &h, 1e-6));
        out.push(compare(format!("add_rms_norm {rows}x{dim}: normed"), &gpu.download(&dxn)?, &xn, 1e-5));
    }
    Ok(())
}

fn rope(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    // Full rotation (head 64) and partial rotation (32 of 128 dims), both pair layouts.
    for (heads, head_dim, rot) in [(6, 64, 64), (4, 128, 32)] {
        let rows = 9;
        let positions: Vec<u32> = (0..rows as u32).map(|i| 3 + 517 * i).collect();
        let table = RopeTable::new(&ops::rope_inv_freq(10000.0, rot), &positions);
        for interleaved in [false, true] {
            let x = rand_vec(rows * heads * head_dim, 4);
            let mut want = x.clone();
            scalar().rope_rows(&mut want, heads * head_dim, head_dim, &table, interleaved);
            let (mut dx, c, s) = (gpu.upload(&x)?, gpu.upload(&table.cos)?, gpu.upload(&table.sin)?);
            gpu.rope_rows(&mut dx, heads * head_dim, head_dim, &c, &s, table.half, interleaved)?;
            let style = if interleaved { "gptj" } else { "neox" };
            out.push(compare(
                format!("rope {style} {rows}x{heads}x{head_dim} rot {rot}"),
                &gpu.download(&dx)?,
                &want,
                1e-6,
            ));
        }
    }
    Ok(())
}

fn silu(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let n = 10_007;
    let gate: Vec<f32> = rand_vec(n, 5).iter().map(|v| v * 12.0).collect();
    let up = rand_vec(n, 6);
    let mut want = gate.clone();
    scalar().gated_activation(Activation::Silu, &mut want, &up);
    let (mut dg, du) = (gpu.upload(&gate)?, gpu.upload(&up)?);
    gpu.silu_mul(&mut dg, &du)?;
    out.push(compare(format!("silu_mul {n}"), &gpu.download(&dg)?, &want, 1e-6));
    Ok(())
}

fn embedding(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let ids: Vec<u32> = vec![3, 0, 49, 17, 17, 8, 31];
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4K] {
        let w = quantize_random(ty, 50, 512, 7);
        for scale in [1.0, 22.627417] {
            let mut want = Vec::new();
            scalar().embedding(&w, &ids, scale, &mut want);
            let (dw, di) = (DeviceWeight::upload(gpu, &w)?, gpu.upload(&ids)?);
            let mut dout = gpu.zeros(ids.len() * 512)?;
            // SAFETY: the ids are below the table's 50 rows.
            unsafe { gpu.embedding(&dw, &di, scale, &mut dout)? };
            out.push(compare(format!("embedding {} scale {scale}", ty.name()), &gpu.download(&dout)?, &want, 1e-6));
        }
    }
    Ok(())
}

fn argmax(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let vocab = 151_936;
    let mut logits: Vec<f32> = rand_vec(5 * vocab, 8).iter().map(|v| v * 30.0).collect();
    // Row 1: a tie (the first wins); row 2: a NaN among the values; row 3: a NaN first.
    logits[vocab + 70_000] = 31.0;
    logits[vocab + 90_000] = 31.0;
    logits[vocab + 5] = 31.0;
    logits[2 * vocab + 100] = f32::NAN;
    logits[3 * vocab] = f32::NAN;
    let mut want = Vec::new();
    scalar().argmax_rows(&logits, vocab, &mut want);
    let (dl, mut dout) = (gpu.upload(&logits)?, gpu.zeros(5)?);
    gpu.argmax_rows(&dl, vocab, &mut dout)?;
    out.push(compare_exact(format!("argmax 5x{vocab} (ties, NaNs)"), &gpu.download(&dout)?, &want));
    Ok(())
}

fn quantize(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let (m, k) = (3, 896);
    let x: Vec<f32> = rand_vec(m * k, 9).iter().enumerate().map(|(i, v)| v * (1 + i % 7) as f32).collect();
    let mut want = QuantizedActs::default();
    want.quantize_into(Tier::Scalar, ActBits::Int16, &x, m, k);
    let mut acts = DeviceActs::new(gpu, m, k)?;
    gpu.quantize_acts(&gpu.upload(&x)?, &mut acts)?;
    out.push(compare_exact("quantize_acts: values".into(), &gpu.download(&acts.q)?, &want.q));
    out.push(compare("quantize_acts: scales".into(), &gpu.download(&acts.d)?, &want.d, 0.0));
    out.push(compare("quantize_acts: scale·sum".into(), &gpu.download(&acts.dsum)?, &want.dsum32, 0.0));
    Ok(())
}

/// Dense and quantized matmuls against the scalar CPU, and each row of a batch against the
/// same row alone (bit for bit).
fn matmuls(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let cases = [
        (GgmlType::F32, 300, 1003),
        (GgmlType::F16, 300, 1003),
        (GgmlType::BF16, 1000, 576),
        (GgmlType::Q8_0, 1536, 576),
        (GgmlType::Q4K, 1000, 768),
    ];
    for (ty, n, k) in cases {
        let w: Weight = quantize_random(ty, n, k, 11);
        let dw = DeviceWeight::upload(gpu, &w)?;
        let mut rows_alone = Vec::new();
        for m in [1, 3, 9] {
            let x = rand_vec(m * k, 12 + m as u64);
            let mut want = vec![0f32; m * n];
            scalar().matmul(&x, m, &w, &mut want);
            let got = gpu_matmul(gpu, &x, m, &dw)?;
            out.push(compare(format!("matmul {} {m}x{k} by {n}x{k}", ty.name()), &got, &want, 1e-5));
            if m == 9 {
                for i in 0..m {
                    rows_alone.extend(gpu_matmul(gpu, &x[i * k..(i + 1) * k], 1, &dw)?);
                }
                out.push(compare_exact(
                    format!("matmul {} batch of 9 = each row alone (bits)", ty.name()),
                    &bits(&got),
                    &bits(&rows_alone),
                ));
            }
        }
    }
    Ok(())
}

fn gpu_matmul(gpu: &Gpu, x: &[f32], m: usize, w: &DeviceWeight) -> Result<Vec<f32>> {
    let mut acts = if w.ty.is_quantized() { Some(DeviceActs::new(gpu, m, w.cols)?) } else { None };
    let mut dout = gpu.zeros(m * w.rows)?;
    gpu.matmul(&gpu.upload(x)?, m, w, acts.as_mut(), &mut dout)?;
    gpu.download(&dout)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The KV cache write, then attention of decode and chunked queries over it: every cache
/// dtype, with and without a sliding window and sinks; each request alone equals the batch.
fn attention(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    for (heads, kvh, hd, bs) in [(8, 2, 64, 16), (4, 4, 128, 16), (6, 3, 20, 4)] {
        // Requests: lengths, and how many of their last tokens are this step's queries.
        let reqs: [(usize, usize); 4] = [(37, 1), (5, 1), (64, 7), (130, 1)];
        let blocks: Vec<usize> = reqs.iter().map(|(l, _)| l.div_ceil(bs)).collect();
        let num_blocks = blocks.iter().sum::<usize>() + 3;
        // Tables hand out blocks in a shuffled order (the pool's order is arbitrary).
        let mut next = (0..num_blocks as u32).rev().collect::<Vec<_>>();
        let tables: Vec<Vec<u32>> =
            blocks.iter().map(|&nb| (0..nb).map(|_| next.pop().unwrap() * 7 % num_blocks as u32).collect()).collect();
        let row = kvh * hd;
        let total: usize = reqs.iter().map(|(l, _)| l).sum();
        let (k, v) = (rand_vec(total * row, 20), rand_vec(total * row, 21));
        let slots: Vec<usize> = reqs
            .iter()
            .zip(&tables)
            .flat_map(|(&(len, _), t)| (0..len).map(move |p| t[p / bs] as usize * bs + p % bs))
            .collect();
        let q_rows: usize = reqs.iter().map(|(_, q)| q).sum();
        let q = rand_vec(q_rows * heads * hd, 22);
        let mut start = 0;
        let seqs: Vec<SeqAttention> = reqs
            .iter()
            .zip(&tables)
            .map(|(&(len, ql), t)| {
                let s = SeqAttention { query_start: start, query_len: ql, seq_len: len, block_table: t };
                start += ql;
                s
            })
            .collect();
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            let mut cache = KvCache::new(1, num_blocks, bs, kvh, hd, dtype);
            cache.write(0, &slots, &k, &v);
            let bytes = num_blocks * bs * row * dtype.size();
            let (mut dk, mut dv) = (gpu.zeros::<u8>(bytes)?, gpu.zeros::<u8>(bytes)?);
            let slots32: Vec<u32> = slots.iter().map(|&s| s as u32).collect();
            let (ds, dkk, dvv) = (gpu.upload(&slots32)?, gpu.upload(&k)?, gpu.upload(&v)?);
            // SAFETY: the slots are those of the tables, inside the cache's num_blocks.
            unsafe { gpu.write_kv(dtype, &mut dk, Some(&mut dv), &ds, &dkk, Some(&dvv), row)? };
            let name = format!("{heads}/{kvh} heads x {hd} block {bs} {}", dtype.name());
            out.push(compare_exact(format!("write_kv {name}: K bytes"), &gpu.download(&dk)?, &cache.layer(0).k));
            out.push(compare_exact(format!("write_kv {name}: V bytes"), &gpu.download(&dv)?, &cache.layer(0).v));
            let sinks: Vec<f32> = rand_vec(heads, 23).iter().map(|s| 2.0 * s).collect();
            for (window, sinks) in [(None, None), (Some(9), None), (None, Some(sinks.clone())), (Some(9), Some(sinks))]
            {
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap: None,
                    sinks,
                };
                let mut want = vec![0f32; q.len()];
                scalar().paged_attention(&q, &cache, 0, &seqs, &p, &mut want);
                let got = gpu_attention(gpu, &q, dtype, (&dk, &dv), bs, &seqs, &p)?;
                let label = format!("{name} window {window:?} sinks {}", p.sinks.is_some());
                out.push(compare(format!("paged_attention {label}"), &got, &want, 1e-5));
                // Each request alone, its queries at row 0.
                let mut alone = Vec::new();
                for s in &seqs {
                    let qs = &q[s.query_start * heads * hd..(s.query_start + s.query_len) * heads * hd];
                    let one = SeqAttention { query_start: 0, ..*s };
                    alone.extend(gpu_attention(gpu, qs, dtype, (&dk, &dv), bs, &[one], &p)?);
                }
                out.push(compare_exact(
                    format!("paged_attention {label}: batch = each alone (bits)"),
                    &bits(&got),
                    &bits(&alone),
                ));
            }
        }
    }
    Ok(())
}

fn gpu_attention(
    gpu: &Gpu,
    q: &[f32],
    dtype: KvDtype,
    (k, v): (&cudarc::driver::CudaSlice<u8>, &cudarc::driver::CudaSlice<u8>),
    bs: usize,
    seqs: &[SeqAttention],
    p: &AttentionParams,
) -> Result<Vec<f32>> {
    let mut batch = PagedBatch::upload(gpu, seqs, p.num_heads, bs)?;
    let sinks = p.sinks.as_ref().map(|s| gpu.upload(s)).transpose()?;
    let mut dout = gpu.zeros(q.len())?;
    gpu.paged_attention(&gpu.upload(q)?, dtype, k, v, &mut batch, p, sinks.as_ref(), &mut dout)?;
    gpu.download(&dout)
}

/// A check that `result` is an error (a call the shape checks must refuse before launching).
fn refused(name: String, result: Result<()>) -> CheckResult {
    let passed = result.is_err();
    CheckResult {
        name: format!("{name}: {}", result.err().map_or("ACCEPTED".into(), |e| format!("refused ({e})"))),
        values: 1,
        max_abs_diff: 0.0,
        max_abs_ref: 0.0,
        bits_differ: usize::from(!passed),
        tolerance: 0.0,
        passed,
    }
}

/// Paged attention refuses tables that reach past the cache or past q (the kernel cannot check
/// them), and accepts the same call with a cache and q that hold them.
fn refusals(gpu: &Gpu, out: &mut Vec<CheckResult>) -> Result<()> {
    let (heads, kvh, hd, bs, dtype) = (4, 2, 16, 4, KvDtype::F32);
    let p = AttentionParams {
        num_heads: heads,
        num_kv_heads: kvh,
        head_dim: hd,
        scale: 0.25,
        sliding_window: None,
        softcap: None,
        sinks: None,
    };
    let block_bytes = bs * kvh * hd * dtype.size();
    // 6 tokens in blocks 1 and 3 of the table [1, 3, 99] (99 unused): the caches need 4 blocks.
    let table = [1u32, 3, 99];
    let seqs = [SeqAttention { query_start: 1, query_len: 2, seq_len: 6, block_table: &table }];
    let q = rand_vec(3 * heads * hd, 30);
    let attend = |cache_blocks: usize, q_rows: usize| -> Result<()> {
        let (k, v) = (gpu.upload(&vec![0u8; cache_blocks * block_bytes])?, gpu.upload(&vec![0u8; 4 * block_bytes])?);
        let mut batch = PagedBatch::upload(gpu, &seqs, heads, bs)?;
        let (dq, mut dout) = (gpu.upload(&q[..q_rows * heads * hd])?, gpu.zeros(q_rows * heads * hd)?);
        gpu.paged_attention(&dq, dtype, &k, &v, &mut batch, &p, None, &mut dout)
    };
    out.push(refused("paged_attention: a table past the K cache (block 3 of 3)".into(), attend(3, 3)));
    out.push(refused("paged_attention: query rows past q (rows 1..3 of 2)".into(), attend(4, 2)));
    let accepted = attend(4, 3);
    out.push(compare_exact(
        format!("paged_attention: the same call within the caches and q is accepted ({accepted:?})"),
        &[accepted.is_ok()],
        &[true],
    ));
    let short = [SeqAttention { query_start: 0, query_len: 1, seq_len: 9, block_table: &table[..2] }];
    out.push(refused(
        "PagedBatch::upload: 9 tokens in a table of 2 blocks of 4".into(),
        PagedBatch::upload(gpu, &short, heads, bs).map(|_| ()),
    ));
    Ok(())
}
