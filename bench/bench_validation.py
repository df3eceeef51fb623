"""Cost of LogValidator-style validation on the append path (issue 12, item 11).

Appends the same pre-encoded batches to a fresh Log twice per codec: as a
client append (origin="client": every record walked, compressed batches
decompressed and walked) and as pylog's own producer (origin="producer":
only header and CRC checked), and prints records/s and the ratio. Also the
cost of converting to the topic's compression.type when it differs.

    .venv/bin/python bench/bench_validation.py [--records 2000000] [--size 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import render  # noqa: E402

from pylog import records  # noqa: E402
from pylog.storage.log import Log  # noqa: E402


def run(batches, origin: str, config: dict) -> float:
    root = tempfile.mkdtemp(prefix="pylog-bench-validation-")
    try:
        with Log(os.path.join(root, "t-0"), {"segment.bytes": 1 << 30, **config}) as log:
            started = time.perf_counter()
            for b in batches:
                log.append(b, origin=origin)
            elapsed = time.perf_counter() - started
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="records per batch")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    values = [os.urandom(args.size // 2).hex().encode()[: args.size] for _ in range(args.batch)]
    keys = [b"key-%d" % i for i in range(args.batch)]
    n = args.records // args.batch
    rows = []
    for codec in ("none", "lz4", "zstd", "gzip"):
        batch = records.encode_batch(values, keys, compression=codec)
        batches = [batch] * n
        best = {}
        for origin in ("producer", "client"):
            best[origin] = min(run(batches, origin, {}) for _ in range(3))
        rate = {o: args.records / t for o, t in best.items()}
        rows.append([codec, "producer", f"{rate['producer'] / 1e6:.2f}",
                     f"{rate['client'] / 1e6:.2f}", f"{rate['client'] / rate['producer']:.2f}x"])
    for sent, target in (("none", "zstd"), ("zstd", "lz4")):
        batch = records.encode_batch(values, keys, compression=sent)
        batches = [batch] * n
        same = min(run(batches, "client", {}) for _ in range(3))
        conv = min(run(batches, "client", {"compression.type": target}) for _ in range(3))
        rows.append([f"{sent} -> {target}", "client, topic codec differs",
                     f"{args.records / same / 1e6:.2f}", f"{args.records / conv / 1e6:.2f}",
                     f"{same / conv:.2f}x"])
    print(render(f"Append validation cost ({args.records:,} records of {args.size} B, "
                 f"{args.batch} per batch)",
                 ["codec", "baseline", "baseline M rec/s", "validated M rec/s", "validated ÷ baseline"],
                 rows, args.markdown, [
                     "baseline: origin=producer (header + CRC only) or, for conversions, the same "
                     "client append with compression.type=producer; validated: origin=client "
                     "(every record walked; compressed batches decompressed) or converted.",
                     "Best of 3 runs; a fresh Log on the machine's disk each run (page cache)."]))


if __name__ == "__main__":
    main()
