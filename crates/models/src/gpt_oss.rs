//! `GptOssForCausalLM` (gpt-oss-20b/120b), after transformers' `modeling_gpt_oss.py`.
//!
//! Llama's pre-norm layer with: q/k/v/o biases; a learned sink logit per query head that joins
//! the attention softmax's denominator (no value); layers alternating sliding-window and full
//! attention (`layer_types`, else even layers slide); YaRN rotary scaling, whose attention factor
//! scales q and k, so here the scores by its square. The feed-forward block is a sparse MoE on
//! every layer: a router with a bias, the top-k experts by logit weighted by a softmax over
//! their logits alone, experts with biases and a clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`).
//!
//! Experts come as transformers keeps them (`experts.gate_up_proj` `[experts, hidden, 2·inter]`,
//! input-major, gate and up columns interleaved; `down_proj` `[experts, inter, hidden]`), as the
//! released checkpoints keep them (MXFP4 `*_blocks`/`*_scales`, output-major, gate and up rows
//! interleaved; kept MXFP4), or as llama.cpp's `gpt-oss` GGUF (`ffn_{gate,up,down}_exps`, F32 or
//! MXFP4, biases beside them). llama.cpp fixes alpha 1.702 and limit 7.0 (the released values)
//! and writes no key for them, so a GGUF gets those.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderModel, load_attention};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::Linear;
use crate::llama::{pre_norm_layer, pre_norm_model};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::moe::{self, Expert, MoeConfig, Scoring, SparseMoe};
use crate::yarn::Yarn;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use vllm_rs_kernels::attention::AttentionParams;
use vllm_rs_kernels::{Storage, Weight, ops};

pub const GPT_OSS: ArchSpec = ArchSpec {
    hf_class: "GptOssForCausalLM",
    gguf_arch: Some("gpt-oss"),
    load,
    gguf_modules: &[
        ("attn_sinks.weight", "self_attn.sinks"),
        ("post_attention_norm", "post_attention_layernorm"),
        ("ffn_gate_inp", "mlp.router"),
    ],
    gguf_config: Some(gguf_config),
    tiny: TinySpec {
        name: "gpt_oss",
        config_class: "GptOssConfig",
        seed: 136,
        config: r#"{"num_hidden_layers": 2, "head_dim": 16, "intermediate_size": 32, "num_local_experts": 8,
            "num_experts_per_tok": 2, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
            "swiglu_limit": 2.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 128}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

#[derive(Deserialize)]
struct GptOssExtra {
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "alpha")]
    swiglu_alpha: f32,
    #[serde(default = "limit")]
    swiglu_limit: f32,
    #[serde(default = "yes")]
    attention_bias: bool,
}

fn alpha() -> f32 {
    1.702
}
fn limit() -> f32 {
    7.0
}
fn yes() -> bool {
    true
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let mut c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let scaling = c.rope_scaling.take().filter(|s| !s.is_null());
    c.validate()?;
    let x: GptOssExtra = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    let moe = MoeConfig::parse(config, false)?;
    let (hidden, hd, heads) = (c.hidden_size, c.head_dim(), c.num_attention_heads);
    let sliding = |i: usize| match &x.layer_types {
        Some(t) => t.get(i).is_some_and(|t| t == "sliding_attention"),
        None => i.is_multiple_of(2),
    };
    if (0..c.num_hidden_layers).any(sliding) && x.sliding_window.is_none() {
        return Err(Error::msg("config: sliding_attention layers need `sliding_window`"));
    }
    let (inv_freq, rope_factor) = match scaling {
        None => (ops::rope_inv_freq(c.rope_theta, hd), 1.0),
        Some(s) if s.get("rope_type").or(s.get("type")).and_then(Value::as_str) == Some("yarn") => {
            let y = Yarn::from_params(&s, c.rope_theta, hd)?;
            (y.inv_freq, y.attention_factor)
        }
        Some(s) => return Err(Error::msg(format!("config: rope_scaling {s} is not supported (only yarn)"))),
    };
    let act = Activation::ClampedSwiglu { alpha: x.swiglu_alpha, limit: x.swiglu_limit };
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        let params = AttentionParams {
            num_heads: heads,
            num_kv_heads: c.num_kv_heads(),
            head_dim: hd,
            scale: rope_factor * rope_factor / (hd as f32).sqrt(),
            sliding_window: if sliding(i) { x.sliding_window } else { None },
            softcap: None,
            sinks: Some(ck.vector(&format!("{a}.sinks"), heads)?),
        };
        let bias = (x.attention_bias, x.attention_bias);
        let attn = load_attention(ck, &a, hidden, params, bias, [None, None], false)?;
        let mlp =
            FeedForward::Moe(Box::new(load_moe(ck, &format!("{p}.mlp"), &moe, hidden, c.intermediate_size, act)?));
        layers.push(pre_norm_layer(ck, &p, &c, attn.into(), mlp)?);
    }
    let mut m = pre_norm_model(ck, config, &c, embed, layers, hd)?;
    m.rope_inv_freqs = vec![inv_freq];
    Ok(m)
}

