"""Transactional produce beside non-transactional produce (issue 44's benchmark).

    .venv/bin/python bench/bench_transactions.py            # full run
    .venv/bin/python bench/bench_transactions.py --quick    # smaller counts

Rows, 100 B records, each the median of 3 runs:
- librdkafka (confluent-kafka) -> ``pylog serve`` in its own process, 1 partition,
  acks=all: idempotent (no transactions) and transactional with 100, 1,000 and 10,000
  records per transaction (begin, produce, commit_transaction), records/s over the wall
  time including every commit (100 a transaction runs a fifth of the records);
- read_committed beside read_uncommitted consume of the transactional topic (librdkafka,
  from offset 0): records/s;
- pylog's in-process Producer (acks=all): non-transactional and transactional at 100,
  1,000 and 10,000 records per transaction;
- group commit: 8 in-process transactional Producers (8 transactional ids, a partition
  each) committing 100-record transactions at once, beside 1: transactions/s.
With ``--kafka``, Apache Kafka's broker (4.1, KRaft, one node, the jars of
tools/kafka/fetch; it fsyncs nothing per request) takes the same librdkafka produce rows in
the same run, for the issue's >= 1.0x Kafka target. With ``--java``, Kafka's own Java
producer (kafka-clients 4.1, bench/java/TxnProducerPerf.java compiled once) takes the
idempotent and transactional produce rows too, against ``pylog serve`` and (with
``--kafka``) Kafka's broker: the issue's "same Java client in the same run".
``--sizes 1000`` limits the transaction sizes; ``--broker-only`` skips the consume and
in-process rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

VALUE = b"x" * 100


def _broker_produce(bootstrap: str, topic: str, records: int, per_txn: int | None) -> float:
    import confluent_kafka as ck
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = ck.Producer(conf)
    started = time.perf_counter()
    if per_txn:
        p.init_transactions(30)
        sent = 0
        while sent < records:
            p.begin_transaction()
            for _ in range(min(per_txn, records - sent)):
                while True:
                    try:
                        p.produce(topic, VALUE, partition=0)
                        break
                    except BufferError:
                        p.poll(0.01)
                sent += 1
            p.commit_transaction(60)
    else:
        for _ in range(records):
            while True:
                try:
                    p.produce(topic, VALUE, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        p.flush(60)
    return records / (time.perf_counter() - started)


def _java_produce(bootstrap: str, topics: list[str], records: int, per_txn: int | None) -> float:
    """Kafka's Java producer (TxnProducerPerf.java), one JVM for the runs (one a topic):
    the median of its rates (each from first send to last acknowledgement)."""
    import subprocess
    from kafka_reference.support import compiled, kafka_libs
    classes = compiled(HERE / "java" / "TxnProducerPerf.java")
    run = subprocess.run(["java", "-Xmx512m", "-Dlog4j.configuration=file:/dev/null",
                          "-cp", f"{classes}:{kafka_libs()}/*", "TxnProducerPerf", bootstrap,
                          str(records), str(per_txn or 0), *topics],
                         capture_output=True, text=True, timeout=900)
    rates = [float(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("RATE ")]
    if run.returncode != 0 or len(rates) != len(topics):
        raise RuntimeError(f"TxnProducerPerf failed ({run.returncode}):\n{run.stdout[-2000:]}\n"
                           f"{run.stderr[-3000:]}")
    return statistics.median(rates)


def _java_rows(bootstrap: str, where: str, make_topics, records: int, runs: int,
               sizes: list[int]) -> list:
    """The Java producer's rows against one broker: idempotent, then each transaction
    size; each ratio is over the idempotent row."""
    out = []
    base = _java_produce(bootstrap, make_topics(runs), records, None)
    out.append((f"Java producer -> {where}, idempotent (no transactions)", base, 1.0))
    for per in sizes:
        n = records // 5 if per == 100 else records
        rate = _java_produce(bootstrap, make_topics(runs), n, per)
        out.append((f"Java producer -> {where}, transactional, {per:,}/txn", rate, rate / base))
    return out


def _broker_consume(bootstrap: str, topic: str, records: int, isolation: str) -> float:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"b-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = 0
    started = time.perf_counter()
    while got < records:
        for msg in c.consume(10_000, 1.0):
            if not msg.error():
                got += 1
    elapsed = time.perf_counter() - started
    c.close()
    return got / elapsed


def _inprocess(records: int, per_txn: int | None) -> float:
    import pylog
    with tempfile.TemporaryDirectory() as d:
        store = pylog.open(d)
        store.create_topic("t", 1)
        config = {"transactional_id": "bench"} if per_txn else {}
        producer = pylog.Producer(store, linger_ms=5, **config)
        started = time.perf_counter()
        if per_txn:
            producer.init_transactions()
            sent = 0
            while sent < records:
                n = min(per_txn, records - sent)
                producer.begin_transaction()
                producer.send_batch("t", [VALUE] * n, partition=0)
                producer.commit_transaction()
                sent += n
        else:
            sent = 0
            while sent < records:
                n = min(10_000, records - sent)
                producer.send_batch("t", [VALUE] * n, partition=0)
                sent += n
            producer.flush()
        rate = records / (time.perf_counter() - started)
        producer.close()
        store.close()
        return rate


def _inprocess_concurrent(producers: int, per_txn: int, txns: int) -> float:
    """Transactions/s of `producers` transactional Producers in threads, each its own
    transactional id and partition (the coordinator's records share fsyncs)."""
    import threading
    import pylog
    with tempfile.TemporaryDirectory() as d:
        store = pylog.open(d)
        store.create_topic("t", producers)
        clients = [pylog.Producer(store, linger_ms=5, transactional_id=f"bench-{i}")
                   for i in range(producers)]
        for c in clients:
            c.init_transactions()

        def run(i: int) -> None:
            for _ in range(txns):
                clients[i].begin_transaction()
                clients[i].send_batch("t", [VALUE] * per_txn, partition=i)
                clients[i].commit_transaction()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = producers * txns / (time.perf_counter() - started)
        for c in clients:
            c.close()
        store.close()
        return rate


def _kafka_rows(records: int, runs: int, pylog_rates: dict, sizes: list[int],
                java: bool) -> list:
    """Kafka's broker taking the same librdkafka (and, `java`, Java) produce: each row's
    ratio is pylog's rate over Kafka's."""
    from kafka_reference.support import KafkaBroker, create_topics
    out = []
    with tempfile.TemporaryDirectory() as d:
        kafka = KafkaBroker(Path(d)).start()
        try:
            count = 2 * (1 + len(sizes)) * runs
            create_topics(kafka.bootstrap, {f"k-{i}": 1 for i in range(count)})
            names = iter(f"k-{i}" for i in range(count))
            for per in (None, *sizes):
                name = f"transactional, {per:,}/txn" if per else "idempotent (no transactions)"
                n = records // 5 if per == 100 else records
                rate = statistics.median(_broker_produce(kafka.bootstrap, next(names), n, per)
                                         for _ in range(runs))
                ours = pylog_rates[f"librdkafka -> pylog serve, {name}"]
                out.append((f"librdkafka -> Kafka 4.1 broker, {name} (ratio: pylog / Kafka)",
                            rate, ours / rate))
            if java:
                for row, rate, ratio in _java_rows(kafka.bootstrap, "Kafka 4.1 broker",
                                                   lambda k: [next(names) for _ in range(k)],
                                                   records, runs, sizes):
                    ours = pylog_rates[row.replace("Kafka 4.1 broker", "pylog serve")]
                    out.append((f"{row} (ratio: pylog / Kafka; Kafka's own: {ratio:.2f}x)",
                                rate, ours / rate))
        finally:
            kafka.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kafka", action="store_true",
                    help="also Apache Kafka's broker taking the same produce (needs Java)")
    ap.add_argument("--java", action="store_true",
                    help="also Kafka's Java producer's rows (needs a JDK)")
    ap.add_argument("--sizes", default="100,1000,10000",
                    help="transactions' sizes, records (comma-separated)")
    ap.add_argument("--broker-only", action="store_true",
                    help="only the produce rows over the wire (no consume, no in-process rows)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    records = 30_000 if args.quick else 100_000
    runs = 3
    from broker.process import ServeProcess
    rows = []
    with tempfile.TemporaryDirectory() as d, ServeProcess(d) as served:
        import confluent_kafka.admin as cka
        admin = cka.AdminClient({"bootstrap.servers": served.bootstrap})
        count = 2 * (1 + len(sizes)) * runs
        topics = {f"bench-{i}": cka.NewTopic(f"bench-{i}", 1, 1) for i in range(count)}
        for f in admin.create_topics(list(topics.values())).values():
            f.result(30)
        names = iter(topics)
        base = statistics.median(_broker_produce(served.bootstrap, next(names), records, None)
                                 for _ in range(runs))
        rows.append(("librdkafka -> pylog serve, idempotent (no transactions)", base, 1.0))
        last_topic = None
        for per in sizes:
            rates = []
            for _ in range(runs):
                last_topic = next(names)
                # 100 a transaction: a fifth of the records (each commit costs fsyncs)
                rates.append(_broker_produce(served.bootstrap, last_topic,
                                             records // 5 if per == 100 else records, per))
            rate = statistics.median(rates)
            rows.append((f"librdkafka -> pylog serve, transactional, {per:,}/txn", rate, rate / base))
        if args.java:
            rows += _java_rows(served.bootstrap, "pylog serve",
                               lambda k: [next(names) for _ in range(k)], records, runs, sizes)
        if last_topic and not args.broker_only:
            committed = statistics.median(_broker_consume(served.bootstrap, last_topic, records,
                                                          "read_committed") for _ in range(runs))
            uncommitted = statistics.median(_broker_consume(served.bootstrap, last_topic, records,
                                                            "read_uncommitted") for _ in range(runs))
            rows.append(("librdkafka consume, read_uncommitted", uncommitted, 1.0))
            rows.append(("librdkafka consume, read_committed", committed, committed / uncommitted))
    if args.kafka:
        pylog_rates = {name: rate for name, rate, _ in rows}
        rows += _kafka_rows(records, runs, pylog_rates, sizes, args.java)
    if args.broker_only:
        _print(rows, records, runs)
        return 0
    base = statistics.median(_inprocess(records, None) for _ in range(runs))
    rows.append(("pylog Producer in-process, acks=all, no transactions", base, 1.0))
    for per in sizes:
        rate = statistics.median(_inprocess(records // 5 if per == 100 else records, per)
                                 for _ in range(runs))
        rows.append((f"pylog Producer in-process, transactional, {per:,}/txn", rate, rate / base))
    one = statistics.median(_inprocess_concurrent(1, 100, 40) for _ in range(runs))
    eight = statistics.median(_inprocess_concurrent(8, 100, 40) for _ in range(runs))
    rows.append(("in-process, 1 transactional Producer, 100/txn: transactions/s", one, 1.0))
    rows.append(("in-process, 8 transactional Producers at once, 100/txn: transactions/s",
                 eight, eight / one))
    _print(rows, records, runs)
    return 0


def _print(rows: list, records: int, runs: int) -> None:
    print(f"| 100 B records, {records:,} per run, median of {runs} | records/s | ratio |")
    print("|---|---:|---:|")
    for name, rate, ratio in rows:
        print(f"| {name} | {rate:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
