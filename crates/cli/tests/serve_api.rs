//! `vllm-rs serve` end to end: the real binary, the smollm2 GGUF, a real HTTP client.
//! Completions and chat, streaming and not, usage, stops, logprobs, n, seeds, echo, token
//! prompts, tokenize/detokenize and metrics.

mod common;

use common::Server;
use serde_json::{Value, json};

const PROMPT: &str = "The capital of France is";

fn text_of(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

fn usage(v: &Value) -> (u64, u64, u64) {
    let u = &v["usage"];
    (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
        u["total_tokens"].as_u64().unwrap(),
    )
}

/// Concatenated text per choice index, the finish reason per index, and the usage chunk.
fn gather_completion_stream(chunks: &[Value]) -> (Vec<String>, Vec<Option<String>>, Option<Value>) {
    let mut texts: Vec<String> = Vec::new();
    let mut finish: Vec<Option<String>> = Vec::new();
    let mut usage = None;
    for c in chunks {
        assert_eq!(c["object"], "text_completion", "{c}");
        if let Some(u) = c.get("usage").filter(|u| !u.is_null())
            && c["choices"].as_array().unwrap().is_empty()
        {
            usage = Some(u.clone());
        }
        for ch in c["choices"].as_array().unwrap() {
            let i = ch["index"].as_u64().unwrap() as usize;
            if texts.len() <= i {
                texts.resize(i + 1, String::new());
                finish.resize(i + 1, None);
            }
            texts[i].push_str(ch["text"].as_str().unwrap());
            if let Some(f) = ch["finish_reason"].as_str() {
                assert!(finish[i].is_none(), "two finishes for choice {i}");
                finish[i] = Some(f.to_string());
            }
        }
    }
    (texts, finish, usage)
}

fn gather_chat_stream(chunks: &[Value]) -> (Vec<String>, Vec<Option<String>>, Option<Value>) {
    let mut texts: Vec<String> = Vec::new();
    let mut finish: Vec<Option<String>> = Vec::new();
    let mut usage = None;
    for c in chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        if c["choices"].as_array().unwrap().is_empty() {
            usage = Some(c["usage"].clone());
        }
        for ch in c["choices"].as_array().unwrap() {
            let i = ch["index"].as_u64().unwrap() as usize;
            if texts.len() <= i {
                texts.resize(i + 1, String::new());
                finish.resize(i + 1, None);
            }
            if let Some(t) = ch["delta"]["content"].as_str() {
                texts[i].push_str(t);
            }
            if let Some(f) = ch["finish_reason"].as_str() {
                finish[i] = Some(f.to_string());
            }
        }
    }
    (texts, finish, usage)
}

