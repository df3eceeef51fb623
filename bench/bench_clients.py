#!/usr/bin/env python3
"""pylog client benchmark (issue 5): Producer and Consumer throughput, end-to-end latency.

The seeds' performance questions (design 4.x "Performance Results"), each figure
beside references measured in the same run, on the same data:

1. Producer throughput vs batch size, record size, producer threads and topics,
   for ``send()`` (one record per call) and ``send_batch()`` (a list per call),
   beside
   * **raw append**: the same records pre-encoded (``pylog.records.encode_batch``,
     not timed) into batches of the same size, appended with ``Log.append``,
     one call per batch: the storage engine alone;
   * **naive**: the limits page's naive peer (2): a Python loop frames each
     record as ``struct.pack(">iq", len, offset) + value`` into a bytearray and
     writes it to a plain file once per batch (no CRC, no index, no Kafka format).
2. Consumer throughput vs consumer threads (one Consumer per thread, one group)
   for ``poll()`` and ``poll_arrow()``, beside a raw read of the same files
   (``Log.read`` + ``FileSlice.read`` + ``decode_arrow``) and memory-copy bandwidth.
3. End-to-end latency (send -> returned by poll) p50/p99/p99.9 with a producer
   at a fixed rate and a consumer running together, beside Kafka's 2014 figures.

Memory state (this VM, see shared/reference/limits/RESULTS.md): every producer
trial writes new files into a fresh store directory; the previous trial's
files were deleted just before it, so its page-cache pages mostly come from
memory freed moments earlier ("recently freed", about 5 GB/s for fio, not the
0.4-0.8 GB/s "cold" state and not the 11-16 GB/s overwrite of cached pages).
The full run adds one "cold" row (the machine idle for COLD_WAIT s before each
trial, so freed memory went back to the host). Consumers read data written
seconds earlier (page cache). Nothing is fsynced except by acks=all.

Method: best of N trials after one untimed warm-up trial; pylog, raw append
and naive run alternately (A B C A B C ...) so they see the same noise; the
GC stays on and gc.collect() runs before each trial. Store open, topic
creation, close and deletion are outside the timing; ``flush()`` is inside.

Usage:
    bench/bench_clients.py                   # full run (a few minutes)
    bench/bench_clients.py --quick           # < 90 s (tools/run-benchmark)
    bench/bench_clients.py --markdown        # tables as Markdown (bench/RESULTS.md)
    bench/bench_clients.py --plots bench/plots   # PNG plots
    bench/bench_clients.py --dir /tmp/x      # data dir (default: a temp dir under /tmp, removed)
"""

from __future__ import annotations

import os

# numpy's OpenBLAS starts worker threads that spin on the other core of this
# 2-vCPU machine; nothing here uses BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import gc
import itertools
import math
import platform
import shutil
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import pylog
from pylog import Consumer
from pylog import Producer
from pylog.record import decode_arrow, encode_batch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clients_output import (consumer_table, fmt_rate, latency_table, producer_table, targets_table,
                            write_plots)
from report import cpu_report, cpu_snapshot, wait_for_quiet  # noqa: E402


perf_counter = time.perf_counter
monotonic_ns = time.monotonic_ns

KiB = 1024
MiB = 1 << 20
MB = 1e6

# As the producer's accumulator sizes records (src/pylog/_core/producer.pyx).
RECORD_OVERHEAD = 21
BATCH_OVERHEAD = 61


NAIVE_HDR = struct.Struct(">iq")


# =========================================================================== machine

