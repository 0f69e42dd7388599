//! The encoder-only transformer of BERT, RoBERTa/XLM-R and MPNet: embeddings (+ positions,
//! token type 0) → LayerNorm → post-norm layers (bidirectional attention, GELU feed-forward)
//! → hidden states of every token. No KV cache: each call runs whole sequences.

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::{Embedding, Linear};
use crate::mlp::Activation;
use crate::norm::LayerNorm;
use crate::pooling_model::PoolingInfo;
use serde::Deserialize;
use serde_json::Value;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::Weight;
use vllm_rs_kernels::encoder_attention::{EncoderAttentionParams, RelativeBias};

/// How a token's position row is found.
#[derive(Clone, Copy, Debug)]
pub enum Positions {
    /// Row `i` for the `i`-th token (BERT).
    Absolute,
    /// fairseq's rule (RoBERTa, MPNet): a non-padding token reads row `padding_idx + c`, where
    /// `c` counts the non-padding tokens up to and including it; a padding token reads row
    /// `padding_idx`.
    AfterPadding { padding_idx: u32 },
}

impl Positions {
    /// Appends the rows of the position table the tokens of one sequence read.
    fn rows(self, ids: &[u32], out: &mut Vec<u32>) {
        match self {
            Positions::Absolute => out.extend(0..ids.len() as u32),
            Positions::AfterPadding { padding_idx } => {
                let mut count = 0;
                out.extend(ids.iter().map(|&id| {
                    if id == padding_idx {
                        return padding_idx;
                    }
                    count += 1;
                    padding_idx + count
                }));
            }
        }
    }

    /// How many rows of the table come before the first usable one.
    pub fn offset(self) -> usize {
        match self {
            Positions::Absolute => 0,
            Positions::AfterPadding { padding_idx } => padding_idx as usize + 1,
        }
    }
}

/// MPNet's learned bias per head for bucketed relative distances `j - i`.
pub struct RelativePositionBias {
    /// `num_buckets × num_heads`.
    pub table: Weight,
    pub num_buckets: usize,
    pub max_distance: usize,
}

impl RelativePositionBias {
    /// T5/MPNet bidirectional bucket of distance `d = j - i`: half the buckets for each sign;
    /// exact below a quarter of the buckets, then logarithmic up to `max_distance`.
    pub fn bucket(&self, d: isize) -> usize {
        let half = self.num_buckets / 2;
        let n = -d;
        let base = if n < 0 { half } else { 0 };
        let n = n.unsigned_abs();
        let max_exact = half / 2;
        if n < max_exact {
            return base + n;
        }
        // The bucket boundaries fall on exact integers (e.g. n = 16, 32, 64 with the defaults):
        // the nudge keeps f64 rounding from landing just below them, as torch's f32 does not.
        let scaled = (n as f64 / max_exact as f64).ln() / (self.max_distance as f64 / max_exact as f64).ln()
            * (half - max_exact) as f64;
        base + (max_exact + (scaled + 1e-9) as usize).min(half - 1)
    }

    /// The per-head bias for every `j - i` of sequences up to `span` long, in
    /// [`RelativeBias`]'s layout.
    fn fill(&self, num_heads: usize, span: usize, out: &mut Vec<f32>) {
        let width = 2 * span - 1;
        out.resize(num_heads * width, 0.0);
        let mut row = vec![0f32; num_heads];
        for (x, d) in (-(span as isize - 1)..span as isize).enumerate() {
            self.table.dequantize_row(self.bucket(d), &mut row);
            for (h, &b) in row.iter().enumerate() {
                out[h * width + x] = b;
            }
        }
    }
}

pub struct EncoderLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// After the attention's residual add.
    pub attn_norm: LayerNorm,
    pub up: Linear,
    pub down: Linear,
    /// After the feed-forward's residual add.
    pub out_norm: LayerNorm,
}

pub struct EncoderModel {
    pub info: PoolingInfo,
    pub word_embeddings: Embedding,
    pub position_embeddings: Weight,
    pub positions: Positions,
    /// The token type (segment) table: row 0 for a single text, row 1 for the second text of
    /// a pair (BERT); models without one (MPNet) add nothing.
    pub token_type: Option<Weight>,
    pub embed_norm: LayerNorm,
    pub layers: Vec<EncoderLayer>,
    pub attention: EncoderAttentionParams,
    pub act: Activation,
    pub relative_bias: Option<RelativePositionBias>,
}

/// Scratch of one encoder forward, kept by the caller between calls, and the backend it runs on.
pub struct EncoderWorkspace {
    pub backend: &'static dyn Backend,
    pub h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    y: Vec<f32>,
    inner: Vec<f32>,
    rows: Vec<u32>,
    row: Vec<f32>,
    bias: Vec<f32>,
}

