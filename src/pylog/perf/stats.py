"""Kafka's perf-test statistics: periodic window lines, a final summary with
latency percentiles, and the same as JSON lines for machines.

The lines are Kafka's (``ProducerPerformance.Stats`` in Apache Kafka 4.1), so
scripts written for ``kafka-producer-perf-test`` parse pylog's output too::

    50000 records sent, 9998.0 records/sec (0.95 MB/sec), 3.1 ms avg latency, 17.0 ms max latency.
    ...
    1000000 records sent, 199680.4 records/sec (19.04 MB/sec), 2.95 ms avg latency, 41.00 ms max
    latency, 2 ms 50th, 7 ms 95th, 12 ms 99th, 31 ms 99.9th.

Latency is recorded for sampled records (every ``sample_every``-th one; Kafka keeps
every record's latency for its average and samples for the percentiles): the
averages, maxima and percentiles are over those samples. Thread-safe: producer
threads and the sender's callbacks record at once.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TextIO

import numpy as np

__all__ = ["MB", "Stats", "Summary", "run_threads"]

MB = 1024 * 1024          # Kafka's perf tests count MB as 2**20 bytes


@dataclass
class Summary:
    """The final figures of a run (``--json``: ``{"type": "summary", ...}``)."""

    records: int
    bytes: int
    seconds: float
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    latency_samples: int
    extra: dict = field(default_factory=dict)

    def kafka_line(self) -> str:
        """Kafka's final line (its percentiles are whole milliseconds)."""
        return (f"{self.records} records sent, {self.records_per_sec:.1f} records/sec "
                f"({self.mb_per_sec:.2f} MB/sec), {self.avg_latency_ms:.2f} ms avg latency, "
                f"{self.max_latency_ms:.2f} ms max latency, {int(self.p50_ms)} ms 50th, "
                f"{int(self.p95_ms)} ms 95th, {int(self.p99_ms)} ms 99th, "
                f"{int(self.p999_ms)} ms 99.9th.")

    def as_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        return {"type": "summary", **d, **extra}


class Stats:
    """Counts records and bytes, samples latencies, reports a window every
    ``interval`` seconds through ``report(line_or_dict)``."""

    def __init__(self, expected: int, interval: float = 5.0, sample_every: int = 1,
                 report: Callable[[object], None] | None = None, json_lines: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.expected = expected
        self.interval = interval
        self.sample_every = max(1, sample_every)
        self.json = json_lines
        self._report = report or _print
        self._clock = clock
        self._lock = threading.Lock()
        self.start = clock()
        self.records = 0
        self.bytes = 0
        self._latencies: list[float] = []        # ms, of sampled records (or calls)
        self._weights: list[int] = []            # records each latency stands for
        self._window_start = self.start
        self._window_records = self._window_bytes = 0
        self._window_lat_total = 0.0
        self._window_lat_count = 0
        self._window_lat_max = 0.0
        self.end: float | None = None
        self.window_word = "sent"                # "consumed": a consumer's windows

    # ------------------------------------------------------------ recording

    def add(self, records: int, nbytes: int) -> None:
        """Counts records that completed (sent and acknowledged, or consumed)."""
        with self._lock:
            self.records += records
            self.bytes += nbytes
            self._window_records += records
            self._window_bytes += nbytes
            self._maybe_report()

    def latency(self, ms: float, weight: int = 1) -> None:
        """Records the latency of a sampled record (`weight` samples of it: a batch)."""
        with self._lock:
            self._latencies.append(ms)
            self._weights.append(weight)
            self._window_lat_total += ms * weight
            self._window_lat_count += weight
            if ms > self._window_lat_max:
                self._window_lat_max = ms

    def tick(self) -> None:
        """Gives the window a chance to report while nothing completes."""
        with self._lock:
            self._maybe_report()

    def _maybe_report(self) -> None:
        now = self._clock()
        if now - self._window_start < self.interval:
            return
        elapsed = now - self._window_start
        rate = self._window_records / elapsed
        mbs = self._window_bytes / elapsed / MB
        avg = self._window_lat_total / self._window_lat_count if self._window_lat_count else 0.0
        if self.json:
            self._report({"type": "window", "time": round(now - self.start, 3),
                          "records": self._window_records, "records_per_sec": rate,
                          "mb_per_sec": mbs, "avg_latency_ms": avg,
                          "max_latency_ms": self._window_lat_max, "total_records": self.records})
        elif self.window_word == "consumed":
            self._report(f"{self._window_records} records consumed, {rate:.1f} records/sec "
                         f"({mbs:.2f} MB/sec).")
        else:
            self._report(f"{self._window_records} records sent, {rate:.1f} records/sec "
                         f"({mbs:.2f} MB/sec), {avg:.1f} ms avg latency, "
                         f"{self._window_lat_max:.1f} ms max latency.")
        self._window_start = now
        self._window_records = self._window_bytes = 0
        self._window_lat_total = 0.0
        self._window_lat_count = 0
        self._window_lat_max = 0.0

    # -------------------------------------------------------------- summary

    def finish(self, **extra) -> Summary:
        with self._lock:
            self.end = self._clock()
            seconds = max(self.end - self.start, 1e-9)
            lat = np.asarray(self._latencies, dtype=np.float64)
            weights = np.asarray(self._weights, dtype=np.float64)
        if len(lat):
            order = np.argsort(lat, kind="stable")
            lat, weights = lat[order], weights[order]
            cum = np.cumsum(weights)
            # The smallest latency at or above each quantile of the weighted samples.
            at = np.searchsorted(cum, np.array([0.5, 0.95, 0.99, 0.999]) * cum[-1], side="left")
            p50, p95, p99, p999 = lat[np.minimum(at, len(lat) - 1)]
            avg, mx = float((lat * weights).sum() / cum[-1]), float(lat[-1])
            samples = int(cum[-1])
        else:
            p50 = p95 = p99 = p999 = avg = mx = 0.0
            samples = 0
        return Summary(self.records, self.bytes, seconds, self.records / seconds,
                       self.bytes / seconds / MB, avg, mx, float(p50), float(p95), float(p99),
                       float(p999), samples, extra)

    def progress(self) -> float:
        """The fraction done, for a progress bar."""
        return min(1.0, self.records / self.expected) if self.expected else 1.0


def _print(item: object, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write((json.dumps(item) if isinstance(item, dict) else str(item)) + "\n")
    out.flush()


def run_threads(threads: list[threading.Thread], stats: Stats,
                progress: Callable[[float], None] | None = None) -> None:
    """Starts `threads` and waits for them all, ticking `stats` (and reporting
    ``stats.progress()`` to `progress`) about five times a second meanwhile."""
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
        stats.tick()
        if progress is not None:
            progress(stats.progress())