def machine_info():
    cpu = mem = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {mem} RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def versions():
    import importlib.metadata as md

    def v(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "?"
    return (f"pylog {pylog.__version__} (crc32c: {pylog.crc32c_implementation()}, "
            f"I/O engine: {pylog.io_engine()}), numpy {v('numpy')}, pyarrow {v('pyarrow')}")


def measure_memcpy(nbytes, n):
    """numpy.copyto between two preallocated, touched arrays (GB/s of bytes copied).

    512 MiB: glibc copies below ~181 MiB with ordinary stores, half as fast on
    this VM (bench/RESULTS.md, codec section)."""
    src = np.tile(np.frombuffer(os.urandom(MiB), dtype=np.uint8), nbytes // MiB)
    dst = np.ones_like(src)
    best = float("inf")
    for _ in range(n + 1):
        t0 = perf_counter()
        np.copyto(dst, src)
        best = min(best, perf_counter() - t0)
    del src, dst
    return nbytes / best / 1e9


# =========================================================================== data and stores

class Env:
    """Fresh store directories under one base dir; each is deleted after its trial."""

    def __init__(self, base: str):
        self.base = base
        self.count = 0

    def new_dir(self) -> str:
        self.count += 1
        path = os.path.join(self.base, f"t{self.count}")
        os.makedirs(path)
        return path

    def open(self):
        path = self.new_dir()
        return pylog.open(path), path

    @staticmethod
    def drop(store, path):
        if store is not None:
            store.close()
        shutil.rmtree(path, ignore_errors=True)


def make_values(count: int, size: int, seed: int = 0) -> list[bytes]:
    """`count` distinct random values of `size` bytes (incompressible; no codec here)."""
    pool = os.urandom(min(count, 1 << 16) * size + size)
    out = []
    stride = max(1, size // 7 + 1)
    span = len(pool) - size
    for i in range(count):
        pos = (i * stride) % span
        out.append(pool[pos:pos + size])
    return out


def per_batch(batch_bytes: int, size: int) -> int:
    """Records in one batch of `batch_bytes` as the producer's accumulator fills it."""
    return max(1, math.ceil((batch_bytes - BATCH_OVERHEAD) / (size + RECORD_OVERHEAD)))


@dataclass
class Workload:
    """One producer configuration: values per thread, cut into batches per topic."""

    label: str
    size: int                 # value bytes
    batch_bytes: int
    threads: int
    topics: int
    records: int              # per thread
    values: list = field(default_factory=list)

    def __post_init__(self):
        self.values = make_values(self.records, self.size)
        n = per_batch(self.batch_bytes, self.size)
        self.chunks = [self.values[i:i + n] for i in range(0, self.records, n)]
        self.encoded = None   # pre-encoded chunks (raw append), made on first use

    @property
    def total_records(self):
        return self.records * self.threads

    @property
    def total_bytes(self):
        return self.total_records * self.size

    def encode(self):
        if self.encoded is None:
            self.encoded = [encode_batch(c) for c in self.chunks]
        return self.encoded


def _topic_names(w: Workload):
    return [f"t{i}" for i in range(w.topics)]


def _run_threads(fns):
    """Runs fns[i]() in len(fns) threads started together; returns the wall time."""
    if len(fns) == 1:
        gc.collect()
        t0 = perf_counter()
        fns[0]()
        return perf_counter() - t0
    barrier = threading.Barrier(len(fns) + 1)
    errors = []

    def wrap(fn):
        def run():
            barrier.wait()
            try:
                fn()
            except BaseException as exc:   # noqa: BLE001 - re-raised below
                errors.append(exc)
        return run
    threads = [threading.Thread(target=wrap(fn)) for fn in fns]
    for t in threads:
        t.start()
    gc.collect()
    t0 = perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    dt = perf_counter() - t0
    if errors:
        raise errors[0]
    return dt


# =========================================================================== producer trials

def trial_send(env: Env, w: Workload, batch_mode: bool, linger_ms: int = 5) -> float:
    """pylog Producer, one per thread (acks=1): send() per record or send_batch() per chunk.

    One thread: its records go round-robin over `topics` single-partition topics.
    Several threads: one topic with one partition per thread; thread i sends to partition i."""
    store, path = env.open()
    try:
        names = _topic_names(w)
        if w.threads == 1:
            for name in names:
                store.create_topic(name, 1)
        else:
            store.create_topic(names[0], w.threads)
        producers = [Producer(store, acks="1", batch_size=w.batch_bytes, linger_ms=linger_ms)
                     for _ in range(w.threads)]
        for p in producers:
            for name in names:
                p.partitions_for(name)             # topic metadata outside the timing

        def one_thread(i):
            p = producers[i]
            if w.threads == 1:
                if batch_mode:
                    send_batch = p.send_batch
                    for name, chunk in zip(itertools.cycle(names), w.chunks):
                        send_batch(name, chunk)
                else:
                    send = p.send
                    if w.topics == 1:
                        name = names[0]
                        for v in w.values:
                            send(name, v)
                    else:
                        for name, v in zip(itertools.cycle(names), w.values):
                            send(name, v)
            else:
                name = names[0]
                if batch_mode:
                    send_batch = p.send_batch
                    for chunk in w.chunks:
                        send_batch(name, chunk, partition=i)
                else:
                    send = p.send
                    for v in w.values:
                        send(name, v, partition=i)
            p.flush()
        dt = _run_threads([lambda i=i: one_thread(i) for i in range(w.threads)])
        for p in producers:
            p.close()
        _check_end_offsets(store, w)
        return dt
    finally:
        Env.drop(store, path)


def _check_end_offsets(store, w: Workload):
    names = _topic_names(w)
    if w.threads == 1:
        got = sum(store.log(n, 0).log_end_offset for n in names)
    else:
        got = sum(store.log(names[0], p).log_end_offset for p in range(w.threads))
    if got != w.total_records:
        raise AssertionError(f"{w.label}: {got} records in the logs, expected {w.total_records}")


def trial_raw(env: Env, w: Workload) -> float:
    """Pre-encoded batches of the same records through Log.append (one call per batch)."""
    encoded = w.encode()
    store, path = env.open()
    try:
        names = _topic_names(w)
        if w.threads == 1:
            for name in names:
                store.create_topic(name, 1)
            logs = [store.log(n, 0) for n in names]
        else:
            store.create_topic(names[0], w.threads)
            logs = [store.log(names[0], p) for p in range(w.threads)]

        def one_thread(i):
            if w.threads == 1:
                if len(logs) == 1:
                    append = logs[0].append
                    for b in encoded:
                        append(b)
                else:
                    for log, b in zip(itertools.cycle(logs), encoded):
                        log.append(b)
            else:
                append = logs[i].append
                for b in encoded:
                    append(b)
        dt = _run_threads([lambda i=i: one_thread(i) for i in range(w.threads)])
        _check_end_offsets(store, w)
        return dt
    finally:
        Env.drop(store, path)


def trial_naive(env: Env, w: Workload) -> float:
    """The limits page's naive peer (2): records framed into a bytearray, one write per batch."""
    path = env.new_dir()
    try:
        nfiles = w.topics if w.threads == 1 else w.threads
        files = [open(os.path.join(path, f"f{i}"), "wb") for i in range(nfiles)]

        def one_thread(i):
            pack = NAIVE_HDR.pack
            targets = itertools.cycle(files) if w.threads == 1 else itertools.repeat(files[i])
            off = 0
            for f, chunk in zip(targets, w.chunks):
                ba = bytearray()
                for v in chunk:
                    ba += pack(len(v), off)
                    ba += v
                    off += 1
                f.write(ba)
            if w.threads == 1:
                for f in files:
                    f.flush()
            else:
                files[i].flush()
        dt = _run_threads([lambda i=i: one_thread(i) for i in range(w.threads)])
        for f in files:
            f.close()
        return dt
    finally:
        shutil.rmtree(path, ignore_errors=True)


def trial_encode(env: Env, w: Workload) -> float:
    """encode_batch alone on the same chunks (what send_batch adds to raw append)."""
    def one_thread(i):
        for chunk in w.chunks:
            encode_batch(chunk)
    return _run_threads([lambda i=i: one_thread(i) for i in range(w.threads)])


@dataclass
class ProducerRow:
    sweep: str
    x: str
    w: Workload
    send: float = float("nan")        # best seconds
    send_batch: float = float("nan")
    raw: float = float("nan")
    naive: float = float("nan")
    encode: float = float("nan")
    others_cpu: float = 0.0
    memory: str = "recently freed"

    def rate(self, t):
        return self.w.total_records / t

    def mbs(self, t):
        return self.w.total_bytes / t / MB


def measure_producer(env: Env, sweep: str, x: str, w: Workload, n: int, warmup: int,
                     cold_wait: float = 0.0, kinds=("send", "send_batch", "raw", "naive", "encode")) -> ProducerRow:
    row = ProducerRow(sweep, x, w)
    fns = {
        "send": lambda: trial_send(env, w, batch_mode=False),
        "send_batch": lambda: trial_send(env, w, batch_mode=True),
        "raw": lambda: trial_raw(env, w),
        "naive": lambda: trial_naive(env, w),
        "encode": lambda: trial_encode(env, w),
    }
    w.encode()
    best = {k: float("inf") for k in kinds}
    before = cpu_snapshot()
    for r in range(warmup + n):
        for k in kinds:
            if cold_wait:
                time.sleep(cold_wait)
            dt = fns[k]()
            if r >= warmup:
                best[k] = min(best[k], dt)
    row.others_cpu, _ = cpu_report(before, cpu_snapshot())
    for k, t in best.items():
        setattr(row, k, t)
    if cold_wait:
        row.memory = f"cold ({cold_wait:.0f} s idle before each trial)"
    return row


# =========================================================================== consumer trials

@dataclass
class ConsumerRow:
    threads: int
    records: int
    size: int
    poll: float = float("nan")
    poll_arrow: float = float("nan")
    raw: float = float("nan")
    others_cpu: float = 0.0

    def rate(self, t):
        return self.records / t


def _range_assign(partitions: int, threads: int, i: int) -> list[int]:
    """Kafka's range assignor over one topic: member i's partitions."""
    per, extra = divmod(partitions, threads)
    start = i * per + min(i, extra)
    return list(range(start, start + per + (1 if i < extra else 0)))


def measure_consumer(env: Env, partitions: int, per_partition: int, size: int, thread_counts,
                     n: int, warmup: int, max_poll_records: int, say) -> tuple[list[ConsumerRow], dict]:
    """Writes `partitions` x `per_partition` records once (raw append of 1000-record
    batches), then times consumers reading all of it with 1, 2, 4 threads."""
    store, path = env.open()
    info = {}
    try:
        store.create_topic("c", partitions)
        values = make_values(per_partition, size)
        batches = [encode_batch(values[i:i + 1000]) for i in range(0, per_partition, 1000)]
        info["batch_bytes"] = len(batches[0])
        for p in range(partitions):
            log = store.log("c", p)
            for b in batches:
                log.append(b)
        total = partitions * per_partition
        rows = []
        group_seq = itertools.count()

        def consumer_trial(threads, arrow):
            group = f"g{next(group_seq)}"
            consumers = [Consumer(store, "c", group_id=group, auto_offset_reset="earliest",
                                  enable_auto_commit=False, max_poll_records=max_poll_records)
                         for _ in range(threads)]
            counts = [0] * threads

            def run(i):
                c = consumers[i]
                got = 0
                if arrow:
                    poll = c.poll_arrow
                    while True:
                        rb = poll(0)
                        if rb.num_rows == 0:
                            break
                        got += rb.num_rows
                else:
                    poll = c.poll
                    while True:
                        recs = poll(0)
                        if not recs:
                            break
                        got += len(recs)
                counts[i] = got
            dt = _run_threads([lambda i=i: run(i) for i in range(threads)])
            for c in consumers:
                c.close()
            if sum(counts) != total:
                raise AssertionError(f"consumers read {sum(counts)} records, expected {total}")
            return dt

        def raw_trial(threads):
            counts = [0] * threads

            def run(i):
                got = 0
                for p in _range_assign(partitions, threads, i):
                    log = store.log("c", p)
                    pos, end = log.log_start_offset, log.log_end_offset
                    while pos < end:
                        s = log.read(pos, MiB)
                        got += decode_arrow(s.read()).num_rows
                        pos = s.last_offset + 1
                counts[i] = got
            dt = _run_threads([lambda i=i: run(i) for i in range(threads)])
            if sum(counts) != total:
                raise AssertionError(f"raw read {sum(counts)} records, expected {total}")
            return dt

        for threads in thread_counts:
            row = ConsumerRow(threads, total, size)
            best = {"poll": float("inf"), "poll_arrow": float("inf"), "raw": float("inf")}
            before = cpu_snapshot()
            for r in range(warmup + n):
                for k, fn in (("poll", lambda: consumer_trial(threads, False)),
                              ("poll_arrow", lambda: consumer_trial(threads, True)),
                              ("raw", lambda: raw_trial(threads))):
                    dt = fn()
                    if r >= warmup:
                        best[k] = min(best[k], dt)
            row.others_cpu, _ = cpu_report(before, cpu_snapshot())
            row.poll, row.poll_arrow, row.raw = best["poll"], best["poll_arrow"], best["raw"]
            say(f"  consumer threads={threads}: poll {fmt_rate(row.rate(row.poll))}/s, "
                f"poll_arrow {fmt_rate(row.rate(row.poll_arrow))}/s, raw {fmt_rate(row.rate(row.raw))}/s")
            rows.append(row)
        return rows, info
    finally:
        Env.drop(store, path)


# =========================================================================== latency

@dataclass
class LatencyRow:
    rate: int
    linger_ms: int
    acks: str
    duration: float
    sent: int = 0
    achieved: float = 0.0
    e2e: tuple = ()        # p50, p99, p99.9, max in ms
    ack: tuple = ()
    samples: int = 0
    others_cpu: float = 0.0


def _pcts(ns_values):
    a = np.asarray(ns_values, dtype=np.int64) / 1e6
    if len(a) == 0:
        return (float("nan"),) * 4
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return float(p50), float(p99), float(p999), float(a.max())


def measure_latency(env: Env, rate: int, linger_ms: int, acks: str, duration: float,
                    skip: float = 0.5, size: int = 100) -> LatencyRow:
    """A producer sends `rate` records/s for `duration` s (value = monotonic_ns at
    send() + padding); a consumer thread polls them. e2e = time poll() returned
    the record - time send() was called; ack = time its future completed - send
    (every 16th record). The first `skip` s are not counted."""
    row = LatencyRow(rate, linger_ms, acks, duration)
    store, path = env.open()
    try:
        store.create_topic("lat", 1)
        producer = Producer(store, acks=acks, linger_ms=linger_ms)
        producer.partitions_for("lat")
        consumer = Consumer(store, auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.assign([("lat", 0)])
        total = int(rate * duration)
        first_counted = int(rate * skip)
        e2e = np.zeros(total, dtype=np.int64)
        ack_lat: list[int] = []
        stop = threading.Event()
        received = [0]

        def consume():
            unpack = struct.Struct(">q").unpack_from
            got = 0
            while got < total and not stop.is_set():
                recs = consumer.poll(0.2)
                now = monotonic_ns()
                for r in recs:
                    e2e[r.offset] = now - unpack(r.value)[0]
                got += len(recs)
            received[0] = got

        pad = bytes(size - 8)
        cons = threading.Thread(target=consume, name="bench-consumer")
        before = cpu_snapshot()
        cons.start()
        send = producer.send
        to_bytes = int.to_bytes
        append_ack = ack_lat.append
        interval = 1e9 / rate
        t0 = monotonic_ns()
        sent = 0
        while sent < total:
            now = monotonic_ns()
            due = min(total, int((now - t0) / interval) + 1)
            while sent < due:
                ts = monotonic_ns()
                fut = send("lat", to_bytes(ts, 8, "big") + pad)
                if sent >= first_counted and sent % 16 == 0:
                    fut.add_done_callback(lambda f, ts=ts: append_ack(monotonic_ns() - ts))
                sent += 1
            if sent < total:
                wait = (t0 + sent * interval - monotonic_ns()) / 1e9
                if wait > 0:
                    time.sleep(wait)
        elapsed = (monotonic_ns() - t0) / 1e9
        producer.flush()
        cons.join(timeout=30)
        stop.set()
        cons.join()
        row.others_cpu, _ = cpu_report(before, cpu_snapshot())
        producer.close()
        consumer.close()
        if received[0] != total:
            raise AssertionError(f"latency run: consumer got {received[0]} of {total} records")
        row.sent = total
        row.achieved = total / elapsed
        counted = e2e[first_counted:]
        row.samples = len(counted)
        row.e2e = _pcts(counted)
        row.ack = _pcts(ack_lat)
        return row
    finally:
        Env.drop(store, path)


# =========================================================================== main

def size_label(n):
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer points, less data (< 90 s)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    ap.add_argument("--dir", help="data dir (default: a temp dir under /tmp, removed at the end)")
    ap.add_argument("-n", "--repeat", type=int, default=None, help="timed trials per figure (best of N)")
    ap.add_argument("--sections", default="producer,consumer,latency",
                    help="comma-separated subset of producer,consumer,latency")
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="seconds to wait for a quiet machine before starting (default 5 quick, 60 full)")
    ap.add_argument("--row-wait", type=float, default=5.0,
                    help="full run: seconds to wait for a quiet machine before each row (default 5)")
    ap.add_argument("--cold-wait", type=float, default=None,
                    help="idle seconds before each trial of the cold-memory row (full run: 3; 0 = no cold row)")
    args = ap.parse_args(argv)
    quick = args.quick
    sections = set(args.sections.split(","))
    n = args.repeat or (1 if quick else 3)
    warmup = 0 if quick else 1
    cold_wait = args.cold_wait if args.cold_wait is not None else (0 if quick else 3)

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    t_start = perf_counter()
    own_dir = args.dir is None
    base = tempfile.mkdtemp(prefix="pylog-bench-clients-", dir="/tmp") if own_dir else args.dir
    os.makedirs(base, exist_ok=True)
    env = Env(base)
    start_wait = args.wait_idle if args.wait_idle is not None else (5 if quick else 60)
    quiet_at_start, waited = wait_for_quiet(start_wait, say)
    cpu0 = cpu_snapshot()
    prod_rows: list[ProducerRow] = []
    cons_rows: list[ConsumerRow] = []
    lat_rows: list[LatencyRow] = []
    cons_info: dict = {}
    max_poll_records = 100_000
    try:
        memcpy0 = measure_memcpy(512 * MiB, 3 if quick else 5)
        say(f"memcpy {memcpy0:.1f} GB/s")
        if "producer" in sections:
            # Bytes per trial and thread; records capped (send() runs ~1 M records/s).
            budget = 24 * MB if quick else 120 * MB
            cap = 200_000 if quick else 1_000_000
            fixed_batch = 256 * KiB

            max_batches = 10_000 if quick else 40_000   # small batches: ~50 µs per send_batch call

            def records_for(size, batch=fixed_batch):
                return int(min(cap, budget // size, max_batches * per_batch(batch, size)))

            plan = []
            batch_sizes = [1 * KiB, 16 * KiB, 256 * KiB, 1 * MiB] if quick else \
                [1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB]
            for b in batch_sizes:
                plan.append(("batch size", size_label(b), lambda b=b: Workload("batch", 100, b, 1, 1, records_for(100, b))))
            for s in ([10, 100, 1000, 10 * KiB] if quick else [10, 100, 1 * KiB, 10 * KiB]):
                plan.append(("record size", size_label(s), lambda s=s: Workload("size", s, fixed_batch, 1, 1, records_for(s))))
            for t in ([2] if quick else [1, 2, 4]):
                plan.append(("threads", str(t), lambda t=t: Workload("threads", 100, fixed_batch, t, 1,
                                                                   records_for(100) // t)))
            for k in ([10, 100] if quick else [1, 10, 100]):
                plan.append(("topics", str(k), lambda k=k: Workload("topics", 100, fixed_batch, 1, k, records_for(100))))
            for sweep, x, make in plan:
                w = make()              # built one at a time: values take ~130 B per record
                w.label = f"{sweep}={x}"
                if not quick:
                    wait_for_quiet(args.row_wait, say)
                row = measure_producer(env, sweep, x, w, n, warmup)
                prod_rows.append(row)
                say(f"  producer {sweep}={x} ({w.size} B, {w.total_records:,} records): "
                    f"send {fmt_rate(row.rate(row.send))}/s, send_batch {fmt_rate(row.rate(row.send_batch))}/s, "
                    f"raw {fmt_rate(row.rate(row.raw))}/s, naive {fmt_rate(row.rate(row.naive))}/s"
                    f" [others {row.others_cpu:.0f}%]")
                row.w.values = row.w.chunks = row.w.encoded = None
                gc.collect()
            if cold_wait:
                w = Workload("cold", 100, fixed_batch, 1, 1, records_for(100))
                row = measure_producer(env, "record size", "100 B (cold)", w, min(n, 2), 0,
                                       cold_wait=cold_wait)
                prod_rows.append(row)
                say(f"  producer cold 100 B: send {fmt_rate(row.rate(row.send))}/s, send_batch "
                    f"{fmt_rate(row.rate(row.send_batch))}/s, raw {fmt_rate(row.rate(row.raw))}/s, "
                    f"naive {fmt_rate(row.rate(row.naive))}/s")
            del plan
            gc.collect()
        if "consumer" in sections:
            if not quick:
                wait_for_quiet(args.row_wait, say)
            per_partition = 100_000 if quick else 250_000
            cons_rows, cons_info = measure_consumer(
                env, 4, per_partition, 100, [1, 2] if quick else [1, 2, 4], n, warmup,
                max_poll_records, say)
        if "latency" in sections:
            configs = [(10_000, 0, "1"), (100_000, 5, "all")] if quick else \
                [(r, lg, a) for r in (10_000, 100_000) for lg in (0, 5) for a in ("1", "all")]
            duration = 2.5 if quick else 6.0
            for rate, linger, acks in configs:
                if not quick:
                    wait_for_quiet(args.row_wait, say)
                row = measure_latency(env, rate, linger, acks, duration)
                lat_rows.append(row)
                say(f"  latency {rate:,}/s linger {linger} acks={acks}: e2e p50/p99/p99.9 "
                    f"{row.e2e[0]:.2f}/{row.e2e[1]:.2f}/{row.e2e[2]:.2f} ms; ack p50/p99 "
                    f"{row.ack[0]:.2f}/{row.ack[1]:.2f} ms [others {row.others_cpu:.0f}%]")
        memcpy1 = measure_memcpy(512 * MiB, 3 if quick else 5)
    finally:
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)
    others, stolen = cpu_report(cpu0, cpu_snapshot())
    total_time = perf_counter() - t_start

    cmd = "bench/bench_clients.py" + ("" if argv is None and len(sys.argv) < 2 else " " + " ".join(
        sys.argv[1:] if argv is None else argv))
    md = args.markdown
    out = []
    bullet = "- " if md else ""
    out.append(f"{bullet}command: `{cmd}`; best of N = {n} trials"
               f"{' after 1 warm-up' if warmup else ''}; total run time {total_time:.0f} s")
    out.append(f"{bullet}machine: {machine_info()}")
    out.append(f"{bullet}versions: {versions()}")
    out.append(f"{bullet}CPU used during the run by other processes in this VM: {others:.1f}% of all "
               f"CPUs (waited {waited:.0f} s for a quiet start: {quiet_at_start:.0f}%); stolen by the "
               f"host: {stolen:.1f}%")
    out.append(f"{bullet}memory copy (limit): numpy.copyto 512 MiB {memcpy0:.1f} GB/s at the start, "
               f"{memcpy1:.1f} GB/s at the end")
    out.append("")
    if prod_rows or cons_rows:
        out.append(targets_table(prod_rows, cons_rows, md))
    if prod_rows:
        out.append(producer_table(prod_rows, md))
    if cons_rows:
        out.append(consumer_table(cons_rows, md, max(memcpy0, memcpy1), cons_info, max_poll_records))
    if lat_rows:
        out.append(latency_table(lat_rows, md))
    print("\n".join(out))
    if args.plots:
        write_plots(args.plots, prod_rows, cons_rows, lat_rows, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
