//! `NemotronHForCausalLM` (NVIDIA Nemotron-H), after transformers' `modeling_nemotron_h.py`:
//! a stack of blocks, each one RMSNorm and one mixer — Mamba-2 (`linear_attention`, see
//! `mamba2.rs`), attention without positional embeddings (`full_attention`) or a `relu²` MLP
//! (`mlp`) — with a residual around it (`layers_block_type`, or the older
//! `hybrid_override_pattern` of `M`, `*`, `-`). A block is a decoder layer with one half absent.
//! Checkpoints name the trunk `backbone` (NVIDIA's) or `model` (transformers').

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::Checkpoint;
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::layers::{Linear, RmsNorm};
use crate::mamba2::{Mamba2, Mamba2Dims};
use crate::mlp::{Activation, FeedForward, Mlp};
use crate::norm::Norm;
use serde_json::Value;

pub const NEMOTRON_H: ArchSpec = ArchSpec {
    hf_class: "NemotronHForCausalLM",
    gguf_arch: None,
    load,
    gguf_modules: &[],
    gguf_config: None,
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

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let types = block_types(config)?;
    let mut config = config.clone();
    config["num_hidden_layers"] = types.len().into();
    config["rms_norm_eps"] = config.get("layer_norm_epsilon").cloned().unwrap_or(1e-5.into());
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    let mut ck = ck.clone();
    ck.rename_prefix("backbone", "model");
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let flag = |k: &str, default: bool| config[k].as_bool().unwrap_or(default);
    let dims = Mamba2Dims::parse(&config)?;
    let time_step_min = config["time_step_min"].as_f64().unwrap_or(0.001) as f32;
    let act_name = config["mlp_hidden_act"].as_str().unwrap_or("relu2");
    let act = Activation::parse(act_name)
        .ok_or_else(|| Error::msg(format!("config: mlp_hidden_act {act_name:?} is not supported")))?;
    let norm = |name: &str| RmsNorm::load(&ck, name, hidden, eps, 0.0).map(Norm::Rms);
    let mut layers = Vec::with_capacity(types.len());
    for (i, kind) in types.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let m = format!("{p}.mixer");
        let (mixer, mlp) = match kind.as_str() {
            "linear_attention" => {
                let bias = (flag("use_bias", false), flag("use_conv_bias", true));
                (Mixer::Mamba2(Mamba2::load(&ck, &m, hidden, dims, bias, time_step_min, eps)?), FeedForward::None)
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
    if let Some(bad) = types.iter().find(|t| !matches!(t.as_str(), "linear_attention" | "full_attention" | "mlp")) {
        return Err(Error::msg(format!(
            "config: block type {bad:?} is not supported (supported: linear_attention, full_attention, mlp; \
             Nemotron-H's mixture-of-experts blocks are not yet)"
        )));
    }
    Ok(types)
}
