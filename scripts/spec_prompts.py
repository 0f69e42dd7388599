#!/usr/bin/env python3
"""Writes the speculative benchmarks' two prompts into DIR: code.txt, a code-editing request (a
Rust file of a few hundred lines and an instruction to rename a method, so the answer copies
most of the file: n-gram and draft proposals shine), and chat.txt, free chat.

    scripts/spec_prompts.py DIR [LINES]

LINES cuts the Rust file to its first LINES lines (a shorter prompt: quicker benchmark rounds).
"""
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
out = pathlib.Path(sys.argv[1])
src = (REPO / "crates/core/src/block_pool.rs").read_text()
if len(sys.argv) > 2:
    src = "".join(src.splitlines(keepends=True)[: int(sys.argv[2])])
code = ("Here is a Rust file:\n\n```rust\n" + src + "\n```\n\nRename the method `free_blocks` to "
        "`release_blocks` everywhere in this file and print the whole updated file, nothing else.")
chat = "Write a short story about a lighthouse keeper who finds a message in a bottle."
for name, text in [("code", code), ("chat", chat)]:
    (out / f"{name}.txt").write_text(text)
