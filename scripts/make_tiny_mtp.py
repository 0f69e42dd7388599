#!/usr/bin/env python3
"""Tiny checkpoints with a multi-token-prediction (MTP) layer, and the drafts that layer proposes
in greedy speculative decoding, computed in plain torch.

transformers ignores MTP layers, so this script adds one to a tiny checkpoint of
scripts/make_tiny_models.py (ARCH: deepseek_v3, qwen3_5, qwen3_5_moe, qwen3_next):

  tests/data/tiny/ARCH_mtp/  config.json (the same), model.safetensors (a link to the base
      one), mtp.safetensors (the MTP layer), model.safetensors.index.json (both files)
  tests/goldens/tiny/ARCH_mtp.json  per prompt: greedy tokens, and the drafts proposed after
      every step of `{"method": "mtp", "num_speculative_tokens": K}`

The MTP layer's decoder layer is transformers' own (a model one layer deeper, saved by
save_pretrained, so its tensor names are the checkpoint's); around it, as vLLM runs it:
- DeepSeek-V3 (deepseek_mtp.py), `model.layers.{num_hidden_layers}.*`: the embedding of the
  token at p + 1 (zero at position 0) and the model's final hidden state at p, RMS-normed by
  `enorm`/`hnorm`, concatenated, projected by `eh_proj`, the layer, `shared_head.norm` and
  `shared_head.head` (own copies of the embedding and head); a chained draft feeds the layer's
  pre-norm output back.
- Qwen3.5, Qwen3.5-MoE, Qwen3-Next (qwen3_5_mtp.py, qwen3_next_mtp.py), `mtp.*`: `pre_fc_norm_embedding`, `pre_fc_norm_hidden`, `fc`, a
  full-attention layer `mtp.layers.0`, `mtp.norm` ((1 + w) norms), the model's embedding and
  head; a chained draft feeds the normed output back.

The layer is then trained for a few seconds to predict token p + 2 on the goldens' sequences, so
that its drafts get accepted (random weights propose tokens the target never samples, and the
accept path would go untested). The reference recomputes everything with full forwards at every
step (no caches): the target's hidden states of all positions, then the MTP layer over the whole
sequence. Each case records the smallest top-2 margin of the drafts' logits (relative to the
largest |logit|); prompts whose drafts come closer than MIN_REL_MARGIN to a tie are skipped.

Usage: python scripts/make_tiny_mtp.py [ARCH..]  (after make_tiny_models.py, make_goldens.py tiny)
Needs scripts/requirements-goldens.txt.
"""
import json
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, 'tests', 'data', 'tiny')
STD = 0.15  # as make_tiny_models.py draws
K = 3
MAX_TOKENS = 24
MIN_REL_MARGIN = 0.001  # 10x the 1e-4 relative logit tolerance of the Rust tests
TRAIN_STEPS = 200
TRAIN_LR = 3e-3

# Per architecture: where the MTP tensors live, by role (None: the model's own is used).
ARCHS = {
    'deepseek_v3': dict(
        seed=116, block='model.layers.{n}', norm_center=1.0, mask_position_0=True, chain='pre_norm', mrope=False,
        names=dict(enorm='model.layers.{n}.enorm', hnorm='model.layers.{n}.hnorm', proj='model.layers.{n}.eh_proj',
                   norm='model.layers.{n}.shared_head.norm', head='model.layers.{n}.shared_head.head',
                   embed='model.layers.{n}.embed_tokens')),
}
QWEN_MTP = dict(block='mtp.layers.0', norm_center=0.0, mask_position_0=False, chain='normed',
                names=dict(enorm='mtp.pre_fc_norm_embedding', hnorm='mtp.pre_fc_norm_hidden', proj='mtp.fc',
                           norm='mtp.norm', head=None, embed=None))
ARCHS['qwen3_5'] = dict(QWEN_MTP, seed=131, mrope=True)
ARCHS['qwen3_5_moe'] = dict(QWEN_MTP, seed=133, mrope=True)
ARCHS['qwen3_next'] = dict(QWEN_MTP, seed=134, mrope=False)


