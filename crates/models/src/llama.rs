//! `LlamaForCausalLM` and its close relatives (Qwen2 adds QKV bias, Qwen3 adds q/k RMSNorm).
//!
//! Mirrors transformers' `modeling_llama.py`: pre-norm decoder layers with rotary attention and a
//! SwiGLU MLP, a final RMSNorm and an (optionally tied) `lm_head`.

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

/// What distinguishes the members of the family.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant {
    /// Q/K/V projections have biases (Qwen2 always; Llama when `attention_bias`).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3).
    pub qk_norm: bool,
    /// llama.cpp stores this architecture's Q/K rows permuted so RoPE pairs are adjacent
    /// (true for llama only); we then rotate interleaved pairs instead of copying the weights.
    pub gguf_qk_permuted: bool,
}

#[derive(Deserialize)]
struct LlamaExtra {
    #[serde(default = "silu")]
    hidden_act: String,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
}

fn silu() -> String {
    "silu".into()
}

struct Layer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: GatedMlp,
}

pub struct LlamaModel {
    info: ModelInfo,
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Weight,
    inv_freq: Vec<f32>,
    workspace: std::sync::Mutex<Workspace>,
}

impl LlamaModel {
    pub fn load(ck: &Checkpoint, config: &Value, mut variant: Variant) -> Result<Self> {
        let c: CommonConfig = serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        c.validate()?;
        let extra: LlamaExtra =
            serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        if extra.mlp_bias {
            return Err(Error::msg("config: mlp_bias = true is not supported"));
        }
        let act = Activation::parse(&extra.hidden_act)
            .filter(|a| *a == Activation::Silu)
            .ok_or_else(|| Error::msg(format!("config: hidden_act {:?} is not supported", extra.hidden_act)))?;
        variant.qkv_bias |= extra.attention_bias;
        let (hidden, hd, heads, kv_heads) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let eps = c.rms_norm_eps;
        let embed = ck.matrix("model.embed_tokens.weight", c.vocab_size, hidden)?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let qk_norm = |name: &str| -> Result<Option<RmsNorm>> {
                variant.qk_norm.then(|| RmsNorm::load(ck, &format!("{a}.{name}"), hd, eps, 0.0)).transpose()
            };
            let self_attn = Attention {
                q_proj: Linear::load(ck, &format!("{a}.q_proj"), heads * hd, hidden, variant.qkv_bias)?,
                k_proj: Linear::load(ck, &format!("{a}.k_proj"), kv_heads * hd, hidden, variant.qkv_bias)?,
                v_proj: Linear::load(ck, &format!("{a}.v_proj"), kv_heads * hd, hidden, variant.qkv_bias)?,
                o_proj: Linear::load(ck, &format!("{a}.o_proj"), hidden, heads * hd, extra.attention_bias)?,
                q_norm: qk_norm("q_norm")?,
                k_norm: qk_norm("k_norm")?,
                params: AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kv_heads,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: None,
                    softcap: None,
                },
                rope_interleaved: ck.format == Format::Gguf && variant.gguf_qk_permuted,
            };
            layers.push(Layer {
                input_layernorm: RmsNorm::load(ck, &format!("{p}.input_layernorm"), hidden, eps, 0.0)?,
                self_attn,
                post_attention_layernorm: RmsNorm::load(
                    ck,
                    &format!("{p}.post_attention_layernorm"),
                    hidden,
                    eps,
                    0.0,
                )?,
                mlp: GatedMlp::load(ck, &format!("{p}.mlp"), hidden, c.intermediate_size, act)?,
            });
        }
        let lm_head = if c.tie_word_embeddings && !ck.contains("lm_head.weight") {
            embed.clone()
        } else {
            ck.matrix("lm_head.weight", c.vocab_size, hidden)?
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
        Ok(LlamaModel {
            info,
            embed_tokens: Embedding { weight: embed },
            layers,
            norm: RmsNorm::load(ck, "model.norm", hidden, eps, 0.0)?,
            lm_head,
            inv_freq: ops::rope_inv_freq(c.rope_theta, hd),
            workspace: Default::default(),
        })
    }
}

impl Model for LlamaModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn forward_into(&self, batch: &ForwardBatch, kv: &mut KvCache, logits: &mut Vec<f32>) {
        let n = batch.num_tokens();
        let d = self.info.hidden_size;
        let mut guard = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        let ws = &mut *guard;
        ws.rope.fill(&self.inv_freq, batch.positions);
        self.embed_tokens.forward(batch.input_ids, 1.0, &mut ws.h);
        ws.x.clone_from(&ws.h);
        self.layers[0].input_layernorm.forward(&mut ws.x);
        for (i, layer) in self.layers.iter().enumerate() {
            layer.self_attn.forward(&ws.x, batch, &ws.rope, kv, i, &mut ws.attention, &mut ws.y);
            layer.post_attention_layernorm.add_forward(&mut ws.h, &ws.y, &mut ws.x);
            layer.mlp.forward(&ws.x, n, &mut ws.gate, &mut ws.up, &mut ws.y);
            // The residual add, and the next layer's input norm with it.
            match self.layers.get(i + 1) {
                Some(next) => next.input_layernorm.add_forward(&mut ws.h, &ws.y, &mut ws.x),
                None => ops::add_assign(&mut ws.h, &ws.y),
            }
        }
        gather_rows(&ws.h, d, batch.logits_indices, &mut ws.last);
        self.norm.forward(&mut ws.last);
        // Every value is overwritten: only new capacity is zeroed.
        logits.resize(batch.logits_indices.len() * self.info.vocab_size, 0.0);
        matmul(&ws.last, batch.logits_indices.len(), &self.lm_head, logits);
    }
}
