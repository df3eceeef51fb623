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
from pylog.consumer import Consumer
from pylog.producer import Producer
from pylog.records import decode_arrow, encode_batch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import cpu_report, cpu_snapshot, render as _render, verdict, wait_for_quiet  # noqa: E402


def render(title, header, rows, markdown, notes=()):
    return _render(title, header, rows, markdown, notes, heading="####", text_columns=2)


perf_counter = time.perf_counter
monotonic_ns = time.monotonic_ns

KiB = 1024
MiB = 1 << 20
MB = 1e6

# As the producer's accumulator sizes records (src/pylog/_core/producer.pyx).
RECORD_OVERHEAD = 21
BATCH_OVERHEAD = 61

# Issue 5 targets.
TARGET_SEND = 1e6            # send(), one thread, 100 B values, records/s
TARGET_SEND_BATCH_RAW = 0.80  # send_batch >= 80% of raw append
TARGET_POLL_ARROW = 10e6     # records/s
KAFKA_2014_LATENCY = (2.0, 3.0, 14.0)  # ms, p50/p99/p99.9, 3 brokers (Kreps, 2014)

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


# =========================================================================== output

def fmt_rate(x):
    return f"{x / 1e6:,.2f} M"


def fmt_ratio(x):
    return f"{x:.2f}×"


def cpu_mark(pct):
    return f"{pct:.0f}%" + (" ⚠" if pct >= 10 else "")


def producer_table(rows: list[ProducerRow], markdown: bool) -> str:
    header = ["sweep", "value", "records", "send() rec/s", "send() MB/s", "send_batch rec/s", "send_batch MB/s",
              "raw append rec/s", "naive rec/s", "encode_batch alone rec/s", "send_batch ÷ raw", "send_batch ÷ naive",
              "send() ÷ raw", "memory", "other procs' CPU"]
    body = []
    for r in rows:
        body.append([f"{r.sweep} = {r.x}", f"{r.w.size} B", f"{r.w.total_records:,}",
                     fmt_rate(r.rate(r.send)), f"{r.mbs(r.send):,.0f}",
                     fmt_rate(r.rate(r.send_batch)), f"{r.mbs(r.send_batch):,.0f}",
                     fmt_rate(r.rate(r.raw)), fmt_rate(r.rate(r.naive)), fmt_rate(r.rate(r.encode)),
                     fmt_ratio(r.raw / r.send_batch), fmt_ratio(r.naive / r.send_batch),
                     fmt_ratio(r.raw / r.send), r.memory, cpu_mark(r.others_cpu)])
    notes = [
        "rec/s over all threads; MB/s counts value bytes (records × value size). Best of N trials.",
        "batch: the producer's batch.size for send(), and the records per send_batch() call, "
        "raw-append batch and naive write (records ≈ (batch − 61) ÷ (value + 21), as the "
        "producer's accumulator fills a batch).",
        "raw append: the same records pre-encoded (not timed) into those batches, one "
        "Log.append per batch. naive: struct.pack('>iq', len, offset) + value into a "
        "bytearray, one write() per batch to a plain file (the limits page's peer 2).",
        "encode_batch alone: the encoding that send_batch does on the calling thread and "
        "raw append does not (raw append's batches are encoded before the timing).",
        "The ratios divide rates (÷ raw = pylog rate ÷ raw-append rate, ÷ naive likewise).",
        "Producers: acks=1, linger.ms=5, no compression, null keys. threads > 1: one Producer "
        "per thread, one topic with one partition per thread, send(..., partition=i); "
        "topics > 1: records (send) or calls (send_batch) round-robin over single-partition topics.",
        "memory: page-cache state of the written pages (see Method). other procs' CPU: % of "
        "all CPUs used by other processes in this VM during the row; ⚠ marks ≥ 10%.",
    ]
    return render("Producer throughput", header, body, markdown, notes)


def consumer_table(rows: list[ConsumerRow], markdown: bool, memcpy_gbs: float, info: dict,
                   max_poll_records: int) -> str:
    header = ["threads", "poll() rec/s", "poll() MB/s", "poll_arrow rec/s", "poll_arrow MB/s",
              "raw read + decode_arrow rec/s", "poll_arrow ÷ raw", "poll_arrow MB/s ÷ memcpy",
              "other procs' CPU"]
    body = []
    for r in rows:
        pa_rate = r.rate(r.poll_arrow)
        body.append([r.threads, fmt_rate(r.rate(r.poll)), f"{r.rate(r.poll) * r.size / MB:,.0f}",
                     fmt_rate(pa_rate), f"{pa_rate * r.size / MB:,.0f}",
                     fmt_rate(r.rate(r.raw)), f"{r.raw / r.poll_arrow:.2f}×",
                     f"{pa_rate * r.size / 1e9 / memcpy_gbs * 100:.1f}%", cpu_mark(r.others_cpu)])
    r0 = rows[0]
    notes = [
        f"{r0.records:,} records of {r0.size} B in 4 partitions, written as 1000-record batches "
        f"({info.get('batch_bytes', 0):,} B) seconds before (page cache), read from offset 0 to the end.",
        f"One Consumer per thread, all in one group (range assignor), max.poll.records = "
        f"{max_poll_records:,}, other settings default (max.partition.fetch.bytes 1 MiB, "
        f"check.crcs true); poll(0) until it returns nothing. rec/s over all threads.",
        "raw read: per thread, its partitions read with Log.read(position, 1 MiB), "
        "FileSlice.read() and decode_arrow (CRC checked): the storage and codec without the "
        "Consumer.",
        f"memcpy: numpy.copyto 512 MiB between touched arrays, {memcpy_gbs:.1f} GB/s in this run.",
    ]
    return render("Consumer throughput", header, body, markdown, notes)


