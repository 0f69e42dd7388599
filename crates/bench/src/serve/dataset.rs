//! The prompts: vLLM's random dataset (same seed, same prompts) and ShareGPT-style JSON files.

use super::rng::{NumpyGenerator, PyRandom};
use super::tokenizer::BenchTokenizer;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::Path;

/// One request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRequest {
    pub prompt: String,
    pub prompt_len: usize,
    pub expected_output_len: usize,
    pub request_id: String,
}

/// `--random-range-ratio`: one value for both lengths, or `{"input": a, "output": b}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeRatio {
    pub input: f64,
    pub output: f64,
}

impl RangeRatio {
    pub fn parse(s: &str) -> Result<Self> {
        if let Ok(v) = s.trim().parse::<f64>() {
            return Ok(RangeRatio { input: v, output: v });
        }
        let json: Value = serde_json::from_str(s).with_context(|| {
            format!("--random-range-ratio {s}: expected a number or {{\"input\": a, \"output\": b}}")
        })?;
        let get = |k: &str| json.get(k).and_then(Value::as_f64);
        match (get("input"), get("output")) {
            (Some(input), Some(output)) => Ok(RangeRatio { input, output }),
            _ => bail!("--random-range-ratio {s}: a JSON ratio needs numeric 'input' and 'output' keys"),
        }
    }
}

/// The random dataset's knobs (`--random-*`).
#[derive(Clone, Copy, Debug)]
pub struct RandomSpec {
    pub input_len: usize,
    pub output_len: usize,
    pub prefix_len: usize,
    pub range_ratio: RangeRatio,
}

/// vLLM's `RandomDataset.sample`: per request, an input length and output length drawn uniformly
/// around the means, and a prompt of consecutive allowed token ids from a random offset, after a
/// random prefix shared by all requests; decoded to text and re-encoded (re-drawing or cutting
/// tokens) until it is exactly that many tokens long, as far as ten tries go.
pub fn sample_random(
    tok: &dyn BenchTokenizer,
    num_requests: usize,
    seed: u64,
    spec: &RandomSpec,
    request_id_prefix: &str,
) -> Result<Vec<SampleRequest>> {
    let mut rng = NumpyGenerator::new(seed);
    let RangeRatio { input: in_rr, output: out_rr } = spec.range_ratio;
    if !(0.0..1.0).contains(&in_rr) {
        bail!("input_range_ratio must be in [0, 1).");
    }
    if !(0.0..1.0).contains(&out_rr) {
        bail!("output_range_ratio must be in [0, 1).");
    }
    let num_special = tok.num_special_tokens_to_add();
    let real_input_len = spec.input_len.saturating_sub(num_special);
    let min_sampled = (real_input_len as f64 * (1.0 - in_rr)).floor() as usize;
    if spec.prefix_len + min_sampled < 1 {
        bail!(
            "--random-input-len is too small: with tokenizer special tokens {num_special} and input range ratio \
             {in_rr}, the minimum possible total input tokens (prefix + sampled) is {}. Increase \
             --random-input-len and/or --random-prefix-len, or decrease the input range ratio.",
            spec.prefix_len + min_sampled
        );
    }
    let input_low = (real_input_len as f64 * (1.0 - in_rr)).floor() as i64;
    let input_high = (real_input_len as f64 * (1.0 + in_rr)).ceil() as i64;
    let output_low = ((spec.output_len as f64 * (1.0 - out_rr)).floor() as i64).max(1);
    let output_high = ((spec.output_len as f64 * (1.0 + out_rr)).ceil() as i64).max(1);
    tracing::info!(
        "Sampling input_len from [{input_low}, {input_high}] and output_len from [{output_low}, {output_high}]"
    );
    let vocab_size = tok.vocab_size();
    if vocab_size == 0 {
        bail!("the tokenizer has an empty vocabulary");
    }
    let input_lens = rng.integers(input_low, input_high + 1, num_requests);
    let output_lens = rng.integers(output_low, output_high + 1, num_requests);
    let offsets = rng.integers(0, vocab_size as i64, num_requests);

    let special = tok.all_special_ids();
    let allowed: Vec<u32> = (0..vocab_size as u32).filter(|id| !special.contains(id)).collect();
    if allowed.is_empty() {
        bail!("the tokenizer has no non-special tokens");
    }

    let prefix = if spec.prefix_len > 0 {
        let picks = rng.integers(0, allowed.len() as i64, spec.prefix_len);
        let tokens: Vec<u32> = picks.iter().map(|&i| allowed[i as usize]).collect();
        let (_, adjusted, mismatch) = decode_to_target_len(tok, tokens, spec.prefix_len, &mut rng)?;
        if mismatch != 0 {
            tracing::warn!(
                "Prefix tokenization produced {} {} tokens than expected after decoding and re-encoding. This is \
                 expected due to the imperfect nature of the sampling procedure",
                mismatch.abs(),
                if mismatch > 0 { "more" } else { "fewer" }
            );
        }
        adjusted
    } else {
        Vec::new()
    };

    let mut requests = Vec::with_capacity(num_requests);
    let mut mismatch_total = 0i64;
    for i in 0..num_requests {
        let input_len = input_lens[i] as usize;
        let start = offsets[i] as usize + i;
        let mut seq = prefix.clone();
        seq.extend((0..input_len).map(|k| allowed[(start + k) % allowed.len()]));
        let (prompt, adjusted, mismatch) = decode_to_target_len(tok, seq, spec.prefix_len + input_len, &mut rng)?;
        mismatch_total += mismatch;
        requests.push(SampleRequest {
            prompt,
            prompt_len: adjusted.len(),
            expected_output_len: output_lens[i] as usize,
            request_id: format!("{request_id_prefix}{i}"),
        });
    }
    if mismatch_total != 0 {
        tracing::warn!(
            "Across all generated prompts, there were {} {} tokens than expected after decoding and re-encoding. \
             This is expected due to the imperfect nature of the sampling procedure.",
            mismatch_total.abs(),
            if mismatch_total > 0 { "more" } else { "fewer" }
        );
    }
    Ok(requests)
}

