//! Architecture parity on tiny random-weight checkpoints made by transformers itself
//! (`scripts/make_tiny_models.py`), against transformers' float32 greedy decoding
//! (`scripts/make_goldens.py tiny`).
//!
//! For every golden prompt: our greedy ids must equal transformers', and the logits of the first
//! and the last step must agree within [`REL_TOL`] of the largest |logit|. The goldens were chosen
//! so the top-2 margin is ≥ 1% of the largest |logit| at every step, far above the tolerance.
//! The prompt is prefilled whole, one token at a time, and in chunks of 3, 7 and 16 (a block): chunking must not
//! change a single bit (batch invariance). All prompts decoded side by side in one batch must
//! give the same ids too. And every backend this machine runs (the CPU tiers) must decode the
//! same bits as the default one. Every tensor of the checkpoint must be read.

mod common;

use common::{first_mismatch, floats, greedy, greedy_batch, greedy_on, ids, rel_max_diff};
use vllm_rs_testutil::{golden, test_data};

/// f32 with another summation order than PyTorch: ~1e-6 relative is typical; 1e-4 leaves room
/// for accumulation over 3–4 layers while any real mistake (a wrong scale, norm offset, RoPE
/// base, window) shows up as 1e-2 or more.
const REL_TOL: f64 = 1e-4;

fn check_arch(arch: &str, class: &str) {
    check_dir(arch, arch, class);
}

/// [`check_arch`] for the checkpoint in `tests/data/tiny/{dir}` against the goldens of `arch`.
fn check_dir(dir: &str, arch: &str, class: &str) {
    let dir = test_data(&format!("data/tiny/{dir}"));
    let g = golden(&format!("tiny/{arch}.json"));
    assert_eq!(g["architecture"], class);
    let lm = vllm_rs_models::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lm.model.info().architecture, class);
    // Every tensor transformers saved is a weight the model uses: none misread or ignored.
    assert!(lm.unread.is_empty(), "{arch}: tensors left unread: {:?}", lm.unread);
    let n_new = g["num_new_tokens"].as_u64().unwrap() as usize;
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 4, "{arch}: too few golden cases");
    let mut prompts = vec![];
    let mut wants = vec![];
    let mut worst = 0f64;
    for (i, case) in cases.iter().enumerate() {
        let prompt = ids(&case["prompt_token_ids"]);
        let want = ids(&case["token_ids"]);
        assert_eq!(want.len(), n_new);
        let whole = greedy(lm.model.as_ref(), &prompt, n_new, usize::MAX);
        let what = format!("{arch} case {i} (prompt of {} tokens)", prompt.len());
        assert_eq!(
            whole.token_ids,
            want,
            "{what}: greedy ids differ from transformers at step {:?}",
            first_mismatch(&whole.token_ids, &want)
        );
        for (name, ours) in [("first_logits", &whole.first_logits), ("final_logits", &whole.final_logits)] {
            let d = rel_max_diff(ours, &floats(&case[name]));
            worst = worst.max(d);
            assert!(d <= REL_TOL, "{what}: {name} differ by {d:.2e} of the logit scale (tolerance {REL_TOL:.0e})");
        }
        for chunk in [1, 3, 7, 16] {
            let r = greedy(lm.model.as_ref(), &prompt, n_new, chunk);
            assert_eq!(r.token_ids, whole.token_ids, "{what}: prefill in chunks of {chunk} changed the ids");
            assert!(
                r.first_logits == whole.first_logits && r.final_logits == whole.final_logits,
                "{what}: prefill in chunks of {chunk} changed the logits (max rel diff {:.2e}); results must be \
                 bit-identical however the prompt is chunked",
                rel_max_diff(&r.first_logits, &whole.first_logits)
            );
        }
        for be in vllm_rs_kernels::backend::available() {
            let r = greedy_on(be, lm.model.as_ref(), &prompt, n_new, usize::MAX);
            assert!(
                r.token_ids == whole.token_ids
                    && r.first_logits == whole.first_logits
                    && r.final_logits == whole.final_logits,
                "{what}: backend {} decodes other bits than the default backend (max rel diff {:.2e})",
                be.name(),
                rel_max_diff(&r.final_logits, &whole.final_logits)
            );
        }
        prompts.push(prompt);
        wants.push(want);
    }
    eprintln!("{arch}: {} cases match; worst logit difference {worst:.2e} of the logit scale", cases.len());
    let batched = greedy_batch(lm.model.as_ref(), &prompts, n_new);
    for (i, (got, want)) in batched.iter().zip(&wants).enumerate() {
        assert_eq!(got, want, "{arch} case {i}: decoding all prompts in one batch changed the ids");
    }
}

#[test]
fn llama() {
    check_arch("llama", "LlamaForCausalLM");
}

/// The same weights with Llama 3.1's rotary scaling (`rope_type: llama3`), every frequency band
/// in use (`scripts/make_tiny_models.py` VARIANTS).
#[test]
fn llama3_rope_scaling() {
    check_arch("llama3_rope", "LlamaForCausalLM");
}

