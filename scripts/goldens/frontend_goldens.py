#!/usr/bin/env python3
# Pinned: transformers==5.24.0 tokenizers==0.23.3 jinja2==3.1.6 gguf==0.19.0
"""Goldens for crates/frontend: tokenizer ids, chat-template renderings, pre-tokenizer splits, strftime.

    ~/venvs/ref/bin/python scripts/goldens/frontend_goldens.py [MODELS_DIR]   (default /work/main/.models)

Writes tests/goldens/frontend/*.json:
  tokenizer_ids.json    transformers AutoTokenizer ids (with and without special tokens) and decodes,
                        for every real tokenizer, over one shared corpus. Where transformers does not
                        follow the directory's tokenizer.json (transformers 5 rebuilds the normalizer
                        and pre-tokenizer of GPT2Tokenizer / Qwen2Tokenizer classes from code), the
                        ids of the tokenizer.json itself (the `tokenizers` library) are recorded too.
  chat_templates.json   apply_chat_template(..., tokenize=False) for every chat template we have,
                        over a set of conversations; a template error is recorded as its message.
  pretokenizers.json    pre-tokenizer splits for the GGUF `tokenizer.ggml.pre` regexes, using the
                        regexes transformers' GGUF loader maps them to (an independent spelling).
  strftime.json         strftime of fixed UTC instants (what strftime_now formats).
"""
import json
import os
import sys
from datetime import datetime, timezone

import gguf
import jinja2
import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, pre_tokenizers
from transformers import AutoTokenizer

MODELS = sys.argv[1] if len(sys.argv) > 1 else "/work/main/.models"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "goldens", "frontend")

TOKENIZER_DIRS = {
    "smollm2": "hf/smollm2-135m-instruct-from-q4_1",
    "qwen05": "hf/qwen2.5-coder-0.5b-instruct-from-q4_k_m",
    "gemma3": "tokenizers/gemma3",
    "qwen3": "tokenizers/qwen3",
}
SMOLLM2_GGUF = "gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf"

CORPUS = [
    "",
    "Hello, world!",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "tabs\tand\t\ttabs",
    "new\nlines\n\n\nand\r\nwindows",
    "mixed \t \n whitespace  \n\t  runs",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n\tprintln!(\"{}\", 42);\n}",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -7 1e10 2024-05-06",
    "x  2024 and   17 and ² ½ ١٢٣",
    "Café naïve façade résumé Ærøskøbing",
    "decomposed: e\u0301 a\u0308 n\u0303",
    "日本語のテキストです。中文文本。한국어 텍스트.",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    "Ελληνικά και Русский текст и العربية و עברית",
    "हिन्दी ภาษาไทย",
    "I'm can't won't they'll we've she'd you're IT'S",
    "<|im_start|>user\nhi<|im_end|>",
    "<bos><start_of_turn>user\nhello<end_of_turn>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<|endoftext|> plain <|im_end|>",
    "URLs: https://example.com/a?b=c&d=e#f and emails a.b@c.de",
    "JSON: {\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "ALL CAPS AND lower and MiXeD",
    "punctuation!!! ??? ... --- *** ### @@@",
    "\u00a0non-breaking\u00a0spaces\u2009thin\u3000ideographic",
    "zero\u200bwidth\u200djoiner",
    "▁literal▁sentencepiece▁marks",
    "a" * 40,
    "          ",
    "\n",
    "\t",
]

# Conversations rendered with every template (some templates raise on some of them, by design).
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = [
    ("single_user", [{"role": "user", "content": "Hello!"}], {}),
    ("system_user", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], {}),
    (
        "multi_turn",
        [
            SYSTEM,
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
        ],
        {},
    ),
    (
        "multi_turn_ends_assistant",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
        ],
        {},
    ),
    (
        "unicode",
        [{"role": "user", "content": "  Grüße 👋 日本語\n\twith tabs and trailing space  "}],
        {},
    ),
    (
        "roles_not_alternating",
        [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
        {},
    ),
    (
        "system_not_first",
        [{"role": "user", "content": "one"}, SYSTEM, {"role": "user", "content": "two"}],
        {},
    ),
    (
        "tools",
        [{"role": "user", "content": "Weather in Paris?"}],
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Get the weather — in °C, for a city",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                                "days": {"type": "integer", "minimum": 1, "default": 1.5},
                                "units": {"type": "string", "enum": ["c", "f"]},
                            },
                            "required": ["city"],
                        },
                    },
                }
            ]
        },
    ),
    (
        "tool_call_roundtrip",
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "note": "ünïcode <&>"}},
                    }
                ],
            },
            {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "tool", "content": "second result"},
            {"role": "assistant", "content": "It is 21 degrees."},
        ],
        {},
    ),
    (
        "assistant_content_none",
        [
            {"role": "user", "content": "call it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}],
            },
        ],
        {},
    ),
    (
        "reasoning",
        [
            {"role": "user", "content": "Think first."},
            {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nDone."},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": "Final.", "reasoning_content": "short thought"},
        ],
        {},
    ),
    ("enable_thinking_false", [{"role": "user", "content": "Quick answer."}], {"enable_thinking": False}),
    ("multimodal_text_parts", [{"role": "user", "content": [{"type": "text", "text": " part one "}]}], {}),
]