/// vLLM's `gen_prompt_decode_to_target_len`: decode, re-encode; pad with random ids (from the whole
/// vocabulary) or cut to the target and retry, at most ten times. Returns the last decoded text,
/// its token ids and how many tokens it is off the target.
fn decode_to_target_len(
    tok: &dyn BenchTokenizer,
    mut seq: Vec<u32>,
    target: usize,
    rng: &mut NumpyGenerator,
) -> Result<(String, Vec<u32>, i64)> {
    let mut remaining = 10;
    let mut mismatch = 0i64;
    loop {
        let prompt = tok.decode(&seq)?;
        seq = tok.encode(&prompt, false)?;
        if remaining == 0 {
            if seq.len() != target {
                mismatch = seq.len() as i64 - target as i64;
            }
            return Ok((prompt, seq, mismatch));
        }
        if seq.len() == target {
            return Ok((prompt, seq, mismatch));
        }
        if seq.len() < target {
            let extra = rng.integers(0, tok.vocab_size() as i64, target - seq.len());
            seq.extend(extra.iter().map(|&t| t as u32));
        } else {
            seq.truncate(target);
        }
        remaining -= 1;
    }
}

/// vLLM's `is_valid_sequence` with its defaults (min 4 tokens, prompt at most 1024, total 2048).
fn is_valid_sequence(prompt_len: usize, output_len: usize, skip_min_output_len_check: bool) -> bool {
    let prompt_too_short = prompt_len < 4;
    let output_too_short = !skip_min_output_len_check && output_len < 4;
    let prompt_too_long = prompt_len > 1024;
    let combined_too_long = prompt_len + output_len > 2048;
    !(prompt_too_short || output_too_short || prompt_too_long || combined_too_long)
}

/// Options of the ShareGPT dataset.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShareGptSpec {
    /// `--sharegpt-output-len`: overrides the completion's length.
    pub output_len: Option<usize>,
    pub disable_shuffle: bool,
    pub no_oversample: bool,
}