#[test]
fn completions_and_chat() {
    let s = Server::start(&["--served-model-name", "smol", "other-name"]);

    // /v1/models and /version
    let (st, body) = s.get("/v1/models");
    assert_eq!(st, 200);
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "smol");
    assert_eq!(models["data"][1]["id"], "other-name");
    assert_eq!(models["data"][0]["max_model_len"], 2048);
    assert_eq!(models["data"][0]["owned_by"], "vllm");
    let (st, body) = s.get("/version");
    assert_eq!(st, 200);
    assert!(serde_json::from_str::<Value>(&body).unwrap()["version"].is_string());

    // Non-streaming greedy completion: shape and exact usage.
    let req = json!({"model": "smol", "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": true,
                     "return_token_ids": true});
    let full = s.ok("/v1/completions", &req);
    assert_eq!(full["object"], "text_completion");
    assert_eq!(full["model"], "smol");
    assert!(full["id"].as_str().unwrap().starts_with("cmpl-"));
    let choice = &full["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "length");
    let token_ids: Vec<u64> = choice["token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(token_ids.len(), 24);
    let prompt_ids = choice["prompt_token_ids"].as_array().unwrap().clone();
    let tok = s.ok("/tokenize", &json!({"prompt": PROMPT}));
    assert_eq!(tok["tokens"].as_array().unwrap(), &prompt_ids);
    assert_eq!(tok["count"].as_u64().unwrap() as usize, prompt_ids.len());
    assert_eq!(tok["max_model_len"], 2048);
    assert_eq!(usage(&full), (prompt_ids.len() as u64, 24, prompt_ids.len() as u64 + 24));
    let detok = s.ok("/detokenize", &json!({"tokens": token_ids}));
    assert_eq!(detok["prompt"].as_str().unwrap(), text_of(&full));

    // The same request streamed: same text, finish and usage.
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let chunks = s.stream("/v1/completions", &sreq);
    let (texts, finish, u) = gather_completion_stream(&chunks);
    assert_eq!(texts, vec![text_of(&full)]);
    assert_eq!(finish, vec![Some("length".to_string())]);
    assert_eq!(u.unwrap(), full["usage"]);
    // Streamed token ids add up to the same ids; the first chunk carries the prompt ids.
    let streamed_ids: Vec<u64> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().clone())
        .flat_map(|ch| ch["token_ids"].as_array().cloned().unwrap_or_default())
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(streamed_ids, token_ids);
    assert_eq!(chunks[0]["choices"][0]["prompt_token_ids"].as_array().unwrap(), &prompt_ids);

    // continuous_usage_stats: usage on every chunk, completion tokens counting up.
    let mut creq = sreq.clone();
    creq["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
    let chunks = s.stream("/v1/completions", &creq);
    let counts: Vec<u64> = chunks
        .iter()
        .filter(|c| !c["choices"].as_array().unwrap().is_empty())
        .map(|c| c["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 24);
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 1), "{counts:?}");

    // Without stream_options there is no usage chunk.
    let plain = s.stream("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": 3, "stream": true}));
    assert!(plain.iter().all(|c| c.get("usage").is_none()), "{plain:?}");

    // Completions default to 16 new tokens (OpenAI's and vLLM's default).
    let d = s.ok("/v1/completions", &json!({"prompt": PROMPT, "ignore_eos": true, "temperature": 0}));
    assert_eq!(usage(&d).1, 16);

    stop_strings(&s, &full);
    logprobs(&s);
    logprob_token_ids(&s);
    echo_and_token_prompts(&s, &full);
    n_and_seeds(&s);
    chat(&s);
    metrics_after_traffic(&s);
}

