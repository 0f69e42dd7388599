#!/usr/bin/env python3
"""Tiny random-weight checkpoints, made by transformers itself, for architecture parity tests.

Writes tests/data/tiny/<arch>/{config.json, model.safetensors} (float32) for:
  llama   LlamaForCausalLM   GQA 4/2, rope_theta 50000, untied lm_head
  qwen2   Qwen2ForCausalLM   QKV bias, 4 heads / 1 kv head, rope_theta 1e6, tied embeddings
  qwen3   Qwen3ForCausalLM   q/k RMSNorm, head_dim 32 != hidden/heads, rope_theta 1e6, untied
  gemma3  Gemma3ForCausalLM  sliding window 8 on 3 of 4 layers, rope bases 1e6 (global) and
                             1e4 (local), query_pre_attn_scalar 24 != head_dim 32, tied

Every parameter is redrawn from a fixed seed: matrices ~ N(0, STD) with a large STD so logits
are peaked (small random weights give near-ties that make greedy comparisons meaningless;
Gemma's scaled, tied embeddings are drawn smaller so the model does not just echo its input);
RMSNorm weights and biases get noise too (transformers initialises them to 1/0, which would
leave a missing bias or a wrong `1 + w` offset unnoticed). Non-default rope bases catch a loader
that ignores `rope_parameters` (transformers 5 no longer writes `rope_theta`).
No tokenizer: goldens use token ids.

Usage: python scripts/make_tiny_models.py [OUT_DIR]   (default <repo>/tests/data/tiny)
Needs scripts/requirements-goldens.txt (torch, transformers).
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STD = 0.15  # weight std: peaked logits with clear top-2 margins (checked by make_goldens.py)

COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=140, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, initializer_range=STD,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

ARCHS = {
    'llama': ('LlamaForCausalLM', transformers.LlamaConfig, 101, dict(
        num_hidden_layers=3, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={'rope_type': 'default', 'rope_theta': 50000.0})),
    'qwen2': ('Qwen2ForCausalLM', transformers.Qwen2Config, 102, dict(
        num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 1000000.0})),
    'qwen3': ('Qwen3ForCausalLM', transformers.Qwen3Config, 103, dict(
        num_hidden_layers=3, head_dim=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={'rope_type': 'default', 'rope_theta': 1000000.0})),
    'gemma3': ('Gemma3ForCausalLM', transformers.Gemma3TextConfig, 104, dict(
        num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=24, sliding_window=8,
        layer_types=['sliding_attention', 'sliding_attention', 'full_attention', 'sliding_attention'],
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={'full_attention': {'rope_type': 'default', 'rope_theta': 1000000.0},
                         'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0}})),
}


def make(arch, out_root):
    cls_name, config_cls, seed, extra = ARCHS[arch]
    config = config_cls(**dict(COMMON, **extra))
    config.architectures = [cls_name]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if 'norm' in name:  # Gemma stores w of (1 + w); the others store the scale itself
                p.copy_((0.0 if arch == 'gemma3' else 1.0) + 0.2 * noise)
            elif name.endswith('.bias'):
                p.copy_(0.2 * noise)
            elif arch == 'gemma3' and 'embed_tokens' in name:
                # Gemma multiplies embeddings by sqrt(hidden): keep the residual stream from
                # being all input embedding, else the tied lm_head just repeats the last token.
                p.copy_(STD / config.hidden_size ** 0.5 * noise)
            else:
                p.copy_(STD * noise)
    model.eval()
    out = os.path.join(out_root, arch)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    gc = os.path.join(out, 'generation_config.json')
    if os.path.exists(gc):
        os.remove(gc)  # no sampling defaults needed; tests decode greedily from token ids
    size = os.path.getsize(os.path.join(out, 'model.safetensors'))
    n = sum(p.numel() for p in model.parameters())
    print(f'{out}: {cls_name}, {n:,} params, {size / 1e6:.2f} MB')
    assert size < 1_000_000, 'keep tiny checkpoints under 1 MB'
    # Sanity: the saved config must round-trip to the same rope settings.
    saved = json.load(open(os.path.join(out, 'config.json')))
    assert saved['architectures'] == [cls_name] and 'rope_parameters' in saved, saved


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, 'tests', 'data', 'tiny')
    torch.set_num_threads(1)
    for arch in ARCHS:
        make(arch, out_root)


if __name__ == '__main__':
    main()
