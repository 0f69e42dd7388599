#!/usr/bin/env python3
"""A tiny DeepSeek-V3 checkpoint with a multi-token-prediction (MTP) layer, and the drafts that
layer proposes in greedy speculative decoding, computed in plain torch.

transformers ignores MTP layers (DeepSeek-V3's `model.layers.{num_hidden_layers}`), so this
script adds one to the tiny deepseek_v3 checkpoint of scripts/make_tiny_models.py:

  tests/data/tiny/deepseek_v3_mtp/  config.json (the same), model.safetensors (a link to the
      base one), mtp.safetensors (the MTP layer), model.safetensors.index.json (both files)
  tests/goldens/tiny/deepseek_v3_mtp.json  per prompt: greedy tokens, and the drafts proposed
      after every step of `{"method": "mtp", "num_speculative_tokens": K}`

The MTP layer is a decoder layer drawn like the base model's (transformers' own
DeepseekV3DecoderLayer, saved by save_pretrained so its tensor names are the checkpoint's), plus
`enorm`, `hnorm`, `eh_proj`, `shared_head.{norm,head}` and a copy of the embedding table. Its
forward is vLLM's deepseek_mtp.py: the embedding of the token at p + 1 (zero at position 0) and
the target's final hidden state at p, each RMS-normed, concatenated, projected by `eh_proj`, one
decoder layer, then `shared_head`; a chained draft feeds the layer's own (pre-norm) output back.

The reference recomputes everything with full forwards at every step (no caches): the target's
hidden states of all positions, then the MTP layer over the whole sequence. Each case records
the smallest top-2 margin of the drafts' logits (relative to the largest |logit|); prompts whose
drafts come closer than MIN_REL_MARGIN to a tie are skipped.

Usage: python scripts/make_tiny_mtp.py   (after make_tiny_models.py and make_goldens.py tiny)
Needs scripts/requirements-goldens.txt.
"""
import json
import os
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(REPO, 'tests', 'data', 'tiny', 'deepseek_v3')
OUT = os.path.join(REPO, 'tests', 'data', 'tiny', 'deepseek_v3_mtp')
GOLDEN = os.path.join(REPO, 'tests', 'goldens', 'tiny', 'deepseek_v3_mtp.json')
SEED = 116
STD = 0.15  # as make_tiny_models.py draws
K = 3
MAX_TOKENS = 24
MIN_REL_MARGIN = 0.001  # 10x the 1e-4 relative logit tolerance of the Rust tests
TRAIN_STEPS = 200
TRAIN_LR = 3e-3


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def draw():
    """The base model with one more layer, drawn; returns (target, that model, MTP extras)."""
    target = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation='eager').eval()
    cfg = target.config
    n = cfg.num_hidden_layers
    cfg4 = type(cfg).from_dict(dict(cfg.to_dict(), num_hidden_layers=n + 1))
    torch.manual_seed(SEED)
    full = AutoModelForCausalLM.from_config(cfg4, dtype=torch.float32, attn_implementation='eager').eval()
    missing, _ = full.load_state_dict(target.state_dict(), strict=False)
    assert all(k.startswith(f'model.layers.{n}.') for k in missing), missing
    gen = torch.Generator().manual_seed(SEED)
    noise = lambda shape: torch.randn(shape, generator=gen, dtype=torch.float32)  # noqa: E731
    with torch.no_grad():
        for name, p in full.model.layers[n].named_parameters():
            p.copy_(1.0 + 0.2 * noise(p.shape) if 'norm' in name else STD * noise(p.shape))
        for name, b in full.model.layers[n].named_buffers():
            if name.endswith('e_score_correction_bias'):
                b.copy_(0.2 * noise(b.shape))
    h = cfg.hidden_size
    extras = {
        'enorm.weight': 1.0 + 0.2 * noise((h,)),
        'hnorm.weight': 1.0 + 0.2 * noise((h,)),
        'eh_proj.weight': STD * noise((h, 2 * h)),
        'shared_head.norm.weight': 1.0 + 0.2 * noise((h,)),
        'shared_head.head.weight': STD * noise((cfg.vocab_size, h)),
        'embed_tokens.weight': target.model.embed_tokens.weight.detach().clone(),
    }
    return target, full, extras


def save(target, full, extras):
    """Writes the MTP layer beside a link to the base checkpoint, and the index of both."""
    n = target.config.num_hidden_layers
    with tempfile.TemporaryDirectory() as tmp:
        full.save_pretrained(tmp, safe_serialization=True)
        saved = load_file(os.path.join(tmp, 'model.safetensors'))
    base = load_file(os.path.join(BASE, 'model.safetensors'))
    layer = {k: v for k, v in saved.items() if k.startswith(f'model.layers.{n}.')}
    # The new layer's tensors are named as the base checkpoint names its last MoE layer's.
    like = {k.replace(f'model.layers.{n - 1}.', f'model.layers.{n}.') for k in base if k.startswith(f'model.layers.{n - 1}.')}
    assert set(layer) == like, sorted(set(layer) ^ like)
    mtp = dict(layer, **{f'model.layers.{n}.{k}': v.detach().contiguous() for k, v in extras.items()})
    os.makedirs(OUT, exist_ok=True)
    save_file(mtp, os.path.join(OUT, 'mtp.safetensors'), metadata={'format': 'pt'})
    link = os.path.join(OUT, 'model.safetensors')
    if not os.path.lexists(link):
        os.symlink('../deepseek_v3/model.safetensors', link)
    with open(os.path.join(BASE, 'config.json')) as f:
        config = json.load(f)
    assert config.get('num_nextn_predict_layers') == 1, config
    with open(os.path.join(OUT, 'config.json'), 'w') as f:
        json.dump(config, f, indent=2)
        f.write('\n')
    weight_map = {k: 'model.safetensors' for k in base}
    weight_map.update({k: 'mtp.safetensors' for k in mtp})
    with open(os.path.join(OUT, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {}, 'weight_map': dict(sorted(weight_map.items()))}, f, indent=1)
        f.write('\n')
    size = os.path.getsize(os.path.join(OUT, 'mtp.safetensors'))
    print(f'{OUT}: MTP layer {size / 1e6:.2f} MB')


