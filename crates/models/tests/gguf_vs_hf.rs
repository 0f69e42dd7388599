//! The GGUF loader and the safetensors loader feed the same model code: our forward on a GGUF
//! must agree with our forward on the matching weights in safetensors.
//!
//! Tiny llama (exact weights): the F32 tiny checkpoint written as GGUF the way llama.cpp converts
//! it (Q/K rows permuted for interleaved RoPE). The weights are identical, only the order of the
//! sums inside a head differs, so logits agree to float rounding and the greedy ids are equal.
//! The same for the tiny MoE models (experts stacked into llama.cpp's 3-D `*_exps` tensors), and
//! for those quantized to Q8_0 within a budget.
//!
//! Real models: the hf dirs hold the GGUF weights dequantized and then rounded to bf16 (relative
//! error ≤ 2⁻⁹ per weight), so the two forwards differ by that rounding only. Teacher-forced over
//! the golden continuations (prompt + 32 tokens in one forward, logits at every generated
//! position), we require: logits within [`REAL_REL_TOL`] of the largest |logit| at every position,
//! and the same top-1 token wherever the hf side's top-2 margin is above [`REAL_CLEAR_MARGIN`]
//! (below that, bf16 rounding alone may legitimately swap a near-tie). A missing permutation,
//! a wrong `1 + w`, a mis-mapped tensor or a wrong dequantization gives O(1) differences.

mod common;

use common::files::{quantize_q8_0, scratch_dir, tiny_gguf};
use common::{BLOCK_SIZE, argmax, greedy, ids, rel_max_diff};
use vllm_rs_kernels::attention::{KvDtype, SeqAttention};
use vllm_rs_models::{ForwardBatch, GroupBatch, Model};
use vllm_rs_testutil::{gguf_path, golden, hf_dir, test_data};

/// Q8_0 on the tiny random checkpoints: see [`tiny_moe_q8_0_within_budget`].
const TINY_Q8_REL_TOL: f64 = 0.08;
const TINY_Q8_ROWS_CLOSE: f64 = 0.9;

/// Measured here (96 teacher-forced steps per model): worst 0.86% (smollm2), 0.64% (qwen05),
/// 0.78% (gemma3). bf16 weight rounding moves logits by under a percent; 3% leaves room, while a
/// real mistake (e.g. RoPE pairs not interleaved for the permuted llama Q/K) moves them by O(1).
const REAL_REL_TOL: f64 = 0.03;
/// Relative top-2 margin above which bf16 rounding must not change the argmax: a flip needs a
/// logit shift of half the margin, and measured shifts stay below 0.9% of the scale.
const REAL_CLEAR_MARGIN: f64 = 0.03;

/// The tiny checkpoint `arch` written as GGUF architecture `gguf_arch` must give the same greedy
/// ids as its safetensors, and logits equal to float rounding (the weights are identical).
fn check_tiny_gguf(arch: &str, gguf_arch: &str) {
    let dir = test_data(&format!("data/tiny/{arch}"));
    let p = scratch_dir(&format!("tiny-{arch}-gguf")).join("model.gguf");
    tiny_gguf(&dir, gguf_arch).write(&p);
    let st = vllm_rs_models::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let gg = vllm_rs_models::load(&p).unwrap_or_else(|e| panic!("{e}"));
    assert!(gg.unread.is_empty(), "GGUF tensors left unread: {:?}", gg.unread);
    assert_eq!(gg.model.info().architecture, st.model.info().architecture);
    let g = golden(&format!("tiny/{arch}.json"));
    for case in g["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt_token_ids"]);
        let a = greedy(st.model.as_ref(), &prompt, 32, usize::MAX);
        let b = greedy(gg.model.as_ref(), &prompt, 32, usize::MAX);
        assert_eq!(a.token_ids, b.token_ids, "{arch}, prompt of {}: GGUF and safetensors ids differ", prompt.len());
        for (x, y) in [(&a.first_logits, &b.first_logits), (&a.final_logits, &b.final_logits)] {
            let d = rel_max_diff(y, x);
            assert!(d < 1e-5, "{arch}, prompt of {}: GGUF logits differ by {d:.2e} of the scale", prompt.len());
        }
    }
}

