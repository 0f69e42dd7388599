//! The model runner: flattens a scheduled step into one batch, runs the model once, samples.

use crate::draft_model::{DraftJob, Drafter};
use crate::engine_core::EngineConfig;
use crate::head_drafter::{HeadDrafter, HeadJob};
use crate::sampler::{self, SampleContext, TokenLogprobs};
use crate::sampling_params::{LogprobsMode, SamplingParams};
use crate::speculative::SpeculativeConfig;
use crate::structured_output::GrammarState;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use vllm_rs_core::{GroupBlockIds, KvCacheLayout, ScheduledRequest, SchedulerOutput};
use vllm_rs_kernels::attention::{KvCache, SeqAttention};
use vllm_rs_models::{ForwardBatch, GroupBatch, Model, Workspace};

/// Per-request state that lives as long as the request (across preemptions): sampling state
/// and the runner's own copy of the tokens and block tables, kept up to date from the
/// scheduler's diffs and from what it samples (vLLM's `CachedRequestState`).
struct RequestState {
    params: SamplingParams,
    rng: ChaCha8Rng,
    all_stop_token_ids: Vec<u32>,
    /// Prompt followed by the tokens sampled so far.
    token_ids: Vec<u32>,
    prompt_len: usize,
    /// The block table of each KV cache group.
    block_ids: GroupBlockIds,
    /// Prompt logprobs gathered so far (index = prompt position; position 0 has none).
    prompt_logprobs: Vec<Option<TokenLogprobs>>,
    prompt_logprobs_sent: bool,
    /// Structured output: where this sequence is in its grammar (kept across preemptions, as
    /// the tokens it has seen are).
    grammar: Option<GrammarState>,
}

impl RequestState {
    /// Applies a step's news: the prompt (first time), or new blocks (whole tables on resume).
    fn apply(&mut self, s: &ScheduledRequest) {
        if let Some(prompt) = &s.new_prompt_token_ids {
            self.prompt_len = prompt.len();
            self.token_ids.clone_from(prompt);
        }
        if s.new_prompt_token_ids.is_some() || s.resumed_from_preemption {
            self.block_ids.clone_from(&s.new_block_ids);
        } else {
            self.block_ids.iter_mut().zip(&s.new_block_ids).for_each(|(t, new)| t.extend_from_slice(new));
        }
    }

    fn prompt(&self) -> &[u32] {
        &self.token_ids[..self.prompt_len]
    }
}

/// What one scheduled request got out of a step.
#[derive(Debug, Default)]
pub struct StepResult {
    /// The new tokens: none (a prefill chunk), one, or the accepted drafts and one more.
    pub tokens: Vec<u32>,
    /// One entry per new token when `logprobs` was requested.
    pub logprobs: Vec<TokenLogprobs>,
    /// Drafts proposed for the next step (speculative decoding).
    pub spec_token_ids: Vec<u32>,
    /// Every prompt position's logprobs, once the whole prompt has been computed.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
}

pub struct ModelRunner {
    pub model: Box<dyn Model>,
    pub kv: KvCache,
    states: HashMap<String, RequestState>,
    logprobs_mode: LogprobsMode,
    /// Per KV cache group: whether it is paged (else it holds one recurrent state slot).
    paged_groups: Vec<bool>,
    speculative: Option<SpeculativeConfig>,
    /// The drafter with weights (`draft_model`, `mtp`) and the KV cache group whose block
    /// tables it shares.
    drafter: Option<(Proposer, usize)>,
    /// What the drafter takes in before the next step ([`ModelRunner::propose_drafts`]).
    pending: Vec<PendingDraft>,
    /// Whether that waits for the next step ([`ModelRunner::drafts_wait`]).
    drafts_wait: bool,
    /// Models with recurrent layers under speculation: the first of the state slots that keep
    /// the states after each draft (`k` per drafting request, past the scheduler's slots).
    draft_states: Option<u32>,
    max_model_len: usize,
    /// The flat batch of the last step (kept for its allocations).
    batch: FlatBatch,
    /// The model's scratch buffers and the last step's logits (kept for their allocations).
    workspace: Workspace,
    logits: Vec<f32>,
}

