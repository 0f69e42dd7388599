//! The draft-model proposer (`--speculative-config '{"model": DRAFT, ...}'`): a smaller model
//! with the same vocabulary proposes `k` tokens per request by greedy decoding; the target
//! verifies them in its next step.
//!
//! As in vLLM, the draft keeps its own K/V tensors but uses the target's block tables (of a
//! full-attention group): the scheduler reserves `k` lookahead slots past each request's
//! scheduled tokens, where the draft writes its proposals' K/V. Per request the draft knows
//! how many positions of its cache hold the request's real tokens; proposals that the target
//! rejected are recomputed, accepted ones are kept.

use crate::draft_round::Round;
use crate::draft_vocab::{DraftVocab, RequestIds, top_probability};
use std::collections::HashMap;
use vllm_rs_kernels::attention::{KvCache, KvDtype};
use vllm_rs_kernels::quant_act::{ActBits, with_activation_bits};
use vllm_rs_models::{ForwardInput, Model, Workspace};

/// What the draft cache holds for one request.
#[derive(Default)]
struct DraftState {
    /// Positions `0..computed` hold the request's tokens.
    computed: usize,
    /// Draft tokens fed at positions `computed..` (valid as far as they match the real tokens).
    fed: Vec<u32>,
    /// What the cut head knows of the request ([`DraftVocab::note`]).
    ids: RequestIds,
}

/// One request to propose for: its tokens so far, its block table, and at most how many drafts.
pub struct DraftJob<'a> {
    pub request_id: &'a str,
    pub tokens: &'a [u32],
    pub block_table: &'a [u32],
    pub limit: usize,
}

pub struct Drafter {
    model: Box<dyn Model>,
    kv: KvCache,
    ws: Workspace,
    logits: Vec<f32>,
    k: usize,
    states: HashMap<String, DraftState>,
    /// What the draft's quantized matmuls take ([`crate::draft_round::drafter_bits`]).
    bits: ActBits,
    /// At most this many of the requests' tokens a proposal catches up on (the step's token
    /// budget): a long prompt comes in over several steps, each as large as a prefill chunk.
    max_catch_up: usize,
    /// The head cut to its first ids, where that pays ([`Drafter::cut_head`]).
    vocab: Option<DraftVocab>,
    /// A request stops drafting at a token the draft gives a smaller probability than this
    /// ([`Drafter::stop_below`]).
    p_min: f32,
}

impl Drafter {
    /// A draft over `num_blocks` blocks of `block_size` tokens (the target's block ids); `bits`: its
    /// activation bits ([`crate::draft_round::drafter_bits`]); `max_catch_up`: the step's token
    /// budget.
    pub fn new(
        model: Box<dyn Model>,
        k: usize,
        num_blocks: usize,
        block_size: usize,
        dtype: KvDtype,
        bits: ActBits,
        max_catch_up: usize,
    ) -> Self {
        let kv = model.info().contiguous_kv_cache(num_blocks, block_size, dtype, 0);
        let ws = Workspace::default();
        let (logits, states, max_catch_up) = (Vec::new(), HashMap::new(), max_catch_up.max(1));
        Drafter { model, kv, ws, logits, k, states, bits, max_catch_up, vocab: None, p_min: 0.0 }
    }

    /// Scores only the head's first `rows` ids and each request's own ids past them
    /// ([`DraftVocab`]), where the vocabulary is large enough for that to pay; 0: the whole head.
    pub fn cut_head(mut self, rows: usize) -> Self {
        self.vocab = DraftVocab::new(self.model.as_ref(), rows);
        if let Some(v) = &self.vocab {
            tracing::info!(
                "draft model: the head scores the first {} of {} ids and each request's own rarer ids",
                v.rows(),
                self.model.info().vocab_size
            );
        }
        self
    }

    /// A request's drafts stop before the first token the draft gives a probability under
    /// `p_min` (llama.cpp's `--draft-p-min`): such a draft is mostly rejected, and each one costs
    /// a draft step and a verified row. 0: always `k` drafts, as vLLM drafts.
    pub fn stop_below(mut self, p_min: f32) -> Self {
        self.p_min = p_min;
        self
    }

    /// Forgets what the cache holds for a request (new, or resumed with new blocks).
    pub fn reset(&mut self, request_id: &str) {
        self.states.insert(request_id.to_string(), DraftState::default());
    }

    pub fn remove(&mut self, request_id: &str) {
        self.states.remove(request_id);
    }

