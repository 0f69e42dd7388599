//! Broken checkpoints give a clear error, never a panic: the message names the file and says
//! what is wrong. The files are built in a scratch dir from copies of the tiny checkpoints (or the
//! tiny llama written as GGUF), then corrupted.

mod common;

use common::files::{
    Gguf, Kv, Tensor, copy_model_dir, read_safetensors, scratch_dir, tiny_gguf, tiny_llama_gguf, write_safetensors,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use vllm_rs_testutil::test_data;

fn tiny(arch: &str) -> PathBuf {
    test_data(&format!("data/tiny/{arch}"))
}

/// Loads `path`, which must fail without panicking; returns the error message.
fn load_err(path: &Path) -> String {
    let r = std::panic::catch_unwind(|| vllm_rs_models::load(path).map(|_| ()));
    match r {
        Ok(Ok(())) => panic!("{}: loaded, but it is broken", path.display()),
        Ok(Err(e)) => e.to_string(),
        Err(_) => panic!("{}: loading panicked instead of returning an error", path.display()),
    }
}

/// The error must name `file` and contain every one of `words`.
fn expect_err(path: &Path, file: &Path, words: &[&str]) {
    let msg = load_err(path);
    eprintln!("{msg}"); // `cargo test --test bad_files -- --nocapture` shows every message
    let name = file.display().to_string();
    assert!(msg.contains(&name), "error does not name {name}: {msg}");
    let said = msg.replace(&name, ""); // the scratch paths contain words like "truncated" too
    for w in words {
        assert!(said.contains(w), "error does not say {w:?}: {msg}");
    }
}

fn gguf_file(name: &str, g: &Gguf) -> PathBuf {
    let p = scratch_dir(name).join("model.gguf");
    g.write(&p);
    p
}

#[test]
fn well_formed_copies_load() {
    // The baselines the other cases corrupt must themselves load.
    let d = scratch_dir("baseline-dir");
    copy_model_dir(&tiny("qwen2"), &d);
    vllm_rs_models::load(&d).unwrap_or_else(|e| panic!("{e}"));
    let p = gguf_file("baseline-gguf", &tiny_llama_gguf(&tiny("llama")));
    vllm_rs_models::load(&p).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn truncated_gguf() {
    let bytes = tiny_llama_gguf(&tiny("llama")).to_bytes();
    let d = scratch_dir("gguf-truncated");
    // Cut in the tensor data, then in the metadata.
    for (name, len, words) in [
        ("data.gguf", bytes.len() - 1000, &["truncated", "needs bytes"][..]),
        ("header.gguf", 40, &["truncated"][..]),
        ("magic.gguf", 3, &["not a GGUF file"][..]),
    ] {
        let p = d.join(name);
        std::fs::write(&p, &bytes[..len]).unwrap();
        expect_err(&p, &p, words);
    }
}

#[test]
fn wrong_gguf_magic() {
    let mut bytes = tiny_llama_gguf(&tiny("llama")).to_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let p = scratch_dir("gguf-magic").join("model.gguf");
    std::fs::write(&p, &bytes).unwrap();
    expect_err(&p, &p, &["not a GGUF file", "magic"]);
}

#[test]
fn unknown_gguf_tensor_type() {
    for (id, what) in [(99u32, "tensor type 99 (unknown)"), (16, "tensor type 16 (an IQ quant)")] {
        let mut g = tiny_llama_gguf(&tiny("llama"));
        g.tensors[3].2 = id;
        let name = g.tensors[3].0.clone();
        let p = gguf_file(&format!("gguf-type-{id}"), &g);
        expect_err(&p, &p, &[&name, what]);
    }
}

#[test]
fn missing_tensor() {
    let mut g = tiny_llama_gguf(&tiny("llama"));
    g.tensors.retain(|t| t.0 != "blk.1.ffn_down.weight");
    let p = gguf_file("gguf-missing", &g);
    expect_err(&p, &p, &["model.layers.1.mlp.down_proj.weight", "missing"]);

    let d = scratch_dir("st-missing");
    copy_model_dir(&tiny("qwen2"), &d);
    let mut t = read_safetensors(&d.join("model.safetensors"));
    t.retain(|t| t.name != "model.layers.2.self_attn.q_proj.bias");
    write_safetensors(&d.join("model.safetensors"), &t);
    expect_err(&d, &d, &["model.layers.2.self_attn.q_proj.bias", "missing"]);
}

#[test]
fn shape_mismatch() {
    // Same bytes, other shape: the file is valid, the model cannot use it.
    let d = scratch_dir("st-shape");
    copy_model_dir(&tiny("qwen3"), &d);
    let st = d.join("model.safetensors");
    let mut t: Vec<Tensor> = read_safetensors(&st);
    let o = t.iter_mut().find(|t| t.name == "model.layers.0.self_attn.o_proj.weight").unwrap();
    o.shape = vec![o.shape[1], o.shape[0]];
    write_safetensors(&st, &t);
    expect_err(&d, &st, &["model.layers.0.self_attn.o_proj.weight", "shape [128, 64], expected [64, 128]"]);

    let mut g = tiny_llama_gguf(&tiny("llama"));
    let t = g.tensors.iter_mut().find(|t| t.0 == "blk.0.ffn_up.weight").unwrap();
    t.1.reverse(); // [64, 140] innermost-first becomes [140, 64]
    let p = gguf_file("gguf-shape", &g);
    expect_err(&p, &p, &["model.layers.0.mlp.up_proj.weight", "expected [140, 64]"]);
}

#[test]
fn unsupported_architecture() {
    let d = scratch_dir("st-arch");
    copy_model_dir(&tiny("llama"), &d);
    let cfg = d.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("LlamaForCausalLM", "MambaForCausalLM");
    std::fs::write(&cfg, text).unwrap();
    expect_err(&d, &cfg, &["MambaForCausalLM", "not supported", "LlamaForCausalLM", "Gemma3ForCausalLM"]);

    let mut g = tiny_llama_gguf(&tiny("llama"));
    g.kv[0].1 = Kv::Str("mamba".into());
    let p = gguf_file("gguf-arch", &g);
    expect_err(&p, &p, &["\"mamba\"", "not supported", "llama", "gemma3"]);
}

#[test]
fn bad_config_json() {
    let d = scratch_dir("st-config");
    copy_model_dir(&tiny("gemma3"), &d);
    let cfg = d.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, &text[..text.len() / 2]).unwrap();
    expect_err(&d, &cfg, &["bad JSON"]);

    // Valid JSON that lacks a required field: the error names the field and the file.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("hidden_size");
    std::fs::write(&cfg, v.to_string()).unwrap();
    expect_err(&d, &cfg, &["hidden_size"]);

    std::fs::write(&cfg, "{}").unwrap();
    expect_err(&d, &cfg, &["architectures"]);
}

#[test]
fn truncated_safetensors() {
    let d = scratch_dir("st-truncated");
    copy_model_dir(&tiny("llama"), &d);
    let st = d.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() - 100]).unwrap();
    expect_err(&d, &st, &["truncated"]);
    // Cut inside the JSON header, and inside the 8-byte header length.
    for len in [100, 5] {
        std::fs::write(&st, &bytes[..len]).unwrap();
        expect_err(&d, &st, &["truncated", &format!("the file has {len} bytes")]);
    }
    // Not JSON where the header should be.
    let mut junk = bytes.clone();
    junk[8..16].copy_from_slice(b"GARBAGE!");
    std::fs::write(&st, &junk).unwrap();
    expect_err(&d, &st, &["not a valid safetensors file"]);
}

