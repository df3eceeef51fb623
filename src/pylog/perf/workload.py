"""What a perf run produces and where: payloads, keys, topics, the store or broker.

Payloads are Kafka's: with ``record_size``, random uppercase letters (Kafka's
``ProducerPerformance`` draws ``'A' + random(26)`` per byte: about 4.7 bits of
entropy a byte, so codecs compress it a little), a fixed pool cycled through; with
a payload file, its records split at ``payload_delimiter``, chosen at random.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Target", "Workload", "payloads"]

_POOL = 1024              # distinct payloads cycled through (no per-record generation cost)


@dataclass
class Workload:
    """A run's parameters (the CLI's options, Kafka's names where Kafka has them)."""

    num_records: int
    record_size: int = 100
    payload_file: str | None = None
    payload_delimiter: str = "\n"
    keys: int = 0                  # distinct keys; 0: null keys (Kafka's perf test)
    topic: str = "perf-test"
    topics: int = 1                # >1: <topic>-0 .. <topic>-(n-1), records round-robin
    partitions: int = 1
    throughput: float = -1         # records/s cap over all producers; <= 0: none
    producers: int = 1             # threads (or processes, with a broker)
    api: str = "send"              # send | send_batch
    batch_records: int = 1000      # records per send_batch call
    producer_config: dict = field(default_factory=dict)   # Kafka's producer keys
    topic_config: dict = field(default_factory=dict)      # Kafka's topic keys (embedded)
    seed: int = 42

    def topic_names(self) -> list[str]:
        if self.topics <= 1:
            return [self.topic]
        return [f"{self.topic}-{i}" for i in range(self.topics)]

    def share(self, worker: int, workers: int) -> int:
        """Records of one of `workers` producers (the first ones take the remainder)."""
        base, extra = divmod(self.num_records, workers)
        return base + (1 if worker < extra else 0)


def payloads(w: Workload) -> list[bytes]:
    """The payloads records cycle through."""
    rng = np.random.default_rng(w.seed)
    if w.payload_file:
        with open(w.payload_file, "rb") as f:
            data = f.read()
        parts = [p for p in data.split(w.payload_delimiter.encode()) if p]
        if not parts:
            raise ValueError(f"payload file {w.payload_file} holds no records "
                             f"(delimiter {w.payload_delimiter!r})")
        return [parts[i] for i in rng.integers(0, len(parts), _POOL)]
    if w.record_size < 0:
        raise ValueError(f"record size must be >= 0, not {w.record_size}")
    letters = rng.integers(65, 91, (_POOL, w.record_size), dtype=np.uint8)
    return [row.tobytes() for row in letters]


def keys(w: Workload) -> list[bytes] | None:
    if w.keys <= 0:
        return None
    return [b"key-%d" % i for i in range(w.keys)]


class Target:
    """The store a run writes to: given log dirs, or a temporary one removed after."""

    def __init__(self, log_dirs: list[str] | None) -> None:
        self.temporary = not log_dirs
        self.log_dirs = log_dirs or [tempfile.mkdtemp(prefix="pylog-perf-")]

    def remove(self) -> None:
        if self.temporary:
            for d in self.log_dirs:
                shutil.rmtree(d, ignore_errors=True)

    def __repr__(self) -> str:
        where = ",".join(self.log_dirs)
        return f"{where} (temporary)" if self.temporary else where


def ensure_topics(store, w: Workload) -> None:
    """Creates the run's topics that do not exist, with its partitions and topic config."""
    existing = set(store.list_topics())
    for name in w.topic_names():
        if name not in existing:
            store.create_topic(name, w.partitions, config=dict(w.topic_config))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system
