//! `Gemma3ForCausalLM` (text-only Gemma 3), after transformers' `modeling_gemma3.py`.
//!
//! Differences from Llama: embeddings scaled by `sqrt(hidden_size)`; four RMSNorms per layer
//! with `(1 + w)` weights; q/k RMSNorm; GELU-tanh MLP; attention scale from
//! `query_pre_attn_scalar`; sliding-window layers (with their own RoPE base) interleaved with
//! global ones.

use crate::batch::ForwardBatch;
use crate::checkpoint::{Checkpoint, Format};
use crate::config::CommonConfig;
use crate::error::{Error, Result};
use crate::layers::{Activation, Attention, Embedding, GatedMlp, Linear, RmsNorm, Workspace, gather_rows};
use crate::model::{Model, ModelInfo};
use serde::Deserialize;
use serde_json::Value;
use vllm_rs_kernels::Weight;
use vllm_rs_kernels::attention::{AttentionParams, KvCache};
use vllm_rs_kernels::matmul::matmul;
use vllm_rs_kernels::ops;

#[derive(Deserialize)]
struct Gemma3Extra {
    #[serde(default = "gelu_tanh")]
    hidden_activation: String,
    query_pre_attn_scalar: f32,
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "pattern", alias = "_sliding_window_pattern")]
    sliding_window_pattern: usize,
    #[serde(default = "local_base")]
    rope_local_base_freq: f32,
    #[serde(default)]
    final_logit_softcapping: Option<f32>,
    #[serde(default)]
    attn_logit_softcapping: Option<f32>,
    #[serde(default)]
    attention_bias: bool,
}

fn gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn pattern() -> usize {
    6
}
fn local_base() -> f32 {
    10000.0
}

struct Layer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
    mlp: GatedMlp,
    sliding: bool,
}

pub struct Gemma3Model {
    info: ModelInfo,
    embed_tokens: Embedding,
    embed_scale: f32,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Weight,
    inv_freq_global: Vec<f32>,
    inv_freq_local: Vec<f32>,
    final_logit_softcapping: Option<f32>,
    workspace: std::sync::Mutex<Workspace>,
}

