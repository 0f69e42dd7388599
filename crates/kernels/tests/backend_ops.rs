//! Every backend this machine runs, op by op, against the reference backend (the scalar CPU
//! tier) on random data: the ops a model calls must give the reference's bits, so a model's
//! tokens cannot depend on the backend (the model tests then decode on each backend).

use vllm_rs_kernels::attention::{AttentionParams, KvCache, KvDtype, SeqAttention};
use vllm_rs_kernels::backend::{self, Backend, Cpu};
use vllm_rs_kernels::encoder_attention::{EncoderAttentionParams, RelativeBias};
use vllm_rs_kernels::isa::Tier;
use vllm_rs_kernels::ops::{Activation, RopeTable, rope_inv_freq};
use vllm_rs_kernels::testing::{quantize_random, rand_vec};
use vllm_rs_kernels::{GgmlType, Weight};

fn reference() -> &'static dyn Backend {
    Cpu::on(Tier::Scalar).expect("the scalar tier runs everywhere")
}

/// Runs `op` on the reference and on every backend, asserting equal results.
fn same_on_every_backend<T: PartialEq + std::fmt::Debug>(what: &str, op: impl Fn(&dyn Backend) -> T) {
    let want = op(reference());
    for be in backend::available() {
        assert_eq!(op(be), want, "{what}: {} differs from {}", be.name(), reference().name());
    }
}

#[test]
fn the_reference_backend_comes_first_and_the_default_is_available() {
    let names: Vec<&str> = backend::available().iter().map(|b| b.name()).collect();
    assert_eq!(names[0], "cpu-scalar");
    assert!(names.contains(&backend::default().name()), "{names:?}");
}

#[test]
fn matmuls_over_every_weight_format() {
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::MXFP4,
    ];
    for ty in types {
        let k = if ty.block_size() == 256 { 512 } else { 96 };
        // Packed as the process's tier packs them at load: every backend must read them.
        let ws: Vec<Weight> = (0..3).map(|i| quantize_random(ty, 19 + 16 * i, k, 3 + i as u64).for_matmul()).collect();
        for m in [1, 2, 7, 33] {
            let x = rand_vec(m * k, m as u64);
            let run = |be: &dyn Backend| {
                let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0; m * w.rows]).collect();
                let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                be.matmul_many(&x, m, &ws.iter().collect::<Vec<_>>(), &mut slices);
                outs.concat()
            };
            let what = format!("matmul_many {} m={m}", ty.name());
            if !ty.is_quantized() {
                same_on_every_backend(&what, run);
                continue;
            }
            // Quantized weights: the integer dot products are exact on every tier, but the
            // AVX-512 tier's repacked layout (`packed.rs`, bit-tested against its own scalar
            // model) applies the block scales in another order: within f32 rounding.
            let want = run(reference());
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            for be in backend::available() {
                let worst = run(be).iter().zip(&want).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
                assert!(worst <= 1e-5 * scale, "{what}: {} is {worst:e} off {}", be.name(), reference().name());
            }
        }
    }
}

#[test]
fn element_wise_ops_and_norms() {
    let (d, rows) = (72, 5);
    let x = rand_vec(d * rows, 1);
    let y = rand_vec(d * rows, 2);
    let w = rand_vec(d, 3);
    let b = rand_vec(d, 4);
    let acts = [
        Activation::Silu,
        Activation::GeluTanh,
        Activation::Gelu,
        Activation::Relu,
        Activation::Relu2,
        Activation::Tanh,
        Activation::ClampedSwiglu { alpha: 1.702, limit: 0.5 },
    ];
    for act in acts {
        if act != (Activation::ClampedSwiglu { alpha: 1.702, limit: 0.5 }) {
            same_on_every_backend(&format!("{act:?}"), |be| {
                let mut v = x.clone();
                be.activation(act, &mut v);
                v
            });
        }
        same_on_every_backend(&format!("gated {act:?}"), |be| {
            let mut v = x.clone();
            be.gated_activation(act, &mut v, &y);
            v
        });
    }
    same_on_every_backend("element-wise", |be| {
        let mut v = x.clone();
        be.add_rows(&mut v, &b);
        be.scale(&mut v, 1.5);
        be.softcap(&mut v, 2.0);
        be.mul_sigmoid(&mut v, &y);
        be.add_assign(&mut v, &y);
        v
    });
    same_on_every_backend("norms", |be| {
        let (mut a, mut h, mut out) = (x.clone(), x.clone(), vec![]);
        be.rms_norm_rows(&mut a, d, &w, 1e-6, 1.0);
        be.add_rms_norm_rows(&mut h, &y, &mut out, d, &w, 1e-5, 0.0);
        let mut l = x.clone();
        be.layer_norm_rows(&mut l, &w, Some(&b), 1e-5);
        (a, h, out, l)
    });
    same_on_every_backend("softmax, log_softmax, argmax", |be| {
        let mut s = x.clone();
        be.softmax(&mut s);
        let mut ids = vec![];
        be.argmax_rows(&y, d, &mut ids);
        (s, be.log_softmax(&y), ids)
    });
}

