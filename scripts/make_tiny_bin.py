#!/usr/bin/env python3
"""Tiny checkpoints saved as PyTorch `.bin` files (torch.save of the state dict), as older HF
repos and many EAGLE heads ship them, from the safetensors ones of scripts/make_tiny_models.py
and scripts/make_tiny_draft_heads.py:

  tests/data/tiny-bin/llama/          config.json, pytorch_model.bin
  tests/data/tiny-bin/llama_sharded/  config.json, pytorch_model-0000{1,2}-of-00002.bin,
                                      pytorch_model.bin.index.json (as save_pretrained shards)
  tests/data/tiny-bin/llama_eagle3/   config.json, pytorch_model.bin (with its i64 `d2t` and
                                      bool `t2d`)

The tensors are the safetensors ones, bit for bit, so the tests expect the same tokens.
Run with the goldens' venv (scripts/requirements-goldens.txt): python scripts/make_tiny_bin.py
"""
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "tests/data/tiny"
OUT = REPO / "tests/data/tiny-bin"


def save(name, state, shards=1, source=None):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    shutil.copy(SRC / (source or name) / "config.json", d / "config.json")
    if shards == 1:
        torch.save(state, d / "pytorch_model.bin")
        return
    names = sorted(state)
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    for i in range(shards):
        file = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {n: state[n] for n in names[i * per:(i + 1) * per]}
        torch.save(part, d / file)
        weight_map.update({n: file for n in part})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
             "weight_map": weight_map}
    (d / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2) + "\n")


def main():
    llama = load_file(SRC / "llama/model.safetensors")
    save("llama", llama)
    save("llama_sharded", llama, shards=2, source="llama")
    save("llama_eagle3", load_file(SRC / "llama_eagle3/model.safetensors"))
    for d in sorted(OUT.iterdir()):
        print(d.relative_to(REPO), sorted(p.name for p in d.iterdir()))


if __name__ == "__main__":
    main()