#[test]
fn missing_path() {
    let p = scratch_dir("missing").join("nothing-here.gguf");
    expect_err(&p, &p, &["no such file"]);
}

#[test]
fn opt_variants_not_built_are_refused() {
    // opt-350m's project_in/out and post-norm layers: a config error naming the key.
    expect_config_errs(
        "opt",
        &[
            ("word_embed_proj_dim", json!(32), &["word_embed_proj_dim", "not supported"]),
            ("do_layer_norm_before", json!(false), &["do_layer_norm_before", "not supported"]),
        ],
    );
}

#[test]
fn falcon_h1_configs_not_built_are_refused() {
    // transformers runs hidden_act in the mixer's convolution too (SiLU here); MLP biases; a
    // time step ceiling; a mixer narrower than its heads.
    expect_config_errs(
        "falcon_h1",
        &[
            ("hidden_act", json!("gelu"), &["hidden_act \"gelu\"", "only silu"]),
            ("mlp_bias", json!(true), &["mlp_bias", "not supported"]),
            ("time_step_limit", json!([0.0, 0.1]), &["time_step_limit", "not supported"]),
            ("mamba_d_ssm", json!(48), &["48 wide", "mamba_n_heads × mamba_d_head is 64"]),
        ],
    );
}

#[test]
fn nemotron_h_with_another_mixer_activation_is_refused() {
    // The convolution of the Mamba-2 mixers runs SiLU only.
    expect_config_errs(
        "nemotron_h",
        &[("mamba_hidden_act", json!("gelu"), &["mamba_hidden_act \"gelu\"", "only silu"])],
    );
}

