//! Beam search (`use_beam_search`, `length_penalty`) on the real SmolLM2 model, checked against
//! a beam search this test runs itself through plain one-token completions (their top
//! logprobs), scored as vLLM's `get_beam_search_score`; and the sums of the returned logprobs
//! against the prompt logprobs of each beam's tokens.

mod common;

use common::Server;
use serde_json::{Value, json};

/// A chat turn the model answers briefly, so that some beams end with EOS within the budget.
const QUESTION: &str = "What is 2+2?";

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

/// The chat prompt as token ids (the template applied) and the EOS id.
fn chat_prompt(s: &Server) -> (Vec<u64>, u64) {
    let r = s.ok("/tokenize", &json!({"messages": [{"role": "user", "content": QUESTION}]}));
    let eos = s.ok("/tokenize", &json!({"prompt": "<|im_end|>", "add_special_tokens": false}));
    (ids(&r["tokens"]), ids(&eos["tokens"])[0])
}

#[derive(Clone, Debug)]
struct Beam {
    tokens: Vec<u64>,
    cum: f64,
    stopped: bool,
}

/// The next-token top logprobs after `prefix`, from a one-token greedy completion.
fn top_logprobs(s: &Server, prefix: &[u64], k: usize) -> Vec<(u64, f64)> {
    let r = s.ok(
        "/v1/completions",
        &json!({"prompt": prefix, "max_tokens": 1, "temperature": 0, "logprobs": k, "return_tokens_as_token_ids": true}),
    );
    let top = r["choices"][0]["logprobs"]["top_logprobs"][0].as_object().unwrap();
    top.iter().map(|(t, lp)| (t.strip_prefix("token_id:").unwrap().parse().unwrap(), lp.as_f64().unwrap())).collect()
}

/// vLLM's algorithm, written out independently: the expected beams, best first.
fn reference_beams(s: &Server, prompt: &[u64], eos: u64, width: usize, max_tokens: usize, penalty: f64) -> Vec<Beam> {
    let mut live = vec![Beam { tokens: Vec::new(), cum: 0.0, stopped: false }];
    let mut done = Vec::new();
    for _ in 0..max_tokens {
        let mut cands = Vec::new();
        for b in &live {
            let prefix = [prompt, &b.tokens].concat();
            for (t, lp) in top_logprobs(s, &prefix, 2 * width) {
                let mut nb = b.clone();
                nb.cum += lp;
                if t == eos {
                    nb.stopped = true;
                    done.push(nb);
                } else {
                    nb.tokens.push(t);
                    cands.push(nb);
                }
            }
        }
        cands.sort_by(|a, b| b.cum.total_cmp(&a.cum));
        cands.truncate(width);
        live = cands;
    }
    done.extend(live);
    // The length counts the prompt (vLLM's `get_beam_search_score`).
    let score = |b: &Beam| b.cum / ((prompt.len() + b.tokens.len()) as f64).powf(penalty);
    done.sort_by(|a, b| score(b).total_cmp(&score(a)));
    done.truncate(width);
    done
}

/// The logprob of `tokens` after `prompt`, from the prompt logprobs of an echo.
fn sequence_logprob(s: &Server, prompt: &[u64], tokens: &[u64]) -> f64 {
    let all = [prompt, tokens].concat();
    let r = s.ok("/v1/completions", &json!({"prompt": all, "max_tokens": 1, "prompt_logprobs": 0}));
    let plp = r["choices"][0]["prompt_logprobs"].as_array().unwrap();
    (prompt.len()..all.len()).map(|i| plp[i][all[i].to_string()]["logprob"].as_f64().unwrap()).sum()
}

fn beam_request(prompt: &[u64], n: usize, max_tokens: usize, penalty: f64) -> Value {
    json!({"prompt": prompt, "use_beam_search": true, "n": n, "max_tokens": max_tokens,
           "length_penalty": penalty, "logprobs": 1, "return_token_ids": true})
}

