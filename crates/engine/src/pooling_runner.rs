//! The pooling runner: encoder models (embeddings, scores) on their own thread. There is no KV
//! cache and no decoding, so no scheduler: the thread takes every queued input up to the token
//! budget, runs them as one batch and answers each with its pooled vector. Inputs of many
//! concurrent requests share a batch; an input whose caller went away is skipped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use tokio::sync::oneshot;
use vllm_rs_models::{PoolingInfo, PoolingModel, PoolingWorkspace};

use vllm_rs_models::pooling::PoolingConfig;

/// What a pooling request may hold per batch.
#[derive(Clone, Copy, Debug)]
pub struct PoolingLimits {
    /// Longest input (tokens): the position table, capped by sentence-transformers'
    /// `max_seq_length` and `--max-model-len`.
    pub max_model_len: usize,
    /// Tokens per batch (`--max-num-batched-tokens`); an input longer than this runs alone.
    pub max_num_batched_tokens: usize,
    /// Inputs per batch (`--max-num-seqs`).
    pub max_num_seqs: usize,
}

type Reply = oneshot::Sender<Vec<f32>>;

/// What to compute from an input's token states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingTask {
    /// The pooled sentence vector (before any normalization).
    Embed,
    /// The classification head's logits (`*ForSequenceClassification`).
    Classify,
}

/// One input: token ids, token type ids for text pairs, and the task.
pub struct PoolingInput {
    pub token_ids: Vec<u32>,
    pub token_type_ids: Option<Vec<u32>>,
    pub task: PoolingTask,
}

enum Command {
    Pool(PoolingInput, Reply),
    Shutdown,
}

/// Counters for `/metrics` and the periodic log ([`PoolingHandle::engine_stats`]).
#[derive(Default)]
pub struct PoolingStats {
    pub inputs: AtomicU64,
    pub tokens: AtomicU64,
    pub batches: AtomicU64,
    /// Inputs queued and not answered yet, and how many of them the running batch holds.
    pub unanswered: AtomicU64,
    pub running: AtomicU64,
}

