//! `GraniteMoeHybridForCausalLM` (IBM Granite 4.0 "H"), after transformers'
//! `modeling_granitemoehybrid.py`: Mamba-2 layers (`mamba.rs`' mixer under Granite's `mamba_*`
//! keys) and attention layers (optionally without rotary embeddings), each followed by a shared
//! SwiGLU MLP plus, when `num_local_experts > 0`, routed experts (top-k of the router logits,
//! softmax over them: the renormalized top-k of a softmax). Granite's µP multipliers:
//! embeddings × `embedding_multiplier`, each sub-layer's output × `residual_multiplier` before
//! its residual add, attention scale `attention_multiplier`, logits ÷ `logits_scaling`. Its
//! fused projections (`input_linear` = gate and up, stacked per expert) are split on load.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::layers::RmsNorm;
use crate::mamba2::{Mamba2, Mamba2Dims, Mamba2Options, time_step_min};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::moe::{Expert, MoeConfig, MoeNames, SharedExpert, SparseMoe};
use crate::norm::Norm;
use serde_json::Value;
use vllm_rs_kernels::ops;

pub const GRANITE_MOE_HYBRID: ArchSpec = ArchSpec {
    hf_class: "GraniteMoeHybridForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
    tiny: TinySpec {
        name: "granite_hybrid",
        config_class: "GraniteMoeHybridConfig",
        seed: 135,
        config: r#"{"num_hidden_layers": 3, "layers_block_type": ["mamba", "attention", "mamba"],
            "intermediate_size": 24, "shared_intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
            "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_state": 8, "mamba_n_groups": 2, "mamba_d_conv": 4,
            "mamba_expand": 2, "position_embedding_type": "rope", "embedding_multiplier": 3.0,
            "residual_multiplier": 0.5, "attention_multiplier": 0.2, "logits_scaling": 2.0,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let f = |k: &str, default: f64| config[k].as_f64().unwrap_or(default) as f32;
    let flag = |k: &str, default: bool| config[k].as_bool().unwrap_or(default);
    let dims = Mamba2Dims::parse_keys(
        config,
        ["mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv"],
    )?;
    let experts = config["num_local_experts"].as_u64().unwrap_or(0) as usize;
    let shared_inter = config["shared_intermediate_size"]
        .as_u64()
        .ok_or_else(|| Error::msg("config: missing field `shared_intermediate_size`"))? as usize;
    let rope = config["position_embedding_type"].as_str().unwrap_or("nope") == "rope";
    let residual = f("residual_multiplier", 1.0);
    let mut ck = ck.clone();
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for (i, kind) in layer_types(config, c.num_hidden_layers)?.iter().enumerate() {
        let p = format!("model.layers.{i}");
        unfuse_mlps(&mut ck, &p, experts, [c.intermediate_size, shared_inter], hidden)?;
        let mixer = if *kind == "mamba" {
            let bias = flag("mamba_proj_bias", false);
            let o = Mamba2Options {
                in_bias: bias,
                out_bias: bias,
                conv_bias: flag("mamba_conv_bias", true),
                time_step_min: time_step_min(config)?,
                norm: Some(false),
                eps,
            };
            Mixer::Mamba2(Mamba2::load(&ck, &format!("{p}.mamba"), hidden, dims, &o)?)
        } else {
            let mut params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
            params.scale = f("attention_multiplier", 1.0 / (hd as f64).sqrt());
            let bias = flag("attention_bias", false);
            Mixer::Attention(load_attention(
                &ck,
                &format!("{p}.self_attn"),
                hidden,
                params,
                (bias, bias),
                [None, None],
                false,
            )?)
        };
        let shared = GatedMlp::load(&ck, &format!("{p}.shared_mlp"), hidden, shared_inter, Activation::Silu)?;
        let mlp = if experts > 0 {
            let moe = MoeConfig::parse(
                &serde_json::json!({"num_experts": experts,
                "num_experts_per_tok": config["num_experts_per_tok"], "norm_topk_prob": true}),
                true,
            )?;
            let names = MoeNames { block: "block_sparse_moe", proj: ["gate_proj", "up_proj", "down_proj"] };
            let mut block = SparseMoe::load(&ck, &p, names, &moe, hidden, c.intermediate_size)?;
            block.shared_expert = Some(SharedExpert { mlp: Expert::Gated(shared), gate: None });
            FeedForward::Moe(Box::new(block))
        } else {
            FeedForward::Gated(shared)
        };
        let norm = |name: &str| RmsNorm::load(&ck, &format!("{p}.{name}"), hidden, eps, 0.0).map(Norm::Rms);
        layers.push(DecoderLayer {
            input_norm: norm("input_layernorm")?,
            self_attn: mixer,
            post_attn_norm: Some(Norm::Scale(residual)),
            pre_mlp_norm: norm("post_attention_layernorm")?,
            mlp,
            post_mlp_norm: Some(Norm::Scale(residual)),
            rope: 0,
        });
    }
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    let norm = Norm::Rms(RmsNorm::load(&ck, "model.norm", hidden, eps, 0.0)?);
    let inv_freq = if rope { ops::rope_inv_freq(c.rope_theta, hd) } else { Vec::new() };
    let mut model = plain_decoder(&ck, config, &c, (embed, layers), norm, vec![inv_freq])?;
    model.embed_scale = f("embedding_multiplier", 1.0);
    model.logit_scale = 1.0 / f("logits_scaling", 1.0);
    Ok(model)
}

/// Splits layer `p`'s fused projections: `shared_mlp.input_linear` into `gate_proj` and
/// `up_proj` (`output_linear` is `down_proj`), and the experts' stacked `input_linear`
/// (`[experts, 2 × inter, hidden]`) and `output_linear` into per-expert matrices, the router
/// `router.layer` into the block's `gate`.
fn unfuse_mlps(ck: &mut Checkpoint, p: &str, experts: usize, [inter, shared]: [usize; 2], hidden: usize) -> Result<()> {
    let s = format!("{p}.shared_mlp");
    let parts = [(format!("{s}.gate_proj.weight"), shared), (format!("{s}.up_proj.weight"), shared)];
    ck.split_rows(&format!("{s}.input_linear.weight"), &parts)?;
    ck.rename(&format!("{s}.output_linear.weight"), &format!("{s}.down_proj.weight"))?;
    if experts == 0 {
        return Ok(());
    }
    let b = format!("{p}.block_sparse_moe");
    let per = |proj: &str, e: usize| format!("{b}.experts.{e}.{proj}.weight");
    // Expert e's rows come together: its gate, then its up (and its down in `output_linear`).
    let gate_up: Vec<(String, usize)> =
        (0..experts).flat_map(|e| [(per("gate_proj", e), inter), (per("up_proj", e), inter)]).collect();
    ck.split_rows(&format!("{b}.input_linear.weight"), &gate_up)?;
    let down: Vec<(String, usize)> = (0..experts).map(|e| (per("down_proj", e), hidden)).collect();
    ck.split_rows(&format!("{b}.output_linear.weight"), &down)?;
    ck.rename(&format!("{b}.router.layer.weight"), &format!("{b}.gate.weight"))
}

/// `layer_types` / `layers_block_type`: "mamba" (or "linear_attention") and "attention" (or
/// "full_attention").
fn layer_types(config: &Value, n: usize) -> Result<Vec<&'static str>> {
    let list = config["layer_types"]
        .as_array()
        .or(config["layers_block_type"].as_array())
        .ok_or_else(|| Error::msg("config: missing field `layer_types` (or `layers_block_type`)"))?;
    let types = list
        .iter()
        .map(|t| match t.as_str() {
            Some("mamba" | "linear_attention") => Ok("mamba"),
            Some("attention" | "full_attention") => Ok("attention"),
            other => Err(Error::msg(format!("config: layer type {other:?} is not mamba or attention"))),
        })
        .collect::<Result<Vec<_>>>()?;
    if types.len() != n {
        return Err(Error::msg(format!("config: {} layer types for {n} layers", types.len())));
    }
    Ok(types)
}
