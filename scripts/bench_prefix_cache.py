#!/usr/bin/env python3
"""Prefix caching with a long shared prompt: time to first token of N requests that share a
system prompt of about PREFIX tokens and differ in a short question, sent one after another to
an OpenAI-compatible server (vllm-rs serve, llama-server, vllm serve). Request 1 computes the
whole prompt; later ones can reuse the prefix if the server's cache serves it (for hybrid models
that needs the recurrent state at the prefix, not only the attention blocks).

Usage: scripts/bench_prefix_cache.py BASE_URL [N] [PREFIX_WORDS]
Prints each request's TTFT and the median of requests 2..N against request 1 (streamed, max_tokens 1).
"""
import json
import statistics
import sys
import time
import urllib.request

base = sys.argv[1].rstrip('/')
n = int(sys.argv[2]) if len(sys.argv) > 2 else 32
words = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
vocab = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau'.split()
system = 'You are a careful assistant. Rules: ' + ' '.join(vocab[(i * 7) % len(vocab)] for i in range(words))


def ttft(prompt):
    body = json.dumps({'prompt': prompt, 'max_tokens': 1, 'temperature': 0, 'stream': True}).encode()
    req = urllib.request.Request(base + '/v1/completions', body, {'Content-Type': 'application/json'})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b'data: ') and b'[DONE]' not in line:
                return time.perf_counter() - t0
    raise RuntimeError('no token streamed')


times = [ttft(f'{system}\nQuestion {i}: what is {i} times {i + 3}?\nAnswer:') for i in range(n)]
for i, t in enumerate(times):
    print(f'request {i + 1}: TTFT {t * 1000:.0f} ms')
rest = statistics.median(times[1:])
print(f'request 1: {times[0] * 1000:.0f} ms; median of requests 2..{n}: {rest * 1000:.0f} ms '
      f'({times[0] / rest:.1f}x faster)')
