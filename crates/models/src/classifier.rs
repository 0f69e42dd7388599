//! Sequence classification heads of encoders (`*ForSequenceClassification`; cross-encoder
//! rerankers are these with one label): the sequence's pooled state (the first token's, or
//! the mean of all) through a dense layer and its activation (BERT's pooler and RoBERTa's
//! `classifier.dense`: tanh; ModernBERT's `head`: its `classifier_activation`, then a
//! LayerNorm), then a projection to the labels.

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::norm::LayerNorm;
use crate::pooling::PoolingType;
use serde_json::Value;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::ops::Activation;

pub struct SequenceClassifier {
    /// Which token states make the head's input (CLS for BERT's family).
    pub pooling: PoolingType,
    /// `act(dense(pooled))`, then `norm` if any.
    pub dense: Linear,
    pub act: Activation,
    pub norm: Option<LayerNorm>,
    pub out: Linear,
    /// `id2label`, in label order.
    pub labels: Vec<String>,
}

/// The heads' tensor names per family: (prefix of the dense layer, the output projection).
fn names(architecture: &str) -> Option<(&'static str, &'static str)> {
    match architecture {
        "BertForSequenceClassification" => Some(("bert.pooler.dense", "classifier")),
        "RobertaForSequenceClassification" | "XLMRobertaForSequenceClassification" => {
            Some(("classifier.dense", "classifier.out_proj"))
        }
        _ => None,
    }
}

impl SequenceClassifier {
    /// The head of `architecture`, or `None` for a bare encoder.
    pub fn load(ck: &Checkpoint, config: &Value, architecture: &str, hidden: usize) -> Result<Option<Self>> {
        if architecture == "ModernBertForSequenceClassification" {
            return crate::modernbert::head(ck, config, hidden).map(Some);
        }
        let Some((dense, out)) = names(architecture) else { return Ok(None) };
        let labels = labels(config)?;
        Ok(Some(SequenceClassifier {
            pooling: PoolingType::Cls,
            dense: Linear::load(ck, dense, hidden, hidden, true)?,
            act: Activation::Tanh,
            norm: None,
            out: Linear::load(ck, out, labels.len(), hidden, true)?,
            labels,
        }))
    }

    /// The logits of one sequence from its tokens' last hidden states (`tokens × hidden`);
    /// `scratch` is reused between calls. One sequence per call: its logits never depend on
    /// the others of a batch.
    pub fn logits(&self, be: &dyn Backend, hidden: &[f32], scratch: &mut Vec<f32>, out: &mut Vec<f32>) {
        self.pooling.pool(hidden, self.dense.weight.cols, out);
        self.dense.forward(be, out, 1, scratch);
        be.activation(self.act, scratch);
        if let Some(norm) = &self.norm {
            norm.forward(be, scratch);
        }
        self.out.forward(be, scratch, 1, out);
    }
}

/// `id2label` as a list (ids 0..n); `num_labels` alone gives `LABEL_i` names, as transformers.
pub(crate) fn labels(config: &Value) -> Result<Vec<String>> {
    if let Some(map) = config.get("id2label").and_then(Value::as_object) {
        let mut labels = vec![None; map.len()];
        for (k, v) in map {
            let i: usize = k.parse().map_err(|_| Error::msg(format!("config: id2label key {k:?} is not a number")))?;
            let slot = labels.get_mut(i).ok_or_else(|| Error::msg(format!("config: id2label has a gap before {i}")))?;
            *slot = Some(v.as_str().unwrap_or_default().to_string());
        }
        return labels.into_iter().map(|l| l.ok_or_else(|| Error::msg("config: id2label has gaps"))).collect();
    }
    let n = config.get("num_labels").and_then(Value::as_u64).unwrap_or(2) as usize;
    Ok((0..n).map(|i| format!("LABEL_{i}")).collect())
}