/// vLLM's `ShareGPTDataset`: entries with at least two turns, shuffled with Python's
/// `random.seed(seed)`; the first turn is the prompt, the second's token count the output length
/// (unless overridden); sequences outside vLLM's length bounds are skipped; too few samples are
/// topped up by random choice.
pub fn sample_sharegpt(
    tok: &dyn BenchTokenizer,
    path: &Path,
    num_requests: usize,
    seed: u64,
    spec: &ShareGptSpec,
    request_id_prefix: &str,
) -> Result<Vec<SampleRequest>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--dataset-path {}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).with_context(|| format!("--dataset-path {}: not JSON", path.display()))?;
    let entries =
        data.as_array().with_context(|| format!("--dataset-path {}: expected a JSON list", path.display()))?;
    let mut convs: Vec<&Vec<Value>> = entries
        .iter()
        .filter_map(|e| e.get("conversations").and_then(Value::as_array))
        .filter(|c| c.len() >= 2)
        .collect();
    if !spec.disable_shuffle {
        PyRandom::new(seed).shuffle(&mut convs);
    }
    let turn = |c: &Value| -> Result<String> {
        c.get("value").and_then(Value::as_str).map(str::to_string).context("a conversation turn has no 'value' string")
    };
    let mut samples = Vec::new();
    for conv in convs {
        if samples.len() >= num_requests {
            break;
        }
        let (prompt, completion) = (turn(&conv[0])?, turn(&conv[1])?);
        let prompt_len = tok.encode(&prompt, true)?.len();
        let output_len = match spec.output_len {
            Some(n) => n,
            None => tok.encode(&completion, true)?.len(),
        };
        if !is_valid_sequence(prompt_len, output_len, spec.output_len.is_some()) {
            continue;
        }
        let request_id = format!("{request_id_prefix}{}", samples.len());
        samples.push(SampleRequest { prompt, prompt_len, expected_output_len: output_len, request_id });
    }
    if samples.is_empty() {
        bail!("--dataset-path {}: no usable conversations", path.display());
    }
    if !spec.no_oversample && samples.len() < num_requests {
        let mut rng = PyRandom::new(seed);
        let base = samples.len();
        let extra: Vec<SampleRequest> = (0..num_requests - base)
            .map(|i| SampleRequest {
                request_id: format!("{request_id_prefix}{}", base + i),
                ..samples[rng.choice_index(base)].clone()
            })
            .collect();
        samples.extend(extra);
        tracing::info!("Oversampled requests to reach {num_requests} total samples.");
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per character: ids are `char - 'a'`; 26 letters, `#` (id 26) special.
    struct Letters;

    impl BenchTokenizer for Letters {
        fn vocab_size(&self) -> usize {
            27
        }
        fn all_special_ids(&self) -> Vec<u32> {
            vec![26]
        }
        fn num_special_tokens_to_add(&self) -> usize {
            0
        }
        fn encode(&self, text: &str, _: bool) -> Result<Vec<u32>> {
            Ok(text.chars().map(|c| if c == '#' { 26 } else { c as u32 - 'a' as u32 }).collect())
        }
        fn decode(&self, ids: &[u32]) -> Result<String> {
            Ok(ids.iter().map(|&i| if i == 26 { '#' } else { char::from(b'a' + i as u8) }).collect())
        }
    }

    fn spec(input_len: usize, output_len: usize, prefix_len: usize, ratio: f64) -> RandomSpec {
        RandomSpec { input_len, output_len, prefix_len, range_ratio: RangeRatio { input: ratio, output: ratio } }
    }

    #[test]
    fn lengths_within_the_range_ratio() {
        let s = spec(40, 20, 0, 0.25);
        let reqs = sample_random(&Letters, 200, 3, &s, "r-").unwrap();
        assert_eq!(reqs.len(), 200);
        for r in &reqs {
            assert!((30..=50).contains(&r.prompt_len), "{}", r.prompt_len);
            assert!((15..=25).contains(&r.expected_output_len), "{}", r.expected_output_len);
            assert_eq!(r.prompt.chars().count(), r.prompt_len);
            assert!(!r.prompt.contains('#'), "special tokens are never drawn");
        }
        // Both ends of the ranges are reachable.
        assert!(reqs.iter().any(|r| r.prompt_len == 30) && reqs.iter().any(|r| r.prompt_len == 50));
        assert_eq!(reqs[7].request_id, "r-7");
        // Ratio 0: exactly the requested lengths.
        for r in sample_random(&Letters, 10, 0, &spec(16, 8, 0, 0.0), "").unwrap() {
            assert_eq!((r.prompt_len, r.expected_output_len), (16, 8));
        }
    }

    #[test]
    fn prefix_is_shared_and_seed_reproducible() {
        let s = spec(12, 4, 5, 0.5);
        let a = sample_random(&Letters, 8, 11, &s, "").unwrap();
        let prefix = &a[0].prompt[..5];
        for r in &a {
            assert!(r.prompt.starts_with(prefix));
            assert!((5 + 6..=5 + 18).contains(&r.prompt_len));
        }
        assert_eq!(a, sample_random(&Letters, 8, 11, &s, "").unwrap());
        let b = sample_random(&Letters, 8, 12, &s, "").unwrap();
        assert_ne!(a, b, "another seed, other prompts");
    }

    #[test]
    fn bad_ratios_and_lengths_are_errors() {
        assert!(sample_random(&Letters, 1, 0, &spec(10, 10, 0, 1.0), "").is_err());
        assert!(sample_random(&Letters, 1, 0, &spec(0, 10, 0, 0.0), "").is_err());
        assert!(RangeRatio::parse("{\"input\": 0.1}").is_err());
        assert_eq!(
            RangeRatio::parse("{\"input\": 0.1, \"output\": 0.5}").unwrap(),
            RangeRatio { input: 0.1, output: 0.5 }
        );
        assert_eq!(RangeRatio::parse("0.3").unwrap(), RangeRatio { input: 0.3, output: 0.3 });
    }

    /// The same prompts, lengths and output lengths as vLLM's `RandomDataset` for the same seed,
    /// with the real SmolLM2 tokenizer (golden from `scripts/goldens/bench_serve_random.py`).
    #[test]
    fn same_prompts_as_vllm() {
        let dir = vllm_rs_testutil::hf_dir("smollm2");
        let tok = vllm_rs_frontend::load_tokenizer(&dir, None).unwrap();
        let golden = vllm_rs_testutil::golden("bench_serve/random_smollm2.json");
        for case in golden["cases"].as_array().unwrap() {
            let n = |k: &str| case[k].as_u64().unwrap() as usize;
            let ratio = case["range_ratio"].as_f64().unwrap();
            let s = spec(n("input_len"), n("output_len"), n("prefix_len"), ratio);
            let reqs = sample_random(&tok, n("num_prompts"), n("seed") as u64, &s, "").unwrap();
            let ints = |k: &str| -> Vec<usize> {
                case[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect()
            };
            let prompts: Vec<&str> = case["prompts"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
            assert_eq!(reqs.iter().map(|r| r.prompt.as_str()).collect::<Vec<_>>(), prompts, "case {case}");
            assert_eq!(reqs.iter().map(|r| r.prompt_len).collect::<Vec<_>>(), ints("prompt_lens"));
            assert_eq!(reqs.iter().map(|r| r.expected_output_len).collect::<Vec<_>>(), ints("output_lens"));
        }
    }

    /// A file in the temp directory, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn with_contents(text: &str) -> Self {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("vllm-rs-bench-{}-{n}.json", std::process::id()));
            std::fs::write(&p, text).unwrap();
            TempFile(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn sharegpt_file(n: usize) -> TempFile {
        let entries: Vec<Value> = (0..n)
            .map(|i| {
                serde_json::json!({"id": i, "conversations": [
                    {"from": "human", "value": format!("abcd{}", "x".repeat(i))},
                    {"from": "gpt", "value": "y".repeat(4 + i)}
                ]})
            })
            .chain([serde_json::json!({"id": "short", "conversations": [{"from": "human", "value": "only"}]})])
            .collect();
        TempFile::with_contents(&serde_json::to_string(&entries).unwrap())
    }

    #[test]
    fn sharegpt_shuffles_like_python_and_oversamples() {
        let f = sharegpt_file(6);
        let spec = ShareGptSpec::default();
        let reqs = sample_sharegpt(&Letters, f.path(), 4, 0, &spec, "s-").unwrap();
        // random.seed(0); random.shuffle(list(range(6))) == [4, 2, 1, 0, 5, 3]
        let order: Vec<usize> = reqs.iter().map(|r| r.prompt_len - 4).collect();
        assert_eq!(order, [4, 2, 1, 0]);
        for r in &reqs {
            assert_eq!(r.expected_output_len, r.prompt_len, "completion length = prompt length here");
        }
        // Fewer conversations than prompts: topped up by random.choice, ids continue.
        // random.seed(0); [random.choice(range(6)) for _ in range(3)] == [3, 3, 0]
        let reqs = sample_sharegpt(&Letters, f.path(), 9, 0, &spec, "s-").unwrap();
        assert_eq!(reqs.len(), 9);
        assert_eq!(reqs[8].request_id, "s-8");
        let extra: Vec<&str> = reqs[6..].iter().map(|r| r.prompt.as_str()).collect();
        assert_eq!(extra, [reqs[3].prompt.as_str(), reqs[3].prompt.as_str(), reqs[0].prompt.as_str()]);
        let no = ShareGptSpec { no_oversample: true, ..spec };
        assert_eq!(sample_sharegpt(&Letters, f.path(), 9, 0, &no, "").unwrap().len(), 6);
        // --sharegpt-output-len overrides; --disable-shuffle keeps the file order.
        let fixed = ShareGptSpec { output_len: Some(2), disable_shuffle: true, ..spec };
        let reqs = sample_sharegpt(&Letters, f.path(), 3, 0, &fixed, "").unwrap();
        assert_eq!(
            reqs.iter().map(|r| (r.prompt_len, r.expected_output_len)).collect::<Vec<_>>(),
            [(4, 2), (5, 2), (6, 2)]
        );
    }
}