/// Stop strings that span two tokens end the text just before them (or after, with
/// `include_stop_str_in_output`), streamed or not.
fn stop_strings(s: &Server, full: &Value) {
    let text = text_of(full);
    let ids: Vec<u64> =
        full["choices"][0]["token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    // Token texts via logprobs of the same greedy request.
    let lp = s.ok(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": true, "logprobs": 0}),
    );
    let tokens: Vec<String> = lp["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(tokens.len(), ids.len());
    assert_eq!(tokens.concat(), text);
    // A stop string made of the end of token k and the start of token k+1, first seen there.
    let starts: Vec<usize> = tokens
        .iter()
        .scan(0, |acc, t| {
            let start = *acc;
            *acc += t.len();
            Some(start)
        })
        .collect();
    let mut found = None;
    for k in 1..tokens.len() - 1 {
        let (a, b) = (&tokens[k], &tokens[k + 1]);
        let (Some(last), Some(first)) = (a.chars().last(), b.chars().next()) else { continue };
        let stop = format!("{last}{first}");
        let start = starts[k] + a.len() - last.len_utf8();
        if text.find(&stop) == Some(start) && !stop.trim().is_empty() {
            found = Some((stop, start));
            break;
        }
    }
    let (stop, at) = found.unwrap_or_else(|| panic!("no token-spanning stop string in {tokens:?}"));
    let req = json!({"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": true, "stop": [stop.clone()]});
    let r = s.ok("/v1/completions", &req);
    assert_eq!(text_of(&r), text[..at], "stop {stop:?}");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    assert_eq!(r["choices"][0]["stop_reason"], json!(stop));
    let mut inc = req.clone();
    inc["include_stop_str_in_output"] = json!(true);
    let r2 = s.ok("/v1/completions", &inc);
    assert_eq!(text_of(&r2), text[..at + stop.len()]);
    let mut st = req.clone();
    st["stream"] = json!(true);
    let (texts, finish, _) = gather_completion_stream(&s.stream("/v1/completions", &st));
    assert_eq!(texts[0], text[..at]);
    assert_eq!(finish[0].as_deref(), Some("stop"));
    // Usage counts every generated token, including the one the stop string cut.
    let u = usage(&r).1;
    assert!(u as usize <= ids.len() && u >= 1);
}

fn max_of(m: &serde_json::Map<String, Value>) -> f64 {
    m.values().map(|v| v.as_f64().unwrap()).fold(f64::NEG_INFINITY, f64::max)
}

/// Logprob shapes as vLLM's, and the greedy token's logprob is the largest.
fn logprobs(s: &Server) {
    let r = s.ok("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 3}));
    let lp = &r["choices"][0]["logprobs"];
    let n = usage(&r).1 as usize;
    for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[key].as_array().unwrap().len(), n, "{key}: {lp}");
    }
    let offsets: Vec<u64> = lp["text_offset"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(offsets[0], 0);
    for i in 0..n {
        let token = lp["tokens"][i].as_str().unwrap();
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!((3..=4).contains(&top.len()), "{top:?}");
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(chosen <= 0.0);
        assert!((chosen - max_of(top)).abs() < 1e-6, "greedy token {token:?} is not the max of {top:?}");
        assert_eq!(top[token].as_f64().unwrap(), chosen);
        if i > 0 {
            let prev = lp["tokens"][i - 1].as_str().unwrap();
            assert_eq!(offsets[i], offsets[i - 1] + prev.chars().count() as u64);
        }
    }
    // Streamed logprobs equal the non-streamed ones, offsets continuing across chunks.
    let chunks = s.stream(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 3, "stream": true}),
    );
    let mut tokens = Vec::new();
    let mut offs = Vec::new();
    for c in &chunks {
        let l = &c["choices"][0]["logprobs"];
        tokens.extend(l["tokens"].as_array().unwrap().iter().cloned());
        offs.extend(l["text_offset"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()));
    }
    assert_eq!(&tokens, lp["tokens"].as_array().unwrap());
    assert_eq!(offs, offsets);

    // Chat: content[{token, logprob, bytes, top_logprobs}].
    let r = s.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 6, "temperature": 0,
                "logprobs": true, "top_logprobs": 2}),
    );
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len() as u64, usage(&r).1);
    let mut joined = String::new();
    for c in content {
        let token = c["token"].as_str().unwrap();
        joined.push_str(token);
        let bytes: Vec<u8> = c["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(bytes, token.as_bytes());
        let top = c["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        let best = top.iter().map(|t| t["logprob"].as_f64().unwrap()).fold(f64::NEG_INFINITY, f64::max);
        assert!((c["logprob"].as_f64().unwrap() - best).abs() < 1e-6);
        assert_eq!(top[0]["token"], c["token"], "the chosen token comes first");
    }
    assert!(joined.starts_with(r["choices"][0]["message"]["content"].as_str().unwrap()));

    // prompt_logprobs: one entry per prompt token, the first null, each holding the prompt token.
    let r = s.ok("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 2}));
    let plp = r["choices"][0]["prompt_logprobs"].as_array().unwrap();
    assert_eq!(plp.len() as u64, usage(&r).0);
    assert!(plp[0].is_null());
    let tok = s.ok("/tokenize", &json!({"prompt": PROMPT}));
    for (i, entry) in plp.iter().enumerate().skip(1) {
        let id = tok["tokens"][i].to_string();
        let e = &entry[&id];
        assert!(e["logprob"].as_f64().unwrap() <= 0.0 && e["rank"].as_u64().unwrap() >= 1, "{entry}");
        assert!(entry.as_object().unwrap().len() <= 3);
    }
}

/// `logprob_token_ids` (vLLM): each generated position reports the chosen token and exactly the
/// listed ids, whose logprobs equal the prompt logprobs of the same tokens appended to the text.
fn logprob_token_ids(s: &Server) {
    let prompt: Vec<u64> = s.ok("/tokenize", &json!({"prompt": PROMPT}))["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let listed = [100u64, 2000, 5000];
    let r = s.ok(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 1, "logprob_token_ids": listed,
                "return_tokens_as_token_ids": true, "return_token_ids": true}),
    );
    let c = &r["choices"][0];
    let generated: Vec<u64> = c["token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    for (i, top) in c["logprobs"]["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top = top.as_object().unwrap();
        let mut want: Vec<String> = listed.iter().chain([&generated[i]]).map(|t| format!("token_id:{t}")).collect();
        want.sort();
        want.dedup();
        let mut keys: Vec<String> = top.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, want, "position {i}: {top:?}");
        let context = [&prompt[..], &generated[..i]].concat();
        for id in listed {
            let with_id = [&context[..], &[id]].concat();
            let probe = s.ok("/v1/completions", &json!({"prompt": with_id, "max_tokens": 1, "prompt_logprobs": 0}));
            let plp = probe["choices"][0]["prompt_logprobs"].as_array().unwrap();
            let independent = plp[context.len()][id.to_string()]["logprob"].as_f64().unwrap();
            let got = top[&format!("token_id:{id}")].as_f64().unwrap();
            assert!((got - independent).abs() < 1e-4, "position {i}, token {id}: {got} vs {independent}");
        }
    }
    // Chat: the chosen token and the listed one, whatever top_logprobs says.
    let chat = s.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 3, "temperature": 0,
                "logprobs": true, "top_logprobs": 5, "logprob_token_ids": [100], "return_tokens_as_token_ids": true}),
    );
    for c in chat["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        let names: Vec<&str> =
            c["top_logprobs"].as_array().unwrap().iter().map(|t| t["token"].as_str().unwrap()).collect();
        assert_eq!(names[0], c["token"].as_str().unwrap(), "{c}");
        assert!(names.contains(&"token_id:100") && names.len() <= 2, "{c}");
    }
    // An empty list changes nothing; misuse is a 400 naming the field.
    let plain = s.ok(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 2,
                                                "logprob_token_ids": []}),
    );
    assert!(plain["choices"][0]["logprobs"]["top_logprobs"][0].as_object().unwrap().len() >= 2, "{plain}");
    for (body, says) in [
        (json!({"prompt": PROMPT, "logprob_token_ids": [5]}), "needs `logprobs`"),
        (json!({"prompt": PROMPT, "logprobs": 1, "logprob_token_ids": [10_000_000]}), "out of vocabulary"),
        (json!({"prompt": PROMPT, "logprobs": 1, "logprob_token_ids": [5], "use_beam_search": true}), "beam search"),
        (
            json!({"prompt": PROMPT, "logprobs": 1, "logprob_token_ids": [5], "echo": true, "max_tokens": 0}),
            "only echoes",
        ),
    ] {
        let (status, r) = s.post("/v1/completions", &body);
        assert_eq!(status, 400, "{body}: {r}");
        assert_eq!(r["error"]["param"], "logprob_token_ids", "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(says), "{r}");
    }
}

