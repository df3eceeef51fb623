#!/usr/bin/env python3
"""The producer's fast paths beside the storage engine (issue 20, item 2).

One thread produces N keyed records of 100 B (keys ``user-<i>``, 1,000 distinct, over
8 partitions, so Kafka's murmur2 partitioner spreads them) into a fresh store, and
the timing includes the final ``flush()``. Rows, each run alternately with the
others (A B C ... A B C) and reported as the best of ``--repeat`` trials:

* **send()**, one record per call: Kafka's producer defaults (``acks=all``:
  pylog fsyncs before completing; idempotent; ``linger.ms=5``, ``batch.size=16384``),
  and with ``acks=1`` (no fsync, not idempotent).
* **send_batch()**, K records per call (K = 100, 1,000, 10,000), Python lists of
  bytes, the same two configs; calls are not waited for (the final flush() is).
* **raw append**: the same records, partitioned the same way and pre-encoded
  (``encode_batch``, not timed) into the batches a send_batch call makes (one per
  partition per call), appended with ``Log.append``: the storage engine alone. The
  ``acks=all`` twin flushes each log it touched after every call, as send_batch's
  direct path does.
* **naive**: the limits page's naive peer: each call's records framed as
  ``struct.pack('>iq', len, offset) + value`` into a bytearray per partition,
  one ``write`` per partition file (no CRC, no index, no Kafka format).
* **write loop** (the machine's limit for these bytes): ``os.write`` of the
  pre-encoded batches into 8 plain files, same order.
* **bare** (the limit of send_batch's work on this machine): the same C calls
  as send_batch (plan_rows, plan_chunks, encode_groups) and ``Log.append``,
  with nothing around them, on one thread, and on two (the caller encodes, a
  second thread appends the chunks of 64 KiB or more, as send_batch splits a
  big call).
  send_batch / bare two threads is the producer's own cost; bare two threads /
  raw append is what encoding and a hand-off cost on this machine's cores.

Ratios: send_batch / raw append of the same call size and durability (target
>= 0.8), send() records/s (target >= 1 M with the defaults). MB = 10**6 B of
value payload. Memory state: each trial writes a fresh store; the previous
trial's files were deleted just before it ("recently freed" pages).

usage: python bench/bench_producer.py [--quick] [--records N] [--repeat R] [--markdown] [--json F]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import gc
import json
import queue
import shutil
import struct
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc

import pylog
from pylog.client.partitioner import partition_keys
# send_batch's own framing estimate, request limit margin and queueing size: the
# bare rows split a call by the producer's numbers, not copies of them.
from pylog.client.batch_planner import BATCH_OVERHEAD, OVERLAP_BYTES, RECORD_OVERHEAD
from pylog.record import encode_batch

PARTITIONS = 8
VALUE = 100
DEFAULTS = {}                                            # Kafka's: acks=all, idempotent
ACKS1 = {"acks": "1", "enable.idempotence": False}
NAIVE_HDR = struct.Struct(">iq")


class Data:
    """N records (values, keys), their partitions, and per call size the pre-encoded
    batches of each call (one per partition per call), outside every timing."""

    def __init__(self, n: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        pool = [rng.bytes(VALUE) for _ in range(1000)]
        key_pool = [b"user-%d" % i for i in range(1000)]
        idx = rng.integers(0, 1000, n)
        self.values = [pool[i] for i in idx]
        self.keys = [key_pool[i] for i in idx]
        self.n = n
        self.parts = partition_keys(self.keys, PARTITIONS)
        self._encoded: dict[int, list[list[tuple[int, bytes]]]] = {}

    def calls(self, k: int):
        for start in range(0, self.n, k):
            yield self.values[start:start + k], self.keys[start:start + k], start

    def encoded(self, k: int) -> list[list[tuple[int, bytes]]]:
        """Per call: [(partition, batch bytes)] in partition order."""
        if k not in self._encoded:
            out = []
            ts = int(time.time() * 1000)
            for values, keys, start in self.calls(k):
                parts = self.parts[start:start + len(values)]
                call = []
                for p in range(PARTITIONS):
                    rows = np.flatnonzero(parts == p)
                    if len(rows):
                        call.append((p, encode_batch([values[i] for i in rows],
                                                     [keys[i] for i in rows], timestamps=ts)))
                out.append(call)
            self._encoded[k] = out
        return self._encoded[k]


class Store:
    def __init__(self, base: str):
        self.base = base
        self.i = 0

    def fresh(self) -> str:
        self.i += 1
        path = os.path.join(self.base, f"s{self.i}")
        return path

    @staticmethod
    def drop(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


def trial_send(env: Store, d: Data, config: dict) -> float:
    path = env.fresh()
    with pylog.open([path], background=False) as store:
        store.create_topic("t", PARTITIONS)
        with pylog.Producer(store, config) as producer:
            producer.partitions_for("t")
            send, values, keys = producer.send, d.values, d.keys
            gc.collect()
            t0 = time.perf_counter()
            for i in range(d.n):
                send("t", values[i], keys[i])
            producer.flush()
            dt = time.perf_counter() - t0
        assert sum(store.log("t", p).log_end_offset for p in range(PARTITIONS)) == d.n
    env.drop(path)
    return dt


def trial_send_batch(env: Store, d: Data, config: dict, k: int) -> float:
    path = env.fresh()
    with pylog.open([path], background=False) as store:
        store.create_topic("t", PARTITIONS)
        with pylog.Producer(store, config) as producer:
            producer.partitions_for("t")
            send_batch = producer.send_batch
            calls = list(d.calls(k))
            gc.collect()
            t0 = time.perf_counter()
            for values, keys, _ in calls:
                send_batch("t", values, keys)
            producer.flush()
            dt = time.perf_counter() - t0
        assert sum(store.log("t", p).log_end_offset for p in range(PARTITIONS)) == d.n
    env.drop(path)
    return dt


def trial_raw(env: Store, d: Data, k: int, flush_each_call: bool) -> float:
    encoded = d.encoded(k)
    path = env.fresh()
    with pylog.open([path], background=False) as store:
        store.create_topic("t", PARTITIONS)
        logs = [store.log("t", p) for p in range(PARTITIONS)]
        appends = [log.append for log in logs]
        gc.collect()
        t0 = time.perf_counter()
        if flush_each_call:
            for call in encoded:
                for p, batch in call:
                    info = appends[p](batch)
                    logs[p].flush(info.last_offset + 1)
        else:
            for call in encoded:
                for p, batch in call:
                    appends[p](batch)
        dt = time.perf_counter() - t0
        assert sum(log.log_end_offset for log in logs) == d.n
    env.drop(path)
    return dt


def trial_naive(env: Store, d: Data, k: int) -> float:
    path = env.fresh()
    os.makedirs(path)
    files = [open(os.path.join(path, f"p{p}"), "wb", buffering=0) for p in range(PARTITIONS)]
    pack = NAIVE_HDR.pack
    parts = d.parts.tolist()
    offsets = [0] * PARTITIONS
    gc.collect()
    t0 = time.perf_counter()
    for values, _, start in d.calls(k):
        bufs = [bytearray() for _ in range(PARTITIONS)]
        for i, v in enumerate(values):
            p = parts[start + i]
            bufs[p] += pack(len(v), offsets[p])
            bufs[p] += v
            offsets[p] += 1
        for p, ba in enumerate(bufs):
            if ba:
                files[p].write(ba)
    dt = time.perf_counter() - t0
    for f in files:
        f.close()
    env.drop(path)
    return dt


def trial_bare(env: Store, d: Data, k: int, threaded: bool) -> float:
    """send_batch's C calls with nothing around them: per call the caller plans
    the rows (plan_rows, plan_chunks) and encodes the partitions' chunks
    (encode_groups): the small ones in one call, appended by the caller, each
    chunk of 64 KiB or more alone, appended by a second thread fed through a
    queue.Queue bounded as buffer.memory bounds the producer (`threaded`), or by
    the caller. send_batch splits a call the same way. No futures, producer
    locks, sequence numbers or sender rounds: what the same work reaches on
    this machine on one thread and on two."""
    from pylog._core.codec import encode_groups
    from pylog._core.producer import plan_chunks, plan_rows
    calls = list(d.calls(k))
    path = env.fresh()
    with pylog.open([path], background=False) as store:
        store.create_topic("t", PARTITIONS)
        logs = [store.log("t", p) for p in range(PARTITIONS)]
        chunk_bytes = max(1, k * (VALUE + 30) // PARTITIONS)
        pipe: queue.Queue = queue.Queue(maxsize=max(2, (32 << 20) // chunk_bytes))

        def appender() -> None:
            while (item := pipe.get()) is not None:
                logs[item[0]].append(item[1])

        worker = threading.Thread(target=appender) if threaded else None
        ts = int(time.time() * 1000)
        limit = (1 << 20) - BATCH_OVERHEAD       # max.request.size's default, as send_batch cuts
        gc.collect()
        t0 = time.perf_counter()
        if worker:
            worker.start()
        for values, keys, _ in calls:
            sizes, parts, _ = plan_rows(values, keys, PARTITIONS, RECORD_OVERHEAD)
            order, plan, _ = plan_chunks(parts, sizes, 0, PARTITIONS, limit)
            small = [c for c in plan if c[3] < OVERLAP_BYTES]
            for p, start, end, size in plan:
                if size >= OVERLAP_BYTES:       # encoded alone, appended by the worker
                    batch = encode_groups(values, keys, ts, [order[start:end]])[0]
                    if worker:
                        pipe.put((p, batch))
                    else:
                        logs[p].append(batch)
            if small:                           # encoded together, appended here
                batches = encode_groups(values, keys, ts, [order[c[1]:c[2]] for c in small])
                for c, batch in zip(small, batches):
                    logs[c[0]].append(batch)
        if worker:
            pipe.put(None)
            worker.join()
        dt = time.perf_counter() - t0
        assert sum(log.log_end_offset for log in logs) == d.n
    env.drop(path)
    return dt


def trial_write_loop(env: Store, d: Data, k: int) -> float:
    encoded = d.encoded(k)
    path = env.fresh()
    os.makedirs(path)
    fds = [os.open(os.path.join(path, f"p{p}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
           for p in range(PARTITIONS)]
    write = os.write
    gc.collect()
    t0 = time.perf_counter()
    for call in encoded:
        for p, batch in call:
            write(fds[p], batch)
    dt = time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    env.drop(path)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="500,000 records, best of 2")
    ap.add_argument("--records", type=int, default=None, help="records per trial (default 2,000,000)")
    ap.add_argument("--repeat", type=int, default=None, help="timed trials per row (best of)")
    ap.add_argument("--calls", default="100,1000,10000", help="send_batch call sizes")
    ap.add_argument("--dir", help="data dir (default: a temp dir under /tmp, removed)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="append one JSON line per row to this file")
    args = ap.parse_args()
    n = args.records or (500_000 if args.quick else 2_000_000)
    repeat = args.repeat or (2 if args.quick else 3)
    calls = [int(x) for x in args.calls.split(",") if x]
    base = tempfile.mkdtemp(prefix="pylog-bench-producer-", dir=args.dir or "/tmp")
    env = Store(base)
    try:
        for line in sc.setup_block(base, {"records": f"{n:,} x {VALUE} B, keyed over "
                                          f"{PARTITIONS} partitions, one thread",
                                          "repetitions": f"warm-up + best of {repeat}"}):
            print(line)
        d = Data(n)
        for k in calls:
            d.encoded(k)
        rows: dict[str, object] = {
            "send, defaults (acks=all, idempotent)": lambda: trial_send(env, d, DEFAULTS),
            "send, acks=1": lambda: trial_send(env, d, ACKS1),
        }
        for k in calls:
            rows[f"send_batch {k}, defaults"] = lambda k=k: trial_send_batch(env, d, DEFAULTS, k)
            rows[f"send_batch {k}, acks=1"] = lambda k=k: trial_send_batch(env, d, ACKS1, k)
            rows[f"raw append {k}, flush per call"] = lambda k=k: trial_raw(env, d, k, True)
            rows[f"raw append {k}"] = lambda k=k: trial_raw(env, d, k, False)
            rows[f"naive {k}"] = lambda k=k: trial_naive(env, d, k)
            rows[f"write loop {k}"] = lambda k=k: trial_write_loop(env, d, k)
            rows[f"bare one thread {k}"] = lambda k=k: trial_bare(env, d, k, False)
            rows[f"bare two threads {k}"] = lambda k=k: trial_bare(env, d, k, True)
        best = {name: float("inf") for name in rows}
        for rep in range(repeat + 1):
            for name, fn in rows.items():
                dt = fn()
                if rep:
                    best[name] = min(best[name], dt)
                sc.log(f"  rep {rep} {name}: {n / dt / 1e6:.2f} M records/s")
        rate = {name: n / dt for name, dt in best.items()}

        def ratio(a: str, b: str) -> str:
            return f"{rate[a] / rate[b]:.2f}x" if a in rate and b in rate else ""

        table = [["send()", "defaults (acks=all, idempotent)",
                  f"{rate['send, defaults (acks=all, idempotent)'] / 1e6:.2f}", "", ""],
                 ["send()", "acks=1", f"{rate['send, acks=1'] / 1e6:.2f}", "", ""]]
        for k in calls:
            table.append([f"send_batch, {k:,} a call", "defaults (acks=all, idempotent)",
                          f"{rate[f'send_batch {k}, defaults'] / 1e6:.2f}",
                          f"{rate[f'raw append {k}, flush per call'] / 1e6:.2f}",
                          ratio(f"send_batch {k}, defaults", f"raw append {k}, flush per call")])
            table.append([f"send_batch, {k:,} a call", "acks=1",
                          f"{rate[f'send_batch {k}, acks=1'] / 1e6:.2f}",
                          f"{rate[f'raw append {k}'] / 1e6:.2f}",
                          ratio(f"send_batch {k}, acks=1", f"raw append {k}")])
        print()
        print(sc.table(["path", "config", "M records/s", "raw append M records/s (same batches)",
                        "vs raw"], table, args.markdown))
        peers = [[f"{k:,}", f"{rate[f'raw append {k}'] / 1e6:.2f}",
                  f"{rate[f'naive {k}'] / 1e6:.2f}", ratio(f"raw append {k}", f"naive {k}"),
                  f"{rate[f'write loop {k}'] / 1e6:.2f}", ratio(f"raw append {k}", f"write loop {k}"),
                  ratio(f"send_batch {k}, acks=1", f"naive {k}")] for k in calls]
        print()
        print(sc.table(["records a call", "raw append M rec/s", "naive peer M rec/s",
                        "raw / naive", "write loop M rec/s", "raw / write loop",
                        "send_batch acks=1 / naive"], peers, args.markdown))
        bare = [[f"{k:,}", f"{rate[f'send_batch {k}, acks=1'] / 1e6:.2f}",
                 f"{rate[f'bare one thread {k}'] / 1e6:.2f}",
                 f"{rate[f'bare two threads {k}'] / 1e6:.2f}",
                 f"{rate[f'raw append {k}'] / 1e6:.2f}",
                 ratio(f"send_batch {k}, acks=1", f"bare two threads {k}"),
                 ratio(f"bare two threads {k}", f"raw append {k}")] for k in calls]
        print()
        print(sc.table(["records a call", "send_batch acks=1 M rec/s", "bare, one thread",
                        "bare, two threads", "raw append", "send_batch / bare two threads",
                        "bare two threads / raw append"], bare, args.markdown))
        if args.json:
            with open(args.json, "a") as f:
                for name, r in rate.items():
                    f.write(json.dumps({"bench": "producer", "row": name, "records": n,
                                        "records_per_s": r}) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
