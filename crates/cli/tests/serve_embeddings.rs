//! `vllm-rs serve` on a real embedding model (all-MiniLM-L6-v2): `/v1/embeddings` end to end
//! (tokenizer, truncation, batching, pooling, normalization) against sentence-transformers'
//! vectors (`scripts/make_embedding_goldens.py`); base64 and token-id inputs; `/pooling`,
//! `/score` and `/rerank`; concurrent requests give the bits a request gets alone; bad inputs
//! are 400s; the OpenAI SDK's `embeddings.create` works.

mod common;

use common::Server;
use serde_json::{Value, json};
use std::process::Command;
use vllm_rs_testutil::{golden, hf_dir};

fn minilm() -> Server {
    Server::start_args(vec![hf_dir("minilm").to_string_lossy().into_owned()], &["--served-model-name", "minilm"])
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

#[test]
fn embeddings_match_sentence_transformers_end_to_end() {
    let s = minilm();
    let g = golden("embeddings/minilm.json");
    let cases = g["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    // The long sentence needs truncation, as sentence-transformers truncates to max_seq_length.
    let (status, err) = s.post("/v1/embeddings", &json!({"input": texts}));
    assert_eq!(status, 400, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("maximum context length is 256"), "{err}");
    assert_eq!(err["error"]["param"], "input_tokens");
    let r = s.ok("/v1/embeddings", &json!({"model": "minilm", "input": texts, "truncate_prompt_tokens": -1}));
    assert_eq!(r["object"], "list");
    assert_eq!(r["model"], "minilm");
    let tokens: usize = cases.iter().map(|c| c["token_ids"].as_array().unwrap().len()).sum();
    assert_eq!(r["usage"]["prompt_tokens"], tokens);
    for (i, c) in cases.iter().enumerate() {
        let d = &r["data"][i];
        assert_eq!((d["index"].as_u64(), d["object"].as_str()), (Some(i as u64), Some("embedding")));
        let v = floats(&d["embedding"]);
        assert_eq!(v.len(), 384);
        let cos = cosine(&v, &floats(&c["embedding"]));
        assert!(cos >= 0.99999, "case {i} {:?}: cosine {cos}", texts[i]);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "normalized: {norm}");
    }
    // Token ids in, the same vector out; base64 carries the same floats.
    let ids = &cases[0]["token_ids"];
    let by_ids = s.ok("/v1/embeddings", &json!({"input": ids}));
    assert_eq!(by_ids["data"][0]["embedding"], r["data"][0]["embedding"]);
    let b64 = s.ok("/v1/embeddings", &json!({"input": texts[0], "encoding_format": "base64"}));
    let text = b64["data"][0]["embedding"].as_str().unwrap();
    let bytes = base64_decode(text);
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let listed: Vec<f32> = floats(&r["data"][0]["embedding"]).iter().map(|&x| x as f32).collect();
    assert_eq!(decoded, listed);
    // `/pooling` returns the same vector under `data`.
    let p = s.ok("/pooling", &json!({"input": texts[0]}));
    assert_eq!(p["data"][0]["object"], "pooling");
    assert_eq!(p["data"][0]["data"], r["data"][0]["embedding"]);
    // normalize: false gives the raw mean-pooled vector, parallel to the normalized one.
    let raw = floats(&s.ok("/v1/embeddings", &json!({"input": texts[0], "normalize": false}))["data"][0]["embedding"]);
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3 && cosine(&raw, &floats(&r["data"][0]["embedding"])) > 0.999999);
}

