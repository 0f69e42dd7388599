#!/usr/bin/env python3
"""Greedy goldens from HF transformers (float32), the correctness oracle.

  python scripts/make_goldens.py tiny [ARCH..] -> tests/goldens/tiny/<arch>.json
  python scripts/make_goldens.py real [NAME..] -> tests/goldens/real/<name>.json  (smollm2 qwen05 gemma3)

tiny: for the checkpoints of scripts/make_tiny_models.py. Prompts are random token ids (some
longer than gemma3's sliding window of 8); 32 greedy tokens by a plain full-sequence forward at
every step (no KV cache in the reference); the logits of the first and of the final step are
recorded. A prompt is kept only if the top-2 logit margin stays above MIN_REL_MARGIN (relative
to the largest |logit|) at every step, far above the 1e-4 tolerance of the Rust tests, so a
greedy comparison is meaningful; candidate prompts come from a fixed seed.

real: for the hf dirs of scripts/fetch_test_models.sh. Raw-text and chat-templated prompts
(apply_chat_template with add_generation_prompt=True, then tokenized without special tokens, as
vLLM does); 32 greedy tokens with EOS ignored (argmax every step, an EOS token is emitted and
decoding goes on, like vLLM's ignore_eos); `eos_index` = where EOS would have stopped (null if
it would not). Decoding is the loop `generate(do_sample=False)` runs: one prefill, then one token
at a time with the KV cache. The top-2 margin of each step is recorded to judge any mismatch.

Each golden records the torch/transformers versions. Needs scripts/requirements-goldens.txt.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_NEW = 32
MIN_REL_MARGIN = 0.01
# The architectures with a tiny checkpoint: scripts/tiny_models.json, generated from the ArchSpecs.
TINY_ARCHS = sys.argv[2:] or list(json.load(open(os.path.join(REPO, 'scripts', 'tiny_models.json')))['archs'])
TINY_PROMPT_LENS = [1, 5, 11, 24, 40]


def versions():
    return {'torch': torch.__version__, 'transformers': transformers.__version__}


def models_dir():
    return os.environ.get('VLLM_RS_TEST_MODELS', os.path.join(REPO, '.models'))


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print(f'wrote {path} ({os.path.getsize(path) / 1024:.1f} KiB)')


def top2_rel_margin(logits):
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


# ---------------------------------------------------------------- tiny
def tiny_greedy(model, prompt):
    ids = list(prompt)
    out, margins, first, last = [], [], None, None
    for step in range(N_NEW):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
        margins.append(top2_rel_margin(logits))
        if step == 0:
            first = logits
        last = logits
        nxt = int(torch.argmax(logits))
        ids.append(nxt)
        out.append(nxt)
    return out, margins, first, last


def floats(t):
    return [float(f'{v:.8g}') for v in t.tolist()]


def make_tiny():
    for arch in TINY_ARCHS:
        rel = f'tiny/{arch}'
        d = os.path.join(REPO, 'tests', 'data', rel)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation='eager').eval()
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(7)
        cases, tried = [], 0
        for n in TINY_PROMPT_LENS:
            while True:
                tried += 1
                assert tried < 200, f'{arch}: no prompt with clear margins; raise STD in make_tiny_models.py'
                prompt = torch.randint(0, vocab, (n,), generator=gen).tolist()
                ids, margins, first, last = tiny_greedy(model, prompt)
                if min(margins) >= MIN_REL_MARGIN:
                    break
            cases.append({'prompt_token_ids': prompt, 'token_ids': ids,
                          'min_rel_margin': round(min(margins), 4),
                          'first_logits': floats(first), 'final_logits': floats(last)})
            print(f'{arch}: prompt len {n}: min margin {min(margins):.3f}, distinct outputs {len(set(ids))}')
        write_json(os.path.join(REPO, 'tests', 'goldens', 'tiny', f'{arch}.json'), {
            'model': f'tests/data/{rel}', 'architecture': model.config.architectures[0],
            'versions': versions(), 'dtype': 'float32', 'attn_implementation': 'eager',
            'num_new_tokens': N_NEW, 'tolerance_note': 'logits compared with max|d| <= 1e-4 * max|golden|',
            'cases': cases})


# ---------------------------------------------------------------- real
HF_DIRS = {
    'smollm2': 'hf/smollm2-135m-instruct-from-q4_1',
    'qwen05': 'hf/qwen2.5-coder-0.5b-instruct-from-q4_k_m',
    'gemma3': 'hf/gemma3-270m-from-q4_k_m',
}

LONG_PARAGRAPH = (
    'The first electronic computers filled entire rooms and consumed as much power as a small '
    'town. Engineers programmed them by rewiring panels and flipping switches, and a single '
    'calculation could take hours to set up. Over the following decades, transistors replaced '
    'vacuum tubes, integrated circuits replaced individual transistors, and the microprocessor '
    'put a complete central processing unit on a single chip. Each step made machines smaller, '
    'cheaper and more reliable, and each step opened computing to people who had never touched '
    'a computer before: first universities and banks, then small businesses, and finally '
    'households, where personal computers arrived in the late nineteen-seventies.')

RAW_PROMPTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    'Question: What is the capital of France?\nAnswer:',
    'Here is a list of five fruits:\n1.',
    LONG_PARAGRAPH + ' In short,',
    "Le chat est assis sur le tapis. Aujourd'hui, il fait beau et",
]

CHAT_PROMPTS = [
    [{'role': 'user', 'content': 'Write a Python function that checks whether a number is prime.'}],
    [{'role': 'user', 'content': 'What is the boiling point of water at sea level in Celsius?'}],
    [{'role': 'user', 'content': 'List three primary colors, one per line.'}],
    [{'role': 'user', 'content': 'Summarize this text in one sentence:\n\n' + LONG_PARAGRAPH}],
    [{'role': 'user', 'content': '日本の首都はどこですか？一文で答えてください。'}],
]


def eos_ids(d, tok):
    gc = json.load(open(os.path.join(d, 'generation_config.json')))
    e = gc.get('eos_token_id')
    ids = set(e if isinstance(e, list) else [e])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    return sorted(i for i in ids if i is not None)


def hf_greedy(model, prompt_ids):
    """generate(do_sample=False)'s loop with EOS ignored: prefill, then one token at a time."""
    out, margins = [], []
    with torch.no_grad():
        r = model(torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(N_NEW):
            logits = r.logits[0, -1].float()
            margins.append(round(top2_rel_margin(logits), 4))
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            r = model(torch.tensor([[nxt]]), past_key_values=r.past_key_values, use_cache=True)
    return out, margins


def make_real(name):
    d = os.path.join(models_dir(), HF_DIRS[name])
    if not os.path.isdir(d):
        raise SystemExit(f'{d} is missing: run scripts/fetch_test_models.sh')
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation='eager').eval()
    eos = eos_ids(d, tok)
    cases = []
    for kind, prompts in [('raw', RAW_PROMPTS), ('chat', CHAT_PROMPTS)]:
        for p in prompts:
            if kind == 'raw':
                text = p
                prompt_ids = tok(text).input_ids  # the tokenizer's own special tokens (gemma: <bos>)
                case = {'kind': 'raw', 'prompt': text}
            else:
                text = tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
                prompt_ids = tok(text, add_special_tokens=False).input_ids
                case = {'kind': 'chat', 'messages': p, 'prompt': text}
            ids, margins = hf_greedy(model, prompt_ids)
            eos_index = next((i for i, t in enumerate(ids) if t in eos), None)
            case.update(prompt_token_ids=prompt_ids, token_ids=ids,
                        text=tok.decode(ids, skip_special_tokens=False), eos_index=eos_index,
                        rel_margins=margins)
            cases.append(case)
            print(f'{name} {kind}: {len(prompt_ids)} prompt tokens, min margin {min(margins):.4f}, '
                  f'eos_index {eos_index}: {case["text"][:60]!r}')
    write_json(os.path.join(REPO, 'tests', 'goldens', 'real', f'{name}.json'), {
        'model': HF_DIRS[name], 'architecture': model.config.architectures[0], 'versions': versions(),
        'dtype': 'float32', 'attn_implementation': 'eager', 'num_new_tokens': N_NEW, 'eos_token_ids': eos,
        'note': 'greedy, EOS ignored; rel_margins[i] = (top1 - top2) / max|logit| at step i', 'cases': cases})


def main():
    torch.set_num_threads(int(os.environ.get('GOLDEN_THREADS', '2')))
    what = sys.argv[1] if len(sys.argv) > 1 else ''
    if what == 'tiny':
        make_tiny()
    elif what == 'real':
        for name in sys.argv[2:] or list(HF_DIRS):
            make_real(name)
    else:
        raise SystemExit(__doc__)


if __name__ == '__main__':
    main()
