"""The Kafka documentation's five performance questions ("Performance Results": message
size 200 bytes, batch size 200 messages, fetch size 1 MB, flush interval 600
messages), answered for this machine with ``pylog perf`` in-process:

1. producer throughput vs batch size (messages per batch);
2. consumer throughput vs consumer threads (a backlog, page cache dropped first
   where root may: the docs measured "cold performance");
3. producer throughput vs data size;
4. producer throughput vs producer threads;
5. producer throughput vs number of topics (the docs used 40 producers; here 4 threads).

The docs' figures: about 50 MB/s produced, about 100 MB/s consumed (2011-era hardware,
one broker; the graphs themselves are not in the text). Each point is one JSON row
(``suite: seeds``) for the report.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from pylog.perf import Workload, run_consume, run_produce

__all__ = ["run_seeds", "SEED_PRODUCE_MB", "SEED_CONSUME_MB"]

SEED_PRODUCE_MB = 50
SEED_CONSUME_MB = 100
SIZE = 200
BATCH = 200
FLUSH = 600


def _produce(base: str, **kw) -> dict:
    d = tempfile.mkdtemp(dir=base)
    try:
        defaults = dict(record_size=SIZE, api="send_batch", batch_records=BATCH,
                        producer_config={"acks": "1"},
                        topic_config={"flush.messages": str(FLUSH)})
        defaults.update(kw)
        s = run_produce(Workload(**defaults), [d], report=lambda _: None)
        return {"mb_per_sec": s.mb_per_sec, "records_per_sec": s.records_per_sec,
                "p99_ms": s.p99_ms, "records": s.records, "seconds": s.seconds}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def run_seeds(emit, quick: bool = False, base: str | None = None) -> None:
    base = tempfile.mkdtemp(prefix="pylog-seeds-", dir=base)
    n = 100_000 if quick else 400_000
    try:
        def row(graph: str, x, xlabel: str, result: dict, **extra) -> None:
            emit({"suite": "seeds", "graph": graph, "x": x, "xlabel": xlabel,
                  "config": f"seeds/{graph}/{x}", **result, **extra})

        # The docs' batch size counts messages; Kafka's producer now counts bytes: send()
        # with batch.size of that many records, and a linger long enough to fill them.
        for batch in ([1, 10, 100, 200, 1000] if quick else [1, 10, 50, 100, 200, 500, 1000]):
            row("batch_size", batch, "messages per batch",
                _produce(base, num_records=min(n, 20_000 * batch), api="send",
                         producer_config={"acks": "1", "batch.size": batch * (SIZE + 21),
                                          "linger.ms": 100}))
        for mb in ([20, 80] if quick else [50, 100, 200, 400, 800]):
            row("data_size", mb, "MB produced",
                _produce(base, num_records=(mb << 20) // SIZE))
        for threads in ([1, 2] if quick else [1, 2, 4, 8]):
            row("producer_threads", threads, "producer threads",
                _produce(base, num_records=n, producers=threads, partitions=8, keys=256))
        for topics in ([1, 10] if quick else [1, 10, 20, 50]):
            row("topics", topics, "topics (4 producer threads)",
                _produce(base, num_records=n, producers=4, topics=topics))
        # Consumers read one backlog, 8 partitions.
        d = tempfile.mkdtemp(dir=base)
        w = Workload(num_records=n * 2, record_size=SIZE, api="send_batch", batch_records=BATCH,
                     partitions=8, keys=256, producer_config={"acks": "1"})
        run_produce(w, [d], report=lambda _: None)
        for threads in ([1, 2] if quick else [1, 2, 4]):
            for api in ("poll", "poll_arrow"):
                cold = _drop_caches()
                s = run_consume(w, [d], consumers=threads, api=api, group=f"seeds-{threads}-{api}",
                                timeout=5, report=lambda _: None,
                                consumer_config={"max.partition.fetch.bytes": 1 << 20,
                                                 "max.poll.records": 500 if api == "poll"
                                                 else 100_000})
                row("consumer_threads", threads, "consumer threads",
                    {"mb_per_sec": s.mb_per_sec, "records_per_sec": s.records_per_sec,
                     "records": s.records, "seconds": s.seconds}, api=api, cold=cold)
    finally:
        shutil.rmtree(base, ignore_errors=True)
