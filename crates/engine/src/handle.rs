//! The engine thread and the handle the server talks to it through.
//!
//! The thread owns the [`EngineCore`]; nothing else touches it. Callers send commands over a
//! channel and get each request's outputs on its own stream. Dropping a stream before the
//! request finished aborts it, which frees its KV blocks. That abort names the request by id and
//! by the stream that added it: a stream whose own request was refused (say, a duplicate id) can
//! never abort another caller's request with the same id.

use crate::engine_core::{EngineConfig, EngineCore, EngineError, EngineRequest, RequestOutput};
use crate::stats::EngineStats;
use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use vllm_rs_core::FinishReason;
use vllm_rs_models::ModelInfo;

type OutputSender = UnboundedSender<Result<RequestOutput, EngineError>>;
type Failure = Arc<Mutex<Option<String>>>;

enum Command {
    /// A request, where its outputs go, and the number of the stream that added it.
    Add(Box<EngineRequest>, OutputSender, u64),
    Abort(Vec<String>),
    /// Stream `1` went away before its request finished: abort the request `0` if that stream
    /// added it (and it still runs).
    Cancel(String, u64),
    Shutdown,
}

pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    stats: Arc<Mutex<EngineStats>>,
    pub config: EngineConfig,
    pub model_info: ModelInfo,
    thread: Mutex<Option<JoinHandle<()>>>,
    next_stream: AtomicU64,
    /// Why the engine stopped, if a step failed.
    failure: Failure,
}

impl EngineHandle {
    /// Moves the core onto its own thread.
    pub fn spawn(core: EngineCore) -> Arc<Self> {
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(core.stats.clone()));
        let config = core.config.clone();
        let model_info = core.model().info().clone();
        let shared = stats.clone();
        let failure = Failure::default();
        let failed = failure.clone();
        let thread = std::thread::Builder::new()
            .name("vllm-rs-engine".into())
            .spawn(move || engine_loop(core, rx, shared, failed))
            .expect("spawn engine thread");
        Arc::new(EngineHandle {
            tx,
            stats,
            config,
            model_info,
            thread: Mutex::new(Some(thread)),
            next_stream: AtomicU64::new(0),
            failure,
        })
    }

    /// Queues a request; its outputs arrive on the returned stream.
    pub fn add_request(&self, req: EngineRequest) -> Result<RequestStream, EngineError> {
        req.params.validate(self.model_info.vocab_size)?;
        let (out_tx, out_rx) = unbounded_channel();
        let id = req.request_id.clone();
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        self.tx.send(Command::Add(Box::new(req), out_tx, stream)).map_err(|_| self.stopped())?;
        Ok(RequestStream { request_id: id, rx: out_rx, cmd: self.tx.clone(), finished: false, stream })
    }

    /// Ends requests now (e.g. a stop string matched); their streams close.
    pub fn abort(&self, ids: Vec<String>) {
        let _ = self.tx.send(Command::Abort(ids));
    }

    /// A snapshot of the engine's counters and gauges.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the engine thread is still running (and no step has failed).
    pub fn is_alive(&self) -> bool {
        self.failure.lock().unwrap_or_else(|e| e.into_inner()).is_none()
            && self.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Why requests are refused now: the failed step's error, else a shutdown.
    fn stopped(&self) -> EngineError {
        match &*self.failure.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(msg) => EngineError::Failed(msg.clone()),
            None => EngineError::Stopped,
        }
    }

    /// Aborts everything still running and stops the thread.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// One request's outputs, in order. The last item has a `finish_reason`.
pub struct RequestStream {
    pub request_id: String,
    rx: UnboundedReceiver<Result<RequestOutput, EngineError>>,
    cmd: mpsc::Sender<Command>,
    finished: bool,
    /// Which `add_request` call made this stream.
    stream: u64,
}

impl RequestStream {
    /// The next output, or `None` once the request has finished.
    pub async fn next(&mut self) -> Option<Result<RequestOutput, EngineError>> {
        if self.finished {
            return None;
        }
        let item = self.rx.recv().await;
        self.note(&item);
        item
    }

