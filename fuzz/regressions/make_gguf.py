#!/usr/bin/env python3
"""Writes the crafted GGUF files in gguf/: the shapes behind heap overflows in GGUF readers
(element count x type size overflowing, offsets near the end of the address space, counts
larger than the file). Each must be refused with an error, never read out of bounds or panic.

    python3 fuzz/regressions/make_gguf.py     # then: cargo +nightly fuzz run gguf fuzz/regressions/gguf/*
"""
import os
import struct

F32, Q4_0 = 0, 2


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensors, kv=b"", n_kv=0, n_tensors=None, pad_to=256):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors, n_kv) + kv
    for name, dims, ty, offset in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, offset)
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * max(0, pad_to - len(out))


CASES = {
    # dims multiply past u64.
    "dims_product_overflows_u64": gguf([("t", [1 << 32, 1 << 32], F32, 0)]),
    # the element count fits, count x 4 bytes does not.
    "bytes_overflow_u64": gguf([("t", [1 << 62, 4], F32, 0)]),
    # a quantized type whose block count x block size overflows.
    "quantized_bytes_overflow": gguf([("t", [(1 << 64) - 32], Q4_0, 0)]),
    # data start + offset fits in usize, + the tensor's 32 bytes does not.
    "offset_plus_size_wraps": gguf([("t", [8], F32, (1 << 64) - 96)]),
    # an aligned offset far past the end of the file.
    "offset_past_end": gguf([("t", [8], F32, 1 << 40)]),
    # the tensor fits the address space but not the file.
    "size_past_end": gguf([("t", [1 << 40], F32, 0)]),
    # more tensor infos than the file could hold.
    "tensor_count_huge": gguf([], n_tensors=(1 << 64) - 1),
    # a metadata array claiming 2^60 items.
    "metadata_array_count_huge": gguf([], kv=s("a") + struct.pack("<IIQ", 9, 4, 1 << 60), n_kv=1),
    # a metadata string longer than the file.
    "metadata_string_past_end": gguf([], kv=s("a") + struct.pack("<IQ", 8, 1 << 40), n_kv=1),
    # a zero-sized dimension and a 5-dimensional tensor.
    "zero_dim": gguf([("t", [0, 8], F32, 0)]),
    "five_dims": gguf([("t", [1, 1, 1, 1, 1], F32, 0)]),
    # two tensors whose ranges overlap, and a duplicated name.
    "overlapping_and_duplicate": gguf([("t", [8], F32, 0), ("t", [16], F32, 0)]),
}

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf")
os.makedirs(here, exist_ok=True)
for name, data in CASES.items():
    with open(os.path.join(here, name + ".gguf"), "wb") as f:
        f.write(data)
print(f"wrote {len(CASES)} files to {here}")
