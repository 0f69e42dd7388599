//! The real sentence-embedding models against sentence-transformers float32
//! (`scripts/make_embedding_goldens.py`): the goldens' token ids through our encoder and
//! pooling, all sentences in one batch, must give vectors at cosine ≥ 0.99999 to the
//! reference; each sentence alone gives the same bits as in the batch.

use vllm_rs_models::PoolingWorkspace;
use vllm_rs_models::pooling::normalize;
use vllm_rs_testutil::{golden, hf_dir};

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * y).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn check(name: &str) {
    let enc = vllm_rs_models::load_encoder(&hf_dir(name)).unwrap_or_else(|e| panic!("{e}"));
    assert!(enc.unread.is_empty(), "{name}: tensors left unread: {:?}", enc.unread);
    let g = golden(&format!("embeddings/{name}.json"));
    let cases = g["cases"].as_array().unwrap();
    let ids: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| c["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect())
        .collect();
    let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
    let flat: Vec<u32> = ids.concat();
    let d = enc.info.hidden_size;
    let mut ws = PoolingWorkspace::default();
    let hidden = enc.forward(&flat, None, &lens, &mut ws).to_vec();
    let mut start = 0;
    for (i, c) in cases.iter().enumerate() {
        let rows = &hidden[start * d..(start + lens[i]) * d];
        start += lens[i];
        let mut v = Vec::new();
        enc.pooling.pooling_type.pool(rows, d, &mut v);
        assert!(enc.pooling.normalize, "{name}: modules.json has a Normalize module");
        normalize(&mut v);
        let want: Vec<f64> = c["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let cos = cosine(&v, &want);
        assert!(cos >= 0.99999, "{name} case {i} ({:?}): cosine {cos}", c["text"].as_str().unwrap());
        let mut alone_ws = PoolingWorkspace::default();
        let alone = enc.forward(&ids[i], None, &lens[i..=i], &mut alone_ws);
        assert_eq!(alone, rows, "{name} case {i}: alone differs from in the batch");
    }
}

#[test]
fn minilm_matches_sentence_transformers() {
    check("minilm");
}

#[test]
fn mpnet_matches_sentence_transformers() {
    check("mpnet");
}