/// The block `{p}`: `router` (`hidden → experts`, with a bias) and the experts, `inter` wide.
fn load_moe(
    ck: &Checkpoint,
    p: &str,
    c: &MoeConfig,
    hidden: usize,
    inter: usize,
    act: Activation,
) -> Result<SparseMoe> {
    let n = c.num_experts;
    let e = format!("{p}.experts");
    let ([g, u, d], [gb, ub, db]) = if ck.contains(&format!("{e}.gate_proj.weight")) {
        split_experts(ck, &e, n, hidden, inter)?
    } else if ck.contains_mxfp4(&format!("{e}.gate_up_proj")) {
        mxfp4_experts(ck, &e, n, hidden, inter)?
    } else {
        dense_experts(ck, &e, n, hidden, inter)?
    };
    let linear = |w: Weight, b: Vec<f32>| Linear { weight: w.for_matmul(), bias: Some(b) };
    let experts = (g.into_iter().zip(u).zip(d))
        .zip(gb.into_iter().zip(ub).zip(db))
        .map(|(((g, u), d), ((gb, ub), db))| {
            Expert::Gated(GatedMlp {
                gate_proj: linear(g, gb),
                up_proj: linear(u, ub),
                down_proj: linear(d, db),
                act,
                scales: [1.0, 1.0],
            })
        })
        .collect();
    Ok(SparseMoe {
        gate: Linear::load(ck, &format!("{p}.router"), n, hidden, true)?,
        experts,
        top_k: c.num_experts_per_tok,
        norm_topk_prob: false,
        scoring: Scoring::TopKSoftmax,
        correction_bias: None,
        routed_scaling_factor: 1.0,
        group_limit: None,
        shared_expert: None,
    })
}

/// One bias vector per expert.
type Biases = Vec<Vec<f32>>;

/// Per expert: the gate, up and down matrices, and their biases.
type Experts = ([Vec<Weight>; 3], [Biases; 3]);

/// llama.cpp's layout: `{e}.{gate,up,down}_proj.{weight,bias}`, 3-D and 2-D.
fn split_experts(ck: &Checkpoint, e: &str, n: usize, hidden: usize, inter: usize) -> Result<Experts> {
    let load = |proj: &str, rows: usize, cols: usize| -> Result<(Vec<Weight>, Biases)> {
        Ok((
            ck.experts(&format!("{e}.{proj}.weight"), n, rows, cols)?,
            per_expert(ck, &format!("{e}.{proj}.bias"), n, rows)?,
        ))
    };
    let ((g, gb), (u, ub), (d, db)) =
        (load("gate_proj", inter, hidden)?, load("up_proj", inter, hidden)?, load("down_proj", hidden, inter)?);
    Ok(([g, u, d], [gb, ub, db]))
}

/// The released checkpoints: MXFP4 `gate_up_proj` (`experts · 2·inter` rows of `hidden`, gate
/// and up rows alternating) and `down_proj` (`*_blocks`, `*_scales`), with `*_bias`
/// `[experts, rows]`; each expert's matrices are read straight into their own MXFP4 weights.
fn mxfp4_experts(ck: &Checkpoint, e: &str, n: usize, hidden: usize, inter: usize) -> Result<Experts> {
    let (gate_up, down) = (format!("{e}.gate_up_proj"), format!("{e}.down_proj"));
    let alternate = |x: usize, parity: usize| (0..inter).map(move |j| x * 2 * inter + 2 * j + parity);
    let [mut gate, mut up, mut downs] = [(); 3].map(|_| Vec::with_capacity(n));
    for x in 0..n {
        gate.push(ck.mxfp4_rows(&gate_up, [n * 2 * inter, hidden], alternate(x, 0))?);
        up.push(ck.mxfp4_rows(&gate_up, [n * 2 * inter, hidden], alternate(x, 1))?);
        downs.push(ck.mxfp4_rows(&down, [n * hidden, inter], x * hidden..(x + 1) * hidden)?);
    }
    let (gb, ub) = gate_up_biases(ck, e, n, inter)?;
    Ok(([gate, up, downs], [gb, ub, per_expert(ck, &format!("{e}.down_proj_bias"), n, hidden)?]))
}

