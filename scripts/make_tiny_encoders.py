#!/usr/bin/env python3
"""Tiny random-weight encoder checkpoints and their goldens, made by transformers itself (float32):
the parity oracle for the encoder architectures and heads served as pooling models.

  python scripts/make_tiny_encoders.py [NAME..]
    -> tests/data/tiny-encoders/<name>/{config.json, model.safetensors}
    -> tests/goldens/tiny-encoders/<name>.json

Every parameter is redrawn from a fixed seed (matrices ~ N(0, 0.2), norm weights 1 + noise,
biases noise: a missing bias or norm would show). ModernBERT has 4 layers (every 3rd global:
layers 0 and 3) and a local window of +-4 tokens, which the longer inputs exceed.
Each golden holds a few sequences of token ids (random, one with the padding id inside, which
RoBERTa/MPNet position numbering skips), optional token type ids (a pair), and transformers' `last_hidden_state` (bare encoders) or
logits (sequence classification heads), one forward per sequence, no padding.
Needs scripts/requirements-goldens.txt.
"""
import json
import os
import sys

import torch
import transformers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=48, max_position_embeddings=66, hidden_act='gelu')
MODERNBERT = dict(vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=66, global_attn_every_n_layers=3,
                  local_attention=8, global_rope_theta=160000.0, local_rope_theta=10000.0,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
# name: (model class, config class, seed, extra config)
ARCHS = {
    'bert': ('BertModel', 'BertConfig', 301, dict(type_vocab_size=2, pad_token_id=0)),
    'roberta': ('RobertaModel', 'RobertaConfig', 302, dict(type_vocab_size=1, pad_token_id=1)),
    'xlm_roberta': ('XLMRobertaModel', 'XLMRobertaConfig', 303, dict(type_vocab_size=1, pad_token_id=1)),
    'mpnet': ('MPNetModel', 'MPNetConfig', 304, dict(pad_token_id=1, relative_attention_num_buckets=32)),
    'bert_cls': ('BertForSequenceClassification', 'BertConfig', 305,
                 dict(type_vocab_size=2, pad_token_id=0, num_labels=3,
                      id2label={0: 'neg', 1: 'neutral', 2: 'pos'}, label2id={'neg': 0, 'neutral': 1, 'pos': 2})),
    'xlm_roberta_cls': ('XLMRobertaForSequenceClassification', 'XLMRobertaConfig', 306,
                        dict(type_vocab_size=1, pad_token_id=1, num_labels=1)),
    # As the Hub's checkpoints: no biases, exact GELU, CLS pooling in the head.
    'modernbert': ('ModernBertModel', 'ModernBertConfig', 307, {}),
    # Every optional bias on, tanh GELU, a ReLU head over the mean of the tokens.
    'modernbert_cls': ('ModernBertForSequenceClassification', 'ModernBertConfig', 308,
                       dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                            hidden_activation='gelu_pytorch_tanh', classifier_activation='relu',
                            classifier_pooling='mean', num_labels=3)),
}
# The heads the server tests use (their tokenizer and answers).
SERVED = ['bert_cls', 'xlm_roberta_cls', 'modernbert_cls']
LENS = [1, 5, 17, 40, 64]
# Texts the server tests send to the heads (tokenized by the tiny tokenizer below).
TEXTS = ['the cat sat', 'a dog ran far away', 'xyz', 'quiet blue sea and sky']
PAIRS = [('what is a cat', 'the cat sat'), ('what is a cat', 'a dog ran far away'), ('sky', 'quiet blue sea and sky')]