    /// Blocking version of [`RequestStream::next`] for non-async callers.
    pub fn blocking_next(&mut self) -> Option<Result<RequestOutput, EngineError>> {
        if self.finished {
            return None;
        }
        let item = self.rx.blocking_recv();
        self.note(&item);
        item
    }

    fn note(&mut self, item: &Option<Result<RequestOutput, EngineError>>) {
        match item {
            Some(Ok(o)) if o.finish_reason.is_none() => {}
            _ => self.finished = true,
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.cmd.send(Command::Cancel(self.request_id.clone(), self.stream));
        }
    }
}

/// Running requests: where their outputs go, and which stream added them.
type Senders = HashMap<String, (u64, OutputSender)>;

fn engine_loop(mut core: EngineCore, rx: mpsc::Receiver<Command>, stats: Arc<Mutex<EngineStats>>, failure: Failure) {
    let mut senders: Senders = HashMap::new();
    loop {
        // Sleep only when there is nothing to compute.
        if !core.has_unfinished() {
            match rx.recv() {
                Ok(cmd) => {
                    if !apply(&mut core, &mut senders, cmd) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            if !apply(&mut core, &mut senders, cmd) {
                return;
            }
        }
        if core.has_unfinished() {
            // A failed step (a CUDA error panics in the backend, whose ops return nothing) ends
            // the engine: every running request gets the error rather than a silent end, new
            // ones are refused, and the handle no longer reports it alive (`/health` fails).
            let outputs = match std::panic::catch_unwind(AssertUnwindSafe(|| core.step())) {
                Ok(outputs) => outputs,
                Err(panic) => return fail(&senders, &panic, &failure),
            };
            // Publish the stats before the outputs: a client that got its last token and then
            // reads the metrics sees its request finished.
            *stats.lock().unwrap_or_else(|e| e.into_inner()) = core.stats.clone();
            let mut gone = Vec::new();
            for o in outputs {
                let id = o.request_id.clone();
                let done = o.finish_reason.is_some();
                let delivered = senders.get(&id).is_some_and(|(_, tx)| tx.send(Ok(o)).is_ok());
                if done || !delivered {
                    senders.remove(&id);
                }
                if !delivered && !done {
                    gone.push(id); // the client went away: free its blocks now
                }
            }
            if !gone.is_empty() {
                core.abort(&gone, FinishReason::Abort);
            }
        }
        *stats.lock().unwrap_or_else(|e| e.into_inner()) = core.stats.clone();
    }
}

/// Records a failed step's error and sends it to every running request.
fn fail(senders: &Senders, panic: &Box<dyn Any + Send>, failure: &Failure) {
    let msg = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a step panicked");
    tracing::error!("the engine stopped: a step failed ({msg}); {} running requests get this error", senders.len());
    *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg.to_string());
    for (_, tx) in senders.values() {
        let _ = tx.send(Err(EngineError::Failed(msg.to_string())));
    }
}

/// Applies one command; returns false on shutdown.
fn apply(core: &mut EngineCore, senders: &mut Senders, cmd: Command) -> bool {
    match cmd {
        Command::Add(req, tx, stream) => {
            let id = req.request_id.clone();
            match core.add_request(*req) {
                Ok(()) => {
                    senders.insert(id, (stream, tx));
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        }
        Command::Abort(ids) => {
            core.abort(&ids, FinishReason::Abort);
            for id in ids {
                senders.remove(&id);
            }
        }
        Command::Cancel(id, stream) => {
            if senders.get(&id).is_some_and(|(s, _)| *s == stream) {
                senders.remove(&id);
                core.abort(&[id], FinishReason::Abort);
            }
        }
        Command::Shutdown => {
            let ids: Vec<String> = senders.keys().cloned().collect();
            core.abort(&ids, FinishReason::Abort);
            return false;
        }
    }
    true
}
