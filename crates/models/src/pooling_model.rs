//! A model run for pooling (embeddings, classification, scores): an encoder (BERT, MPNet…),
//! or a decoder whose final hidden states are pooled (vLLM's `--runner pooling` on a
//! `*ForCausalLM`, as Qwen3-Embedding is served: last-token pooling). Whole sequences per call;
//! a decoder writes its K/V into a scratch cache that lives only for the call.

use crate::batch::{ForwardBatch, GroupBatch, SeqAttention};
use crate::classifier::SequenceClassifier;
use crate::encoder::{EncoderModel, EncoderWorkspace};
use crate::gguf::GgufFile;
use crate::model::{ForwardInput, Model, Workspace};
use crate::pooling::PoolingConfig;
use std::sync::Arc;
use vllm_rs_kernels::Backend;
use vllm_rs_kernels::attention::{KvCache, KvDtype};

/// What the pooling runner needs to know about the model.
#[derive(Clone, Debug)]
pub struct PoolingInfo {
    /// Hugging Face class name, e.g. `BertModel`.
    pub architecture: String,
    pub hidden_size: usize,
    pub vocab_size: usize,
    /// Longest sequence the model's positions cover.
    pub max_position_embeddings: usize,
}

pub enum Backbone {
    Encoder(Box<EncoderModel>),
    Decoder(Box<dyn Model>),
}

pub struct PoolingModel {
    pub info: PoolingInfo,
    pub backbone: Backbone,
    pub pooling: PoolingConfig,
    /// The sequence classification head (`*ForSequenceClassification`), if the model has one.
    pub classifier: Option<SequenceClassifier>,
    /// The GGUF file, when loaded from one (its metadata holds the tokenizer).
    pub gguf: Option<Arc<GgufFile>>,
    /// Tensors of the checkpoint the model does not use (logged at load).
    pub unread: Vec<String>,
}

/// Scratch of one pooling forward, kept by the caller between calls.
#[derive(Default)]
pub struct PoolingWorkspace {
    encoder: EncoderWorkspace,
    decoder: Workspace,
    kv: Option<KvCache>,
    positions: Vec<u32>,
    slots: Vec<usize>,
    tables: Vec<Vec<u32>>,
}

impl PoolingWorkspace {
    /// An empty workspace whose passes run on `backend`.
    pub fn on(backend: &'static dyn Backend) -> Self {
        PoolingWorkspace {
            encoder: EncoderWorkspace::on(backend),
            decoder: Workspace::on(backend),
            ..PoolingWorkspace::default()
        }
    }

    /// The backend this workspace's passes run on.
    pub fn backend(&self) -> &'static dyn Backend {
        self.decoder.backend
    }
}

/// Tokens per block of a decoder's scratch cache.
const BLOCK_SIZE: usize = 16;

impl PoolingModel {
    /// The final hidden states of every token of the sequences in `ids` (lengths `seq_lens`;
    /// `type_ids` for encoder text pairs), `tokens × hidden_size`.
    pub fn forward<'w>(
        &self,
        ids: &[u32],
        type_ids: Option<&[u32]>,
        seq_lens: &[usize],
        ws: &'w mut PoolingWorkspace,
    ) -> &'w [f32] {
        match &self.backbone {
            Backbone::Encoder(e) => e.forward(ids, type_ids, seq_lens, &mut ws.encoder),
            Backbone::Decoder(d) => decoder_forward(d.as_ref(), ids, seq_lens, ws),
        }
    }
}

/// Runs each sequence as a whole prompt (causal attention) over a scratch cache with
/// consecutive blocks per sequence, grown to the largest batch seen.
fn decoder_forward<'w>(model: &dyn Model, ids: &[u32], seq_lens: &[usize], ws: &'w mut PoolingWorkspace) -> &'w [f32] {
    let info = model.info();
    let blocks: usize = seq_lens.iter().map(|l| l.div_ceil(BLOCK_SIZE)).sum();
    if ws.kv.as_ref().is_none_or(|kv| kv.num_blocks < blocks) {
        ws.kv = Some(info.contiguous_kv_cache(blocks, BLOCK_SIZE, KvDtype::F32, 0));
    }
    ws.positions.clear();
    ws.slots.clear();
    ws.tables.clear();
    let mut next_block = 0u32;
    for &len in seq_lens {
        let n = len.div_ceil(BLOCK_SIZE) as u32;
        ws.tables.push((next_block..next_block + n).collect());
        ws.positions.extend(0..len as u32);
        ws.slots.extend((0..len).map(|t| next_block as usize * BLOCK_SIZE + t));
        next_block += n;
    }
    let mut start = 0;
    let seqs = seq_lens
        .iter()
        .zip(&ws.tables)
        .map(|(&len, table)| {
            let s = SeqAttention { query_start: start, query_len: len, seq_len: len, block_table: table };
            start += len;
            s
        })
        .collect();
    let batch = ForwardBatch {
        input_ids: ids,
        positions: &ws.positions,
        groups: vec![GroupBatch { slot_mapping: &ws.slots, seqs }],
        logits_indices: &[],
        state_saves: &[],
    };
    let kv = ws.kv.as_mut().expect("sized above");
    model.forward(ForwardInput::TokenIds(ids), &batch, kv, &mut ws.decoder)
}
