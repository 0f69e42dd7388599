#!/usr/bin/env python3
"""Convert a (quantized) GGUF causal LM into an HF-format directory:
config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json.

Weights are dequantized with gguf-py (numpy) and written as bf16 / f16 / f32.
Supported architectures: llama, qwen2, qwen3, gemma3.

Transforms undone (mirrors transformers' GGUF loader / llama.cpp convert_hf_to_gguf.py):
  * llama: attn_q / attn_k rows were permuted for llama.cpp's interleaved RoPE -> reverse permute.
  * gemma3: RMSNorm weights were stored as (1 + w)            -> subtract 1.
The tokenizer is rebuilt from the GGUF vocab with transformers' GGUF tokenizer builders
(torch-free module), or copied from --tokenizer-from DIR after checking the vocab matches.

Requires: scripts/requirements-ci.txt (gguf numpy tokenizers transformers; no torch needed).
With those pinned versions the output is byte-identical run to run and machine to machine;
scripts/fetch_test_models.sh checks the SHA-256 of every file it writes.

Credit: this is the project's own converter, first written as shared/models/gguf_to_hf.py for
the team's model set-up; kept here so the repository stands alone.
Usage: gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype bf16|f16|f32] [--tokenizer-from DIR]
       [--chat-template-from tokenizer_config.json]
"""
import argparse, json, os, struct, sys, shutil
import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize


def fval(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


# ---------------------------------------------------------------- config
def build_config(r, arch, has_output):
    g = lambda k, d=None: fval(r, f'{arch}.{k}', d)
    n_head = g('attention.head_count')
    n_kv = g('attention.head_count_kv', n_head)
    hidden = g('embedding_length')
    head_dim = g('attention.key_length', hidden // n_head)
    vocab = len(fval(r, 'tokenizer.ggml.tokens'))
    common = dict(
        hidden_size=hidden,
        intermediate_size=g('feed_forward_length'),
        num_hidden_layers=g('block_count'),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=head_dim,
        max_position_embeddings=g('context_length'),
        rms_norm_eps=float(np.float32(g('attention.layer_norm_rms_epsilon'))),
        rope_theta=float(g('rope.freq_base', 10000.0)),
        vocab_size=vocab,
        bos_token_id=fval(r, 'tokenizer.ggml.bos_token_id'),
        eos_token_id=fval(r, 'tokenizer.ggml.eos_token_id'),
        pad_token_id=fval(r, 'tokenizer.ggml.padding_token_id'),
        tie_word_embeddings=not has_output,
        attention_dropout=0.0,
        initializer_range=0.02,
        use_cache=True,
    )
    if arch == 'llama':
        cfg = dict(architectures=['LlamaForCausalLM'], model_type='llama', hidden_act='silu',
                   attention_bias=False, mlp_bias=False, rope_scaling=None, pretraining_tp=1, **common)
    elif arch == 'qwen2':
        cfg = dict(architectures=['Qwen2ForCausalLM'], model_type='qwen2', hidden_act='silu',
                   use_sliding_window=False, sliding_window=None, max_window_layers=common['num_hidden_layers'],
                   rope_scaling=None, **common)
    elif arch == 'qwen3':
        cfg = dict(architectures=['Qwen3ForCausalLM'], model_type='qwen3', hidden_act='silu', attention_bias=False,
                   use_sliding_window=False, sliding_window=None, max_window_layers=common['num_hidden_layers'],
                   rope_scaling=None, **common)
    elif arch == 'gemma3':
        # llama.cpp hard-codes these for gemma3 (not stored in the GGUF): every 6th layer is global,
        # local layers use rope base 10000, attention scale = 1/sqrt(head_dim) (query_pre_attn_scalar).
        n_layers = common['num_hidden_layers']
        pattern = 6
        layer_types = ['full_attention' if (i + 1) % pattern == 0 else 'sliding_attention' for i in range(n_layers)]
        cfg = dict(architectures=['Gemma3ForCausalLM'], model_type='gemma3_text',
                   hidden_activation='gelu_pytorch_tanh', attention_bias=False,
                   query_pre_attn_scalar=head_dim, sliding_window=g('attention.sliding_window'),
                   _sliding_window_pattern=pattern, layer_types=layer_types,
                   rope_local_base_freq=10000.0, rope_scaling=None,
                   final_logit_softcapping=None, attn_logit_softcapping=None,
                   use_bidirectional_attention=False, **common)
    else:
        raise SystemExit(f'unsupported architecture {arch}')
    return cfg


# ---------------------------------------------------------------- tensor names
LAYER_MAP = {
    'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj', 'attn_v': 'self_attn.v_proj',
    'attn_output': 'self_attn.o_proj', 'attn_q_norm': 'self_attn.q_norm', 'attn_k_norm': 'self_attn.k_norm',
    'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj', 'ffn_down': 'mlp.down_proj',
    'attn_norm': 'input_layernorm',
}
ARCH_LAYER_MAP = {
    'llama': {'ffn_norm': 'post_attention_layernorm'},
    'qwen2': {'ffn_norm': 'post_attention_layernorm'},
    'qwen3': {'ffn_norm': 'post_attention_layernorm'},
    'gemma3': {'post_attention_norm': 'post_attention_layernorm', 'ffn_norm': 'pre_feedforward_layernorm',
               'post_ffw_norm': 'post_feedforward_layernorm'},
}
GLOBAL_MAP = {'token_embd.weight': 'model.embed_tokens.weight', 'output_norm.weight': 'model.norm.weight',
              'output.weight': 'lm_head.weight'}


def hf_name(arch, name):
    if name in GLOBAL_MAP:
        return GLOBAL_MAP[name]
    parts = name.split('.')
    if parts[0] != 'blk':
        raise KeyError(name)
    bid, comp, suffix = parts[1], parts[2], parts[3]
    m = dict(LAYER_MAP, **ARCH_LAYER_MAP[arch])
    if comp not in m:
        raise KeyError(name)
    return f'model.layers.{bid}.{m[comp]}.{suffix}'


def reverse_permute(w, n_head):
    # inverse of llama.cpp LlamaModel.permute (see transformers LlamaTensorProcessor)
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def tensor_f32(t):
    qt = GGMLQuantizationType(t.tensor_type)
    shape = tuple(int(x) for x in reversed(t.shape))  # numpy order (rows, cols)
    if qt == GGMLQuantizationType.F32:
        a = np.asarray(t.data, dtype=np.float32)
    elif qt == GGMLQuantizationType.F16:
        a = np.asarray(t.data, dtype=np.float16).astype(np.float32)
    else:
        a = dequantize(t.data, qt).astype(np.float32)
    return a.reshape(shape)


# ---------------------------------------------------------------- safetensors writer (bf16 capable)
def to_bytes(a, dtype):
    if dtype == 'F32':
        return np.ascontiguousarray(a, dtype='<f4').tobytes()
    if dtype == 'F16':
        return np.ascontiguousarray(a.astype('<f2')).tobytes()
    if dtype == 'BF16':  # round-to-nearest-even of the f32 bit pattern
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype('<u2')
        return rounded.tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = to_bytes(tensors[name], dtype)
        header[name] = {'dtype': dtype, 'shape': list(tensors[name].shape), 'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header['__metadata__'] = {'format': 'pt'}
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- tokenizer
def build_tokenizer(r, arch, out):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    tok = {
        'tokenizer_type': fval(r, 'tokenizer.ggml.model'),
        'pre_tokenizer_type': fval(r, 'tokenizer.ggml.pre'),
        'tokens': fval(r, 'tokenizer.ggml.tokens'),
        'token_type': fval(r, 'tokenizer.ggml.token_type'),
    }
    for k, name in [('tokenizer.ggml.merges', 'merges'), ('tokenizer.ggml.scores', 'scores')]:
        v = fval(r, k)
        if v is not None:
            tok[name] = v
    for k in ['bos_token_id', 'eos_token_id', 'unknown_token_id', 'padding_token_id']:
        v = fval(r, f'tokenizer.ggml.{k}')
        if v is not None:
            tok[k.replace('unknown', 'unk').replace('padding', 'pad')] = v
    backend, _ = convert_gguf_tokenizer(arch, tok)
    if tok['pre_tokenizer_type'] == 'smollm':
        # llama.cpp 'smollm' pre-tokenizer = single digits, then the GPT-2 byte-level regex
        from tokenizers import pre_tokenizers
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    backend.save(os.path.join(out, 'tokenizer.json'))
    toks = tok['tokens']
    name = lambda i: toks[i] if i is not None else None
    cfg = {
        'tokenizer_class': {'llama': 'GPT2Tokenizer' if tok['tokenizer_type'] == 'gpt2' else 'LlamaTokenizer',
                            'qwen2': 'Qwen2Tokenizer', 'qwen3': 'Qwen2Tokenizer', 'gemma3': 'GemmaTokenizer'}[arch],
        'bos_token': None if arch in ('qwen2', 'qwen3') else name(tok.get('bos_token_id')),
        'eos_token': name(tok.get('eos_token_id')),
        'pad_token': name(tok.get('pad_token_id')),
        'unk_token': name(tok.get('unk_token_id')),
        'add_bos_token': bool(fval(r, 'tokenizer.ggml.add_bos_token', False)),
        'add_eos_token': bool(fval(r, 'tokenizer.ggml.add_eos_token', False)),
        'clean_up_tokenization_spaces': False,
        'model_max_length': int(fval(r, f'{arch}.context_length')),
    }
    ct = fval(r, 'tokenizer.chat_template')
    if ct:
        cfg['chat_template'] = ct
    json.dump(cfg, open(os.path.join(out, 'tokenizer_config.json'), 'w'), indent=2, ensure_ascii=False)


def copy_tokenizer(r, src, out):
    """Copy tokenizer.json + tokenizer_config.json from src after checking the vocab matches the GGUF."""
    tj = json.load(open(os.path.join(src, 'tokenizer.json'), encoding='utf-8'))
    ids = dict(tj['model']['vocab'])
    for a in tj.get('added_tokens', []):
        ids[a['content']] = a['id']
    toks = fval(r, 'tokenizer.ggml.tokens')
    bad = 0
    for i, t in enumerate(toks):
        t2 = '\u2581' * len(t) if (' ' in t and not t.strip()) else t  # gemma respelling of space runs
        if ids.get(t, ids.get(t2)) != i:
            bad += 1
    if bad:
        raise SystemExit(f'{bad} GGUF tokens do not map to the same id in {src}/tokenizer.json')
    shutil.copy(os.path.join(src, 'tokenizer.json'), out)
    shutil.copy(os.path.join(src, 'tokenizer_config.json'), out)


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('gguf')
    ap.add_argument('out')
    ap.add_argument('--dtype', default='bf16', choices=['bf16', 'f16', 'f32'])
    ap.add_argument('--tokenizer-from', help='dir with tokenizer.json + tokenizer_config.json to copy (vocab-checked)')
    ap.add_argument('--chat-template-from', help='tokenizer_config.json whose chat_template to add if the GGUF has none')
    a = ap.parse_args()
    r = GGUFReader(a.gguf)
    arch = fval(r, 'general.architecture')
    os.makedirs(a.out, exist_ok=True)
    names = [t.name for t in r.tensors]
    has_output = 'output.weight' in names
    cfg = build_config(r, arch, has_output)
    dtype = {'bf16': 'BF16', 'f16': 'F16', 'f32': 'F32'}[a.dtype]
    cfg['torch_dtype'] = {'BF16': 'bfloat16', 'F16': 'float16', 'F32': 'float32'}[dtype]
    cfg['dtype'] = cfg['torch_dtype']

    tensors = {}
    for t in r.tensors:
        w = tensor_f32(t)
        n = hf_name(arch, t.name)
        if arch == 'llama' and ('.attn_q.' in t.name or '.attn_k.' in t.name):
            w = reverse_permute(w, cfg['num_attention_heads'] if '.attn_q.' in t.name else cfg['num_key_value_heads'])
        if arch == 'gemma3' and t.name.endswith('norm.weight'):
            w = w - 1.0
        tensors[n] = w
    write_safetensors(os.path.join(a.out, 'model.safetensors'), tensors, dtype)
    json.dump(cfg, open(os.path.join(a.out, 'config.json'), 'w'), indent=2)

    if a.tokenizer_from:
        copy_tokenizer(r, a.tokenizer_from, a.out)
    else:
        build_tokenizer(r, arch, a.out)
    tc_path = os.path.join(a.out, 'tokenizer_config.json')
    tc = json.load(open(tc_path, encoding='utf-8'))
    if a.chat_template_from and not tc.get('chat_template'):
        tc['chat_template'] = json.load(open(a.chat_template_from, encoding='utf-8'))['chat_template']
        json.dump(tc, open(tc_path, 'w'), indent=2, ensure_ascii=False)

    # generation_config: stop on the model eos plus the chat end-of-turn tokens when a chat template is present
    eos = [cfg['eos_token_id']]
    toks = fval(r, 'tokenizer.ggml.tokens')
    if tc.get('chat_template'):
        for extra in ['<|im_end|>', '<|endoftext|>', '<end_of_turn>', '<eos>']:
            if extra in toks and toks.index(extra) not in eos:
                eos.append(toks.index(extra))
    gen = {'bos_token_id': cfg['bos_token_id'], 'eos_token_id': eos if len(eos) > 1 else eos[0],
           'pad_token_id': cfg['pad_token_id']}
    json.dump(gen, open(os.path.join(a.out, 'generation_config.json'), 'w'), indent=2)
    print(f'wrote {a.out}: {len(tensors)} tensors, {sum(x.size for x in tensors.values()):,} params as {dtype}')


if __name__ == '__main__':
    main()
