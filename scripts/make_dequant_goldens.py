#!/usr/bin/env python3
"""Dequantization goldens: raw GGML blocks and what the `gguf` package's `dequantize` makes of them.

  python scripts/make_dequant_goldens.py   -> tests/goldens/dequant/{index.json,blocks.bin,values.bin}

For every type we support, blocks come from the best source available:
  real      rows of real tensors of the three test GGUFs (smollm2, qwen05, gemma3) where the type
            occurs: F32, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K
  quantized gguf-py's own quantizer applied to real weights (dequantized rows of those GGUFs)
            where no test file has the type and gguf-py can quantize it: F16, BF16, Q4_0, Q5_1,
            MXFP4
  random    random quant bits with realistic f16 scales (the range seen in the real Q4_K / Q6_K
            tensors), for types gguf-py cannot quantize and no test file has: Q2_K, Q3_K, Q5_K;
            plus one block whose scales are f16 subnormals
Sampled rows: first, middle and last of a tensor, up to MAX_BLOCKS blocks of each.

blocks.bin holds the raw bytes and values.bin the float32 (little-endian) outputs, back to back;
index.json gives each case's type, source, byte ranges and element count. Needs gguf + numpy
(scripts/requirements-ci.txt is enough) and the GGUFs of scripts/fetch_test_models.sh.
"""
import json
import os

import numpy as np
import gguf
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, 'tests', 'goldens', 'dequant')
MAX_BLOCKS = 4  # per sampled row (K-quants: 1024 elements; float types: 64 values)
GGUFS = {
    'smollm2': 'gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf',
    'qwen05': 'gguf/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf',
    'gemma3': 'gguf/gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf',
}
ALL = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
       T.MXFP4]
QUANTIZE_FROM = {T.F16: 'smollm2', T.BF16: 'smollm2', T.Q4_0: 'smollm2', T.Q5_1: 'qwen05', T.MXFP4: 'qwen05'}
# e8m0 scale bytes of the random MXFP4 blocks (above 251 the largest values overflow f32).
MXFP4_SCALES = [0, 1, 2, 100, 119, 127, 128, 140, 250]
# Byte offsets of the f16 super-block scales (d, then dmin where the type has one).
K_SCALES = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q5_K: (0, 2)}


def models_dir():
    return os.environ.get('VLLM_RS_TEST_MODELS', os.path.join(REPO, '.models'))


def block_bytes(qt):
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    return bs, ts