impl Gemma3Model {
    pub fn load(ck: &Checkpoint, config: &Value) -> Result<Self> {
        let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        c.validate()?;
        let x: Gemma3Extra = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        let act = Activation::parse(&x.hidden_activation).filter(|a| *a == Activation::GeluTanh).ok_or_else(|| {
            Error::msg(format!("config: hidden_activation {:?} is not supported", x.hidden_activation))
        })?;
        let (hidden, hd, heads, kv_heads) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let eps = c.rms_norm_eps;
        // GGUF stores Gemma norms as `1 + w` already.
        let offset = if ck.format == Format::Gguf { 0.0 } else { 1.0 };
        let sliding = |i: usize| match &x.layer_types {
            Some(t) => t.get(i).is_some_and(|t| t == "sliding_attention"),
            None => !(i + 1).is_multiple_of(x.sliding_window_pattern),
        };
        let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let norm = |name: &str, dim: usize| RmsNorm::load(ck, name, dim, eps, offset);
            let is_sliding = sliding(i);
            let window = if is_sliding { x.sliding_window } else { None };
            let self_attn = Attention {
                q_proj: Linear::load(ck, &format!("{a}.q_proj"), heads * hd, hidden, x.attention_bias)?,
                k_proj: Linear::load(ck, &format!("{a}.k_proj"), kv_heads * hd, hidden, x.attention_bias)?,
                v_proj: Linear::load(ck, &format!("{a}.v_proj"), kv_heads * hd, hidden, x.attention_bias)?,
                o_proj: Linear::load(ck, &format!("{a}.o_proj"), hidden, heads * hd, x.attention_bias)?,
                q_norm: Some(norm(&format!("{a}.q_norm"), hd)?),
                k_norm: Some(norm(&format!("{a}.k_norm"), hd)?),
                params: AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kv_heads,
                    head_dim: hd,
                    scale: 1.0 / x.query_pre_attn_scalar.sqrt(),
                    sliding_window: window,
                    softcap: x.attn_logit_softcapping,
                },
                rope_interleaved: false,
            };
            layers.push(Layer {
                input_layernorm: norm(&format!("{p}.input_layernorm"), hidden)?,
                self_attn,
                post_attention_layernorm: norm(&format!("{p}.post_attention_layernorm"), hidden)?,
                pre_feedforward_layernorm: norm(&format!("{p}.pre_feedforward_layernorm"), hidden)?,
                post_feedforward_layernorm: norm(&format!("{p}.post_feedforward_layernorm"), hidden)?,
                mlp: GatedMlp::load(ck, &format!("{p}.mlp"), hidden, c.intermediate_size, act)?,
                sliding: is_sliding,
            });
        }
        let lm_head = if ck.contains("lm_head.weight") {
            ck.matrix("lm_head.weight", c.vocab_size, hidden)?
        } else {
            embed.clone()
        }
        .for_matmul();
        let info = ModelInfo {
            architecture: crate::config::architecture(config)?,
            num_layers: c.num_hidden_layers,
            num_kv_heads: kv_heads,
            head_dim: hd,
            hidden_size: hidden,
            vocab_size: c.vocab_size,
            max_position_embeddings: c.max_position_embeddings,
            kv_cache_specs: layers.iter().map(|l| l.self_attn.kv_cache_spec()).collect(),
        };
        Ok(Gemma3Model {
            info,
            embed_tokens: Embedding { weight: embed },
            // transformers casts sqrt(hidden_size) to the compute dtype (f32 here).
            embed_scale: (hidden as f64).sqrt() as f32,
            layers,
            norm: RmsNorm::load(ck, "model.norm", hidden, eps, offset)?,
            lm_head,
            inv_freq_global: ops::rope_inv_freq(c.rope_theta, hd),
            inv_freq_local: ops::rope_inv_freq(x.rope_local_base_freq, hd),
            final_logit_softcapping: x.final_logit_softcapping,
            workspace: Default::default(),
        })
    }
}

impl Model for Gemma3Model {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn forward_into(&self, batch: &ForwardBatch, kv: &mut KvCache, logits: &mut Vec<f32>) {
        let n = batch.num_tokens();
        let d = self.info.hidden_size;
        let mut guard = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        let ws = &mut *guard;
        ws.rope.fill(&self.inv_freq_global, batch.positions);
        ws.rope_local.fill(&self.inv_freq_local, batch.positions);
        self.embed_tokens.forward(batch.input_ids, self.embed_scale, &mut ws.h);
        for (i, layer) in self.layers.iter().enumerate() {
            let rope = if layer.sliding { &ws.rope_local } else { &ws.rope };
            ws.x.clone_from(&ws.h);
            layer.input_layernorm.forward(&mut ws.x);
            layer.self_attn.forward(&ws.x, batch, rope, kv, i, &mut ws.attention, &mut ws.y);
            layer.post_attention_layernorm.forward(&mut ws.y);
            ops::add_assign(&mut ws.h, &ws.y);
            ws.x.copy_from_slice(&ws.h);
            layer.pre_feedforward_layernorm.forward(&mut ws.x);
            layer.mlp.forward(&ws.x, n, &mut ws.gate, &mut ws.up, &mut ws.y);
            layer.post_feedforward_layernorm.forward(&mut ws.y);
            ops::add_assign(&mut ws.h, &ws.y);
        }
        gather_rows(&ws.h, d, batch.logits_indices, &mut ws.last);
        self.norm.forward(&mut ws.last);
        // Every value is overwritten: only new capacity is zeroed.
        logits.resize(batch.logits_indices.len() * self.info.vocab_size, 0.0);
        matmul(&ws.last, batch.logits_indices.len(), &self.lm_head, logits);
        if let Some(cap) = self.final_logit_softcapping {
            logits.iter_mut().for_each(|v| *v = (*v / cap).tanh() * cap);
        }
    }
}
