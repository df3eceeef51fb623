"""``pylog perf end-to-end``: Kafka's EndToEndLatency, in-process or at a broker.

One record at a time: produce it (and wait for its acknowledgement: ``acks`` 1 or
all, as Kafka's tool requires), then consume until it comes back; the latency is
the time from before the send to the record in the consumer's hands. Output as
Kafka's: ``Avg latency: %.4f ms`` and ``Percentiles: 50th = %d, 99th = %d, 99.9th = %d``.
"""

from __future__ import annotations

import time

import numpy as np

from pylog.client import Consumer, Producer
from pylog.store import open as open_store

from .workload import Target, Workload, ensure_topics, payloads

__all__ = ["kafka_lines", "run_end_to_end"]


def kafka_lines(latencies_ms: np.ndarray) -> list[str]:
    p50, p99, p999 = np.percentile(latencies_ms, [50, 99, 99.9], method="lower")
    return [f"Avg latency: {float(latencies_ms.mean()):.4f} ms",
            f"Percentiles: 50th = {int(p50)}, 99th = {int(p99)}, 99.9th = {int(p999)}"]


def run_end_to_end(w: Workload, acks: str = "1", log_dirs: list[str] | None = None,
                   bootstrap: str | None = None, timeout: float = 10.0) -> np.ndarray:
    """Latencies of `w.num_records` round trips, in ms."""
    if acks not in ("1", "all", "-1"):
        raise ValueError("latency testing requires synchronous acknowledgement: "
                         "use acks 1 or all")
    if bootstrap:
        return _remote(w, acks, bootstrap, timeout)
    return _embedded(w, acks, log_dirs, timeout)


def _embedded(w: Workload, acks: str, log_dirs, timeout: float) -> np.ndarray:
    target = Target(log_dirs)
    value = payloads(w)[0]
    out = np.empty(w.num_records, dtype=np.float64)
    try:
        with open_store(target.log_dirs) as store:
            ensure_topics(store, w)
            topic = w.topic
            producer = Producer(store, acks=acks, linger_ms=0, **_kw(w.producer_config))
            with producer, Consumer(store, enable_auto_commit=False) as consumer:
                parts = [(topic, p) for p in range(store.partition_count(topic))]
                consumer.assign(parts)
                consumer.seek_to_end()
                for i in range(w.num_records):
                    t0 = time.perf_counter()
                    producer.send(topic, value, partition=0).result(timeout)
                    got = 0
                    while not got:
                        got = len(consumer.poll(timeout))
                        if not got:
                            raise TimeoutError(f"record {i} did not come back within {timeout} s")
                    out[i] = (time.perf_counter() - t0) * 1000
    finally:
        target.remove()
    return out


def _kw(config: dict) -> dict:
    return {k.replace(".", "_"): v for k, v in config.items() if k not in ("acks", "linger.ms")}


def _remote(w: Workload, acks: str, bootstrap: str, timeout: float) -> np.ndarray:
    from pylog.protocol.client import ProtocolClient
    from pylog.record import encode_batch, scan_batches
    from pylog.remote import leaders
    counts, where = leaders(bootstrap, [w.topic])
    if w.topic not in counts:
        raise ValueError(f"topic {w.topic} does not exist at {bootstrap}")
    leader = where[(w.topic, 0)]
    value = payloads(w)[0]
    out = np.empty(w.num_records, dtype=np.float64)
    with ProtocolClient(leader, client_id="pylog-perf-e2e-producer") as producer, \
            ProtocolClient(leader, client_id="pylog-perf-e2e-consumer") as consumer:
        offset = _end_offset(consumer, w.topic)
        for i in range(w.num_records):
            t0 = time.perf_counter()
            response = producer.produce(w.topic, 0, encode_batch([value]),
                                        acks=-1 if acks in ("all", "-1") else 1)
            if response is not None and response.error_code:
                raise RuntimeError(f"produce failed with error code {response.error_code}")
            deadline = time.monotonic() + timeout
            while True:
                fetched = consumer.fetch(w.topic, 0, offset, max_wait_ms=100)
                if fetched.error_code:
                    raise RuntimeError(f"fetch failed with error code {fetched.error_code}")
                scanned = scan_batches(bytes(fetched.records or b""))
                if scanned.batches and scanned.last_offset >= offset:
                    offset = scanned.last_offset + 1
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"record {i} did not come back within {timeout} s")
            out[i] = (time.perf_counter() - t0) * 1000
    return out


def _end_offset(client, topic: str) -> int:
    return client.list_offset(topic, 0, -1)
