"""``pylog perf produce``: Kafka's producer perf test, in-process or at a broker.

In-process, each of ``producers`` threads runs a :class:`pylog.Producer` over one
store (the log dirs given, or a temporary one) and sends its share of the records
with ``send()`` (one record a call, as Kafka's tool) or ``send_batch()``. A record
is counted when its future completes (appended; fsynced first with ``acks=all``),
so the rates include the producer's batching, linger and acknowledgement, and the
final ``flush()``. Latency is send() -> completion of every ``sample_every``-th record
(and, for ``send_batch``, call -> completion, counted for each of its records).

At a broker (``--bootstrap-server``), each producer batches records per partition
(``batch.size``, ``linger.ms``, Kafka's default partitioner) and sends each batch
in a Produce request with pylog's protocol client, one request in flight per
producer; ``--processes`` runs the producers as processes.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

from pylog.client import Producer
from pylog.store import open as open_store

from .stats import Stats, Summary, run_threads
from .workload import Target, Workload, cpu_seconds, ensure_topics, keys, payloads

__all__ = ["Throttler", "run_produce"]


class Throttler:
    """Kafka's ThroughputThrottler: sleeps a sender that runs ahead of `per_sec`."""

    def __init__(self, per_sec: float, start: float | None = None) -> None:
        self.per_sec = per_sec
        self.start = time.monotonic() if start is None else start

    def wait(self, sent: int) -> None:
        if self.per_sec <= 0:
            return
        delay = self.start + sent / self.per_sec - time.monotonic()
        if delay > 0.002:               # Kafka's minimum sleep; below it, run on
            time.sleep(delay)


def _sample_every(w: Workload) -> int:
    """Every 100th record's latency (at least 1,000 samples when there are that many
    records): a callback per record would cost more than the send it measures."""
    return max(1, min(100, w.num_records // 1000))


def run_produce(w: Workload, log_dirs: list[str] | None = None, bootstrap: str | None = None,
                processes: bool = False, interval: float = 5.0, json_lines: bool = False,
                report=None, progress=None) -> Summary:
    """Runs the test; returns its Summary (``report`` gets each window line)."""
    if bootstrap:
        return _run_remote(w, bootstrap, processes, interval, json_lines, report)
    if processes:
        raise ValueError("--processes needs --bootstrap-server: log dirs have one owner "
                         "process (use --producers threads, or run pylog serve)")
    return _run_embedded(w, log_dirs, interval, json_lines, report, progress)


# ------------------------------------------------------------------ embedded

def _run_embedded(w: Workload, log_dirs, interval, json_lines, report, progress) -> Summary:
    target = Target(log_dirs)
    values = payloads(w)
    key_pool = keys(w)
    names = w.topic_names()
    every = _sample_every(w)
    try:
        with open_store(target.log_dirs) as store:
            ensure_topics(store, w)
            producers = [Producer(store, dict(w.producer_config)) for _ in range(w.producers)]
            for p in producers:
                for name in names:
                    p.partitions_for(name)           # metadata outside the timing
            stats = Stats(w.num_records, interval, every, report, json_lines)
            throttler = Throttler(w.throughput / w.producers if w.throughput > 0 else -1)
            cpu0 = cpu_seconds()
            errors: list[BaseException] = []

            def one(i: int) -> None:
                try:
                    count = w.share(i, w.producers)
                    if w.api == "send_batch":
                        _send_batches(producers[i], names, values, key_pool, count, w, stats,
                                      throttler)
                    else:
                        _send_records(producers[i], names, values, key_pool, count, stats,
                                      throttler, every)
                    producers[i].flush()
                except BaseException as exc:
                    errors.append(exc)

            stats.start = time.monotonic()
            throttler.start = stats.start
            threads = [threading.Thread(target=one, args=(i,), name=f"perf-producer-{i}")
                       for i in range(w.producers)]
            run_threads(threads, stats, progress)
            if errors:
                raise errors[0]
            summary = stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3),
                                   where=str(target), api=w.api)
            for p in producers:
                p.close()
            _check_landed(store, names, w.num_records, summary)
    finally:
        target.remove()
    return summary