#[test]
fn bad_moe_checkpoints_and_configs() {
    // A missing expert, in Qwen's names and in Mixtral's.
    for (arch, gone) in [
        ("qwen3_moe", "model.layers.1.mlp.experts.5.up_proj.weight"),
        ("mixtral", "model.layers.0.block_sparse_moe.experts.3.w2.weight"),
        ("nemotron_h_moe", "backbone.layers.5.mixer.experts.6.down_proj.weight"),
    ] {
        let d = scratch_dir(&format!("{arch}-missing-expert"));
        copy_model_dir(&tiny(arch), &d);
        let mut t = read_safetensors(&d.join("model.safetensors"));
        t.retain(|t| t.name != gone);
        write_safetensors(&d.join("model.safetensors"), &t);
        expect_err(&d, &d, &[gone, "missing"]);
    }

    // A 3-D expert tensor holding 7 experts where the metadata says 8.
    let mut g = tiny_gguf(&tiny("qwen3_moe"), "qwen3moe");
    let t = g.tensors.iter_mut().find(|t| t.0 == "blk.0.ffn_up_exps.weight").unwrap();
    assert_eq!(t.1[2], 8);
    t.1[2] = 7;
    t.3.truncate(t.3.len() / 8 * 7);
    let p = gguf_file("gguf-expert-count", &g);
    expect_err(&p, &p, &["model.layers.0.mlp.experts.up_proj.weight", "expected 8 experts", "num_experts = 8"]);

    // More experts per token than there are; a missing expert count; OLMoE's clip_qkv.
    expect_config_errs(
        "olmoe",
        &[
            ("num_experts_per_tok", json!(9), &["num_experts_per_tok (9)", "number of experts (8)"]),
            ("num_experts", serde_json::Value::Null, &["num_experts"]),
            ("clip_qkv", json!(8.0), &["clip_qkv", "not supported"]),
        ],
    );
    // Nemotron-H: groups that do not divide the experts; the latent projection (Nemotron 3 Super).
    expect_config_errs(
        "nemotron_h_moe",
        &[
            ("n_group", json!(3), &["n_group (3)", "8 experts"]),
            ("moe_latent_size", json!(32), &["moe_latent_size", "not supported"]),
        ],
    );
}

