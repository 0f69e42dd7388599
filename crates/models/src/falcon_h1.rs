//! `FalconH1ForCausalLM` (TII's Falcon-H1), after transformers' `modeling_falcon_h1.py`: every
//! layer runs a Mamba-2 mixer (`mamba2.rs`) and attention side by side on the same normed input
//! and adds both to the residual (`h += ssm_out · mamba(x) + attn_out · attn(attn_in · x)`),
//! then a SwiGLU MLP. The µP multipliers of the config scale the embeddings, the logits, the
//! keys (folded into the attention scale: `q · (m k) = m (q · k)`), the MLP's gate and output,
//! the mixer's input and each part of its `in_proj` output. The mixer's gated RMSNorm is
//! optional (`mamba_rms_norm`), before or after the gate (`mamba_norm_before_gate`).
//!
//! Each layer has two cache layers: the Mamba-2 state (recurrent group) and the attention's K/V.
//!
//! GGUF files (llama.cpp's `falcon-h1`) hold the weights with every multiplier already folded in
//! (biases left unscaled), and no multiplier keys: they load with all multipliers 1. llama.cpp
//! applies the mixer's norm after the gate.

use crate::arch::{ArchSpec, TinySpec};
use crate::batch::ForwardBatch;
use crate::checkpoint::{Checkpoint, Format};
use crate::config::{CommonConfig, multiplier};
use crate::decoder::{DecoderLayer, DecoderModel, Mixer, full_attention, load_attention, plain_decoder};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::layers::{Attention, AttentionBuffers, RmsNorm};
use crate::mamba2::{Mamba2, Mamba2Dims, Mamba2Options, time_step_min};
use crate::mla::scale_by;
use crate::mlp::{Activation, FeedForward, GatedMlp};
use crate::norm::Norm;
use crate::recurrent_state::positive;
use serde_json::Value;
use vllm_rs_core::KvCacheSpec;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::KvCache;
use vllm_rs_kernels::ops::{self, RopeTable};

pub const FALCON_H1: ArchSpec = ArchSpec {
    hf_class: "FalconH1ForCausalLM",
    gguf_arch: Some("falcon-h1"),
    load,
    gguf_modules: GGUF_MODULES,
    gguf_config: Some(config_from_gguf),
    tiny: TinySpec {
        name: "falcon_h1",
        config_class: "FalconH1Config",
        seed: 140,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "mamba_d_ssm": 64, "mamba_n_heads": 4,
            "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_chunk_size": 16,
            "mamba_rms_norm": false, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "embedding_multiplier": 1.5, "lm_head_multiplier": 0.7, "mlp_multipliers": [1.3, 0.6],
            "key_multiplier": 0.8, "attention_in_multiplier": 1.2, "attention_out_multiplier": 0.9,
            "ssm_multipliers": [0.5, 1.4, 0.8, 1.2, 0.9], "ssm_in_multiplier": 1.1, "ssm_out_multiplier": 0.75,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
};

/// The same class with the mixer's RMSNorm before its gate, and every bias on.
pub const FALCON_H1_NORMED: ArchSpec = ArchSpec {
    tiny: TinySpec {
        name: "falcon_h1_normed",
        config_class: "FalconH1Config",
        seed: 141,
        config: r#"{"num_hidden_layers": 3, "intermediate_size": 96, "mamba_d_ssm": 64, "mamba_n_heads": 4,
            "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_chunk_size": 16,
            "mamba_rms_norm": true, "mamba_norm_before_gate": true, "mamba_proj_bias": true,
            "projectors_bias": true, "attention_bias": true, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
            "embedding_multiplier": 0.8, "lm_head_multiplier": 1.4, "mlp_multipliers": [0.7, 1.2],
            "key_multiplier": 1.3, "attention_in_multiplier": 0.9, "attention_out_multiplier": 1.1,
            "ssm_multipliers": [1.2, 0.7, 1.1, 0.9, 1.3], "ssm_in_multiplier": 0.85, "ssm_out_multiplier": 1.25,
            "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0}}"#,
        norm_center: 1.0,
        scaled_embed: false,
    },
    gguf_arch: None,
    ..FALCON_H1
};

/// llama.cpp's names of a layer's tensors, under `model.layers.N.`.
const GGUF_MODULES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    // Written without the `.weight` suffix.
    ("ffn_norm", "pre_ff_layernorm.weight"),
    ("ssm_in", "mamba.in_proj"),
    ("ssm_conv1d", "mamba.conv1d"),
    ("ssm_a", "mamba.A"),
    ("ssm_d", "mamba.D"),
    ("ssm_dt.bias", "mamba.dt_bias"),
    ("ssm_norm", "mamba.norm"),
    ("ssm_out", "mamba.out_proj"),
    ("ffn_gate", "feed_forward.gate_proj"),
    ("ffn_up", "feed_forward.up_proj"),
    ("ffn_down", "feed_forward.down_proj"),
];

