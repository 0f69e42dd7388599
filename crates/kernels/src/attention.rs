//! Paged KV cache and the paged attention kernel.
//!
//! The cache of one layer is `[num_blocks × block_size × num_kv_heads × head_dim]` for K and for V.
//! A request's tokens live in the blocks its block table lists, in order; token at position `p`
//! sits in block `block_table[p / block_size]` at offset `p % block_size`.
//!
//! Attention for one query is computed in one fixed order (scores over keys in position order,
//! max, exp, sum, weighted sum of values in position order), so a query's output is the same
//! whether its tokens were prefilled in one chunk or many, alone or in a batch.

use crate::matmul::{SyncPtr, load1};
use crate::pool;
use std::ops::Range;

/// Element type of the KV cache (vLLM's `--kv-cache-dtype`). K/V are computed in f32 and
/// rounded to nearest (even) when written; reads widen them back exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    #[default]
    F32,
    F16,
    Bf16,
}

impl KvDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 | KvDtype::Bf16 => 2,
        }
    }

    /// The name vLLM gives it.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "float32",
            KvDtype::F16 => "float16",
            KvDtype::Bf16 => "bfloat16",
        }
    }

    /// Writes `src` into `dst` (`src.len() * size()` bytes) in this format.
    fn store(self, dst: &mut [u8], src: &[f32]) {
        match self {
            KvDtype::F32 => dst.chunks_exact_mut(4).zip(src).for_each(|(d, x)| d.copy_from_slice(&x.to_ne_bytes())),
            KvDtype::F16 => dst
                .chunks_exact_mut(2)
                .zip(src)
                .for_each(|(d, x)| d.copy_from_slice(&half::f16::from_f32(*x).to_bits().to_ne_bytes())),
            KvDtype::Bf16 => dst
                .chunks_exact_mut(2)
                .zip(src)
                .for_each(|(d, x)| d.copy_from_slice(&half::bf16::from_f32(*x).to_bits().to_ne_bytes())),
        }
    }
}

/// K and V storage of one cache tensor (one layer's, or shared by the same-placed layers of
/// several KV cache groups), as bytes of the cache's [`KvDtype`]. A slot holds one position's
/// row of whatever width its layer has; every layer sharing a tensor has the same width.
pub struct LayerKvCache {
    pub k: Vec<u8>,
    pub v: Vec<u8>,
    pub dtype: KvDtype,
}

/// The paged KV cache of a model: its tensors, and which tensor and KV cache group each layer
/// uses (a group's layers share a block table per request; see `vllm_rs_core::KvCacheLayout`).
pub struct KvCache {
    pub num_blocks: usize,
    pub block_size: usize,
    pub dtype: KvDtype,
    pub tensors: Vec<LayerKvCache>,
    layer_tensor: Vec<usize>,
    layer_group: Vec<usize>,
    /// Per layer: the recurrent state of every slot (`slots × state_elements[layer]`, f32);
    /// empty for paged layers.
    states: Vec<Vec<f32>>,
    state_elements: Vec<usize>,
    /// A device backend's mirror of the K/V tensors, made at start-up by its
    /// [`crate::Backend::prepare_kv`]. The host tensors are written too, so a backend may read
    /// either.
    pub device: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl KvCache {
    /// One group of `num_layers` alike layers, a tensor each.
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        num_kv_heads: usize,
        head_dim: usize,
        dtype: KvDtype,
    ) -> Self {
        let row = num_kv_heads * head_dim;
        let layers: Vec<usize> = (0..num_layers).collect();
        KvCache::with_layout(num_blocks, block_size, dtype, &vec![[row; 2]; num_layers], &layers, &vec![0; num_layers])
    }

    /// Tensors of `tensor_rows[i]` = `[K, V]` elements per position (V 0 for multi-head latent
    /// attention, whose values are read from the K rows); layer `l` reads and writes tensor
    /// `layer_tensor[l]` with the block tables of group `layer_group[l]`.
    pub fn with_layout(
        num_blocks: usize,
        block_size: usize,
        dtype: KvDtype,
        tensor_rows: &[[usize; 2]],
        layer_tensor: &[usize],
        layer_group: &[usize],
    ) -> Self {
        let tensors = tensor_rows
            .iter()
            .map(|[k, v]| {
                let bytes = |row| num_blocks * block_size * row * dtype.size();
                LayerKvCache { k: vec![0; bytes(k)], v: vec![0; bytes(v)], dtype }
            })
            .collect();
        KvCache {
            num_blocks,
            block_size,
            dtype,
            tensors,
            layer_tensor: layer_tensor.to_vec(),
            layer_group: layer_group.to_vec(),
            states: Vec::new(),
            state_elements: Vec::new(),
            device: None,
        }
    }

    /// Gives the layers with `state_elements[l] > 0` (recurrent layers) a state of that many
    /// f32 values for each of `num_slots` requests.
    pub fn with_states(mut self, state_elements: &[usize], num_slots: usize) -> Self {
        self.states = state_elements.iter().map(|&n| vec![0.0; n * num_slots]).collect();
        self.state_elements = state_elements.to_vec();
        self
    }

    /// Copies slot `src`'s state into slot `dst` in every recurrent layer (a saved prefix's
    /// state restored into a request's own slot).
    pub fn copy_state(&mut self, src: usize, dst: usize) {
        for (states, &n) in self.states.iter_mut().zip(&self.state_elements).filter(|(_, n)| **n > 0) {
            states.copy_within(src * n..(src + 1) * n, dst * n);
        }
    }

    /// The states of recurrent layer `layer`, slot after slot, and the elements of one.
    pub fn states_mut(&mut self, layer: usize) -> (&mut [f32], usize) {
        let n = self.state_elements.get(layer).copied().unwrap_or(0);
        assert!(n > 0, "layer {layer} keeps no recurrent state");
        (&mut self.states[layer], n)
    }

    /// The storage layer `layer` attends over.
    pub fn layer(&self, layer: usize) -> &LayerKvCache {
        &self.tensors[self.layer_tensor[layer]]
    }

    /// The index in [`KvCache::tensors`] of the tensor layer `layer` uses.
    pub fn tensor_of(&self, layer: usize) -> usize {
        self.layer_tensor[layer]
    }

    /// The KV cache group of `layer` (which block tables and slot mapping it uses).
    pub fn group_of(&self, layer: usize) -> usize {
        self.layer_group[layer]
    }