/// One request's share of the drafter's work left from the last step: at most `limit` drafts;
/// for a draft head, also the target rows `rows` (positions `first_position..`) it takes in.
struct PendingDraft {
    request_id: String,
    rows: std::ops::Range<usize>,
    first_position: usize,
    limit: usize,
}

/// A drafter with weights of its own.
pub enum Proposer {
    /// A smaller model of the same vocabulary (`draft_model`).
    Model(Box<Drafter>),
    /// A draft head on the target's hidden states (`mtp`, `eagle3`).
    Head(Box<HeadDrafter>),
}

/// The flat batch of one step, in vLLM's names.
#[derive(Default)]
struct FlatBatch {
    input_ids: Vec<u32>,
    positions: Vec<u32>,
    /// Per KV cache group: the slot each row writes to.
    slot_mapping: Vec<Vec<usize>>,
    query_start_loc: Vec<usize>,
    seq_lens: Vec<usize>,
    logits_indices: Vec<usize>,
    /// Recurrent-state snapshots to save: (row, state slot).
    state_saves: Vec<(usize, u32)>,
    /// For each logits row: (scheduled index, prompt position it predicts, is the sample row).
    logits_rows: Vec<(usize, Option<usize>, bool)>,
    /// Requests with drafts whose recurrent states are saved after each draft row: (scheduled
    /// index, first of their `k` slots).
    draft_state_slots: Vec<(usize, u32)>,
}

impl FlatBatch {
    /// Empties every list, keeping the allocations.
    fn clear(&mut self, num_kv_groups: usize) {
        self.input_ids.clear();
        self.positions.clear();
        self.slot_mapping.resize_with(num_kv_groups, Vec::new);
        self.slot_mapping.iter_mut().for_each(Vec::clear);
        self.query_start_loc.clear();
        self.seq_lens.clear();
        self.logits_indices.clear();
        self.logits_rows.clear();
        self.state_saves.clear();
        self.draft_state_slots.clear();
    }
}

impl ModelRunner {
    pub fn new(model: Box<dyn Model>, c: &EngineConfig, layout: &KvCacheLayout) -> Self {
        // Elements per position of each paged tensor's K and V rows, from a layer that uses it.
        let mut rows = vec![[0; 2]; layout.tensor_page_elements.len()];
        for (layer, &t) in layout.layer_tensor.iter().enumerate() {
            let spec = layout.groups[layout.layer_group[layer]].spec;
            if spec.is_paged() {
                rows[t] = spec.row_elements();
            }
        }
        // Recurrent layers: a state per request slot (the scheduler hands out `max_num_seqs`),
        // then the prefix cache's snapshots, then under speculation `k` per request that can
        // have drafts (the states after each draft, for rolling back rejected ones).
        let states: Vec<usize> = layout.layer_group.iter().map(|&g| layout.groups[g].spec.state_elements()).collect();
        let recurrent = layout.groups.iter().any(|g| !g.spec.is_paged());
        let scheduler_slots = c.max_num_seqs + c.num_state_snapshots;
        let draft_slots = if recurrent { draft_state_slots(c) } else { 0 };
        let kv = KvCache::with_layout(
            c.num_blocks,
            c.block_size,
            c.kv_cache_dtype,
            &rows,
            &layout.layer_tensor,
            &layout.layer_group,
        )
        .with_states(&states, scheduler_slots + draft_slots);
        ModelRunner {
            model,
            kv,
            states: HashMap::new(),
            logprobs_mode: c.logprobs_mode,
            paged_groups: layout.groups.iter().map(|g| g.spec.is_paged()).collect(),
            speculative: c.speculative_config.clone(),
            drafter: None,
            pending: Vec::new(),
            drafts_wait: false,
            draft_states: (draft_slots > 0).then_some(scheduler_slots as u32),
            max_model_len: c.max_model_len,
            batch: FlatBatch::default(),
            workspace: Workspace::default(),
            logits: Vec::new(),
        }
    }