    /// Greedy drafts for each job (at most `min(k, limit)` each), in job order. A job whose
    /// catch-up does not fit in what is left of `max_catch_up` takes in what fits and gets no
    /// drafts this time (the target decodes it one token a step meanwhile).
    pub fn propose(&mut self, jobs: &[DraftJob]) -> Vec<Vec<u32>> {
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
        let mut round = Round::default();
        let mut budget = self.max_catch_up;
        // Round 1: every token the cache lacks (the catch-up), then the next token's logits.
        for (j, job) in jobs.iter().enumerate().filter(|(_, job)| job.limit > 0) {
            let st = self.states.entry(job.request_id.to_string()).or_default();
            let len = job.tokens.len();
            if let Some(v) = &self.vocab {
                v.note(job.tokens, &mut st.ids);
            }
            let start = st.computed.min(len);
            let matched = st.fed.iter().zip(&job.tokens[start..]).take_while(|(a, b)| a == b).count();
            let valid = (start + matched).min(len - 1);
            let rows = (len - valid).min(budget);
            if rows == 0 {
                continue;
            }
            budget -= rows;
            let whole = valid + rows == len;
            round.push(j, &job.tokens[valid..valid + rows], valid, job.block_table, self.kv.block_size, whole);
            if !whole {
                (st.computed, st.fed) = (valid + rows, Vec::new());
            }
        }
        // Per job, the ids past the cut its drafts may take (`None`: the whole head).
        let extras: Vec<Option<Vec<u32>>> = match self.vocab {
            Some(_) => jobs
                .iter()
                .map(|j| self.states.get(j.request_id).and_then(|s| s.ids.extras()).map(<[u32]>::to_vec))
                .collect(),
            None => Vec::new(),
        };
        let width = self.k.min(jobs.iter().map(|j| j.limit).max().unwrap_or(0));
        // Jobs whose last round's token fell under `p_min`: every draft they kept was fed.
        let mut unsure = vec![false; jobs.len()];
        for r in 0..width {
            if round.is_empty() {
                break;
            }
            let next = self.run(&round, jobs, &extras);
            let mut following = Round::default();
            for ((seq, _), (tok, p)) in round.drafting().zip(next) {
                let j = seq.job;
                if p < self.p_min {
                    unsure[j] = true;
                    continue;
                }
                drafts[j].push(tok);
                if drafts[j].len() < self.k.min(jobs[j].limit) && r + 1 < width {
                    following.push(j, &[tok], seq.seq_len, jobs[j].block_table, self.kv.block_size, true);
                }
            }
            round = following;
        }
        for ((job, d), unsure) in jobs.iter().zip(&drafts).zip(unsure) {
            if let Some(st) = self.states.get_mut(job.request_id).filter(|_| unsure || !d.is_empty()) {
                // The real tokens are in, and every kept draft after them but the last (all of
                // them where the next was unsure).
                st.computed = job.tokens.len();
                st.fed = d[..d.len() - usize::from(!unsure)].to_vec();
            }
        }
        drafts
    }

    /// One draft forward over the round; the argmax token of each request's last row and, where
    /// drafts stop below a probability, the draft's probability of it (else 1). Where the head is
    /// cut, over the cut head and the job's `extras`, or the whole head where those are `None`
    /// ([`DraftVocab::argmax`]).
    fn run(&mut self, round: &Round, jobs: &[DraftJob], extras: &[Option<Vec<u32>>]) -> Vec<(u32, f32)> {
        let batch = round.batch(|j| jobs[j].block_table);
        let Drafter { model, kv, ws, logits, vocab, bits, p_min, .. } = self;
        let confidence = *p_min > 0.0;
        let mut next = Vec::new();
        with_activation_bits(*bits, || match vocab {
            None => {
                model.forward_with(&batch, kv, ws, logits);
                let (n, mut ids) = (model.info().vocab_size, Vec::new());
                ws.backend.argmax_rows(logits, n, &mut ids);
                next = ids
                    .iter()
                    .zip(logits.chunks_exact_mut(n))
                    .map(|(&t, row)| (t, if confidence { top_probability(row, t) } else { 1.0 }))
                    .collect();
            }
            Some(v) => {
                let be = ws.backend;
                let hidden = model.forward(ForwardInput::TokenIds(batch.input_ids), &batch, kv, ws);
                let picks: Vec<(usize, Option<&[u32]>)> =
                    round.drafting().map(|(s, row)| (row, extras[s.job].as_deref())).collect();
                v.argmax(be, hidden, &picks, confidence, &mut next);
            }
        });
        next
    }
}