    /// Writes the K/V rows of a batch (`[tokens × kv_heads × head_dim]`) into their slots; `v`
    /// empty for a tensor without V rows (multi-head latent attention).
    pub fn write(&mut self, layer: usize, slot_mapping: &[usize], k: &[f32], v: &[f32]) {
        let Some(row) = k.len().checked_div(slot_mapping.len()) else { return };
        let rb = row * self.dtype.size();
        let cache = &mut self.tensors[self.layer_tensor[layer]];
        for (t, &slot) in slot_mapping.iter().enumerate() {
            self.dtype.store(&mut cache.k[slot * rb..(slot + 1) * rb], &k[t * row..(t + 1) * row]);
            if !v.is_empty() {
                self.dtype.store(&mut cache.v[slot * rb..(slot + 1) * rb], &v[t * row..(t + 1) * row]);
            }
        }
    }
}

/// Where one request's queries sit in the flat batch and which cached tokens they see.
pub struct SeqAttention<'a> {
    /// Rows of the flat batch holding this request's new tokens.
    pub query_start: usize,
    pub query_len: usize,
    /// Tokens in the cache after this step's writes (computed + new).
    pub seq_len: usize,
    pub block_table: &'a [u32],
}

/// Per-layer attention settings.
pub struct AttentionParams {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// Attend only to the last `w` positions (including the query's own), if set.
    pub sliding_window: Option<usize>,
    /// `tanh` soft-capping of scores (Gemma 2), if set.
    pub softcap: Option<f32>,
    /// A learned logit per query head that joins each softmax's denominator but has no value
    /// (gpt-oss's attention sinks): attention may put weight on "nothing".
    pub sinks: Option<Vec<f32>>,
}

/// `out[t, h, :] = softmax(q[t, h, :] · K[..=p]ᵀ · scale) · V[..=p]` for every new token `t`
/// (the softmax's denominator also holds `exp(sinks[h])` where the layer has sinks).
/// `q` and `out` are `[tokens × heads × head_dim]`.
pub fn paged_attention(
    q: &[f32],
    cache: &LayerKvCache,
    block_size: usize,
    seqs: &[SeqAttention],
    p: &AttentionParams,
    out: &mut [f32],
) {
    paged_attention_on(crate::isa::tier(), q, cache, block_size, seqs, p, out)
}

/// [`paged_attention`] on a given tier (tests compare tiers).
pub(crate) fn paged_attention_on(
    tier: crate::isa::Tier,
    q: &[f32],
    cache: &LayerKvCache,
    block_size: usize,
    seqs: &[SeqAttention],
    p: &AttentionParams,
    out: &mut [f32],
) {
    paged_attention_tiled(tier, TILING, q, cache, block_size, seqs, p, out)
}

/// [`paged_attention_on`] with the given [`Tiling`] (tests vary it: it must not change bits).
#[allow(clippy::too_many_arguments)]
fn paged_attention_tiled(
    tier: crate::isa::Tier,
    tiling: Tiling,
    q: &[f32],
    cache: &LayerKvCache,
    block_size: usize,
    seqs: &[SeqAttention],
    p: &AttentionParams,
    out: &mut [f32],
) {
    // One task per (request, kv heads, chunk of queries): the heads of a group share K/V reads.
    // With requests enough to keep every thread busy a task takes all kv heads, so that it
    // reads whole cache rows (its blocks are contiguous runs, which the hardware prefetcher
    // follows; a single head's share of each row is a strided stream that it follows less well).
    const CHUNK: usize = 16;
    let per_task = if seqs.len() >= 4 * pool::global().n_threads() { p.num_kv_heads } else { 1 };
    TASKS.with(|cell| {
        let mut tasks = cell.borrow_mut();
        tasks.clear();
        for (s, seq) in seqs.iter().enumerate() {
            for h0 in (0..p.num_kv_heads).step_by(per_task) {
                for c in (0..seq.query_len).step_by(CHUNK) {
                    tasks.push((s, h0..h0 + per_task, c, (c + CHUNK).min(seq.query_len)));
                }
            }
        }
        let ops = VecOps(tier);
        match cache.dtype {
            KvDtype::F32 => run_tasks::<0>(ops, tiling, q, cache, block_size, seqs, p, &tasks, out),
            KvDtype::F16 => run_tasks::<1>(ops, tiling, q, cache, block_size, seqs, p, &tasks, out),
            KvDtype::Bf16 => run_tasks::<2>(ops, tiling, q, cache, block_size, seqs, p, &tasks, out),
        }
    });
}

/// The task list of one call, kept per thread so decode steps do not allocate.
type Task = (usize, Range<usize>, usize, usize);

