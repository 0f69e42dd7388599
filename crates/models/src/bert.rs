//! `BertModel`, `RobertaModel` and `XLMRobertaModel` (transformers' `modeling_bert.py` /
//! `modeling_roberta.py`): the same post-norm encoder; RoBERTa and XLM-R number positions after
//! the padding index (fairseq), BERT from 0. Token type 0 is added to every token.

use crate::checkpoint::Checkpoint;
use crate::encoder::{EncoderConfig, EncoderModel, LayerNames, Positions, tensor_prefix};
use crate::error::{Error, Result};
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
    let prefix = tensor_prefix(ck, &["bert.", "roberta."], "embeddings.word_embeddings.weight");
    let type_vocab = config.get("type_vocab_size").and_then(Value::as_u64).unwrap_or(2) as usize;
    let token_type =
        ck.matrix(&format!("{prefix}embeddings.token_type_embeddings.weight"), type_vocab, c.hidden_size)?;
    let mut m = EncoderModel::load(ck, prefix, &c, architecture, positions, &NAMES)?;
    m.token_type = Some(token_type);
    Ok(m)
}