#[test]
fn tiny_llama_gguf_equals_safetensors() {
    check_tiny_gguf("llama", "llama");
}

#[test]
fn tiny_moe_ggufs_equal_safetensors() {
    // Mixtral is `llama` with experts in llama.cpp (Q/K permuted too).
    for (arch, gguf_arch) in
        [("qwen3_moe", "qwen3moe"), ("mixtral", "llama"), ("olmoe", "olmoe"), ("qwen2_moe", "qwen2moe")]
    {
        check_tiny_gguf(arch, gguf_arch);
    }
}

/// The tiny MoE checkpoints as GGUF Q8_0 (experts quantized in their 3-D tensors, the router
/// F32 as llama.cpp keeps it), teacher-forced over prompt + golden continuation. Quantization
/// moves most rows' logits by 1-5% of the scale on these peaked random models, but where it
/// flips a near-tied router choice a row moves by up to ~65%: so the budget is on the share of
/// rows, not the worst one. At least [`TINY_Q8_ROWS_CLOSE`] of the rows must be within
/// [`TINY_Q8_REL_TOL`] and have the same top-1; a mis-sliced or misread quantized expert moves
/// nearly every row by O(1).
#[test]
fn tiny_moe_q8_0_within_budget() {
    for (arch, gguf_arch) in
        [("qwen3_moe", "qwen3moe"), ("mixtral", "llama"), ("olmoe", "olmoe"), ("qwen2_moe", "qwen2moe")]
    {
        let dir = test_data(&format!("data/tiny/{arch}"));
        let p = scratch_dir(&format!("tiny-{arch}-q8")).join("model.gguf");
        let mut g = tiny_gguf(&dir, gguf_arch);
        quantize_q8_0(&mut g);
        g.write(&p);
        q8_0_within_budget(arch, &dir, &p);
    }
}

/// Tiny DeepSeek-V3 quantized to Q8_0 by llama.cpp's converter (`--outtype q8_0`, gguf-py's
/// quantizer; the split `attn_k_b`, 16 wide, stays F32), within the same budget.
#[test]
fn deepseek_q8_0_by_llama_cpp_within_budget() {
    let p = test_data("data/tiny-gguf/deepseek_v3_q8_0.gguf");
    q8_0_within_budget("deepseek_v3", &test_data("data/tiny/deepseek_v3"), &p);
}

/// Teacher-forced logits of the Q8_0 GGUF `q8` against the float32 safetensors `dir` of `arch`
/// (see [`tiny_moe_q8_0_within_budget`] for the budget).
fn q8_0_within_budget(arch: &str, dir: &std::path::Path, q8: &std::path::Path) {
    let st = vllm_rs_models::load(dir).unwrap_or_else(|e| panic!("{e}"));
    let q8 = vllm_rs_models::load(q8).unwrap_or_else(|e| panic!("{e}"));
    assert!(q8.unread.is_empty(), "GGUF tensors left unread: {:?}", q8.unread);
    let vocab = st.model.info().vocab_size;
    let (mut close, mut total) = (0, 0);
    for case in golden(&format!("tiny/{arch}.json"))["cases"].as_array().unwrap() {
        let (prompt, out) = (ids(&case["prompt_token_ids"]), ids(&case["token_ids"]));
        let seq: Vec<u32> = prompt.iter().chain(&out[..out.len() - 1]).copied().collect();
        let rows: Vec<usize> = (0..seq.len()).collect();
        let a = logits_at(st.model.as_ref(), &seq, &rows);
        let b = logits_at(q8.model.as_ref(), &seq, &rows);
        for (x, y) in a.chunks_exact(vocab).zip(b.chunks_exact(vocab)) {
            total += 1;
            close += usize::from(rel_max_diff(y, x) <= TINY_Q8_REL_TOL && argmax(x) == argmax(y));
        }
    }
    let share = close as f64 / total as f64;
    eprintln!("{arch} Q8_0: {close}/{total} rows within {TINY_Q8_REL_TOL} of the scale with the same top-1");
    assert!(share >= TINY_Q8_ROWS_CLOSE, "{arch}: only {close}/{total} Q8_0 rows close to F32");
}