/// llama.cpp's metadata: the mixer's sizes; which optional tensors (norm, biases) exist.
fn config_from_gguf(g: &GgufFile, c: &mut Value) -> Result<()> {
    let key = |k: &str| format!("falcon-h1.{k}");
    let req = |k: &str| g.require_u64(&key(k));
    let has = |t: &str| g.tensors.contains_key(&format!("blk.0.{t}"));
    let (heads, inner) = (req("ssm.time_step_rank")?, req("ssm.inner_size")?);
    c["mamba_n_heads"] = heads.into();
    c["mamba_d_ssm"] = inner.into();
    c["mamba_d_head"] = (inner / heads.max(1)).into();
    c["mamba_d_state"] = req("ssm.state_size")?.into();
    c["mamba_n_groups"] = req("ssm.group_count")?.into();
    c["mamba_d_conv"] = req("ssm.conv_kernel")?.into();
    c["mamba_rms_norm"] = has("ssm_norm.weight").into();
    c["mamba_norm_before_gate"] = false.into();
    c["mamba_conv_bias"] = has("ssm_conv1d.bias").into();
    c["mamba_proj_bias"] = has("ssm_in.bias").into();
    c["projectors_bias"] = has("ssm_out.bias").into();
    c["attention_bias"] = has("attn_q.bias").into();
    c["mlp_bias"] = has("ffn_gate.bias").into();
    Ok(())
}

/// A Falcon-H1 layer's two mixers and their multipliers.
pub struct ParallelMixer {
    pub mamba: Mamba2,
    pub attention: Attention,
    pub attention_in: f32,
    pub attention_out: f32,
    pub ssm_out: f32,
}

/// Scratch of [`ParallelMixer::forward`]: the attention's scaled input and its output.
#[derive(Default)]
pub struct ParallelBuffers {
    input: Vec<f32>,
    out: Vec<f32>,
}

impl ParallelMixer {
    /// The Mamba-2 state, then the attention's K/V.
    pub fn kv_cache_specs(&self) -> Vec<KvCacheSpec> {
        vec![self.mamba.kv_cache_spec(), self.attention.kv_cache_spec()]
    }

    /// `out = ssm_out · mamba(x) + attn_out · attn(attn_in · x)`; the mixer's state is cache
    /// layer `layer`, the attention's K/V cache layer `layer + 1`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        be: &dyn Backend,
        x: &[f32],
        batch: &ForwardBatch,
        rope: &RopeTable,
        kv: &mut KvCache,
        layer: usize,
        ws: &mut AttentionBuffers,
        out: &mut Vec<f32>,
    ) {
        self.mamba.forward(be, x, batch, kv, layer, &mut ws.mamba2, out);
        scale_by(be, out, self.ssm_out);
        let mut p = std::mem::take(&mut ws.parallel);
        p.input.clear();
        p.input.extend_from_slice(x);
        scale_by(be, &mut p.input, self.attention_in);
        self.attention.forward(be, &p.input, batch, rope, kv, layer + 1, ws, &mut p.out);
        scale_by(be, &mut p.out, self.attention_out);
        be.add_assign(out, &p.out);
        ws.parallel = p;
    }
}

