//! The engine's models on the CUDA backend ([`vllm_rs_cuda::Cuda`]) against transformers'
//! goldens and the CPU's bits, on the tiny random checkpoints of the CPU's parity tests. Without
//! a GPU (CI) it says SKIPPED and passes; CI runs it through the CUDA driver emulator
//! (`scripts/cuda_emulator.sh`), `scripts/gpu_check.sh` on a GPU.
//!
//! Per checkpoint (the first [`STEPS`] tokens of each golden): all golden prompts decoded side by side in one batch give transformers' ids;
//! one prompt prefilled whole and in chunks of 7 gives the scalar CPU backend's ids and logits
//! bit for bit (the kernels follow the scalar reference; the CPU's AVX-512 tier has its own
//! order for quantized weights); and the GPU did the work (its matmul and attention counters
//! moved). The checks run one at a time, so that the counters are each checkpoint's own. An
//! encoder (tiny BERT) gives the scalar CPU's hidden states with its matmuls on the GPU.

#[path = "../../models/tests/common/mod.rs"]
mod common;

use common::{first_mismatch, greedy_batch_on, greedy_on, ids, rel_max_diff};
use vllm_rs_cuda::{Cuda, Gpu};
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::backend::Cpu;
use vllm_rs_kernels::isa::Tier;
use vllm_rs_testutil::{golden, test_data};

/// Tokens decoded per prompt: the goldens' first 8 (the emulator runs ~100 launches a second).
const STEPS: usize = 8;

/// The backend on the first GPU, once per test binary; `None` (said once) without a GPU.
fn cuda() -> Option<&'static Cuda> {
    static CUDA: std::sync::OnceLock<Option<&'static Cuda>> = std::sync::OnceLock::new();
    *CUDA.get_or_init(|| {
        let probe = vllm_rs_cuda::probe();
        if probe.gpu().is_none() {
            eprintln!("SKIPPED: no GPU ({probe}); scripts/cuda_emulator.sh and scripts/gpu_check.sh run these");
            return None;
        }
        Some(Cuda::leak(Gpu::open(0).expect("opening the GPU")))
    })
}

/// The calls of one check at a time, so that the counters are each checkpoint's own.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn scalar_cpu() -> &'static dyn Backend {
    Cpu::on(Tier::Scalar).expect("the scalar tier runs everywhere")
}

/// What a checkpoint is checked against, and where its attention runs.
#[derive(Clone, Copy, PartialEq)]
enum Want {
    /// transformers' ids, attention on the GPU.
    Goldens,
    /// transformers' ids; attention on the CPU (soft-capping has no kernel).
    GoldensCpuAttention,
    /// The scalar CPU's ids (a quantized file), attention on the GPU.
    Cpu,
}

/// Checks the checkpoint at `tests/{path}` with the prompts of the goldens
/// `tiny/{golden_name}.json`.
fn check(path: &str, golden_name: &str, want: Want) {
    let _turn = one_at_a_time();
    let Some(cuda) = cuda() else { return };
    let cpu = scalar_cpu();
    let lm = vllm_rs_models::load(&test_data(path)).unwrap_or_else(|e| panic!("{e}"));
    let model = lm.model.as_ref();
    let g = golden(&format!("tiny/{golden_name}.json"));
    let n_new = STEPS.min(g["num_new_tokens"].as_u64().unwrap() as usize);
    let cases = g["cases"].as_array().unwrap();
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["prompt_token_ids"])).collect();
    let before = cuda.counts();

    let batched = greedy_batch_on(cuda, model, &prompts, n_new);
    let wanted = if want != Want::Cpu {
        cases.iter().map(|c| ids(&c["token_ids"])[..n_new].to_vec()).collect()
    } else {
        greedy_batch_on(cpu, model, &prompts, n_new)
    };
    for (i, (got, want)) in batched.iter().zip(&wanted).enumerate() {
        assert_eq!(got, want, "{path} case {i} in a batch: ids differ at step {:?}", first_mismatch(got, want));
    }

    let prompt = &prompts[prompts.len() / 2];
    let on_cpu = greedy_on(cpu, model, prompt, n_new, usize::MAX);
    for chunk in [usize::MAX, 7] {
        let r = greedy_on(cuda, model, prompt, n_new, chunk);
        assert!(
            r.token_ids == on_cpu.token_ids
                && r.first_logits == on_cpu.first_logits
                && r.final_logits == on_cpu.final_logits,
            "{path}, prefill in chunks of {chunk}: {} gives other bits than {} (ids {:?} vs {:?}, logits {:.2e} apart)",
            cuda.name(),
            cpu.name(),
            r.token_ids,
            on_cpu.token_ids,
            rel_max_diff(&r.final_logits, &on_cpu.final_logits)
        );
    }
    let after = cuda.counts();
    let gpu_attention = want != Want::GoldensCpuAttention;
    assert!(
        after.matmuls > before.matmuls && (after.attentions > before.attentions) == gpu_attention,
        "{path}: the GPU did not run the model's matmuls (and attention: {gpu_attention}) ({before:?} → {after:?})"
    );
    eprintln!("{path}: GPU ids and bits equal the goldens and the CPU ({:?} more GPU calls)", after - before);
}