#[test]
fn qwen2() {
    check_arch("qwen2", "Qwen2ForCausalLM");
}

#[test]
fn qwen3() {
    check_arch("qwen3", "Qwen3ForCausalLM");
}

#[test]
fn gemma3() {
    check_arch("gemma3", "Gemma3ForCausalLM");
}

#[test]
fn mistral() {
    check_arch("mistral", "MistralForCausalLM");
}

#[test]
fn gemma2() {
    check_arch("gemma2", "Gemma2ForCausalLM");
}

#[test]
fn phi3() {
    check_arch("phi3", "Phi3ForCausalLM");
}

#[test]
fn gpt2() {
    check_arch("gpt2", "GPT2LMHeadModel");
}

#[test]
fn opt() {
    check_arch("opt", "OPTForCausalLM");
}

#[test]
fn qwen3_moe() {
    check_arch("qwen3_moe", "Qwen3MoeForCausalLM");
}

#[test]
fn mixtral() {
    check_arch("mixtral", "MixtralForCausalLM");
}

#[test]
fn olmoe() {
    check_arch("olmoe", "OlmoeForCausalLM");
}

#[test]
fn qwen2_moe() {
    check_arch("qwen2_moe", "Qwen2MoeForCausalLM");
}

#[test]
fn deepseek_v2() {
    check_arch("deepseek_v2", "DeepseekV2ForCausalLM");
}

#[test]
fn deepseek_v3() {
    check_arch("deepseek_v3", "DeepseekV3ForCausalLM");
}

#[test]
fn qwen3_5() {
    check_arch("qwen3_5", "Qwen3_5ForCausalLM");
}

#[test]
fn qwen3_5_moe() {
    check_arch("qwen3_5_moe", "Qwen3_5MoeForCausalLM");
}

#[test]
fn qwen3_next() {
    check_arch("qwen3_next", "Qwen3NextForCausalLM");
}

#[test]
fn lfm2() {
    check_arch("lfm2", "Lfm2ForCausalLM");
}

#[test]
fn nemotron_h() {
    check_arch("nemotron_h", "NemotronHForCausalLM");
}

#[test]
fn nemotron_h_moe() {
    check_arch("nemotron_h_moe", "NemotronHForCausalLM");
}

#[test]
fn kimi_linear() {
    check_arch("kimi_linear", "KimiLinearForCausalLM");
}

#[test]
fn falcon_h1() {
    check_arch("falcon_h1", "FalconH1ForCausalLM");
}

#[test]
fn falcon_h1_normed() {
    check_arch("falcon_h1_normed", "FalconH1ForCausalLM");
}

#[test]
fn granite_hybrid() {
    check_arch("granite_hybrid", "GraniteMoeHybridForCausalLM");
}

#[test]
fn gpt_oss() {
    check_arch("gpt_oss", "GptOssForCausalLM");
}

/// The tiny gpt-oss with its experts as the released checkpoints hold them (MXFP4 `*_blocks` and
/// `*_scales`, made by `scripts/make_tiny_models.py` from the same values, which lie on the
/// MXFP4 grid): the same goldens hold. Its experts run as MXFP4 weights (int16 activations),
/// within the same tolerance.
#[test]
fn gpt_oss_mxfp4() {
    check_dir("gpt_oss_mxfp4", "gpt_oss", "GptOssForCausalLM");
}

/// A Qwen3.5 release is `Qwen3_5ForConditionalGeneration` (with a vision tower): its text model
/// (config under `text_config`, weights under `model.language_model.`) serves alone, the
/// vision weights left unread. Built from the tiny text model, it must give the same logits.
#[test]
fn qwen3_5_text_model_of_the_multimodal_class() {
    use common::files::{read_safetensors, scratch_dir, write_safetensors};
    let src = test_data("data/tiny/qwen3_5");
    let dir = scratch_dir("qwen3_5_vl");
    let text: serde_json::Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let config = serde_json::json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "vision_config": {"depth": 1, "hidden_size": 8},
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors = read_safetensors(&src.join("model.safetensors"));
    for t in &mut tensors {
        if let Some(rest) = t.name.strip_prefix("model.") {
            t.name = format!("model.language_model.{rest}");
        }
    }
    let mut visual = tensors[0].clone();
    visual.name = "model.visual.patch_embed.proj.weight".into();
    tensors.push(visual);
    write_safetensors(&dir.join("model.safetensors"), &tensors);

    let wrapped = vllm_rs_models::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wrapped.model.info().architecture, "Qwen3_5ForCausalLM");
    assert_eq!(wrapped.unread, ["model.visual.patch_embed.proj.weight"], "the vision tower is reported unread");
    let plain = vllm_rs_models::load(&src).unwrap();
    let prompt = [5, 17, 99, 3, 250, 41];
    let (a, b) = (greedy(wrapped.model.as_ref(), &prompt, 4, 2), greedy(plain.model.as_ref(), &prompt, 4, 2));
    assert_eq!(a.token_ids, b.token_ids);
    assert!(a.final_logits == b.final_logits, "the wrapped text model computes differently");
}
