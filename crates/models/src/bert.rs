//! `BertModel`, `RobertaModel` and `XLMRobertaModel` (transformers' `modeling_bert.py` /
//! `modeling_roberta.py`): the same post-norm encoder; RoBERTa and XLM-R number positions after
//! the padding index (fairseq), BERT from 0. Token type 0 is added to every token.

use crate::checkpoint::Checkpoint;
use crate::encoder::{EncoderConfig, EncoderModel, LayerNames, Positions, load_layers, tensor_prefix};
use crate::error::{Error, Result};
use crate::layers::Embedding;
use crate::norm::LayerNorm;
use crate::pooling_model::PoolingInfo;
use serde_json::Value;

/// The bare encoders, and their masked-LM classes, which sentence-transformers folders often name
/// although they hold only the encoder (the LM head, if stored, is not loaded).
/// With a sequence classification head: cross-encoders (rerankers) and classifiers.
pub const CLASSES: [&str; 9] = [
    "BertModel",
    "RobertaModel",
    "XLMRobertaModel",
    "BertForMaskedLM",
    "RobertaForMaskedLM",
    "XLMRobertaForMaskedLM",
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
];

const NAMES: LayerNames = LayerNames {
    q: "attention.self.query",
    k: "attention.self.key",
    v: "attention.self.value",
    o: "attention.output.dense",
    attn_norm: "attention.output.LayerNorm",
    up: "intermediate.dense",
    down: "output.dense",
    out_norm: "output.LayerNorm",
};

pub fn load(ck: &Checkpoint, config: &Value, architecture: &str) -> Result<EncoderModel> {
    let c = EncoderConfig::parse(config)?;
    let kind = config.get("position_embedding_type").and_then(Value::as_str).unwrap_or("absolute");
    if kind != "absolute" {
        return Err(Error::msg(format!(
            "config: position_embedding_type {kind:?} is not supported (only \"absolute\")"
        )));
    }
    let positions = if architecture.starts_with("Bert") {
        Positions::Absolute
    } else {
        let pad = config.get("pad_token_id").and_then(Value::as_u64).unwrap_or(1);
        Positions::AfterPadding { padding_idx: pad as u32 }
    };
    let prefix = tensor_prefix(ck, &["bert.", "roberta."]);
    let d = c.hidden_size;
    let e = |n: &str| format!("{prefix}embeddings.{n}");
    let type_vocab = config.get("type_vocab_size").and_then(Value::as_u64).unwrap_or(2) as usize;
    let token_type = ck.matrix(&e("token_type_embeddings.weight"), type_vocab, d)?;
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
        token_type: Some(token_type),
        embed_norm: LayerNorm::load(ck, &e("LayerNorm"), d, c.layer_norm_eps)?,
        layers: load_layers(ck, prefix, &c, &NAMES)?,
        attention: c.attention(),
        act: c.activation()?,
        relative_bias: None,
    })
}
