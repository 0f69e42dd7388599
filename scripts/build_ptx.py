#!/usr/bin/env python3
"""Compiles the CUDA kernels (crates/cuda/kernels/*.cu) to PTX with NVRTC, and checks the PTX
with ptxas for sm_80 and sm_90 (registers, spills, errors).

    python scripts/build_ptx.py            # writes crates/cuda/ptx/*.ptx and ptxas.txt
    python scripts/build_ptx.py --check    # fails if they differ from what is committed

NVRTC and ptxas come from PyPI (nvidia-cuda-nvrtc-cu12, nvidia-cuda-nvcc-cu12, pinned in
scripts/requirements-ci.txt): libnvrtc is loaded with ctypes, so no CUDA toolkit is installed.
The generated files are committed and embedded by crates/cuda with include_str!, so that
`cargo build --features cuda` needs neither Python nor NVRTC; CI runs --check (scripts/test.sh)
so the committed PTX is always what the sources and the pinned compiler give.

The PTX targets compute_80 (the driver compiles it for the GPU it finds: A100, H100, ...).
Options: --fmad=false with IEEE division and square root, so that each kernel does the
operations its CPU reference does (see kernels/common.cuh).
"""

import ctypes
import difflib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "crates/cuda/kernels"
PTX_DIR = REPO / "crates/cuda/ptx"
ARCH = "compute_80"
PTXAS_ARCHS = ["sm_80", "sm_90"]
OPTIONS = [
    f"--gpu-architecture={ARCH}",
    "--std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
]


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"build_ptx: Python package {name} not found (pip install -r scripts/requirements-ci.txt)")
    return Path(list(spec.submodule_search_locations)[0])


def load_nvrtc():
    path = os.environ.get("VLLM_RS_NVRTC")
    if not path:
        lib = package_dir("nvidia.cuda_nvrtc") / "lib"
        # libnvrtc opens its builtins library by name: load it first so that name resolves.
        for b in sorted(lib.glob("libnvrtc-builtins.so*")):
            ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
        path = str(lib / "libnvrtc.so.12")
    nvrtc = ctypes.CDLL(path)
    for fn in ["nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
               "nvrtcGetPTXSize", "nvrtcGetPTX", "nvrtcDestroyProgram", "nvrtcVersion"]:
        getattr(nvrtc, fn).restype = ctypes.c_int
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    return nvrtc


def check(nvrtc, rc, what):
    if rc != 0:
        sys.exit(f"build_ptx: {what}: {nvrtc.nvrtcGetErrorString(rc).decode()}")


def compile_ptx(nvrtc, src_path, headers):
    prog = ctypes.c_void_p()
    names = [h.name.encode() for h in headers]
    texts = [h.read_bytes() for h in headers]
    n = len(headers)
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src_path.read_bytes(), src_path.name.encode(), n,
                                          (ctypes.c_char_p * n)(*texts), (ctypes.c_char_p * n)(*names)),
          f"create {src_path.name}")
    opts = [o.encode() for o in OPTIONS]
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode().strip()
    if rc != 0:
        sys.exit(f"build_ptx: {src_path.name} does not compile:\n{text}")
    if text:  # warnings are errors: the log of a clean compile is empty
        sys.exit(f"build_ptx: {src_path.name}: warnings:\n{text}")
    check(nvrtc, nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)), "PTX size")
    buf = ctypes.create_string_buffer(size.value)
    check(nvrtc, nvrtc.nvrtcGetPTX(prog, buf), "PTX")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.value.decode()


def ptxas_report(ptx_files):
    """One line per (arch, kernel): registers, spills, stack, shared memory; fails on errors."""
    ptxas = package_dir("nvidia.cuda_nvcc") / "bin/ptxas"
    lines, spills = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in PTXAS_ARCHS:
            for name, text in ptx_files:
                src = Path(tmp) / f"{name}.ptx"
                src.write_text(text)
                r = subprocess.run([str(ptxas), f"-arch={arch}", "-v", "--warn-on-spills", str(src), "-o",
                                    str(Path(tmp) / "out.cubin")], capture_output=True, text=True)
                if r.returncode != 0 or "warning" in r.stderr.lower():
                    sys.exit(f"build_ptx: ptxas -arch={arch} {name}.ptx:\n{r.stderr}")
                lines += parse_ptxas(arch, name, r.stderr, spills)
    return "\n".join(lines) + "\n", spills


def parse_ptxas(arch, module, log, spills):
    out, func, props = [], None, {}
    for line in log.splitlines():
        if m := re.search(r"Function properties for (\w+)", line):
            func = m.group(1)
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            props[func] = m.groups()
        elif m := re.search(r"Compiling entry function '(\w+)'", line):
            func = m.group(1)
        elif m := re.search(r"Used (\d+) registers(?:, used \d+ barriers)?(.*)", line):
            stack, st, ld = props.get(func, ("0", "0", "0"))
            smem = re.search(r"(\d+) bytes smem", m.group(2))
            out.append(f"{arch} {module:12} {func:24} registers {m.group(1):>3}  spill stores {st:>3}  "
                       f"spill loads {ld:>3}  stack {stack:>3}  smem {smem.group(1) if smem else 0:>5}")
            if st != "0" or ld != "0":
                spills.append(f"{arch} {func}: {st} bytes spill stores, {ld} bytes spill loads")
    return out


def main():
    checking = "--check" in sys.argv[1:]
    nvrtc = load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    headers = sorted(KERNELS.glob("*.cuh"))
    sources = sorted(KERNELS.glob("*.cu"))
    files = [(s.stem, compile_ptx(nvrtc, s, headers)) for s in sources]
    report, spills = ptxas_report(files)
    outputs = {f"{name}.ptx": text for name, text in files}
    outputs["ptxas.txt"] = f"# ptxas {', '.join(PTXAS_ARCHS)} on the PTX of NVRTC {major.value}.{minor.value}\n" + report
    stale = [p.name for p in PTX_DIR.glob("*.ptx") if p.name not in outputs]
    if checking:
        bad = stale[:]
        for name, text in outputs.items():
            path = PTX_DIR / name
            have = path.read_text() if path.exists() else ""
            if have != text:
                bad.append(name)
                sys.stderr.writelines(list(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                                                f"committed/{name}", f"generated/{name}"))[:40])
        if bad:
            sys.exit(f"build_ptx: {', '.join(bad)} differ from what the kernels give: "
                     "run python scripts/build_ptx.py and commit crates/cuda/ptx")
    else:
        PTX_DIR.mkdir(parents=True, exist_ok=True)
        for name in stale:
            (PTX_DIR / name).unlink()
        for name, text in outputs.items():
            (PTX_DIR / name).write_text(text)
    if spills:
        sys.exit("build_ptx: register spills:\n" + "\n".join(spills))
    print(f"build_ptx: {len(files)} modules, NVRTC {major.value}.{minor.value}, "
          f"{'match the committed PTX' if checking else f'written to {PTX_DIR.relative_to(REPO)}'}; "
          f"ptxas {'/'.join(PTXAS_ARCHS)}: no spills")


if __name__ == "__main__":
    main()
