#!/usr/bin/env python3
"""Random-weight checkpoints of realistic shapes for speed runs, made by transformers itself.

Speed does not depend on weight values, and the models these shapes come from cannot be fetched
here (package registries only). The vocabulary is Qwen2.5's (151,936) so Qwen2.5-0.5B's tokenizer
files make each one servable end to end (the output is gibberish).

Shapes:
  qwen35-0.8b   Qwen3.5-0.8B's text model: hidden 1024, 24 layers, every 4th full (gated)
                attention, 16 gated delta-net heads of 128 (issue 27).
  qwen3-30b-a3b-4l
                Qwen3-30B-A3B's layers (hidden 2048, 128 experts of 768, top-8, 32 query and
                4 KV heads of 128), 4 of its 48 layers so the file stays 1-2 GB at Q4_K_M
                (issue 26).

Usage: python scripts/make_bench_model.py SHAPE OUT_DIR [TOKENIZER_DIR]
Writes OUT_DIR/{config.json, model.safetensors} in bfloat16, and copies tokenizer.json /
tokenizer_config.json from TOKENIZER_DIR when given.
"""
import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3_5TextConfig, Qwen3MoeConfig

QWEN_IDS = dict(vocab_size=151936, eos_token_id=151645, bos_token_id=151643)


def qwen35_08b():
    config = Qwen3_5TextConfig(
        hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, max_position_embeddings=32768,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000000.0, 'partial_rotary_factor': 0.25},
        **QWEN_IDS)
    config.architectures = ['Qwen3_5ForCausalLM']
    return config


def qwen3_30b_a3b_4l():
    config = Qwen3MoeConfig(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={'rope_type': 'default', 'rope_theta': 1000000.0}, **QWEN_IDS)
    config.architectures = ['Qwen3MoeForCausalLM']
    return config


SHAPES = {'qwen35-0.8b': qwen35_08b, 'qwen3-30b-a3b-4l': qwen3_30b_a3b_4l}

if len(sys.argv) < 3 or sys.argv[1] not in SHAPES:
    sys.exit(f'usage: make_bench_model.py SHAPE OUT_DIR [TOKENIZER_DIR]; shapes: {", ".join(SHAPES)}')
shape, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(SHAPES[shape](), dtype=torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
n = sum(p.numel() for p in model.parameters())
print(f'{out}: {n / 1e6:.0f}M parameters')
if len(sys.argv) > 3:
    for f in ('tokenizer.json', 'tokenizer_config.json', 'generation_config.json'):
        src = os.path.join(sys.argv[3], f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(out, f))
