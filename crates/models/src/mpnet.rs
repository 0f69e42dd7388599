//! `MPNetModel` (transformers' `modeling_mpnet.py`): a post-norm encoder like BERT without
//! token types, positions numbered after the padding index, and a learned bias per head for
//! bucketed relative distances, shared by every layer.

use crate::checkpoint::Checkpoint;
use crate::encoder::{EncoderConfig, EncoderModel, LayerNames, Positions, RelativePositionBias, tensor_prefix};
use crate::error::{Error, Result};
use serde_json::Value;

/// `MPNetForMaskedLM` is what all-mpnet-base-v2 names: its folder holds only the encoder.
pub const CLASSES: [&str; 2] = ["MPNetModel", "MPNetForMaskedLM"];

const NAMES: LayerNames = LayerNames {
    q: "attention.attn.q",
    k: "attention.attn.k",
    v: "attention.attn.v",
    o: "attention.attn.o",
    attn_norm: "attention.LayerNorm",
    up: "intermediate.dense",
    down: "output.dense",
    out_norm: "output.LayerNorm",
};

/// transformers hard-codes both (`compute_position_bias(x, num_buckets=32)`, `max_distance=128`).
const NUM_BUCKETS: usize = 32;
const MAX_DISTANCE: usize = 128;

pub fn load(ck: &Checkpoint, config: &Value, architecture: &str) -> Result<EncoderModel> {
    let c = EncoderConfig::parse(config)?;
    let positions = Positions::AfterPadding { padding_idx: 1 };
    let prefix = tensor_prefix(ck, &["mpnet."], "embeddings.word_embeddings.weight");
    let buckets = config.get("relative_attention_num_buckets").and_then(Value::as_u64).unwrap_or(32) as usize;
    if buckets < NUM_BUCKETS {
        return Err(Error::msg(format!(
            "config: relative_attention_num_buckets is {buckets}; MPNet buckets distances into {NUM_BUCKETS}"
        )));
    }
    let table =
        ck.matrix(&format!("{prefix}encoder.relative_attention_bias.weight"), buckets, c.num_attention_heads)?;
    let mut m = EncoderModel::load(ck, prefix, &c, architecture, positions, &NAMES)?;
    m.relative_bias = Some(RelativePositionBias { table, num_buckets: NUM_BUCKETS, max_distance: MAX_DISTANCE });
    Ok(m)
}
