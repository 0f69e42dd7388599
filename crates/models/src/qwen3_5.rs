//! `Qwen3_5ForCausalLM`, the text model of Qwen3.5/3.6, after transformers'
//! `modeling_qwen3_5.py`: a hybrid of gated delta-net layers (`layer_types[i] =
//! "linear_attention"`, see `gated_deltanet.rs`) and gated full attention (`q_proj` also gives a
//! per-head output gate; per-head q/k RMSNorm; rotary on the first `partial_rotary_factor` of
//! each head), a SwiGLU MLP on every layer. Every RMSNorm outside the delta-net stores `w` of
//! `(1 + w)`. Multimodal rotary (mrope) sections coincide for text, where the three position
//! ids are equal: plain rotary over the rotary dims. GGUF (llama.cpp's `qwen35`) stores the
//! norms as `1 + w`, `A` as `−exp(A_log)`, and value heads in tiled order.

use crate::arch::{ArchSpec, TinySpec};
use crate::checkpoint::{Checkpoint, Format};
use crate::config::CommonConfig;
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention_gated, plain_decoder};
use crate::error::{Error, Result};
use crate::gated_deltanet::{GatedDeltaNet, GdnDims};
use crate::gguf::GgufFile;
use crate::layers::{Linear, RmsNorm};
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::moe;
use crate::mtp::{Chain, Mtp};
use crate::norm::Norm;
use serde_json::Value;
use vllm_rs_kernels::ops;

pub const QWEN3_5: ArchSpec = ArchSpec {
    hf_class: "Qwen3_5ForCausalLM",
    gguf_arch: Some("qwen35"),
    load,
    gguf_modules: GGUF_MODULES,
    gguf_config: Some(config_from_gguf),
    tiny: TinySpec {
        name: "qwen3_5",
        config_class: "Qwen3_5TextConfig",
        seed: 130,
        config: r#"{"num_hidden_layers": 4, "head_dim": 32, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
            "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention"],
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1], "mrope_interleaved": true}}"#,
        norm_center: 0.0,
        scaled_embed: false,
    },
};

/// llama.cpp's names of the delta-net's tensors (`qwen35`, `qwen35moe`, `qwen3next`).
pub const GGUF_MODULES: &[(&str, &str)] = &[
    ("attn_qkv", "linear_attn.in_proj_qkv"),
    ("attn_gate", "linear_attn.in_proj_z"),
    ("ssm_beta", "linear_attn.in_proj_b"),
    ("ssm_alpha", "linear_attn.in_proj_a"),
    ("ssm_conv1d", "linear_attn.conv1d"),
    ("ssm_a", "linear_attn.A"),
    ("ssm_dt.bias", "linear_attn.dt_bias"),
    ("ssm_norm", "linear_attn.norm"),
    ("ssm_out", "linear_attn.out_proj"),
    ("post_attention_norm", "post_attention_layernorm"),
];

/// The config keys llama.cpp's `qwen35*` metadata holds under other names.
pub fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let arch = g.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    let req = |k: &str| g.require_u64(&key(k)).map(|v| v as usize);
    let recurrent = g
        .get(&key("attention.recurrent_layers"))
        .and_then(|v| v.as_array())
        .ok_or_else(|| Error::msg(format!("metadata key {} is missing", key("attention.recurrent_layers"))))?;
    let types: Vec<&str> = recurrent
        .iter()
        .map(|r| if r.as_bool() == Some(true) { "linear_attention" } else { "full_attention" })
        .collect();
    let n = c["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    // llama.cpp counts multi-token-prediction layers in block_count; they come last.
    c["layer_types"] = serde_json::json!(types[..n.min(types.len())]);
    let v_heads = req("ssm.time_step_rank")?;
    c["linear_conv_kernel_dim"] = req("ssm.conv_kernel")?.into();
    c["linear_key_head_dim"] = req("ssm.state_size")?.into();
    c["linear_num_key_heads"] = req("ssm.group_count")?.into();
    c["linear_num_value_heads"] = v_heads.into();
    c["linear_value_head_dim"] = (req("ssm.inner_size")? / v_heads.max(1)).into();
    let head_dim = c["head_dim"].as_u64().unwrap_or(1) as f64;
    c["partial_rotary_factor"] = (req("rope.dimension_count")? as f64 / head_dim).into();
    Ok(())
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    load_with(ck, config, dense_mlp(ck, config)?)
}

