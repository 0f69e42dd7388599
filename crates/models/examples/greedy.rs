//! Developer tool: greedy-decode from token ids with a contiguous cache.
//! `cargo run --example greedy -- MODEL N ID...`
use vllm_rs_kernels::attention::{KvDtype, SeqAttention};
use vllm_rs_models::{ForwardBatch, GroupBatch};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lm = vllm_rs_models::load(std::path::Path::new(&args[1])).unwrap_or_else(|e| panic!("{e}"));
    let n: usize = args[2].parse().unwrap();
    let mut ids: Vec<u32> = args[3..].iter().map(|s| s.parse().unwrap()).collect();
    let info = lm.model.info().clone();
    let bs = 16;
    let blocks = (ids.len() + n).div_ceil(bs);
    let mut kv = info.contiguous_kv_cache(blocks, bs, KvDtype::F32, 0);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut done = 0;
    let t0 = std::time::Instant::now();
    let mut out = vec![];
    for _ in 0..n {
        let new = &ids[done..];
        let positions: Vec<u32> = (done as u32..ids.len() as u32).collect();
        let slots: Vec<usize> = (done..ids.len()).collect();
        let last = [new.len() - 1];
        let batch = ForwardBatch {
            input_ids: new,
            positions: &positions,
            groups: vec![GroupBatch {
                slot_mapping: &slots,
                seqs: vec![SeqAttention {
                    query_start: 0,
                    query_len: new.len(),
                    seq_len: ids.len(),
                    block_table: &table,
                }],
            }],
            logits_indices: &last,
            state_saves: &[],
        };
        let logits = lm.model.logits(&batch, &mut kv);
        let next = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
        done = ids.len();
        ids.push(next);
        out.push(next);
    }
    eprintln!("{:.1} tok/s", n as f64 / t0.elapsed().as_secs_f64());
    println!("{out:?}");
}