def _check_landed(store, names: list[str], expected: int, summary: Summary) -> None:
    """Counts what the logs hold, and their flushes (fsync count and mean time)."""
    logs = [store.log(name, p) for name in names for p in range(store.partition_count(name))]
    stored = sum(log.log_end_offset for log in logs)
    flushes = sum(log.flushes for log in logs)
    summary.extra["records_in_log"] = stored
    summary.extra["bytes_in_log"] = sum(log.size for log in logs)
    summary.extra["flushes"] = flushes
    summary.extra["flush_ms_avg"] = (sum(log.flush_ms_total for log in logs) / flushes
                                     if flushes else 0.0)
    if stored < expected:
        raise RuntimeError(f"{expected} records sent but {stored} are in the log")


def _send_records(producer, names, values, key_pool, count, stats, throttler, every) -> None:
    """send() per record; every `every`-th record's future reports its latency and the
    records sent since the previous sample."""
    send = producer.send
    nv, nt = len(values), len(names)
    nk = len(key_pool) if key_pool else 0
    monotonic = time.monotonic
    pending = 0
    pending_bytes = 0
    for i in range(count):
        value = values[i % nv]
        topic = names[i % nt] if nt > 1 else names[0]
        key = key_pool[i % nk] if nk else None
        pending += 1
        pending_bytes += len(value)
        if pending >= every:
            sent_at = monotonic()
            future = send(topic, value, key)
            future.add_done_callback(_done(stats, sent_at, pending, pending_bytes))
            pending = pending_bytes = 0
            throttler.wait(i + 1)
        else:
            send(topic, value, key)
    if pending:
        sent_at = monotonic()
        producer.flush()
        stats.add(pending, pending_bytes)


def _done(stats: Stats, sent_at: float, records: int, nbytes: int, weight: int = 1):
    def done(future) -> None:
        if future.exception() is None:
            stats.latency((time.monotonic() - sent_at) * 1000, weight)
            stats.add(records, nbytes)
    return done


def _send_batches(producer, names, values, key_pool, count, w: Workload, stats,
                  throttler) -> None:
    """send_batch() per chunk of `batch_records`; the call -> completion latency
    counts once per record of the chunk."""
    k = max(1, w.batch_records)
    nv, nt = len(values), len(names)
    sent = 0
    call = 0
    while sent < count:
        n = min(k, count - sent)
        chunk = [values[(sent + j) % nv] for j in range(n)]
        chunk_keys = [key_pool[(sent + j) % len(key_pool)] for j in range(n)] if key_pool else None
        topic = names[call % nt]
        sent_at = time.monotonic()
        future = producer.send_batch(topic, chunk, chunk_keys)
        future.add_done_callback(_done(stats, sent_at, n, sum(map(len, chunk)), n))
        sent += n
        call += 1
        throttler.wait(sent)


# -------------------------------------------------------------------- remote

def _run_remote(w: Workload, bootstrap: str, processes: bool, interval, json_lines,
                report) -> Summary:
    from pylog.remote import leaders
    counts, _ = leaders(bootstrap, w.topic_names())
    missing = [t for t in w.topic_names() if t not in counts]
    if missing:
        raise ValueError(f"topic(s) {', '.join(missing)} do not exist at {bootstrap} "
                         f"(pylog topics --bootstrap-server {bootstrap} --create ...)")
    stats = Stats(w.num_records, interval, _sample_every(w), report, json_lines)
    cpu0 = cpu_seconds()
    if processes and w.producers > 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(w.producers) as pool:
            stats.start = time.monotonic()
            parts = pool.starmap(_remote_worker, [(w, bootstrap, i) for i in range(w.producers)])
        for records, nbytes, lat in parts:
            stats.add(records, nbytes)
            for ms, weight in lat:
                stats.latency(ms, weight)
        return stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3), where=bootstrap,
                            api="produce requests", processes=w.producers)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            _remote_producer(w, bootstrap, i, stats)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(w.producers)]
    stats.start = time.monotonic()
    run_threads(threads, stats)
    if errors:
        raise errors[0]
    return stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3), where=bootstrap,
                        api="produce requests")