/// The multi-token-prediction layer of a dense Qwen3.5 checkpoint.
pub fn load_mtp(ck: &Checkpoint, config: &Value) -> Result<Mtp> {
    mtp_with(ck, config, dense_mlp(ck, config)?)
}

/// Every layer's SwiGLU MLP.
fn dense_mlp<'a>(ck: &'a Checkpoint, config: &Value) -> Result<impl Fn(usize, &str) -> Result<FeedForward> + 'a> {
    let (hidden, inter) = (moe::config_usize(config, "hidden_size")?, moe::config_usize(config, "intermediate_size")?);
    Ok(move |_: usize, p: &str| {
        Ok(FeedForward::Gated(GatedMlp::load(ck, &format!("{p}.mlp"), hidden, inter, Activation::Silu)?))
    })
}

/// The Qwen3.5 model with layer `i`'s feed-forward block built by `ffn(i, its prefix)` (the
/// MoE variant's experts).
pub fn load_with(
    ck: &Checkpoint,
    config: &Value,
    ffn: impl Fn(usize, &str) -> Result<FeedForward>,
) -> Result<DecoderModel> {
    let parts = Parts::new(ck, config)?;
    let c = &parts.c;
    // The MTP layer drafts (`mtp.rs`); the model does not use it.
    ck.skip(|name| name.starts_with("mtp."));
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for (i, kind) in layer_types(config, c.num_hidden_layers)?.iter().enumerate() {
        let p = format!("model.layers.{i}");
        layers.push(parts.layer(&p, kind, ffn(i, &p)?)?);
    }
    parts.decoder(layers, "model.norm")
}

/// The multi-token-prediction layer of Qwen3.5 / Qwen3-Next checkpoints (`mtp.*`, vLLM's
/// `qwen3_5_mtp.py`): `fc` over the `pre_fc_norm_embedding`-normed embedding and the
/// `pre_fc_norm_hidden`-normed hidden state, one gated full-attention layer (`mtp.layers.0`,
/// its feed-forward block from `ffn` like layer `num_hidden_layers`'s), `mtp.norm`, and the
/// model's own embedding table and head. Chained drafts take the normed output.
pub fn mtp_with(ck: &Checkpoint, config: &Value, ffn: impl Fn(usize, &str) -> Result<FeedForward>) -> Result<Mtp> {
    if !ck.contains("mtp.fc.weight") {
        return Err(Error::msg(
            "the checkpoint has no MTP weights (mtp.fc.weight): use a checkpoint that keeps them, or another method",
        ));
    }
    match config.get("mtp_num_hidden_layers").and_then(Value::as_u64) {
        None | Some(1) => {}
        Some(n) => return Err(Error::msg(format!("config: mtp_num_hidden_layers is {n}; MTP needs exactly 1"))),
    }
    let parts = Parts::new(ck, config)?;
    let (n, hidden) = (parts.c.num_hidden_layers, parts.c.hidden_size);
    let p = "mtp.layers.0";
    let layer = parts.layer(p, "full_attention", ffn(n, p)?)?;
    let norm = |name: &str| parts.norm(name, hidden).map(Norm::Rms);
    Ok(Mtp {
        enorm: norm("mtp.pre_fc_norm_embedding")?,
        hnorm: norm("mtp.pre_fc_norm_hidden")?,
        eh_proj: Linear::load(ck, "mtp.fc", hidden, 2 * hidden, false)?,
        block: parts.decoder(vec![layer], "mtp.norm")?,
        mask_position_0: false,
        chain: Chain::Normed,
    })
}

/// What building Qwen3.5 layers needs from the checkpoint and the config.
struct Parts<'a> {
    ck: &'a Checkpoint,
    config: &'a Value,
    c: CommonConfig,
    gdn: GdnDims,
    /// Added to the stored norm weights (`1 + w` in HF checkpoints, stored whole in GGUF).
    offset: f32,
}

