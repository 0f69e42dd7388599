//! The encoder-only transformer of BERT, RoBERTa/XLM-R, MPNet and ModernBERT: embeddings
//! (+ learned positions, token type 0) → LayerNorm → layers of bidirectional attention and a
//! feed-forward → hidden states of every token. BERT's family is post-norm with a plain GELU
//! feed-forward; ModernBERT is pre-norm with rotary positions, a GLU feed-forward, sliding
//! window layers and a final norm (the options below). No KV cache: each call runs whole
//! sequences.

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
use vllm_rs_kernels::ops::RopeTable;

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

/// Where a layer's norms sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// `h = norm(h + f(h))` (BERT, RoBERTa, MPNet).
    Post,
    /// `h = h + f(norm(h))` (ModernBERT).
    Pre,
}

pub struct EncoderLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// The attention half's norm; `None` is the identity (ModernBERT's first layer, whose input
    /// is the already normalized embeddings).
    pub attn_norm: Option<LayerNorm>,
    pub up: Linear,
    /// A GLU feed-forward's second half: `down(act(up(x)) · gate(x))` (ModernBERT's `Wi` is
    /// `up` and `gate` stacked); `None` is `down(act(up(x)))`.
    pub gate: Option<Linear>,
    pub down: Linear,
    /// The feed-forward half's norm.
    pub ffn_norm: LayerNorm,
    /// Attend only to keys within this distance (ModernBERT's local layers).
    pub window: Option<usize>,
    /// Rotary positions on q and k: the index of the model's inverse frequencies to use.
    pub rope: Option<usize>,
}