def train(ref, sequences, steps=TRAIN_STEPS):
    """Fits the MTP layer to predict token p + 2 on `sequences` (the goldens' prompts and greedy
    continuations), so that its drafts get accepted there: random weights would propose tokens
    the target never samples, and the accept path would go untested."""
    layer = ref.full.model.layers[ref.n]
    params = [p for p in layer.parameters()] + [v for k, v in ref.x.items() if k != 'embed_tokens.weight']
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=TRAIN_LR)
    data = []
    with torch.no_grad():
        for seq in sequences:
            data.append((seq[1:-1], ref.target_forward(seq[:-2])[0], torch.tensor(seq[2:])))
    for step in range(steps):
        opt.zero_grad()
        loss = sum(torch.nn.functional.cross_entropy(ref.mtp(ids, hidden)[1], labels) for ids, hidden, labels in data)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f'train step {step}: loss {loss.item() / len(data):.3f}')
    for p in params:
        p.requires_grad_(False)


def margin(logits):
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


class Reference:
    def __init__(self, target, full, extras):
        self.target, self.full, self.x = target, full, extras
        self.n = target.config.num_hidden_layers
        self.eps = target.config.rms_norm_eps

    def target_forward(self, tokens):
        """Final (normed) hidden states and logits of every position."""
        h = self.target.model(torch.tensor([tokens])).last_hidden_state[0]
        return h, self.target.lm_head(h)

    def mtp(self, ids, hidden):
        """The MTP layer over rows p = 0.. (token p + 1, hidden p): pre-norm outputs, logits."""
        x = self.x
        positions = torch.arange(len(ids))
        e = x['embed_tokens.weight'][torch.tensor(ids)] * (positions != 0)[:, None]
        cat = torch.cat([rms_norm(e, x['enorm.weight'], self.eps), rms_norm(hidden, x['hnorm.weight'], self.eps)], -1)
        y = (cat @ x['eh_proj.weight'].T)[None]
        pos = positions[None]
        rope = self.full.model.rotary_emb(y, pos)
        mask = torch.full((len(ids), len(ids)), float('-inf')).triu(1)[None, None]
        out = self.full.model.layers[self.n](y, attention_mask=mask, position_ids=pos, position_embeddings=rope)[0]
        logits = rms_norm(out, x['shared_head.norm.weight'], self.eps) @ x['shared_head.head.weight'].T
        return out, logits

    def speculate(self, prompt):
        """Greedy decoding with MTP drafts, step by step as the engine runs it (one request)."""
        tokens = list(prompt)
        tokens.append(int(self.target_forward(tokens)[1][-1].argmax()))
        generated, steps, margins = 1, [], []
        while generated < MAX_TOKENS:
            limit = min(K, MAX_TOKENS - generated - 1)
            drafts = []
            if limit > 0:
                ids, hidden = tokens[1:], self.target_forward(tokens[:-1])[0]
                for _ in range(limit):
                    out, logits = self.mtp(ids, hidden)
                    margins.append(margin(logits[-1]))
                    drafts.append(int(logits[-1].argmax()))
                    ids, hidden = ids + [drafts[-1]], torch.cat([hidden, out[-1:]])
            steps.append(drafts)
            for d in drafts + [None]:
                tokens.append(int(self.target_forward(tokens)[1][-1].argmax()))
                generated += 1
                if tokens[-1] != d or generated == MAX_TOKENS:
                    break
        return tokens[len(prompt):], steps, min(margins)


def main():
    torch.manual_seed(SEED)
    target, full, extras = draw()
    ref = Reference(target, full, extras)
    with open(os.path.join(REPO, 'tests', 'goldens', 'tiny', 'deepseek_v3.json')) as f:
        base_cases = json.load(f)['cases']
    train(ref, [c['prompt_token_ids'] + c['token_ids'] for c in base_cases])
    torch.set_grad_enabled(False)
    save(target, full, extras)
    cases = []
    for c in base_cases:
        prompt = c['prompt_token_ids']
        tokens, steps, m = ref.speculate(prompt)
        assert tokens == c['token_ids'][:MAX_TOKENS], 'speculation must not change the greedy tokens'
        print(f'prompt len {len(prompt)}: {len(steps)} steps, drafts {steps}, min draft margin {m:.3f}')
        if m >= MIN_REL_MARGIN:
            cases.append({'prompt_token_ids': prompt, 'token_ids': tokens, 'drafts_after_each_step': steps,
                          'min_draft_rel_margin': round(m, 4)})
    assert len(cases) >= 3, 'too few prompts with clear draft margins'
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, 'w') as f:
        json.dump({'model': 'tests/data/tiny/deepseek_v3_mtp', 'speculative_config':
                   {'method': 'mtp', 'num_speculative_tokens': K}, 'max_tokens': MAX_TOKENS,
                   'versions': {'torch': torch.__version__}, 'cases': cases}, f, indent=1)
        f.write('\n')
    print(f'wrote {GOLDEN}: {len(cases)} cases')


if __name__ == '__main__':
    main()
