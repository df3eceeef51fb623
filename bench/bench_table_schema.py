#!/usr/bin/env python3
"""Typed value columns: parse throughput of pylog.table's JSON and Avro paths.

Each contender turns the same batch of values (a pyarrow BinaryArray, as the
converter holds them) into typed Arrow columns:

- json (pylog)        pylog.table.schema_json: one Arrow JSON read of the wrapped batch,
                      bad rows isolated (docs/TABLES.md "Schemas and dead letters")
- json (one file)     pyarrow.json.read_json of the same values as one newline-joined
                      file, no checks: the ceiling of the Arrow reader
- json (json.loads)   the naive route: json.loads per value + pa.Table.from_pylist
- avro (pylog)        pylog.table.schema_avro: the C decoder into Arrow buffers
- avro (C decode only) pylog._core.avro.decode_values alone (no Arrow arrays)
- avro (per record)   the naive route: fastavro.schemaless_reader per value + from_pylist

Values are ~100-byte records (seeded); `--bad` makes that fraction of them
damaged (cut short), to show the bad-record path's cost. Correctness is
checked before timing (same rows as the naive route). Best of `-n` trials.

    .venv/bin/python bench/bench_table_schema.py               # 200k records
    .venv/bin/python bench/bench_table_schema.py --records 1000000 --bad 0.01 --json
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import io
import json
import platform
import random
import subprocess
import sys
import time

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.json as pj

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from pylog._core.avro import decode_values  # noqa: E402
from pylog.table.schema_avro import compile_avro_schema, parse_avro_values  # noqa: E402
from pylog.table.schema_json import compile_json_schema, parse_json_values  # noqa: E402

JSON_SCHEMA = {"type": "object", "required": ["user", "ts"], "properties": {
    "user": {"type": "integer"}, "page": {"type": "string"}, "ts": {"type": "integer"},
    "dwell": {"type": "number"}, "mobile": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}}}}
AVRO_SCHEMA = {"type": "record", "name": "Click", "fields": [
    {"name": "user", "type": "long"}, {"name": "page", "type": ["null", "string"]},
    {"name": "ts", "type": "long"}, {"name": "dwell", "type": "double"},
    {"name": "mobile", "type": "boolean"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}


def records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pages = [f"/product/{i}" for i in range(500)]
    return [{"user": rng.randrange(1 << 40), "page": rng.choice(pages),
             "ts": 1_700_000_000_000 + i, "dwell": rng.random() * 100,
             "mobile": rng.random() < 0.5,
             "tags": rng.sample(["new", "sale", "promo", "top", "eu"], rng.randrange(3))}
            for i in range(n)]


def damage(values: list[bytes], fraction: float, seed: int) -> list[bytes]:
    rng = random.Random(seed + 1)
    return [v[: len(v) // 2] if rng.random() < fraction else v for v in values]


def best(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def setup_block() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        sha = "?"
    load = os.getloadavg()
    return (f"git {sha}  Python {platform.python_version()}  pyarrow {pa.__version__}  "
            f"fastavro {fastavro.__version__}  {platform.machine()} "
            f"{os.cpu_count()} CPUs  load {load[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("-n", type=int, default=5, help="trials (best of)")
    ap.add_argument("--bad", type=float, default=0.0, help="fraction of damaged values")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print JSON lines, not a table")
    args = ap.parse_args()

    recs = records(args.records, args.seed)
    node = compile_json_schema(JSON_SCHEMA)
    arrow_schema = node.arrow_schema()
    json_values = damage([json.dumps(r, separators=(",", ":")).encode() for r in recs],
                         args.bad, args.seed)
    json_array = pa.array(json_values, pa.binary())
    json_file = b"\n".join(json_values) + b"\n"

    avro = compile_avro_schema(AVRO_SCHEMA)
    parsed = fastavro.parse_schema(AVRO_SCHEMA)

    def avro_encode(r):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, r)
        return out.getvalue()

    avro_values = damage([avro_encode(r) for r in recs], args.bad, args.seed)
    avro_array = pa.array(avro_values, pa.binary())
    avro_offsets = np.frombuffer(avro_array.buffers()[1], np.int32).astype(np.int64)
    avro_data = np.frombuffer(avro_array.buffers()[2], np.uint8)

    def json_pylog():
        return parse_json_values(node, json_array, arrow_schema)

    def json_one_file():
        return pj.read_json(pa.BufferReader(json_file), parse_options=pj.ParseOptions(
            explicit_schema=arrow_schema, unexpected_field_behavior="ignore"))

    def json_loads():
        rows = []
        for v in json_values:
            try:
                rows.append(json.loads(v))
            except ValueError:
                pass
        return pa.Table.from_pylist(rows, schema=arrow_schema)

    def avro_pylog():
        return parse_avro_values(avro, avro_array)

    def avro_decode_only():
        n = len(avro_values)
        decode_values(avro.program, avro_data, avro_offsets[:-1].copy(), avro_offsets[1:].copy(),
                      np.zeros(n, np.int8), np.zeros(n, np.int64))

    def avro_per_record():
        rows = []
        for v in avro_values:
            buf = io.BytesIO(v)
            try:
                r = fastavro.schemaless_reader(buf, parsed, None)
            except Exception:
                continue
            if buf.tell() == len(v):
                rows.append(r)
        return pa.Table.from_pylist(rows, schema=avro.arrow)

    # Correctness before timing: the same good rows as the naive routes.
    if args.bad == 0:
        assert json_pylog()[0].to_pylist() == json_loads().to_pylist()
        assert json_one_file().num_rows == args.records
    assert avro_pylog()[0].to_pylist() == avro_per_record().to_pylist()

    json_bytes = sum(map(len, json_values))
    avro_bytes = sum(map(len, avro_values))
    cases = [("json (pylog)", json_pylog, json_bytes),
             ("json (json.loads per record)", json_loads, json_bytes),
             ("avro (pylog)", avro_pylog, avro_bytes),
             ("avro (C decode only)", avro_decode_only, avro_bytes),
             ("avro (fastavro per record)", avro_per_record, avro_bytes)]
    if args.bad == 0:
        cases.insert(1, ("json (pyarrow.json, one file)", json_one_file, json_bytes))
    results = []
    for name, fn, size in cases:
        t = best(fn, args.n)
        results.append({"case": name, "records": args.records, "bad": args.bad, "bytes": size,
                        "seconds": t, "MB_s": size / t / 1e6, "records_s": args.records / t})
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    print(setup_block())
    print(f"{args.records} records, {args.bad:.1%} damaged, best of {args.n}")
    print(f"{'case':34} {'MB/s':>8} {'records/s':>12} {'seconds':>9}")
    for r in results:
        print(f"{r['case']:34} {r['MB_s']:8.1f} {r['records_s']:12,.0f} {r['seconds']:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