def tokenizer_goldens():
    out = {"texts": CORPUS, "tokenizers": {}}
    for name, rel in TOKENIZER_DIRS.items():
        d = os.path.join(MODELS, rel)
        tok = AutoTokenizer.from_pretrained(d)
        raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        entry = {"dir": rel, "class": type(tok).__name__, "ids": [], "ids_with_special": [], "tokenizer_json_ids": {}}
        for i, text in enumerate(CORPUS):
            ids = tok(text, add_special_tokens=False).input_ids
            entry["ids"].append(ids)
            entry["ids_with_special"].append(tok(text, add_special_tokens=True).input_ids)
            raw_ids = raw.encode(text, add_special_tokens=False).ids
            if raw_ids != ids:
                entry["tokenizer_json_ids"][str(i)] = raw_ids
        # Decoding: every corpus encoding, plus sequences with special tokens in them.
        special_ids = [i for i in tok.all_special_ids if i is not None][:4]
        seqs = [ids for ids in entry["ids"] if ids]
        seqs.append(special_ids + entry["ids"][1] + special_ids[:1] + entry["ids"][14])
        entry["decode"] = [
            {"ids": s, "text": tok.decode(s, skip_special_tokens=False), "text_skip": tok.decode(s, skip_special_tokens=True)}
            for s in seqs
        ]
        out["tokenizers"][name] = entry
    return out


def template_sources():
    sources = {}
    for name, rel in TOKENIZER_DIRS.items():
        tok = AutoTokenizer.from_pretrained(os.path.join(MODELS, rel))
        sources[name] = (tok, tok.chat_template)
    r = gguf.GGUFReader(os.path.join(MODELS, SMOLLM2_GGUF))
    gguf_template = r.fields["tokenizer.chat_template"].contents()
    sources["smollm2_gguf"] = (sources["smollm2"][0], gguf_template)
    return sources


def chat_template_goldens():
    out = {"templates": {}}
    for name, (tok, template) in template_sources().items():
        cases = []
        for conv_name, messages, extra in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                case = {
                    "name": conv_name,
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "extra": extra,
                }
                try:
                    case["output"] = tok.apply_chat_template(
                        messages,
                        chat_template=template,
                        tokenize=False,
                        add_generation_prompt=add_generation_prompt,
                        **extra,
                    )
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                except TypeError as e:  # a template that adds a string to a list, for example
                    case["error"] = f"TypeError: {e}"
                cases.append(case)
        out["templates"][name] = {
            "source": template,
            "bos_token": tok.bos_token,
            "eos_token": tok.eos_token,
            "cases": cases,
        }
    return out


def pretokenizer_goldens():
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    names = ["qwen2", "llama-bpe", "gpt-4o", "qwen35"]
    out = {"texts": CORPUS, "pre": {}}
    for name in names:
        pre = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[name]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        out["pre"][name] = [[piece for piece, _ in pre.pre_tokenize_str(t)] for t in CORPUS]
    # The GPT-2 regex (ByteLevel with use_regex) and llama.cpp's smollm/starcoder split (digits first).
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    out["pre"]["gpt-2"] = [[p for p, _ in gpt2.pre_tokenize_str(t)] for t in CORPUS]
    smollm = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2])
    out["pre"]["smollm"] = [[p for p, _ in smollm.pre_tokenize_str(t)] for t in CORPUS]
    return out


def strftime_goldens():
    formats = ["%d %b %Y", "%Y-%m-%d", "%A, %B %d, %Y", "%H:%M:%S", "%I:%M %p", "%j %y %a", "%-d %-m %-H", "%%Y %e"]
    instants = [0, 951782400, 1709251199, 1735689599, 4102444800 + 3600 * 13 + 61]
    cases = []
    for ts in instants:
        t = datetime.fromtimestamp(ts, tz=timezone.utc)
        for f in formats:
            cases.append({"timestamp": ts, "format": f, "output": t.strftime(f)})
    return {"cases": cases}


def main():
    os.makedirs(OUT, exist_ok=True)
    versions = {
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "jinja2": jinja2.__version__,
        "gguf": getattr(gguf, "__version__", "0.19.0"),
    }
    for fname, fn in [
        ("tokenizer_ids.json", tokenizer_goldens),
        ("chat_templates.json", chat_template_goldens),
        ("pretokenizers.json", pretokenizer_goldens),
        ("strftime.json", strftime_goldens),
    ]:
        data = fn()
        data["versions"] = versions
        path = os.path.join(OUT, fname)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path) // 1024} KiB)")


if __name__ == "__main__":
    main()