/// Tiny `arch` with each `(key, value)` set in its config in turn: loading fails naming the
/// config file and saying `words`.
fn expect_config_errs(arch: &str, cases: &[(&str, serde_json::Value, &[&str])]) {
    let d = scratch_dir(&format!("{arch}-config"));
    copy_model_dir(&tiny(arch), &d);
    let cfg = d.join("config.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    for (key, value, words) in cases {
        let mut bad = v.clone();
        bad[*key] = value.clone();
        std::fs::write(&cfg, bad.to_string()).unwrap();
        expect_err(&d, &cfg, words);
    }
}

#[test]
fn deepseek_v2_configs_not_built_are_refused() {
    let d = scratch_dir("deepseek-config");
    copy_model_dir(&tiny("deepseek_v2"), &d);
    let cfg = d.join("config.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    for (key, value, words) in [
        ("topk_method", json!("noaux_tc"), &["topk_method", "noaux_tc"][..]),
        ("n_group", json!(3), &["n_group (3)"][..]),
        ("moe_layer_freq", json!(2), &["moe_layer_freq"][..]),
        ("norm_topk_prob", json!(true), &["norm_topk_prob"][..]),
        ("kv_lora_rank", serde_json::Value::Null, &["kv_lora_rank"][..]),
        (
            "rope_parameters",
            json!({"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}),
            &["dynamic", "only yarn"][..],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}),
            &["original_max_position_embeddings"][..],
        ),
    ] {
        let mut bad = v.clone();
        bad[key] = value;
        std::fs::write(&cfg, bad.to_string()).unwrap();
        expect_err(&d, &cfg, words);
    }
}

/// gpt-oss's MXFP4 experts: blocks without their scales, scales of another shape, a byte tensor
/// that is no MXFP4 part, and a config with fewer experts than the tensors hold each give an
/// error naming the tensor.
#[test]
fn bad_mxfp4_checkpoints() {
    let blocks = "model.layers.1.mlp.experts.down_proj_blocks";
    let scales = "model.layers.1.mlp.experts.down_proj_scales";
    type Corrupt = fn(&mut Vec<Tensor>);
    let cases: [(&str, Corrupt, &[&str]); 3] = [
        (
            "no-scales",
            |t| t.retain(|t| t.name != "model.layers.1.mlp.experts.down_proj_scales"),
            &[blocks, "has no", scales],
        ),
        (
            "scales-shape",
            |t| {
                let s = t.iter_mut().find(|t| t.name == "model.layers.1.mlp.experts.down_proj_scales").unwrap();
                s.shape = vec![s.shape[0] * s.shape[1], s.shape[2]];
            },
            &[blocks, "MXFP4 needs [.., groups, 16] and [.., groups]"],
        ),
        (
            "stray-bytes",
            |t| {
                let mut s = t.iter().find(|t| t.name == "model.layers.1.mlp.experts.down_proj_scales").unwrap().clone();
                s.name = "model.layers.1.mlp.extra".into();
                t.push(s);
            },
            &["model.layers.1.mlp.extra", "dtype U8 is not supported"],
        ),
    ];
    for (name, corrupt, words) in cases {
        let d = scratch_dir(&format!("mxfp4-{name}"));
        copy_model_dir(&tiny("gpt_oss_mxfp4"), &d);
        let st = d.join("model.safetensors");
        let mut t = read_safetensors(&st);
        corrupt(&mut t);
        write_safetensors(&st, &t);
        expect_err(&d, &st, words);
    }
    // A config with fewer experts than the MXFP4 tensors hold.
    let d = scratch_dir("mxfp4-experts");
    copy_model_dir(&tiny("gpt_oss_mxfp4"), &d);
    let path = d.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["num_local_experts"] = json!(4);
    std::fs::write(&path, config.to_string()).unwrap();
    let words = ["model.layers.0.mlp.experts.gate_up_proj_blocks", "holds [512, 64] values, expected [256, 64]"];
    expect_err(&d, &d.join("model.safetensors"), &words);
}
