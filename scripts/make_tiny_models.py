#!/usr/bin/env python3
"""Tiny random-weight checkpoints, made by transformers itself, for architecture parity tests.

Writes tests/data/tiny/<arch>/{config.json, model.safetensors} (float32) for every architecture
in scripts/tiny_models.json, which is generated from the ArchSpecs in crates/models/src (each
model file declares its tiny config: class, seed, config keywords over the shared ones).

Every parameter is redrawn from a fixed seed: matrices ~ N(0, STD) with a large STD so logits
are peaked (small random weights give near-ties that make greedy comparisons meaningless;
embeddings a model scales up by sqrt(hidden) are drawn smaller so the model does not just echo its input);
norm weights and biases get noise too (transformers initialises them to 1/0, which would
leave a missing bias or a wrong `1 + w` offset unnoticed). Non-default rope bases catch a loader
that ignores `rope_parameters` (transformers 5 no longer writes `rope_theta`).
No tokenizer: goldens use token ids.

Usage: python scripts/make_tiny_models.py [OUT_DIR [ARCH..]]   (default <repo>/tests/data/tiny, all)
Needs scripts/requirements-goldens.txt (torch, transformers).
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = json.load(open(os.path.join(REPO, 'scripts', 'tiny_models.json')))
COMMON = SPECS['common']
STD = COMMON['initializer_range']  # weight std: peaked logits with clear top-2 margins (checked by make_goldens.py)


def make(arch, out_root):
    spec = SPECS['archs'][arch]
    cls_name, seed = spec['class'], spec['seed']
    config = getattr(transformers, spec['config_class'])(**dict(COMMON, **spec['config']))
    config.architectures = [cls_name]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if 'norm' in name or '.ln_' in name:  # Gemma stores w of (1 + w) (centre 0); the others the scale itself
                # The gated RMSNorm of linear-attention layers stores the scale itself in every family.
                centre = 1.0 if name.endswith('linear_attn.norm.weight') else spec['norm_center']
                p.copy_((0.0 if name.endswith('.bias') else centre) + 0.2 * noise)
            elif name.endswith('.bias'):
                p.copy_(0.2 * noise)
            elif spec['scaled_embed'] and 'embed_tokens' in name:
                # Gemma multiplies embeddings by sqrt(hidden): keep the residual stream from
                # being all input embedding, else the tied lm_head just repeats the last token.
                p.copy_(STD / config.hidden_size ** 0.5 * noise)
            else:
                p.copy_(STD * noise)
        for name, b in model.named_buffers():
            # DeepSeek-V3's router bias is a buffer; zeros would leave it untested.
            if name.endswith('e_score_correction_bias'):
                b.copy_(0.2 * torch.randn(b.shape, generator=gen, dtype=torch.float32))
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
    # Sanity: the saved config must round-trip to the same rope settings (where it has any).
    saved = json.load(open(os.path.join(out, 'config.json')))
    assert saved['architectures'] == [cls_name], saved
    assert 'rope_parameters' in saved or 'rope_parameters' not in spec['config'], saved


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, 'tests', 'data', 'tiny')
    torch.set_num_threads(1)
    for arch in sys.argv[2:] or SPECS['archs']:
        make(arch, out_root)


if __name__ == '__main__':
    main()