/// At load (`--device cuda`: `Weight::for_matmul` asks the process's backend), a weight with a
/// kernel goes to GPU memory and is not packed for the CPU; one without stays the CPU's.
#[test]
fn weights_with_a_kernel_are_uploaded_at_load_and_left_unpacked() {
    use vllm_rs_kernels::{GgmlType, testing::quantize_random};
    let _turn = one_at_a_time();
    let Some(cuda) = cuda() else { return };
    let free = || cuda.device_memory().expect("a GPU has memory").free;
    let (w, before) = (quantize_random(GgmlType::Q4K, 64, 512, 1), free());
    let bytes = w.bytes().len() as u64;
    let w = cuda.prepare_weight(w);
    assert!(w.device.is_made() && w.packed.is_none(), "a Q4_K weight was not uploaded, or was packed");
    assert!(before - free() >= bytes, "{bytes} bytes uploaded, but the free GPU memory went {before} → {}", free());
    let x: Vec<f32> = (0..3 * 512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    let (mut got, mut want) = (vec![0f32; 3 * 64], vec![0f32; 3 * 64]);
    let before = cuda.counts();
    cuda.matmul(&x, 3, &w, &mut got);
    assert_eq!(cuda.counts().matmuls, before.matmuls + 1, "the uploaded weight was not multiplied on the GPU");
    scalar_cpu().matmul(&x, 3, &w, &mut want);
    assert_eq!(got, want, "the GPU's product differs from the scalar CPU's");
    let q41 = cuda.prepare_weight(quantize_random(GgmlType::Q4_1, 64, 512, 2));
    assert!(!q41.device.is_made(), "Q4_1 has no CUDA kernel, yet was uploaded");
    let packs = vllm_rs_kernels::packed::packs_for(vllm_rs_kernels::isa::tier());
    assert_eq!(q41.packed.is_some(), packs, "Q4_1 not packed as the CPU packs");
}

#[test]
fn llama() {
    check("data/tiny/llama", "llama", Want::Goldens);
}

/// Soft-capped attention has no kernel: it reads the host copy of the cache the GPU also holds.
#[test]
fn gemma2() {
    check("data/tiny/gemma2", "gemma2", Want::GoldensCpuAttention);
}

/// Attention sinks, sliding windows, biases and experts (each its own weights on the device).
#[test]
fn gpt_oss() {
    check("data/tiny/gpt_oss", "gpt_oss", Want::Goldens);
}

/// Latent attention: a cache without V rows.
#[test]
fn deepseek_v2() {
    check("data/tiny/deepseek_v2", "deepseek_v2", Want::Goldens);
}

/// Q8_0 weights (llama.cpp's own conversion).
#[test]
fn deepseek_v3_q8_0_gguf() {
    check("data/tiny-gguf/deepseek_v3_q8_0.gguf", "deepseek_v3", Want::Cpu);
}

/// An encoder (embeddings): its matmuls on the GPU, its bidirectional attention on the CPU; a
/// batch of the goldens' inputs gives the scalar CPU's hidden states bit for bit.
#[test]
fn bert_encoder() {
    let _turn = one_at_a_time();
    let Some(cuda) = cuda() else { return };
    let enc = vllm_rs_models::load_encoder(&test_data("data/tiny-encoders/bert")).unwrap_or_else(|e| panic!("{e}"));
    let g = golden("tiny-encoders/bert.json");
    let (mut tokens, mut types, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    for c in g["cases"].as_array().unwrap() {
        let t = ids(&c["token_ids"]);
        lens.push(t.len());
        types.extend(match c["token_type_ids"].is_array() {
            true => ids(&c["token_type_ids"]),
            false => vec![0; t.len()],
        });
        tokens.extend(t);
    }
    let before = cuda.counts();
    let run = |be: &'static dyn Backend| {
        let mut ws = vllm_rs_models::PoolingWorkspace::on(be);
        enc.forward(&tokens, Some(&types), &lens, &mut ws).to_vec()
    };
    let (gpu, cpu) = (run(cuda), run(scalar_cpu()));
    assert!(gpu == cpu, "bert: {} gives other hidden states than the scalar CPU", cuda.name());
    assert!(cuda.counts().matmuls > before.matmuls, "bert: no matmul ran on the GPU");
}