    /// Registers a request's sampling state. `all_stop_token_ids` are masked until `min_tokens`.
    /// Its tokens and blocks arrive with its first scheduled step.
    pub fn add_request(&mut self, id: &str, params: SamplingParams, all_stop_token_ids: Vec<u32>) {
        let rng = match params.seed {
            Some(s) => ChaCha8Rng::seed_from_u64(s),
            None => ChaCha8Rng::from_rng(&mut rand::rng()),
        };
        let grammar =
            GrammarState::for_request(params.grammar.as_ref(), params.grammar_after_token, params.thinking_budget);
        let state = RequestState {
            grammar,
            params,
            rng,
            all_stop_token_ids,
            token_ids: Vec::new(),
            prompt_len: 0,
            block_ids: Vec::new(),
            prompt_logprobs: Vec::new(),
            prompt_logprobs_sent: false,
        };
        self.states.insert(id.to_string(), state);
    }

    pub fn remove_request(&mut self, id: &str) {
        self.states.remove(id);
        self.pending.retain(|p| p.request_id != id); // its id may come back as a new request
        if let Some((Proposer::Model(d), _)) = &mut self.drafter {
            d.remove(id);
        }
    }

    /// Proposes drafts with `drafter`, over the block tables of KV cache group `group`.
    pub fn set_drafter(&mut self, drafter: Proposer, group: usize) {
        if let Proposer::Head(h) = &drafter {
            self.workspace.aux_layers = h.aux_layers().to_vec();
        }
        self.drafter = Some((drafter, group));
    }

    pub fn num_requests(&self) -> usize {
        self.states.len()
    }

    /// Takes in the step's news and lays out its flat batch.
    fn prepare(&mut self, out: &SchedulerOutput) {
        let bs = self.kv.block_size;
        let b = &mut self.batch;
        b.clear(self.paged_groups.len());
        for (si, s) in out.scheduled.iter().enumerate() {
            let state = self.states.get_mut(&s.request_id).expect("runner knows every request");
            state.apply(s);
            if let Some((Proposer::Model(d), _)) = &mut self.drafter
                && (s.new_prompt_token_ids.is_some() || s.resumed_from_preemption)
            {
                d.reset(&s.request_id); // new blocks: the draft cache holds nothing of it
            }
            let start_row = b.input_ids.len();
            let (start, n) = (s.num_computed_tokens, s.num_scheduled_tokens);
            b.query_start_loc.push(start_row);
            let known = n - s.spec_token_ids.len();
            b.input_ids.extend_from_slice(&state.token_ids[start..start + known]);
            b.input_ids.extend_from_slice(&s.spec_token_ids);
            for pos in start..start + n {
                b.positions.push(pos as u32);
                // Recurrent groups hold a state slot, not positions: no slots to write.
                for ((slots, table), _) in
                    b.slot_mapping.iter_mut().zip(&state.block_ids).zip(&self.paged_groups).filter(|(_, p)| **p)
                {
                    slots.push(table[pos / bs] as usize * bs + pos % bs);
                }
            }
            b.seq_lens.push(start + n);
            b.state_saves.extend(s.state_saves.iter().map(|&(pos, slot)| (start_row + pos - 1 - start, slot)));
            if let Some(first) = self.draft_states.filter(|_| !s.spec_token_ids.is_empty()) {
                // The state after the last known token and after each draft but the last (the
                // request's own slot ends after that one), in this request's `k` slots.
                let k = self.speculative.as_ref().map_or(0, |c| c.num_speculative_tokens);
                let base = first + (b.draft_state_slots.len() * k) as u32;
                let last_known = start_row + known - 1;
                b.state_saves.extend((0..s.spec_token_ids.len()).map(|j| (last_known + j, base + j as u32)));
                b.draft_state_slots.push((si, base));
            }
            if let Some(src) = s.state_restore {
                // A prefix-cache hit: the saved state at the hit's end becomes the request's.
                let g = recurrent_group(&self.paged_groups);
                self.kv.copy_state(src as usize, state.block_ids[g][0] as usize);
            }
            if state.params.prompt_logprobs.is_some() && !state.prompt_logprobs_sent {
                // Row at position p predicts prompt token p + 1.
                for j in 0..n {
                    let next = start + j + 1;
                    if next < state.prompt_len {
                        b.logits_indices.push(start_row + j);
                        b.logits_rows.push((si, Some(next), false));
                    }
                }
            }
            if s.sample {
                // The last known token's row, then one row per draft.
                for row in start_row + known - 1..start_row + n {
                    b.logits_indices.push(row);
                    b.logits_rows.push((si, None, true));
                }
            }
        }
    }