def rms_norm(x, w, eps, centre):
    """RMSNorm with weight `w` (`centre + w`: Qwen3.5 stores the w of 1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * ((1.0 - centre) + w)


class Mtp:
    def __init__(self, arch):
        self.arch, self.spec = arch, ARCHS[arch]
        self.base = os.path.join(TINY, arch)
        self.target = AutoModelForCausalLM.from_pretrained(self.base, dtype=torch.float32,
                                                           attn_implementation='eager').eval()
        cfg = self.target.config
        self.n, self.eps = cfg.num_hidden_layers, cfg.rms_norm_eps
        self.draw()

    def name(self, role):
        return self.spec['names'][role].format(n=self.n) if self.spec['names'][role] else None

    def draw(self):
        """A model one full-attention layer deeper (the target's weights below it), the new
        layer and the MTP tensors around it drawn like make_tiny_models.py draws."""
        cfg, n, centre = self.target.config, self.n, self.spec['norm_center']
        extra = dict(num_hidden_layers=n + 1)
        if getattr(cfg, 'layer_types', None):
            extra['layer_types'] = list(cfg.layer_types) + ['full_attention']
        cfg_deeper = type(cfg).from_dict(dict(cfg.to_dict(), **extra))
        torch.manual_seed(self.spec['seed'])
        self.full = AutoModelForCausalLM.from_config(cfg_deeper, dtype=torch.float32,
                                                     attn_implementation='eager').eval()
        missing, _ = self.full.load_state_dict(self.target.state_dict(), strict=False)
        assert all(k.startswith(f'model.layers.{n}.') for k in missing), missing
        gen = torch.Generator().manual_seed(self.spec['seed'])
        noise = lambda shape: torch.randn(shape, generator=gen, dtype=torch.float32)  # noqa: E731
        with torch.no_grad():
            for name, p in self.layer().named_parameters():
                p.copy_(centre + 0.2 * noise(p.shape) if 'norm' in name else STD * noise(p.shape))
            for name, b in self.layer().named_buffers():
                if name.endswith('e_score_correction_bias'):
                    b.copy_(0.2 * noise(b.shape))
        h, vocab = cfg.hidden_size, cfg.vocab_size
        self.t = {
            'enorm': centre + 0.2 * noise((h,)),
            'hnorm': centre + 0.2 * noise((h,)),
            'proj': STD * noise((h, 2 * h)),
            'norm': centre + 0.2 * noise((h,)),
            'head': STD * noise((vocab, h)) if self.name('head') else self.target.lm_head.weight.detach(),
            'embed': self.target.model.embed_tokens.weight.detach().clone(),
        }

    def layer(self):
        return self.full.model.layers[self.n]

    def target_forward(self, tokens):
        """Final (normed) hidden states and logits of every position."""
        h = self.target.model(torch.tensor([tokens])).last_hidden_state[0]
        return h, self.target.lm_head(h)

    def forward(self, ids, hidden):
        """The MTP layer over rows p = 0.. (token p + 1, hidden p): what a chained step takes
        from each row, and each row's logits."""
        t, centre = self.t, self.spec['norm_center']
        positions = torch.arange(len(ids))
        e = t['embed'][torch.tensor(ids)]
        if self.spec['mask_position_0']:
            e = e * (positions != 0)[:, None]
        cat = torch.cat([rms_norm(e, t['enorm'], self.eps, centre), rms_norm(hidden, t['hnorm'], self.eps, centre)], -1)
        y = (cat @ t['proj'].T)[None]
        pos = positions[None]
        rope_pos = pos[None].expand(3, 1, -1) if self.spec['mrope'] else pos
        rope = self.full.model.rotary_emb(y, rope_pos)
        mask = torch.full((len(ids), len(ids)), float('-inf')).triu(1)[None, None]
        out = self.layer()(y, attention_mask=mask, position_ids=pos, position_embeddings=rope)[0]
        normed = rms_norm(out, t['norm'], self.eps, centre)
        return (out if self.spec['chain'] == 'pre_norm' else normed), normed @ t['head'].T

    def train(self, sequences):
        """Fits the MTP layer to predict token p + 2 on `sequences`."""
        params = list(self.layer().parameters()) + [self.t[r] for r in ('enorm', 'hnorm', 'proj', 'norm')]
        if self.name('head'):
            params.append(self.t['head'])
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.Adam(params, lr=TRAIN_LR)
        with torch.no_grad():
            data = [(seq[1:-1], self.target_forward(seq[:-2])[0], torch.tensor(seq[2:])) for seq in sequences]
        for step in range(TRAIN_STEPS):
            opt.zero_grad()
            loss = sum(torch.nn.functional.cross_entropy(self.forward(i, h)[1], y) for i, h, y in data)
            loss.backward()
            opt.step()
            if step % 50 == 0 or step == TRAIN_STEPS - 1:
                print(f'{self.arch}: train step {step}: loss {loss.item() / len(data):.3f}')
        for p in params:
            p.requires_grad_(False)

    def save(self):
        """Writes the MTP layer beside a link to the base checkpoint, and the index of both."""
        n, out = self.n, os.path.join(TINY, f'{self.arch}_mtp')
        with tempfile.TemporaryDirectory() as tmp:
            self.full.save_pretrained(tmp, safe_serialization=True)
            saved = load_file(os.path.join(tmp, 'model.safetensors'))
        base = load_file(os.path.join(self.base, 'model.safetensors'))
        block = self.spec['block'].format(n=n)
        layer = {k.replace(f'model.layers.{n}.', f'{block}.'): v for k, v in saved.items()
                 if k.startswith(f'model.layers.{n}.')}
        # The new layer's tensors are named as the base checkpoint names its last full-attention
        # (DeepSeek: MoE) layer's.
        like_layer = max(int(k.split('.')[2]) for k in base if k.startswith('model.layers.') and '.self_attn.' in k
                         and 'linear_attn' not in k)
        like = {k.replace(f'model.layers.{like_layer}.', f'{block}.') for k in base
                if k.startswith(f'model.layers.{like_layer}.')}
        assert set(layer) == like, sorted(set(layer) ^ like)
        mtp = dict(layer)
        for role, t in self.t.items():
            if self.name(role):
                mtp[f'{self.name(role)}.weight'] = t.detach().contiguous()
        os.makedirs(out, exist_ok=True)
        save_file(mtp, os.path.join(out, 'mtp.safetensors'), metadata={'format': 'pt'})
        link = os.path.join(out, 'model.safetensors')
        if not os.path.lexists(link):
            os.symlink(f'../{self.arch}/model.safetensors', link)
        with open(os.path.join(self.base, 'config.json')) as f:
            config = json.load(f)
        with open(os.path.join(out, 'config.json'), 'w') as f:
            json.dump(config, f, indent=2)
            f.write('\n')
        weight_map = {k: 'model.safetensors' for k in base}
        weight_map.update({k: 'mtp.safetensors' for k in mtp})
        with open(os.path.join(out, 'model.safetensors.index.json'), 'w') as f:
            json.dump({'metadata': {}, 'weight_map': dict(sorted(weight_map.items()))}, f, indent=1)
            f.write('\n')
        print(f'{out}: MTP layer {os.path.getsize(os.path.join(out, "mtp.safetensors")) / 1e6:.2f} MB')

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
                    chain, logits = self.forward(ids, hidden)
                    margins.append(margin(logits[-1]))
                    drafts.append(int(logits[-1].argmax()))
                    ids, hidden = ids + [drafts[-1]], torch.cat([hidden, chain[-1:]])
            steps.append(drafts)
            for d in drafts + [None]:
                tokens.append(int(self.target_forward(tokens)[1][-1].argmax()))
                generated += 1
                if tokens[-1] != d or generated == MAX_TOKENS:
                    break
        return tokens[len(prompt):], steps, min(margins)


def margin(logits):
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


def make(arch):
    mtp = Mtp(arch)
    with open(os.path.join(REPO, 'tests', 'goldens', 'tiny', f'{arch}.json')) as f:
        base_cases = json.load(f)['cases']
    mtp.train([c['prompt_token_ids'] + c['token_ids'] for c in base_cases])
    torch.set_grad_enabled(False)
    mtp.save()
    cases = []
    for c in base_cases:
        prompt = c['prompt_token_ids']
        tokens, steps, m = mtp.speculate(prompt)
        assert tokens == c['token_ids'][:MAX_TOKENS], 'speculation must not change the greedy tokens'
        print(f'{arch}: prompt len {len(prompt)}: {len(steps)} steps, drafts {steps}, min draft margin {m:.4f}')
        if m >= MIN_REL_MARGIN:
            cases.append({'prompt_token_ids': prompt, 'token_ids': tokens, 'drafts_after_each_step': steps,
                          'min_draft_rel_margin': round(m, 4)})
    assert len(cases) >= 3, 'too few prompts with clear draft margins'
    golden = os.path.join(REPO, 'tests', 'goldens', 'tiny', f'{arch}_mtp.json')
    with open(golden, 'w') as f:
        json.dump({'model': f'tests/data/tiny/{arch}_mtp', 'speculative_config':
                   {'method': 'mtp', 'num_speculative_tokens': K}, 'max_tokens': MAX_TOKENS,
                   'versions': {'torch': torch.__version__}, 'cases': cases}, f, indent=1)
        f.write('\n')
    print(f'wrote {golden}: {len(cases)} cases')
    torch.set_grad_enabled(True)


if __name__ == '__main__':
    for arch in sys.argv[1:] or list(ARCHS):
        make(arch)