/// transformers' dense layout: `gate_up_proj` `[experts, hidden, 2·inter]` (gate and up
/// columns alternating) and `down_proj` `[experts, inter, hidden]`, both input-major, so each
/// expert's matrices are transposed (in their own element type).
fn dense_experts(ck: &Checkpoint, e: &str, n: usize, hidden: usize, inter: usize) -> Result<Experts> {
    let gate_up = ck.experts(&format!("{e}.gate_up_proj"), n, hidden, 2 * inter)?;
    let down = ck.experts(&format!("{e}.down_proj"), n, inter, hidden)?;
    let (mut gate, mut up) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for w in &gate_up {
        // Transposed, gate and up alternate by rows.
        let t = transpose(w);
        gate.push(alternate_rows(&t, 0));
        up.push(alternate_rows(&t, 1));
    }
    let (gb, ub) = gate_up_biases(ck, e, n, inter)?;
    let down = down.iter().map(transpose).collect();
    Ok(([gate, up, down], [gb, ub, per_expert(ck, &format!("{e}.down_proj_bias"), n, hidden)?]))
}

/// `gate_up_proj_bias` (`[experts, 2·inter]`, alternating) split into gate and up biases.
fn gate_up_biases(ck: &Checkpoint, e: &str, n: usize, inter: usize) -> Result<(Biases, Biases)> {
    let both = per_expert(ck, &format!("{e}.gate_up_proj_bias"), n, 2 * inter)?;
    let pick = |parity: usize| both.iter().map(|b| b.iter().skip(parity).step_by(2).copied().collect()).collect();
    Ok((pick(0), pick(1)))
}

/// A `[experts, len]` tensor as one vector per expert.
fn per_expert(ck: &Checkpoint, name: &str, n: usize, len: usize) -> Result<Biases> {
    Ok(ck.vector(name, n * len)?.chunks_exact(len).map(<[f32]>::to_vec).collect())
}

/// Rows `parity, parity + 2, …` of `w`, copied.
fn alternate_rows(w: &Weight, parity: usize) -> Weight {
    let rb = w.row_bytes();
    let bytes: Vec<u8> = (parity..w.rows).step_by(2).flat_map(|r| &w.bytes()[r * rb..(r + 1) * rb]).copied().collect();
    Weight::new(w.ty, w.rows / 2, w.cols, Storage::Owned(Arc::new(bytes))).expect("whole rows")
}

/// `wᵀ` for a dense (f32/f16/bf16) weight, in its element type.
fn transpose(w: &Weight) -> Weight {
    debug_assert!(!w.ty.is_quantized());
    let size = w.ty.type_size();
    let src = w.bytes();
    let mut out = vec![0u8; src.len()];
    for r in 0..w.rows {
        for c in 0..w.cols {
            let (from, to) = ((r * w.cols + c) * size, (c * w.rows + r) * size);
            out[to..to + size].copy_from_slice(&src[from..from + size]);
        }
    }
    Weight::new(w.ty, w.cols, w.rows, Storage::Owned(Arc::new(out))).expect("same bytes")
}

/// What a `gpt-oss` GGUF leaves out: the expert width is `intermediate_size` (transformers'
/// name), the YaRN parameters beyond the factor, the window and which layers slide
/// (`attention.sliding_window_pattern`: a list of flags, or every n-th layer full; llama.cpp's
/// default 2: even layers slide).
fn gguf_config(g: &GgufFile, c: &mut Value) -> Result<()> {
    moe::config_from_gguf(g, c, false)?;
    if let Some(n) = c.get("moe_intermediate_size").cloned() {
        c["intermediate_size"] = n;
    }
    let arch = g.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    if c.get("rope_scaling").is_some_and(|s| s["rope_type"] == "yarn") {
        let s = &mut c["rope_scaling"];
        s["original_max_position_embeddings"] = json!(g.get_u64(&key("rope.scaling.original_context_length")));
        s["beta_fast"] = json!(g.get_f64(&key("rope.scaling.yarn_beta_fast")));
        s["beta_slow"] = json!(g.get_f64(&key("rope.scaling.yarn_beta_slow")));
        s["truncate"] = json!(false); // as transformers' gpt-oss
    }
    c["sliding_window"] = json!(g.get_u64(&key("attention.sliding_window")));
    let layers = c["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    let pattern = g.get(&key("attention.sliding_window_pattern"));
    let slides: Vec<bool> = match (pattern.and_then(|p| p.as_array()), pattern.and_then(|p| p.as_u64())) {
        (Some(flags), _) => flags.iter().map(|f| f.as_bool().unwrap_or(false)).collect(),
        (None, n) => {
            let n = n.unwrap_or(2) as usize;
            (0..layers).map(|i| n == 0 || i % n < n - 1).collect()
        }
    };
    if slides.len() != layers {
        return Err(Error::file(
            &g.path,
            format!("{} has {} flags for {layers} layers", key("attention.sliding_window_pattern"), slides.len()),
        ));
    }
    let types: Vec<&str> = slides.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    c["layer_types"] = json!(types);
    Ok(())
}