/// Logits at every one of `rows` (positions) for `seq` prefilled in one forward.
fn logits_at(model: &dyn Model, seq: &[u32], rows: &[usize]) -> Vec<f32> {
    let info = model.info();
    let blocks = seq.len().div_ceil(BLOCK_SIZE);
    let mut kv = info.contiguous_kv_cache(blocks, BLOCK_SIZE, KvDtype::F32, 0);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let positions: Vec<u32> = (0..seq.len() as u32).collect();
    let slots: Vec<usize> = (0..seq.len()).collect();
    let batch = ForwardBatch {
        input_ids: seq,
        positions: &positions,
        groups: vec![GroupBatch {
            slot_mapping: &slots,
            seqs: vec![SeqAttention { query_start: 0, query_len: seq.len(), seq_len: seq.len(), block_table: &table }],
        }],
        logits_indices: rows,
        state_saves: &[],
    };
    model.logits(&batch, &mut kv)
}

fn top2_rel_margin(x: &[f32]) -> f64 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    let mut scale = 0f32;
    for &v in x {
        scale = scale.max(v.abs());
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    ((a - b) / scale) as f64
}

fn check_real(name: &str) {
    let t0 = std::time::Instant::now();
    let hf = vllm_rs_models::load(&hf_dir(name)).unwrap_or_else(|e| panic!("{e}"));
    assert!(hf.unread.is_empty(), "{name}: tensors left unread: {:?}", hf.unread);
    let gg = vllm_rs_models::load(&gguf_path(name)).unwrap_or_else(|e| panic!("{e}"));
    assert!(gg.unread.is_empty(), "GGUF tensors left unread: {:?}", gg.unread);
    let vocab = hf.model.info().vocab_size;
    assert_eq!(gg.model.info().vocab_size, vocab);
    assert_eq!(gg.model.info().architecture, hf.model.info().architecture);
    let g = golden(&format!("real/{name}.json"));
    let cases = g["cases"].as_array().unwrap();
    // A code prompt, the long paragraph (raw) and a chat prompt.
    let (mut worst, mut agree, mut clear, mut total) = (0f64, 0, 0, 0);
    for &i in &[0usize, 3, 6] {
        let case = &cases[i];
        let prompt = ids(&case["prompt_token_ids"]);
        let out = ids(&case["token_ids"]);
        let seq: Vec<u32> = prompt.iter().chain(&out[..out.len() - 1]).copied().collect();
        let rows: Vec<usize> = (prompt.len() - 1..seq.len()).collect();
        let a = logits_at(hf.model.as_ref(), &seq, &rows);
        let b = logits_at(gg.model.as_ref(), &seq, &rows);
        for (r, (x, y)) in a.chunks_exact(vocab).zip(b.chunks_exact(vocab)).enumerate() {
            let d = rel_max_diff(y, x);
            worst = worst.max(d);
            assert!(d <= REAL_REL_TOL, "{name} case {i} step {r}: GGUF logits differ by {d:.3} of the scale");
            total += 1;
            let same = argmax(x) == argmax(y);
            agree += same as usize;
            if top2_rel_margin(x) > REAL_CLEAR_MARGIN {
                clear += 1;
                assert!(same, "{name} case {i} step {r}: top-1 differs though the margin is clear");
            }
        }
    }
    eprintln!(
        "{name}: worst logit difference {:.2}% of the scale; top-1 agrees at {agree}/{total} steps \
         ({clear} with a clear margin); {:.1} s",
        worst * 100.0,
        t0.elapsed().as_secs_f64()
    );
    assert!(agree * 10 >= total * 9, "{name}: top-1 agrees at only {agree}/{total} steps");
}

#[test]
fn smollm2() {
    check_real("smollm2");
}

#[test]
fn qwen05() {
    check_real("qwen05");
}

