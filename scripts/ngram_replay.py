#!/usr/bin/env python3
"""Replays n-gram (prompt lookup) drafting over a greedy answer, without the model: for each
configuration, how many verification steps the answer takes, tokens per step, and drafts
accepted. Greedy output does not depend on speculation, so this is what the engine's
`SpecDecoding metrics` line reports for that configuration, with no timing noise.

    vllm-rs generate --model M --chat --prompt "$(cat PROMPT)" --max-tokens 384 \\
        --temperature 0 --ignore-eos --json > answer.json
    scripts/ngram_replay.py answer.json [K,...] [MIN-MAX,...]

The proposer is the engine's (`crates/engine/src/speculative.rs`, `propose_ngram`): the longest
suffix of MIN..MAX tokens that occurred before, and up to K tokens that followed its latest
earlier occurrence. Defaults: K 2,4,8 and n-grams 1-4, 5-5.
"""
import json
import sys


def propose(toks, k, mn, mx):
    length = len(toks)
    for n in range(min(mx, length - 1), mn - 1, -1):
        suffix = toks[length - n:]
        for i in range(length - n - 1, -1, -1):
            if toks[i:i + n] == suffix:
                return toks[i + n:min(i + n + k, length)]
    return []


def replay(prompt, answer, k, mn, mx):
    # The prompt's step samples the first token; drafts follow from the second.
    pos, steps, drafted, accepted = 1, 0, 0, 0
    while pos < len(answer):
        # (No drafts past the answer's end: the engine caps them by the tokens left.)
        draft = propose(prompt + answer[:pos], min(k, len(answer) - pos - 1), mn, mx)
        a = 0
        while a < len(draft) and pos + a < len(answer) and draft[a] == answer[pos + a]:
            a += 1
        steps, drafted, accepted, pos = steps + 1, drafted + len(draft), accepted + a, pos + a + 1
    return steps, drafted, accepted


def main():
    out = json.loads(open(sys.argv[1]).readline())
    prompt, answer = out["prompt_token_ids"], out["token_ids"]
    ks = [int(k) for k in (sys.argv[2] if len(sys.argv) > 2 else "2,4,8").split(",")]
    ns = [tuple(map(int, n.split("-"))) for n in (sys.argv[3] if len(sys.argv) > 3 else "1-4,5-5").split(",")]
    print(f"prompt {len(prompt)} tokens, answer {len(answer)}")
    for k in ks:
        for mn, mx in ns:
            steps, drafted, accepted = replay(prompt, answer, k, mn, mx)
            print(f"k={k} n={mn}..{mx}: {steps} steps, {(len(answer) - 1) / steps:.2f} tokens a step, "
                  f"{accepted} of {drafted} drafts accepted ({accepted / max(drafted, 1):.0%})")


if __name__ == "__main__":
    main()
