//! Our scalar reference `ggml::dequantize` against the `gguf` Python package's `dequantize`, for
//! every GGML type we support (`scripts/make_dequant_goldens.py`: real tensor rows of the test
//! GGUFs, gguf-py's quantizer on real weights, or random blocks where neither exists).
//!
//! Exact: both sides do the same f32 operations in the same order (`d * q - m` etc.), so every
//! value must be bit-identical (compared as bits, so even the sign of a zero counts).

use vllm_rs_kernels::GgmlType;
use vllm_rs_kernels::ggml::dequantize;
use vllm_rs_testutil::{golden, test_data};

fn ty(name: &str) -> GgmlType {
    *GgmlType::ALL.iter().find(|t| t.name() == name).unwrap_or_else(|| panic!("unknown type {name} in golden"))
}

fn range(v: &serde_json::Value) -> std::ops::Range<usize> {
    v[0].as_u64().unwrap() as usize..v[1].as_u64().unwrap() as usize
}

#[test]
fn dequantize_matches_gguf_py_for_every_type() {
    let index = golden("dequant/index.json");
    let blocks = std::fs::read(test_data("goldens/dequant/blocks.bin")).unwrap();
    let values = std::fs::read(test_data("goldens/dequant/values.bin")).unwrap();
    let mut covered = std::collections::BTreeSet::new();
    for case in index["cases"].as_array().unwrap() {
        let t = ty(case["type"].as_str().unwrap());
        let what = format!("{} ({}: {})", t.name(), case["source"].as_str().unwrap(), case["origin"].as_str().unwrap());
        let raw = &blocks[range(&case["blocks"])];
        let want: Vec<f32> =
            values[range(&case["values"])].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(want.len(), case["n"].as_u64().unwrap() as usize);
        assert_eq!(Some(raw.len()), t.bytes_for(want.len()), "{what}: block bytes do not fit the element count");
        let mut got = vec![f32::NAN; want.len()];
        dequantize(t, raw, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{what}: element {i} (block {}) is {g:e}, gguf-py says {w:e}",
                i / t.block_size()
            );
        }
        covered.insert(t.name());
    }
    let missing: Vec<_> = GgmlType::ALL.iter().map(|t| t.name()).filter(|n| !covered.contains(n)).collect();
    assert!(missing.is_empty(), "no dequantization golden for {missing:?}: rerun scripts/make_dequant_goldens.py");
}
