#!/usr/bin/env python3
"""Speculative decoding on a constrained request: a JSON-schema extraction (the answer copies
names and cities from the prompt, so n-gram drafts find them), streamed from `vllm-rs serve`
with and without n-gram drafts, rounds alternating, one request per server start; decode tok/s
after the first chunk, medians, and whether both texts are the same.

    python3 scripts/bench_structured_spec.py BINARY MODEL
"""
import json, subprocess, sys, time, urllib.request
port = 8097
people = [("Amelia Hart", "Paris", 34), ("Bruno Keller", "Tokyo", 51), ("Chiara Rossi", "Lima", 27),
          ("Dmitri Volkov", "Oslo", 45), ("Elena Garcia", "Paris", 39), ("Farid Haddad", "Tokyo", 62),
          ("Greta Lindqvist", "Oslo", 23), ("Hiro Tanaka", "Lima", 31)]
text = " ".join(f"{n} lives in {c} and is {a} years old; {n.split()[0]} works as an engineer at the {c} office." for n, c, a in people)
schema = {"type": "object", "additionalProperties": False, "required": ["people"], "properties": {"people": {"type": "array",
  "items": {"type": "object", "additionalProperties": False, "required": ["name", "city", "age", "job"],
  "properties": {"name": {"type": "string"}, "city": {"type": "string"}, "age": {"type": "integer"}, "job": {"type": "string"}}}}}}
body = {"messages": [{"role": "user", "content": "Extract every person from this text as JSON:\n\n" + text}],
        "max_tokens": 400, "temperature": 0, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "response_format": {"type": "json_schema", "json_schema": {"name": "people", "strict": True, "schema": schema}}}
def one():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0, chunks, out = time.time(), [], ""
    with urllib.request.urlopen(req, timeout=600) as resp:
        for line in resp:
            line = line.decode().strip()
            if not line.startswith("data: {"): continue
            j = json.loads(line[6:])
            for c in j.get("choices", []): out += c.get("delta", {}).get("content") or ""
            got = (j.get("usage") or {}).get("completion_tokens", 0)
            if got and (not chunks or got > chunks[-1][1]): chunks.append((time.time() - t0, got))
    (t1, n1), (te, ne) = chunks[0], chunks[-1]
    json.loads(out)  # valid JSON
    return ne, (ne - n1) / (te - t1), out
binary, model = sys.argv[1], sys.argv[2]
spec = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}'
res = {"off": [], "on": []}
texts = {}
for r in range(3):
    for mode in (["off", "on"] if r % 2 == 0 else ["on", "off"]):
        args = [binary, "--log-level", "warn", "serve", model, "--port", str(port), "--threads", "2"] + (["--speculative-config", spec] if mode == "on" else [])
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); break
            except Exception: time.sleep(0.2)
        n, tps, out = one()
        texts[mode] = out
        res[mode].append(tps)
        print(f"round {r+1} {mode}: {n} tokens, {tps:.1f} tok/s", flush=True)
        p.terminate(); p.wait()
med = lambda v: sorted(v)[len(v)//2]
print(f"median off {med(res['off']):.1f}, on {med(res['on']):.1f}, ratio {med(res['on'])/med(res['off']):.2f}x; same text: {texts['on'] == texts['off']}")