#[test]
fn beams_match_a_reference_search_best_first() {
    let s = Server::start(&[]);
    let (prompt, eos) = chat_prompt(&s);
    let (width, max_tokens) = (3, 10);
    for penalty in [1.0, 0.0] {
        let r = s.ok("/v1/completions", &beam_request(&prompt, width, max_tokens, penalty));
        let choices = r["choices"].as_array().unwrap();
        let expected = reference_beams(&s, &prompt, eos, width, max_tokens, penalty);
        assert_eq!(choices.len(), expected.len(), "{r}");
        assert!(expected.iter().any(|b| b.stopped), "no beam reached EOS: the test needs one");
        let mut generated = 0;
        for (c, e) in choices.iter().zip(&expected) {
            let got = ids(&c["token_ids"]);
            assert_eq!(got, e.tokens, "penalty {penalty}: {r}");
            assert_eq!(c["finish_reason"], if e.stopped { "stop" } else { "length" }, "{c}");
            if e.stopped {
                assert_eq!(c["stop_reason"], eos, "{c}");
            }
            // The returned logprobs are the tokens' own (the EOS step, when it ended the beam, has none).
            let returned: f64 =
                c["logprobs"]["token_logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
            let independent = sequence_logprob(&s, &prompt, &got);
            assert!((returned - independent).abs() < 1e-3, "{returned} vs {independent}: {c}");
            let text = s.ok("/detokenize", &json!({"tokens": got}));
            assert_eq!(c["text"], text["prompt"], "{c}");
            generated += got.len();
        }
        assert_eq!(r["usage"]["completion_tokens"], generated, "{r}");
    }
}

#[test]
fn width_one_is_greedy_and_chat_streams_the_finished_beams() {
    let s = Server::start(&[]);
    let greedy = s.ok("/v1/completions", &json!({"prompt": "The sky is", "max_tokens": 12, "temperature": 0}));
    let beam = s.ok("/v1/completions", &json!({"prompt": "The sky is", "max_tokens": 12, "use_beam_search": true}));
    assert_eq!(beam["choices"][0]["text"], greedy["choices"][0]["text"], "{beam}");

    // Several prompts: `n` beams each, choices numbered prompt by prompt.
    let two = s.ok(
        "/v1/completions",
        &json!({"prompt": ["The sky is", "Paris is"], "n": 2, "max_tokens": 3,
                                              "use_beam_search": true, "temperature": 0}),
    );
    let idx: Vec<u64> = two["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2, 3], "{two}");
    assert_eq!(
        two["choices"][2]["text"],
        s.ok(
            "/v1/completions",
            &json!({"prompt": "Paris is", "max_tokens": 3,
        "use_beam_search": true})
        )["choices"][0]["text"]
    );

    let chat =
        json!({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8, "n": 2, "use_beam_search": true});
    let full = s.ok("/v1/chat/completions", &chat);
    assert_eq!(full["choices"].as_array().unwrap().len(), 2, "{full}");
    let mut streamed = vec![String::new(); 2];
    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    for chunk in s.stream("/v1/chat/completions", &stream) {
        for c in chunk["choices"].as_array().unwrap() {
            streamed[c["index"].as_u64().unwrap() as usize] += c["delta"]["content"].as_str().unwrap_or("");
        }
    }
    for (i, text) in streamed.iter().enumerate() {
        assert_eq!(full["choices"][i]["message"]["content"], *text, "{full}");
    }
}

#[test]
fn bad_beam_requests_are_refused_as_vllm_refuses_them() {
    let s = Server::start(&[]);
    let refused = |body: Value, wording: &str| {
        let (status, r) = s.post("/v1/completions", &body);
        assert_eq!(status, 400, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(wording), "{r}");
    };
    refused(
        json!({"prompt": "x", "use_beam_search": true, "stream": true}),
        "Streaming is not currently supported with beam search",
    );
    refused(json!({"prompt": "x", "use_beam_search": true, "n": 0}), "n must be at least 1");
    // Each step asks for 2n logprobs, past --max-logprobs (20) here.
    refused(json!({"prompt": "x", "use_beam_search": true, "n": 11}), "greater than max allowed: 20");
    refused(json!({"prompt": "x", "use_beam_search": true, "length_penalty": "long"}), "length_penalty");
    // Off, it is the usual greedy rule for n.
    refused(json!({"prompt": "x", "use_beam_search": false, "n": 2, "temperature": 0}), "n must be 1");
}