/// `echo` returns the prompt (and its logprobs) before the completion; token-id prompts and
/// prompt lists give the same tokens as text prompts.
fn echo_and_token_prompts(s: &Server, full: &Value) {
    let r = s.ok(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "echo": true,
                                           "logprobs": 1}),
    );
    let text = text_of(&r);
    assert!(text.starts_with(PROMPT) && text.len() > PROMPT.len(), "{text:?}");
    let (p, c, _) = usage(&r);
    let lp = &r["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len() as u64, p + c);
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    assert!(lp["token_logprobs"][1].is_number());
    let only = s.ok("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": 0, "echo": true}));
    assert_eq!(text_of(&only), PROMPT);

    let ids = full["choices"][0]["prompt_token_ids"].clone();
    let by_ids =
        s.ok("/v1/completions", &json!({"prompt": ids, "max_tokens": 24, "temperature": 0, "ignore_eos": true}));
    assert_eq!(text_of(&by_ids), text_of(full));
    let echoed = s.ok("/v1/completions", &json!({"prompt": ids, "max_tokens": 1, "echo": true}));
    assert!(text_of(&echoed).starts_with(PROMPT));

    // lm-eval's `local-completions` loglikelihood request: token-id prompts, echo, logprobs 1.
    let other = s.ok("/tokenize", &json!({"prompt": "One, two, three,"}))["tokens"].clone();
    let ll = s.ok(
        "/v1/completions",
        &json!({"prompt": [ids.clone(), other.clone()], "max_tokens": 1, "logprobs": 1, "echo": true, "temperature": 0,
                "seed": 1234}),
    );
    for (i, p) in [&ids, &other].iter().enumerate() {
        let c = &ll["choices"][i];
        assert_eq!(c["index"], i);
        let lp = &c["logprobs"];
        let n = p.as_array().unwrap().len();
        assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n + 1);
        assert!(lp["token_logprobs"][0].is_null());
        for j in 1..=n {
            let top = lp["top_logprobs"][j].as_object().unwrap();
            assert!(!top.is_empty() && top.len() <= 2, "{top:?}");
            assert!(lp["token_logprobs"][j].as_f64().unwrap() <= max_of(top) + 1e-6);
        }
    }

    let many = s.ok(
        "/v1/completions",
        &json!({"prompt": [PROMPT, "One, two, three,"], "max_tokens": 24, "temperature": 0, "ignore_eos": true}),
    );
    let choices = many["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[0]["index"], 0);
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(choices[0]["text"], full["choices"][0]["text"]);
    let second = s.ok("/tokenize", &json!({"prompt": "One, two, three,"}));
    let (p, c, _) = usage(&many);
    assert_eq!(p, usage(full).0 + second["count"].as_u64().unwrap());
    assert_eq!(c, 48);
}

