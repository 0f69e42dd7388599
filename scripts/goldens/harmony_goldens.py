#!/usr/bin/env python3
# Pinned: transformers==5.24.0 tokenizers==0.23.3 jinja2==3.1.6
"""Test data for gpt-oss's harmony format (the `openai` tool parser, the `openai_gptoss` reasoning parser).

    /work/main/.venv-goldens/bin/python scripts/goldens/harmony_goldens.py

tests/data/gpt_oss/chat_template.jinja is gpt-oss's chat template (see SOURCE.md there); this
script does not change it. It writes:
  tests/data/gpt_oss/tokenizer.json, tokenizer_config.json, generation_config.json
      a tiny byte-level tokenizer (one token per byte, no merges) with gpt-oss's harmony special
      tokens, small enough for the tiny random models (vocabulary 320), and gpt-oss's stop tokens
      (<|return|>, <|endoftext|>, <|call|>), so a tiny model served with it speaks harmony when a
      grammar makes it.
  tests/goldens/harmony/chat_template.json
      transformers' rendering of the template (render_jinja_template, as apply_chat_template does)
      for conversations with reasoning, tool calls and tool results. Each case keeps the messages
      as a client sends them to vLLM (`reasoning`, arguments as JSON text, content null) and as
      the template reads them (`thinking`, arguments decoded); the date strftime_now writes is
      replaced by DATE.
"""
import json
import os
import re

import jinja2
import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DATA = os.path.join(ROOT, "tests", "data", "gpt_oss")
GOLDENS = os.path.join(ROOT, "tests", "goldens", "harmony")

# gpt-oss's special tokens that harmony uses (ids differ from gpt-oss's: this vocabulary is tiny).
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
            "<|message|>", "<|call|>"]


def byte_chars():
    """GPT-2's byte-to-unicode table, in byte order (what ByteLevel pre-tokenization emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def write_tokenizer():
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(byte_chars())}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(os.path.join(DATA, "tokenizer.json"))
    config = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
              "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024}
    with open(os.path.join(DATA, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    generation = {"bos_token_id": ids["<|startoftext|>"],
                  "eos_token_id": [ids["<|return|>"], ids["<|endoftext|>"], ids["<|call|>"]]}
    with open(os.path.join(DATA, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
        f.write("\n")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
        "required": ["city"]}}}

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

# (name, messages as a client sends them, tools, add_generation_prompt, template kwargs)
CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "Hi"}], None, True, {}),
    ("developer_and_effort", [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"}],
     None, True, {"reasoning_effort": "high"}),
    ("tool_call_and_result", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning": "The user wants the weather.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    ], [WEATHER], True, {}),
    ("answered_drops_the_analysis", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning": "The user wants the weather.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 °C.", "reasoning": "Report it."},
        {"role": "user", "content": "Thanks!"},
    ], [WEATHER], True, {}),
]


def for_template(messages):
    """What the server hands the template: `reasoning` as `thinking` (the key gpt-oss's template reads),
    a null content as "", tool-call arguments decoded from their JSON text."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        if m.get("content") is None and (m.get("tool_calls") or m["role"] == "tool"):
            m["content"] = ""
        if "reasoning" in m and "thinking" not in m:
            m["thinking"] = m["reasoning"]
        for call in m.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        out.append(m)
    return out


def template_goldens():
    with open(os.path.join(DATA, "chat_template.jinja")) as f:
        template = f.read()
    cases = []
    for name, messages, tools, add_generation_prompt, kwargs in CONVERSATIONS:
        template_messages = for_template(messages)
        rendered = render_jinja_template(conversations=[template_messages], tools=tools, chat_template=template,
                                         add_generation_prompt=add_generation_prompt, **kwargs)[0][0]
        rendered = re.sub(r"Current date: \d{4}-\d{2}-\d{2}", "Current date: DATE", rendered)
        cases.append({"name": name, "messages": messages, "template_messages": template_messages, "tools": tools,
                      "add_generation_prompt": add_generation_prompt, "kwargs": kwargs, "output": rendered})
    versions = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "jinja2": jinja2.__version__}
    os.makedirs(GOLDENS, exist_ok=True)
    with open(os.path.join(GOLDENS, "chat_template.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    write_tokenizer()
    template_goldens()