def latency_table(rows: list[LatencyRow], markdown: bool) -> str:
    header = ["rate (rec/s)", "linger.ms", "acks", "achieved rec/s", "e2e p50 ms", "e2e p99 ms",
              "e2e p99.9 ms", "e2e max ms", "ack p50 ms", "ack p99 ms", "ack p99.9 ms",
              "Kafka 2014 p50/p99/p99.9 ms", "other procs' CPU"]
    body = []
    k = "/".join(f"{x:g}" for x in KAFKA_2014_LATENCY)
    for r in rows:
        body.append([f"{r.rate:,}", r.linger_ms, r.acks, f"{r.achieved:,.0f}",
                     *(f"{x:.2f}" for x in r.e2e), *(f"{x:.2f}" for x in r.ack[:3]), k,
                     cpu_mark(r.others_cpu)])
    r0 = rows[0]
    notes = [
        f"One Producer (batch.size 16 KiB, 100 B values, one partition) sending at the fixed rate "
        f"for {r0.duration:g} s in bursts of whatever is due (sleeping in between), and one "
        f"Consumer thread calling poll(0.2), in the same process. The first 0.5 s are not counted "
        f"(e2e samples per row: rate × {r0.duration - 0.5:g} s, "
        + ", ".join(sorted({f"{r.samples:,} at {r.rate:,}/s" for r in rows})) + ").",
        "e2e = time poll() returned the record − time send() was called (monotonic clock; the "
        "send time is in the value). ack = time the record's future completed − send time "
        "(every 16th record): acks=all includes the fsync.",
        "A consumer sees a record once it is appended (page cache), not after the fsync: "
        "acks=all shows in e2e only through a busier sender.",
        "Kafka 2014: Jay Kreps, 'Benchmarking Apache Kafka: 2 Million Writes Per Second (On "
        "Three Cheap Machines)', 3 brokers, replication 3, acks=1 producer; over a network.",
    ]
    return render("End-to-end latency", header, body, markdown, notes)


def targets_table(prod_rows, cons_rows, markdown):
    header = ["target (issue 5)", "measured", "result"]
    body = []
    base = [r for r in prod_rows if r.sweep == "record size" and r.w.size == 100
            and r.memory == "recently freed"]
    if not base:
        base = [r for r in prod_rows if r.w.size == 100 and r.w.threads == 1 and r.w.topics == 1
                and r.memory == "recently freed"]
    if base:
        r = base[0]
        sb, raw, naive, send = (r.rate(r.send_batch), r.rate(r.raw), r.rate(r.naive),
                                r.rate(r.send))
        body.append([f"send_batch ≥ 80% of raw append (100 B, batch {r.w.batch_bytes // KiB} KiB)",
                     f"{fmt_rate(sb)}/s = {sb / raw * 100:.0f}% of {fmt_rate(raw)}/s",
                     verdict(sb >= TARGET_SEND_BATCH_RAW * raw)])
        body.append(["send_batch ≥ naive bytearray + write (100 B)",
                     f"{fmt_rate(sb)}/s vs {fmt_rate(naive)}/s ({sb / naive:.2f}×)",
                     verdict(sb >= naive)])
        body.append(["send() ≥ 1 M records/s, one thread, 100 B",
                     f"{fmt_rate(send)}/s", verdict(send >= TARGET_SEND)])
        allrows = [r for r in prod_rows if r.memory == "recently freed"]
        ok80 = sum(1 for r in allrows if r.send_batch <= r.raw / TARGET_SEND_BATCH_RAW)
        okn = sum(1 for r in allrows if r.send_batch <= r.naive)
        body.append(["(all producer rows) send_batch ≥ 80% raw / ≥ naive",
                     f"{ok80} / {okn} of {len(allrows)} rows", "—"])
    if cons_rows:
        r = cons_rows[0]
        pa_rate = r.rate(r.poll_arrow)
        best = max(cons_rows, key=lambda c: c.rate(c.poll_arrow))
        body.append(["poll_arrow ≥ 10 M records/s (100 B)",
                     f"1 thread {fmt_rate(pa_rate)}/s; best {fmt_rate(best.rate(best.poll_arrow))}/s "
                     f"({best.threads} threads)",
                     verdict(pa_rate >= TARGET_POLL_ARROW)])
    return render("Targets (issue 5)", header, body, markdown)