/// `n` fan-out and seeds: a seeded request repeats exactly; n > 1 gives n choices.
fn n_and_seeds(s: &Server) {
    let req = json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "seed": 1234,
                     "ignore_eos": true});
    let a = s.ok("/v1/completions", &req);
    let b = s.ok("/v1/completions", &req);
    assert_eq!(text_of(&a), text_of(&b));
    let mut nreq = req.clone();
    nreq["n"] = json!(3);
    let r = s.ok("/v1/completions", &nreq);
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    // Child i is seeded seed + i (vLLM's parallel sampling): choice 0 is the n = 1 sample.
    assert_eq!(choices[0]["text"], a["choices"][0]["text"]);
    assert_eq!(usage(&r).1, 36);
    assert_eq!(usage(&r).0, usage(&a).0, "the prompt counts once");
    let again = s.ok("/v1/completions", &nreq);
    assert_eq!(again["choices"], r["choices"]);
    nreq["stream"] = json!(true);
    let (texts, finish, _) = gather_completion_stream(&s.stream("/v1/completions", &nreq));
    assert_eq!(texts.len(), 3);
    for i in 0..3 {
        assert_eq!(texts[i], choices[i]["text"].as_str().unwrap());
        assert_eq!(finish[i].as_deref(), Some("length"));
    }
    // Chat n = 2.
    let r = s.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Tell me a story"}], "n": 2, "max_tokens": 5,
                "temperature": 0.9, "seed": 3}),
    );
    assert_eq!(r["choices"].as_array().unwrap().len(), 2);
}