#[test]
fn rope_and_embedding_gather() {
    let (heads, hd, n) = (3, 16, 6);
    let positions: Vec<u32> = (10..10 + n as u32).collect();
    let table = RopeTable::new(&rope_inv_freq(10000.0, hd), &positions);
    let x = rand_vec(n * heads * hd, 5);
    for interleaved in [false, true] {
        same_on_every_backend("rope", |be| {
            let mut all = x.clone();
            be.rope_rows(&mut all, heads * hd, hd, &table, interleaved);
            let mut one = x[2 * heads * hd..3 * heads * hd].to_vec();
            be.rope(&mut one, hd, &table, 2, interleaved);
            assert_eq!(one, all[2 * heads * hd..3 * heads * hd], "{}: one row = its row of all", be.name());
            all
        });
    }
    for ty in [GgmlType::F32, GgmlType::BF16, GgmlType::Q4K, GgmlType::Q8_0] {
        let table = quantize_random(ty, 40, 256, 9);
        same_on_every_backend(&format!("embedding {}", ty.name()), |be| {
            let mut out = vec![];
            be.embedding(&table, &[3, 39, 0, 3], 0.5, &mut out);
            out
        });
    }
}

#[test]
fn paged_and_encoder_attention() {
    let (heads, kv_heads, hd, bs) = (4, 2, 16, 4);
    let params = AttentionParams {
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: hd,
        scale: 0.25,
        sliding_window: Some(7),
        softcap: Some(30.0),
        sinks: Some(rand_vec(heads, 8)),
    };
    // Two requests: 9 cached + 3 new tokens, and 5 new tokens (a prefill), in scattered blocks.
    let tables: [&[u32]; 2] = [&[5, 0, 3], &[1, 6]];
    let (lens, new) = ([12, 5], [3, 5]);
    let slots: Vec<usize> = (0..2)
        .flat_map(|s| (lens[s] - new[s]..lens[s]).map(move |p| tables[s][p / bs] as usize * bs + p % bs))
        .collect();
    let tokens = new[0] + new[1];
    let q = rand_vec(tokens * heads * hd, 1);
    let (k, v) = (rand_vec(tokens * kv_heads * hd, 2), rand_vec(tokens * kv_heads * hd, 3));
    let (old_k, old_v) = (rand_vec(9 * kv_heads * hd, 4), rand_vec(9 * kv_heads * hd, 5));
    let old_slots: Vec<usize> = (0..9).map(|p| tables[0][p / bs] as usize * bs + p % bs).collect();
    same_on_every_backend("paged attention", |be| {
        let mut kv = KvCache::new(1, 8, bs, kv_heads, hd, KvDtype::F32);
        be.write_kv(&mut kv, 0, &old_slots, &old_k, &old_v);
        be.write_kv(&mut kv, 0, &slots, &k, &v);
        let seqs = [
            SeqAttention { query_start: 0, query_len: new[0], seq_len: lens[0], block_table: tables[0] },
            SeqAttention { query_start: new[0], query_len: new[1], seq_len: lens[1], block_table: tables[1] },
        ];
        let mut out = vec![0.0; q.len()];
        be.paged_attention(&q, &kv, 0, &seqs, &params, &mut out);
        out
    });
    let ep = EncoderAttentionParams { num_heads: heads, head_dim: hd, scale: 0.25, window: Some(2) };
    let (lens, width) = ([3usize, 6], heads * hd);
    let (q, k, v) = (rand_vec(9 * width, 6), rand_vec(9 * width, 7), rand_vec(9 * width, 8));
    let bias = rand_vec(heads * 11, 9);
    same_on_every_backend("encoder attention", |be| {
        let mut out = vec![0.0; q.len()];
        let rb = Some(RelativeBias { values: &bias, span: 6 });
        be.encoder_attention(&q, &k, &v, &lens, &ep, rb, &mut out);
        out
    });
}

#[test]
fn recurrent_steps() {
    let (dk, dv, tokens) = (16, 24, 3);
    same_on_every_backend("gated delta rule", |be| {
        let mut state = rand_vec(dk * dv, 1);
        let (mut scratch, mut outs) = (vec![], vec![]);
        for t in 0..tokens as u64 {
            let (q, k, v) = (rand_vec(dk, 10 + t), rand_vec(dk, 20 + t), rand_vec(dv, 30 + t));
            let mut out = vec![0.0; dv];
            // One decay for the state (gated delta-net), then one per key row (Kimi's).
            let decay =
                if t % 2 == 0 { vec![0.9] } else { rand_vec(dk, 40 + t).iter().map(|x| 0.9 + 0.05 * x).collect() };
            be.gated_delta_step(&mut state, &q, &k, &v, &decay, 0.3, &mut scratch, &mut out);
            outs.push(out);
        }
        (state, outs)
    });
    let (p, n) = (8, 16);
    same_on_every_backend("Mamba-2 step", |be| {
        let mut state = rand_vec(p * n, 2);
        let mut out = vec![0.0; p];
        be.ssm_step(&mut state, &rand_vec(p, 3), &rand_vec(n, 4), &rand_vec(n, 5), 0.2, 0.8, 0.5, &mut out);
        (state, out)
    });
    let (channels, kernel) = (12, 4);
    same_on_every_backend("causal conv1d", |be| {
        let mut x = rand_vec(5 * channels, 6);
        let mut state = rand_vec((kernel - 1) * channels, 7);
        be.causal_conv1d(&mut x, &mut state, &rand_vec(channels * kernel, 8), kernel, &mut vec![]);
        (x, state)
    });
}
