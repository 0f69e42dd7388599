#!/usr/bin/env python3
"""Tiny draft heads for speculative decoding — checkpoints with a multi-token-prediction (MTP)
layer, and an EAGLE-3 head — and the drafts they propose in greedy speculative decoding,
computed in plain torch.

transformers runs neither, so this script adds an MTP layer to a tiny checkpoint of
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

EAGLE-3 (ARCH llama_eagle3, vLLM's llama_eagle3.py): tests/data/tiny/llama_eagle3/, a
`LlamaForCausalLMEagle3` head for the tiny llama: `fc` over the inputs of target layers 0, 1, 2
(vLLM's default ids 2, L/2, L-3 for L = 3); one Llama layer whose q/k/v read
`[input_layernorm(embedding), hidden_norm(hidden)]` with the un-normed hidden state as residual;
`norm`; `lm_head` over a draft vocabulary of 256 of the 320 tokens, mapped back by `d2t`
offsets (and a `t2d` mask, unused); the embedding table is the target's. Chained steps feed the
pre-norm output back. Golden: tests/goldens/tiny/llama_eagle3.json.

EAGLE-1 (ARCH llama_eagle, vLLM's llama_eagle.py): tests/data/tiny/llama_eagle/, a head for the
tiny llama as the EAGLE repo saves them (config `LlamaForCausalLM`, tensors `fc.*`, `layers.N.*`):
`fc` (with a bias) over `[embedding(token p + 1), the target's final hidden state p]`, then two
Llama layers, the first without its input norm; no final norm; the target's embedding and head.
Chained steps feed the output back. Golden: tests/goldens/tiny/llama_eagle.json.

Each head is then trained for a few seconds to predict token p + 2 on the goldens' sequences, so
that its drafts get accepted (random weights propose tokens the target never samples, and the
accept path would go untested). The reference recomputes everything with full forwards at every
step (no caches): the target's hidden states of all positions, then the MTP layer over the whole
sequence. Each case records the smallest top-2 margin of the drafts' logits (relative to the
largest |logit|); prompts whose drafts come closer than MIN_REL_MARGIN to a tie are skipped.

Usage: python scripts/make_tiny_draft_heads.py [ARCH..]  (after make_tiny_models.py, make_goldens.py tiny)
Needs scripts/requirements-goldens.txt.
"""
import json
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

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


def attention(head, p, x):
    """Causal self-attention of the Llama layer `p` in `head.w` over the rows of `x`, with the
    target's rotary embedding; the output after `o_proj`."""
    w, n = head.w, len(x)
    heads = lambda t, k: t.view(n, k, head.hd).transpose(0, 1)  # noqa: E731
    q = heads(x @ w[f'{p}.self_attn.q_proj.weight'].T, head.heads)
    k = heads(x @ w[f'{p}.self_attn.k_proj.weight'].T, head.kv_heads)
    v = heads(x @ w[f'{p}.self_attn.v_proj.weight'].T, head.kv_heads)
    cos, sin = head.rope(x[None], torch.arange(n)[None])
    q, k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
    rep = head.heads // head.kv_heads
    k, v = k[0].repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    scores = q[0] @ k.transpose(1, 2) / head.hd ** 0.5 + torch.full((n, n), float('-inf')).triu(1)
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, -1) @ w[f'{p}.self_attn.o_proj.weight'].T


def mlp(w, p, y):
    """The SiLU-gated MLP of layer `p`."""
    gate = torch.nn.functional.silu(y @ w[f'{p}.mlp.gate_proj.weight'].T)
    return (gate * (y @ w[f'{p}.mlp.up_proj.weight'].T)) @ w[f'{p}.mlp.down_proj.weight'].T