thread_local! {
    static TASKS: std::cell::RefCell<Vec<Task>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The tasks over a cache of element type `T` (0 f32, 1 f16, 2 bf16, as [`crate::matmul::load1`]).
#[allow(clippy::too_many_arguments)]
fn run_tasks<const T: u8>(
    vec_ops: VecOps,
    tiling: Tiling,
    q: &[f32],
    cache: &LayerKvCache,
    block_size: usize,
    seqs: &[SeqAttention],
    p: &AttentionParams,
    tasks: &[Task],
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let q_row = p.num_heads * hd;
    let kv_row = p.num_kv_heads * hd;
    let group = p.num_heads / p.num_kv_heads;
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let esize = cache.dtype.size();
    let row_bytes = kv_row * esize;
    // A cache without V rows (multi-head latent attention) takes the values from the K rows:
    // each head's output is then the weighted sum of its whole key rows, whose leading
    // columns (the latent) are the values.
    let values = if cache.v.is_empty() { &cache.k } else { &cache.v };
    pool::global().run(tasks.len(), &|ti| {
        let (s, ref kv_heads, c0, c1) = tasks[ti];
        let seq = &seqs[s];
        // Where a kv head's K and V outgrow a quarter of L2, the task's rows and the group's
        // heads go over the keys together, a tile at a time (see [`Passes`]): the tile comes
        // from memory once and every (row, head) reads it from L2 (each head streaming the whole
        // context again: Qwen2.5-0.5B decode at 3k tokens 21 % slower), and passes can take
        // queries of several rows (a group of 7 heads alone runs passes of 3, 3 and 1). Below
        // that, one row at a time keeps its scores in L1.
        let long = seq.seq_len * 2 * hd * esize > tiling.min_bytes;
        let together = if long { c1 - c0 } else { 1 };
        // Up to `per_pass` (row, head) queries a pass share each K and V row's loads (SmolLM2
        // pp512 +20 %). Untiled decode keeps one: one head's simpler loop keeps more reads in
        // flight (three heads a pass: batch-32 decode 7 % slower). Tiled, each tile's first
        // pass takes one query, which brings the tile from memory with the most reads in
        // flight, and the rest, reading it from L2, take three.
        let per_pass = if c1 - c0 > 1 || long { vec_ops.heads_per_pass(hd) } else { 1 };
        // The heads that share the tile loop: the whole group where their scores fit the
        // scratch budget (very long prompts fall back to a pass's heads).
        let at_once = if long && together * group * seq.seq_len <= tiling.max_scores { group } else { per_pass };
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            scratch.resize(together * at_once * (seq.seq_len + hd), 0.0);
            let (scores, acc) = scratch.split_at_mut(together * at_once * seq.seq_len);
            for kvh in kv_heads.clone() {
                let group_heads = kvh * group..(kvh + 1) * group;
                let kv = KvHead {
                    // SAFETY: the cache holds this kv head's columns of every row.
                    k: unsafe { cache.k.as_ptr().add(kvh * hd * esize) },
                    v: unsafe { values.as_ptr().add(kvh * hd * esize) },
                    row_bytes,
                    table: (seq.block_table, block_size),
                };
                let query = |r: usize, head: usize| {
                    let pos = seq.seq_len - seq.query_len + r;
                    let t = seq.query_start + r;
                    Query {
                        q: &q[t * q_row + head * hd..][..hd],
                        keys: p.sliding_window.map_or(0, |w| (pos + 1).saturating_sub(w))..pos + 1,
                        // SAFETY: each (token, head) output row is written by exactly one task.
                        out: unsafe { out_ptr.get().add(t * q_row + head * hd) },
                    }
                };
                for h0 in group_heads.clone().step_by(at_once) {
                    let heads = h0..(h0 + at_once).min(group_heads.end);
                    for g0 in (c0..c1).step_by(together) {
                        let rows = g0..(g0 + together).min(c1);
                        let passes = Passes {
                            ops: vec_ops,
                            p,
                            kv,
                            key_tile: tiling.keys,
                            rows,
                            heads: heads.clone(),
                            per_pass,
                            first_alone: long,
                            seq_len: seq.seq_len,
                        };
                        passes.run::<T>(&query, scores, acc);
                    }
                }
            }
        });
    });
}

/// The most (row, head) queries one pass takes (see [`VecOps::heads_per_pass`]).
const MAX_HEADS: usize = 3;

/// How a task's queries share the reads of K and V: a tile of `keys` keys (K, then V) stays in
/// L1/L2 while each of the task's queries, and each of a group's heads, reads it, instead of each
/// streaming the whole context (long prompts and long-context decode: `BENCHMARKS.md`) — where a
/// kv head's K and V hold more than `min_bytes`; below, the queries run one at a time. The
/// group's heads share the tiles while the rows' scores of all of them fit `max_scores` floats;
/// past it, a pass's heads at a time.
#[derive(Clone, Copy)]
struct Tiling {
    keys: usize,
    min_bytes: usize,
    max_scores: usize,
}

/// (`min_bytes`: 256 KiB measured 5–14 % faster than 1 MiB for prompts of 1–2k tokens and
/// decode at 1k, and no clear change at 128 KiB: BENCHMARKS.md, 2026-12-06 evening.)
const TILING: Tiling = Tiling { keys: 256, min_bytes: 1 << 18, max_scores: 1 << 21 };

/// One kv head's cache of one request: where its K and V columns start, the row stride, and
/// the block table and block size.
#[derive(Clone, Copy)]
struct KvHead<'a> {
    k: *const u8,
    v: *const u8,
    row_bytes: usize,
    table: (&'a [u32], usize),
}

/// One query row and head: its query (`head_dim` floats), the positions it attends, its output.
struct Query<'a> {
    q: &'a [f32],
    keys: Range<usize>,
    out: *mut f32,
}

/// The queries of one task's `rows` of its request and `heads` of one kv head, a tile of keys
/// at a time: up to `per_pass` (row, head) queries with the same keys in the tile a pass (the
/// first pass of each tile one alone where `first_alone`).
struct Passes<'a> {
    ops: VecOps,
    p: &'a AttentionParams,
    kv: KvHead<'a>,
    key_tile: usize,
    rows: Range<usize>,
    heads: Range<usize>,
    per_pass: usize,
    first_alone: bool,
    seq_len: usize,
}