/// A list of `N` multipliers (all 1 when absent).
fn multipliers<const N: usize>(config: &Value, key: &str) -> Result<[f32; N]> {
    let Some(list) = config.get(key).filter(|v| !v.is_null()) else {
        return Ok([1.0; N]);
    };
    let bad = || Error::msg(format!("config: {key} must be a list of {N} numbers"));
    let list = list.as_array().filter(|l| l.len() == N).ok_or_else(bad)?;
    let mut out = [1.0; N];
    for (o, v) in out.iter_mut().zip(list) {
        *o = v.as_f64().ok_or_else(bad)? as f32;
    }
    Ok(out)
}

fn load(ck: &Checkpoint, config: &Value) -> Result<DecoderModel> {
    let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
    c.validate()?;
    if let Some(s) = c.rope_scaling.as_ref().filter(|s| !s.is_null() && s["rope_type"] != "default") {
        return Err(Error::msg(format!("config: rope scaling {s} is not supported for Falcon-H1")));
    }
    let flag = |k: &str, default: bool| config[k].as_bool().unwrap_or(default);
    if flag("mlp_bias", false) {
        return Err(Error::msg("config: mlp_bias = true is not supported for Falcon-H1"));
    }
    // transformers runs `hidden_act` in the MLP and in the mixer's convolution, which is SiLU here.
    let act = match config["hidden_act"].as_str().unwrap_or("silu") {
        "silu" | "swish" => Activation::Silu,
        other => {
            return Err(Error::msg(format!("config: hidden_act {other:?} is not supported for Falcon-H1 (only silu)")));
        }
    };
    let (hidden, hd, eps) = (c.hidden_size, c.head_dim(), c.rms_norm_eps);
    let dims = mamba_dims(config, hidden)?;
    let mut ck = ck.clone();
    if ck.format == Format::Gguf {
        ck.rename("model.norm.weight", "model.final_layernorm.weight")?;
    }
    let ck = &ck;
    let mamba = Mamba2Options {
        in_bias: flag("mamba_proj_bias", false),
        out_bias: flag("projectors_bias", false),
        conv_bias: flag("mamba_conv_bias", true),
        time_step_min: time_step_min(config)?,
        norm: flag("mamba_rms_norm", false).then(|| flag("mamba_norm_before_gate", true)),
        eps,
    };
    let ssm_scales: [f32; 5] = multipliers(config, "ssm_multipliers")?;
    let key_multiplier = multiplier(config, "key_multiplier")?;
    let attention_bias = flag("attention_bias", false);
    let norm = |name: &str| RmsNorm::load(ck, name, hidden, eps, 0.0).map(Norm::Rms);
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let mut m = Mamba2::load(ck, &format!("{p}.mamba"), hidden, dims, &mamba)?;
        m.in_scale = multiplier(config, "ssm_in_multiplier")?;
        m.proj_scales = ssm_scales.iter().any(|&f| f != 1.0).then_some(ssm_scales);
        let mut params = full_attention(c.num_attention_heads, c.num_kv_heads(), hd);
        params.scale *= key_multiplier;
        let bias = (attention_bias, attention_bias);
        let attention = load_attention(ck, &format!("{p}.self_attn"), hidden, params, bias, [None, None], false)?;
        let mixer = ParallelMixer {
            mamba: m,
            attention,
            attention_in: multiplier(config, "attention_in_multiplier")?,
            attention_out: multiplier(config, "attention_out_multiplier")?,
            ssm_out: multiplier(config, "ssm_out_multiplier")?,
        };
        let mut mlp = GatedMlp::load(ck, &format!("{p}.feed_forward"), hidden, c.intermediate_size, act)?;
        mlp.scales = multipliers(config, "mlp_multipliers")?;
        layers.push(DecoderLayer {
            input_norm: norm(&format!("{p}.input_layernorm"))?,
            self_attn: Mixer::Parallel(Box::new(mixer)),
            post_attn_norm: None,
            pre_mlp_norm: norm(&format!("{p}.pre_ff_layernorm"))?,
            mlp: FeedForward::Gated(mlp),
            post_mlp_norm: None,
            rope: 0,
        });
    }
    let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
    let final_norm = norm("model.final_layernorm")?;
    let rope = vec![ops::rope_inv_freq(c.rope_theta, hd)];
    let mut model = plain_decoder(ck, config, &c, (embed, layers), final_norm, rope)?;
    model.embed_scale = multiplier(config, "embedding_multiplier")?;
    model.logit_scale = multiplier(config, "lm_head_multiplier")?;
    Ok(model)
}