pub struct EncoderModel {
    pub info: PoolingInfo,
    pub word_embeddings: Embedding,
    /// The learned position table; `None` where positions are rotary (ModernBERT).
    pub position_embeddings: Option<Weight>,
    /// How a token's position is numbered (rows of the table, or rotary positions).
    pub positions: Positions,
    /// The token type (segment) table: row 0 for a single text, row 1 for the second text of
    /// a pair (BERT); models without one (MPNet) add nothing.
    pub token_type: Option<Weight>,
    pub embed_norm: LayerNorm,
    pub norms: NormPlacement,
    pub layers: Vec<EncoderLayer>,
    /// The attention's shape (a layer's own `window` replaces the one here).
    pub attention: EncoderAttentionParams,
    pub act: Activation,
    pub relative_bias: Option<RelativePositionBias>,
    /// The rotary inverse frequencies the layers' `rope` indices name (ModernBERT: global and
    /// local bases).
    pub rotary: Vec<Vec<f32>>,
    /// After the last layer (pre-norm models).
    pub final_norm: Option<LayerNorm>,
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
    gate: Vec<f32>,
    /// A pre-norm layer's normalized input.
    x: Vec<f32>,
    positions: Vec<u32>,
    ropes: Vec<RopeTable>,
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
            gate: v(),
            x: v(),
            positions: vec![],
            ropes: vec![],
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
            position_embeddings: Some(ck.matrix(&e("position_embeddings.weight"), c.max_position_embeddings, d)?),
            positions,
            token_type: None,
            embed_norm: LayerNorm::load(ck, &e("LayerNorm"), d, c.layer_norm_eps)?,
            norms: NormPlacement::Post,
            layers: load_layers(ck, prefix, c, names)?,
            attention: c.attention(),
            act: c.activation()?,
            relative_bias: None,
            rotary: Vec::new(),
            final_norm: None,
        })
    }

    /// Runs sequences (`ids` holds them one after another, lengths `seq_lens`) through the
    /// encoder; returns the last hidden state of every token (`tokens × hidden_size`).
    /// `type_ids`: the token type of every token (text pairs); `None` is type 0 throughout. A
    /// model without a token type table ignores them, as transformers does (ModernBERT takes
    /// none, whatever its tokenizer's pair template says).
    pub fn forward<'w>(
        &self,
        ids: &[u32],
        type_ids: Option<&[u32]>,
        seq_lens: &[usize],
        ws: &'w mut EncoderWorkspace,
    ) -> &'w [f32] {
        assert_eq!(ids.len(), seq_lens.iter().sum::<usize>(), "one id per token");
        assert!(type_ids.is_none_or(|t| t.len() == ids.len()), "one type id per token");
        if let (Some(table), Some(t)) = (&self.token_type, type_ids) {
            assert!(t.iter().all(|&ty| (ty as usize) < table.rows), "type ids below {}", table.rows);
        }
        let n = ids.len();
        let (be, width, head_dim) = (ws.backend, self.info.hidden_size, self.attention.head_dim);
        self.embed(be, ids, type_ids, seq_lens, ws);
        let bias = self.relative_bias.as_ref().map(|rb| {
            let span = seq_lens.iter().copied().max().unwrap_or(1).max(1);
            rb.fill(self.attention.num_heads, span, &mut ws.bias);
            span
        });
        ws.ropes.resize_with(self.rotary.len(), RopeTable::default);
        for (table, inv_freq) in ws.ropes.iter_mut().zip(&self.rotary) {
            table.fill(inv_freq, &ws.positions);
        }
        for layer in &self.layers {
            let x = sublayer_input(be, self.norms, layer.attn_norm.as_ref(), &ws.h, &mut ws.x);
            Linear::forward_many(be, [&layer.q, &layer.k, &layer.v], x, n, [&mut ws.q, &mut ws.k, &mut ws.v]);
            if let Some(r) = layer.rope {
                be.rope_rows(&mut ws.q, width, head_dim, &ws.ropes[r], false);
                be.rope_rows(&mut ws.k, width, head_dim, &ws.ropes[r], false);
            }
            ws.attn.resize(ws.q.len(), 0.0);
            let rb = bias.map(|span| RelativeBias { values: &ws.bias, span });
            let p = EncoderAttentionParams { window: layer.window, ..self.attention };
            be.encoder_attention(&ws.q, &ws.k, &ws.v, seq_lens, &p, rb, &mut ws.attn);
            layer.o.forward(be, &ws.attn, n, &mut ws.y);
            residual(be, self.norms, layer.attn_norm.as_ref(), &mut ws.h, &ws.y);
            let x = sublayer_input(be, self.norms, Some(&layer.ffn_norm), &ws.h, &mut ws.x);
            match &layer.gate {
                None => {
                    layer.up.forward(be, x, n, &mut ws.inner);
                    be.activation(self.act, &mut ws.inner);
                }
                Some(gate) => {
                    Linear::forward_many(be, [&layer.up, gate], x, n, [&mut ws.inner, &mut ws.gate]);
                    be.gated_activation(self.act, &mut ws.inner, &ws.gate);
                }
            }
            layer.down.forward(be, &ws.inner, n, &mut ws.y);
            residual(be, self.norms, Some(&layer.ffn_norm), &mut ws.h, &ws.y);
        }
        if let Some(norm) = &self.final_norm {
            norm.forward(be, &mut ws.h);
        }
        &ws.h
    }

    /// `h = LayerNorm(word (+ position) (+ token type))` for every token; leaves the tokens'
    /// positions in `ws.positions` (for rotary layers).
    fn embed(
        &self,
        be: &dyn Backend,
        ids: &[u32],
        type_ids: Option<&[u32]>,
        seq_lens: &[usize],
        ws: &mut EncoderWorkspace,
    ) {
        self.word_embeddings.forward(be, ids, 1.0, &mut ws.h);
        ws.positions.clear();
        let mut start = 0;
        for &len in seq_lens {
            self.positions.rows(&ids[start..start + len], &mut ws.positions);
            start += len;
        }
        if let Some(table) = &self.position_embeddings {
            be.embedding(table, &ws.positions, 1.0, &mut ws.row);
            be.add_assign(&mut ws.h, &ws.row);
        }
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
                attn_norm: Some(LayerNorm::load(ck, &p(names.attn_norm), d, c.layer_norm_eps)?),
                up: Linear::load(ck, &p(names.up), inter, d, true)?,
                gate: None,
                down: Linear::load(ck, &p(names.down), d, inter, true)?,
                ffn_norm: LayerNorm::load(ck, &p(names.out_norm), d, c.layer_norm_eps)?,
                window: None,
                rope: None,
            })
        })
        .collect()
}

/// The prefix a checkpoint puts before its tensors, found by the one named `probe` (none for
/// a bare `BertModel`; `bert.`, `roberta.`, `mpnet.`, `model.` when saved from a model with a
/// head).
pub fn tensor_prefix(ck: &Checkpoint, candidates: &[&'static str], probe: &str) -> &'static str {
    candidates.iter().copied().find(|p| ck.contains(&format!("{p}{probe}"))).unwrap_or("")
}

/// What a sub-layer reads: `h` itself (post-norm, or no norm), else `h` normalized into `x`.
fn sublayer_input<'a>(
    be: &dyn Backend,
    placement: NormPlacement,
    norm: Option<&LayerNorm>,
    h: &'a [f32],
    x: &'a mut Vec<f32>,
) -> &'a [f32] {
    match (placement, norm) {
        (NormPlacement::Pre, Some(norm)) => {
            x.clear();
            x.extend_from_slice(h);
            norm.forward(be, x);
            x
        }
        _ => h,
    }
}

/// The residual add of a sub-layer's output `y`, then (post-norm) its norm.
fn residual(be: &dyn Backend, placement: NormPlacement, norm: Option<&LayerNorm>, h: &mut [f32], y: &[f32]) {
    be.add_assign(h, y);
    if let (NormPlacement::Post, Some(norm)) = (placement, norm) {
        norm.forward(be, h);
    }
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
