//! `NemotronHForCausalLM` (NVIDIA Nemotron-H), after transformers' `modeling_nemotron_h.py`:
//! a stack of blocks, each one RMSNorm and one mixer — Mamba-2 (`linear_attention`, see
//! `mamba2.rs`), attention without positional embeddings (`full_attention`), a `relu²` MLP
//! (`mlp`) or a mixture of `relu²` experts (`moe`, Nemotron 3) — with a residual around it
//! (`layers_block_type`, or the older `hybrid_override_pattern` of `M`, `*`, `-`, `E`). A block
//! is a decoder layer with one half absent.
//! Checkpoints name the trunk `backbone` (NVIDIA's) or `model` (transformers').

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::{Checkpoint, Format};
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::{Linear, RmsNorm};
use crate::mamba2::{Mamba2, Mamba2Dims, Mamba2Options};
use crate::mlp::{Activation, FeedForward, Mlp};
use crate::moe::{self, Expert, GroupLimit, GroupScore, MoeConfig, Scoring, SharedExpert, SparseMoe};
use crate::norm::Norm;
use serde_json::Value;

pub const NEMOTRON_H: ArchSpec = ArchSpec {
    hf_class: "NemotronHForCausalLM",
    gguf_arch: Some("nemotron_h"),
    load,
    gguf_modules: GGUF_MODULES,
    gguf_config: Some(config_from_gguf),
    tiny: TinySpec {
        name: "nemotron_h",
        config_class: "NemotronHConfig",
        seed: 134,
        config: r#"{"head_dim": 16, "intermediate_size": 96, "layer_norm_epsilon": 1e-5,
            "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "conv_kernel": 4,
            "layers_block_type": ["linear_attention", "mlp", "full_attention", "mlp", "linear_attention",
            "linear_attention", "mlp"], "tie_word_embeddings": false}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// The same class with mixture-of-experts blocks (Nemotron 3); llama.cpp calls its GGUF files
/// `nemotron_h_moe`.
pub const NEMOTRON_H_MOE: ArchSpec = ArchSpec {
    gguf_arch: Some("nemotron_h_moe"),
    tiny: TinySpec {
        name: "nemotron_h_moe",
        config_class: "NemotronHConfig",
        seed: 137,
        config: r#"{"head_dim": 16, "layer_norm_epsilon": 1e-5,
            "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "conv_kernel": 4,
            "layers_block_type": ["linear_attention", "moe", "full_attention", "moe", "linear_attention", "moe"],
            "tie_word_embeddings": false, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "n_group": 2,
            "topk_group": 1, "routed_scaling_factor": 2.5}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
    ..NEMOTRON_H
};

/// llama.cpp's names of a block's tensors (`nemotron_h`, `nemotron_h_moe`), under
/// `model.layers.N.`.
const GGUF_MODULES: &[(&str, &str)] = &[
    ("attn_norm", "norm"),
    ("ssm_in", "mixer.in_proj"),
    ("ssm_conv1d", "mixer.conv1d"),
    ("ssm_a", "mixer.A"),
    ("ssm_d", "mixer.D"),
    ("ssm_dt.bias", "mixer.dt_bias"),
    ("ssm_norm", "mixer.norm"),
    ("ssm_out", "mixer.out_proj"),
    ("attn_q", "mixer.q_proj"),
    ("attn_k", "mixer.k_proj"),
    ("attn_v", "mixer.v_proj"),
    ("attn_output", "mixer.o_proj"),
    ("ffn_up", "mixer.up_proj"),
    ("ffn_down", "mixer.down_proj"),
    ("ffn_gate_inp", "mixer.gate"),
    ("exp_probs_b.bias", "mixer.gate.e_score_correction_bias"),
    ("ffn_up_exps", "mixer.experts.up_proj"),
    ("ffn_down_exps", "mixer.experts.down_proj"),
    ("ffn_up_shexp", "mixer.shared_experts.up_proj"),
    ("ffn_down_shexp", "mixer.shared_experts.down_proj"),
];

/// llama.cpp's metadata: a block's kind from its per-layer counts (KV heads for attention, a
/// feed-forward width for an MLP or, with a router, experts; neither for Mamba-2), the Mamba-2
/// sizes, and the MoE keys.
fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let arch = g.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    let per_layer = |k: &str| crate::config::gguf_per_layer(g, &key(k));
    let (kv, ff) = (per_layer("attention.head_count_kv")?, per_layer("feed_forward_length")?);
    let types: Vec<&str> = kv
        .iter()
        .zip(&ff)
        .enumerate()
        .map(|(i, (&kv, &ff))| match (kv, ff) {
            (0, 0) => "linear_attention",
            (0, _) if g.tensors.contains_key(&format!("blk.{i}.ffn_gate_inp.weight")) => "moe",
            (0, _) => "mlp",
            _ => "full_attention",
        })
        .collect();
    c["layers_block_type"] = serde_json::json!(types);
    let req = |k: &str| g.require_u64(&key(k));
    let heads = req("ssm.time_step_rank")?;
    c["mamba_num_heads"] = heads.into();
    c["mamba_head_dim"] = (req("ssm.inner_size")? / heads.max(1)).into();
    c["ssm_state_size"] = req("ssm.state_size")?.into();
    c["n_groups"] = req("ssm.group_count")?.into();
    c["conv_kernel"] = req("ssm.conv_kernel")?.into();
    c["layer_norm_epsilon"] = c["rms_norm_eps"].clone();
    if types.contains(&"moe") {
        moe::config_from_gguf(g, c, true)?;
        c["moe_shared_expert_intermediate_size"] = req("expert_shared_feed_forward_length")?.into();
        c["n_group"] = g.get_u64(&key("expert_group_count")).unwrap_or(1).into();
        c["topk_group"] = g.get_u64(&key("expert_group_used_count")).unwrap_or(1).into();
        c["routed_scaling_factor"] = g.get_f64(&key("expert_weights_scale")).unwrap_or(1.0).into();
    }
    Ok(())
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let types = block_types(config)?;
    let mut config = config.clone();
    config["num_hidden_layers"] = types.len().into();
    config["rms_norm_eps"] = config.get("layer_norm_epsilon").cloned().unwrap_or(1e-5.into());
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let mut ck = ck.clone();
    ck.rename_prefix("backbone", "model");
    if ck.format == Format::Gguf {
        ck.rename("model.embed_tokens.weight", "model.embeddings.weight")?;
        ck.rename("model.norm.weight", "model.norm_f.weight")?;
    }
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let flag = |k: &str, default: bool| config[k].as_bool().unwrap_or(default);
    let dims = Mamba2Dims::parse(&config)?;
    let time_step_min = config["time_step_min"].as_f64().unwrap_or(0.001) as f32;
    // transformers runs `mamba_hidden_act` after the mixer's convolution, which is SiLU here.
    match config["mamba_hidden_act"].as_str().unwrap_or("silu") {
        "silu" | "swish" => {}
        other => {
            return Err(Error::msg(format!("config: mamba_hidden_act {other:?} is not supported (only silu)")));
        }
    }
    let act_name = config["mlp_hidden_act"].as_str().unwrap_or("relu2");
    let act = Activation::parse(act_name)
        .ok_or_else(|| Error::msg(format!("config: mlp_hidden_act {act_name:?} is not supported")))?;
    let norm = |name: &str| RmsNorm::load(&ck, name, hidden, eps, 0.0).map(Norm::Rms);
    let moe = types.iter().any(|t| t == "moe").then(|| MoeConfig::parse(&config, true)).transpose()?;
    let mut layers = Vec::with_capacity(types.len());
    for (i, kind) in types.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let m = format!("{p}.mixer");
        let (mixer, mlp) = match kind.as_str() {
            "linear_attention" => {
                let bias = flag("use_bias", false);
                let o = Mamba2Options {
                    in_bias: bias,
                    out_bias: bias,
                    conv_bias: flag("use_conv_bias", true),
                    time_step_min,
                    norm: Some(false),
                    eps,
                };
                (Mixer::Mamba2(Mamba2::load(&ck, &m, hidden, dims, &o)?), FeedForward::None)
            }
            "full_attention" => {
                let mut params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
                params.scale = 1.0 / (hd as f32).sqrt();
                let bias = flag("attention_bias", false);
                (
                    Mixer::Attention(load_attention(&ck, &m, hidden, params, (bias, bias), [None, None], false)?),
                    FeedForward::None,
                )
            }
            "moe" => {
                let c = moe.as_ref().expect("parsed when a block is moe");
                let block = load_moe(&ck, &m, &config, c, hidden, act)?;
                (Mixer::None, FeedForward::Moe(Box::new(block)))
            }
            _ => {
                let bias = flag("mlp_bias", false);
                let fc1 = Linear::load(&ck, &format!("{m}.up_proj"), c.intermediate_size, hidden, bias)?;
                let fc2 = Linear::load(&ck, &format!("{m}.down_proj"), hidden, c.intermediate_size, bias)?;
                (Mixer::None, FeedForward::Plain(Mlp { fc1, fc2, act }))
            }
        };
        // The block's one norm goes before whichever half it has.
        let block_norm = norm(&format!("{p}.norm"))?;
        let (input_norm, pre_mlp_norm) = match mlp {
            FeedForward::None => (block_norm, Norm::Identity),
            _ => (Norm::Identity, block_norm),
        };
        layers.push(DecoderLayer {
            input_norm,
            self_attn: mixer,
            post_attn_norm: None,
            pre_mlp_norm,
            mlp,
            post_mlp_norm: None,
            rope: 0,
        });
    }
    let embed = ck.matrix("model.embeddings.weight", c.vocab_size, hidden)?;
    // No positional embeddings: one empty rotary table.
    plain_decoder(&ck, &config, &c, (embed, layers), norm("model.norm_f")?, vec![Vec::new()])
}