impl<'a> Parts<'a> {
    fn new(ck: &'a Checkpoint, config: &'a Value) -> Result<Self> {
        let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        c.validate()?;
        let act = config["hidden_act"].as_str().unwrap_or("silu");
        if act != "silu" {
            return Err(Error::msg(format!("config: hidden_act {act:?} is not supported")));
        }
        if config["attention_bias"].as_bool() == Some(true) {
            return Err(Error::msg("config: attention_bias = true is not supported"));
        }
        let gguf = ck.format == Format::Gguf;
        // llama.cpp reorders value heads for its broadcasts, and stores the norms' `1 + w`.
        let gdn = GdnDims { tiled_v_heads: gguf, ..GdnDims::parse(config)? };
        Ok(Parts { ck, config, c, gdn, offset: if gguf { 0.0 } else { 1.0 } })
    }

    fn norm(&self, name: &str, dim: usize) -> Result<RmsNorm> {
        RmsNorm::load(self.ck, name, dim, self.c.rms_norm_eps, self.offset)
    }

    /// Layer `p` of `kind` (`linear_attention` or `full_attention`) with feed-forward `mlp`.
    fn layer(&self, p: &str, kind: &str, mlp: FeedForward) -> Result<DecoderLayer> {
        let (ck, c) = (self.ck, &self.c);
        let (hidden, hd) = (c.hidden_size, c.head_dim());
        let mixer = match kind {
            "linear_attention" => Mixer::GatedDeltaNet(GatedDeltaNet::load(
                ck,
                &format!("{p}.linear_attn"),
                hidden,
                self.gdn,
                c.rms_norm_eps,
            )?),
            _ => {
                let a = format!("{p}.self_attn");
                let params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
                let qk = [Some(self.norm(&format!("{a}.q_norm"), hd)?), Some(self.norm(&format!("{a}.k_norm"), hd)?)];
                Mixer::Attention(load_attention_gated(ck, &a, hidden, params, (false, false), qk, true)?)
            }
        };
        Ok(DecoderLayer {
            input_norm: Norm::Rms(self.norm(&format!("{p}.input_layernorm"), hidden)?),
            self_attn: mixer,
            post_attn_norm: None,
            pre_mlp_norm: Norm::Rms(self.norm(&format!("{p}.post_attention_layernorm"), hidden)?),
            mlp,
            post_mlp_norm: None,
            rope: 0,
        })
    }

    /// The decoder around `layers` with final norm `norm`, the model's embedding and head.
    fn decoder(&self, layers: Vec<DecoderLayer>, norm: &str) -> Result<DecoderModel> {
        let c = &self.c;
        let rope_dim = rotary_dim(self.config, c.head_dim())?;
        let embed = self.ck.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size)?;
        let norm = Norm::Rms(self.norm(norm, c.hidden_size)?);
        plain_decoder(self.ck, self.config, c, (embed, layers), norm, vec![ops::rope_inv_freq(c.rope_theta, rope_dim)])
    }
}

/// `layer_types`, or every `full_attention_interval`-th layer full (transformers' default 4).
fn layer_types(config: &Value, n: usize) -> Result<Vec<&str>> {
    let types: Vec<&str> = match config["layer_types"].as_array() {
        Some(list) => list.iter().map(|t| t.as_str().unwrap_or("?")).collect(),
        None => {
            let every = config["full_attention_interval"].as_u64().unwrap_or(4).max(1) as usize;
            (0..n).map(|i| if (i + 1) % every == 0 { "full_attention" } else { "linear_attention" }).collect()
        }
    };
    if types.len() != n {
        return Err(Error::msg(format!("config: layer_types has {} entries for {n} layers", types.len())));
    }
    if let Some(bad) = types.iter().find(|t| !matches!(**t, "linear_attention" | "full_attention")) {
        return Err(Error::msg(format!(
            "config: layer type {bad:?} is not one of \"linear_attention\", \"full_attention\""
        )));
    }
    Ok(types)
}

/// Rotary dims per head: `partial_rotary_factor` (in `rope_parameters`, default 0.25) of it.
fn rotary_dim(config: &Value, head_dim: usize) -> Result<usize> {
    let factor = config["rope_parameters"]["partial_rotary_factor"]
        .as_f64()
        .or(config["partial_rotary_factor"].as_f64())
        .unwrap_or(0.25);
    let dim = (head_dim as f64 * factor) as usize;
    if dim == 0 || !dim.is_multiple_of(2) || dim > head_dim {
        return Err(Error::msg(format!(
            "config: partial_rotary_factor {factor} gives {dim} rotary dims of {head_dim}"
        )));
    }
    Ok(dim)
}
