#!/usr/bin/env python3
"""CRC-32C micro-benchmark: pylog.crc32c against the ``crc32c`` PyPI package.

Each trial checksums ``--total`` bytes as calls on memoryview slices of one call
size, over a working set that either stays in cache (the slices of one small
buffer, over and over) or comes from memory (one pass over a buffer larger than
the caches). The two implementations alternate trial by trial (A B, B A, ...), so
both see the same noise on a shared machine; the result is the best of N.

    .venv/bin/python bench/bench_crc.py                 # all sizes, both working sets
    .venv/bin/python bench/bench_crc.py -n 60 --sizes 16384 --where memory
    .venv/bin/python bench/bench_crc.py --extra path/to/module.so:name   # a third contender
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy (imported by pylog) must not spin threads

import argparse
import gc
import importlib.util
import sys
import time

import crc32c as crc32c_pkg

import pylog

SIZES = [16, 64, 256, 4096, 16384, 1 << 20]
# From memory, calls below 256 B measure one cache miss on the data plus misses
# on the Python objects around it: the timing then depends on object layout
# (2x swings from run to run for either library), not on the checksum.
MEMORY_MIN = 256
IN_CACHE = 1 << 20      # fits the 2 MiB L2
FROM_MEMORY = 64 << 20   # beyond L2 (bench_codec.py's "from memory" set)
MAX_SLICES = 1 << 18     # small calls from memory: slices spread over the set


def label(size):
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1024:
        return f"{size >> 10} KiB"
    return f"{size} B"


def load_extra(spec):
    path, _, name = spec.partition(":")
    modname = os.path.basename(path).split(".")[0]
    s = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return getattr(mod, name or "crc32c")


def measure(fns, size, working_set, total, n):
    data = os.urandom(max(working_set, size))
    mv = memoryview(data)
    stride = max(size, len(data) // MAX_SLICES)
    base = [mv[i:i + size] for i in range(0, len(data) - size + 1, stride)]
    reps = max(1, total // (len(base) * size))
    chunks = base * reps
    nbytes = len(chunks) * size
    ref = fns[0](chunks[0])
    for f in fns[1:]:
        assert f(chunks[0]) == ref, "implementations disagree"

    def runner(fn):
        def run():
            for c in chunks:
                fn(c)
        return run
    runs = [runner(f) for f in fns]
    best = [float("inf")] * len(fns)
    for r in runs:   # warm-up
        r()
    order = list(range(len(fns)))
    for trial in range(n):
        # A B, then B A: neither always runs right after the other's cache footprint.
        for i in (order if trial % 2 == 0 else order[::-1]):
            r = runs[i]
            gc.collect()
            t0 = time.perf_counter()
            r()
            best[i] = min(best[i], time.perf_counter() - t0)
    return [nbytes / t / 1e9 for t in best], nbytes / len(chunks)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=30, help="trials per contender (best of n)")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES)
    ap.add_argument("--where", choices=["cache", "memory", "both"], default="both")
    ap.add_argument("--total", type=int, default=64 << 20, help="bytes per trial (>= 1 MiB calls)")
    ap.add_argument("--extra", action="append", default=[], help="file.so[:function] to compare too")
    args = ap.parse_args()

    fns = [pylog.crc32c, crc32c_pkg.crc32c] + [load_extra(e) for e in args.extra]
    names = ["pylog", "crc32c pkg"] + [os.path.basename(e) for e in args.extra]
    print(f"pylog crc32c implementation: {pylog.crc32c_implementation()}; best of {args.n}")
    hdr = "| call size | data | " + " | ".join(f"{n} GB/s" for n in names) + " | pylog ÷ pkg |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    wheres = ["cache", "memory"] if args.where == "both" else [args.where]
    for where in wheres:
        for size in args.sizes:
            if where == "memory" and size < MEMORY_MIN and args.sizes == SIZES:
                continue
            ws = IN_CACHE if where == "cache" else FROM_MEMORY
            # Small calls are bounded by call overhead: fewer bytes per trial.
            total = args.total if size >= 4096 else size * 200_000
            gbs, _ = measure(fns, size, ws, total, args.n)
            print(f"| {label(size)} | {'in cache' if where == 'cache' else 'from memory'} | "
                  + " | ".join(f"{g:.2f}" for g in gbs) + f" | {gbs[0] / gbs[1]:.3f}× |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
