//! The architecture specs are the one list: `scripts/tiny_models.json`, which the golden
//! scripts read, must be what the specs say, and the GGUF tensor-name map must follow them.

use serde_json::{Value, json};
use vllm_rs_models::registry::{ARCHS, by_gguf_arch};
use vllm_rs_testutil::repo_root;

fn parse(what: &str, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not valid JSON: {e}"))
}

/// What `scripts/tiny_models.json` must hold: the shared config and, per architecture with a
/// tiny checkpoint, its class, config class, seed, config and weight-drawing quirks.
fn tiny_models_json() -> String {
    let mut archs = serde_json::Map::new();
    for a in ARCHS {
        let t = &a.tiny;
        archs.insert(
            t.name.to_string(),
            json!({
                "class": a.hf_class,
                "config_class": t.config_class,
                "seed": t.seed,
                "config": parse(&format!("{} tiny config", t.name), t.config),
                "norm_center": t.norm_center,
                "scaled_embed": t.scaled_embed,
            }),
        );
    }
    let common = parse("TINY_COMMON", vllm_rs_models::arch::TINY_COMMON);
    let doc = json!({
        "note": "generated from the ArchSpecs in crates/models/src (tests/arch_specs.rs); do not edit",
        "common": common,
        "archs": archs,
    });
    serde_json::to_string_pretty(&doc).unwrap() + "\n"
}

#[test]
fn tiny_models_json_is_generated_from_the_specs() {
    let path = repo_root().join("scripts/tiny_models.json");
    let want = tiny_models_json();
    if std::env::var_os("VLLM_RS_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the ArchSpecs say: regenerate it with \
         `VLLM_RS_BLESS=1 cargo test -p vllm-rs-models --test arch_specs`",
        path.display()
    );
}

#[test]
fn specs_are_unique() {
    for (i, a) in ARCHS.iter().enumerate() {
        for b in &ARCHS[i + 1..] {
            // A class may have variants (Nemotron-H with and without experts: two GGUF names, two
            // tiny checkpoints); `by_class` takes the first, so they must load alike.
            assert!(
                a.hf_class != b.hf_class || std::ptr::fn_addr_eq(a.load, b.load),
                "{} twice with different loaders",
                a.hf_class
            );
            assert_ne!(a.tiny.name, b.tiny.name);
            assert!(a.gguf_arch.is_none() || a.gguf_arch != b.gguf_arch, "{} twice", a.hf_class);
        }
    }
}

#[test]
fn gguf_tensor_names() {
    let llama = by_gguf_arch("llama").unwrap();
    let gemma = by_gguf_arch("gemma3").unwrap();
    let qwen2moe = by_gguf_arch("qwen2moe").unwrap();
    let gpt_oss = by_gguf_arch("gpt-oss").unwrap();
    let cases = [
        (llama, "token_embd.weight", "model.embed_tokens.weight"),
        (llama, "output.weight", "lm_head.weight"),
        (llama, "blk.3.attn_q.bias", "model.layers.3.self_attn.q_proj.bias"),
        (llama, "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"),
        (gemma, "blk.0.ffn_norm.weight", "model.layers.0.pre_feedforward_layernorm.weight"),
        (gemma, "blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"),
        // Experts: one 3-D tensor per projection.
        (llama, "blk.2.ffn_gate_exps.weight", "model.layers.2.mlp.experts.gate_proj.weight"),
        (llama, "blk.2.ffn_down_exps.weight", "model.layers.2.mlp.experts.down_proj.weight"),
        (qwen2moe, "blk.1.ffn_gate_inp.weight", "model.layers.1.mlp.gate.weight"),
        (qwen2moe, "blk.1.ffn_up_shexp.weight", "model.layers.1.mlp.shared_expert.up_proj.weight"),
        (qwen2moe, "blk.1.ffn_gate_inp_shexp.weight", "model.layers.1.mlp.shared_expert_gate.weight"),
        // gpt-oss: sinks, its post-attention norm, a router with a bias, expert biases.
        (gpt_oss, "blk.0.attn_sinks.weight", "model.layers.0.self_attn.sinks"),
        (gpt_oss, "blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight"),
        (gpt_oss, "blk.1.ffn_gate_inp.bias", "model.layers.1.mlp.router.bias"),
        (gpt_oss, "blk.1.ffn_up_exps.bias", "model.layers.1.mlp.experts.up_proj.bias"),
    ];
    for (spec, gguf, hf) in cases {
        assert_eq!(spec.hf_tensor_name(gguf).as_deref(), Some(hf), "{} {gguf}", spec.hf_class);
    }
    assert_eq!(llama.hf_tensor_name("blk.x.attn_q.weight"), None);
    assert_eq!(llama.hf_tensor_name("blk.0.post_ffw_norm.weight"), None, "a Gemma-only name");
}