#[test]
fn gemma3() {
    check_real("gemma3");
}

/// Tiny Qwen3.5, Qwen3.5-MoE, LFM2, Nemotron-H and Falcon-H1 models converted by llama.cpp's own
/// `convert_hf_to_gguf.py` (made by `scripts/make_tiny_gguf_llamacpp.sh`; Falcon-H1 with its
/// multipliers folded into the weights): llama.cpp stores the
/// norms as `1 + w`, `A` as `−exp(A_log)`, `dt_bias` as `ssm_dt.bias`, stacks the experts, and
/// reorders the value heads (4 value heads over 2 key heads here) for its broadcasts. Our
/// forward on each must equal our forward on the safetensors it came from.
#[test]
fn hybrids_converted_by_llama_cpp() {
    for (arch, class) in [
        ("qwen3_5", "Qwen3_5ForCausalLM"),
        ("qwen3_5_moe", "Qwen3_5MoeForCausalLM"),
        ("lfm2", "Lfm2ForCausalLM"),
        ("nemotron_h", "NemotronHForCausalLM"),
        ("nemotron_h_moe", "NemotronHForCausalLM"),
        ("falcon_h1", "FalconH1ForCausalLM"),
    ] {
        same_as_safetensors(&test_data(&format!("data/tiny/{arch}")), arch, class);
    }
}

/// Llama 3.1's rotary scaling as llama.cpp's converter writes it: per-frequency divisors in a
/// `rope_freqs` tensor, no scaling metadata.
#[test]
fn llama3_rope_scaling_converted_by_llama_cpp() {
    same_as_safetensors(&test_data("data/tiny/llama3_rope"), "llama3_rope", "LlamaForCausalLM");
}

/// Our forward on `tests/data/tiny-gguf/{arch}.gguf` (prefilled in chunks of 5) against our
/// forward on the safetensors `dir` it came from, over the golden prompts of `arch`: the same
/// greedy ids, and final logits equal to float rounding.
fn same_as_safetensors(dir: &std::path::Path, arch: &str, class: &str) {
    let st = vllm_rs_models::load(dir).unwrap_or_else(|e| panic!("{e}"));
    let gguf = test_data(&format!("data/tiny-gguf/{arch}.gguf"));
    let gg = vllm_rs_models::load(&gguf).unwrap_or_else(|e| panic!("{e}"));
    assert!(gg.unread.is_empty(), "GGUF tensors left unread: {:?}", gg.unread);
    assert_eq!(gg.model.info().architecture, class);
    for case in golden(&format!("tiny/{arch}.json"))["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt_token_ids"]);
        let a = greedy(st.model.as_ref(), &prompt, 16, usize::MAX);
        let b = greedy(gg.model.as_ref(), &prompt, 16, 5);
        assert_eq!(a.token_ids, b.token_ids, "{arch}, prompt of {}: GGUF and safetensors ids differ", prompt.len());
        let d = rel_max_diff(&b.final_logits, &a.final_logits);
        assert!(d < 1e-5, "{arch}, prompt of {}: GGUF logits differ by {d:.2e} of the scale", prompt.len());
    }
}

/// Tiny gpt-oss converted by llama.cpp's `convert_hf_to_gguf.py` from its MXFP4 twin
/// (`scripts/make_tiny_gguf_llamacpp.sh`): experts stay MXFP4 (split into gate, up, down with
/// their biases), sinks become `attn_sinks`, the router `ffn_gate_inp`; which layers slide and
/// the YaRN parameters come from the metadata. llama.cpp fixes the clamped SwiGLU's limit at 7.0
/// (the released models' value) and stores no key for it, while the tiny model uses 2.0 so that
/// the clamp acts: the safetensors side here runs with 7.0 too (its config copied and changed).
#[test]
fn gpt_oss_converted_by_llama_cpp() {
    use common::files::copy_model_dir;
    let dir = scratch_dir("gpt_oss_limit7");
    copy_model_dir(&test_data("data/tiny/gpt_oss_mxfp4"), &dir);
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["swiglu_limit"] = 7.0.into();
    std::fs::write(&path, config.to_string()).unwrap();
    same_as_safetensors(&dir, "gpt_oss", "GptOssForCausalLM");
}