/// Standard base64 (the test does not need a crate for it).
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    } as u32;
    let mut out = Vec::new();
    for chunk in s.trim_end_matches('=').as_bytes().chunks(4) {
        let n = chunk.iter().fold(0u32, |acc, &c| (acc << 6) | val(c)) << (6 * (4 - chunk.len()));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn score_and_rerank_rank_by_cosine_and_concurrency_changes_nothing() {
    let s = minilm();
    let query = "What is the capital of France?";
    let docs = ["The capital of Brazil is Brasilia.", "The capital of France is Paris.", "Cats sleep a lot."];
    let e = s.ok("/v1/embeddings", &json!({"input": [query, docs[0], docs[1], docs[2]]}));
    let vec_of = |i: usize| floats(&e["data"][i]["embedding"]);
    let want: Vec<f64> = (1..4).map(|i| cosine(&vec_of(0), &vec_of(i))).collect();
    for path in ["/score", "/v1/score"] {
        let r = s.ok(path, &json!({"text_1": query, "text_2": docs}));
        for (i, w) in want.iter().enumerate() {
            let got = r["data"][i]["score"].as_f64().unwrap();
            assert!((got - w).abs() < 1e-6, "{path} pair {i}: {got} vs {w}");
        }
    }
    let r = s.ok("/score", &json!({"queries": [query, query], "documents": [docs[1], docs[2]]}));
    assert!((r["data"][1]["score"].as_f64().unwrap() - want[2]).abs() < 1e-6);
    for path in ["/rerank", "/v1/rerank", "/v2/rerank"] {
        let r = s.ok(path, &json!({"query": query, "documents": docs, "top_n": 2}));
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["index"], 1, "Paris first: {r}");
        assert_eq!(results[0]["document"]["text"], docs[1]);
        assert!(results[0]["relevance_score"].as_f64() >= results[1]["relevance_score"].as_f64());
    }
    let bare = s.ok("/rerank", &json!({"query": query, "documents": docs, "return_documents": false}));
    assert_eq!(bare["results"].as_array().unwrap().len(), 3);
    assert!(bare["results"][0].get("document").is_none(), "{bare}");
    let (status, r) = s.post("/rerank", &json!({"query": query, "documents": docs, "top_n": -1}));
    assert!(status == 400 && r["error"]["param"] == "top_n", "{r}");
    // Many clients at once share batches; each gets exactly what it gets alone.
    let alone: Vec<Value> =
        docs.iter().map(|d| s.ok("/v1/embeddings", &json!({"input": d}))["data"][0]["embedding"].clone()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..12)
            .map(|k| {
                let (s, d, want) = (&s, docs[k % 3], &alone[k % 3]);
                scope.spawn(move || {
                    assert_eq!(&s.ok("/v1/embeddings", &json!({"input": [d, d]}))["data"][1]["embedding"], want)
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn bad_pooling_requests_are_400s_and_the_server_stays_healthy() {
    let s = minilm();
    let many: Vec<String> = (0..10_000).map(|i| format!("s{i}")).collect();
    let long = "word ".repeat(400);
    let bad = [
        ("/v1/embeddings", json!({"input": []}), "input"),
        ("/v1/embeddings", json!({"input": many}), "input"),
        ("/v1/embeddings", json!({"input": long}), "input_tokens"),
        ("/v1/embeddings", json!({"input": [[]]}), "input"),
        ("/v1/embeddings", json!({"input": [999999]}), "input"),
        ("/v1/embeddings", json!({"input": "x", "dimensions": 8}), "dimensions"),
        ("/v1/embeddings", json!({"input": "x", "encoding_format": "int8"}), "encoding_format"),
        ("/v1/embeddings", json!({"input": "x", "truncate_prompt_tokens": 100000}), "truncate_prompt_tokens"),
        ("/v1/embeddings", json!({"input": "x", "model": "other"}), "model"),
        ("/rerank", json!({"query": "q", "documents": []}), "documents"),
        ("/score", json!({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}), ""),
        ("/v1/completions", json!({"prompt": "hi"}), ""),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}]}), ""),
    ];
    for (path, body, param) in bad {
        let (status, r) = s.post(path, &body);
        let shown: String = body.to_string().chars().take(80).collect();
        assert!(status == 400 || (param == "model" && status == 404), "{path} {shown}: {status} {r}");
        assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        if !param.is_empty() && param != "model" {
            assert_eq!(r["error"]["param"], param, "{path} {shown}: {r}");
        }
    }
    let (status, r) = s.post("/v1/completions", &json!({"prompt": "hi"}));
    assert!(status == 400 && r["error"]["message"].as_str().unwrap().contains("embedding model"), "{r}");
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(
        s.ok("/v1/embeddings", &json!({"input": "still fine"}))["data"][0]["embedding"].as_array().unwrap().len(),
        384
    );
}

