"""``pylog perf consume``: Kafka's consumer perf test, in-process or at a broker.

In-process, ``consumers`` threads each run a :class:`pylog.Consumer` of one group
(partitions split between them, Kafka's range assignor), reading from the earliest
offset with ``poll()`` (record objects) or ``poll_arrow()`` (Arrow batches) until
``num_records`` were consumed or nothing new came for ``timeout`` seconds. At a
broker, each consumer thread reads its partitions with Fetch requests (pylog's
protocol client) and decodes them to Arrow.

Besides the Summary, :func:`kafka_line` gives Kafka's ConsumerPerformance line
(``start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec``).
"""

from __future__ import annotations

import datetime
import threading
import time

from pylog.client import Consumer
from pylog.store import open as open_store

from .stats import MB, Stats, Summary, run_threads
from .workload import Workload, cpu_seconds

__all__ = ["KAFKA_HEADER", "kafka_line", "run_consume"]

KAFKA_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def _stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S:%f")[:-3]


def kafka_line(s: Summary) -> str:
    """Kafka's ConsumerPerformance result line for a Summary (rebalance time: the
    group join, from ``extra``)."""
    rebalance_ms = int(s.extra.get("rebalance_ms", 0))
    fetch_s = max(s.seconds - rebalance_ms / 1000, 1e-9)
    start = s.extra.get("wall_start", time.time() - s.seconds)
    mb = s.bytes / MB
    return (f"{_stamp(start)}, {_stamp(start + s.seconds)}, {mb:.4f}, {mb / s.seconds:.4f}, "
            f"{s.records}, {s.records / s.seconds:.4f}, {rebalance_ms}, {int(fetch_s * 1000)}, "
            f"{mb / fetch_s:.4f}, {s.records / fetch_s:.4f}")


def run_consume(w: Workload, log_dirs: list[str] | None = None, bootstrap: str | None = None,
                consumers: int = 1, api: str = "poll_arrow", group: str | None = None,
                timeout: float = 10.0, interval: float = 5.0, json_lines: bool = False,
                report=None, progress=None, consumer_config: dict | None = None,
                processes: bool = False) -> Summary:
    """Consumes `w.num_records` records of `w`'s topics; returns the Summary.
    `consumer_config` adds Kafka consumer keys (in-process); `processes` runs the
    consumers as processes (at a broker)."""
    if bootstrap:
        return _run_remote(w, bootstrap, consumers, timeout, interval, json_lines, report,
                           processes)
    if processes:
        raise ValueError("--processes needs --bootstrap-server: log dirs have one owner "
                         "process (use --consumers threads, or run pylog serve)")
    if not log_dirs:
        raise ValueError("perf consume reads an existing store: give --log-dirs (or "
                         "--bootstrap-server)")
    return _run_embedded(w, log_dirs, consumers, api, group, timeout, interval, json_lines,
                         report, progress, consumer_config or {})


def _value_bytes(table) -> int:
    """Bytes of the values of an Arrow batch (nulls count 0), as Kafka's tool counts."""
    import pyarrow.compute as pc
    total = pc.sum(pc.binary_length(table.column("value"))).as_py()
    return int(total or 0)


def _run_embedded(w, log_dirs, consumers, api, group, timeout, interval, json_lines, report,
                  progress, consumer_config: dict) -> Summary:
    group = group or f"perf-consumer-{int(time.time() * 1000) % 100000}"
    stats = Stats(w.num_records, interval, 1, report, json_lines)
    stats.window_word = "consumed"
    names = w.topic_names()
    errors: list[BaseException] = []
    joined: list[float] = []
    with open_store(log_dirs) as store:
        missing = [t for t in names if t not in store.list_topics()]
        if missing:
            raise ValueError(f"topic(s) {', '.join(missing)} do not exist in {','.join(log_dirs)}")
        done = threading.Event()
        wall_start = time.time()
        cpu0 = cpu_seconds()

        def one(i: int) -> None:
            try:
                config = {"group.id": group, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, **consumer_config}
                with Consumer(store, config=config) as consumer:
                    consumer.subscribe(names)
                    started = time.monotonic()
                    first = True
                    idle_since = time.monotonic()
                    while not done.is_set():
                        if api == "poll":
                            records = consumer.poll(0.1)
                            n = len(records)
                            nbytes = sum(len(r.value) for r in records if r.value is not None)
                        else:
                            table = consumer.poll_arrow(0.1)
                            n = table.num_rows if table is not None else 0
                            nbytes = _value_bytes(table) if n else 0
                        now = time.monotonic()
                        if first and consumer.assignment():
                            joined.append(now - started)
                            first = False
                        if n:
                            idle_since = now
                            stats.add(n, nbytes)
                            if stats.records >= w.num_records:
                                done.set()
                        elif now - idle_since > timeout:
                            return
            except BaseException as exc:
                errors.append(exc)
                done.set()

        stats.start = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,), name=f"perf-consumer-{i}")
                   for i in range(consumers)]
        run_threads(threads, stats, progress)
        if errors:
            raise errors[0]
    return stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3), wall_start=wall_start,
                        rebalance_ms=round(max(joined, default=0) * 1000), consumers=consumers,
                        api=api, expected=w.num_records,
                        complete=stats.records >= w.num_records)


