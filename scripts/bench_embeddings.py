#!/usr/bin/env python3
"""Embedding throughput: sentences per second on N synthetic sentences of 8-128 tokens.

  python scripts/bench_embeddings.py MODEL_DIR [--n 10000] [--threads 2] [--rounds 3]
        [--vllm-rs BIN] [--vllm-rs-args ARGS] [--vllm-python PY] [--vllm-dtype DTYPE]
        [--skip st,vllm-rs-serve,vllm-rs-embed,vllm]

Runs, in alternating rounds (medians reported):
  st             sentence-transformers `encode` (torch CPU, `--threads` intra-op threads, batch 32)
  vllm-rs-embed  `vllm-rs embed --format npy` (offline; the model load is timed apart and excluded)
  vllm-rs-serve  `vllm-rs serve` + /v1/embeddings, 32 inputs per request, 4 requests in flight
  vllm           vLLM-cpu `serve --runner pooling` + the same client (needs --vllm-python)
`--vllm-rs-args` adds flags to both vllm-rs commands (e.g. "--dtype bfloat16"); `--vllm-dtype`
is vLLM's `--dtype` (default float32; vLLM's own default, auto, runs a float32 pooling model in
float16 on CPUs). Every engine embeds the same sentences; vectors are compared with sentence-transformers'
(min cosine printed) so a fast wrong answer shows. Use the python of .venv-goldens (torch +
sentence-transformers). Needs no GPU.
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

WORDS = ('the of and to in is was for on that with as by at from his her an were are which this be have '
         'had not but what all when there can more one about so out up into their time year people way day '
         'man thing woman life child world school state family student group country problem hand part place '
         'case week company system program question work government number night point home water room mother '
         'area money story fact month lot right study book eye job word business issue side kind head house '
         'service friend father power hour game line end member law car city community name president team '
         'minute idea kid body information back parent face others level office door health person art war '
         'history party result change morning reason research girl guy moment air teacher force education').split()


def sentences(n, tokenizer, seed=0):
    """`n` sentences whose token counts spread evenly over 8-128 (with the special tokens)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        target = 8 + (i * 121) // n
        words = []
        while len(tokenizer(' '.join(words))['input_ids']) < target:
            words.append(rng.choice(WORDS))
        out.append(' '.join(words))
    rng.shuffle(out)
    return out


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_health(port, proc, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f'server exited with {proc.returncode}')
        try:
            if urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2).status == 200:
                return
        except Exception:
            pass
        time.sleep(0.25)
    raise SystemExit('server not healthy')


def post(port, body):
    req = urllib.request.Request(f'http://127.0.0.1:{port}/v1/embeddings', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def client(port, texts, model, per_request=32, in_flight=4):
    chunks = [texts[i:i + per_request] for i in range(0, len(texts), per_request)]
    t0 = time.time()
    with cf.ThreadPoolExecutor(in_flight) as ex:
        results = list(ex.map(lambda c: post(port, {'model': model, 'input': c}), chunks))
    secs = time.time() - t0
    vecs = [d['embedding'] for r in results for d in r['data']]
    return secs, np.array(vecs, dtype=np.float32)


class Server:
    def __init__(self, argv, port, env=None):
        self.port = port
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, **(env or {})), start_new_session=True)
        wait_health(port, self.proc)

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=60)


def min_cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('--n', type=int, default=10000)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--vllm-rs', default='target/release/vllm-rs')
    ap.add_argument('--vllm-rs-args', default='')
    ap.add_argument('--vllm-python')
    ap.add_argument('--vllm-dtype', default='float32')
    ap.add_argument('--skip', default='')
    a = ap.parse_args()
    skip = set(a.skip.split(',')) - {''}
    extra = a.vllm_rs_args.split()
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(a.threads)
    st = SentenceTransformer(a.model, device='cpu').float().eval()
    texts = sentences(a.n, st.tokenizer)
    lens = [len(st.tokenizer(t)['input_ids']) for t in texts]
    print(f'{a.n} sentences, {min(lens)}-{max(lens)} tokens, mean {statistics.mean(lens):.1f}; '
          f'{a.threads} threads', flush=True)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, 'texts.txt')
    with open(path, 'w') as f:
        f.write('\n'.join(texts))
    times = {k: [] for k in ['st', 'vllm-rs-embed', 'vllm-rs-serve', 'vllm'] if k not in skip}
    ref = None
    env = {'VLLM_RS_THREADS': str(a.threads)}
    for r in range(a.rounds):
        if 'st' in times:
            t0 = time.time()
            ref = st.encode(texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
            times['st'].append(time.time() - t0)
        if 'vllm-rs-embed' in times:
            out = os.path.join(tmp, 'v.npy')
            one = os.path.join(tmp, 'one.txt')
            with open(one, 'w') as f:
                f.write('x')
            t0 = time.time()
            subprocess.run([a.vllm_rs, 'embed', '--model', a.model, '--input', one, '--output', out, '--format', 'npy'] + extra,
                           check=True, env=dict(os.environ, **env), stderr=subprocess.DEVNULL)
            load = time.time() - t0
            t0 = time.time()
            subprocess.run([a.vllm_rs, 'embed', '--model', a.model, '--input', path, '--output', out, '--format', 'npy'] + extra,
                           check=True, env=dict(os.environ, **env), stderr=subprocess.DEVNULL)
            times['vllm-rs-embed'].append(time.time() - t0 - load)
            if ref is not None:
                print(f'  vllm-rs embed min cosine to sentence-transformers: {min_cosine(np.load(out), ref):.6f}')
        if 'vllm-rs-serve' in times:
            port = free_port()
            s = Server([a.vllm_rs, 'serve', a.model, '--port', str(port), '--served-model-name', 'm'] + extra, port, env)
            secs, vecs = client(port, texts, 'm')
            s.stop()
            times['vllm-rs-serve'].append(secs)
            if ref is not None:
                print(f'  vllm-rs serve min cosine: {min_cosine(vecs, ref):.6f}')
        if 'vllm' in times and a.vllm_python:
            port = free_port()
            venv_env = {'VLLM_CPU_OMP_THREADS_BIND': f'0-{a.threads - 1}', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0',
                        'VLLM_CPU_KVCACHE_SPACE': '1', 'HF_HUB_OFFLINE': '1', 'VLLM_NO_USAGE_STATS': '1'}
            cli = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'peers', 'vllm_cli.py')
            s = Server([a.vllm_python, cli, 'serve', a.model, '--port', str(port), '--served-model-name', 'm',
                        '--runner', 'pooling', '--dtype', a.vllm_dtype], port, venv_env)
            secs, vecs = client(port, texts, 'm')
            s.stop()
            times['vllm'].append(secs)
            if ref is not None:
                print(f'  vLLM min cosine: {min_cosine(vecs, ref):.6f}')
        print(f'round {r + 1}: ' + ', '.join(f'{k} {a.n / v[-1]:.0f}/s' for k, v in times.items() if v), flush=True)
    med = {k: a.n / statistics.median(v) for k, v in times.items() if v}
    print('median sentences/s: ' + ', '.join(f'{k} {v:.1f}' for k, v in med.items()))
    for k in med:
        if k != 'st' and 'st' in med:
            print(f'  {k} / sentence-transformers: {med[k] / med["st"]:.2f}x')
    shutil.rmtree(tmp)


if __name__ == '__main__':
    main()
