#!/usr/bin/env python3
"""How long an engine's greedy output stays equal to the float32 reference.

    python3 scripts/accuracy_vs_float32.py --golden tests/goldens/real/smollm2.json \\
        --url http://127.0.0.1:8000 --kind openai|llama.cpp [--name LABEL]

The goldens (scripts/make_goldens.py) hold transformers' float32 greedy tokens on the `hf` dir
that was derived from the GGUF file, so a quantized engine serving that GGUF runs the same
weights: any difference comes from its arithmetic (activation quantization, accumulation order).
For every golden prompt (as token ids, raw and chat-templated) the script asks the server for as
many greedy tokens as the golden has (ignoring EOS) and reports the number of leading tokens that
match. `--kind openai` uses /v1/completions with `return_token_ids` (vllm-rs serve, vLLM);
`--kind llama.cpp` uses llama-server's /completion with `return_tokens`. Stdlib only.
"""

import argparse
import json
import statistics
import urllib.request


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def generate(args, prompt: list[int], n: int) -> list[int]:
    if args.kind == "openai":
        body = {"model": args.model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "skip_special_tokens": False}
        return post(args.url + "/v1/completions", body)["choices"][0]["token_ids"]
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1, "ignore_eos": True,
            "return_tokens": True, "cache_prompt": False, "samplers": ["top_k"]}
    return post(args.url + "/completion", body)["tokens"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--golden", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--kind", choices=["openai", "llama.cpp"], required=True)
    p.add_argument("--model", default="smollm2", help="model name for /v1/completions")
    p.add_argument("--name", default=None)
    args = p.parse_args()
    g = json.load(open(args.golden))
    agree = []
    for c in g["cases"]:
        want = c["token_ids"]
        got = generate(args, c["prompt_token_ids"], len(want))
        same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        agree.append(same)
    name = args.name or args.kind
    print(f"{name}: leading tokens equal to float32 per prompt {agree} (of {len(g['cases'][0]['token_ids'])}); "
          f"median {statistics.median(agree)}, mean {statistics.mean(agree):.1f}, "
          f"all {sum(a == len(c['token_ids']) for a, c in zip(agree, g['cases']))}/{len(agree)} prompts")


if __name__ == "__main__":
    main()
