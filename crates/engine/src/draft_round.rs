//! One forward pass of a drafter (a draft model or a draft head) over several requests' rows:
//! each request's tokens at its positions, written into its slots of the target's block table
//! (the drafter keeps its own K/V under the same block ids).

use vllm_rs_kernels::attention::SeqAttention;
use vllm_rs_kernels::backend::Backend;
use vllm_rs_kernels::quant_act::{ActBits, activation_bits};
use vllm_rs_models::{ForwardBatch, GroupBatch};

/// The activation bits a drafter's quantized matmuls take: int8 where the backend dots them
/// faster ([`Backend::int8_activations_pay`]), else the process's. A drafter only proposes and
/// the target verifies every token, so the drafter's precision may change how many drafts are
/// accepted, never the output; the draft model's prompt catch-up is prefill-shaped, where int8
/// is 1.3x faster (Qwen2.5-0.5B, 2.7k tokens on Zen 4).
pub fn drafter_bits(backend: &dyn Backend) -> ActBits {
    if backend.int8_activations_pay() { ActBits::Int8 } else { activation_bits() }
}

/// One request's rows in a round.
#[derive(Clone, Copy)]
pub struct RoundSeq {
    /// The drafter's job (request) index.
    pub job: usize,
    pub first_row: usize,
    pub rows: usize,
    /// Positions attended over once the rows are in.
    pub seq_len: usize,
}

#[derive(Default)]
pub struct Round {
    ids: Vec<u32>,
    positions: Vec<u32>,
    slots: Vec<usize>,
    seqs: Vec<RoundSeq>,
    /// The last row of each request whose next token is wanted, and its index in `seqs`.
    last_rows: Vec<usize>,
    drafting: Vec<usize>,
}

impl Round {
    /// Adds job `job`'s `ids` at positions `first..` (slots from `table`, blocks of `bs`);
    /// `draft`: its last row's next token is wanted.
    pub fn push(&mut self, job: usize, ids: &[u32], first: usize, table: &[u32], bs: usize, draft: bool) {
        let first_row = self.ids.len();
        self.ids.extend_from_slice(ids);
        for p in first..first + ids.len() {
            self.positions.push(p as u32);
            self.slots.push(table[p / bs] as usize * bs + p % bs);
        }
        if draft {
            self.last_rows.push(first_row + ids.len() - 1);
            self.drafting.push(self.seqs.len());
        }
        self.seqs.push(RoundSeq { job, first_row, rows: ids.len(), seq_len: first + ids.len() });
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The rows whose next token is wanted, in the order [`Round::drafting`] lists them.
    pub fn last_rows(&self) -> &[usize] {
        &self.last_rows
    }

    /// Each request whose next token is wanted, with its last row.
    pub fn drafting(&self) -> impl Iterator<Item = (RoundSeq, usize)> + '_ {
        self.drafting.iter().zip(&self.last_rows).map(|(&s, &row)| (self.seqs[s], row))
    }

    /// The forward batch of the round, each job's block table from `table(job)`; logits for
    /// [`Round::last_rows`].
    pub fn batch<'a>(&'a self, table: impl Fn(usize) -> &'a [u32]) -> ForwardBatch<'a> {
        let seqs = self
            .seqs
            .iter()
            .map(|s| SeqAttention {
                query_start: s.first_row,
                query_len: s.rows,
                seq_len: s.seq_len,
                block_table: table(s.job),
            })
            .collect();
        ForwardBatch {
            input_ids: &self.ids,
            positions: &self.positions,
            groups: vec![GroupBatch { slot_mapping: &self.slots, seqs }],
            logits_indices: &self.last_rows,
            state_saves: &[],
        }
    }
}