impl Passes<'_> {
    /// Attention for each row and head: scores over the keys in order, softmax, values in key
    /// order — for each (row, head) exactly the arithmetic of a pass of its own; only the
    /// loops over queries and passes run inside the loop over tiles of keys. `scores` holds
    /// one score row of `seq_len` floats per (query row, head), `acc` `head_dim` floats each.
    fn run<'p, const T: u8>(&self, query: impl Fn(usize, usize) -> Query<'p>, scores: &mut [f32], acc: &mut [f32]) {
        let (hd, len, nh, h0) = (self.p.head_dim, self.seq_len, self.heads.len(), self.heads.start);
        let n = self.rows.len();
        let (first, end) = (query(self.rows.start, h0).keys.start, query(self.rows.end - 1, h0).keys.end);
        let tiles = (first / self.key_tile * self.key_tile..end).step_by(self.key_tile);
        // Query j is (row j / nh, head j % nh) of the task; its score row and accumulator.
        acc[..n * nh * hd].fill(0.0);
        let (sp, ap) = (scores.as_mut_ptr(), acc.as_mut_ptr());
        // SAFETY (here and below): each query's score row and accumulator lie in the scratch.
        let sc = |j: usize| unsafe { sp.add(j * len) };
        let qj = |j: usize| query(self.rows.start + j / nh, h0 + j % nh);
        for t0 in tiles.clone() {
            self.each_pass(t0..t0 + self.key_tile, &qj, |js, keys| {
                let (ops, p, q) = (self.ops, self.p, |j: usize| qj(j).q);
                match js.len() {
                    3 => self.kv.scores::<T, 3>(ops, p, keys, of(js, q), of(js, sc)),
                    2 => self.kv.scores::<T, 2>(ops, p, keys, of(js, q), of(js, sc)),
                    _ => self.kv.scores::<T, 1>(ops, p, keys, of(js, q), of(js, sc)),
                }
            });
        }
        for j0 in (0..n * nh).step_by(8) {
            let count = (n * nh - j0).min(8);
            let mut rows: [&mut [f32]; 8] = std::array::from_fn(|r| {
                let Some(keys) = (r < count).then(|| qj(j0 + r).keys) else { return &mut [][..] };
                // SAFETY: query j0 + r's scores for its keys, written above (each row its own).
                unsafe { std::slice::from_raw_parts_mut(sc(j0 + r).add(keys.start), keys.len()) }
            });
            if let Some(cap) = self.p.softcap {
                rows.iter_mut().flat_map(|r| r.iter_mut()).for_each(|x| *x = (*x / cap).tanh() * cap);
            }
            let sink = |r: usize| self.p.sinks.as_ref().map(|s| s[h0 + (j0 + r) % nh]);
            crate::ops::softmax_rows_on(self.ops.0, &mut rows[..count], sink);
        }
        let w = |j: usize| sc(j) as *const f32;
        let a = |j: usize| unsafe { ap.add(j * hd) };
        for t0 in tiles {
            self.each_pass(t0..t0 + self.key_tile, &qj, |js, keys| match js.len() {
                3 => self.kv.values::<T, 3>(self.ops, hd, keys, of(js, w), of(js, a)),
                2 => self.kv.values::<T, 2>(self.ops, hd, keys, of(js, w), of(js, a)),
                _ => self.kv.values::<T, 1>(self.ops, hd, keys, of(js, w), of(js, a)),
            });
        }
        for i in 0..n {
            // SAFETY: the heads' output rows, consecutive in the token's row (the caller's task
            // alone writes them).
            unsafe { std::ptr::copy_nonoverlapping(acc[i * nh * hd..].as_ptr(), qj(i * nh).out, nh * hd) };
        }
    }

    /// Calls `f(queries, keys)` for the passes over `tile`: the task's queries in order, up to
    /// `per_pass` a pass whose keys in the tile are the same (rows of a prompt differ in the
    /// last tiles).
    fn each_pass<'p>(
        &self,
        tile: Range<usize>,
        qj: &impl Fn(usize) -> Query<'p>,
        mut f: impl FnMut(&[usize], Range<usize>),
    ) {
        let nh = self.heads.len();
        let keys = |j: usize| {
            let k = qj(j).keys;
            k.start.max(tile.start)..k.end.min(tile.end)
        };
        let (all, mut j, mut cap) = (self.rows.len() * nh, 0, if self.first_alone { 1 } else { self.per_pass });
        let mut js = [0; MAX_HEADS];
        while j < all {
            let k = keys(j);
            let mut e = j + 1;
            // Queries of one row share its keys; the next row's only where its range in the
            // tile is the same.
            while e < all && e - j < cap && (e % nh != 0 || keys(e) == k) {
                e += 1;
            }
            js.iter_mut().zip(j..e).for_each(|(x, y)| *x = y);
            f(&js[..e - j], k);
            (j, cap) = (e, self.per_pass);
        }
    }
}

/// `f` of each of the first `H` of `js`.
fn of<const H: usize, X>(js: &[usize], f: impl Fn(usize) -> X) -> [X; H] {
    std::array::from_fn(|x| f(js[x]))
}

impl KvHead<'_> {
    /// The scores of `H` queries for `keys`, into `sc[h][key]`.
    fn scores<const T: u8, const H: usize>(
        &self,
        ops: VecOps,
        p: &AttentionParams,
        keys: Range<usize>,
        q: [&[f32]; H],
        sc: [*mut f32; H],
    ) {
        let (table, bs) = self.table;
        for (i, slot, n) in Runs::new(table, bs, keys.start, keys.end) {
            // SAFETY: the run's slots lie in the cache (block tables hold valid blocks); each
            // query's scores have room for every position it attends.
            let k = unsafe { self.k.add(slot * self.row_bytes) };
            ops.dots_heads::<T, H>(q, k, self.row_bytes, p.scale, sc.map(|s| unsafe { s.add(keys.start + i) }), n);
        }
    }

    /// `acc[h] += Σ w[h][key] · V[key]` over `keys`, in order.
    fn values<const T: u8, const H: usize>(
        &self,
        ops: VecOps,
        hd: usize,
        keys: Range<usize>,
        w: [*const f32; H],
        acc: [*mut f32; H],
    ) {
        let (table, bs) = self.table;
        for (i, slot, n) in Runs::new(table, bs, keys.start, keys.end) {
            // SAFETY: as above; each query's weights hold the run's n from its first key.
            let v = unsafe { self.v.add(slot * self.row_bytes) };
            ops.axpys_heads::<T, H>(acc, w.map(|w| unsafe { w.add(keys.start + i) }), v, self.row_bytes, hd, n);
        }
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The two vector loops of attention, on one tier, over a cache row of element type `T`.
#[derive(Clone, Copy)]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
struct VecOps(crate::isa::Tier);

impl VecOps {
    /// `out[j] = (q · row j) · scale` for `out.len()` cache rows of `q.len()` elements, the first
    /// at `k`, `stride` bytes apart.
    #[inline]
    fn dots<const T: u8>(self, q: &[f32], k: *const u8, stride: usize, scale: f32, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.0, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
            // SAFETY: the tier guarantees AVX2, FMA and F16C; the caller vouches for the rows.
            return unsafe { x86::dots::<T>(q, k, stride, scale, out) };
        }
        #[cfg(target_arch = "aarch64")]
        if self.0 == crate::isa::Tier::Neon {
            // SAFETY: the caller vouches for the rows.
            return unsafe { crate::neon::dots::<T>(q, k, stride, scale, out) };
        }
        for (j, o) in out.iter_mut().enumerate() {
            // SAFETY: row j exists (caller).
            *o = crate::matmul::scalar_dot_of::<T>(q, unsafe { k.add(j * stride) }) * scale;
        }
    }

    /// How many queries (a group's heads, of one row or several) one pass of [`Passes`] takes:
    /// three where the AVX-512 register file holds their accumulators (head sizes 64 and 128),
    /// else one.
    fn heads_per_pass(self, head_dim: usize) -> usize {
        if self.0 == crate::isa::Tier::Avx512 && matches!(head_dim, 64 | 128) { MAX_HEADS } else { 1 }
    }

    /// [`VecOps::dots`] of `H` queries against the same `n` rows, into `out[h][..n]`.
    #[inline]
    fn dots_heads<const T: u8, const H: usize>(
        self,
        q: [&[f32]; H],
        k: *const u8,
        stride: usize,
        scale: f32,
        out: [*mut f32; H],
        n: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        if H > 1 && self.heads_per_pass(q[0].len()) >= H {
            // SAFETY: the tier has AVX-512; the caller vouches for the rows and outputs.
            return unsafe { x86::dots_heads::<T, H>(q, k, stride, scale, out, n) };
        }
        for (q, out) in q.into_iter().zip(out) {
            // SAFETY: n outputs at `out` (caller).
            self.dots::<T>(q, k, stride, scale, unsafe { std::slice::from_raw_parts_mut(out, n) });
        }
    }

    /// [`VecOps::axpys`] for `H` heads over the same `n` rows: `acc[h][..hd] += Σ_j w[h][j] ·
    /// row j`.
    #[inline]
    fn axpys_heads<const T: u8, const H: usize>(
        self,
        acc: [*mut f32; H],
        w: [*const f32; H],
        v: *const u8,
        stride: usize,
        hd: usize,
        n: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        if H > 1 && self.heads_per_pass(hd) >= H {
            // SAFETY: as above.
            return unsafe { x86::axpys_heads::<T, H>(acc, w, v, stride, hd, n) };
        }
        for (acc, w) in acc.into_iter().zip(w) {
            // SAFETY: hd accumulators and n weights (caller).
            let (acc, w) = unsafe { (std::slice::from_raw_parts_mut(acc, hd), std::slice::from_raw_parts(w, n)) };
            self.axpys::<T>(acc, w, v, stride);
        }
    }

    /// `acc += Σ_j w[j] · row j` (rows in order) for `w.len()` cache rows, the first at `v`,
    /// `stride` bytes apart.
    #[inline]
    fn axpys<const T: u8>(self, acc: &mut [f32], w: &[f32], v: *const u8, stride: usize) {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.0, crate::isa::Tier::Avx2 | crate::isa::Tier::Avx512) {
            // SAFETY: as above.
            return unsafe { x86::axpys::<T>(acc, w, v, stride, self.0 == crate::isa::Tier::Avx512) };
        }
        #[cfg(target_arch = "aarch64")]
        if self.0 == crate::isa::Tier::Neon {
            // SAFETY: as above.
            return unsafe { crate::neon::axpys::<T>(acc, w, v, stride) };
        }
        for (j, &wj) in w.iter().enumerate() {
            // SAFETY: row j exists (caller).
            let row = unsafe { v.add(j * stride) };
            for (i, a) in acc.iter_mut().enumerate() {
                *a = wj.mul_add(load1::<T>(row, i), *a);
            }
        }
    }
}