/// A `moe` block `m`: sigmoid scores, the experts chosen with DeepSeek-V3's correction bias
/// within the best groups, plain `act(up) → down` experts, and one always-on shared expert of
/// the same shape.
fn load_moe(
    ck: &Checkpoint,
    m: &str,
    config: &Value,
    c: &MoeConfig,
    hidden: usize,
    act: Activation,
) -> Result<SparseMoe> {
    if config.get("moe_latent_size").is_some_and(|v| !v.is_null()) {
        return Err(Error::msg("config: moe_latent_size (a latent projection around the experts) is not supported"));
    }
    let inter = moe::config_usize(config, "moe_intermediate_size")?;
    let mut block = SparseMoe::load_plain(ck, m, c, [hidden, inter], act)?;
    block.scoring = Scoring::Sigmoid;
    block.correction_bias = Some(ck.vector(&format!("{m}.gate.e_score_correction_bias"), c.num_experts)?);
    block.group_limit = Some(GroupLimit::parse(config, c.num_experts, GroupScore::SumTop2)?);
    block.routed_scaling_factor = moe::routed_scaling_factor(config)?;
    let shared = moe::config_usize(config, "moe_shared_expert_intermediate_size")?;
    let bias = config["mlp_bias"].as_bool().unwrap_or(false);
    let fc = |proj: &str, rows, cols| Linear::load(ck, &format!("{m}.shared_experts.{proj}"), rows, cols, bias);
    let mlp = Mlp { fc1: fc("up_proj", shared, hidden)?, fc2: fc("down_proj", hidden, shared)?, act };
    block.shared_expert = Some(SharedExpert { mlp: Expert::Plain(mlp), gate: None });
    Ok(block)
}

/// `layers_block_type`, or `hybrid_override_pattern` (`M` Mamba-2, `*` attention, `-` MLP).
fn block_types(config: &Value) -> Result<Vec<String>> {
    let types: Vec<String> = match (config["layers_block_type"].as_array(), config["hybrid_override_pattern"].as_str())
    {
        (Some(list), _) => list.iter().map(|t| t.as_str().unwrap_or("?").to_string()).collect(),
        (None, Some(pattern)) => pattern
            .chars()
            .map(|ch| match ch {
                'M' => "linear_attention",
                '*' => "full_attention",
                '-' => "mlp",
                'E' => "moe",
                _ => "?",
            })
            .map(String::from)
            .collect(),
        (None, None) => {
            return Err(Error::msg("config: missing field `layers_block_type` (or `hybrid_override_pattern`)"));
        }
    };
    if let Some(bad) =
        types.iter().find(|t| !matches!(t.as_str(), "linear_attention" | "full_attention" | "mlp" | "moe"))
    {
        return Err(Error::msg(format!(
            "config: block type {bad:?} is not supported (supported: linear_attention, full_attention, mlp, moe)"
        )));
    }
    Ok(types)
}