/// The mixer's shape, resolved as `FalconH1Config` does: its width is `mamba_d_ssm` (1024 when
/// absent, `mamba_expand · hidden` when null) and must be `mamba_n_heads · mamba_d_head`, where
/// a `mamba_d_head` of "auto" is the width over the heads.
fn mamba_dims(config: &Value, hidden: usize) -> Result<Mamba2Dims> {
    let int = |key: &str, default: u64| match config.get(key) {
        None => Ok(default as usize),
        Some(v) => {
            v.as_u64().map(|v| v as usize).ok_or_else(|| Error::msg(format!("config: {key} must be an integer")))
        }
    };
    let width = match config.get("mamba_d_ssm") {
        Some(Value::Null) => int("mamba_expand", 2)? * hidden,
        _ => int("mamba_d_ssm", 1024)?,
    };
    let mut config = config.clone();
    if config["mamba_d_head"] == "auto" {
        config["mamba_d_head"] = (width / positive(&config, "mamba_n_heads")?).into();
    }
    let dims = Mamba2Dims::parse_keys(
        &config,
        ["mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv"],
    )?;
    if width != dims.num_heads * dims.head_dim {
        return Err(Error::msg(format!(
            "config: the mixer is {width} wide but mamba_n_heads × mamba_d_head is {}",
            dims.num_heads * dims.head_dim
        )));
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configs_it_cannot_run_are_refused_saying_why() {
        let dims = json!({"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 2,
            "mamba_d_conv": 4, "mamba_d_ssm": 96});
        let e = mamba_dims(&dims, 64).unwrap_err().to_string();
        assert!(e.contains("96 wide but mamba_n_heads × mamba_d_head is 64"), "{e}");
        // As FalconH1Config resolves them: 1024 wide when absent, `mamba_expand · hidden` when
        // null; a head dim of "auto" is the width over the heads.
        let mut auto = dims.clone();
        auto["mamba_d_head"] = "auto".into();
        assert_eq!(mamba_dims(&auto, 64).unwrap().head_dim, 24);
        auto.as_object_mut().unwrap().remove("mamba_d_ssm");
        assert_eq!(mamba_dims(&auto, 64).unwrap().head_dim, 256);
        auto["mamba_d_ssm"] = Value::Null;
        assert_eq!(mamba_dims(&auto, 64).unwrap().head_dim, 32);
        auto["mamba_expand"] = 3.into();
        assert_eq!(mamba_dims(&auto, 64).unwrap().head_dim, 48);
        let e = mamba_dims(&json!({"mamba_d_ssm": "wide"}), 64).unwrap_err().to_string();
        assert!(e.contains("mamba_d_ssm must be an integer"), "{e}");
        let finite = json!({"time_step_limit": [0.001, 0.1]});
        let e = time_step_min(&finite).unwrap_err().to_string();
        assert!(e.contains("time_step_limit [0.001,0.1] is not supported"), "{e}");
        let floor = json!({"time_step_limit": [0.001, {"__float__": "Infinity"}]});
        assert_eq!(time_step_min(&floor).unwrap(), 0.001);
        let e = multipliers::<5>(&json!({"ssm_multipliers": [1.0, 2.0]}), "ssm_multipliers").unwrap_err().to_string();
        assert!(e.contains("a list of 5 numbers"), "{e}");
    }
}