/// Consecutive positions `first..end` of a request as runs inside one block each:
/// `(index from first, slot of the run's first position, length)`.
struct Runs<'a> {
    table: &'a [u32],
    block_size: usize,
    first: usize,
    pos: usize,
    end: usize,
}

impl<'a> Runs<'a> {
    fn new(table: &'a [u32], block_size: usize, first: usize, end: usize) -> Self {
        Runs { table, block_size, first, pos: first, end }
    }
}

impl Iterator for Runs<'_> {
    type Item = (usize, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.end {
            return None;
        }
        let off = self.pos % self.block_size;
        let n = (self.block_size - off).min(self.end - self.pos);
        let item = (self.pos - self.first, slot_of(self.table, self.block_size, self.pos), n);
        self.pos += n;
        Some(item)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::matmul::load1;
    use crate::matmul::x86::{dense, load8};
    use std::arch::x86_64::*;

    /// Eight rows at a time by [`dots8`] where the head size is a multiple of 8, the rest four
    /// at a time through the dense matmul kernel: the same reduction per row either way.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dots<const T: u8>(q: &[f32], k: *const u8, stride: usize, scale: f32, out: &mut [f32]) {
        let mut j = 0;
        if q.len().is_multiple_of(8) {
            while j + 8 <= out.len() {
                // SAFETY: rows j..j + 8 exist (caller); 8 floats of `out` from j.
                unsafe {
                    let s = dots8::<T>(q, k.add(j * stride), stride);
                    _mm256_storeu_ps(out.as_mut_ptr().add(j), _mm256_mul_ps(s, _mm256_set1_ps(scale)));
                }
                j += 8;
            }
        }
        for (c, rows) in out[j..].chunks_mut(4).enumerate() {
            // SAFETY: the rows exist (caller); at most four per call, as `dense` requires.
            unsafe { dense::<T, 1>([q], k.add((j + 4 * c) * stride), stride, [rows], std::ptr::null()) };
            rows.iter_mut().for_each(|o| *o *= scale);
        }
    }

    /// `q ·` eight rows (`q.len()` a multiple of 8): each row's 8-lane FMA chain as in `dense`,
    /// eight chains in flight instead of four (decode's dots were latency-bound), then the eight
    /// horizontal sums at once by a transposing reduction in [`crate::matmul::hsum8`]'s
    /// association. Lane `j` is row `j`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots8<const T: u8>(q: &[f32], k: *const u8, stride: usize) -> __m256 {
        let mut acc = [_mm256_setzero_ps(); 8];
        for i in (0..q.len()).step_by(8) {
            // SAFETY: elements i..i + 8 of q and of the eight rows exist (caller).
            unsafe {
                let qv = _mm256_loadu_ps(q.as_ptr().add(i));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(qv, load8::<T>(k.add(r * stride), i), *a);
                }
            }
        }
        reduce8(acc)
    }

    /// The eight chains' horizontal sums in [`crate::matmul::hsum8`]'s association, by a
    /// transposing reduction: lane `j` is chain `j`'s sum.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn reduce8(acc: [__m256; 8]) -> __m256 {
        // s = lo + hi halves: w[p] holds s of row p (low 128 bits) and of row p + 4.
        let w: [__m256; 4] = std::array::from_fn(|p| {
            let (a, b) = (acc[p], acc[p + 4]);
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        });
        // t = (s0 + s2, s1 + s3): u[0] holds rows 0, 1 (and 4, 5), u[1] rows 2, 3 (and 6, 7).
        let u: [__m256; 2] = std::array::from_fn(|h| {
            let (a, b) = (w[2 * h], w[2 * h + 1]);
            _mm256_add_ps(_mm256_shuffle_ps::<0x44>(a, b), _mm256_shuffle_ps::<0xEE>(a, b))
        });
        _mm256_add_ps(_mm256_shuffle_ps::<0x88>(u[0], u[1]), _mm256_shuffle_ps::<0xDD>(u[0], u[1]))
    }

    /// [`dots`] of `H` queries (`q[h].len()` a multiple of 8) against the same `n` rows: each
    /// block of eight rows is loaded once for the `H` queries' [`dots8`] chains (their 8·H
    /// accumulators need the AVX-512 register file), the tail as in [`dots`].
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn dots_heads<const T: u8, const H: usize>(
        q: [&[f32]; H],
        k: *const u8,
        stride: usize,
        scale: f32,
        out: [*mut f32; H],
        n: usize,
    ) {
        let hd = q[0].len();
        let mut j = 0;
        while j + 8 <= n {
            let mut acc = [[_mm256_setzero_ps(); 8]; H];
            for i in (0..hd).step_by(8) {
                // SAFETY: elements i..i + 8 of every query and of rows j..j + 8 (caller).
                unsafe {
                    let qv: [__m256; H] = std::array::from_fn(|h| _mm256_loadu_ps(q[h].as_ptr().add(i)));
                    for r in 0..8 {
                        let kv = load8::<T>(k.add((j + r) * stride), i);
                        for (a, qh) in acc.iter_mut().zip(qv) {
                            a[r] = _mm256_fmadd_ps(qh, kv, a[r]);
                        }
                    }
                }
            }
            for (a, o) in acc.into_iter().zip(out) {
                // SAFETY: outputs j..j + 8 (caller).
                unsafe { _mm256_storeu_ps(o.add(j), _mm256_mul_ps(reduce8(a), _mm256_set1_ps(scale))) };
            }
            j += 8;
        }
        if j < n {
            for (q, o) in q.into_iter().zip(out) {
                // SAFETY: as above.
                unsafe {
                    dots::<T>(q, k.add(j * stride), stride, scale, std::slice::from_raw_parts_mut(o.add(j), n - j))
                };
            }
        }
    }

    /// Sixteen elements from `i` of a row of type `T`, widened to f32.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn load16<const T: u8>(row: *const u8, i: usize) -> __m512 {
        // SAFETY: elements i..i + 16 exist (the caller).
        unsafe {
            match T {
                0 => _mm512_loadu_ps((row as *const f32).add(i)),
                1 => _mm512_cvtph_ps(_mm256_loadu_si256(row.add(2 * i) as *const __m256i)),
                _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                    row.add(2 * i) as *const __m256i,
                )))),
            }
        }
    }

    /// [`axpys`] for `H` heads of 64 or 128 elements over the same `n` rows: each row's vectors
    /// are loaded once for the `H` heads' zmm accumulators (each element's products in row
    /// order, as in [`axpys_zmm`]).
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    pub(super) unsafe fn axpys_heads<const T: u8, const H: usize>(
        acc: [*mut f32; H],
        w: [*const f32; H],
        v: *const u8,
        stride: usize,
        hd: usize,
        n: usize,
    ) {
        // SAFETY: as vouched by the caller.
        unsafe {
            match hd {
                64 => axpys_zmm_heads::<T, 4, H>(acc, w, v, stride, n),
                _ => axpys_zmm_heads::<T, 8, H>(acc, w, v, stride, n),
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn axpys_zmm_heads<const T: u8, const N: usize, const H: usize>(
        acc: [*mut f32; H],
        w: [*const f32; H],
        v: *const u8,
        stride: usize,
        n: usize,
    ) {
        // SAFETY: 16·N accumulators per head, n weights per head, rows j < n of 16·N elements.
        unsafe {
            let mut a: [[__m512; N]; H] =
                std::array::from_fn(|h| std::array::from_fn(|i| _mm512_loadu_ps(acc[h].add(16 * i))));
            for j in 0..n {
                let row = v.add(j * stride);
                let wv: [__m512; H] = std::array::from_fn(|h| _mm512_set1_ps(*w[h].add(j)));
                for i in 0..N {
                    let x = load16::<T>(row, 16 * i);
                    for (ah, wh) in a.iter_mut().zip(wv) {
                        ah[i] = _mm512_fmadd_ps(wh, x, ah[i]);
                    }
                }
            }
            for (ah, p) in a.iter().zip(acc) {
                for (i, ai) in ah.iter().enumerate() {
                    _mm512_storeu_ps(p.add(16 * i), *ai);
                }
            }
        }
    }

    /// `acc += Σ_j w[j] · row j`. Each element sums its own products in row order, so any
    /// vector width gives the same bits: common head sizes keep `acc` in registers (zmm on the
    /// AVX-512 tier), others go through memory.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn axpys<const T: u8>(acc: &mut [f32], w: &[f32], v: *const u8, stride: usize, wide: bool) {
        // SAFETY: as vouched by the caller; `wide` only where the tier has AVX-512.
        unsafe {
            match (acc.len(), wide) {
                (64, true) => axpys_zmm::<T, 4>(acc, w, v, stride),
                (128, true) => axpys_zmm::<T, 8>(acc, w, v, stride),
                (256, true) => axpys_zmm::<T, 16>(acc, w, v, stride),
                (64, false) => axpys_ymm::<T, 8>(acc, w, v, stride),
                (128, false) => axpys_ymm::<T, 16>(acc, w, v, stride),
                _ => axpys_any::<T>(acc, w, v, stride),
            }
        }
    }

    /// [`axpys`] for `8·N` elements, accumulated in `N` ymm registers.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn axpys_ymm<const T: u8, const N: usize>(acc: &mut [f32], w: &[f32], v: *const u8, stride: usize) {
        assert_eq!(acc.len(), 8 * N);
        // SAFETY: acc holds 8·N floats; rows j < w.len() hold 8·N elements (caller).
        unsafe {
            let mut a: [__m256; N] = std::array::from_fn(|i| _mm256_loadu_ps(acc.as_ptr().add(8 * i)));
            for (j, &wj) in w.iter().enumerate() {
                let (row, wv) = (v.add(j * stride), _mm256_set1_ps(wj));
                for (i, ai) in a.iter_mut().enumerate() {
                    *ai = _mm256_fmadd_ps(wv, load8::<T>(row, 8 * i), *ai);
                }
            }
            for (i, ai) in a.iter().enumerate() {
                _mm256_storeu_ps(acc.as_mut_ptr().add(8 * i), *ai);
            }
        }
    }

    /// [`axpys`] for `16·N` elements, accumulated in `N` zmm registers.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn axpys_zmm<const T: u8, const N: usize>(acc: &mut [f32], w: &[f32], v: *const u8, stride: usize) {
        assert_eq!(acc.len(), 16 * N);
        // SAFETY: as for axpys_ymm, with 16·N elements.
        unsafe {
            let mut a: [__m512; N] = std::array::from_fn(|i| _mm512_loadu_ps(acc.as_ptr().add(16 * i)));
            for (j, &wj) in w.iter().enumerate() {
                let (row, wv) = (v.add(j * stride), _mm512_set1_ps(wj));
                for (i, ai) in a.iter_mut().enumerate() {
                    *ai = _mm512_fmadd_ps(wv, load16::<T>(row, 16 * i), *ai);
                }
            }
            for (i, ai) in a.iter().enumerate() {
                _mm512_storeu_ps(acc.as_mut_ptr().add(16 * i), *ai);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn axpys_any<const T: u8>(acc: &mut [f32], w: &[f32], v: *const u8, stride: usize) {
        let n = acc.len();
        let n8 = n / 8 * 8;
        for (j, &wj) in w.iter().enumerate() {
            // SAFETY: row j exists (caller); i + 8 ≤ n8 ≤ its length.
            let row = unsafe { v.add(j * stride) };
            let wv = _mm256_set1_ps(wj);
            let mut i = 0;
            while i < n8 {
                unsafe {
                    let p = acc.as_mut_ptr().add(i);
                    _mm256_storeu_ps(p, _mm256_fmadd_ps(wv, load8::<T>(row, i), _mm256_loadu_ps(p)));
                }
                i += 8;
            }
            for (t, a) in acc.iter_mut().enumerate().skip(n8) {
                *a = wj.mul_add(load1::<T>(row, t), *a);
            }
        }
    }
}

#[inline]
fn slot_of(block_table: &[u32], block_size: usize, pos: usize) -> usize {
    block_table[pos / block_size] as usize * block_size + pos % block_size
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    /// Dense causal attention in f64 over contiguous K/V.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        heads: usize,
        kvh: usize,
        hd: usize,
        window: Option<usize>,
        sinks: Option<&[f32]>,
    ) -> Vec<f64> {
        let scale = 1.0 / (hd as f64).sqrt();
        let mut out = vec![0f64; n * heads * hd];
        for t in 0..n {
            for h in 0..heads {
                let g = h / (heads / kvh);
                let first = window.map_or(0, |w| (t + 1).saturating_sub(w));
                let s: Vec<f64> = (first..=t)
                    .map(|j| {
                        (0..hd)
                            .map(|d| q[(t * heads + h) * hd + d] as f64 * k[(j * kvh + g) * hd + d] as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                // A sink joins the max and the denominator, not the values.
                let sink = sinks.map(|s| s[h] as f64);
                let m = s.iter().cloned().fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
                for d in 0..hd {
                    out[(t * heads + h) * hd + d] =
                        (first..=t).map(|j| e[j - first] / z * v[(j * kvh + g) * hd + d] as f64).sum();
                }
            }
        }
        out
    }

    /// `x` rounded through `dtype`, as the cache stores it.
    fn rounded(x: &[f32], dtype: KvDtype) -> Vec<f32> {
        let mut bytes = vec![0u8; x.len() * dtype.size()];
        dtype.store(&mut bytes, x);
        let t = match dtype {
            KvDtype::F32 => 0,
            KvDtype::F16 => 1,
            KvDtype::Bf16 => 2,
        };
        (0..x.len())
            .map(|i| match t {
                0 => load1::<0>(bytes.as_ptr(), i),
                1 => load1::<1>(bytes.as_ptr(), i),
                _ => load1::<2>(bytes.as_ptr(), i),
            })
            .collect()
    }

    /// Runs attention over `n` tokens written and attended `chunk` at a time into scattered blocks.
    #[allow(clippy::too_many_arguments)]
    fn run_chunked(
        tier: crate::isa::Tier,
        dtype: KvDtype,
        (q, k, v): (&[f32], &[f32], &[f32]),
        n: usize,
        (chunk, tiling): (usize, Tiling),
        (heads, kvh, hd, bs): (usize, usize, usize, usize),
        params: &AttentionParams,
    ) -> Vec<f32> {
        // The table maps logical blocks to physical ones in reverse.
        let nblocks = n.div_ceil(bs);
        let table: Vec<u32> = (0..nblocks as u32).rev().map(|b| b + 3).collect();
        let mut cache = KvCache::new(1, nblocks + 3, bs, kvh, hd, dtype);
        let qr = heads * hd;
        let r = kvh * hd;
        let mut out = vec![0f32; n * qr];
        let mut done = 0;
        while done < n {
            let len = chunk.min(n - done);
            let slots: Vec<usize> = (done..done + len).map(|p| slot_of(&table, bs, p)).collect();
            cache.write(0, &slots, &k[done * r..(done + len) * r], &v[done * r..(done + len) * r]);
            let seq = SeqAttention { query_start: 0, query_len: len, seq_len: done + len, block_table: &table };
            let o = &mut out[done * qr..(done + len) * qr];
            let q = &q[done * qr..(done + len) * qr];
            paged_attention_tiled(tier, tiling, q, cache.layer(0), bs, &[seq], params, o);
            done += len;
        }
        out
    }

    /// A cache without V rows (multi-head latent attention) takes the values from its K rows:
    /// the same bits as a cache whose V rows are copies of K, on every tier and KV dtype.
    #[test]
    fn cache_without_v_reads_values_from_k() {
        let (n, heads, hd, bs) = (21, 4, 40, 4);
        let (q, k) = (rand_vec(n * heads * hd, 4), rand_vec(n * hd, 5));
        let table: Vec<u32> = (0..n.div_ceil(bs) as u32).rev().collect();
        let slots: Vec<usize> = (0..n).map(|p| slot_of(&table, bs, p)).collect();
        let seq = [SeqAttention { query_start: 0, query_len: n, seq_len: n, block_table: &table }];
        let params = AttentionParams {
            num_heads: heads,
            num_kv_heads: 1,
            head_dim: hd,
            scale: 0.3,
            sliding_window: None,
            softcap: None,
            sinks: None,
        };
        for dtype in [KvDtype::F32, KvDtype::Bf16] {
            let mut latent = KvCache::with_layout(table.len(), bs, dtype, &[[hd, 0]], &[0], &[0]);
            latent.write(0, &slots, &k, &[]);
            assert!(latent.layer(0).v.is_empty());
            let mut copied = KvCache::new(1, table.len(), bs, 1, hd, dtype);
            copied.write(0, &slots, &k, &k);
            for tier in crate::isa::Tier::available() {
                let (mut a, mut b) = (vec![0f32; n * heads * hd], vec![0f32; n * heads * hd]);
                paged_attention_on(tier, &q, latent.layer(0), bs, &seq, &params, &mut a);
                paged_attention_on(tier, &q, copied.layer(0), bs, &seq, &params, &mut b);
                assert_eq!(a, b, "{tier:?} {dtype:?}");
            }
        }
    }

    /// Every KV dtype and tier, and head sizes with and without register-resident kernels, with
    /// and without a sliding window and attention sinks: equal to dense f64 attention over the
    /// stored (rounded) K/V, the same bits whatever the chunking (whole prefill, chunks, one
    /// token at a time as decode) and the key tiles, and the same bits on every tier.
    #[test]
    fn paged_chunked_equals_dense_and_is_chunk_and_tier_invariant() {
        // Blocks of 4 keep the dot runs short; blocks of 16 give runs of eight and more.
        for (hd, bs) in [(20, 4), (64, 4), (128, 4), (256, 4), (20, 16), (64, 16), (128, 16)] {
            chunk_and_tier_invariant(hd, bs, (4, 2));
        }
        // Groups of three heads (one pass of three on the AVX-512 tier) and of seven (passes of
        // three queries, across a prompt's rows where their keys in a tile are the same).
        for (hd, bs) in [(64, 16), (128, 4)] {
            chunk_and_tier_invariant(hd, bs, (9, 3));
            chunk_and_tier_invariant(hd, bs, (7, 1));
        }
    }

    fn chunk_and_tier_invariant(hd: usize, bs: usize, (heads, kvh): (usize, usize)) {
        let n = 37;
        let q = rand_vec(n * heads * hd, 1);
        let k = rand_vec(n * kvh * hd, 2);
        let v = rand_vec(n * kvh * hd, 3);
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            let (kr, vr) = (rounded(&k, dtype), rounded(&v, dtype));
            if dtype != KvDtype::F32 {
                assert_ne!(kr, k, "{dtype:?} must round");
            }
            // Sinks from -2 to 2: some above the scores, some below.
            let sinks: Vec<f32> = rand_vec(heads, 6).iter().map(|s| 2.0 * s).collect();
            for (window, sinks) in [(None, None), (Some(5), None), (None, Some(sinks.clone())), (Some(5), Some(sinks))]
            {
                let want = reference(&q, &kr, &vr, n, heads, kvh, hd, window, sinks.as_deref());
                let params = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap: None,
                    sinks,
                };
                let mut outs = Vec::new();
                for tier in crate::isa::Tier::available() {
                    // Whole, in chunks and token by token; queries one at a time or together
                    // over keys in tiles of 256 (all at once here), of 8, or of 5 or 3 (runs
                    // cut at tiles that are not whole blocks).
                    // A group's heads share the tiles, or (too many scores) a pass's heads do.
                    let alone = |keys| Tiling { keys, min_bytes: usize::MAX, max_scores: usize::MAX };
                    let tiles = |keys| Tiling { keys, min_bytes: 0, max_scores: usize::MAX };
                    let passes = |keys| Tiling { keys, min_bytes: 0, max_scores: 0 };
                    let splits = [
                        (n, alone(256)),
                        (n, tiles(256)),
                        (n, tiles(8)),
                        (n, tiles(5)),
                        (n, passes(8)),
                        (7, tiles(3)),
                        (7, alone(256)),
                        (1, alone(256)),
                        (1, tiles(8)),
                        (1, passes(5)),
                    ];
                    for (chunk, tiling) in splits {
                        let out =
                            run_chunked(tier, dtype, (&q, &k, &v), n, (chunk, tiling), (heads, kvh, hd, bs), &params);
                        let tile = (tiling.keys, tiling.min_bytes == 0, tiling.max_scores == 0);
                        for (a, b) in out.iter().zip(&want) {
                            assert!(
                                (*a as f64 - b).abs() < 1e-5,
                                "hd {hd} heads {heads}/{kvh} {dtype:?} {tier:?} chunk {chunk} tile {tile:?} {window:?} \
                                 sinks {}: {a} vs {b}",
                                params.sinks.is_some()
                            );
                        }
                        outs.push(out);
                    }
                }
                let same = outs.windows(2).all(|w| w[0] == w[1]);
                assert!(same, "hd {hd} heads {heads}/{kvh} {dtype:?} {window:?}: chunking or tier changed bits");
                if let Some(s) = &params.sinks {
                    // The sinks took weight: the outputs are not those of plain attention.
                    let plain = reference(&q, &kr, &vr, n, heads, kvh, hd, window, None);
                    let moved = plain.iter().zip(&outs[0]).any(|(a, b)| (a - *b as f64).abs() > 1e-3);
                    assert!(moved && s.iter().any(|&x| x != 0.0), "sinks changed nothing");
                }
            }
        }
    }

    /// A batch of requests enough that each task takes all kv heads gives every request the
    /// bits it gets decoded alone (where its tasks take one kv head each), sinks included.
    #[test]
    fn a_request_gets_the_same_bits_in_a_large_batch_as_alone() {
        let (heads, kvh, hd, bs) = (6, 3, 64, 4);
        let n_seqs = 4 * pool::global().n_threads() + 1;
        let lens: Vec<usize> = (0..n_seqs).map(|s| 1 + (s * 7) % 23).collect();
        let blocks: Vec<usize> = lens.iter().map(|l| l.div_ceil(bs)).collect();
        let mut cache = KvCache::new(1, blocks.iter().sum(), bs, kvh, hd, KvDtype::F32);
        // Request s owns the blocks after those of the requests before it, in reverse order.
        let mut tables = Vec::new();
        let mut next = 0u32;
        for (s, (&len, &nb)) in lens.iter().zip(&blocks).enumerate() {
            let table: Vec<u32> = (next..next + nb as u32).rev().collect();
            next += nb as u32;
            let slots: Vec<usize> = (0..len).map(|p| slot_of(&table, bs, p)).collect();
            let (k, v) = (rand_vec(len * kvh * hd, 10 + s as u64), rand_vec(len * kvh * hd, 50 + s as u64));
            cache.write(0, &slots, &k, &v);
            tables.push(table);
        }
        let params = AttentionParams {
            num_heads: heads,
            num_kv_heads: kvh,
            head_dim: hd,
            scale: 0.125,
            sliding_window: None,
            softcap: None,
            sinks: Some(rand_vec(heads, 98)),
        };
        let qr = heads * hd;
        let q = rand_vec(n_seqs * qr, 99);
        let seq = |s: usize, start: usize| SeqAttention {
            query_start: start,
            query_len: 1,
            seq_len: lens[s],
            block_table: &tables[s],
        };
        let all: Vec<_> = (0..n_seqs).map(|s| seq(s, s)).collect();
        let mut batched = vec![0f32; n_seqs * qr];
        paged_attention(&q, cache.layer(0), bs, &all, &params, &mut batched);
        for s in 0..n_seqs {
            let mut alone = vec![0f32; qr];
            paged_attention(&q[s * qr..(s + 1) * qr], cache.layer(0), bs, &[seq(s, 0)], &params, &mut alone);
            assert_eq!(alone, batched[s * qr..(s + 1) * qr], "request {s}");
        }
    }
}