impl EncoderWorkspace {
    /// An empty workspace whose passes run on `backend`.
    pub fn on(backend: &'static dyn Backend) -> Self {
        let v = Vec::new;
        EncoderWorkspace {
            backend,
            h: v(),
            q: v(),
            k: v(),
            v: v(),
            attn: v(),
            y: v(),
            inner: v(),
            rows: vec![],
            row: v(),
            bias: v(),
        }
    }
}

/// A workspace on the process's backend ([`vllm_rs_kernels::backend::default`]).
impl Default for EncoderWorkspace {
    fn default() -> Self {
        EncoderWorkspace::on(vllm_rs_kernels::backend::default())
    }
}

impl EncoderModel {
    /// The parts every family loads alike, from tensors under `prefix` (`embeddings.*`,
    /// `encoder.layer.*`); no token types and no relative bias (a family adds its own).
    pub fn load(
        ck: &Checkpoint,
        prefix: &str,
        c: &EncoderConfig,
        architecture: &str,
        positions: Positions,
        names: &LayerNames,
    ) -> Result<Self> {
        let d = c.hidden_size;
        let e = |n: &str| format!("{prefix}embeddings.{n}");
        Ok(EncoderModel {
            info: PoolingInfo {
                architecture: architecture.to_string(),
                hidden_size: d,
                vocab_size: c.vocab_size,
                max_position_embeddings: c.max_position_embeddings.saturating_sub(positions.offset()),
            },
            word_embeddings: Embedding { weight: ck.matrix(&e("word_embeddings.weight"), c.vocab_size, d)? },
            position_embeddings: ck.matrix(&e("position_embeddings.weight"), c.max_position_embeddings, d)?,
            positions,
            token_type: None,
            embed_norm: LayerNorm::load(ck, &e("LayerNorm"), d, c.layer_norm_eps)?,
            layers: load_layers(ck, prefix, c, names)?,
            attention: c.attention(),
            act: c.activation()?,
            relative_bias: None,
        })
    }

    /// Runs sequences (`ids` holds them one after another, lengths `seq_lens`) through the
    /// encoder; returns the last hidden state of every token (`tokens × hidden_size`).
    /// `type_ids`: the token type of every token (text pairs); `None` is type 0 throughout.
    pub fn forward<'w>(
        &self,
        ids: &[u32],
        type_ids: Option<&[u32]>,
        seq_lens: &[usize],
        ws: &'w mut EncoderWorkspace,
    ) -> &'w [f32] {
        assert_eq!(ids.len(), seq_lens.iter().sum::<usize>(), "one id per token");
        assert!(type_ids.is_none_or(|t| t.len() == ids.len()), "one type id per token");
        let types = self.token_type.as_ref().map_or(1, |t| t.rows);
        assert!(type_ids.is_none_or(|t| t.iter().all(|&ty| (ty as usize) < types)), "type ids below {types}");
        let n = ids.len();
        let be = ws.backend;
        self.embed(be, ids, type_ids, seq_lens, ws);
        let bias = self.relative_bias.as_ref().map(|rb| {
            let span = seq_lens.iter().copied().max().unwrap_or(1).max(1);
            rb.fill(self.attention.num_heads, span, &mut ws.bias);
            span
        });
        for layer in &self.layers {
            Linear::forward_many(be, [&layer.q, &layer.k, &layer.v], &ws.h, n, [&mut ws.q, &mut ws.k, &mut ws.v]);
            ws.attn.resize(ws.q.len(), 0.0);
            let rb = bias.map(|span| RelativeBias { values: &ws.bias, span });
            be.encoder_attention(&ws.q, &ws.k, &ws.v, seq_lens, &self.attention, rb, &mut ws.attn);
            layer.o.forward(be, &ws.attn, n, &mut ws.y);
            add_norm(be, &layer.attn_norm, &mut ws.h, &ws.y);
            layer.up.forward(be, &ws.h, n, &mut ws.inner);
            be.activation(self.act, &mut ws.inner);
            layer.down.forward(be, &ws.inner, n, &mut ws.y);
            add_norm(be, &layer.out_norm, &mut ws.h, &ws.y);
        }
        &ws.h
    }

    /// `h = LayerNorm(word + position (+ token type))` for every token.
    fn embed(
        &self,
        be: &dyn Backend,
        ids: &[u32],
        type_ids: Option<&[u32]>,
        seq_lens: &[usize],
        ws: &mut EncoderWorkspace,
    ) {
        self.word_embeddings.forward(be, ids, 1.0, &mut ws.h);
        ws.rows.clear();
        let mut start = 0;
        for &len in seq_lens {
            self.positions.rows(&ids[start..start + len], &mut ws.rows);
            start += len;
        }
        be.embedding(&self.position_embeddings, &ws.rows, 1.0, &mut ws.row);
        be.add_assign(&mut ws.h, &ws.row);
        if let Some(table) = &self.token_type {
            ws.rows.clear();
            ws.rows.extend((0..ids.len()).map(|t| type_ids.map_or(0, |ty| ty[t])));
            be.embedding(table, &ws.rows, 1.0, &mut ws.row);
            be.add_assign(&mut ws.h, &ws.row);
        }
        self.embed_norm.forward(be, &mut ws.h);
    }
}