pub struct PoolingHandle {
    tx: Mutex<mpsc::Sender<Command>>,
    pub info: PoolingInfo,
    pub pooling: PoolingConfig,
    /// The classification head's labels, if the model has one.
    pub labels: Option<Vec<String>>,
    pub limits: PoolingLimits,
    pub stats: Arc<PoolingStats>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl PoolingHandle {
    /// Moves the model onto its own thread.
    pub fn spawn(model: PoolingModel, limits: PoolingLimits) -> Arc<Self> {
        let (tx, rx) = mpsc::channel();
        let info = model.info.clone();
        let pooling = model.pooling.clone();
        let labels = model.classifier.as_ref().map(|c| c.labels.clone());
        let stats = Arc::new(PoolingStats::default());
        let shared = stats.clone();
        let thread = std::thread::Builder::new()
            .name("vllm-rs-pooling".into())
            .spawn(move || pooling_loop(model, limits, rx, &shared))
            .expect("spawn pooling thread");
        Arc::new(PoolingHandle {
            tx: Mutex::new(tx),
            info,
            pooling,
            labels,
            limits,
            stats,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The counters in the engine's terms (vLLM counts a pooling model's tokens as prompt
    /// tokens): inputs' tokens, batches as steps, the running batch and the queue.
    pub fn engine_stats(&self) -> crate::EngineStats {
        let s = &self.stats;
        let (unanswered, running) = (s.unanswered.load(Ordering::Relaxed), s.running.load(Ordering::Relaxed));
        crate::EngineStats {
            prompt_tokens_total: s.tokens.load(Ordering::Relaxed),
            num_steps: s.batches.load(Ordering::Relaxed),
            num_running: running as usize,
            num_waiting: unanswered.saturating_sub(running) as usize,
            ..Default::default()
        }
    }

    /// Whether the model has a classification head (classify, cross-encoder scores).
    pub fn num_labels(&self) -> Option<usize> {
        self.labels.as_ref().map(Vec::len)
    }

    /// Queues one input (at most `max_model_len` tokens, not empty; `Classify` only on a model
    /// with a head); its vector (pooled before normalization, or logits) arrives on the
    /// returned channel, which closes without a value only if the runner stopped.
    pub fn pool(&self, input: PoolingInput) -> oneshot::Receiver<Vec<f32>> {
        let n = input.token_ids.len();
        assert!(n > 0 && n <= self.limits.max_model_len, "checked by the caller");
        assert!(input.token_type_ids.as_ref().is_none_or(|t| t.len() == n));
        assert!(input.task == PoolingTask::Embed || self.labels.is_some());
        let (reply, rx) = oneshot::channel();
        self.stats.unanswered.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(Command::Pool(input, reply));
        rx
    }

    pub fn is_alive(&self) -> bool {
        self.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread after the batch it runs.
    pub fn shutdown(&self) {
        let _ = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(Command::Shutdown);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn pooling_loop(model: PoolingModel, limits: PoolingLimits, rx: mpsc::Receiver<Command>, stats: &PoolingStats) {
    let mut ws = PoolingWorkspace::default();
    let mut pending: Option<(PoolingInput, Reply)> = None;
    loop {
        let first = match pending.take() {
            Some(p) => p,
            None => match rx.recv() {
                Ok(Command::Pool(input, reply)) => (input, reply),
                Ok(Command::Shutdown) | Err(_) => return,
            },
        };
        let mut batch = vec![first];
        let mut tokens = batch[0].0.token_ids.len();
        let mut stop = false;
        while batch.len() < limits.max_num_seqs {
            match rx.try_recv() {
                Ok(Command::Pool(input, reply)) if tokens + input.token_ids.len() <= limits.max_num_batched_tokens => {
                    tokens += input.token_ids.len();
                    batch.push((input, reply));
                }
                Ok(Command::Pool(input, reply)) => {
                    pending = Some((input, reply));
                    break;
                }
                Ok(Command::Shutdown) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        run_batch(&model, batch, &mut ws, stats);
        if stop {
            return;
        }
    }
}

/// Encodes the inputs whose callers still wait, pools (or classifies) each, answers each.
fn run_batch(model: &PoolingModel, batch: Vec<(PoolingInput, Reply)>, ws: &mut PoolingWorkspace, stats: &PoolingStats) {
    let taken = batch.len() as u64;
    let batch: Vec<_> = batch.into_iter().filter(|(_, reply)| !reply.is_closed()).collect();
    stats.running.store(batch.len() as u64, Ordering::Relaxed);
    answer_batch(model, batch, ws, stats);
    stats.running.store(0, Ordering::Relaxed);
    stats.unanswered.fetch_sub(taken, Ordering::Relaxed);
}

/// [`run_batch`]'s work on the inputs whose callers still wait.
fn answer_batch(
    model: &PoolingModel,
    batch: Vec<(PoolingInput, Reply)>,
    ws: &mut PoolingWorkspace,
    stats: &PoolingStats,
) {
    if batch.is_empty() {
        return;
    }
    let lens: Vec<usize> = batch.iter().map(|(i, _)| i.token_ids.len()).collect();
    let ids: Vec<u32> = batch.iter().flat_map(|(i, _)| i.token_ids.iter().copied()).collect();
    let types: Option<Vec<u32>> = batch.iter().any(|(i, _)| i.token_type_ids.is_some()).then(|| {
        let zeros = |i: &PoolingInput| vec![0; i.token_ids.len()];
        batch.iter().flat_map(|(i, _)| i.token_type_ids.clone().unwrap_or_else(|| zeros(i))).collect()
    });
    let d = model.info.hidden_size;
    let be = ws.backend();
    let hidden = model.forward(&ids, types.as_deref(), &lens, ws);
    let mut start = 0;
    let (mut scratch, mut logits) = (Vec::new(), Vec::new());
    for ((input, reply), len) in batch.into_iter().zip(&lens) {
        let rows = &hidden[start * d..(start + len) * d];
        start += len;
        let mut v = Vec::with_capacity(d);
        match (input.task, &model.classifier) {
            (PoolingTask::Classify, Some(head)) => {
                head.logits(be, rows, &mut scratch, &mut logits);
                v.extend_from_slice(&logits);
            }
            _ => model.pooling.pooling_type.pool(rows, d, &mut v),
        }
        let _ = reply.send(v);
    }
    stats.inputs.fetch_add(lens.len() as u64, Ordering::Relaxed);
    stats.tokens.fetch_add(ids.len() as u64, Ordering::Relaxed);
    stats.batches.fetch_add(1, Ordering::Relaxed);
}
