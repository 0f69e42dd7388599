#!/usr/bin/env python3
"""A random-weight Qwen3.5-shaped hybrid (gated delta-net + gated attention) for speed runs.

Speed does not depend on weight values, and no real Qwen3.5 checkpoint can be fetched here
(package registries only). The shapes are Qwen3.5-0.8B's text model (hidden 1024, 24 layers, every
4th full attention, 16 delta-net heads of 128); the vocabulary is Qwen2.5's (151,936) so
Qwen2.5-0.5B's tokenizer files make it servable end to end (the output is gibberish).

Usage: python scripts/make_hybrid_bench_model.py OUT_DIR [TOKENIZER_DIR]
Writes OUT_DIR/{config.json, model.safetensors} in bfloat16 (made by transformers itself), and
copies tokenizer.json / tokenizer_config.json from TOKENIZER_DIR when given.
"""
import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

out = sys.argv[1]
config = Qwen3_5TextConfig(
    vocab_size=151936, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
    num_attention_heads=8, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
    rope_parameters={'rope_type': 'default', 'rope_theta': 10000000.0, 'partial_rotary_factor': 0.25},
    eos_token_id=151645, bos_token_id=151643,
)
config.architectures = ['Qwen3_5ForCausalLM']
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
n = sum(p.numel() for p in model.parameters())
print(f'{out}: {n / 1e6:.0f}M parameters')
if len(sys.argv) > 2:
    for f in ('tokenizer.json', 'tokenizer_config.json', 'generation_config.json'):
        src = os.path.join(sys.argv[2], f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(out, f))