def rms_norm(x, w, eps, centre):
    """RMSNorm with weight `w` (`centre + w`: Qwen3.5 stores the w of 1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * ((1.0 - centre) + w)


class Head:
    """What the heads share: the target's forward; drafts in the target's vocabulary, from its
    final hidden states (EAGLE-3 overrides both)."""

    def target_forward(self, tokens):
        """Final (normed) hidden states and logits of every position."""
        h = self.target.model(torch.tensor([tokens])).last_hidden_state[0]
        return h, self.target.lm_head(h)

    def first_hidden(self, tokens):
        """What a first step takes from each position of `tokens`: the final hidden states."""
        return self.target_forward(tokens)[0]

    def to_target(self, draft_id):
        return draft_id

    def to_draft(self, token):
        return token

    def load_llama(self):
        """The tiny llama as the target (the EAGLE heads' attention: its shapes and rotary);
        returns its config."""
        self.target = AutoModelForCausalLM.from_pretrained(os.path.join(TINY, 'llama'), dtype=torch.float32,
                                                           attn_implementation='eager').eval()
        c = self.target.config
        self.h, self.eps, self.layers = c.hidden_size, c.rms_norm_eps, c.num_hidden_layers
        self.heads, self.kv_heads, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.rope = self.target.model.rotary_emb
        return c


class Mtp(Head):
    method = 'mtp'

    def __init__(self, arch):
        self.arch, self.spec = arch, ARCHS[arch]
        self.base_arch, self.out_name = arch, f'{arch}_mtp'
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


    def params(self):
        """What training fits."""
        extra = [self.t[r] for r in ('enorm', 'hnorm', 'proj', 'norm')] + ([self.t['head']] if self.name('head') else [])
        return list(self.layer().parameters()) + extra

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

class Eagle3(Head):
    """An EAGLE-3 head for the tiny llama (see the top)."""
    method, arch, base_arch, out_name = 'eagle3', 'llama_eagle3', 'llama', 'llama_eagle3'
    SEED, DRAFT_VOCAB, INTER = 140, 256, 96

    def __init__(self):
        c = self.load_llama()
        self.aux = sorted({2, self.layers // 2, self.layers - 3})
        with open(os.path.join(REPO, 'tests', 'goldens', 'tiny', 'llama.json')) as f:
            used = sorted({t for case in json.load(f)['cases'] for t in case['prompt_token_ids'] + case['token_ids']})
        gen = torch.Generator().manual_seed(self.SEED)
        rest = [t for t in torch.randperm(c.vocab_size, generator=gen).tolist() if t not in used]
        # The draft vocabulary: every token the goldens use, and random others, in id order.
        self.draft_ids = sorted(used + rest[:self.DRAFT_VOCAB - len(used)])
        assert len(self.draft_ids) == self.DRAFT_VOCAB
        noise = lambda *shape: torch.randn(shape, generator=gen, dtype=torch.float32)  # noqa: E731
        h, q, kv = self.h, self.heads * self.hd, self.kv_heads * self.hd
        self.w = {
            'fc.weight': STD / len(self.aux) ** 0.5 * noise(h, len(self.aux) * h),
            'midlayer.input_layernorm.weight': 1.0 + 0.2 * noise(h),
            'midlayer.hidden_norm.weight': 1.0 + 0.2 * noise(h),
            'midlayer.self_attn.q_proj.weight': STD * noise(q, 2 * h),
            'midlayer.self_attn.k_proj.weight': STD * noise(kv, 2 * h),
            'midlayer.self_attn.v_proj.weight': STD * noise(kv, 2 * h),
            'midlayer.self_attn.o_proj.weight': STD * noise(h, q),
            'midlayer.post_attention_layernorm.weight': 1.0 + 0.2 * noise(h),
            'midlayer.mlp.gate_proj.weight': STD * noise(self.INTER, h),
            'midlayer.mlp.up_proj.weight': STD * noise(self.INTER, h),
            'midlayer.mlp.down_proj.weight': STD * noise(h, self.INTER),
            'norm.weight': 1.0 + 0.2 * noise(h),
            'lm_head.weight': STD * noise(self.DRAFT_VOCAB, h),
        }

    def first_hidden(self, tokens):
        """`fc` over the inputs of the aux layers (transformers' hidden_states[i], i < L)."""
        states = self.target.model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        return torch.cat([states[i][0] for i in self.aux], -1) @ self.w['fc.weight'].T

    def to_target(self, draft_id):
        return self.draft_ids[draft_id]

    def to_draft(self, token):
        return self.draft_ids.index(token)

    def params(self):
        return list(self.w.values())

    def forward(self, ids, hidden):
        """The head over rows p = 0.. (token p + 1, hidden p): pre-norm outputs, draft logits."""
        w, eps = self.w, self.eps
        e = rms_norm(self.target.model.embed_tokens.weight[torch.tensor(ids)], w['midlayer.input_layernorm.weight'],
                     eps, 1.0)
        x = torch.cat([e, rms_norm(hidden, w['midlayer.hidden_norm.weight'], eps, 1.0)], -1)
        residual = hidden + attention(self, 'midlayer', x)
        y = rms_norm(residual, w['midlayer.post_attention_layernorm.weight'], eps, 1.0)
        prenorm = residual + mlp(w, 'midlayer', y)
        return prenorm, rms_norm(prenorm, w['norm.weight'], eps, 1.0) @ w['lm_head.weight'].T

    def save(self):
        out = os.path.join(TINY, self.out_name)
        os.makedirs(out, exist_ok=True)
        c = self.target.config
        tensors = {k: v.detach().contiguous() for k, v in self.w.items()}
        tensors['d2t'] = torch.tensor([t - i for i, t in enumerate(self.draft_ids)], dtype=torch.int64)
        t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
        t2d[self.draft_ids] = True
        tensors['t2d'] = t2d
        save_file(tensors, os.path.join(out, 'model.safetensors'), metadata={'format': 'pt'})
        config = {
            'architectures': ['LlamaForCausalLMEagle3'], 'model_type': 'llama', 'hidden_size': self.h,
            'intermediate_size': self.INTER, 'num_hidden_layers': 1, 'num_attention_heads': self.heads,
            'num_key_value_heads': self.kv_heads, 'head_dim': self.hd, 'rms_norm_eps': self.eps,
            'rope_theta': c.rope_parameters['rope_theta'], 'vocab_size': c.vocab_size,
            'draft_vocab_size': self.DRAFT_VOCAB, 'max_position_embeddings': c.max_position_embeddings,
            'hidden_act': 'silu', 'tie_word_embeddings': False,
        }
        with open(os.path.join(out, 'config.json'), 'w') as f:
            json.dump(config, f, indent=2)
            f.write('\n')
        print(f'{out}: EAGLE-3 head {os.path.getsize(os.path.join(out, "model.safetensors")) / 1e6:.2f} MB')


class Eagle(Head):
    """An EAGLE-1 head for the tiny llama (see the top)."""
    method, arch, base_arch, out_name = 'eagle', 'llama_eagle', 'llama', 'llama_eagle'
    SEED, LAYERS, INTER = 141, 2, 96

    def __init__(self):
        self.load_llama()
        gen = torch.Generator().manual_seed(self.SEED)
        noise = lambda *shape: torch.randn(shape, generator=gen, dtype=torch.float32)  # noqa: E731
        h, q, kv = self.h, self.heads * self.hd, self.kv_heads * self.hd
        self.w = {'fc.weight': STD / 2 ** 0.5 * noise(h, 2 * h), 'fc.bias': 0.2 * noise(h)}
        for i in range(self.LAYERS):
            p = f'layers.{i}'
            if i > 0:  # the first layer has no input norm
                self.w[f'{p}.input_layernorm.weight'] = 1.0 + 0.2 * noise(h)
            self.w.update({
                f'{p}.self_attn.q_proj.weight': STD * noise(q, h),
                f'{p}.self_attn.k_proj.weight': STD * noise(kv, h),
                f'{p}.self_attn.v_proj.weight': STD * noise(kv, h),
                f'{p}.self_attn.o_proj.weight': STD * noise(h, q),
                f'{p}.post_attention_layernorm.weight': 1.0 + 0.2 * noise(h),
                f'{p}.mlp.gate_proj.weight': STD * noise(self.INTER, h),
                f'{p}.mlp.up_proj.weight': STD * noise(self.INTER, h),
                f'{p}.mlp.down_proj.weight': STD * noise(h, self.INTER),
            })

    def params(self):
        return list(self.w.values())

    def forward(self, ids, hidden):
        """The head over rows p = 0.. (token p + 1, hidden p): its output (what a chained step
        takes, un-normed) and the target's head over it."""
        w = self.w
        x = torch.cat([self.target.model.embed_tokens.weight[torch.tensor(ids)], hidden], -1) @ w['fc.weight'].T
        x = x + w['fc.bias']
        for i in range(self.LAYERS):
            p = f'layers.{i}'
            normed = rms_norm(x, w[f'{p}.input_layernorm.weight'], self.eps, 1.0) if i > 0 else x
            x = x + attention(self, p, normed)
            x = x + mlp(w, p, rms_norm(x, w[f'{p}.post_attention_layernorm.weight'], self.eps, 1.0))
        return x, self.target.lm_head(x)

    def save(self):
        out = os.path.join(TINY, self.out_name)
        os.makedirs(out, exist_ok=True)
        c = self.target.config
        save_file({k: v.detach().contiguous() for k, v in self.w.items()}, os.path.join(out, 'model.safetensors'),
                  metadata={'format': 'pt'})
        config = {
            'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'hidden_size': self.h,
            'intermediate_size': self.INTER, 'num_hidden_layers': self.LAYERS, 'num_attention_heads': self.heads,
            'num_key_value_heads': self.kv_heads, 'head_dim': self.hd, 'rms_norm_eps': self.eps,
            'rope_theta': c.rope_parameters['rope_theta'], 'vocab_size': c.vocab_size,
            'max_position_embeddings': c.max_position_embeddings, 'hidden_act': 'silu', 'tie_word_embeddings': False,
        }
        with open(os.path.join(out, 'config.json'), 'w') as f:
            json.dump(config, f, indent=2)
            f.write('\n')
        print(f'{out}: EAGLE head {os.path.getsize(os.path.join(out, "model.safetensors")) / 1e6:.2f} MB')


def train(head, sequences):
    """Fits the head to propose token p + 2 at position p of `sequences`."""
    params = head.params()
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=TRAIN_LR)
    with torch.no_grad():
        data = [(seq[1:-1], head.first_hidden(seq[:-2]), torch.tensor([head.to_draft(t) for t in seq[2:]]))
                for seq in sequences]
    for step in range(TRAIN_STEPS):
        opt.zero_grad()
        loss = sum(torch.nn.functional.cross_entropy(head.forward(i, h)[1], y) for i, h, y in data)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == TRAIN_STEPS - 1:
            print(f'{head.arch}: train step {step}: loss {loss.item() / len(data):.3f}')
    for p in params:
        p.requires_grad_(False)


def speculate(head, prompt):
    """Greedy decoding with the head's drafts, step by step as the engine runs it (one request)."""
    tokens = list(prompt)
    tokens.append(int(head.target_forward(tokens)[1][-1].argmax()))
    generated, steps, margins = 1, [], []
    while generated < MAX_TOKENS:
        limit = min(K, MAX_TOKENS - generated - 1)
        drafts = []
        if limit > 0:
            ids, hidden = tokens[1:], head.first_hidden(tokens[:-1])
            for _ in range(limit):
                chain, logits = head.forward(ids, hidden)
                margins.append(margin(logits[-1]))
                drafts.append(head.to_target(int(logits[-1].argmax())))
                ids, hidden = ids + [drafts[-1]], torch.cat([hidden, chain[-1:]])
        steps.append(drafts)
        for d in drafts + [None]:
            tokens.append(int(head.target_forward(tokens)[1][-1].argmax()))
            generated += 1
            if tokens[-1] != d or generated == MAX_TOKENS:
                break
    return tokens[len(prompt):], steps, min(margins)


def margin(logits):
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


def make(arch):
    head = {'llama_eagle3': Eagle3, 'llama_eagle': Eagle}.get(arch, lambda: Mtp(arch))()
    with open(os.path.join(REPO, 'tests', 'goldens', 'tiny', f'{head.base_arch}.json')) as f:
        base_cases = json.load(f)['cases']
    train(head, [c['prompt_token_ids'] + c['token_ids'] for c in base_cases])
    torch.set_grad_enabled(False)
    head.save()
    cases = []
    for c in base_cases:
        prompt = c['prompt_token_ids']
        tokens, steps, m = speculate(head, prompt)
        assert tokens == c['token_ids'][:MAX_TOKENS], 'speculation must not change the greedy tokens'
        print(f'{arch}: prompt len {len(prompt)}: {len(steps)} steps, drafts {steps}, min draft margin {m:.4f}')
        if m >= MIN_REL_MARGIN:
            cases.append({'prompt_token_ids': prompt, 'token_ids': tokens, 'drafts_after_each_step': steps,
                          'min_draft_rel_margin': round(m, 4)})
    assert len(cases) >= 3, 'too few prompts with clear draft margins'
    golden = os.path.join(REPO, 'tests', 'goldens', 'tiny', f'{head.out_name}.json')
    with open(golden, 'w') as f:
        json.dump({'model': f'tests/data/tiny/{head.out_name}', 'speculative_config':
                   {'method': head.method, 'num_speculative_tokens': K}, 'max_tokens': MAX_TOKENS,
                   'versions': {'torch': torch.__version__}, 'cases': cases}, f, indent=1)
        f.write('\n')
    print(f'wrote {golden}: {len(cases)} cases')
    torch.set_grad_enabled(True)


if __name__ == '__main__':
    for arch in sys.argv[1:] or list(ARCHS) + ['llama_eagle3', 'llama_eagle']:
        make(arch)