    /// Runs one step: the model once over every scheduled token, then sampling. Sampled tokens
    /// are appended to the runner's own copy of each request's tokens.
    pub fn execute(&mut self, out: &SchedulerOutput) -> Vec<StepResult> {
        let mut results: Vec<StepResult> = out.scheduled.iter().map(|_| StepResult::default()).collect();
        if out.scheduled.is_empty() {
            return results;
        }
        self.prepare(out);
        let b = &self.batch;
        let states = &self.states;
        let groups = b
            .slot_mapping
            .iter()
            .enumerate()
            .map(|(g, slot_mapping)| GroupBatch {
                slot_mapping,
                seqs: out
                    .scheduled
                    .iter()
                    .enumerate()
                    .map(|(i, s)| SeqAttention {
                        query_start: b.query_start_loc[i],
                        query_len: s.num_scheduled_tokens,
                        seq_len: b.seq_lens[i],
                        block_table: &states[&s.request_id].block_ids[g],
                    })
                    .collect(),
            })
            .collect();
        let batch = ForwardBatch {
            input_ids: &b.input_ids,
            positions: &b.positions,
            groups,
            logits_indices: &b.logits_indices,
            state_saves: &b.state_saves,
        };
        self.model.forward_with(&batch, &mut self.kv, &mut self.workspace, &mut self.logits);
        let vocab = self.model.info().vocab_size;
        let be = self.workspace.backend;
        // Each sampling request's rows: its last known token's, then one per draft.
        let mut samples: Vec<(usize, Vec<&mut [f32]>)> = Vec::new();
        for (row, &(si, prompt_pos, is_sample)) in self.logits.chunks_exact_mut(vocab).zip(&self.batch.logits_rows) {
            let s = &out.scheduled[si];
            if let Some(p) = prompt_pos {
                let state = self.states.get_mut(&s.request_id).expect("runner knows every request");
                let k = state.params.prompt_logprobs.unwrap_or(0);
                let lp = be.log_softmax(row);
                let target = state.token_ids[p];
                if state.prompt_logprobs.len() <= p {
                    state.prompt_logprobs.resize(p + 1, None);
                }
                state.prompt_logprobs[p] = Some(sampler::gather_logprobs(&lp, target, k));
            }
            if is_sample {
                match samples.last_mut() {
                    Some((last, rows)) if *last == si => rows.push(row),
                    _ => samples.push((si, vec![row])),
                }
            }
        }
        let mut states: HashMap<&str, &mut RequestState> =
            self.states.iter_mut().map(|(k, v)| (k.as_str(), v)).collect();
        let jobs: Vec<_> = samples
            .into_iter()
            .map(|(si, rows)| {
                let id = out.scheduled[si].request_id.as_str();
                let state = states.remove(id).expect("a request samples once a step");
                std::sync::Mutex::new((si, rows, state, Vec::new()))
            })
            .collect();
        // Rows are sampled in parallel (each request's own generator: the same tokens whatever
        // thread draws them); a batch-32 step spent ~2 % of its time here on one thread.
        let mode = self.logprobs_mode;
        vllm_rs_kernels::pool::global().run(jobs.len(), &|i| {
            let mut job = jobs[i].lock().unwrap_or_else(|e| e.into_inner());
            let (si, rows, state, sampled) = &mut *job;
            let drafts = &out.scheduled[*si].spec_token_ids;
            *sampled = verify(rows, drafts, state, mode);
        });
        // Drafts for the next step, unless the batch is too large for them to pay.
        let spec =
            self.speculative.as_ref().filter(|c| c.disable_by_batch_size.is_none_or(|m| out.scheduled.len() <= m));
        let mut draft_jobs = Vec::new();
        for job in jobs {
            let (si, _, state, sampled) = job.into_inner().unwrap_or_else(|e| e.into_inner());
            let r = &mut results[si];
            for (tok, lp) in sampled {
                r.tokens.push(tok);
                r.logprobs.extend(lp);
            }
            if let Some(&(_, base)) = self.batch.draft_state_slots.iter().find(|(i, _)| *i == si) {
                // A rejected draft: the state after the last accepted token becomes the request's.
                let accepted = r.tokens.len() - 1;
                if accepted < out.scheduled[si].spec_token_ids.len() {
                    let g = recurrent_group(&self.paged_groups);
                    self.kv.copy_state((base as usize) + accepted, state.block_ids[g][0] as usize);
                }
            }
            if state.params.prompt_logprobs.is_some() && !state.prompt_logprobs_sent {
                state.prompt_logprobs.resize(state.prompt().len(), None);
                r.prompt_logprobs = Some(std::mem::take(&mut state.prompt_logprobs));
                state.prompt_logprobs_sent = true;
            }
            // Constrained requests draft too: `verify` masks each row by the grammar after the
            // tokens before it, and drafts the grammar refuses are cut before they are verified.
            if let Some(c) = spec {
                // Never past max_tokens or the context: the last token of either is the model's.
                let left = state.params.max_tokens.saturating_sub(state.token_ids.len() - state.prompt_len);
                let room = self.max_model_len.saturating_sub(state.token_ids.len());
                let limit = left.min(room).saturating_sub(1);
                match &self.drafter {
                    Some(_) => draft_jobs.push((si, limit)),
                    None => r.spec_token_ids = allowed(state, c.propose(&state.token_ids, limit)),
                }
            }
        }
        // A drafting request whose prompt (or a resumed one's tokens) came in this step: the
        // draft model's pass over it takes long.
        let prompt_in = |&(si, _): &(usize, usize)| {
            let s = &out.scheduled[si];
            s.num_scheduled_tokens - s.spec_token_ids.len() > 1
        };
        self.drafts_wait = matches!(self.drafter, Some((Proposer::Model(_), _))) && draft_jobs.iter().any(prompt_in);
        self.pending = match &self.drafter {
            Some((Proposer::Model(_), _)) => draft_jobs
                .iter()
                .map(|&(si, limit)| PendingDraft {
                    request_id: out.scheduled[si].request_id.clone(),
                    rows: 0..0,
                    first_position: 0,
                    limit,
                })
                .collect(),
            Some((Proposer::Head(_), _)) => head_jobs(&self.batch.query_start_loc, out, &results, &draft_jobs),
            None => Vec::new(),
        };
        results
    }