/// Config fields every encoder family shares (`config.json` names).
#[derive(Clone, Debug, Deserialize)]
pub struct EncoderConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "eps")]
    pub layer_norm_eps: f32,
}

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f32 {
    1e-12
}

impl EncoderConfig {
    pub fn parse(config: &Value) -> Result<Self> {
        let c: EncoderConfig =
            serde_json::from_value(config.clone()).map_err(|e| Error::msg(format!("config: {e}")))?;
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(Error::msg(format!(
                "config: hidden_size ({}) must be a multiple of num_attention_heads ({})",
                c.hidden_size, c.num_attention_heads
            )));
        }
        Ok(c)
    }

    pub fn activation(&self) -> Result<Activation> {
        Activation::parse(&self.hidden_act)
            .ok_or_else(|| Error::msg(format!("config: hidden_act {:?} is not supported", self.hidden_act)))
    }

    pub fn attention(&self) -> EncoderAttentionParams {
        let head_dim = self.hidden_size / self.num_attention_heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        EncoderAttentionParams { num_heads: self.num_attention_heads, head_dim, scale, window: None }
    }
}

/// Where one family keeps a layer's tensors, relative to `{prefix}encoder.layer.{i}.`.
pub struct LayerNames {
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub attn_norm: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    pub out_norm: &'static str,
}

/// Loads the layers of an encoder whose tensors sit under `{prefix}encoder.layer.{i}.`.
pub fn load_layers(ck: &Checkpoint, prefix: &str, c: &EncoderConfig, names: &LayerNames) -> Result<Vec<EncoderLayer>> {
    let (d, inter) = (c.hidden_size, c.intermediate_size);
    (0..c.num_hidden_layers)
        .map(|i| {
            let p = |n: &str| format!("{prefix}encoder.layer.{i}.{n}");
            Ok(EncoderLayer {
                q: Linear::load(ck, &p(names.q), d, d, true)?,
                k: Linear::load(ck, &p(names.k), d, d, true)?,
                v: Linear::load(ck, &p(names.v), d, d, true)?,
                o: Linear::load(ck, &p(names.o), d, d, true)?,
                attn_norm: LayerNorm::load(ck, &p(names.attn_norm), d, c.layer_norm_eps)?,
                up: Linear::load(ck, &p(names.up), inter, d, true)?,
                down: Linear::load(ck, &p(names.down), d, inter, true)?,
                out_norm: LayerNorm::load(ck, &p(names.out_norm), d, c.layer_norm_eps)?,
            })
        })
        .collect()
}

/// The prefix a checkpoint puts before `embeddings.` (none for a bare `BertModel`; `bert.`,
/// `roberta.`, `mpnet.` when saved from a model with a head).
pub fn tensor_prefix(ck: &Checkpoint, candidates: &[&'static str]) -> &'static str {
    candidates.iter().copied().find(|p| ck.contains(&format!("{p}embeddings.word_embeddings.weight"))).unwrap_or("")
}

/// `h = norm(h + y)` (post-norm residual).
fn add_norm(be: &dyn Backend, norm: &LayerNorm, h: &mut [f32], y: &[f32]) {
    be.add_assign(h, y);
    norm.forward(be, h);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_buckets_match_torch() {
        // From transformers' MPNetEncoder.relative_position_bucket (32 buckets, distance 128).
        let torch = [
            (-300, 15),
            (-129, 15),
            (-128, 15),
            (-127, 15),
            (-65, 14),
            (-64, 14),
            (-63, 13),
            (-33, 12),
            (-32, 12),
            (-31, 11),
            (-17, 10),
            (-16, 10),
            (-15, 9),
            (-8, 8),
            (-7, 7),
            (0, 0),
            (7, 23),
            (8, 24),
            (15, 25),
            (16, 26),
            (17, 26),
            (31, 27),
            (32, 28),
            (33, 28),
            (63, 29),
            (64, 30),
            (65, 30),
            (127, 31),
            (128, 31),
            (129, 31),
            (300, 31),
        ];
        let table = Weight::from_f32(32, 1, &[0.0; 32]);
        let rb = RelativePositionBias { table, num_buckets: 32, max_distance: 128 };
        for (d, want) in torch {
            assert_eq!(rb.bucket(d), want, "distance {d}");
        }
    }

    #[test]
    fn positions_after_padding_skip_pad_tokens() {
        let mut rows = Vec::new();
        Positions::AfterPadding { padding_idx: 1 }.rows(&[0, 5, 1, 7], &mut rows);
        assert_eq!(rows, [2, 3, 1, 4]);
    }
}
