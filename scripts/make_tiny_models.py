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

gpt-oss: its expert matrices are rounded onto the MXFP4 grid (what the released checkpoints
hold), and the same checkpoint is also written with those experts in the released form
(`*_blocks` / `*_scales` bytes, `quantization_config` mxfp4) as tests/data/tiny/gpt_oss_mxfp4:
both hold exactly the same values, so the goldens of the float32 one hold for both.

Variants (VARIANTS below: another config of an architecture, e.g. llama3_rope) are made when named.

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


# Checkpoints of an architecture with another config, for features its own tiny one lacks:
# name -> (architecture, config keywords over its spec's).
VARIANTS = {
    # Llama 3.1/3.2's rotary scaling, with a short original context so every band is used.
    'llama3_rope': ('llama', {'rope_parameters': {
        'rope_type': 'llama3', 'rope_theta': 50000.0, 'factor': 8.0, 'low_freq_factor': 1.0,
        'high_freq_factor': 4.0, 'original_max_position_embeddings': 64}}),
}


def make(arch, out_root):
    if arch in VARIANTS:
        base, extra = VARIANTS[arch]
        spec = dict(SPECS['archs'][base], config=dict(SPECS['archs'][base]['config'], **extra))
    else:
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
            elif name.endswith('.sinks'):  # attention sinks as large as the scores: they take real weight
                p.copy_(noise)
            elif spec['scaled_embed'] and 'embed_tokens' in name:
                # Gemma multiplies embeddings by sqrt(hidden): keep the residual stream from
                # being all input embedding, else the tied lm_head just repeats the last token.
                p.copy_(STD / config.hidden_size ** 0.5 * noise)
            else:
                p.copy_(STD * noise)
            if spec['class'] == 'GptOssForCausalLM' and name.endswith(MXFP4_EXPERTS):
                p.copy_(mxfp4_dequantize(*mxfp4_quantize(p.transpose(1, 2))).transpose(1, 2))
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
    if saved.get('model_type') == 'gpt_oss':
        write_mxfp4(out, f'{out}_mxfp4')


# ---------------------------------------------------------------- MXFP4 (gpt-oss experts)
# transformers' dense expert parameters, input-major ([experts, in, out]); the released
# checkpoints store them output-major as MXFP4: `<name>_blocks` [experts, out, in/32, 16] (byte i
# of a block holds values 2i, low nibble, and 2i+1) and `<name>_scales` [experts, out, in/32]
# (e8m0: 2^(e - 127)).
MXFP4_EXPERTS = ('mlp.experts.gate_up_proj', 'mlp.experts.down_proj')
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_quantize(w):
    """w [.., in] (in a multiple of 32) -> (codes [.., in/32, 32] in 0..15, e8m0 scales [.., in/32]):
    the scale puts each block's largest |value| in [4, 8) (as gguf-py's quantizer), each value
    takes the nearest e2m1 value (the first on ties)."""
    blocks = w.reshape(*w.shape[:-1], -1, 32)
    amax = blocks.abs().amax(dim=-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2 + 127, torch.zeros_like(amax)).clamp(0, 254)
    d = torch.pow(2.0, e - 127)
    codes = (blocks.unsqueeze(-1) - d[..., None, None] * FP4_VALUES).abs().argmin(dim=-1)
    return codes, e.to(torch.uint8)


def mxfp4_dequantize(codes, scales):
    """The values of mxfp4_quantize's output, [.., in] (transformers' convert_moe_packed_tensors)."""
    vals = FP4_VALUES[codes] * torch.pow(2.0, scales.to(torch.float32) - 127)[..., None]
    return vals.reshape(*vals.shape[:-2], -1)


def write_mxfp4(src, out):
    """The checkpoint `src` with its experts in the released MXFP4 form, as `out`."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(os.path.join(src, 'model.safetensors'))
    for name in [n for n in tensors if n.endswith(MXFP4_EXPERTS)]:
        w = tensors.pop(name).transpose(1, 2).contiguous()  # output-major
        codes, scales = mxfp4_quantize(w)
        assert torch.equal(mxfp4_dequantize(codes, scales), w), f'{name} is not on the MXFP4 grid'
        packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
        tensors[name + '_blocks'], tensors[name + '_scales'] = packed.contiguous(), scales.contiguous()
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, 'model.safetensors'), metadata={'format': 'pt'})
    config = json.load(open(os.path.join(src, 'config.json')))
    config['quantization_config'] = {
        'quant_method': 'mxfp4',
        'modules_to_not_convert': ['model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens',
                                   'lm_head']}
    json.dump(config, open(os.path.join(out, 'config.json'), 'w'), indent=2)
    print(f'{out}: the same with MXFP4 experts, {os.path.getsize(os.path.join(out, "model.safetensors")) / 1e6:.2f} MB')


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, 'tests', 'data', 'tiny')
    torch.set_num_threads(1)
    for arch in sys.argv[2:] or SPECS['archs']:
        make(arch, out_root)


if __name__ == '__main__':
    main()
