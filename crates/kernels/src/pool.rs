//! A persistent thread pool for data-parallel kernels.
//!
//! One decode step runs hundreds of small parallel regions, so the cost that matters is the
//! latency of starting and joining one, not throughput. Workers spin on an epoch counter for a
//! while after each job (so back-to-back kernels start in well under a microsecond), then sleep on
//! a condition variable. The calling thread takes part in the work. Tasks are claimed from an
//! atomic counter; which thread runs a task never changes its result. On a busy machine a worker
//! that wakes late simply finds the job closed: the caller never waits for an idle worker.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = dyn Fn(usize) + Sync;

/// `gate` packs the job epoch (high 32 bits), a "closed" flag and the number of workers
/// currently inside the job. A worker may only enter (increment) while the epoch it saw is
/// current and the gate is open, so once the caller closes the gate and sees zero inside, no
/// worker can touch the job again — late or descheduled workers never hold the caller up.
const CLOSED: u64 = 1 << 31;
const ACTIVE_MASK: u64 = CLOSED - 1;

fn epoch_of(g: u64) -> u64 {
    g >> 32
}

struct Shared {
    gate: AtomicU64,
    /// The current job, lifetime-erased (fat pointer split in two words).
    job: AtomicUsize,
    job_meta: AtomicUsize,
    n_tasks: AtomicUsize,
    next_task: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    /// Workers inside (or about to enter) `wake.wait`: a job start only notifies when some are,
    /// since a notify is a system call and a decode step starts hundreds of jobs.
    sleepers: AtomicUsize,
    shutdown: AtomicUsize,
    /// The first panic of the current job's tasks, raised again on the caller (a worker that
    /// died in a task would otherwise never leave the gate, and the caller would wait forever).
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

thread_local! {
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// How long an idle worker polls before it sleeps.
const SPIN: Duration = Duration::from_millis(2);

impl ThreadPool {
    /// A pool where `n_threads` threads (the caller included) share each job.
    pub fn new(n_threads: usize) -> Self {
        let shared = Arc::new(Shared {
            gate: AtomicU64::new(CLOSED),
            job: AtomicUsize::new(0),
            job_meta: AtomicUsize::new(0),
            n_tasks: AtomicUsize::new(0),
            next_task: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicUsize::new(0),
            panic: Mutex::new(None),
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("vllm-rs-worker-{i}"))
                    .spawn(move || worker_loop(&s))
                    .expect("spawn worker thread")
            })
            .collect();
        ThreadPool { shared, workers, run_lock: Mutex::new(()) }
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(0..n_tasks)` across the pool and returns when every task has finished. A task's
    /// panic is raised again here, once every thread has left the job (the rest of its tasks
    /// may not run).
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync + '_)) {
        if n_tasks == 0 {
            return;
        }
        if n_tasks == 1 || self.workers.is_empty() || IN_POOL.with(|c| c.get()) {
            (0..n_tasks).for_each(f);
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: the pointer is only dereferenced by workers that entered the gate; we close the
        // gate and wait for all of them to leave before returning, so `f` outlives every use.
        let raw: *const (dyn Fn(usize) + Sync + '_) = f;
        let (data, meta): (usize, usize) = unsafe { std::mem::transmute(raw) };
        s.job.store(data, Ordering::Relaxed);
        s.job_meta.store(meta, Ordering::Relaxed);
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next_task.store(0, Ordering::Relaxed);
        let epoch = epoch_of(s.gate.load(Ordering::Relaxed)) + 1;
        s.gate.store(epoch << 32, Ordering::Release);
        // Pairs with the fence in `worker_loop`: either the worker sees the new epoch before it
        // waits, or we see it counted as a sleeper and notify under the lock it holds.
        fence(Ordering::SeqCst);
        if s.sleepers.load(Ordering::Relaxed) > 0 {
            let _l = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        IN_POOL.with(|c| c.set(true));
        run_tasks(s, f);
        IN_POOL.with(|c| c.set(false));
        s.gate.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        while s.gate.load(Ordering::Acquire) & ACTIVE_MASK != 0 {
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }
}

fn run_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync + '_)) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let t = s.next_task.fetch_add(1, Ordering::Relaxed);
        if t >= n {
            break;
        }
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))) {
            s.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(p);
            s.next_task.fetch_max(n, Ordering::Relaxed);
        }
    }
}

/// Enters the job of epoch `e` if it is still open; returns whether we got in.
fn enter(s: &Shared, e: u64) -> bool {
    let mut g = s.gate.load(Ordering::Acquire);
    loop {
        if epoch_of(g) != e || g & CLOSED != 0 {
            return false;
        }
        match s.gate.compare_exchange_weak(g, g + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(actual) => g = actual,
        }
    }
}

fn worker_loop(s: &Shared) {
    IN_POOL.with(|c| c.set(true));
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut polls = 0u32;
        let e = loop {
            if s.shutdown.load(Ordering::Relaxed) != 0 {
                return;
            }
            let g = s.gate.load(Ordering::Acquire);
            if epoch_of(g) != seen {
                break epoch_of(g);
            }
            polls += 1;
            if polls < 2048 {
                std::hint::spin_loop();
            } else if start.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                let guard = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if epoch_of(s.gate.load(Ordering::Acquire)) == seen && s.shutdown.load(Ordering::Relaxed) == 0 {
                    drop(s.wake.wait_timeout(guard, Duration::from_millis(100)));
                } else {
                    drop(guard);
                }
                s.sleepers.fetch_sub(1, Ordering::Relaxed);
            }
        };
        seen = e;
        if enter(s, e) {
            let data = s.job.load(Ordering::Relaxed);
            let meta = s.job_meta.load(Ordering::Relaxed);
            // SAFETY: we are inside the gate, so the caller is still waiting and `f` is alive.
            let f: &Job = unsafe { &*std::mem::transmute::<(usize, usize), *const Job>((data, meta)) };
            run_tasks(s, f);
            s.gate.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(1, Ordering::Relaxed);
        {
            let _l = self.shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

static POOL: OnceLock<ThreadPool> = OnceLock::new();

/// Sets the global pool size; must be called before the first kernel runs. Returns false if the
/// pool already exists with another size.
pub fn init_global(n_threads: usize) -> bool {
    POOL.get_or_init(|| ThreadPool::new(n_threads)).n_threads() == n_threads
}

/// The global pool: `VLLM_RS_THREADS` threads, else one per physical core.
pub fn global() -> &'static ThreadPool {
    POOL.get_or_init(|| {
        let n = std::env::var("VLLM_RS_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(physical_cores);
        ThreadPool::new(n)
    })
}

/// Values from which a row-wise op runs on the pool's threads, split by rows (below this a job's
/// start and join cost about what splitting saves).
pub const PARALLEL_VALUES: usize = 4096;

/// Rows of `row` values making at least [`PARALLEL_VALUES`]: the `min` of a row-wise [`split`].
pub fn min_rows(row: usize) -> usize {
    PARALLEL_VALUES.div_ceil(row.max(1))
}

/// Runs `f` on the global pool over contiguous ranges covering `0..n`, one per thread but none
/// shorter than `min` (so a small `n` runs on the caller alone, without a job's start and join).
pub fn split(n: usize, min: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let pool = global();
    let parts = (n / min.max(1)).clamp(1, pool.n_threads());
    if parts == 1 {
        return f(0..n);
    }
    pool.run(parts, &|t| f(t * n / parts..(t + 1) * n / parts));
}

/// [`split`] over the rows of `data` (`row` values each): `f(first_row, rows)` on each part.
/// For row-wise ops, whose results do not depend on where the rows are split.
pub fn rows_mut<T: Send>(data: &mut [T], row: usize, min_rows: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let rows = Rows::new(data, row);
    split(rows.n, min_rows, &|r| {
        // SAFETY: `split`'s ranges are disjoint.
        f(r.start, unsafe { rows.part(r) })
    });
}

/// [`rows_mut`] over two arrays of as many rows (`a_row` and `b_row` values each).
pub fn rows_mut2<A: Send, B: Send>(
    a: &mut [A],
    a_row: usize,
    b: &mut [B],
    b_row: usize,
    min_rows: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let (ra, rb) = (Rows::new(a, a_row), Rows::new(b, b_row));
    assert_eq!(ra.n, rb.n, "row counts differ");
    split(ra.n, min_rows, &|r| {
        // SAFETY: `split`'s ranges are disjoint.
        f(r.start, unsafe { ra.part(r.clone()) }, unsafe { rb.part(r) })
    });
}

/// A mutably borrowed array of `n` rows of `row` values, handed out in disjoint parts (to the
/// tasks of [`split`], which may share it).
pub struct Rows<'a, T> {
    base: *mut T,
    row: usize,
    pub n: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: parts go to one task each (the callers split disjoint ranges), so sharing the base
// among threads hands each value to one thread.
unsafe impl<T: Send> Sync for Rows<'_, T> {}

impl<'a, T> Rows<'a, T> {
    pub fn new(data: &'a mut [T], row: usize) -> Self {
        assert!(row > 0 && data.len().is_multiple_of(row), "{} values are not rows of {row}", data.len());
        Rows { base: data.as_mut_ptr(), row, n: data.len() / row, _borrow: std::marker::PhantomData }
    }

    /// Rows `r`.
    ///
    /// # Safety
    /// No other part in use overlaps `r` (ranges of one [`split`] do not).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn part(&self, r: std::ops::Range<usize>) -> &mut [T] {
        assert!(r.start <= r.end && r.end <= self.n);
        // SAFETY: within the borrowed array (the assert); disjoint from other parts (the caller).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(r.start * self.row), r.len() * self.row) }
    }
}

/// A mutably borrowed slice handed out in disjoint ranges of any length (to tasks of
/// [`ThreadPool::run`] that each own some ranges of it, e.g. one state per request and head).
pub struct Disjoint<'a, T> {
    base: *mut T,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: as for `Rows`: each range goes to one task (the callers' contract).
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    pub fn new(data: &'a mut [T]) -> Self {
        Disjoint { base: data.as_mut_ptr(), len: data.len(), _borrow: std::marker::PhantomData }
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// No other range in use overlaps this one.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len);
        // SAFETY: within the borrowed slice (the assert); disjoint from other ranges (the caller).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(start), len) }
    }
}

/// Number of physical cores (SMT siblings counted once); falls back to logical CPUs.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    #[cfg(target_os = "linux")]
    {
        let mut cores = std::collections::HashSet::new();
        for cpu in 0..logical.max(1) * 4 {
            let p = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
            let core = std::fs::read_to_string(format!("{p}/core_id"));
            let pkg = std::fs::read_to_string(format!("{p}/physical_package_id"));
            if let (Ok(c), Ok(k)) = (core, pkg) {
                cores.insert((k.trim().to_string(), c.trim().to_string()));
            }
        }
        if !cores.is_empty() {
            return cores.len().min(logical);
        }
    }
    logical
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn runs_every_task_exactly_once() {
        let pool = ThreadPool::new(3);
        for n in [1usize, 2, 7, 100] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            pool.run(n, &|t| {
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn nested_runs_serially_without_deadlock() {
        let pool = ThreadPool::new(2);
        let total = AtomicU32::new(0);
        pool.run(4, &|_| {
            pool.run(3, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 12);
    }

    #[test]
    fn a_task_panic_reaches_the_caller_and_the_pool_goes_on() {
        let pool = ThreadPool::new(2);
        for _ in 0..20 {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.run(8, &|t| {
                    if t == 5 {
                        panic!("task {t} fails");
                    }
                });
            }));
            let msg = r.expect_err("the panic is raised again").downcast::<String>().expect("a message");
            assert!(msg.contains("task 5 fails"));
        }
        let total = AtomicU32::new(0);
        pool.run(8, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(total.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn survives_idle_sleep() {
        let pool = ThreadPool::new(2);
        std::thread::sleep(SPIN * 3);
        let total = AtomicU32::new(0);
        pool.run(8, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(total.load(Ordering::Relaxed), 8);
    }
}