def _remote_worker(w: Workload, bootstrap: str, i: int):
    """A producer process: returns (records, bytes, latency samples in ms)."""
    stats = Stats(w.share(i, w.producers), interval=1e9, sample_every=_sample_every(w))
    _remote_producer(w, bootstrap, i, stats)
    return stats.records, stats.bytes, list(zip(stats._latencies, stats._weights))


class _OpenBatch:
    __slots__ = ("first_at", "keys", "sampled", "size", "values")

    def __init__(self, now: float) -> None:
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []
        self.sampled: list[float] = []
        self.first_at = now
        self.size = 0


def _remote_producer(w: Workload, bootstrap: str, i: int, stats: Stats) -> None:
    """Batches records per partition as Kafka's producer does (batch.size, linger.ms,
    murmur2 keys, sticky keyless partition) and sends each full batch."""
    from pylog.client.config import ClientConfig
    from pylog.client.partitioner import key_partition
    from pylog.record import encode_batch
    from pylog.remote import RemoteProducer, leaders

    config = ClientConfig("producer", dict(w.producer_config))
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}[str(config.acks)]
    counts, where = leaders(bootstrap, w.topic_names())
    values = payloads(w)
    key_pool = keys(w)
    names = w.topic_names()
    count = w.share(i, w.producers)
    throttler = Throttler(w.throughput / w.producers if w.throughput > 0 else -1, stats.start)
    every = stats.sample_every
    linger = config.linger_ms / 1000
    codec = config.compression_type
    # Keys come from a pool: their partitions are computed once.
    key_parts = {name: [key_partition(k, counts[name]) for k in key_pool] if key_pool else None
                 for name in names}
    sticky = {name: (i * 7919) % counts[name] for name in names}
    sticky_bytes = dict.fromkeys(names, 0)
    batches: dict[tuple[str, int], _OpenBatch] = {}

    def ship(tp, producer) -> None:
        b = batches.pop(tp)
        data = encode_batch(b.values, b.keys if key_pool else None, compression=codec)
        producer.send(tp[0], tp[1], data, len(b.values))
        now = time.monotonic()
        for t in b.sampled:
            stats.latency((now - t) * 1000)
        stats.add(len(b.values), b.size)

    monotonic = time.monotonic
    with RemoteProducer(where, client_id=f"pylog-perf-{i}", acks=acks) as producer:
        now = monotonic()
        for j in range(count):
            name = names[j % len(names)]
            value = values[j % len(values)]
            if key_pool:
                k = j % len(key_pool)
                key, part = key_pool[k], key_parts[name][k]
            else:
                key, part = None, sticky[name]
                sticky_bytes[name] += len(value)
                if sticky_bytes[name] >= config.batch_size:
                    sticky_bytes[name] = 0
                    sticky[name] = (part + 1) % counts[name]
            tp = (name, part)
            b = batches.get(tp)
            if b is None:
                now = monotonic()
                b = batches[tp] = _OpenBatch(now)
            b.values.append(value)
            b.keys.append(key)
            b.size += len(value)
            if j % every == 0:
                now = monotonic()
                b.sampled.append(now)
            if b.size >= config.batch_size:
                ship(tp, producer)
            if j % 256 == 0:            # linger.ms, checked every 256 records
                now = monotonic()
                for other in [t for t, o in batches.items() if now - o.first_at >= linger]:
                    ship(other, producer)
                throttler.wait(j + 1)
        for tp in list(batches):
            ship(tp, producer)