/// Tiny DeepSeek-V2 and V3 converted by llama.cpp's `convert_hf_to_gguf.py` (`deepseek2`, made by
/// `scripts/make_tiny_gguf_llamacpp.sh`): `kv_b_proj` split into `attn_k_b` (transposed per
/// head) and `attn_v_b`, one KV head in the metadata, the shared experts as `*_shexp`, V3's
/// correction bias as `exp_probs_b` and its sigmoid router as `expert_gating_func`. GGUF keeps
/// only YaRN's `mscale_all_dim` (llama.cpp takes `mscale` equal to it, as DeepSeek's configs have
/// it) while the tiny V2 uses 1.0 and 0.8 so that the attention factor acts: the safetensors side
/// here runs with both 0.8 (its config copied and changed).
#[test]
fn deepseek_converted_by_llama_cpp() {
    use common::files::copy_model_dir;
    let dir = scratch_dir("deepseek_v2_mscale");
    copy_model_dir(&test_data("data/tiny/deepseek_v2"), &dir);
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["rope_parameters"]["mscale"] = config["rope_parameters"]["mscale_all_dim"].clone();
    std::fs::write(&path, config.to_string()).unwrap();
    same_as_safetensors(&dir, "deepseek_v2", "DeepseekV2ForCausalLM");
    same_as_safetensors(&test_data("data/tiny/deepseek_v3"), "deepseek_v3", "DeepseekV3ForCausalLM");
}

/// Tiny Kimi Linear converted by llama.cpp's `convert_hf_to_gguf.py` (`kimi-linear`, made by
/// `scripts/make_tiny_gguf_llamacpp.sh` from the config and dense MLP names as Moonshot releases
/// them): the KDA layers told apart by `head_count_kv` 0, their `A` stored as `−exp(A_log)`,
/// `dt_bias` as `ssm_dt.bias`, the q/k/v convolutions as `ssm_conv1d_*`; MLA's `kv_b_proj` split
/// into `attn_k_b` (transposed per head) and `attn_v_b`; the experts stacked, the correction bias
/// `exp_probs_b`, the shared experts `*_shexp`, the first layer dense. The converter writes no
/// expert groups for Moonshot's configs (it reads DeepSeek's `n_group`), and llama.cpp then routes
/// without them, while the tiny model has two groups with one used: the safetensors side here
/// runs with one group (its config copied and changed).
#[test]
fn kimi_linear_converted_by_llama_cpp() {
    use common::files::copy_model_dir;
    let dir = scratch_dir("kimi_linear_one_group");
    copy_model_dir(&test_data("data/tiny/kimi_linear"), &dir);
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["num_expert_group"] = 1.into();
    std::fs::write(&path, config.to_string()).unwrap();
    same_as_safetensors(&dir, "kimi_linear", "KimiLinearForCausalLM");
}

/// What llama.cpp's `kimi-linear` metadata may say that we cannot run is refused, not misread:
/// here the converted file with a softmax router (`expert_gating_func` 1, patched in place).
#[test]
fn kimi_linear_gguf_softmax_router_refused() {
    let mut bytes = std::fs::read(test_data("data/tiny-gguf/kimi_linear.gguf")).unwrap();
    let key = b"kimi-linear.expert_gating_func";
    let at = bytes.windows(key.len()).position(|w| w == key).expect("expert_gating_func key") + key.len();
    // The value: type u32 (4), then 2 (sigmoid).
    assert_eq!(bytes[at..at + 8], [4, 0, 0, 0, 2, 0, 0, 0]);
    bytes[at + 4] = 1;
    let p = scratch_dir("kimi_linear_softmax").join("model.gguf");
    std::fs::write(&p, bytes).unwrap();
    let e = vllm_rs_models::load(&p).err().expect("a softmax router must be refused").to_string();
    assert!(e.contains("expert_gating_func Some(1)") && e.contains("not supported for Kimi Linear"), "{e}");
}
