//! The model runner: flattens a scheduled step into one batch, runs the model once, samples.

use crate::engine_core::EngineConfig;
use crate::sampler::{self, SampleContext, TokenLogprobs};
use crate::sampling_params::{LogprobsMode, SamplingParams};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use vllm_rs_core::{Scheduler, SchedulerOutput};
use vllm_rs_kernels::attention::{KvCache, SeqAttention};
use vllm_rs_models::{ForwardBatch, Model};

/// Per-request state that lives as long as the request (across preemptions).
struct RequestState {
    params: SamplingParams,
    rng: ChaCha8Rng,
    all_stop_token_ids: Vec<u32>,
    /// Prompt logprobs gathered so far (index = prompt position; position 0 has none).
    prompt_logprobs: Vec<Option<TokenLogprobs>>,
    prompt_logprobs_sent: bool,
}

/// What one scheduled request got out of a step.
#[derive(Debug, Default)]
pub struct StepResult {
    pub token: Option<u32>,
    pub logprobs: Option<TokenLogprobs>,
    /// Every prompt position's logprobs, once the whole prompt has been computed.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
}

pub struct ModelRunner {
    pub model: Box<dyn Model>,
    pub kv: KvCache,
    states: HashMap<String, RequestState>,
    logprobs_mode: LogprobsMode,
    /// The last step's logits (kept for its allocation).
    logits: Vec<f32>,
}

/// The flat batch of one step, in vLLM's names.
#[derive(Default)]
struct FlatBatch {
    input_ids: Vec<u32>,
    positions: Vec<u32>,
    slot_mapping: Vec<usize>,
    query_start_loc: Vec<usize>,
    seq_lens: Vec<usize>,
    logits_indices: Vec<usize>,
    /// For each logits row: (scheduled index, prompt position it predicts, is the sample row).
    logits_rows: Vec<(usize, Option<usize>, bool)>,
}

impl ModelRunner {
    pub fn new(model: Box<dyn Model>, c: &EngineConfig) -> Self {
        let i = model.info();
        let kv = KvCache::new(i.num_layers, c.num_blocks, c.block_size, i.num_kv_heads, i.head_dim, c.kv_cache_dtype);
        ModelRunner { model, kv, states: HashMap::new(), logprobs_mode: c.logprobs_mode, logits: Vec::new() }
    }

    /// Registers a request's sampling state. `all_stop_token_ids` are masked until `min_tokens`.
    pub fn add_request(&mut self, id: &str, params: SamplingParams, all_stop_token_ids: Vec<u32>) {
        let rng = match params.seed {
            Some(s) => ChaCha8Rng::seed_from_u64(s),
            None => ChaCha8Rng::from_rng(&mut rand::rng()),
        };
        let state =
            RequestState { params, rng, all_stop_token_ids, prompt_logprobs: Vec::new(), prompt_logprobs_sent: false };
        self.states.insert(id.to_string(), state);
    }

    pub fn remove_request(&mut self, id: &str) {
        self.states.remove(id);
    }

    pub fn num_requests(&self) -> usize {
        self.states.len()
    }

    fn flatten(&self, out: &SchedulerOutput, sched: &Scheduler) -> FlatBatch {
        let bs = self.kv.block_size;
        let mut b = FlatBatch::default();
        for (si, s) in out.scheduled.iter().enumerate() {
            let start_row = b.input_ids.len();
            b.query_start_loc.push(start_row);
            b.input_ids.extend_from_slice(&s.token_ids);
            for j in 0..s.token_ids.len() {
                let pos = s.num_computed_tokens + j;
                b.positions.push(pos as u32);
                b.slot_mapping.push(s.block_ids[pos / bs] as usize * bs + pos % bs);
            }
            b.seq_lens.push(s.num_computed_tokens + s.token_ids.len());
            let state = &self.states[&s.request_id];
            let prompt_len = sched.request(&s.request_id).map_or(0, |r| r.prompt_len);
            if state.params.prompt_logprobs.is_some() && !state.prompt_logprobs_sent {
                // Row at position p predicts prompt token p + 1.
                for j in 0..s.token_ids.len() {
                    let next = s.num_computed_tokens + j + 1;
                    if next < prompt_len {
                        b.logits_indices.push(start_row + j);
                        b.logits_rows.push((si, Some(next), false));
                    }
                }
            }
            if s.sample {
                b.logits_indices.push(start_row + s.token_ids.len() - 1);
                b.logits_rows.push((si, None, true));
            }
        }
        b
    }

