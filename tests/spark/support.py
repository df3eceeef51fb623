"""Stores with known contents for the Spark tests."""

from __future__ import annotations

import os

import pytest

import pylog


def require_pyspark() -> None:
    """Skips a Spark test module where pyspark is not installed; in CI, its import
    error fails the run instead (the CI machine must run the Spark tests)."""
    if not os.environ.get("CI"):
        pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")


def produce(path: str, topic: str, n: int, *, partitions: int = 2, compression: str = "none",
            segment_bytes: int | None = None, key_every: int = 3, start: int = 0,
            timestamp=None) -> list[dict]:
    """Creates `topic` (if needed) and sends n records; returns what was sent, with the
    partition and offset each got. Every third key is null; every record has a header
    except every fifth."""
    sent = []
    with pylog.open(path) as store:
        if topic not in store.list_topics():
            config = {"segment.bytes": segment_bytes} if segment_bytes else {}
            store.create_topic(topic, partitions=partitions, config=config)
        producer = pylog.Producer(store, compression_type=compression, linger_ms=5)
        futures = []
        for i in range(start, start + n):
            key = None if i % key_every == 0 else b"key-%d" % (i % 17)
            value = b"value-%d-" % i + b"x" * (i % 50)
            headers = [] if i % 5 == 0 else [("n", b"%d" % i), ("e", None)]
            ts = timestamp(i) if timestamp else None
            futures.append((key, value, headers, ts,
                            producer.send(topic, value=value, key=key, headers=headers,
                                          timestamp=ts)))
        producer.flush()
        for key, value, headers, _ts, f in futures:
            md = f.result()
            sent.append({"key": key, "value": value, "headers": headers, "partition": md.partition,
                         "offset": md.offset, "timestamp_ms": md.timestamp})
        producer.close()
    return sent
