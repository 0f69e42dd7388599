//! The draft-head proposer (`--speculative-config` methods `mtp` and `eagle3`): a checkpoint's
//! multi-token-prediction layer or an EAGLE-3 head ([`vllm_rs_models::draft_head`]) drafts from
//! the target's hidden states, as vLLM's EAGLE proposer does.
//!
//! The head's entry at position `p` is computed from the target's hidden state at `p` and the
//! token at `p + 1`, so every step, after sampling, it takes in each request's target rows whose
//! next token is now known (prefill chunks included: its cache must hold every position). The
//! last of them yields the first draft; each further draft feeds the one before, with the
//! head's own output as the hidden state. Like the draft model it keeps its own K/V over the
//! target's block tables (a full-attention group), and chained drafts write into the `k`
//! lookahead slots the scheduler reserves; the next step's rows overwrite what was rejected.

use crate::draft_round::Round;
use vllm_rs_kernels::attention::{KvCache, KvDtype};
use vllm_rs_kernels::quant_act::{ActBits, with_activation_bits};
use vllm_rs_models::Workspace;
use vllm_rs_models::draft_head::DraftHead;

/// One request's share of a step: rows `rows` of the target's batch are positions
/// `first_position..` whose next tokens are in `tokens`; at most `limit` drafts are wanted.
pub struct HeadJob<'a> {
    pub tokens: &'a [u32],
    pub block_table: &'a [u32],
    pub rows: std::ops::Range<usize>,
    pub first_position: usize,
    pub limit: usize,
}

pub struct HeadDrafter {
    head: Box<dyn DraftHead>,
    kv: KvCache,
    ws: Workspace,
    k: usize,
    /// Hidden states a round starts from, `rows × hidden`.
    hidden: Vec<f32>,
    /// The first round's hidden state of every target row.
    target_rows: Vec<f32>,
    logits: Vec<f32>,
    /// What the head's quantized matmuls take ([`crate::draft_round::drafter_bits`]).
    bits: ActBits,
}

impl HeadDrafter {
    /// A drafter over `num_blocks` blocks of `block_size` tokens (the target's block ids); `bits`: its
    /// activation bits ([`crate::draft_round::drafter_bits`]).
    pub fn new(
        head: Box<dyn DraftHead>,
        k: usize,
        num_blocks: usize,
        block_size: usize,
        dtype: KvDtype,
        bits: ActBits,
    ) -> Self {
        let kv = head.info().contiguous_kv_cache(num_blocks, block_size, dtype, 0);
        let (hidden, target_rows, logits) = (Vec::new(), Vec::new(), Vec::new());
        let ws = Workspace::default();
        HeadDrafter { head, kv, ws, k, hidden, target_rows, logits, bits }
    }

    /// Target layers whose inputs the head reads (the target's forward keeps them).
    pub fn aux_layers(&self) -> &[usize] {
        self.head.aux_layers()
    }

    /// Takes in every job's rows (`target`: the target's workspace after the step's forward);
    /// greedy drafts for each job, in job order.
    pub fn propose(&mut self, target: &Workspace, jobs: &[HeadJob]) -> Vec<Vec<u32>> {
        let dim = self.head.info().hidden_size;
        with_activation_bits(self.bits, || self.head.target_hidden(self.ws.backend, target, &mut self.target_rows));
        let target_hidden = &self.target_rows;
        let bs = self.kv.block_size;
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
        let mut round = Round::default();
        self.hidden.clear();
        for (j, job) in jobs.iter().enumerate().filter(|(_, job)| !job.rows.is_empty()) {
            let (p, n) = (job.first_position, job.rows.len());
            round.push(j, &job.tokens[p + 1..p + 1 + n], p, job.block_table, bs, job.limit > 0);
            self.hidden.extend_from_slice(&target_hidden[job.rows.start * dim..job.rows.end * dim]);
        }
        let width = self.k.min(jobs.iter().map(|j| j.limit).max().unwrap_or(0));
        let mut step = 0;
        while !round.is_empty() {
            let next = self.run(&round, jobs);
            step += 1;
            // The next round: one row per request still drafting, fed its draft and the hidden
            // state of the row that proposed it.
            let chain = self.head.chain_hidden(&self.ws);
            self.hidden.clear();
            let mut following = Round::default();
            for ((seq, row), tok) in round.drafting().zip(next) {
                let j = seq.job;
                drafts[j].push(tok);
                if step < width && drafts[j].len() < jobs[j].limit {
                    following.push(j, &[tok], seq.seq_len, jobs[j].block_table, bs, true);
                    self.hidden.extend_from_slice(&chain[row * dim..(row + 1) * dim]);
                }
            }
            round = following;
        }
        drafts
    }

    /// One forward over the round; the argmax token of each drafting request's last row.
    fn run(&mut self, round: &Round, jobs: &[HeadJob]) -> Vec<u32> {
        let batch = round.batch(|j| jobs[j].block_table);
        with_activation_bits(self.bits, || {
            self.head.forward(&batch, &self.hidden, &mut self.kv, &mut self.ws);
            if round.last_rows().is_empty() {
                return Vec::new(); // a catch-up only
            }
            self.head.argmax(&self.ws, round.last_rows(), &mut self.logits)
        })
    }
}
