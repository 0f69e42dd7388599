//! `vllm-rs serve` on tiny random `*ForSequenceClassification` models with a tiny tokenizer
//! (`scripts/make_tiny_encoders.py`, transformers float32 as the reference): `/classify`
//! probabilities and labels, cross-encoder `/score` and `/rerank` (sigmoid of the pair's
//! logit, pairs tokenized with type ids), and the 400s for what each model does not do.

mod common;

use common::Server;
use serde_json::{Value, json};
use vllm_rs_testutil::{golden, test_data};

fn serve(name: &str) -> (Server, Value) {
    let dir = test_data(&format!("data/tiny-encoders/{name}"));
    let s = Server::start_args(vec![dir.to_string_lossy().into_owned()], &["--served-model-name", name]);
    (s, golden(&format!("tiny-encoders/{name}.json"))["server"].clone())
}

fn close(got: &Value, want: &Value) {
    let (g, w) = (got.as_f64().unwrap(), want.as_f64().unwrap());
    assert!((g - w).abs() < 1e-5, "{g} vs {w}");
}

/// `/classify` on the tiny three-label head `name` gives transformers' probabilities and the
/// label (of `labels`) of the largest; returns the server.
fn check_classify(name: &str, labels: [&str; 3]) -> Server {
    let (s, g) = serve(name);
    let r = s.ok("/classify", &json!({"input": g["texts"]}));
    for (i, want) in g["probs"].as_array().unwrap().iter().enumerate() {
        let d = &r["data"][i];
        let want = want.as_array().unwrap();
        assert_eq!(d["num_classes"], 3);
        for (p, w) in d["probs"].as_array().unwrap().iter().zip(want) {
            close(p, w);
        }
        let best = (0..3).max_by(|&a, &b| want[a].as_f64().unwrap().total_cmp(&want[b].as_f64().unwrap())).unwrap();
        assert_eq!(d["label"], labels[best]);
    }
    s
}

#[test]
fn classify_returns_transformers_probabilities() {
    let s = check_classify("bert_cls", ["neg", "neutral", "pos"]);
    // Three labels: no single relevance score; embeddings are not this model's job.
    for (path, body) in [
        ("/score", json!({"text_1": "a", "text_2": "b"})),
        ("/v1/embeddings", json!({"input": "a"})),
        ("/v1/completions", json!({"prompt": "a"})),
    ] {
        let (status, r) = s.post(path, &body);
        assert_eq!(status, 400, "{path}: {r}");
    }
}

/// ModernBERT's sequence classifier (no token types, a mean-pooled ReLU head, local and global
/// attention layers) behind the server.
#[test]
fn modernbert_classifies_as_transformers_does() {
    // No id2label in its config: transformers' default names.
    let s = check_classify("modernbert_cls", ["LABEL_0", "LABEL_1", "LABEL_2"]);
    let (status, r) = s.post("/v1/embeddings", &json!({"input": "a"}));
    assert_eq!(status, 400, "{r}");
}

#[test]
fn cross_encoder_scores_and_reranks_pairs() {
    let (s, g) = serve("xlm_roberta_cls");
    let pairs = g["pairs"].as_array().unwrap();
    let scores = g["pair_scores"].as_array().unwrap();
    let t1: Vec<&Value> = pairs.iter().map(|p| &p[0]).collect();
    let t2: Vec<&Value> = pairs.iter().map(|p| &p[1]).collect();
    let r = s.ok("/score", &json!({"text_1": t1, "text_2": t2}));
    for (i, w) in scores.iter().enumerate() {
        close(&r["data"][i]["score"], w);
    }
    // The two pairs sharing the query, as a rerank: sorted by score, documents echoed.
    let r = s.ok("/rerank", &json!({"query": pairs[0][0], "documents": [pairs[0][1], pairs[1][1]]}));
    let results = r["results"].as_array().unwrap();
    let first = if scores[0].as_f64() > scores[1].as_f64() { 0 } else { 1 };
    assert_eq!(results[0]["index"], first, "{r}");
    close(&results[0]["relevance_score"], &scores[first]);
    assert_eq!(results[0]["document"]["text"], pairs[first][1]);
    let (status, _) = s.post("/v1/embeddings", &json!({"input": "a"}));
    assert_eq!(status, 400);
    assert_eq!(s.ok("/classify", &json!({"input": "sky"}))["data"][0]["num_classes"], 1);
}

#[test]
fn an_embedding_model_refuses_classify() {
    let dir = vllm_rs_testutil::hf_dir("minilm");
    let s = Server::start_args(vec![dir.to_string_lossy().into_owned()], &[]);
    let (status, r) = s.post("/classify", &json!({"input": "a"}));
    assert!(status == 400 && r["error"]["message"].as_str().unwrap().contains("classification head"), "{r}");
}

/// `dimensions` on a model whose config declares Matryoshka sizes (the tiny BERT, given the
/// tiny tokenizer and `matryoshka_dimensions`): the vector is cut, then normalized; a size not
/// declared is a 400.
#[test]
fn matryoshka_dimensions_cut_then_normalize() {
    let dir = std::env::temp_dir().join(format!("vllm-rs-matryoshka-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = test_data("data/tiny-encoders/bert");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    std::fs::copy(test_data("data/tiny-encoders/bert_cls/tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config["matryoshka_dimensions"] = json!([8, 16]);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let s = Server::start_args(vec![dir.to_string_lossy().into_owned()], &[]);
    let full = s.ok("/v1/embeddings", &json!({"input": "the cat sat", "normalize": false}));
    let cut = s.ok("/v1/embeddings", &json!({"input": "the cat sat", "dimensions": 8}));
    let full: Vec<f64> = full["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let cut: Vec<f64> = cut["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!((full.len(), cut.len()), (32, 8));
    let norm = full[..8].iter().map(|x| x * x).sum::<f64>().sqrt();
    for (c, f) in cut.iter().zip(&full[..8]) {
        assert!((c - f / norm).abs() < 1e-6, "{c} vs {}", f / norm);
    }
    let (status, r) = s.post("/v1/embeddings", &json!({"input": "a", "dimensions": 9}));
    assert!(status == 400 && r["error"]["param"] == "dimensions", "{r}");
    std::fs::remove_dir_all(&dir).ok();
}