def _ranges(bootstrap: str, names: list[str]) -> list[tuple[str, int, int, int]]:
    """(topic, partition, log start, log end) of every partition of `names` at the broker."""
    from pylog.remote import RemoteTopics
    with RemoteTopics(bootstrap, client_id="pylog-perf-consumer") as cluster:
        counts = cluster.topics()
        missing = [t for t in names if t not in counts]
        if missing:
            raise ValueError(f"topic(s) {', '.join(missing)} do not exist at {bootstrap}")
        out = []
        for t in names:
            for p in range(counts[t]):
                part = cluster.partition(t, p)
                out.append((t, p, part.log_start_offset(), part.log_end_offset()))
        return out


def _remote_worker(bootstrap: str, ranges, limit: int, i: int) -> tuple[int, int]:
    """A consumer process: reads its share of the partitions; returns (records, bytes)."""
    from pylog.remote import RemoteTopics
    records = nbytes = 0
    with RemoteTopics(bootstrap, client_id=f"pylog-perf-consumer-{i}") as cluster:
        for t, p, start, end in ranges:
            for table in cluster.partition(t, p).read_arrow(start, end):
                records += table.num_rows
                nbytes += _value_bytes(table)
                if records >= limit:
                    return records, nbytes
    return records, nbytes


def _run_remote(w, bootstrap, consumers, timeout, interval, json_lines, report,
                processes: bool = False) -> Summary:
    if processes and consumers > 1:
        import multiprocessing
        ranges = _ranges(bootstrap, w.topic_names())
        stats = Stats(w.num_records, interval, 1, report, json_lines)
        stats.window_word = "consumed"
        wall_start = time.time()
        cpu0 = cpu_seconds()
        with multiprocessing.get_context("spawn").Pool(consumers) as pool:
            stats.start = time.monotonic()
            parts = pool.starmap(_remote_worker, [(bootstrap, ranges[i::consumers],
                                                   w.num_records, i) for i in range(consumers)])
        for records, nbytes in parts:
            stats.add(records, nbytes)
        return stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3), wall_start=wall_start,
                            consumers=consumers, processes=consumers, api="fetch",
                            expected=w.num_records, complete=stats.records >= w.num_records)
    return _run_remote_threads(w, bootstrap, consumers, timeout, interval, json_lines, report)


def _run_remote_threads(w, bootstrap, consumers, timeout, interval, json_lines,
                        report) -> Summary:
    from pylog.remote import RemoteTopics
    stats = Stats(w.num_records, interval, 1, report, json_lines)
    stats.window_word = "consumed"
    wall_start = time.time()
    cpu0 = cpu_seconds()
    ranges = _ranges(bootstrap, w.topic_names())
    errors: list[BaseException] = []
    done = threading.Event()

    def one(i: int) -> None:
        try:
            with RemoteTopics(bootstrap, client_id=f"pylog-perf-consumer-{i}") as cluster:
                for t, p, start, end in ranges[i::consumers]:
                    for table in cluster.partition(t, p).read_arrow(start, end):
                        stats.add(table.num_rows, _value_bytes(table))
                        if done.is_set() or stats.records >= w.num_records:
                            done.set()
                            return
        except BaseException as exc:
            errors.append(exc)

    stats.start = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return stats.finish(cpu_seconds=round(cpu_seconds() - cpu0, 3), wall_start=wall_start,
                        consumers=consumers, api="fetch", expected=w.num_records,
                        complete=stats.records >= w.num_records)
