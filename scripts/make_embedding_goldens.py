#!/usr/bin/env python3
"""Sentence-embedding goldens from sentence-transformers (float32, CPU), the oracle for the
encoder models and their pooling.

  python scripts/make_embedding_goldens.py [NAME..] -> tests/goldens/embeddings/<name>.json
      NAME: minilm (all-MiniLM-L6-v2), mpnet (all-mpnet-base-v2); the hf dirs of
      scripts/fetch_test_models.sh ($VLLM_RS_TEST_MODELS, else <repo>/.models)

Each golden holds the sentences, the token ids sentence-transformers fed the model (it truncates
to the folder's max_seq_length, keeping [CLS]/[SEP]), and the normalized vectors. The sentences
include a long one (truncated), non-English, and nearly empty ones. Needs
scripts/requirements-goldens.txt.
"""
import json
import os
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get('VLLM_RS_TEST_MODELS') or os.path.join(REPO, '.models')
DIRS = {'minilm': 'all-MiniLM-L6-v2', 'mpnet': 'all-mpnet-base-v2'}
LONG = ' '.join(f'The quick brown fox number {i} jumps over the lazy dog near the river bank.' for i in range(60))
SENTENCES = [
    'This is an example sentence.',
    'Each sentence is converted to a vector.',
    'The cat sits outside.',
    'A man is playing guitar.',
    'Der schnelle braune Fuchs springt über den faulen Hund.',
    '東京は日本の首都です。',
    'Привет, как дела?',
    'a',
    ' ',
    '?!',
    LONG,
]


def make(name):
    torch.manual_seed(0)
    model = SentenceTransformer(os.path.join(MODELS, 'hf', DIRS[name]), device='cpu')
    model = model.float().eval()
    features = model.tokenize(SENTENCES)
    ids = [row[mask.bool()].tolist() for row, mask in zip(features['input_ids'], features['attention_mask'])]
    with torch.no_grad():
        vecs = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True, normalize_embeddings=False)
    return {
        'model': DIRS[name],
        'versions': {
            'torch': torch.__version__,
            'transformers': transformers.__version__,
            'sentence_transformers': sentence_transformers.__version__,
        },
        'max_seq_length': model.max_seq_length,
        'cases': [
            {'text': s, 'token_ids': i, 'embedding': [float(f'{x:.8g}') for x in v]}
            for s, i, v in zip(SENTENCES, ids, vecs)
        ],
    }


def main():
    out_dir = os.path.join(REPO, 'tests', 'goldens', 'embeddings')
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[1:] or list(DIRS):
        g = make(name)
        with open(os.path.join(out_dir, f'{name}.json'), 'w') as f:
            json.dump(g, f, ensure_ascii=False, indent=1)
        print(name, [len(c['token_ids']) for c in g['cases']])


if __name__ == '__main__':
    main()