def sample_rows(t):
    """Raw bytes of up to MAX_BLOCKS blocks from the first, middle and last row of tensor `t`."""
    bs, ts = block_bytes(T(t.tensor_type))
    cols = int(t.shape[0])
    rows = int(np.prod([int(x) for x in t.shape[1:]])) if len(t.shape) > 1 else 1
    data = np.asarray(t.data).view(np.uint8).reshape(rows, cols // bs * ts)
    take = min(cols // bs, MAX_BLOCKS if bs > 1 else 64) * ts  # float types: 64 values per row
    picked = sorted({0, rows // 2, rows - 1})
    return b''.join(data[r, :take].tobytes() for r in picked), picked


class Writer:
    def __init__(self):
        self.blocks, self.values, self.cases = bytearray(), bytearray(), []

    def add(self, qt, source, origin, raw):
        raw = bytes(raw)
        vals = dequantize(np.frombuffer(raw, dtype=np.uint8), qt).astype('<f4').reshape(-1)
        assert np.isfinite(vals).all(), f'{qt.name}: non-finite golden values from {origin}'
        bs, ts = block_bytes(qt)
        assert len(raw) % ts == 0 and vals.size == len(raw) // ts * bs
        self.cases.append({'type': qt.name, 'source': source, 'origin': origin,
                           'blocks': [len(self.blocks), len(self.blocks) + len(raw)],
                           'values': [len(self.values), len(self.values) + vals.nbytes], 'n': int(vals.size)})
        self.blocks += raw
        self.values += vals.tobytes()
        print(f'{qt.name:5} {source:9} {vals.size:5} values  {origin}')


def main():
    readers = {}
    for name, rel in GGUFS.items():
        p = os.path.join(models_dir(), rel)
        if not os.path.exists(p):
            raise SystemExit(f'{p} is missing: run scripts/fetch_test_models.sh')
        readers[name] = GGUFReader(p)
    w = Writer()
    rng = np.random.default_rng(1234)
    real_scales = []  # f16 d values of real K-quant blocks, to make the random ones realistic
    for qt in ALL:
        found = False
        for name, r in readers.items():
            tensors = [t for t in r.tensors if t.tensor_type == qt]
            if not tensors:
                continue
            # Prefer a 2-D weight; one tensor per file keeps the golden small.
            t = max(tensors, key=lambda t: (len(t.shape) > 1, -int(t.n_elements)))
            raw, rows = sample_rows(t)
            w.add(qt, 'real', f'{name} {t.name} rows {rows}, up to {len(raw) // len(rows)} bytes of each', raw)
            found = True
            if qt in (T.Q4_K, T.Q6_K):
                ts = block_bytes(qt)[1]
                off = 0 if qt == T.Q4_K else 208
                blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, ts)
                real_scales += blocks[:, off:off + 2].copy().view('<f2').reshape(-1).astype(np.float32).tolist()
        if found:
            continue
        if qt in QUANTIZE_FROM:
            name = QUANTIZE_FROM[qt]
            t = next(t for t in readers[name].tensors if t.name == 'blk.0.attn_q.weight')
            cols = int(t.shape[0])
            x = dequantize(t.data, T(t.tensor_type)).reshape(-1, cols)[[0, 7, 63], :128].astype(np.float32)
            raw = quantize(x, qt).view(np.uint8).tobytes()
            w.add(qt, 'quantized', f'gguf-py quantize of {name} {t.name} rows [0, 7, 63], first 128 columns', raw)
    lo, hi = np.percentile(np.abs(real_scales), [5, 95])
    for qt, offs in K_SCALES.items():
        ts = block_bytes(qt)[1]
        n_blocks = 6
        raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
        for b in range(n_blocks):
            for off in offs:
                d = rng.uniform(lo, hi) if b < n_blocks - 1 else 2.0 ** -20  # last block: subnormal
                raw[b, off:off + 2] = np.array([d], dtype='<f2').view(np.uint8)
        w.add(qt, 'random', f'{n_blocks} random blocks, f16 scales uniform in [{lo:.2e}, {hi:.2e}] '
              '(5th-95th percentile of real Q4_K/Q6_K d), last block subnormal scales', raw.tobytes())
    ts = block_bytes(T.MXFP4)[1]
    raw = rng.integers(0, 256, size=(len(MXFP4_SCALES), ts), dtype=np.uint8)
    raw[:, 0] = MXFP4_SCALES
    w.add(T.MXFP4, 'random', f'{len(MXFP4_SCALES)} blocks of random nibbles, e8m0 scales {MXFP4_SCALES}', raw.tobytes())
    assert {c['type'] for c in w.cases} == {t.name for t in ALL}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, 'blocks.bin'), 'wb') as f:
        f.write(w.blocks)
    with open(os.path.join(OUT, 'values.bin'), 'wb') as f:
        f.write(w.values)
    with open(os.path.join(OUT, 'index.json'), 'w') as f:
        json.dump({'versions': {'gguf': _gguf_version(), 'numpy': np.__version__},
                   'blocks_file': 'blocks.bin', 'values_file': 'values.bin (float32 little-endian)',
                   'cases': w.cases}, f, indent=1)
        f.write('\n')
    print(f'wrote {OUT}: {len(w.cases)} cases, {len(w.blocks)} block bytes, {len(w.values)} value bytes')


def _gguf_version():
    from importlib.metadata import version
    return version('gguf')


if __name__ == '__main__':
    main()