fn chat(s: &Server) {
    let msgs = json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]);
    let req = json!({"model": "other-name", "messages": msgs, "max_tokens": 20, "temperature": 0});
    let full = s.ok("/v1/chat/completions", &req);
    assert_eq!(full["object"], "chat.completion");
    assert_eq!(full["model"], "smol", "responses report the first served name");
    assert!(full["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let msg = &full["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    let content = msg["content"].as_str().unwrap().to_string();
    assert!(!content.is_empty());
    // Prompt tokens as /tokenize counts the same messages.
    let tok = s.ok("/tokenize", &json!({"messages": msgs}));
    assert_eq!(usage(&full).0, tok["count"].as_u64().unwrap());
    // Content given as text parts renders the same.
    let parts = json!([{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
                       {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]);
    let p = s.ok("/v1/chat/completions", &json!({"messages": parts, "max_tokens": 20, "temperature": 0}));
    assert_eq!(p["choices"][0]["message"]["content"], msg["content"]);
    custom_roles(s);

    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let chunks = s.stream("/v1/chat/completions", &sreq);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let (texts, finish, u) = gather_chat_stream(&chunks);
    assert_eq!(texts, vec![content]);
    assert_eq!(finish[0].as_deref(), full["choices"][0]["finish_reason"].as_str());
    assert_eq!(u.unwrap(), full["usage"]);

    // max_completion_tokens wins over max_tokens.
    let r = s.ok(
        "/v1/chat/completions",
        &json!({"messages": msgs, "max_tokens": 20, "max_completion_tokens": 3, "ignore_eos": true}),
    );
    assert_eq!(usage(&r).1, 3);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
}

/// A role outside OpenAI's set reaches the template as given, the same in string and
/// content-part form (vLLM's custom chat message).
fn custom_roles(s: &Server) {
    let tokens = |role: &str, content: Value| {
        let msgs = json!([{"role": role, "content": content}, {"role": "user", "content": "What is 2+2?"}]);
        s.ok("/tokenize", &json!({"messages": msgs}))["tokens"].clone()
    };
    let plain = tokens("critic", json!("Be kind."));
    let parts = tokens("critic", json!([{"type": "text", "text": "Be"}, {"type": "text", "text": "kind."}]));
    let joined = tokens("critic", json!("Be\nkind."));
    assert_eq!(parts, joined, "text parts are joined by newlines");
    assert_ne!(plain, tokens("system", json!("Be kind.")), "the role is rendered, not replaced");
    let text = s.ok("/detokenize", &json!({"tokens": plain}))["prompt"].as_str().unwrap().to_string();
    assert!(text.contains("critic\nBe kind."), "{text}");
    let one_part = tokens("critic", json!([{"type": "text", "text": "Be kind."}]));
    assert_eq!(one_part, plain);
    // And it generates like any chat request.
    let msgs = json!([{"role": "critic", "content": [{"type": "text", "text": "Be kind."}]},
                      {"role": "user", "content": "Hi"}]);
    let r = s.ok("/v1/chat/completions", &json!({"messages": msgs, "max_tokens": 3}));
    assert_eq!(r["choices"][0]["message"]["role"], "assistant");
}

fn metrics_after_traffic(s: &Server) {
    let m = s.metrics();
    let get = |name: &str| m.iter().find(|(k, _)| k.starts_with(name)).map(|(_, v)| *v).unwrap_or(-1.0);
    assert!(get("vllm:prompt_tokens_total{") > 0.0);
    assert!(get("vllm:generation_tokens_total{") > 0.0);
    assert!(get("vllm:prefix_cache_queries_total{") > 0.0);
    assert!(get("vllm:prefix_cache_hits_total{") > 0.0, "repeated prompts hit the prefix cache");
    assert!(get("vllm:e2e_request_latency_seconds_count{") > 10.0);
    assert!(get("vllm:time_to_first_token_seconds_count{") > 10.0);
    assert!(get("vllm:inter_token_latency_seconds_count{") > 10.0);
    assert!(get("vllm:request_success_total{engine=\"0\",model_name=\"smol\",finished_reason=\"length\"}") > 0.0);
    assert!(get("vllm:request_success_total{engine=\"0\",model_name=\"smol\",finished_reason=\"stop\"}") > 0.0);
    // Gauges: nothing left running (a stop-string abort reaches the engine just after its reply).
    common::eventually("idle gauges", std::time::Duration::from_secs(10), || {
        s.metric("vllm:num_requests_running{") == 0.0
            && s.metric("vllm:num_requests_waiting{") == 0.0
            && s.metric("vllm:kv_cache_usage_perc{") == 0.0
    });
    assert!(
        m.iter().any(|(k, _)| k.starts_with("vllm:time_to_first_token_seconds_bucket{") && k.contains("le=\"0.001\""))
    );
}