# =========================================================================== plots

def write_plots(outdir, prod_rows, cons_rows, lat_rows, say):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    written = []

    def write(fig, name):
        fig.tight_layout()
        path = os.path.join(outdir, name)
        fig.savefig(path)
        plt.close(fig)
        return path

    def _save(fig, ax, path):
        """Zero-based y axis, grid, legend, then written (the line plots)."""
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return write(fig, os.path.basename(path))

    sweeps = [("batch size", "batch size", True), ("record size", "value size", True),
              ("threads", "producer threads", False), ("topics", "topics", True)]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.2), dpi=80)
    for ax, (sweep, xlabel, logx) in zip(axes.flat, sweeps):
        rows = [r for r in prod_rows if r.sweep == sweep and r.memory == "recently freed"]
        if not rows:
            ax.set_visible(False)
            continue
        xs = [_xval(r) for r in rows]
        for attr, label, style in (("send_batch", "send_batch()", "o-"), ("raw", "raw Log.append", "s--"),
                                   ("naive", "naive bytearray+write", "^:"), ("send", "send()", "d-")):
            ax.plot(xs, [r.rate(getattr(r, attr)) / 1e6 for r in rows], style, label=label)
        if logx:
            ax.set_xscale("log", base=2 if sweep != "topics" else 10)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.x for r in rows], fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("M records/s")
        fixed = "100 B values" if sweep != "record size" else f"batch {rows[0].w.batch_bytes // KiB} KiB"
        ax.set_title(f"producer vs {sweep} ({fixed})", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    written.append(write(fig, "producer_throughput.png"))

    # MB/s vs record size (the records/s plot hides the bytes).
    rows = [r for r in prod_rows if r.sweep == "record size" and r.memory == "recently freed"]
    if rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=80)
        xs = [_xval(r) for r in rows]
        for attr, label, style in (("send_batch", "send_batch()", "o-"), ("raw", "raw Log.append", "s--"),
                                   ("naive", "naive bytearray+write", "^:"), ("send", "send()", "d-")):
            ax.plot(xs, [r.mbs(getattr(r, attr)) for r in rows], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.x for r in rows], fontsize=8)
        ax.set_xlabel("value size")
        ax.set_ylabel("MB/s of values")
        ax.set_title("producer MB/s vs record size", fontsize=10)
        written.append(_save(fig, ax, os.path.join(outdir, "producer_mbps_vs_record_size.png")))

    if cons_rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=80)
        xs = [r.threads for r in cons_rows]
        for attr, label, style in (("poll_arrow", "poll_arrow()", "o-"), ("raw", "Log.read + decode_arrow", "s--"),
                                   ("poll", "poll()", "d-")):
            ax.plot(xs, [r.rate(getattr(r, attr)) / 1e6 for r in cons_rows], style, label=label)
        ax.axhline(TARGET_POLL_ARROW / 1e6, color="grey", lw=0.8, ls="-.", label="target poll_arrow")
        ax.set_xticks(xs)
        ax.set_xlabel("consumer threads (one Consumer each, one group)")
        ax.set_ylabel("M records/s (100 B)")
        ax.set_title("consumer throughput vs threads", fontsize=10)
        written.append(_save(fig, ax, os.path.join(outdir, "consumer_throughput.png")))

    if lat_rows:
        fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=80)
        labels = [f"{r.rate // 1000}k/s\nl{r.linger_ms} a{r.acks}" for r in lat_rows]
        idx = np.arange(len(lat_rows) + 1)
        wd = 0.27
        kafka = KAFKA_2014_LATENCY
        for j, (name, color) in enumerate((("p50", "C0"), ("p99", "C1"), ("p99.9", "C3"))):
            vals = [r.e2e[j] for r in lat_rows] + [kafka[j]]
            ax.bar(idx + (j - 1) * wd, vals, wd, label=name, color=color)
        ax.set_xticks(idx)
        ax.set_xticklabels(labels + ["Kafka 2014\n3 brokers"], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("end-to-end latency, ms (log)")
        ax.set_title("end-to-end latency (l = linger.ms, a = acks)", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        written.append(write(fig, "latency.png"))
    for p in written:
        say(f"wrote {p} ({os.path.getsize(p) // 1024} KiB)")
    return written


def _xval(r: ProducerRow):
    if r.sweep == "batch size":
        return r.w.batch_bytes
    if r.sweep == "record size":
        return r.w.size
    if r.sweep == "threads":
        return r.w.threads
    return r.w.topics


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
