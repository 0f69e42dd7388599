#!/usr/bin/env python3
"""Lists the flags of `vllm serve` from vLLM's source (the sdist: `pip download --no-deps
--no-binary :all: vllm==0.33.0`, or any checkout), one per line, for
tests/data/vllm_serve_flags.txt, which `crates/cli/src/vllm_flags.rs` is checked against: every
flag there is either an option of `vllm-rs serve` or in that file's table.

    python3 scripts/vllm_serve_flags.py path/to/vllm-0.33.0 > tests/data/vllm_serve_flags.txt

Reads the source without importing it (vLLM needs torch to import): the names given to
`add_argument` in the engine's and the front end's argument builders, and the front end's
dataclass fields (each one a `--field-name` flag).
"""
import ast
import sys
from pathlib import Path

root = Path(sys.argv[1]) / "vllm"
flags = set()
for rel in ["engine/arg_utils.py", "entrypoints/common/cli_args.py"]:
    tree = ast.parse((root / rel).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags.update(a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-"))
        if isinstance(node, ast.ClassDef) and node.name in ("BaseFrontendArgs", "FrontendArgs"):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    flags.add("--" + st.target.id.replace("_", "-"))
print("\n".join(sorted(flags)))