def tiny_tokenizer(name, vocab_size):
    """A WordPiece tokenizer.json over letters, for server tests of the heads: BERT's specials and
    [CLS] a [SEP] b [SEP] with type ids 0/1 (ModernBERT: the same, its specials in its config's
    order: pad 0, cls 1, sep 2), or XLM-R's <s> a </s></s> b </s> (pad id 1)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    letters = [chr(c) for c in range(ord('a'), ord('z') + 1)]
    bert_like = name.startswith(('bert', 'modernbert'))
    if bert_like:
        specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
        if name.startswith('modernbert'):
            specials = ['[PAD]', '[CLS]', '[SEP]', '[UNK]', '[MASK]']
        unk, bos, eos = '[UNK]', '[CLS]', '[SEP]'
    else:
        specials = ['<s>', '<pad>', '</s>', '<unk>']
        unk, bos, eos = '<unk>', '<s>', '</s>'
    vocab = specials + letters + ['##' + c for c in letters]
    assert len(vocab) <= vocab_size
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token=unk))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    ids = {t: i for i, t in enumerate(vocab)}
    if bert_like:
        tok.post_processor = processors.BertProcessing((eos, ids[eos]), (bos, ids[bos]))
    else:
        tok.post_processor = processors.RobertaProcessing((eos, ids[eos]), (bos, ids[bos]))
    return tok


def server_golden(name, model, out):
    """What /classify, /score and /rerank must answer on the tiny head models."""
    tok = tiny_tokenizer(name, model.config.vocab_size)
    tok.save(os.path.join(out, 'tokenizer.json'))

    def logits(enc):
        with torch.no_grad():
            ids = torch.tensor([enc.ids])
            # ModernBERT has no token types (its forward takes none).
            kw = {} if name.startswith('modernbert') else {'token_type_ids': torch.tensor([enc.type_ids])}
            return model(input_ids=ids, **kw).logits[0]

    g = {'texts': TEXTS, 'pairs': PAIRS}
    g['probs'] = [torch.softmax(logits(tok.encode(t)), -1).tolist() for t in TEXTS]
    if model.config.num_labels == 1:
        g['pair_scores'] = [torch.sigmoid(logits(tok.encode(a, b)))[0].item() for a, b in PAIRS]
    return g


def make(name):
    cls_name, config_cls, seed, extra = ARCHS[name]
    base = MODERNBERT if config_cls == 'ModernBertConfig' else COMMON
    config = getattr(transformers, config_cls)(**dict(base, **extra))
    config.architectures = [cls_name]
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            is_norm = 'LayerNorm' in pname or pname.split('.')[-2].endswith('norm')
            if is_norm and pname.endswith('.weight'):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.2 * noise)
    out = os.path.join(REPO, 'tests', 'data', 'tiny-encoders', name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    assert os.path.getsize(os.path.join(out, 'model.safetensors')) < 1_000_000
    rng = torch.Generator().manual_seed(seed + 1000)
    pad = config.pad_token_id
    cases = []
    for i, n in enumerate(LENS):
        ids = torch.randint(2, config.vocab_size, (n,), generator=rng)
        if i == 2:
            ids[5] = pad  # a padding id inside: positions after it shift (RoBERTa/MPNet)
        types = None
        if 'type_vocab_size' in extra and extra['type_vocab_size'] > 1 and n > 4:
            types = torch.zeros(n, dtype=torch.long)
            types[n // 2:] = 1  # a (text, pair) input
        with torch.no_grad():
            kw = {'token_type_ids': types[None]} if types is not None else {}
            o = model(input_ids=ids[None], **kw)
        case = {'token_ids': ids.tolist(), 'token_type_ids': types.tolist() if types is not None else None}
        if hasattr(o, 'logits'):
            case['logits'] = o.logits[0].tolist()
        else:
            case['hidden'] = [float(f'{x:.8g}') for x in o.last_hidden_state[0].flatten().tolist()]
        cases.append(case)
    g = {'arch': cls_name, 'versions': {'torch': torch.__version__, 'transformers': transformers.__version__},
         'cases': cases}
    if name in SERVED:
        g['server'] = server_golden(name, model, out)
    gdir = os.path.join(REPO, 'tests', 'goldens', 'tiny-encoders')
    os.makedirs(gdir, exist_ok=True)
    with open(os.path.join(gdir, f'{name}.json'), 'w') as f:
        json.dump(g, f)
    print(name, cls_name)


def decoder_golden(arch):
    """A tiny decoder of tests/data/tiny run as a pooling model: transformers' final (normed)
    hidden states of whole sequences, which last-token pooling reads."""
    src = os.path.join(REPO, 'tests', 'data', 'tiny', arch)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    rng = torch.Generator().manual_seed(4242)
    cases = []
    for n in [1, 7, 23]:
        ids = torch.randint(0, model.config.vocab_size, (n,), generator=rng)
        with torch.no_grad():
            h = model.model(input_ids=ids[None]).last_hidden_state[0]
        cases.append({'token_ids': ids.tolist(), 'hidden': [float(f'{x:.8g}') for x in h.flatten().tolist()]})
    g = {'arch': arch, 'versions': {'torch': torch.__version__, 'transformers': transformers.__version__},
         'cases': cases}
    with open(os.path.join(REPO, 'tests', 'goldens', 'tiny-encoders', f'{arch}_pooled.json'), 'w') as f:
        json.dump(g, f)
    print(arch, 'as a pooling model')


DECODERS = ['qwen3']


def main():
    torch.set_num_threads(1)
    for name in sys.argv[1:] or list(ARCHS) + DECODERS:
        decoder_golden(name) if name in DECODERS else make(name)


if __name__ == '__main__':
    main()