    /// Whether the last step's drafting should wait for the start of the next step rather
    /// than end this one: it brought a prompt that the draft model has to go over, so its
    /// tokens (a request's first) should reach the client before that pass, not after it.
    /// Otherwise drafting ends the step: a client's work on the step's tokens then overlaps
    /// the target's verification, not the draft model's short steps, which it slowed by
    /// ~10 % (Qwen2.5-1.5B with a 0.5B draft, two cores).
    pub fn drafts_wait(&self) -> bool {
        self.drafts_wait
    }

    /// Drafts from the drafter with weights for the requests of the last step that are still
    /// here (a request's share goes with [`ModelRunner::remove_request`]), at the end of that
    /// step or at the start of the next ([`ModelRunner::drafts_wait`]). A draft head reads the
    /// last step's hidden states, which stay in the workspace until the next forward.
    pub fn propose_drafts(&mut self) -> Vec<(String, Vec<u32>)> {
        let pending = std::mem::take(&mut self.pending);
        let Some((proposer, group)) = self.drafter.as_mut().filter(|_| !pending.is_empty()) else {
            return Vec::new();
        };
        // Each request's tokens and its block table in the drafter's group.
        let (states, group) = (&self.states, *group);
        let seen = |p: &PendingDraft| {
            let st = &states[&p.request_id];
            (&st.token_ids[..], &st.block_ids[group][..])
        };
        let drafts = match proposer {
            Proposer::Model(drafter) => {
                let jobs: Vec<DraftJob> = (pending.iter())
                    .map(|p| {
                        let (tokens, block_table) = seen(p);
                        DraftJob { request_id: &p.request_id, tokens, block_table, limit: p.limit }
                    })
                    .collect();
                drafter.propose(&jobs)
            }
            Proposer::Head(head) => {
                let jobs: Vec<HeadJob> = (pending.iter())
                    .map(|p| {
                        let (tokens, block_table) = seen(p);
                        let (rows, first_position, limit) = (p.rows.clone(), p.first_position, p.limit);
                        HeadJob { tokens, block_table, rows, first_position, limit }
                    })
                    .collect();
                head.propose(&self.workspace, &jobs)
            }
        };
        let states = &mut self.states;
        let cut = |(id, d): (String, Vec<u32>)| {
            let d = allowed(states.get_mut(&id).expect("runner knows every request"), d);
            (id, d)
        };
        pending.into_iter().map(|p| p.request_id).zip(drafts).map(cut).collect()
    }
}