/// vLLM's periodic statistics line for a pooling model: the inputs' tokens are its prompt
/// throughput.
#[test]
fn a_pooling_server_logs_its_statistics() {
    let model = vec![hf_dir("minilm").to_string_lossy().into_owned()];
    let s = Server::start_args_with_env(model, &[], &[("VLLM_LOG_STATS_INTERVAL", "0.2")]);
    s.ok("/v1/embeddings", &json!({"input": ["a few words to embed", "and a few more"]}));
    let busy = |l: &str| l.contains("Avg prompt throughput: ") && !l.contains("Avg prompt throughput: 0.0 ");
    let logged = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        s.log().lines().any(busy)
    });
    assert!(logged, "{}", s.log());
}

#[test]
fn openai_sdk_embeddings_create_works() {
    let py = vllm_rs_testutil::models_dir().join("venv/bin/python");
    assert!(py.exists(), "{} missing: run scripts/fetch_test_models.sh", py.display());
    let s = minilm();
    let script = r#"
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
r = c.embeddings.create(model="minilm", input=["hello world", "bonjour"])
assert len(r.data) == 2 and len(r.data[0].embedding) == 384, r
assert r.usage.prompt_tokens > 0
# The SDK asks for base64 by default when numpy is around; ask explicitly for both forms.
f = c.embeddings.create(model="minilm", input="hello world", encoding_format="float")
b = c.embeddings.create(model="minilm", input="hello world", encoding_format="base64")
assert max(abs(x - y) for x, y in zip(f.data[0].embedding, r.data[0].embedding)) < 1e-6
try:
    c.embeddings.create(model="minilm", input=[])
    raise SystemExit("empty input accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400
print("OK")
"#;
    let out = Command::new(py).args(["-c", script, &s.base]).output().expect("run python");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && so.contains("OK"), "{so}\n{se}\nserver log:\n{}", s.log());
}

/// `--runner pooling` on a decoder (as Qwen3-Embedding is served): last-token pooling of its
/// final hidden states, normalized; batched requests equal lone ones; no text generation.
/// (Parity of those hidden states with transformers: `parity_tiny_encoders.rs`.)
#[test]
fn a_decoder_serves_embeddings_with_runner_pooling() {
    let model = vllm_rs_testutil::gguf_path("smollm2").to_string_lossy().into_owned();
    // vLLM's two spellings: --runner pooling, or --convert embed.
    let s = Server::start_args(vec![model.clone()], &["--runner", "pooling"]);
    let c = Server::start_args(vec![model], &["--convert", "embed"]);
    let hello = json!({"input": "hello"});
    assert_eq!(
        c.ok("/v1/embeddings", &hello)["data"][0]["embedding"],
        s.ok("/v1/embeddings", &hello)["data"][0]["embedding"]
    );
    let r = s.ok("/v1/embeddings", &json!({"input": ["The capital of France is", "hello"]}));
    let v = floats(&r["data"][0]["embedding"]);
    assert_eq!(v.len(), 576);
    assert!((v.iter().map(|x| x * x).sum::<f64>().sqrt() - 1.0).abs() < 1e-5);
    let alone = s.ok("/v1/embeddings", &json!({"input": "hello"}));
    assert_eq!(alone["data"][0]["embedding"], r["data"][1]["embedding"]);
    let (status, _) = s.post("/v1/completions", &json!({"prompt": "hi"}));
    assert_eq!(status, 400);
}