    /// Runs one step: the model once over every scheduled token, then sampling.
    pub fn execute(&mut self, out: &SchedulerOutput, sched: &Scheduler) -> Vec<StepResult> {
        let mut results: Vec<StepResult> = out.scheduled.iter().map(|_| StepResult::default()).collect();
        if out.scheduled.is_empty() {
            return results;
        }
        let b = self.flatten(out, sched);
        let seqs = out
            .scheduled
            .iter()
            .enumerate()
            .map(|(i, s)| SeqAttention {
                query_start: b.query_start_loc[i],
                query_len: s.token_ids.len(),
                seq_len: b.seq_lens[i],
                block_table: &s.block_ids,
            })
            .collect();
        let batch = ForwardBatch {
            input_ids: &b.input_ids,
            positions: &b.positions,
            slot_mapping: &b.slot_mapping,
            seqs,
            logits_indices: &b.logits_indices,
        };
        self.model.forward_into(&batch, &mut self.kv, &mut self.logits);
        let vocab = self.model.info().vocab_size;
        let mut samples = Vec::new();
        for (row, &(si, prompt_pos, is_sample)) in self.logits.chunks_exact_mut(vocab).zip(&b.logits_rows) {
            let s = &out.scheduled[si];
            if let Some(p) = prompt_pos {
                let req = sched.request(&s.request_id).expect("scheduled request is live");
                let state = self.states.get_mut(&s.request_id).expect("runner knows every request");
                let k = state.params.prompt_logprobs.unwrap_or(0);
                let lp = sampler::log_softmax(row);
                let target = req.prompt_token_ids()[p];
                if state.prompt_logprobs.len() <= p {
                    state.prompt_logprobs.resize(p + 1, None);
                }
                state.prompt_logprobs[p] = Some(sampler::gather_logprobs(&lp, target, k));
            }
            if is_sample {
                samples.push((si, row));
            }
        }
        let mut states: HashMap<&str, &mut RequestState> =
            self.states.iter_mut().map(|(k, v)| (k.as_str(), v)).collect();
        let jobs: Vec<_> = samples
            .into_iter()
            .map(|(si, row)| {
                let id = out.scheduled[si].request_id.as_str();
                let state = states.remove(id).expect("a request samples once a step");
                let req = sched.request(id).expect("scheduled request is live");
                std::sync::Mutex::new((si, row, state, req, None))
            })
            .collect();
        // Rows are sampled in parallel (each request's own generator: the same tokens whatever
        // thread draws them); a batch-32 step spent ~2 % of its time here on one thread.
        let mode = self.logprobs_mode;
        vllm_rs_kernels::pool::global().run(jobs.len(), &|i| {
            let mut job = jobs[i].lock().unwrap_or_else(|e| e.into_inner());
            let (_, row, state, req, sampled) = &mut *job;
            let ctx = SampleContext {
                prompt: req.prompt_token_ids(),
                output: req.output_token_ids(),
                all_stop_token_ids: &state.all_stop_token_ids,
                rng: &mut state.rng,
            };
            *sampled = Some(sampler::sample(row, &state.params, ctx, mode));
        });
        for job in jobs {
            let (si, _, state, req, sampled) = job.into_inner().unwrap_or_else(|e| e.into_inner());
            let (tok, lp) = sampled.expect("every job ran");
            results[si].token = Some(tok);
            results[si].logprobs = lp;
            if state.params.prompt_logprobs.is_some() && !state.prompt_logprobs_sent {
                state.prompt_logprobs.resize(req.prompt_len, None);
                results[si].prompt_logprobs = Some(std::mem::take(&mut state.prompt_logprobs));
                state.prompt_logprobs_sent = true;
            }
        }
        results
    }
}