/// `drafts` cut before the first one the request's grammar refuses, as vLLM validates them
/// (a refused draft would be rejected by its row's mask, and the rows after it wasted).
fn allowed(state: &mut RequestState, mut drafts: Vec<u32>) -> Vec<u32> {
    if let Some(g) = &mut state.grammar {
        drafts.truncate(g.valid_drafts(&drafts));
    }
    drafts
}

/// The KV cache group of the recurrent layers (a request's table there is its state slot);
/// asked only of models that have them.
fn recurrent_group(paged_groups: &[bool]) -> usize {
    paged_groups.iter().position(|p| !p).expect("a model with recurrent layers has a recurrent group")
}

/// State slots a model with recurrent layers needs under speculation for rolling back rejected
/// drafts: `k` per request that can have drafts in one step (every running request, unless
/// drafting stops above a batch size).
pub fn draft_state_slots(c: &EngineConfig) -> usize {
    c.speculative_config.as_ref().map_or(0, |s| {
        s.num_speculative_tokens * s.disable_by_batch_size.map_or(c.max_num_seqs, |m| m.min(c.max_num_seqs))
    })
}

/// Every scheduled request's rows a draft head takes in (those whose next token is now known:
/// a prefill chunk's all, else the last known token's and the accepted drafts'), with the
/// drafts wanted (`draft_jobs`: (scheduled index, limit)); `starts`: each request's first row.
fn head_jobs(
    starts: &[usize],
    out: &SchedulerOutput,
    results: &[StepResult],
    draft_jobs: &[(usize, usize)],
) -> Vec<PendingDraft> {
    let head_job = |(si, s): (usize, &ScheduledRequest)| {
        let known = s.num_scheduled_tokens - s.spec_token_ids.len();
        let rows = if s.sample { (known + results[si].tokens.len()).saturating_sub(1) } else { known };
        PendingDraft {
            request_id: s.request_id.clone(),
            rows: starts[si]..starts[si] + rows,
            first_position: s.num_computed_tokens,
            limit: draft_jobs.iter().find(|(i, _)| *i == si).map_or(0, |&(_, limit)| limit),
        }
    };
    out.scheduled.iter().enumerate().map(head_job).collect()
}

/// Samples a request's rows in order, appending each token to its tokens: the first row's
/// token always; each later row's only while the previous draft was kept (a row after a
/// rejected draft saw a token that is not the request's).
fn verify(
    rows: &mut [&mut [f32]],
    drafts: &[u32],
    state: &mut RequestState,
    mode: LogprobsMode,
) -> Vec<(u32, Option<TokenLogprobs>)> {
    let mut out = Vec::with_capacity(rows.len());
    for (j, row) in rows.iter_mut().enumerate() {
        let draft = drafts.get(j).copied();
        let (prompt, output) = state.token_ids.split_at(state.prompt_len);
        if let Some(g) = &mut state.grammar {
            g.apply_mask(row);
        }
        let ctx = SampleContext { prompt, output, all_stop_token_ids: &state.all_stop_token_ids, rng: &mut state.rng };
        let (tok, lp) = sampler::sample_checking_draft(row, &state.params, ctx, mode, draft);
        if let Some(g) = &mut state.grammar {
            g.accept(tok);
        }
        state.token_ids.push(tok);
        out.push((tok, lp));
        if draft != Some(tok) {
            break;
        }
    }
    out
}
